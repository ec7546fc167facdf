"""Training completions: ``completions/step<N>.jsonl`` of a run folder.

Every ``train.completions_every`` steps the trainer writes the latest generation batch, one line per
completion: ``step``, ``page`` (``<pdf>#<page>``), ``completion`` (its text), ``rewards`` (one value
per reward function), ``advantage`` and ``verdicts`` (each test's verdict and reason). Notebooks
read them back (:func:`olmpipe.results.read_completions`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from olmpipe.records.files import iter_jsonl, write_jsonl

COMPLETIONS_DIR = "completions"


def completions_path(run_dir: str | Path, step: int) -> Path:
    """The completions file of ``step`` in a training run folder."""
    return Path(run_dir) / COMPLETIONS_DIR / f"step{step:06d}.jsonl"


def write_completions(run_dir: str | Path, step: int, rows: Iterable[Mapping[str, Any]]) -> Path:
    """Write the completions of one step atomically; returns the file."""
    path = completions_path(run_dir, step)
    write_jsonl(path, rows)
    return path


def read_completions(run_dir: str | Path, *, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """Every completion row of a training run folder, in step order (empty before the first table)."""
    files = sorted((Path(run_dir) / COMPLETIONS_DIR).glob("step*.jsonl"))
    return [row for path in files for _, row in iter_jsonl(path, error=error)]
