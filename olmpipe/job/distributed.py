"""The processes of a training job: this process's rank, the job's size, the process group, a barrier.

A job runs as one process or as one per GPU (``accelerate launch``/``torchrun``, :mod:`olmpipe.launch`),
which set ``RANK``/``WORLD_SIZE``/``LOCAL_RANK``. Rank 0 writes the run folder's shared files; every
rank computes the same decisions from the same files (:mod:`olmpipe.job.resume`).
"""

from __future__ import annotations

import os

__all__ = ["barrier", "init_distributed", "local_rank", "rank", "world_size"]


def rank() -> int:
    """This process's rank in the job (0 in a single process)."""
    return int(os.environ.get("RANK", "0"))


def local_rank() -> int:
    """This process's rank on its node (its GPU)."""
    return int(os.environ.get("LOCAL_RANK", "0"))


def world_size() -> int:
    """The job's training processes (1 in a single process)."""
    return int(os.environ.get("WORLD_SIZE", "1"))


def init_distributed(timeout_s: float) -> None:
    """Join the job's process group, created with a collective timeout of ``timeout_s`` seconds
    (``train.grpo.ddp_timeout``); no-op in a single process or when the group exists.

    This must be the first distributed call of the run: accelerate creates the group once, on the
    first ``PartialState`` (accelerate 1.15 ``state.py:177-285``; ``timeout`` reaches
    ``init_process_group`` or DeepSpeed's ``init_distributed``), and transformers' own
    ``PartialState(timeout=ddp_timeout)`` (``training_args.py:1885-1891``) comes too late to change
    it: without this, a ``PartialState()`` without timeout made the group (NCCL's default: 10 min).
    """
    if world_size() > 1:
        from datetime import timedelta

        from accelerate import PartialState

        PartialState(timeout=timedelta(seconds=timeout_s))


def barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()
