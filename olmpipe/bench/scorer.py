"""Batch scorer: many (text, tests) items over a persistent pool of worker processes.

This is the reward engine of GRPO: every completion of every step goes through it. Design:

- :class:`BenchScorer` keeps its worker processes (``python -m olmpipe.bench.worker``, see
  :mod:`olmpipe.bench.worker`; each with its own KaTeX renderer) alive across calls, so a training
  run pays the start-up once. Its configuration is picklable; the live pool is not shipped when
  the object is pickled.
- Work is sent in chunks of completions, one message each way per chunk: the tests of a chunk
  travel once, not once per completion (a GRPO group's completions share theirs), and the worker
  answers the whole chunk in one message. Every completion gets ``timeout_s`` seconds from its own
  start: the worker stops it cooperatively at its deadline (pending tests fail with reason
  ``"timeout"``). The worker publishes which completion it is on, and since when, in a shared
  progress file (:class:`olmpipe.bench.worker.Progress`); a worker still on one completion after
  its deadline plus a grace period is killed and replaced, every test of that completion fails with
  ``"timeout"`` and the rest of its chunk is sent again. A crashed worker is replaced the same way
  (reason ``"worker crashed"`` for the completion it was on).
- Every worker runs under a memory limit (``memory_mb``, its address space; see
  :mod:`olmpipe.bench.worker`): a completion that crosses it fails its remaining tests with reason
  ``"memory"`` (counted in :attr:`BatchResult.errors`), and the worker is replaced without blaming
  the rest of its chunk. The table parser's cell budget keeps ordinary hostile tables far below it.
- Nothing a model writes can make :meth:`BenchScorer.score` raise: the text is coerced to ``str``
  (None -> ``""``), checks that raise count as failed tests.

``processes=0`` runs in the calling process (no hard time bound, only the cooperative one, and no
memory limit: only the table parser's budget bounds memory there)::

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
import tempfile
import time
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from pathlib import Path

from olmpipe.bench.normalize import coerce_text
from olmpipe.bench.run import TIMEOUT_REASON, Verdict, micro_macro, run_tests
from olmpipe.bench.worker import (
    CRASH_REASON,
    IDLE,
    MEMORY_REASON,
    PROGRESS_SIZE,
    STARTING_RENDERER,
    Progress,
    close_renderer,
    make_renderer,
)

log = logging.getLogger(__name__)

_IN_FLIGHT = 2  # chunks a worker holds at once
DEFAULT_MEMORY_MB = 2048  # address space per worker (a worker idles at ~50 MB, a 2 MB page needs < 1 GB)


@dataclass(frozen=True)
class BatchResult:
    """Verdicts of one completion plus its micro (passed/total) and macro (mean per-type) reward.

    ``guarded_micro`` / ``guarded_macro`` are the same with the short-answer guard
    (:mod:`olmpipe.bench.shortguard`): passes through a too-short match count as failed.
    """

    verdicts: list[Verdict]
    micro: float
    macro: float
    timed_out: bool = False
    errors: list[str] = field(default_factory=list)
    guarded_micro: float = 0.0
    guarded_macro: float = 0.0

    @classmethod
    def from_verdicts(cls, verdicts: list[Verdict]) -> BatchResult:
        micro, macro = micro_macro(verdicts)
        guarded_micro, guarded_macro = micro_macro(verdicts, guard=True)
        timed_out = any(v.reason == TIMEOUT_REASON for v in verdicts)
        errors = [f"{v.test_id}: {v.reason}" for v in verdicts
                  if v.reason.startswith("error:") or v.reason in (CRASH_REASON, MEMORY_REASON)]
        return cls(verdicts, micro, macro, timed_out, errors, guarded_micro, guarded_macro)

    def reward(self, average: str, *, guard: bool) -> float:
        """The ``"micro"`` or ``"macro"`` reward, with the short-answer guard or without."""
        if average == "micro":
            return self.guarded_micro if guard else self.micro
        return self.guarded_macro if guard else self.macro


def _failed(tests: Sequence, reason: str) -> BatchResult:
    return BatchResult.from_verdicts([Verdict(t.id, False, reason, t.type) for t in tests])


# -------------------------------------------------------------------------------------------- pool
class _Worker:
    """One worker: ``python -m olmpipe.bench.worker`` on one end of a socket pair, plus the
    progress file it shares with the scorer.

    A plain subprocess rather than ``multiprocessing``: a spawned ``multiprocessing`` child
    re-imports the parent's ``__main__`` (the training entry point, or a Snakemake script that
    cannot run twice), which a worker must not do.
    """

    def __init__(self, timeout_s: float, memory_mb: float = 0) -> None:
        progress_fd = _progress_file()
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self.progress = Progress(progress_fd)  # mmap keeps its own copy of the descriptor
            self.progress.write(IDLE)
            self.process = subprocess.Popen(
                [sys.executable, "-m", "olmpipe.bench.worker", str(theirs.fileno()), repr(timeout_s),
                 str(progress_fd), repr(float(memory_mb))],
                pass_fds=[theirs.fileno(), progress_fd], env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
            os.close(progress_fd)
        self.conn = Connection(ours.detach())
        self.pending: deque[int] = deque()  # completions sent and not answered yet, in order
        self.chunks = 0  # chunks sent and not answered yet
        self.started = time.monotonic()  # last exchange: start-up, a chunk sent to it idle, an answer
        self.ready = False  # set by the worker's first message, once its imports are done

    def position(self) -> tuple[int | None, float, bool]:
        """``(completion it is on or None, since when, starting its renderer)``.

        The worker marks itself idle before answering a chunk, so an index it shows is one of
        ``pending``; "since" is never before ``started`` (the last exchange with the scorer).
        """
        index, since = self.progress.read()
        since = max(since, self.started)
        if index == STARTING_RENDERER:
            return None, since, True
        return (index if index in self.pending else None), since, False

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
        self.progress.close()

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


def _progress_file() -> int:
    """A descriptor of an anonymous ``PROGRESS_SIZE``-byte file for a worker's progress."""
    if hasattr(os, "memfd_create"):
        fd = os.memfd_create("olmpipe-bench-progress")
    else:  # pragma: no cover - platforms without memfd (macOS): an unlinked temporary file
        with tempfile.TemporaryFile() as fh:
            fd = os.dup(fh.fileno())
    os.ftruncate(fd, PROGRESS_SIZE)
    return fd


@dataclass(frozen=True)
class ScorerConfig:
    """Picklable settings of a :class:`BenchScorer`."""

    processes: int = 1
    timeout_s: float = 10.0
    grace_s: float = 2.0
    startup_s: float = 120.0  # a worker that is not up by then is replaced
    memory_mb: float = DEFAULT_MEMORY_MB  # each worker's address-space limit; 0: none


class BenchScorer:
    """Persistent multi-process scorer; see the module docstring. Use as a context manager or call
    :meth:`close`."""

    def __init__(self, processes: int = 1, timeout_s: float = 10.0, *, grace_s: float = 2.0,
                 memory_mb: float = DEFAULT_MEMORY_MB) -> None:
        if processes < 0:
            raise ValueError(f"processes must be >= 0, got {processes}")
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be > 0, got {timeout_s}")
        if memory_mb < 0:
            raise ValueError(f"memory_mb must be >= 0 (0: no limit), got {memory_mb}")
        self.config = ScorerConfig(int(processes), float(timeout_s), float(grace_s),
                                   memory_mb=float(memory_mb))
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
        return _Worker(self.config.timeout_s, self.config.memory_mb)

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
        for i, w in enumerate(self._workers):
            if w.pending:  # still busy with a call that was interrupted: its answers would mislead
                w.kill()
                self._workers[i] = self._spawn()
        while len(self._workers) < min(self.config.processes, n):
            self._workers.append(self._spawn())
        results: list[BatchResult | None] = [None] * n
        queue = deque(range(n))
        keys: dict[int, int] = {}
        key_of = [keys.setdefault(id(tests), len(keys)) for _, tests in prepared]
        # ~4 chunks per worker, 2 in flight: a worker scores one while its last answer is read
        chunk_size = max(1, min(64, -(-n // (4 * len(self._workers)))))
        limit_s = self.config.timeout_s + self.config.grace_s
        startup_failures = [0]
        done = [0]  # completions with a result

        def send(worker: _Worker, indices: list[int]) -> None:
            tests_by_key = {key_of[i]: prepared[i][1] for i in indices}
            chunk = [(i, prepared[i][0], key_of[i]) for i in indices]
            if not worker.pending:
                worker.started = time.monotonic()
            worker.pending.extend(indices)
            worker.chunks += 1
            worker.conn.send((chunk, tests_by_key))

        def deadline(worker: _Worker) -> float:
            if not worker.ready:
                return worker.started + self.config.startup_s
            _, since, rendering = worker.position()
            return since + (self.config.startup_s if rendering else limit_s)

        def replace(worker: _Worker, reason: str) -> None:
            if not worker.ready:
                startup_failures[0] += 1
                log.warning("bench worker failed to start (%d so far)", startup_failures[0])
            if worker.pending:
                current, _, _ = worker.position()
                blamed = worker.pending[0] if current is None else current
                if results[blamed] is None:
                    done[0] += 1
                results[blamed] = _failed(prepared[blamed][1], reason)
                log.warning("bench worker %s on completion %d; replacing it", reason, blamed)
                queue.extendleft(reversed([i for i in worker.pending if i != blamed]))
                worker.pending.clear()
            worker.chunks = 0
            worker.kill()
            self._workers[self._workers.index(worker)] = self._spawn()

        def retire(worker: _Worker) -> None:
            """The worker ran out of memory and exits: resend what it did not answer, unblamed."""
            log.warning("bench worker crossed its memory limit (%g MB); replacing it", self.config.memory_mb)
            queue.extendleft(reversed(worker.pending))
            worker.pending.clear()
            worker.chunks = 0
            worker.kill()
            self._workers[self._workers.index(worker)] = self._spawn()

        def wants_more(worker: _Worker) -> bool:
            """An idle worker takes a chunk; a busy one a second only if idle (or starting) ones
            still get one each, so that a worker that starts late is not left without work."""
            if not worker.chunks:
                return True
            idle = sum(not w.chunks for w in self._workers)
            return worker.chunks < _IN_FLIGHT and len(queue) > chunk_size * idle

        def feed(worker: _Worker) -> None:
            if not worker.pending and worker.process.poll() is not None:  # died while idle
                replace(worker, CRASH_REASON)
                return
            while worker.ready and queue and wants_more(worker):
                indices = [queue.popleft() for _ in range(min(chunk_size, len(queue)))]
                try:
                    send(worker, indices)
                except (OSError, ValueError):
                    replace(worker, CRASH_REASON)
                    return

        def receive(worker: _Worker) -> None:
            try:
                message = worker.conn.recv()
            except (EOFError, OSError):
                replace(worker, CRASH_REASON)
                return
            if message[0] == "ready":
                worker.ready = True
            elif message[0] == "results":
                for index, raw in message[1]:
                    if results[index] is None:
                        done[0] += 1
                    results[index] = BatchResult.from_verdicts([Verdict(*v) for v in raw])
                answered = {index for index, _ in message[1]}
                worker.pending = deque(i for i in worker.pending if i not in answered)
                worker.chunks = max(0, worker.chunks - 1)
                if len(message) > 2:  # it crossed its memory limit and exits
                    retire(worker)
                    return
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
            wait_s = max(0.0, min(deadline(w) for w in active) - time.monotonic())
            ready = wait([w.conn for w in active], timeout=wait_s)
            for w in active:
                if w.conn in ready:
                    receive(w)
                elif time.monotonic() > deadline(w) and not w.conn.poll():
                    replace(w, TIMEOUT_REASON if w.ready else CRASH_REASON)
        return results  # type: ignore[return-value]


def score_batch(items: Iterable[tuple[object, Sequence]], *, processes: int = 1,
                timeout_s: float = 10.0, memory_mb: float = DEFAULT_MEMORY_MB) -> list[BatchResult]:
    """Score ``(text, tests)`` items once with a temporary :class:`BenchScorer`."""
    with BenchScorer(processes=processes, timeout_s=timeout_s, memory_mb=memory_mb) as scorer:
        return scorer.score(items)
