"""The scoring pool behind the unit-test rewards, shared by the micro and macro rewards of a run.

:class:`ScoringPool` starts a persistent :class:`olmpipe.bench.BenchScorer` (worker processes
with a time and memory bound per completion) on first use and stops it when closed or garbage
collected. It also remembers the last batch it scored: when ``bench`` and ``bench_macro`` are
both selected, TRL calls them one after the other on the same completions, and the second call is
answered from the first one's verdicts instead of scoring every completion twice.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Sequence
from typing import Any

logger = logging.getLogger(__name__)

#: ``(text, tests)`` pairs a reward call hands the pool, one per completion that has tests.
Jobs = Sequence[tuple[str, Sequence[Any]]]


def batch_key(jobs: Jobs) -> list[tuple[str, tuple[str, ...]]]:
    """What identifies a batch for reuse: each job's text and the ids of its tests, in order."""
    return [(text, tuple(t.id for t in tests)) for text, tests in jobs]


def _close_scorer(scorer: Any) -> None:
    try:
        scorer.close()
    except Exception:
        logger.debug("closing the bench scorer failed", exc_info=True)


class ScoringPool:
    """A lazily started :class:`~olmpipe.bench.BenchScorer` plus the result of the last batch.

    ``processes=0`` scores in the calling process. The worker processes and the remembered batch
    are not pickled: a copy starts its own pool on first use.
    """

    def __init__(self, *, processes: int, timeout_s: float, memory_mb: float) -> None:
        self.processes = processes
        self.timeout_s = timeout_s
        self.memory_mb = memory_mb
        self._scorer: Any = None
        self._finalizer: Any = None
        self._last: tuple[list[tuple[str, tuple[str, ...]]], list[Any]] | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_scorer": None, "_finalizer": None, "_last": None}

    def scorer(self) -> Any:
        """The persistent :class:`~olmpipe.bench.BenchScorer`, started on first use."""
        if self._scorer is None:
            from olmpipe.bench import BenchScorer

            self._scorer = BenchScorer(processes=self.processes, timeout_s=self.timeout_s,
                                       memory_mb=self.memory_mb)
            self._finalizer = weakref.finalize(self, _close_scorer, self._scorer)
        return self._scorer

    def score(self, jobs: Jobs) -> list[Any]:
        """The :class:`~olmpipe.bench.BatchResult` of each ``(text, tests)`` job; the batch scored
        just before, if it is the same, is answered from its results instead of being scored again."""
        key = batch_key(jobs)
        if self._last is not None and self._last[0] == key:
            return self._last[1]
        results = self.scorer().score(jobs)
        self._last = (key, results)
        return results

    def close(self) -> None:
        """Stop the worker processes (they restart on the next call)."""
        if self._finalizer is not None:
            self._finalizer()
        self._scorer = self._finalizer = None
