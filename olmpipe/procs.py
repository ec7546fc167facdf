"""Process facts from Linux ``/proc`` (a process's parent, the live members of a process group) and the
exit code of a training process stopped to be resumed.

Used where olmpipe must not leave processes behind: the trainer's parent watch
(:mod:`olmpipe.job.runlock`), the supervised multi-process launcher (:mod:`olmpipe.launch.supervise`)
and the managed vLLM server (:mod:`olmpipe.train.vllm_server`).
"""

from __future__ import annotations

import os
from pathlib import Path

#: Exit code of a training job stopped by SIGTERM after its checkpoint (EX_TEMPFAIL: run it again to
#: resume); the trainer returns it (:mod:`olmpipe.job.callbacks`) and so does the supervised
#: launcher (:func:`olmpipe.launch.supervise.supervise`).
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
