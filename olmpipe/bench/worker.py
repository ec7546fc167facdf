"""The bench scorer's worker process: ``python -m olmpipe.bench.worker FD TIMEOUT_S [PROGRESS_FD [MEMORY_MB]]``.

Started by :class:`olmpipe.bench.scorer.BenchScorer` with one end of a socket pair as file
descriptor ``FD`` (a :class:`multiprocessing.connection.Connection`). Protocol: the worker sends
``("ready",)`` once imported; it then receives ``(chunk, tests_by_key)`` messages, where ``chunk``
is a list of ``(index, text, key)`` (the completions of one chunk share the test lists of
``tests_by_key``, so a GRPO group's tests travel once), scores every item of the chunk with its own
deadline (``TIMEOUT_S`` from the item's start; tests still pending past it fail with ``"timeout"``)
and answers the whole chunk with one ``("results", [(index, verdicts), ...])`` message (verdicts as
``(test_id, passed, reason, type, short)`` tuples, :class:`~olmpipe.bench.run.Verdict`'s fields).
``None`` stops it.

One message per chunk instead of one per completion saves the scorer a wake-up, a receive and an
unpickle per completion. The scorer still needs to know what a worker is doing to kill a hung one
and blame the right completion, so the worker writes its progress into ``PROGRESS_FD``, a
:data:`PROGRESS_SIZE`-byte shared file (see :class:`Progress`): the index of the completion it is
on and when it began (``time.monotonic()``, the same clock in every process of a machine), or
:data:`STARTING_RENDERER` while its KaTeX browser starts, which is not part of any completion's
time bound.

Memory: with ``MEMORY_MB`` > 0 the worker lowers its soft address-space limit (``RLIMIT_AS``) to
that many MB (:func:`limit_memory`), so an allocation past it raises ``MemoryError`` inside the
worker instead of growing until the kernel kills it (or the machine). A completion that hits it
gets :data:`MEMORY_REASON` for the test that raised and every later test of the completion; the
worker then answers ``("results", [...], "memory")`` and exits, and the scorer starts a fresh one
and resends the rest of the chunk. Chromium (the KaTeX renderer's browser, started or restarted
inside renderer calls) must not inherit the limit -- it reserves far more address space than it
uses -- so every renderer call runs with the soft limit raised back to the hard one
(:class:`_RendererOutsideLimit`).
"""

from __future__ import annotations

import contextlib
import logging
import mmap
import resource
import struct
import sys
import time
from collections.abc import Iterator
from multiprocessing.connection import Connection

from olmpipe.bench.run import Verdict, run_tests

log = logging.getLogger(__name__)

CRASH_REASON = "worker crashed"
MEMORY_REASON = "memory"  # the worker's memory limit was crossed while this test (or an earlier one) ran
# reasons run_test / the table check give a MemoryError (the checks catch every Exception)
_MEMORY_ERRORS = ("error: MemoryError", "HTML table parsing failed: MemoryError")
IDLE = -1  # progress index: between chunks
STARTING_RENDERER = -2  # progress index: starting the KaTeX browser (the scorer's start-up bound applies)
_PROGRESS = struct.Struct("<qd")  # (completion index or IDLE / STARTING_RENDERER, time.monotonic() it began)
PROGRESS_SIZE = _PROGRESS.size


class Progress:
    """What a worker is doing, in a small file mapped by both the worker and the scorer.

    Only the worker writes; a reader takes two equal reads in a row so that a read overlapping
    a write is not mistaken for a state.
    """

    def __init__(self, fd: int) -> None:
        self._map = mmap.mmap(fd, PROGRESS_SIZE)

    def write(self, index: int) -> None:
        self._map[:PROGRESS_SIZE] = _PROGRESS.pack(index, time.monotonic())

    def read(self) -> tuple[int, float]:
        while True:
            first = self._map[:PROGRESS_SIZE]
            if self._map[:PROGRESS_SIZE] == first:
                return _PROGRESS.unpack(first)

    def close(self) -> None:
        try:
            self._map.close()
        except (OSError, ValueError, BufferError):
            pass


def limit_memory(memory_mb: float) -> None:
    """Lower this process's soft ``RLIMIT_AS`` to ``memory_mb`` MB (<= 0: leave it); the hard limit
    stays, so :func:`_outside_limit` can lift it again."""
    if memory_mb <= 0:
        return
    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    limit = int(memory_mb * 1024 * 1024)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))


@contextlib.contextmanager
def _outside_limit() -> Iterator[None]:
    """Run a block with the soft ``RLIMIT_AS`` at the hard limit (child processes started in it
    inherit no limit), then restore it."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if soft == hard:
        yield
        return
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


class _RendererOutsideLimit:
    """A KaTeX renderer whose method calls run outside the worker's memory limit (see the module
    docstring): the browser it may (re)start inherits no address-space limit."""

    def __init__(self, renderer) -> None:
        self._renderer = renderer

    def __getattr__(self, name: str):
        value = getattr(self._renderer, name)
        if not callable(value):
            return value

        def call(*args, **kwargs):
            with _outside_limit():
                return value(*args, **kwargs)

        return call


def make_renderer():
    """A KaTeX renderer owned by this process (browser started), or None without the math module."""
    try:
        from olmpipe.bench import mathtest
    except ImportError:
        return None
    factory = getattr(mathtest, "make_renderer", None)
    return factory() if callable(factory) else None


def renderer_outside_limit():
    """:func:`make_renderer`, started and then called outside this process's memory limit (see the
    module docstring); None without the math module."""
    with _outside_limit():
        renderer = make_renderer()
    return None if renderer is None else _RendererOutsideLimit(renderer)


def close_renderer(renderer) -> None:
    if isinstance(renderer, _RendererOutsideLimit):
        renderer = renderer._renderer
    if renderer is not None and hasattr(renderer, "close"):
        try:
            renderer.close()
        except Exception:
            log.debug("closing the KaTeX renderer failed", exc_info=True)


def _memory_verdicts(tests, verdicts: list[Verdict] | None) -> list[Verdict] | None:
    """The verdicts with :data:`MEMORY_REASON` from the first test that ran out of memory on
    (all tests when the run itself raised, ``verdicts`` None); None when no test did."""
    if verdicts is None:
        first = 0
    else:
        first = next((k for k, v in enumerate(verdicts) if v.reason.startswith(_MEMORY_ERRORS)), None)
        if first is None:
            return None
    kept = [] if verdicts is None else verdicts[:first]
    return kept + [Verdict(t.id, False, MEMORY_REASON, t.type) for t in tests[first:]]


def _score_chunk(chunk, tests_by_key, timeout_s: float, state: dict,
                 progress: Progress | None) -> tuple[list, bool]:
    """``([(index, verdict tuples)], out_of_memory)`` for one chunk; each item gets ``timeout_s``
    from its start. A completion that runs out of memory ends the chunk (the rest is not answered)."""
    out = []
    out_of_memory = False
    for index, text, key in chunk:
        tests = tests_by_key[key]
        if "renderer" not in state and any(t.type == "math" for t in tests):
            if progress is not None:
                progress.write(STARTING_RENDERER)
            try:  # browser start-up: not part of the time bound
                state["renderer"] = renderer_outside_limit()
            except Exception as exc:  # noqa: BLE001 - math tests then fail with the error as reason
                log.warning("no KaTeX renderer in this worker: %s: %s", type(exc).__name__, exc)
                state["renderer"] = None
        if progress is not None:
            progress.write(index)
        deadline = time.monotonic() + timeout_s
        try:
            verdicts = run_tests(text, tests, renderer=state.get("renderer"), deadline=deadline)
        except MemoryError:  # raised outside a check (the checks turn it into a verdict)
            verdicts = None
        memory = _memory_verdicts(tests, verdicts)
        if memory is not None:
            verdicts, out_of_memory = memory, True
            log.warning("completion %d crossed the worker's memory limit; the worker retires", index)
        out.append((index, [(v.test_id, v.passed, v.reason, v.type, v.short) for v in verdicts]))
        if out_of_memory:
            break
    if progress is not None:
        progress.write(IDLE)
    return out, out_of_memory


def serve(conn, timeout_s: float, progress: Progress | None = None, memory_mb: float = 0) -> None:
    """Worker loop: receive ``(chunk, tests_by_key)`` messages, answer one message per chunk;
    after a completion ran out of memory, answer ``("results", [...], "memory")`` and return."""
    logging.getLogger().setLevel(logging.WARNING)
    limit_memory(memory_mb)
    state: dict = {}
    conn.send(("ready",))
    try:
        while True:
            try:
                message = conn.recv()
            except (EOFError, OSError):
                break
            if message is None:
                break
            chunk, tests_by_key = message
            out, out_of_memory = _score_chunk(chunk, tests_by_key, timeout_s, state, progress)
            if out_of_memory:
                conn.send(("results", out, MEMORY_REASON))
                break
            conn.send(("results", out))
    finally:
        close_renderer(state.get("renderer"))
        if progress is not None:
            progress.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s[worker]: %(message)s")
    progress = Progress(int(argv[2])) if len(argv) > 2 else None
    memory_mb = float(argv[3]) if len(argv) > 3 else 0.0
    serve(Connection(int(argv[0])), float(argv[1]), progress, memory_mb)
    return 0


if __name__ == "__main__":
    sys.exit(main())
