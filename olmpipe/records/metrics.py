"""Training metrics: ``metrics.jsonl`` (and its CSV copy ``metrics.csv``) of a run folder.

A training run folder (``results/train/seed<n>/``) gets one line per logged step, appended while
the run goes on; a resumed run first drops the rows after its checkpoint (:func:`truncate_metrics`),
so the file continues without duplicates. The report's reward plot and notebooks read it back.
"""

from __future__ import annotations

import csv
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.records.files import append_jsonl, atomic_writer, iter_jsonl, write_jsonl

METRICS_JSONL = "metrics.jsonl"
METRICS_CSV = "metrics.csv"


def final_metrics_path(final_dir: str | Path) -> Path:
    """The copy of a run's ``metrics.jsonl`` written beside its final model folder: ``model.metrics.jsonl``.

    The live ``metrics.jsonl`` is not a Snakemake output (a failed job's outputs are deleted, and a
    resumed run continues the file); the copy is, written once the final model exists, so rules that
    read a run's metrics (the report's reward plot) can declare them. It stays out of the model
    folder, which holds only the model.
    """
    final_dir = Path(final_dir)
    return final_dir.with_name(final_dir.name + ".metrics.jsonl")


def read_metrics(path: str | Path, *, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """The rows of a ``metrics.jsonl`` (empty when it does not exist); ``error`` names file and line.

    The file is appended one line per step, so a trainer killed (or out of disk space) while writing
    leaves a partial last line: it is skipped with a warning (a resumed run drops that step's row
    anyway, :func:`truncate_metrics`). An unreadable line before the last is an error.
    """
    path = Path(path)
    if not path.exists():
        return []
    return [row for _, row in iter_jsonl(path, error=error, torn_last_line_ok=True)]


def write_metrics_csv(rows: Sequence[Mapping[str, Any]], path: str | Path) -> None:
    """Write ``rows`` as CSV, atomically; columns are the union of keys, ``step`` first."""
    keys: list[str] = []
    for row in rows:
        keys += [k for k in row if k not in keys]
    keys = ["step"] + sorted(k for k in keys if k != "step")
    with atomic_writer(path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=keys)
        writer.writeheader()
        writer.writerows(rows)


def append_metrics(run_dir: str | Path, row: Mapping[str, Any]) -> None:
    """Append one logged step to ``metrics.jsonl`` and rewrite ``metrics.csv`` from the whole file."""
    run_dir = Path(run_dir)
    append_jsonl(run_dir / METRICS_JSONL, [row])
    write_metrics_csv(read_metrics(run_dir / METRICS_JSONL), run_dir / METRICS_CSV)


def truncate_metrics(run_dir: str | Path, last_step: int) -> int:
    """Drop metric rows logged after ``last_step`` (they will be logged again on resume); returns rows kept."""
    run_dir = Path(run_dir)
    rows = [r for r in read_metrics(run_dir / METRICS_JSONL) if int(r.get("step", 0)) <= last_step]
    if (run_dir / METRICS_JSONL).exists():
        write_jsonl(run_dir / METRICS_JSONL, rows, ensure_ascii=True)
        write_metrics_csv(rows, run_dir / METRICS_CSV)
    return len(rows)
