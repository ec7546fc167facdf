"""SIGTERM for a training run: stop at once while it is still loading, checkpoint-then-stop once it trains.

SLURM (preemption, the time limit, ``scancel``), the launcher's supervisor and the job watch
(:class:`olmpipe.job.runlock.ParentWatch`) stop a trainer with SIGTERM and expect exit code 75
(:data:`olmpipe.procs.EXIT_PREEMPTED`: run it again to continue). A trainer may get it at any
moment, also while it imports its libraries, reads the data or loads a 7B model, which takes
minutes; Python's default handler would end it with -15 and the job would count as failed. So
:class:`SignalFlag` is installed first thing (``python -m olmpipe.train`` does it before importing
TRL, transformers or torch) and

- while the run has not started training (between :meth:`SignalFlag.begin_loading` and
  :meth:`SignalFlag.end_loading`), a SIGTERM raises
  :class:`StoppedBeforeTraining` in the main thread: nothing is lost (no step was taken) and the
  trainer exits 75 at once instead of first finishing the load;
- once training runs, it only sets the flag, and
  :class:`olmpipe.job.callbacks.StopOnSignal` writes a checkpoint after the current step and ends
  the run with 75.

This module imports nothing heavy, so that the handler is in place within a fraction of a second
of the process start.
"""

from __future__ import annotations

import logging
import signal
import threading
from typing import Any

from olmpipe.procs import EXIT_PREEMPTED

logger = logging.getLogger(__name__)


class StoppedBeforeTraining(Exception):
    """SIGTERM arrived before training started; the run exits with :data:`EXIT_PREEMPTED`."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received signal {signum} before training started: stopping (nothing to checkpoint "
                         f"yet), exit code {EXIT_PREEMPTED}")
        self.signum = signum


class SignalFlag:
    """Set by SIGTERM; :class:`olmpipe.job.callbacks.StopOnSignal` reads it between steps.

    ``install()`` replaces the SIGTERM handler (main thread only) and ``restore()`` puts the old one
    back. While loading (:meth:`begin_loading`) a SIGTERM, or one that came before, raises
    :class:`StoppedBeforeTraining`. A second SIGTERM while the checkpoint is being written is
    ignored (the first one already asked to stop).
    """

    def __init__(self) -> None:
        self.event = threading.Event()
        self.signum: int | None = None
        self._previous: Any = None
        self._loading = False

    def _handle(self, signum, frame) -> None:
        if not self.event.is_set():
            if self._loading:
                logger.warning("received signal %d before training started: stopping now, exit code %d",
                               signum, EXIT_PREEMPTED)
            else:
                logger.warning("received signal %d: checkpointing after the current step, then exiting with %d",
                               signum, EXIT_PREEMPTED)
        self.signum = signum
        self.event.set()
        if self._loading:
            self._loading = False  # raise once; the unwinding code runs without further interruption
            raise StoppedBeforeTraining(signum)

    def _dispatch(self, signum, frame) -> None:
        self._handle(signum, frame)  # looked up on each signal, so a wrapped _handle (tests) applies

    def install(self) -> SignalFlag:
        if threading.current_thread() is threading.main_thread():
            self._previous = signal.signal(signal.SIGTERM, self._dispatch)
        return self

    def restore(self) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGTERM, self._previous)
            self._previous = None

    def begin_loading(self) -> None:
        """From here a SIGTERM interrupts at once (reading data, loading models): it raises
        :class:`StoppedBeforeTraining`, as this call does when the signal came before it."""
        if self.event.is_set():
            raise StoppedBeforeTraining(self.signum or signal.SIGTERM)
        self._loading = True

    def end_loading(self) -> None:
        """From here (training) a SIGTERM only sets the flag: the run checkpoints, then stops."""
        self._loading = False
