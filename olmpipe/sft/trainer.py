"""TRL's ``SFTTrainer`` with a resume that restores every trained weight (or stops).

The weights' resume is every trainer's (:class:`olmpipe.job.trainer.ResumableTrainer`: transformers 5
saves checkpoints in the hub's key format and would resume silently from the base weights); the data
order is transformers' seedable sampler's (:class:`olmpipe.compat.trl.SFTTrainerSeams`).
"""

from __future__ import annotations

from olmpipe.compat.trl import SFTTrainerSeams
from olmpipe.job.trainer import ResumableTrainer

__all__ = ["ResumableSFTTrainer"]


class ResumableSFTTrainer(ResumableTrainer, SFTTrainerSeams):
    """``SFTTrainer`` whose resume restores the model weights (or the adapter) exactly, whose stop
    signal's DeepSpeed checkpoint holds only what a resume reads, and whose micro-batch losses the
    health check reads (:class:`olmpipe.job.health.StopOnNonFinite`)."""
