"""What the validate stage finds: each problem of the bench's tests (file, line, test id, reason),
and the result it writes (:mod:`olmpipe.validate.outputs`): problems, the kept test lines per file,
the page index and counts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any

from olmpipe.records.pages import PageEntry

__all__ = ["Problem", "ValidationFailed", "ValidationResult", "problem_key"]


class ValidationFailed(RuntimeError):
    """Raised with ``on_invalid: error`` when any problem was found; the report is written first."""


@dataclass(frozen=True, order=True)
class Problem:
    """One problem of the report: where (file, 1-based line, test id) and why."""

    file: str
    line: int | None
    test_id: str | None
    reason: str

    def __str__(self) -> str:
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        who = f" test {self.test_id!r}:" if self.test_id else ""
        return f"{where}:{who} {self.reason}"


@dataclass
class ValidationResult:
    """Everything the stage writes: problems, the kept lines per output file, the page index, counts."""

    problems: list[Problem]
    kept: dict[str, list[str]]
    pages: list[PageEntry]
    counts: dict[str, int] = field(default_factory=dict)
    # the problems that fail the stage whatever validate.on_invalid says (also in ``problems``)
    fatal: list[Problem] = field(default_factory=list)
    # kept tests that deserve a look (texts far longer than olmOCR-Bench's: :func:`long_text_warnings`)
    warnings: list[Problem] = field(default_factory=list)

    def report(self, settings: Mapping[str, Any]) -> dict[str, Any]:
        return {
            "ok": not self.problems,
            "settings": dict(settings),
            "counts": self.counts,
            "problems": [asdict(p) for p in sorted(self.problems, key=problem_key)],
            "warnings": [asdict(p) for p in sorted(self.warnings, key=problem_key)],
        }


def problem_key(p: Problem) -> tuple:
    return (p.file, p.line if p.line is not None else -1, p.test_id or "", p.reason)
