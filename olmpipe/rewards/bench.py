"""The unit-test rewards: the share of a page's olmOCR-Bench tests a completion passes.

``bench_reward`` is the micro average (passed tests / tests of the page), olmOCR 2's main reward;
``bench_macro_reward`` averages the per-test-type pass rates, so that a page's five ``present``
tests weigh as much as its one ``table`` test. Both are instances of :class:`BenchReward`, a
picklable callable that keeps a persistent pool of scoring processes
(:class:`olmpipe.bench.BenchScorer`): tests run in worker processes with a time bound per
completion, so a pathological completion (1 MB of text, a 10,000-fold repetition) cannot stall a
GRPO step. A test that times out or errors counts as failed (it lowers the reward to 0 for that
test) and is counted in the ``bench/timeouts`` and ``bench/errors`` metrics.

Dataset columns read (TRL passes every dataset column as a keyword argument):

- ``test_ids``: the ids of the page's tests (one list per row);
- ``test_files``: the JSONL file of each id (a list parallel to ``test_ids``), or olmOCR's
  ``jsonl_file`` (one file per row) for datasets built by olmOCR's own GRPO script;
- ``pdf`` and ``page`` (optional): written next to each completion's verdicts in the log.

Use from your own TRL script (no Snakemake needed)::

    from olmpipe.rewards import BenchReward
    trainer = GRPOTrainer(..., reward_funcs=[BenchReward(average="micro", processes=4, timeout_s=10)])

Rows with no tests left (no ids, or every test removed by the ``types`` / ``jsonl_regex``
filters) score None: TRL then leaves the row out of this reward (``nansum``). So do rows whose
tests cannot be found (ids without a ``test_files`` column, an unknown id, a missing or malformed
test file, ``test_ids`` given as a string instead of a list): the reward never raises into the
trainer; each such row is counted in ``bench/errors`` and the first problem of a call is logged as
a warning (None rather than 0: a dataset problem is not the completion's fault).
"""

from __future__ import annotations

import json
import logging
import os
import re
import weakref
from collections import defaultdict
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any, Self

from olmpipe.rewards.text import SCORE_TEXT_CHOICES, column, completion_text, scored_text

logger = logging.getLogger(__name__)

AVERAGES = ("micro", "macro")
#: Longest failure reason kept in the per-completion verdict log.
MAX_REASON_CHARS = 300


class TestLookupError(ValueError):
    """A dataset row names a test file or test id that does not exist; the message says which."""

    __test__ = False


def _close_scorer(scorer: Any) -> None:
    try:
        scorer.close()
    except Exception:
        logger.debug("closing the bench scorer failed", exc_info=True)


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
      same batch (micro and macro selected together) the verdicts are computed once.

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
    ):
        if average not in AVERAGES:
            raise ValueError(f"average must be one of {', '.join(AVERAGES)}, got {average!r}")
        if score_text not in SCORE_TEXT_CHOICES:
            raise ValueError(f"score_text must be one of {', '.join(SCORE_TEXT_CHOICES)}, got {score_text!r}")
        if timeout_s <= 0 or processes < 0 or memory_mb < 0:
            raise ValueError(f"need timeout_s > 0, processes >= 0 and memory_mb >= 0, "
                             f"got {timeout_s}, {processes} and {memory_mb}")
        self.average = average
        self.types = frozenset(types)
        self.jsonl_regex = jsonl_regex
        self._jsonl_pattern = re.compile(jsonl_regex, re.IGNORECASE) if jsonl_regex else None
        self.score_text = score_text
        self.processes = int(processes)
        self.timeout_s = float(timeout_s)
        self.memory_mb = float(memory_mb)
        self.log_details = log_details
        self.__name__ = "bench_reward" if average == "micro" else "bench_macro_reward"
        self._scorer: Any = None
        self._finalizer: Any = None
        self._tests: dict[str, tuple[float, dict[str, Any]]] = {}
        self._owner = share_scoring_with._owner if share_scoring_with is not None else self
        self._last: tuple[list[tuple[str, tuple[str, ...]]], list[Any]] | None = None

    # -- pickling: the pool and the test cache stay behind -------------------------------------
    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state.update(_scorer=None, _finalizer=None, _tests={}, _jsonl_pattern=None, _last=None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._jsonl_pattern = re.compile(self.jsonl_regex, re.IGNORECASE) if self.jsonl_regex else None

    def __repr__(self) -> str:
        return (f"BenchReward(average={self.average!r}, types={sorted(self.types)}, "
                f"jsonl_regex={self.jsonl_regex!r}, score_text={self.score_text!r}, "
                f"processes={self.processes}, timeout_s={self.timeout_s}, memory_mb={self.memory_mb})")

    # -- resources -----------------------------------------------------------------------------
    def scorer(self) -> Any:
        """The persistent scoring pool, started on first use (the sharing reward's, if any)."""
        if self._owner is not self:
            return self._owner.scorer()
        if self._scorer is None:
            from olmpipe.bench import BenchScorer

            self._scorer = BenchScorer(processes=self.processes, timeout_s=self.timeout_s,
                                       memory_mb=self.memory_mb)
            self._finalizer = weakref.finalize(self, _close_scorer, self._scorer)
        return self._scorer

    def _score(self, jobs: list[tuple[str, list[Any]]]) -> list[Any]:
        """Score ``(text, tests)`` jobs; the same batch scored just before (by this reward or one
        sharing its pool) is answered from that result instead of being scored again."""
        owner = self._owner
        key = [(text, tuple(t.id for t in tests)) for text, tests in jobs]
        if owner._last is not None and owner._last[0] == key:
            return owner._last[1]
        results = self.scorer().score(jobs)
        owner._last = (key, results)
        return results

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        if self._finalizer is not None:
            self._finalizer()
        self._scorer = self._finalizer = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- tests ---------------------------------------------------------------------------------
    def _file_tests(self, path: str) -> dict[str, Any]:
        """Tests of one JSONL file by id, cached until the file changes."""
        from olmpipe.bench import TestLoadError, load_tests

        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            raise TestLookupError(f"test file {path} cannot be read: {exc.strerror or exc}") from None
        cached = self._tests.get(path)
        if cached is None or cached[0] != mtime:
            try:
                cached = (mtime, {t.id: t for t in load_tests(path)})
            except (TestLoadError, OSError, UnicodeDecodeError) as exc:
                raise TestLookupError(f"test file {path} cannot be loaded: {exc}") from None
            self._tests[path] = cached
        return cached[1]

    def _keep_file(self, path: str) -> bool:
        return self._jsonl_pattern is None or bool(self._jsonl_pattern.search(Path(path).name))

    def tests_for(self, test_ids: Sequence[str] | None, files: Sequence[str] | str | None) -> list[Any]:
        """The (filtered) test objects of one dataset row; raises :class:`TestLookupError` when
        they cannot be found."""
        if isinstance(test_ids, (str, bytes)):
            raise TestLookupError(f"test_ids {test_ids[:60]!r} is a string; each row needs a list of test ids")
        if not test_ids:
            return []
        try:
            test_ids = list(test_ids)
        except TypeError:
            raise TestLookupError(f"test_ids {test_ids!r} is not a list of test ids") from None
        if files is None:
            raise TestLookupError(
                f"tests {list(test_ids)[:3]}...: the dataset has neither a 'test_files' nor a 'jsonl_file' "
                "column saying which JSONL file holds them"
            )
        paths = [files] * len(test_ids) if isinstance(files, (str, os.PathLike)) else list(files)
        if len(paths) != len(test_ids):
            raise TestLookupError(f"test_files has {len(paths)} entries for {len(test_ids)} test ids")
        files_by_path = {p: self._file_tests(p) for p in dict.fromkeys(map(str, paths)) if self._keep_file(p)}
        tests = []
        for test_id, path in zip(test_ids, paths, strict=True):
            by_id = files_by_path.get(str(path))
            if by_id is None:
                continue
            if test_id not in by_id:
                raise TestLookupError(f"test id {test_id!r} is not in {path}")
            test = by_id[test_id]
            if not self.types or test.type in self.types:
                tests.append(test)
        return tests

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
        **kwargs: Any,
    ) -> list[float | None]:
        completions = list(completions or [])
        n = len(completions)
        ids_col = column({"x": test_ids}, "x", n)
        files_col = column({"x": test_files}, "x", n) if test_files is not None else column({"x": jsonl_file}, "x", n)
        jobs: list[tuple[str, list[Any]]] = []
        rows: list[int] = []
        rewards: list[float | None] = [None] * n
        details: list[str | None] = [None] * n
        invalid = lookup_errors = 0
        for i, (completion, ids, files) in enumerate(zip(completions, ids_col, files_col, strict=True)):
            try:
                tests = self.tests_for(ids, files)
            except TestLookupError as exc:  # a dataset problem: no reward for the row, counted
                if not lookup_errors:
                    logger.warning("bench reward: row %d scores None: %s", i, exc)
                lookup_errors += 1
                if self.log_details:
                    details[i] = json.dumps({"error": str(exc)[:MAX_REASON_CHARS]}, ensure_ascii=False)
                continue
            if not tests:
                continue
            text = completion_text(completion)
            if text is None:  # nothing to score: every test fails, counted as an error
                invalid += 1
                rewards[i] = 0.0
                details[i] = json.dumps({"error": f"completion is {type(completion).__name__}, not text"})
                continue
            jobs.append((scored_text(text, self.score_text), tests))
            rows.append(i)
        results = self._score(jobs) if jobs else []
        stats = _Stats()
        for i, (_, tests), result in zip(rows, jobs, results, strict=True):
            rewards[i] = float(result.micro if self.average == "micro" else result.macro)
            stats.add(tests, result)
            if self.log_details:
                details[i] = _verdicts_json(tests, result)
        stats.errors += invalid + lookup_errors
        if lookup_errors > 1:
            logger.warning("bench reward: %d of %d rows score None because their tests cannot be found",
                           lookup_errors, n)
        if log_metric is not None:
            for name, value in stats.metrics().items():
                log_metric(name, value)
        if log_extra is not None and self.log_details:
            log_extra("bench_verdicts", details)
            pdfs, pages = column(kwargs, "pdf", n), column(kwargs, "page", n)
            log_extra("page_id", [f"{p}#{g}" if p is not None else None for p, g in zip(pdfs, pages, strict=True)])
        return rewards


class _Stats:
    """Pass counts of one reward call by test type and by JSONL file, plus timeouts and errors."""

    def __init__(self) -> None:
        self.by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.by_jsonl: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.passed = self.total = self.completions = self.timeouts = self.errors = 0

    def add(self, tests: Sequence[Any], result: Any) -> None:
        self.completions += 1
        self.timeouts += int(bool(result.timed_out))
        self.errors += int(bool(result.errors))
        for test, verdict in zip(tests, result.verdicts, strict=True):
            ok = int(bool(verdict.passed))
            for bucket in (self.by_type[test.type], self.by_jsonl[test.source or "unknown"]):
                bucket[0] += ok
                bucket[1] += 1
            self.passed += ok
            self.total += 1

    def metrics(self) -> dict[str, float]:
        out = {
            # completions (not tests) that hit the time bound / had a test error or no text
            "bench/timeouts": float(self.timeouts),
            "bench/errors": float(self.errors),
            "bench/completions": float(self.completions),
        }
        if self.total:
            out["bench/pass_rate"] = self.passed / self.total
        for kind, table in (("type", self.by_type), ("jsonl", self.by_jsonl)):
            for key, (ok, total) in sorted(table.items()):
                out[f"bench/pass_rate/{kind}/{key}"] = ok / total
        return out


def _verdicts_json(tests: Sequence[Any], result: Any) -> str:
    return json.dumps(
        [
            {"id": t.id, "type": t.type, "passed": bool(v.passed), "reason": (v.reason or "")[:MAX_REASON_CHARS]}
            for t, v in zip(tests, result.verdicts, strict=True)
        ]
        + ([{"timed_out": True}] if result.timed_out else []),
        ensure_ascii=False,
    )


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
