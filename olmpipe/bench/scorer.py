"""Batch scorer: many (text, tests) items over a persistent pool of worker processes.

This is the reward engine of GRPO: every completion of every step goes through it. Design:

- :class:`BenchScorer` keeps its worker processes (``python -m olmpipe.bench.worker``, see
  :mod:`olmpipe.bench.worker`; each with its own KaTeX renderer) alive across calls, so a training
  run pays the start-up once. Its configuration is picklable; the live pool is not shipped when
  the object is pickled.
- Work is sent in small chunks (the tests of a chunk travel once, not once per completion); every
  completion gets ``timeout_s`` seconds. The worker stops cooperatively at the deadline (pending
  tests fail with reason ``"timeout"``); a worker that does not answer by the deadline plus a
  grace period is killed and replaced, and every test of its current completion fails with
  ``"timeout"``. A crashed worker is replaced the same way (reason ``"worker crashed"``).
- Nothing a model writes can make :meth:`BenchScorer.score` raise: the text is coerced to ``str``
  (None -> ``""``), checks that raise count as failed tests.

``processes=0`` runs in the calling process (no hard time bound, only the cooperative one)::

    with BenchScorer(processes=2, timeout_s=10) as scorer:
        results = scorer.score([(text, tests) for text in completions])
        rewards = [r.micro for r in results]
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from olmpipe.bench.normalize import coerce_text
from olmpipe.bench.run import TIMEOUT_REASON, Verdict, micro_macro, run_tests
from olmpipe.bench.worker import CRASH_REASON, close_renderer, make_renderer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BatchResult:
    """Verdicts of one completion plus its micro (passed/total) and macro (mean per-type) reward."""

    verdicts: list[Verdict]
    micro: float
    macro: float
    timed_out: bool = False
    errors: list[str] = field(default_factory=list)

    @classmethod
    def from_verdicts(cls, verdicts: list[Verdict]) -> BatchResult:
        micro, macro = micro_macro(verdicts)
        timed_out = any(v.reason == TIMEOUT_REASON for v in verdicts)
        errors = [f"{v.test_id}: {v.reason}" for v in verdicts
                  if v.reason.startswith("error:") or v.reason == CRASH_REASON]
        return cls(verdicts, micro, macro, timed_out, errors)


def _failed(tests: Sequence, reason: str) -> BatchResult:
    return BatchResult.from_verdicts([Verdict(t.id, False, reason, t.type) for t in tests])


# -------------------------------------------------------------------------------------------- pool
class _Worker:
    """One worker: ``python -m olmpipe.bench.worker`` on one end of a socket pair.

    A plain subprocess rather than ``multiprocessing``: a spawned ``multiprocessing`` child
    re-imports the parent's ``__main__`` (the training entry point, or a Snakemake script that
    cannot run twice), which a worker must not do.
    """

    def __init__(self, timeout_s: float) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "olmpipe.bench.worker", str(theirs.fileno()), repr(timeout_s)],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self.conn = Connection(ours.detach())
        self.pending: deque[int] = deque()
        self.started = time.monotonic()  # when the head of ``pending`` (or the start-up) began
        self.ready = False  # set by the worker's first message, once its imports are done

    def kill(self) -> None:
        try:
            self.conn.close()
        except OSError:
            pass
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(1.0)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5.0)

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, ValueError):
            pass
        try:
            self.process.wait(3.0)
        except subprocess.TimeoutExpired:
            pass
        self.kill()


@dataclass(frozen=True)
class ScorerConfig:
    """Picklable settings of a :class:`BenchScorer`."""

    processes: int = 1
    timeout_s: float = 10.0
    grace_s: float = 2.0
    startup_s: float = 120.0  # a worker that is not up by then is replaced


class BenchScorer:
    """Persistent multi-process scorer; see the module docstring. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, processes: int = 1, timeout_s: float = 10.0, *, grace_s: float = 2.0) -> None:
        if processes < 0:
            raise ValueError(f"processes must be >= 0, got {processes}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        self.config = ScorerConfig(int(processes), float(timeout_s), float(grace_s))
        self._workers: list[_Worker] = []
        self._local: dict = {}

    # -- lifecycle ---------------------------------------------------------------------------------
    def __getstate__(self) -> dict:
        return {"config": self.config}

    def __setstate__(self, state: dict) -> None:
        self.config = state["config"]
        self._workers, self._local = [], {}

    def __enter__(self) -> BenchScorer:  # noqa: PYI034
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            log.debug("closing the bench scorer at exit failed", exc_info=True)

    def close(self) -> None:
        """Stop the workers (and their renderers); the next :meth:`score` starts new ones."""
        workers, self._workers = self._workers, []
        for w in workers:
            w.stop()
        close_renderer(self._local.pop("renderer", None))

    def _spawn(self) -> _Worker:
        return _Worker(self.config.timeout_s)

    # -- scoring -----------------------------------------------------------------------------------
    def score(self, items: Iterable[tuple[object, Sequence]]) -> list[BatchResult]:
        """One :class:`BatchResult` per ``(text, tests)`` item, in order."""
        prepared = [(coerce_text(text), list(tests)) for text, tests in items]
        if not prepared:
            return []
        if self.config.processes == 0:
            return [self._score_local(text, tests) for text, tests in prepared]
        return self._score_pool(prepared)

    def _score_local(self, text: str, tests: list) -> BatchResult:
        if self._local.get("renderer") is None and any(t.type == "math" for t in tests):
            self._local["renderer"] = make_renderer()
        deadline = time.monotonic() + self.config.timeout_s
        return BatchResult.from_verdicts(run_tests(text, tests, renderer=self._local.get("renderer"),
                                                   deadline=deadline))

    def _score_pool(self, prepared: list[tuple[str, list]]) -> list[BatchResult]:
        n = len(prepared)
        while len(self._workers) < min(self.config.processes, n):
            self._workers.append(self._spawn())
        results: list[BatchResult | None] = [None] * n
        queue = deque(range(n))
        keys: dict[int, int] = {}
        key_of = [keys.setdefault(id(tests), len(keys)) for _, tests in prepared]
        chunk_size = max(1, min(64, -(-n // (2 * len(self._workers)))))  # ~2 chunks per worker

        def send(worker: _Worker, indices: list[int]) -> None:
            tests_by_key = {key_of[i]: prepared[i][1] for i in indices}
            chunk = [(i, prepared[i][0], key_of[i]) for i in indices]
            worker.pending.extend(indices)
            worker.started = time.monotonic()
            worker.conn.send((chunk, tests_by_key))

        startup_failures = [0]
        done = [0]  # completions with a result

        def replace(worker: _Worker, reason: str) -> None:
            if not worker.ready:
                startup_failures[0] += 1
                log.warning("bench worker failed to start (%d so far)", startup_failures[0])
            head = worker.pending.popleft() if worker.pending else None
            if head is not None:
                if results[head] is None:
                    done[0] += 1
                results[head] = _failed(prepared[head][1], reason)
                log.warning("bench worker %s on completion %d; replacing it", reason, head)
            queue.extendleft(reversed(worker.pending))
            worker.pending.clear()
            worker.kill()
            self._workers[self._workers.index(worker)] = self._spawn()

        def feed(worker: _Worker) -> None:
            if not worker.pending and worker.process.poll() is not None:  # died while idle
                replace(worker, CRASH_REASON)
                return
            if worker.ready and not worker.pending and queue:
                indices = [queue.popleft() for _ in range(min(chunk_size, len(queue)))]
                try:
                    send(worker, indices)
                except (OSError, ValueError):
                    replace(worker, CRASH_REASON)

        def receive(worker: _Worker) -> None:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                replace(worker, CRASH_REASON)
                return
            if message[0] == "ready":
                worker.ready = True
            elif message[0] == "result":
                _, index, raw = message
                if results[index] is None:
                    done[0] += 1
                results[index] = BatchResult.from_verdicts([Verdict(*v) for v in raw])
                if worker.pending and worker.pending[0] == index:
                    worker.pending.popleft()
            worker.started = time.monotonic()

        while done[0] < n:
            for w in list(self._workers):
                feed(w)
            active = [w for w in self._workers if w.pending or not w.ready]
            if not active or startup_failures[0] > 3 * len(self._workers):  # workers cannot start
                for i in range(n):
                    if results[i] is None:
                        results[i] = _failed(prepared[i][1], CRASH_REASON)
                break
            limits = {id(w): (self.config.timeout_s + self.config.grace_s) if w.ready else self.config.startup_s
                      for w in active}
            wait_s = max(0.0, min(w.started + limits[id(w)] for w in active) - time.monotonic())
            ready = wait([w.conn for w in active], timeout=wait_s)
            for w in active:
                if w.conn in ready:
                    receive(w)
                elif time.monotonic() - w.started > limits[id(w)]:
                    replace(w, TIMEOUT_REASON if w.ready else CRASH_REASON)
        return results  # type: ignore[return-value]


def score_batch(items: Iterable[tuple[object, Sequence]], *, processes: int = 1,
                timeout_s: float = 10.0) -> list[BatchResult]:
    """Score ``(text, tests)`` items once with a temporary :class:`BenchScorer`."""
    with BenchScorer(processes=processes, timeout_s=timeout_s) as scorer:
        return scorer.score(items)
