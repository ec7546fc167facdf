"""The bench scorer's worker process: ``python -m olmpipe.bench.worker FD TIMEOUT_S``.

Started by :class:`olmpipe.bench.scorer.BenchScorer` with one end of a socket pair as file
descriptor ``FD`` (a :class:`multiprocessing.connection.Connection`). Protocol: the worker sends
``("ready",)`` once imported; it then receives ``(chunk, tests_by_key)`` messages, where ``chunk``
is a list of ``(index, text, key)``, and answers each item with ``("result", index, verdicts)``
(verdicts as ``(test_id, passed, reason, type)`` tuples); before the first math test it starts its
KaTeX renderer and sends ``("started", index)`` so that the browser start-up does not count against
that completion's time bound. ``None`` stops it.
"""

from __future__ import annotations

import logging
import sys
import time
from multiprocessing.connection import Connection

from olmpipe.bench.run import run_tests

log = logging.getLogger(__name__)

CRASH_REASON = "worker crashed"


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


def _score_chunk(conn, chunk, tests_by_key, timeout_s: float, state: dict) -> None:
    for index, text, key in chunk:
        tests = tests_by_key[key]
        if "renderer" not in state and any(t.type == "math" for t in tests):
            try:  # browser start-up: not part of the time bound
                state["renderer"] = make_renderer()
            except Exception as exc:  # noqa: BLE001 - math tests then fail with the error as reason
                log.warning("no KaTeX renderer in this worker: %s: %s", type(exc).__name__, exc)
                state["renderer"] = None
            conn.send(("started", index))
        deadline = time.monotonic() + timeout_s
        verdicts = run_tests(text, tests, renderer=state.get("renderer"), deadline=deadline)
        conn.send(("result", index, [(v.test_id, v.passed, v.reason, v.type) for v in verdicts]))


def serve(conn, timeout_s: float) -> None:
    """Worker loop: receive ``(chunk, tests_by_key)`` messages, answer one message per item."""
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
            _score_chunk(conn, chunk, tests_by_key, timeout_s, state)
    finally:
        close_renderer(state.get("renderer"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s[worker]: %(message)s")
    serve(Connection(int(argv[0])), float(argv[1]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
