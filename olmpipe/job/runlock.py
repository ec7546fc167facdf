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
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Self

from olmpipe.procs import HolderLock, LockedError
from olmpipe.procs import ParentWatch as _ParentWatch
from olmpipe.records.train import LOCK_NAME

logger = logging.getLogger(__name__)

LOCK_FILE = LOCK_NAME


class RunLockedError(RuntimeError):
    """Another trainer holds the run folder."""


class RunLock:
    """Exclusive lock on a run folder (:class:`olmpipe.procs.HolderLock` on ``.olmpipe.lock``), held
    until :meth:`release` or process exit.

    >>> import tempfile
    >>> with RunLock(tempfile.mkdtemp()) as lock:
    ...     lock.held
    True
    """

    def __init__(self, run_dir: str | Path):
        self.path = Path(run_dir) / LOCK_FILE
        self._lock = HolderLock(self.path)

    @property
    def held(self) -> bool:
        return self._lock.held

    def acquire(self) -> RunLock:
        try:
            self._lock.acquire()
        except LockedError as exc:
            raise RunLockedError(
                f"{self.path.parent} is in use by another trainer ({exc.who}); stop that trainer first "
                "(it checkpoints and exits on SIGTERM) -- two trainers on one run folder would overwrite "
                "each other's checkpoints"
            ) from None
        return self

    def release(self) -> None:
        self._lock.release()

    def __enter__(self) -> Self:
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()


class ParentWatch(_ParentWatch):
    """:class:`olmpipe.procs.ParentWatch` of a trainer: its SIGTERM makes the run checkpoint after the
    current step and exit 75 (:class:`olmpipe.job.callbacks.SignalFlag`)."""

    def __init__(self, levels: int = 1, interval_s: float = 2.0):
        super().__init__(levels, interval_s, what="trainer", then="stopping (checkpoint, then exit)")

    @classmethod
    def for_this_process(cls, interval_s: float = 2.0) -> ParentWatch:
        """Watch one level, or two under a distributed launcher (``LOCAL_RANK`` set)."""
        return cls(levels=2 if "LOCAL_RANK" in os.environ else 1, interval_s=interval_s)


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
