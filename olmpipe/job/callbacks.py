"""Trainer callbacks of every training job: local metrics files, SIGTERM, run state.

- :class:`MetricsFiles` appends every logged step to ``metrics.jsonl`` and rewrites ``metrics.csv``
  (always, whatever wandb does). On resume the rows after the checkpoint's step are dropped first
  (:func:`olmpipe.records.metrics.truncate_metrics`), so the file continues without duplicates.
- :class:`StopOnSignal` turns SIGTERM (what SLURM sends before preemption or the time limit) into
  "save a checkpoint after this step and stop"; the run then exits with :data:`EXIT_PREEMPTED`.
- :class:`RunState` writes ``olmpipe_run.json`` (seed, step, wandb run id, run fingerprint) into
  every checkpoint, so a resumed run continues the same wandb run, and only a run with the same
  settings resumes it.
"""

from __future__ import annotations

import logging
import math
import time
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from olmpipe.job.checkpoints import RUN_STATE_FILE
from olmpipe.job.signals import SignalFlag
from olmpipe.procs import EXIT_PREEMPTED  # 75, EX_TEMPFAIL: run again to resume
from olmpipe.records.files import write_json
from olmpipe.records.metrics import append_metrics
from olmpipe.records.train import TRAIN_SUMMARY_NAME

__all__ = ["EXIT_PREEMPTED", "RUN_STATE_FILE", "MetricsFiles", "RunState", "SignalFlag", "StopOnSignal", "clean"]

logger = logging.getLogger(__name__)


def clean(value: Any) -> Any:
    """JSON-safe scalar: NaN/inf become None, tensors and numpy scalars become floats."""
    if hasattr(value, "item"):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class MetricsFiles(TrainerCallback):
    """Every log of the trainer as one JSON line (``metrics.jsonl``) and a CSV copy (``metrics.csv``)."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs:
            return
        if "train_runtime" in logs:  # the end-of-training summary, not a step
            summary = {k: clean(v) for k, v in logs.items()}
            write_json(self.run_dir / TRAIN_SUMMARY_NAME, summary)
            return
        row = {"step": state.global_step, "time": round(time.time(), 3)}
        row.update({k: clean(v) for k, v in logs.items()})
        append_metrics(self.run_dir, row)


class StopOnSignal(TrainerCallback):
    """After a step, when SIGTERM arrived (on any rank), save a checkpoint and stop training."""

    def __init__(self, flag: SignalFlag, trainer: Any = None):
        self.flag = flag
        self.trainer = trainer
        self.stopped_at: int | None = None

    def _any_rank_set(self) -> bool:
        local = self.flag.event.is_set()
        accelerator = getattr(self.trainer, "accelerator", None)
        if accelerator is None or accelerator.num_processes == 1:
            return local
        import torch

        flags = accelerator.gather(torch.tensor([int(local)], device=accelerator.device))
        return bool(flags.max().item())

    def on_step_end(self, args, state, control, **kwargs):
        if self._any_rank_set():
            control.should_save = True
            control.should_training_stop = True
            self.stopped_at = state.global_step
            if self.trainer is not None:
                self.trainer.stopping = True  # the checkpoint holds what a resume reads (trainer.save_model)
        return control


def _wait_for_everyone() -> None:
    """A barrier over the training processes (a no-op in one process)."""
    from accelerate import PartialState

    PartialState().wait_for_everyone()


class RunState(TrainerCallback):
    """Commits each checkpoint: once every rank has saved, writes ``olmpipe_run.json`` (seed, step,
    wandb run id, trajectory settings and their fingerprint) last, then deletes checkpoints beyond
    ``save_total_limit`` (:mod:`olmpipe.job.checkpoints`); :func:`olmpipe.job.resume.decide`
    resumes only from committed checkpoints and compares their settings.

    ``save_total_limit`` is ``train.grpo.save_total_limit``; the trainer's own ``GRPOConfig`` gets
    None, so that transformers does not rotate before the new checkpoint is committed. A step whose
    checkpoint folder exists already (skipped as incomplete at the resume, or left by a later run)
    first takes its old marker away (:func:`olmpipe.job.checkpoints.uncommit`). ``record``: more of
    what trained the weights (reward names and weights, the dataset summary, LoRA's settings), which
    a final model written from the checkpoint records (:func:`olmpipe.job.final.train_info`).
    """

    def __init__(self, seed: int, wandb_run_id: str | None, fingerprint: str | None = None,
                 settings: dict[str, Any] | None = None, save_total_limit: int | None = None,
                 record: dict[str, Any] | None = None):
        self.seed = seed
        self.wandb_run_id = wandb_run_id
        self.fingerprint = fingerprint
        self.settings = settings
        self.save_total_limit = save_total_limit
        self.record = record or {}

    def on_step_begin(self, args, state, control, **kwargs):
        from olmpipe.job.checkpoints import uncommit

        if state.is_world_process_zero:  # the save at the end of this step writes checkpoint-<step + 1>
            uncommit(Path(args.output_dir) / f"checkpoint-{state.global_step + 1}")

    def on_save(self, args, state, control, **kwargs):
        from olmpipe.job.checkpoints import commit, rotate

        folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
        _wait_for_everyone()  # every rank's shards and RNG state are written
        if not state.is_world_process_zero or not folder.is_dir():
            return
        payload = {**self.record, "seed": self.seed, "step": state.global_step, "wandb_run_id": self.wandb_run_id,
                   "fingerprint": self.fingerprint, "settings": self.settings}
        commit(folder, payload)
        rotate(args.output_dir, self.save_total_limit, keep=folder, protect=state.best_model_checkpoint)
