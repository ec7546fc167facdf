"""Verdicts: ``verdicts.jsonl`` of a scored run folder, one line per test and repeat.

Written by the generate-and-score engine (:mod:`olmpipe.evaluate.engine`) and ``olmpipe bench score
--verdicts-out``; read by the comparison (:mod:`olmpipe.evaluate.compare`) and notebooks
(:mod:`olmpipe.results`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.records.files import iter_jsonl, write_jsonl

VERDICTS_NAME = "verdicts.jsonl"
#: The fields every verdict line has (``reason`` too, empty when the test passed).
VERDICT_KEYS = ("test_id", "type", "jsonl", "pdf", "page", "repeat", "passed")
#: The key of a pass the short-answer guard rejects (optional: older files lack it, read as False).
SHORT_ANSWER_KEY = "short_answer"
VERDICT_COLUMNS = (*VERDICT_KEYS, "reason", SHORT_ANSWER_KEY)


@dataclass(frozen=True)
class CandidateVerdict:
    """One test on one repeat of its page (``repeat`` None when the page has no file).

    ``passed`` is olmOCR-Bench's verdict; ``short_answer`` marks a pass the short-answer guard
    rejects (:mod:`olmpipe.bench.shortguard`; lines written before the key existed lack it: False).
    """

    test_id: str
    type: str
    jsonl: str
    pdf: str
    page: int
    repeat: int | None
    passed: bool
    reason: str
    short_answer: bool = False

    def to_dict(self) -> dict:
        return dict(vars(self))


def write_verdicts(path: str | Path, verdicts: Iterable[CandidateVerdict], *, candidate: str | None = None) -> None:
    """Write verdicts as JSON Lines, atomically (one record per test and repeat; ``candidate`` first when given)."""
    write_jsonl(path, (v.to_dict() if candidate is None else {"candidate": candidate, **v.to_dict()} for v in verdicts))


def read_verdicts(path: str | Path, *, error: type[Exception] = ValueError) -> list[tuple[int, dict[str, Any]]]:
    """``(line, record)`` of every verdict, each checked for :data:`VERDICT_KEYS` and a boolean ``passed``.

    Raises ``error`` as ``<file>:<line>: <reason>``.
    """
    rows = []
    for lineno, rec in iter_jsonl(path, error=error):
        missing = [k for k in VERDICT_KEYS if k not in rec]
        if missing:
            raise error(f"{path}:{lineno}: verdict lacks key(s) {', '.join(missing)}")
        if not isinstance(rec["passed"], bool):
            raise error(f"{path}:{lineno}: 'passed' must be true or false, got {rec['passed']!r}")
        rows.append((lineno, rec))
    return rows
