"""The bench scorer's worker process: ``python -m olmpipe.bench.worker FD TIMEOUT_S [PROGRESS_FD]``.

Started by :class:`olmpipe.bench.scorer.BenchScorer` with one end of a socket pair as file
descriptor ``FD`` (a :class:`multiprocessing.connection.Connection`). Protocol: the worker sends
``("ready",)`` once imported; it then receives ``(chunk, tests_by_key)`` messages, where ``chunk``
is a list of ``(index, text, key)`` (the completions of one chunk share the test lists of
``tests_by_key``, so a GRPO group's tests travel once), scores every item of the chunk with its own
deadline (``TIMEOUT_S`` from the item's start; tests still pending past it fail with ``"timeout"``)
and answers the whole chunk with one ``("results", [(index, verdicts), ...])`` message (verdicts as
``(test_id, passed, reason, type)`` tuples). ``None`` stops it.

One message per chunk instead of one per completion saves the scorer a wake-up, a receive and an
unpickle per completion. The scorer still needs to know what a worker is doing to kill a hung one
and blame the right completion, so the worker writes its progress into ``PROGRESS_FD``, a
:data:`PROGRESS_SIZE`-byte shared file (see :class:`Progress`): the index of the completion it is
on and when it began (``time.monotonic()``, the same clock in every process of a machine), or
:data:`STARTING_RENDERER` while its KaTeX browser starts, which is not part of any completion's
time bound.
"""

from __future__ import annotations

import logging
import mmap
import struct
import sys
import time
from multiprocessing.connection import Connection

from olmpipe.bench.run import run_tests

log = logging.getLogger(__name__)

CRASH_REASON = "worker crashed"
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


def make_renderer():
    """A KaTeX renderer owned by this process (browser started), or None without the math module."""
    try:
        from olmpipe.bench import mathtest
    except ImportError:
        return None
    factory = getattr(mathtest, "make_renderer", None)
    return factory() if callable(factory) else None


def close_renderer(renderer) -> None:
    if renderer is not None and hasattr(renderer, "close"):
        try:
            renderer.close()
        except Exception:
            log.debug("closing the KaTeX renderer failed", exc_info=True)


def _score_chunk(chunk, tests_by_key, timeout_s: float, state: dict, progress: Progress | None) -> list:
    """``[(index, verdict tuples)]`` for one chunk; each item gets ``timeout_s`` from its start."""
    out = []
    for index, text, key in chunk:
        tests = tests_by_key[key]
        if "renderer" not in state and any(t.type == "math" for t in tests):
            if progress is not None:
                progress.write(STARTING_RENDERER)
            try:  # browser start-up: not part of the time bound
                state["renderer"] = make_renderer()
            except Exception as exc:  # noqa: BLE001 - math tests then fail with the error as reason
                log.warning("no KaTeX renderer in this worker: %s: %s", type(exc).__name__, exc)
                state["renderer"] = None
        if progress is not None:
            progress.write(index)
        deadline = time.monotonic() + timeout_s
        verdicts = run_tests(text, tests, renderer=state.get("renderer"), deadline=deadline)
        out.append((index, [(v.test_id, v.passed, v.reason, v.type) for v in verdicts]))
    if progress is not None:
        progress.write(IDLE)
    return out


def serve(conn, timeout_s: float, progress: Progress | None = None) -> None:
    """Worker loop: receive ``(chunk, tests_by_key)`` messages, answer one message per chunk."""
    logging.getLogger().setLevel(logging.WARNING)
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
            conn.send(("results", _score_chunk(chunk, tests_by_key, timeout_s, state, progress)))
    finally:
        close_renderer(state.get("renderer"))
        if progress is not None:
            progress.close()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s[worker]: %(message)s")
    progress = Progress(int(argv[2])) if len(argv) > 2 else None
    serve(Connection(int(argv[0])), float(argv[1]), progress)
    return 0


if __name__ == "__main__":
    sys.exit(main())
