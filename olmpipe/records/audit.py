"""The trivial-answer audit: what near-empty answers earn on each page, ``audit.jsonl`` and ``audit.json``.

Written by the validate stage's audit (rule ``validate_audit``, :mod:`olmpipe.validate.audit`) into
``results/validate/``; read back with :func:`read_audit` / :func:`read_summary` (notebooks, tests);
the summary is what ``olmpipe validate`` and the rule's log print:

- ``audit.jsonl``: one :class:`AuditRecord` per page, trivial answer and guard setting (the
  short-answer guard off, olmOCR-Bench's reward, and on): the weighted total reward the configured
  rewards give it (TRL's sum), each reward's value, the reward a full answer can earn on the page
  (``ceiling``), the share and the tests it passes;
- ``audit.json``: the summary (:func:`write_summary`): per answer and per guard setting the mean
  reward and share, the best trivial answer of every page, the tests a trivial answer passes per
  test type and JSONL file, and the pages where one earns at least ``validate.audit.warn_share``
  of a full answer's reward.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any

from olmpipe.records.difficulty import read_summary as _read_json_object
from olmpipe.records.files import iter_jsonl, write_json, write_jsonl

#: File names in the validate stage's folder (``results/validate/``, :mod:`olmpipe.layout`).
AUDIT_NAME = "audit.jsonl"
AUDIT_SUMMARY_NAME = "audit.json"


@dataclass(frozen=True)
class AuditRecord:
    """One trivial answer on one page, with the short-answer guard (``guard``) or without.

    ``total`` is the weighted sum of the rewards that scored it (None when none did), ``rewards``
    each reward's value by its logged name, ``ceiling`` the most a full answer earns on the page
    with the same rewards and weights, ``share`` = total / ceiling (None when the ceiling is 0).
    ``passed`` lists the ids of the page's tests the answer passes (None without a unit-test reward)
    of ``tests`` tests; ``types`` and ``jsonl_files`` map each test id to its type and file.
    """

    pdf: str
    page: int
    split: str
    answer: str
    guard: bool
    total: float | None
    ceiling: float
    share: float | None
    rewards: dict[str, float | None]
    passed: list[str] | None
    tests: int
    types: dict[str, str]
    jsonl_files: dict[str, str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, row: Mapping[str, Any]) -> AuditRecord:
        names = {f.name for f in fields(cls)}
        missing = sorted(names - set(row))
        if missing:
            raise ValueError(f"audit line lacks key(s) {', '.join(missing)}")
        return cls(**{k: row[k] for k in names})


def write_audit(path: str | Path, records: Iterable[AuditRecord]) -> None:
    """Write ``audit.jsonl`` atomically, one record per line in the given order."""
    write_jsonl(path, (record.to_json() for record in records))


def read_audit(path: str | Path, *, error: type[Exception] = ValueError) -> list[AuditRecord]:
    """The records of an ``audit.jsonl``; raises ``error`` as ``<file>:<line>: <reason>``."""
    out = []
    for lineno, row in iter_jsonl(path, error=error, what="trivial-answer audit",
                                  hint="; run the validate_audit rule (or olmpipe validate)"):
        try:
            out.append(AuditRecord.from_json(row))
        except (TypeError, ValueError) as exc:
            raise error(f"{path}:{lineno}: {exc}") from None
    return out


def write_summary(path: str | Path, summary: Mapping[str, Any]) -> None:
    """Write ``audit.json`` atomically."""
    write_json(path, dict(summary))


def read_summary(path: str | Path, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """Read ``audit.json``; raises ``error`` naming the file."""
    return _read_json_object(path, error=error)
