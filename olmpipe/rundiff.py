"""Do two results folders hold the same outcome? Compare their records modulo timings.

    python scripts/compare_runs.py results-before results-after

A refactor must not change what a run computes. This compares, record by record, what two runs of
the workflow wrote (typically the embedded default before and after a change): the page index, each
scored run's generations, verdicts, scores and summary, each seed's training metrics and the
comparison. Values that measure time (wall seconds, timestamps, throughput) and the generation
settings fingerprint (it hashes the generation code, which a refactor edits) are left out; everything
else must be equal, floats included: the embedded run is deterministic on CPU.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.layout import BASELINE_DIR, COMPARISON_JSON, EVALUATE_DIR, PAGE_INDEX, in_results, train_run_dir
from olmpipe.records.files import iter_jsonl
from olmpipe.records.generations import GENERATIONS_NAME
from olmpipe.records.metrics import METRICS_JSONL
from olmpipe.records.scores import SCORES_JSON_NAME, SUMMARY_NAME
from olmpipe.records.verdicts import VERDICTS_NAME

#: Keys whose values measure time, at any depth, never compared: a metrics row's ``time`` and
#: ``step_time``, a generation's (and each attempt's) ``seconds``, a summary's throughput figures.
IGNORED_KEYS = frozenset({"time", "step_time", "seconds", "generation_seconds", "model_seconds", "pages_per_s"})
#: Files compared, as globs under the results folder; ``settings`` is ignored in generations only.
_RUNS = (f"{in_results(BASELINE_DIR)}/*", f"{in_results(EVALUATE_DIR)}/*")
JSONL_FILES = (
    in_results(PAGE_INDEX),
    *(f"{run}/{name}" for run in _RUNS for name in (GENERATIONS_NAME, VERDICTS_NAME)),
    f"{in_results(train_run_dir('*'))}/{METRICS_JSONL}",
)
JSON_FILES = (
    *(f"{run}/{name}" for run in _RUNS for name in (SCORES_JSON_NAME, SUMMARY_NAME)),
    in_results(COMPARISON_JSON),
)


@dataclass(frozen=True)
class Difference:
    """One value that differs: the file (relative to the results folder), where in it, and both values."""

    file: str
    where: str
    before: Any
    after: Any

    def __str__(self) -> str:
        return f"{self.file}: {self.where}: {self.before!r} != {self.after!r}"


def _strip(value: Any, ignored: frozenset[str]) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v, ignored) for k, v in value.items() if k not in ignored}
    if isinstance(value, list):
        return [_strip(v, ignored) for v in value]
    return value


def _diff(a: Any, b: Any, where: str) -> Iterator[tuple[str, Any, Any]]:
    if isinstance(a, dict) and isinstance(b, dict):
        for key in sorted(set(a) | set(b), key=str):
            yield from _diff(a.get(key, "<missing>"), b.get(key, "<missing>"), f"{where}.{key}" if where else key)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b, strict=True)):
            yield from _diff(x, y, f"{where}[{i}]")
    elif a != b:
        yield where, a, b


def _read(path: Path, jsonl: bool) -> Any:
    if jsonl:
        return [record for _, record in iter_jsonl(path)]
    return json.loads(path.read_text(encoding="utf-8"))


def compare_results(before: str | Path, after: str | Path, *, limit: int = 50) -> tuple[list[str], list[Difference]]:
    """(files compared, differences) between two results folders; at most ``limit`` differences per file.

    A file present in one folder only is a difference; a pattern that matches in neither is skipped.
    """
    before, after = Path(before), Path(after)
    compared: list[str] = []
    found: list[Difference] = []
    for patterns, jsonl in ((JSONL_FILES, True), (JSON_FILES, False)):
        for pattern in patterns:
            names = sorted({p.relative_to(root).as_posix() for root in (before, after) for p in root.glob(pattern)})
            for name in names:
                a, b = before / name, after / name
                if not (a.is_file() and b.is_file()):
                    found.append(Difference(name, "file", a.is_file(), b.is_file()))
                    continue
                ignored = IGNORED_KEYS | ({"settings"} if name.endswith(GENERATIONS_NAME) else set())
                x, y = _strip(_read(a, jsonl), ignored), _strip(_read(b, jsonl), ignored)
                if jsonl and len(x) != len(y):
                    found.append(Difference(name, "line count", len(x), len(y)))
                else:
                    found += [Difference(name, w, p, q) for w, p, q in _diff(x, y, "")][:limit]
                compared.append(name)
    return compared, found
