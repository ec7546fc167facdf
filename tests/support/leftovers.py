"""Run a command and find the processes it leaves behind, wherever they were re-parented.

Every process started by the command inherits a marker environment variable (Chromium too, though
it runs in its own session), so after the command ends a scan of ``/proc/*/environ`` finds any
survivor: a nested ``snakemake --target-jobs`` job re-parented to init, a browser, a worker.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

MARK = "OLMPIPE_TEST_RUN_MARK"


@dataclass
class MarkedRun:
    """A finished (or timed-out) command, its output and the processes it left alive."""

    returncode: int | None  # None: killed at the timeout
    output: str
    survivors: list[str]  # "pid cmdline" of each live process that carries the run's mark


def marked_processes(mark: str) -> list[tuple[int, str]]:
    """(pid, command line) of the live processes (zombies excluded) whose environment holds ``mark``."""
    needle = f"{MARK}={mark}".encode()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            environ = Path(f"/proc/{entry.name}/environ").read_bytes()
            stat = Path(f"/proc/{entry.name}/stat").read_text()
            cmdline = Path(f"/proc/{entry.name}/cmdline").read_bytes()
        except OSError:
            continue
        if needle in environ.split(b"\0") and stat[stat.rindex(")") + 2] != "Z":
            found.append((int(entry.name), cmdline.replace(b"\0", b" ").decode(errors="replace")[:300]))
    return found


def run_marked(cmd: Sequence[str], *, timeout: float, env: dict[str, str] | None = None,
               cwd: str | Path | None = None) -> MarkedRun:
    """Run ``cmd`` with a fresh mark; after it ends (or is killed at ``timeout``), list and then kill
    every process that still carries the mark, so a failing test leaves nothing running either."""
    mark = uuid.uuid4().hex
    # Output goes to a file, not a pipe: a survivor holding the pipe open would block the read.
    with tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace") as out:
        proc = subprocess.Popen(list(cmd), env={**(env or os.environ), MARK: mark}, cwd=cwd,
                                stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            returncode: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            returncode = None
        out.seek(0)
        output = out.read()
    survivors = marked_processes(mark)
    for pid, _ in survivors:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return MarkedRun(returncode, output, [f"{pid} {cmd}" for pid, cmd in survivors])
