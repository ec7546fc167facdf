"""Mine and check one synthetic page at a time in a worker process bounded in time and memory.

``synth_tests`` parses each page's HTML, walks its tree, samples tests and runs every test on the
reference answer and on a foil page. A hostile page (any page a VLM wrote) must cost that page, not
the stage: :class:`PageWorker` runs :func:`mine_and_check` in ``python -m olmpipe.synth.pages FD
MEMORY_MB``, one page at a time, over a socket pair:

- time: a page that has no answer within ``synth.page_timeout_s`` gets its worker killed and is
  skipped with that reason; the next page gets a fresh worker;
- memory: the worker lowers its address-space limit to ``synth.page_memory_mb`` (as the bench
  scorer's workers do, :func:`olmpipe.bench.worker.limit_memory`); a page that crosses it is skipped
  with that reason and the worker replaced. The KaTeX browser of the math checks is started and
  called outside the limit (:func:`olmpipe.bench.worker.renderer_outside_limit`);
- any other error while mining or checking (a parser's ``RecursionError``, a bug) skips the page
  with the error as its reason; the worker goes on with the next page.

Each test also keeps its own time bound inside the checks (``synth.test_timeout_s``).
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Self

from olmpipe.bench.model import TestLoadError, test_from_record
from olmpipe.bench.run import run_tests
from olmpipe.prompts import FrontMatter, format_page_output
from olmpipe.records.synth import (
    TESTS_NAME,  # the bench's test file (test records are loaded under this name)
)
from olmpipe.synth.mine import MineLimits, mine_page

log = logging.getLogger(__name__)

STARTUP_S = 120.0  # a worker that is not up by then (imports) is a failure of the stage, not of a page


@dataclass(frozen=True)
class PageJob:
    """One rendered page to mine: its HTML, the PDF id its tests name, and how to check them."""

    html: str
    pdf: str
    rotation: int
    seed: int
    limits: MineLimits
    test_timeout_s: float


@dataclass
class PageResult:
    """The reference answer of a page and its mined tests, split into kept and dropped (with reasons)."""

    reference: str
    kept: list[dict] = field(default_factory=list)
    dropped: list[dict] = field(default_factory=list)


class PageSkipped(Exception):
    """The page cannot be mined within its bounds; the message is the reason for the report."""


def check_tests(records: list[dict], *, reference: str, body: str, full_text: str,
                timeout_s: float = 60.0, renderer=None) -> tuple[list[dict], list[dict]]:
    """Split mined tests into (kept, dropped); each dropped one gets a ``reason``.

    A test is kept when it loads, passes on the reference answer (with and without its front
    matter) and fails on a page that must fail it: the empty page, or for ``absent`` tests (which an
    empty page always passes) ``full_text``, the page with its running heads and feet written out.
    """
    kept, dropped = [], []
    for record in records:
        try:
            test = test_from_record(record, source=TESTS_NAME)
        except TestLoadError as exc:
            dropped.append({"id": record["id"], "type": record["type"], "reason": f"invalid: {exc.reason}"})
            continue
        deadline = time.monotonic() + timeout_s
        on_ref = [run_tests(text, [test], renderer=renderer, deadline=deadline)[0] for text in (reference, body)]
        failing = next((v for v in on_ref if not v.passed), None)
        if failing is not None:
            reason = f"fails on the reference answer: {failing.reason}"[:300]
        else:
            foil = full_text if test.type == "absent" else ""
            if run_tests(foil, [test], renderer=renderer, deadline=deadline)[0].passed:
                reason = ("passes on the page with its headers and footers written out" if test.type == "absent"
                          else "passes on an empty page")
            else:
                kept.append(record)
                continue
        dropped.append({"id": record["id"], "type": record["type"], "reason": reason})
    return kept, dropped


def mine_and_check(job: PageJob, renderer: Callable[[], object] | None = None) -> PageResult:
    """Mine ``job``'s page and check its tests; ``renderer`` returns the KaTeX renderer for math
    tests (called only when the page has some; None: the process's default renderer)."""
    mined = mine_page(job.html, job.pdf, seed=job.seed, limits=job.limits)
    reference = mined.reference
    if job.rotation:  # rotate_html_templates.py, update_frontmatter_rotation, lines 96-160
        front = mined.front_matter
        front = FrontMatter(front.primary_language, False, (360 - job.rotation) % 360, front.is_table,
                            front.is_diagram)
        reference = format_page_output(front, mined.body)
    katex = renderer() if renderer is not None and any(t["type"] == "math" for t in mined.tests) else None
    kept, dropped = check_tests(mined.tests, reference=reference, body=mined.body, full_text=mined.full_text,
                                timeout_s=job.test_timeout_s, renderer=katex)
    return PageResult(reference, kept, dropped)


# ------------------------------------------------------------------------------------------ worker
def serve(conn: Connection, memory_mb: float) -> None:
    """Worker loop: receive :class:`PageJob` messages (None stops), answer each with ``("ok",
    PageResult)`` or ``("error", reason)``; after a page ran out of memory answer ``("memory",)``
    and return (the parent starts a fresh worker)."""
    from olmpipe.bench.worker import close_renderer, limit_memory, renderer_outside_limit

    limit_memory(memory_mb)
    state: dict = {}

    def renderer():
        if "renderer" not in state:
            try:
                state["renderer"] = renderer_outside_limit()
            except Exception as exc:  # noqa: BLE001 - math tests then fail with the error as reason
                log.warning("no KaTeX renderer in the page worker: %s: %s", type(exc).__name__, exc)
                state["renderer"] = None
        return state["renderer"]

    conn.send(("ready",))
    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                break
            if job is None:
                break
            try:
                answer = ("ok", mine_and_check(job, renderer))
            except MemoryError:
                answer = None
            except Exception as exc:  # noqa: BLE001 - the page is skipped with this reason
                answer = ("error", f"{type(exc).__name__}: {exc}"[:500])
            if answer is None:
                conn.send(("memory",))
                break
            conn.send(answer)
    finally:
        close_renderer(state.get("renderer"))


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s[page worker]: %(message)s")
    serve(Connection(int(argv[0])), float(argv[1]))
    return 0


# ------------------------------------------------------------------------------------------ parent
class PageWorker:
    """The parent's side: :meth:`run` mines one page in the worker process or raises
    :class:`PageSkipped` with the reason (time, memory, error). Use as a context manager.

    Example::

        with PageWorker(timeout_s=300, memory_mb=2048) as worker:
            result = worker.run(PageJob(html, "page.pdf", 0, seed=0, limits=MineLimits(), test_timeout_s=60))
    """

    def __init__(self, *, timeout_s: float, memory_mb: float) -> None:
        self.timeout_s = float(timeout_s)
        self.memory_mb = float(memory_mb)
        self._process: subprocess.Popen | None = None
        self._conn: Connection | None = None

    def _start(self) -> None:
        ours, theirs = socket.socketpair()
        env = dict(os.environ)
        package_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (package_root, env.get("PYTHONPATH")) if p)
        try:
            self._process = subprocess.Popen(
                [sys.executable, "-m", "olmpipe.synth.pages", str(theirs.fileno()), repr(self.memory_mb)],
                pass_fds=[theirs.fileno()], env=env, stdin=subprocess.DEVNULL)
        finally:
            theirs.close()
        self._conn = Connection(ours.detach())
        if not self._conn.poll(STARTUP_S) or self._receive() != ("ready",):
            self._kill()
            raise RuntimeError(f"the synth page worker did not start within {STARTUP_S:g} s")

    def _receive(self):
        try:
            return self._conn.recv()
        except (EOFError, OSError):
            return None

    def _kill(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
        if self._process is not None:
            if self._process.poll() is None:
                self._process.kill()
            self._process.wait()
            self._process = None

    def run(self, job: PageJob) -> PageResult:
        """The page's result, or :class:`PageSkipped` with why it has none."""
        if self._process is None:
            self._start()
        try:
            self._conn.send(job)
        except OSError:  # the worker died between pages: one fresh try
            self._kill()
            self._start()
            self._conn.send(job)
        if not self._conn.poll(self.timeout_s):
            self._kill()
            raise PageSkipped(f"mining and checking took more than {self.timeout_s:g} s (synth.page_timeout_s)")
        answer = self._receive()
        if answer is None or answer[0] == "memory":
            try:
                code = self._process.wait(5.0)
            except subprocess.TimeoutExpired:
                code = None
            self._kill()
            if answer is None:
                raise PageSkipped(f"the page worker died (exit code {code}) while mining this page")
            raise PageSkipped(f"mining and checking needed more than {self.memory_mb:g} MB (synth.page_memory_mb)")
        if answer[0] == "error":
            raise PageSkipped(answer[1])
        return answer[1]

    def close(self) -> None:
        """Stop the worker (and its KaTeX browser)."""
        if self._conn is not None:
            try:
                self._conn.send(None)
                self._process.wait(5.0)
            except (OSError, subprocess.TimeoutExpired):
                pass
        self._kill()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


if __name__ == "__main__":
    # run the module under its own name: the results it pickles must name olmpipe.synth.pages, not __main__
    from olmpipe.synth.pages import main as _main

    sys.exit(_main())
