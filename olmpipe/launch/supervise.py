"""A multi-process training launcher run so that a SIGTERM stops every rank with one checkpoint
(``python -m olmpipe.launch --supervise``, :func:`supervise`)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence

from olmpipe.procs import EXIT_PREEMPTED, group_members


def supervise(cmd: Sequence[str], env: Mapping[str, str], grace_s: float) -> int:
    """Run a multi-process launcher so that a SIGTERM to the job stops every rank with a checkpoint.

    The launcher (accelerate/torchrun's elastic agent) and its ranks run in a process group of
    their own. SIGTERM, SIGINT or SIGHUP to this process -- SLURM's preemption or walltime signal,
    ``scancel --signal=TERM`` -- is sent to that whole group at once, so every rank sets its stop
    flag in the same step and they write one checkpoint together
    (:class:`olmpipe.job.callbacks.StopOnSignal`). The elastic agent would otherwise SIGKILL its
    workers 30 s after its own SIGTERM (torch 2.13 ``LaunchConfig.shutdown_timeout``, default from
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``): it is set to ``grace_s`` here, and anything of the group
    still alive ``grace_s`` after the signal is killed. Returns :data:`EXIT_PREEMPTED` after a
    signal, else the launcher's exit code.
    """
    env = {**env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(max(1, int(grace_s)))}
    proc = subprocess.Popen(list(cmd), env=env, start_new_session=True)
    state: dict[str, float | int | None] = {"signal": None, "deadline": None}

    def _group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _handle(signum: int, frame: object) -> None:
        if state["signal"] is None:
            state["signal"], state["deadline"] = signum, time.monotonic() + grace_s
            sys.stderr.write(f"olmpipe.launch: signal {signum}: stopping every rank after its checkpoint "
                             f"(at most {grace_s:.0f} s)\n")
            _group(signal.SIGTERM)

    previous = {sig: signal.signal(sig, _handle) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                deadline = state["deadline"]
                if deadline is not None and time.monotonic() > deadline:
                    _group(signal.SIGKILL)
        # ranks the agent left behind (it is gone; they are still in the group)
        end = (state["deadline"] or time.monotonic()) + 5
        while group_members(proc.pid) and time.monotonic() < end:
            time.sleep(0.2)
        _group(signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_PREEMPTED if state["signal"] is not None else code
