"""The completions table of a GRPO run: ``completions/step{N:06d}.jsonl`` every
``train.completions_every`` steps: page, completion, each reward, the advantage and each test's
verdict and reason.

It reads the trainer's record of the latest generation batch
(:func:`olmpipe.compat.trl.latest_generation_batch`) instead of TRL's ``log_completions``, whose
wandb table crashes on multimodal prompts.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from transformers import TrainerCallback

from olmpipe.job.callbacks import clean
from olmpipe.records.completions import write_completions
from olmpipe.records.text import completion_text

logger = logging.getLogger(__name__)


class CompletionsTable(TrainerCallback):
    """The latest generation batch, one JSON line per completion, every ``every`` steps.

    Read with :func:`olmpipe.compat.trl.latest_generation_batch`; if TRL's record is not what that
    seam expects, the table is switched off with a warning (training goes on).
    """

    def __init__(self, trainer: Any, run_dir: str | Path, every: int):
        self.trainer = trainer
        self.run_dir = Path(run_dir)
        self.every = max(1, int(every))
        self.off = False

    def on_log(self, args, state, control, logs=None, **kwargs):
        if (self.off or not state.is_world_process_zero or state.global_step % self.every
                or (logs and "train_runtime" in logs)):
            return
        from olmpipe.compat.trl import latest_generation_batch
        from olmpipe.compat.versions import UpstreamChangedError

        try:
            batch = latest_generation_batch(self.trainer)
        except UpstreamChangedError as exc:
            logger.warning("completions table switched off: %s", exc)
            self.off = True
            return
        if batch is None:
            return
        write_completions(self.run_dir, state.global_step, self.rows(state.global_step, batch))

    @staticmethod
    def rows(step: int, batch: Any) -> list[dict[str, Any]]:
        """Rows of the completions table from TRL's record of the latest batch
        (a :class:`~olmpipe.compat.trl.GenerationBatch`)."""

        completions = batch.completions
        rewards, advantages, extra = batch.rewards, batch.advantages, batch.extra
        rows = []
        for i, completion in enumerate(completions):
            verdicts = extra.get("bench_verdicts", [None] * len(completions))[i]
            rows.append({
                "step": step,
                "page": extra.get("page_id", [None] * len(completions))[i],
                "completion": completion_text(completion),
                "rewards": {name: clean(values[i]) for name, values in rewards.items() if i < len(values)},
                "advantage": clean(advantages[i]) if i < len(advantages) else None,
                "verdicts": json.loads(verdicts) if isinstance(verdicts, str) else None,
            })
        return rows
