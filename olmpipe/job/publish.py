"""The last step of a training job: the final ``model/`` (and with LoRA ``adapter/``), in one of
the three ways a run ends (:mod:`olmpipe.job.final` writes the folders):

- :func:`publish_trained`: training finished; the trainer's float32 weights (DeepSpeed's fp32
  partitions under ZeRO, :func:`olmpipe.job.precision.save_final_weights`), or the adapter and the
  base with it merged;
- :func:`finish_from_checkpoint`: the newest checkpoint already holds the whole run (``max_steps``
  reached, e.g. the job was rerun after an edit of the trainer's code): its weights become the
  final model, recorded with what the checkpoint stored of its run, not today's config;
- :func:`finish_from_kept`: no checkpoint holds the run's end any more, but ``model.kept/`` does.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from olmpipe.job.checkpoints import RUN_STATE_FILE
from olmpipe.job.distributed import barrier, rank
from olmpipe.job.final import copy_training_args, read_kept, republish, stored_peft, train_info, write_final
from olmpipe.job.resume import ResumeMismatchError, comparable
from olmpipe.records.metrics import METRICS_JSONL, truncate_metrics

if TYPE_CHECKING:
    from olmpipe.job.load import LoadedModel
    from olmpipe.job.setup import JobSetup

logger = logging.getLogger(__name__)

__all__ = ["finish_from_checkpoint", "finish_from_kept", "publish_trained"]


def _info(setup: JobSetup, record: Mapping[str, Any], *, steps: int, wandb_run_id: str | None,
          from_checkpoint: str | None = None, peft: Mapping[str, Any] | None = None) -> dict[str, Any]:
    return train_info(seed=setup.seed, base_model=setup.model_path, steps=steps,
                      reward_names=record.get("reward_names"), reward_weights=record.get("reward_weights"),
                      wandb_run_id=wandb_run_id, dataset=record["dataset"], peft=peft,
                      from_checkpoint=from_checkpoint)


def publish_trained(setup: JobSetup, trainer: Any, loaded: LoadedModel, record: Mapping[str, Any],
                    wandb_run_id: str | None, settings: Mapping[str, Any]) -> None:
    """Write the final model of a run that trained to its end (every rank calls it)."""
    from olmpipe.job.peft import adapter_and_merged_writer
    from olmpipe.job.precision import save_final_weights

    step = trainer.state.global_step
    info = _info(setup, record, steps=step, wandb_run_id=wandb_run_id, peft=record.get("peft"))
    main, wait = trainer.accelerator.is_main_process, trainer.accelerator.wait_for_everyone

    def save_weights(path: Path) -> None:
        save_final_weights(trainer, path)

    if loaded.peft_config is not None:
        # the adapter (float32 masters under DeepSpeed too), then the base with it merged
        save_weights = adapter_and_merged_writer(save_weights, None, setup.model_path, setup.final_dir, main, wait)
    write_final(save_weights, loaded.processor, setup.final_dir, info, main, wait, setup.run_dir / METRICS_JSONL,
                setup.run_dir, {"steps": step, "settings": settings})
    logger.info("finished seed %d at step %d; final model in %s", setup.seed, step, setup.final_dir)


def finish_from_checkpoint(setup: JobSetup, loaded: LoadedModel, record: Mapping[str, Any], checkpoint: Path,
                           step: int, settings: Mapping[str, Any]) -> None:
    """Write the final model from ``checkpoint``, which already holds the whole run (a DeepSpeed
    checkpoint's float32 masters, not its bf16 module copy), recorded with the rewards, dataset,
    wandb run and LoRA settings it stored (older checkpoints: today's ``record``, as before the
    record existed). Training on would pass ``max_steps`` and rotate older checkpoints away. ``loaded``
    is the base model on the CPU (:func:`olmpipe.job.load.load_model` with ``publish_only``)."""
    from olmpipe.job.peft import adapter_and_merged_writer, copy_checkpoint_adapter
    from olmpipe.job.precision import restore_fp32_masters
    from olmpipe.job.trainer import load_checkpoint_weights

    logger.info("%s is at step %d of max_steps %d: writing the final model from it", checkpoint, step,
                setup.max_steps)
    stored = json.loads((checkpoint / RUN_STATE_FILE).read_text(encoding="utf-8"))
    what = {**record, **{k: stored[k] for k in ("reward_names", "reward_weights", "dataset") if k in stored}}
    info = _info(setup, what, steps=step, wandb_run_id=stored.get("wandb_run_id"), from_checkpoint=checkpoint.name,
                 peft=stored_peft(stored))
    state = {"steps": step, "settings": comparable(stored.get("settings") or settings)}
    main = rank() == 0
    model, processor = loaded.model, loaded.processor
    if loaded.peft_config is not None:
        # a DeepSpeed checkpoint's adapter from its float32 masters, as the finished run saves it
        save_weights = adapter_and_merged_writer(
            lambda path: copy_checkpoint_adapter(checkpoint, path, model, loaded.peft_config) if main else None,
            processor, setup.model_path, setup.final_dir, main, barrier)
    else:
        # only rank 0 writes; a DeepSpeed checkpoint written on a stop has no weights copy
        if main and not restore_fp32_masters(model, checkpoint):
            load_checkpoint_weights(model, checkpoint)

        def save_weights(path: Path) -> None:
            if main:
                model.save_pretrained(str(path))
                copy_training_args(checkpoint, path)

    write_final(save_weights, processor, setup.final_dir, info, main, barrier, setup.run_dir / METRICS_JSONL,
                setup.run_dir, state)


def finish_from_kept(setup: JobSetup) -> None:
    """Write the final model again from the run's kept copy (no checkpoint holds the run's end any
    more: :mod:`olmpipe.job.final`); refused when ``max_steps`` asks for more training."""
    kept = read_kept(setup.run_dir)
    max_steps, run_dir, final_dir = setup.max_steps, setup.run_dir, setup.final_dir
    if 0 < max_steps and kept.step < max_steps:
        key = f"{setup.kind.section}.{setup.kind.knobs_key}.max_steps"
        raise ResumeMismatchError(
            f"{kept.path} holds this run's final model at step {kept.step}, and no complete checkpoint is left to "
            f"train on to max_steps {max_steps}. Set {key} back to {kept.step} to write "
            f"{final_dir} from it, or start over ({setup.kind.section}.resume: restart; the old run is moved to "
            f"{run_dir.name}.old-<time>/, not deleted).")
    if rank() == 0:
        truncate_metrics(run_dir, kept.step)
    republish(kept, final_dir, rank() == 0, barrier, run_dir / METRICS_JSONL)
