"""The unit-test rewards: the share of a page's olmOCR-Bench tests a completion passes.

``bench_reward`` is the micro average (passed tests / tests of the page), olmOCR 2's main reward;
``bench_macro_reward`` averages the per-test-type pass rates, so that a page's five ``present``
tests weigh as much as its one ``table`` test. Both are instances of :class:`BenchReward`, a
picklable callable that keeps a persistent pool of scoring processes
(:class:`olmpipe.bench.BenchScorer`): tests run in worker processes with a time bound per
completion, so a pathological completion (1 MB of text, a 10,000-fold repetition) cannot stall a
GRPO step. A test that times out or errors counts as failed (it lowers the reward to 0 for that
test) and is counted in the ``bench/timeouts`` and ``bench/errors`` metrics; each completion that
could not be scored (a test error, the worker's memory limit, tests not found, no text) is also
reported through the ``log_error(index, reason)`` keyword when the caller passes one (olmpipe's
trainer does: :mod:`olmpipe.job.health` stops a run whose every completion fails).

Dataset columns read (TRL passes every dataset column as a keyword argument):

- ``test_ids``: the ids of the page's tests (one list per row);
- ``test_files``: the JSONL file of each id (a list parallel to ``test_ids``), or olmOCR's
  ``jsonl_file`` (one file per row) for datasets built by olmOCR's own GRPO script;
- ``pdf`` and ``page`` (optional): written next to each completion's verdicts in the log.

Use from your own TRL script (no Snakemake needed)::

    from olmpipe.rewards import BenchReward
    trainer = GRPOTrainer(..., reward_funcs=[BenchReward(average="micro", processes=4, timeout_s=10)])

The short-answer guard (``short_answer_guard``, on by default; ``rewards.bench.short_answer_guard``):
a test that olmOCR-Bench passes only through a fuzzy match inside an answer too short to hold the
test's text (``" "``, ``"e"`` or ``"The"`` pass a present test of any sentence containing them,
olmocr #461) counts as failed, so that a policy cannot earn more by writing less. Rule, citations
and where olmpipe differs from olmocr PR #462: :mod:`olmpipe.bench.shortguard`. The metrics
``bench/short_passes`` and ``bench/short_high_reward`` show such answers while a run trains, guard
or not (:mod:`olmpipe.rewards.bench_metrics`); the latter reads the ``reference`` column when the
dataset has one.

Rows with no tests left (no ids, or every test removed by the ``types`` / ``jsonl_regex``
filters) score None: TRL then leaves the row out of this reward (``nansum``). So do rows whose
tests cannot be found (ids without a ``test_files`` column, an unknown id, a missing or malformed
test file, ``test_ids`` given as a string instead of a list): the reward never raises into the
trainer; each such row is counted in ``bench/errors`` and the first problem of a call is logged as
a warning (None rather than 0: a dataset problem is not the completion's fault).

:class:`BenchReward` is the TRL-facing callable; the pieces it composes live beside it: finding a
row's tests (:mod:`olmpipe.rewards.bench_lookup`), the shared scoring pool that scores a batch
once for micro and macro (:mod:`olmpipe.rewards.bench_scoring`), and the logged metrics and
verdicts (:mod:`olmpipe.rewards.bench_metrics`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any, Self

from olmpipe.bench.shortguard import expected_chars
from olmpipe.records.text import completion_text
from olmpipe.rewards.bench_lookup import TestLookup, TestLookupError
from olmpipe.rewards.bench_metrics import BenchStats, error_json, verdicts_json
from olmpipe.rewards.bench_scoring import ScoringPool
from olmpipe.rewards.text import SCORE_TEXT_CHOICES, column, scored_text

logger = logging.getLogger(__name__)

AVERAGES = ("micro", "macro")


class BenchReward:
    """Reward = share of the page's unit tests passed (``average="micro"``) or the mean of the
    per-test-type pass rates (``average="macro"``).

    Parameters (all from the ``rewards`` config section in the workflow):

    - ``types``: only tests of these types count (empty: all types);
    - ``jsonl_regex``: only tests from JSONL files whose name matches (``re.search``, case-insensitive);
    - ``score_text``: ``"full"`` scores the whole answer, ``"page_text"`` the text below the front
      matter (see :mod:`olmpipe.rewards.text`);
    - ``processes`` / ``timeout_s``: the scoring pool's size and the time bound per completion
      (``processes=0`` scores in the calling process, where the bound is only cooperative);
    - ``memory_mb``: each scoring process's memory (address-space) limit; a completion crossing it
      fails its remaining tests with reason ``"memory"`` (counted in ``bench/errors``);
    - ``log_details``: also log each completion's verdicts (``bench_verdicts`` column of the
      completions table) and its page; set it on one bench reward only;
    - ``share_scoring_with``: another bench reward whose pool this one uses; when both score the
      same batch (micro and macro selected together) the verdicts are computed once. Closing the
      pool is then left to that reward.
    - ``short_answer_guard``: a pass through a fuzzy match inside an answer too short to hold the
      test's text counts as failed (:mod:`olmpipe.bench.shortguard`); False gives olmOCR-Bench's
      (and olmOCR 2's) reward exactly;
    - ``short_length_share`` / ``short_min_reward``: the ``bench/short_high_reward`` metric counts
      completions whose page text is shorter than this share of the page's (its reference answer's
      page text, else the texts its tests look for) and whose reward is at least ``short_min_reward``.

    The worker pool starts on the first call and is not pickled (a copy starts its own).
    """

    def __init__(
        self,
        *,
        average: str = "micro",
        types: Iterable[str] = (),
        jsonl_regex: str | None = None,
        score_text: str = "full",
        processes: int = 2,
        timeout_s: float = 10.0,
        memory_mb: float = 2048,
        log_details: bool = True,
        share_scoring_with: BenchReward | None = None,
        short_answer_guard: bool = True,
        short_length_share: float = 0.25,
        short_min_reward: float = 0.5,
    ):
        if average not in AVERAGES:
            raise ValueError(f"average must be one of {', '.join(AVERAGES)}, got {average!r}")
        if score_text not in SCORE_TEXT_CHOICES:
            raise ValueError(f"score_text must be one of {', '.join(SCORE_TEXT_CHOICES)}, got {score_text!r}")
        if timeout_s <= 0 or processes < 0 or memory_mb < 0:
            raise ValueError(f"need timeout_s > 0, processes >= 0 and memory_mb >= 0, "
                             f"got {timeout_s}, {processes} and {memory_mb}")
        if not 0 <= short_length_share <= 1 or not 0 <= short_min_reward <= 1:
            raise ValueError(f"need short_length_share and short_min_reward in [0, 1], "
                             f"got {short_length_share} and {short_min_reward}")
        self.average = average
        self.score_text = score_text
        self.short_answer_guard = bool(short_answer_guard)
        self.short_length_share = float(short_length_share)
        self.short_min_reward = float(short_min_reward)
        self.processes = int(processes)
        self.timeout_s = float(timeout_s)
        self.memory_mb = float(memory_mb)
        self.log_details = log_details
        self.__name__ = "bench_reward" if average == "micro" else "bench_macro_reward"
        self._lookup = TestLookup(types=types, jsonl_regex=jsonl_regex)
        self._owns_pool = share_scoring_with is None
        self._pool = (ScoringPool(processes=self.processes, timeout_s=self.timeout_s, memory_mb=self.memory_mb)
                      if share_scoring_with is None else share_scoring_with._pool)

    @property
    def types(self) -> frozenset[str]:
        """The test types that count (empty: all)."""
        return self._lookup.types

    @property
    def jsonl_regex(self) -> str | None:
        """The pattern a test file's name must match for its tests to count (None: every file)."""
        return self._lookup.jsonl_regex

    def __repr__(self) -> str:
        return (f"BenchReward(average={self.average!r}, types={sorted(self.types)}, "
                f"jsonl_regex={self.jsonl_regex!r}, score_text={self.score_text!r}, "
                f"processes={self.processes}, timeout_s={self.timeout_s}, memory_mb={self.memory_mb}, "
                f"short_answer_guard={self.short_answer_guard})")

    # -- resources -----------------------------------------------------------------------------
    def scorer(self) -> Any:
        """The persistent scoring pool, started on first use (the sharing reward's, if any)."""
        return self._pool.scorer()

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call); a reward using another's
        pool leaves it running."""
        if self._owns_pool:
            self._pool.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def tests_for(self, test_ids: Sequence[str] | None, files: Sequence[str] | str | None) -> list[Any]:
        """The (filtered) test objects of one dataset row; raises :class:`TestLookupError` when
        they cannot be found (see :meth:`olmpipe.rewards.bench_lookup.TestLookup.tests_for`)."""
        return self._lookup.tests_for(test_ids, files)

    # -- the reward ----------------------------------------------------------------------------
    def __call__(
        self,
        prompts=None,
        completions=None,
        completion_ids=None,
        test_ids=None,
        test_files=None,
        jsonl_file=None,
        log_metric=None,
        log_extra=None,
        log_error=None,
        **kwargs: Any,
    ) -> list[float | None]:
        completions = list(completions or [])
        n = len(completions)
        ids_col = column({"x": test_ids}, "x", n)
        files_col = column({"x": test_files if test_files is not None else jsonl_file}, "x", n)
        rewards: list[float | None] = [None] * n
        details: list[str | None] = [None] * n
        stats = BenchStats(guard=self.short_answer_guard)
        failed: dict[int, str] = {}
        jobs, rows = self._jobs(completions, ids_col, files_col, rewards, details, stats, failed)
        results = self._pool.score(jobs) if jobs else []
        expected = _ExpectedLength(column(kwargs, "reference", n))
        for i, (_, tests), result in zip(rows, jobs, results, strict=True):
            rewards[i] = float(result.reward(self.average, guard=self.short_answer_guard))
            stats.add(tests, result)
            if rewards[i] >= self.short_min_reward and expected.is_short(
                    i, completion_text(completions[i]) or "", tests, self.short_length_share):
                stats.short_high_reward += 1
            if result.errors:
                failed[i] = self._error_reason(result.errors[0])
            if self.log_details:
                details[i] = verdicts_json(tests, result, guard=self.short_answer_guard)
        if log_error is not None:
            for i, reason in sorted(failed.items()):
                log_error(i, reason)
        if stats.lookup_errors > 1:
            logger.warning("bench reward: %d of %d rows score None because their tests cannot be found",
                           stats.lookup_errors, n)
        if log_metric is not None:
            for name, value in stats.metrics().items():
                log_metric(name, value)
        if log_extra is not None and self.log_details:
            log_extra("bench_verdicts", details)
            pdfs, pages = column(kwargs, "pdf", n), column(kwargs, "page", n)
            log_extra("page_id", [f"{p}#{g}" if p is not None else None for p, g in zip(pdfs, pages, strict=True)])
        return rewards

    def _error_reason(self, error: str) -> str:
        """A scoring error as reported through ``log_error`` (``"<test id>: <reason>"``), with the
        setting behind a memory error."""
        from olmpipe.bench.worker import MEMORY_REASON

        if error.endswith(f": {MEMORY_REASON}"):
            return (f"{error} (the scoring worker crossed its memory limit, rewards.bench.memory_mb = "
                    f"{self.memory_mb:g} MB)")
        return error

    def _jobs(self, completions: list[Any], ids_col: list[Any], files_col: list[Any],
              rewards: list[float | None], details: list[str | None],
              stats: BenchStats, failed: dict[int, str]) -> tuple[list[tuple[str, list[Any]]], list[int]]:
        """The ``(text, tests)`` scoring job of each row that has tests and text, and its row index.

        Rows whose tests cannot be found keep reward None and rows without text get 0 (both
        counted in ``stats``, their reason in ``details`` and ``failed``); rows without tests keep None.
        """
        jobs: list[tuple[str, list[Any]]] = []
        rows: list[int] = []
        for i, (completion, ids, files) in enumerate(zip(completions, ids_col, files_col, strict=True)):
            try:
                tests = self._lookup.tests_for(ids, files)
            except TestLookupError as exc:  # a dataset problem: no reward for the row, counted
                if not stats.lookup_errors:
                    logger.warning("bench reward: row %d scores None: %s", i, exc)
                stats.lookup_errors += 1
                failed[i] = str(exc)
                if self.log_details:
                    details[i] = error_json(str(exc))
                continue
            if not tests:
                continue
            text = completion_text(completion)
            if text is None:  # nothing to score: every test fails, counted as an error
                stats.no_text += 1
                rewards[i] = 0.0
                failed[i] = f"completion is {type(completion).__name__}, not text"
                details[i] = error_json(failed[i])
                continue
            jobs.append((scored_text(text, self.score_text), tests))
            rows.append(i)
        return jobs, rows


class _ExpectedLength:
    """How long a row's page text should be, for ``bench/short_high_reward``: the page text of its
    reference answer (the ``reference`` column) when it has one, else the texts its tests look for
    (:func:`olmpipe.bench.shortguard.expected_chars`); each computed once per call (a GRPO group
    shares them)."""

    def __init__(self, references: list[Any]) -> None:
        self.references = references
        self._cache: dict[Any, int] = {}

    def chars(self, i: int, tests: Sequence[Any]) -> int:
        ref = self.references[i]
        key = ref if isinstance(ref, str) and ref else tuple(t.id for t in tests)
        if key not in self._cache:
            self._cache[key] = len(scored_text(ref, "page_text")) if isinstance(key, str) else expected_chars(tests)
        return self._cache[key]

    def is_short(self, i: int, text: str, tests: Sequence[Any], share: float) -> bool:
        """Whether ``text``'s page text is below ``share`` of row ``i``'s expected length (never on a
        page whose expected length is 0)."""
        expected = self.chars(i, tests)
        return expected > 0 and len(scored_text(text, "page_text")) < share * expected


def bench_reward(prompts=None, completions=None, **kwargs: Any) -> list[float | None]:
    """Micro-averaged unit-test reward with default settings, for quick use from a TRL script.

    Starts and stops a scoring pool on every call; training should use one :class:`BenchReward`
    instance instead (its pool persists).
    """
    with BenchReward(average="micro") as reward:
        return reward(prompts=prompts, completions=completions, **kwargs)


def bench_macro_reward(prompts=None, completions=None, **kwargs: Any) -> list[float | None]:
    """Macro-averaged unit-test reward (mean of per-type pass rates); see :func:`bench_reward`."""
    with BenchReward(average="macro") as reward:
        return reward(prompts=prompts, completions=completions, **kwargs)
