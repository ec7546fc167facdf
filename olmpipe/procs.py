"""Process facts from Linux ``/proc`` (a process's parent, the live members of a process group), the
exit code of a process stopped to be resumed, one holder per file (:class:`HolderLock`) and no job
outliving its Snakemake (:class:`ParentWatch`).

Used where olmpipe must not leave processes behind: the trainer's run lock and parent watch
(:mod:`olmpipe.job.runlock`), the generation journal's one writer and the generation jobs' watch
(:mod:`olmpipe.records.generations`, :mod:`olmpipe.evaluate.engine`, :mod:`olmpipe.difficulty.sample`),
the supervised multi-process launcher (:mod:`olmpipe.launch.supervise`) and the managed vLLM server
(:mod:`olmpipe.train.vllm_server`).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Self

#: Exit code of a training job stopped by SIGTERM after its checkpoint (EX_TEMPFAIL: run it again to
#: resume); the trainer returns it (:mod:`olmpipe.job.callbacks`), and so do the supervised
#: launcher (:func:`olmpipe.launch.supervise.supervise`) and a generation job stopped with its job
#: gone (its journal keeps what it finished).
EXIT_PREEMPTED = 75


def _stat(pid: int | str) -> list[str] | None:
    """Fields of ``/proc/<pid>/stat`` after the command name (state, ppid, pgrp, ...); None when gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def parent_of(pid: int) -> int | None:
    """The parent pid of ``pid`` (None when the process is gone or unreadable)."""
    fields = _stat(pid)
    return int(fields[1]) if fields else None


def group_members(pgid: int) -> list[int]:
    """Live processes (zombies excluded) of process group ``pgid``."""
    members = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            fields = _stat(entry.name)
            if fields and fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry.name))
    return members


# ------------------------------------------------------------------ one holder, none outliving its job


class LockedError(RuntimeError):
    """Another process holds a :class:`HolderLock`; ``who`` names it (pid, host, start time)."""

    def __init__(self, path: Path, who: str):
        super().__init__(f"{path} is held by {who}")
        self.path, self.who = path, who


class HolderLock:
    """An exclusive ``flock`` on ``path`` that names its holder (pid, host, start time) in the file,
    held until :meth:`release` or the process's exit, however it exits: the kernel releases a lock
    of a dead process, so a stale file never blocks anyone. A second process fails at once with
    :class:`LockedError` naming the holder. (``flock`` is local to a machine on some network file
    systems: two holders on different nodes over NFS are not excluded.)

    >>> import tempfile
    >>> with HolderLock(Path(tempfile.mkdtemp()) / "x.lock") as lock:
    ...     lock.held
    True
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> Self:
        import fcntl
        import json
        import socket
        import time

        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 4096).decode("utf-8", "replace").strip()
            os.close(fd)
            try:
                info = json.loads(holder)
                who = f"pid {info['pid']} on {info['host']}, started {info['started']}"
            except (ValueError, KeyError, TypeError):
                who = "another process"
            raise LockedError(self.path, who) from None
        os.ftruncate(fd, 0)
        stamp = {"pid": os.getpid(), "host": socket.gethostname(), "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.write(fd, (json.dumps(stamp) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class ParentWatch:
    """SIGTERM to this process when its job is gone (the watched ancestor was re-parented): a job
    started by Snakemake ends with it, e.g. after ``kill -9`` of Snakemake.

    ``levels``: 1 watches the parent (a process Snakemake starts directly: a ``script:`` job, or a
    ``shell:`` job whose command ``exec``\\ s it); 2 also watches the parent's parent (a rank under a
    launcher whose parent is the job). Checked every ``interval_s`` seconds in a daemon thread;
    ``what`` names the process in the warning it logs, ``then`` what it does next (the SIGTERM
    handler of the process decides: the trainer checkpoints and exits 75).
    """

    def __init__(self, levels: int = 1, interval_s: float = 2.0, *, what: str = "process",
                 then: str = "stopping"):
        import threading
        from itertools import pairwise

        self.interval_s = interval_s
        self.what, self.then = what, then
        chain = [os.getpid()]
        for _ in range(levels):
            parent = parent_of(chain[-1])
            if parent is None or parent <= 1:
                break
            chain.append(parent)
        # (child, its parent at start) pairs: the job is gone when a child's parent changes.
        self._pairs = list(pairwise(chain))
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.fired = False

    def orphaned(self) -> bool:
        """True when a watched process has a new parent (or is gone)."""
        for child, parent in self._pairs:
            now = os.getppid() if child == os.getpid() else parent_of(child)
            if now != parent:
                return True
        return False

    def _run(self) -> None:
        import logging
        import signal

        while not self._stop.wait(self.interval_s):
            if self.orphaned():
                self.fired = True
                logging.getLogger(__name__).warning("the job that started this %s is gone: %s", self.what, self.then)
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def start(self) -> Self:
        import threading

        if self._pairs and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="olmpipe-parent-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


@contextlib.contextmanager
def exit_with_job(what: str) -> Iterator[ParentWatch]:
    """Stop this process when its job's Snakemake is gone, for a job with nothing to save on the way
    out (a generation job: its journal holds every finished batch, so a rerun goes on from there).

    While the block runs, SIGTERM raises ``SystemExit(EXIT_PREEMPTED)`` in the main thread (the job's
    ``finally`` blocks run: a vLLM engine is shut down, the journal lock released), and a
    :class:`ParentWatch` of the parent (Snakemake ``exec``\\ s the job) sends it when the parent is
    gone, e.g. after ``kill -9`` of Snakemake. ``what`` names the process in the log.
    """
    import logging
    import signal

    def stop(signum: int, frame: object) -> None:
        logging.getLogger(__name__).warning("%s: SIGTERM, stopping (exit %d; what it finished is kept)", what,
                                            EXIT_PREEMPTED)
        raise SystemExit(EXIT_PREEMPTED)

    previous = signal.signal(signal.SIGTERM, stop)
    watch = ParentWatch(1, what=what, then="stopping").start()
    try:
        yield watch
    finally:
        watch.stop()
        signal.signal(signal.SIGTERM, previous)
