"""One trainer per run folder, and no trainer outliving its job.

Two failure modes of a killed workflow: ``kill -9`` of Snakemake (or of a login shell running it)
leaves the training process running, re-parented to init; after ``snakemake --unlock`` a rerun
starts a second trainer on the same run folder, and both write checkpoints, metrics and the final
model into it.

- :class:`RunLock` takes an exclusive ``flock`` on ``<run folder>/.olmpipe.lock`` for the life of
  the run (rank 0 only). The kernel releases it when the process dies, however it dies, so a stale
  lock never blocks a restart. A second trainer fails at once with :class:`RunLockedError` naming
  the holder's pid, host and start time. (``flock`` is local to a machine on some network file
  systems: two trainers on *different* nodes over NFS are not excluded; SLURM's one-job-per-seed
  and Snakemake's own lock cover that case.)
- :class:`ParentWatch` polls the process's parent (and, under a launcher such as
  ``accelerate launch``, the launcher's parent, the job itself). When the job is gone -- the
  watched process was re-parented -- it sends SIGTERM to this process, which the run turns into
  "checkpoint after this step, exit 75" (:class:`olmpipe.job.callbacks.SignalFlag`): the work so
  far is kept and the trainer ends with its job.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from itertools import pairwise
from pathlib import Path
from typing import Self

from olmpipe.procs import parent_of
from olmpipe.records.train import LOCK_NAME

logger = logging.getLogger(__name__)

LOCK_FILE = LOCK_NAME


class RunLockedError(RuntimeError):
    """Another trainer holds the run folder."""


class RunLock:
    """Exclusive lock on a run folder, held until :meth:`release` or process exit.

    >>> import tempfile
    >>> with RunLock(tempfile.mkdtemp()) as lock:
    ...     lock.held
    True
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def acquire(self) -> RunLock:
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
            raise RunLockedError(
                f"{self.path.parent} is in use by another trainer ({who}); stop that trainer first "
                "(it checkpoints and exits on SIGTERM) -- two trainers on one run folder would overwrite "
                "each other's checkpoints"
            ) from None
        os.ftruncate(fd, 0)
        stamp = {"pid": os.getpid(), "host": socket.gethostname(),
                 "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
        os.write(fd, (json.dumps(stamp) + "\n").encode())
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class ParentWatch:
    """SIGTERM to this process when its job is gone (the watched ancestor was re-parented).

    ``levels``: 1 watches the parent (a trainer started directly by the job); 2 also watches the
    parent's parent (a rank under a launcher whose parent is the job). Checked every
    ``interval_s`` seconds in a daemon thread.
    """

    def __init__(self, levels: int = 1, interval_s: float = 2.0):
        self.interval_s = interval_s
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

    @classmethod
    def for_this_process(cls, interval_s: float = 2.0) -> ParentWatch:
        """Watch one level, or two under a distributed launcher (``LOCAL_RANK`` set)."""
        return cls(levels=2 if "LOCAL_RANK" in os.environ else 1, interval_s=interval_s)

    def orphaned(self) -> bool:
        """True when a watched process has a new parent (or is gone)."""
        for child, parent in self._pairs:
            now = os.getppid() if child == os.getpid() else parent_of(child)
            if now != parent:
                return True
        return False

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            if self.orphaned():
                self.fired = True
                logger.warning("the job that started this trainer is gone: stopping (checkpoint, then exit)")
                os.kill(os.getpid(), signal.SIGTERM)
                return

    def start(self) -> ParentWatch:
        if self._pairs and self._thread is None:
            self._thread = threading.Thread(target=self._run, name="olmpipe-parent-watch", daemon=True)
            self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()


@contextlib.contextmanager
def hold_run(run_dir: str | Path, exit_with_job: bool) -> Iterator[Path]:
    """The lock step of a training job: make ``run_dir``, hold its :class:`RunLock` on rank 0 and,
    with ``exit_with_job`` (``<section>.exit_with_job``), a :class:`ParentWatch` for the job's life."""
    from olmpipe.job.distributed import rank

    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir).acquire() if rank() == 0 else None
    watch = ParentWatch.for_this_process().start() if exit_with_job else None
    try:
        yield run_dir
    finally:
        if watch is not None:
            watch.stop()
        if lock is not None:
            lock.release()
