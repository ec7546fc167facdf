"""Difficulty: the per-page statistics of the ``difficulty`` stage and what its filter dropped.

The stage (:mod:`olmpipe.difficulty`) samples ``k`` completions per training page with the model
being trained and scores them with the trainer's rewards. It writes, under ``results/difficulty/``:

- ``stats.jsonl``: one :class:`PageDifficulty` per sampled page (the k total rewards, their mean and
  spread, the pass rate of each test, all-pass / all-fail);
- ``summary.json``: what the sampling run did (:func:`write_summary`), with the pages it sampled
  (:data:`SAMPLED_PAGES_KEY`), which the filter holds ``stats.jsonl`` to.

The filter (``train.difficulty.enabled``) reads the statistics and writes the training page index
without the pages GRPO cannot learn from, ``dropped.jsonl`` (one :class:`DroppedPage` per page left
out, with its reason) and ``filter.json`` (counts per reason, JSONL file and test type). The report
and notebooks read them back.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from olmpipe.records.files import iter_jsonl, write_json, write_jsonl

#: File names under the stage's folder (``results/difficulty/``, :mod:`olmpipe.layout`).
STATS_NAME = "stats.jsonl"
SUMMARY_NAME = "summary.json"
FILTERED_INDEX_NAME = "train_pages.jsonl"
DROPPED_NAME = "dropped.jsonl"
FILTER_NAME = "filter.json"

#: Reasons a page is dropped (``DroppedPage.reason``), in the order the filter checks them.
REASON_ZERO_SPREAD = "zero_spread"
REASON_LOW_SPREAD = "low_spread"
REASON_PASS_RATE_LOW = "pass_rate_below_min"
REASON_PASS_RATE_HIGH = "pass_rate_above_max"
#: A train page the sampling run did not sample: no tests after the reward filters (the trainer skips it too).
REASON_NOT_SAMPLED = "not_sampled"
REASONS = (REASON_ZERO_SPREAD, REASON_LOW_SPREAD, REASON_PASS_RATE_LOW, REASON_PASS_RATE_HIGH, REASON_NOT_SAMPLED)
#: The key of ``summary.json`` listing the pages the sampling run sampled and scored ({"pdf", "page"} each).
SAMPLED_PAGES_KEY = "sampled_pages"


@dataclass
class PageDifficulty:
    """One line of ``stats.jsonl``: how the model's ``k`` completions of one training page scored.

    ``rewards`` holds each completion's total reward as the trainer computes it (the weighted sum
    of the reward functions that returned a number; None when none did, or when the generation
    failed in the backend); ``mean`` and ``spread`` (the standard deviation with Bessel's
    correction, TRL's ``nanstd``) are over the numbers. ``zero_spread`` is TRL's test of a group
    without signal (``isclose(std, 0)``). ``by_reward`` holds each reward function's mean.
    ``tests`` maps each of the page's test ids to the share of completions that passed it and
    ``pass_rate`` is the mean share of the page's tests passed (both None without a bench reward);
    ``all_pass`` / ``all_fail``: every scored completion passed every test / none.
    """

    pdf: str
    page: int
    samples: int
    scored: int
    rewards: list[float | None]
    mean: float | None
    spread: float | None
    zero_spread: bool
    by_reward: dict[str, float | None]
    pass_rate: float | None
    tests: dict[str, float]
    all_pass: bool
    all_fail: bool
    jsonl_files: list[str] = field(default_factory=list)
    types: list[str] = field(default_factory=list)
    no_eos: int = 0
    errors: int = 0

    @property
    def key(self) -> tuple[str, int]:
        return (self.pdf, self.page)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> PageDifficulty:
        """Rebuild a record from a ``stats.jsonl`` line; ``ValueError`` names missing fields."""
        names = [f.name for f in fields(cls)]
        required = names[: names.index("all_fail") + 1]
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"missing field(s) {', '.join(missing)}")
        return cls(**{k: data[k] for k in names if k in data})


@dataclass(frozen=True)
class DroppedPage:
    """One line of ``dropped.jsonl``: a training page the filter left out, and why."""

    pdf: str
    page: int
    reason: str
    spread: float | None
    mean: float | None
    pass_rate: float | None
    all_pass: bool
    all_fail: bool
    jsonl_files: list[str]
    types: list[str]

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def write_stats(path: str | Path, pages: Iterable[PageDifficulty]) -> None:
    """Write ``stats.jsonl`` atomically, one page per line in the given order."""
    write_jsonl(path, (page.to_json() for page in pages))


def read_stats(path: str | Path, *, error: type[Exception] = ValueError) -> list[PageDifficulty]:
    """The pages of a ``stats.jsonl``; raises ``error`` as ``<file>:<line>: <reason>``."""
    out: list[PageDifficulty] = []
    seen: set[tuple[str, int]] = set()
    for lineno, row in iter_jsonl(path, error=error, what="difficulty statistics", hint="; run the difficulty stage"):
        try:
            page = PageDifficulty.from_json(row)
        except (TypeError, ValueError) as exc:
            raise error(f"{path}:{lineno}: {exc}") from None
        if page.key in seen:
            raise error(f"{path}:{lineno}: duplicate entry for {page.pdf} page {page.page}")
        seen.add(page.key)
        out.append(page)
    return out


def write_dropped(path: str | Path, pages: Iterable[DroppedPage]) -> None:
    """Write ``dropped.jsonl`` atomically (empty file when nothing was dropped)."""
    write_jsonl(path, (page.to_json() for page in pages))


def read_dropped(path: str | Path, *, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """The lines of a ``dropped.jsonl`` as dicts (``pdf``, ``page``, ``reason``, ...)."""
    rows = []
    for lineno, row in iter_jsonl(path, error=error, what="dropped pages"):
        missing = [k for k in ("pdf", "page", "reason") if k not in row]
        if missing:
            raise error(f"{path}:{lineno}: dropped page lacks key(s) {', '.join(missing)}")
        rows.append(row)
    return rows


def write_summary(path: str | Path, summary: Mapping[str, Any]) -> None:
    """Write ``summary.json`` (sampling run) or ``filter.json`` (filter) atomically."""
    write_json(path, dict(summary))


def read_summary(path: str | Path, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """Read ``summary.json`` or ``filter.json``; raises ``error`` naming the file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise error(f"{path}: cannot read ({exc.strerror or exc})") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}: not valid JSON ({exc.msg})") from None
    if not isinstance(data, dict):
        raise error(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data
