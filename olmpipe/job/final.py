"""A training run's final folders, and the kept copy that a rerun writes them back from.

The run folder gets ``model/`` (rule ``train_seed``'s output: the weights, the processor and
``olmpipe_train.json``), the copy of the metrics beside it (``model.metrics.jsonl``), with LoRA
``adapter/`` (:mod:`olmpipe.job.peft`), and ``model.kept/``. A run ends in one of three ways:

- training finishes (:mod:`olmpipe.train.run`: the trainer's weights and processor);
- a checkpoint already holds the whole run (``max_steps`` reached, e.g. the job was rerun after an
  edit of the trainer's code): its weights, or its adapter merged, recorded with the rewards,
  dataset, wandb run and LoRA settings stored in it (:class:`olmpipe.job.callbacks.RunState`), not
  today's config's;
- no checkpoint holds the run's end any more, but ``model.kept/`` does: :func:`republish`.

``model.kept/`` holds hard links to the files of the last ``model/`` the run published, plus
``olmpipe_kept.json`` (the step and the run settings that trained it, which a resume compares:
:mod:`olmpipe.job.resume`), and is no Snakemake output. Snakemake deletes a job's outputs before
it runs the job again (snakemake 9.27 ``jobs.py:797-812``, ``Job.remove_existing_output`` from
``Job.prepare``), which an edit of the trainer's code (:mod:`olmpipe.codeversion`), a changed
parameter or ``-R`` cause. The rerun writes ``model/`` again from the last checkpoint; without the
kept copy a run whose checkpoints were deleted (one 7B checkpoint is about 130 GB) would train
anew, and ``train.resume: restart`` would move aside a run whose model Snakemake had already
deleted. Hard links take no disk space; where the file system refuses them the run goes on without
the kept copy (a warning says so).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.layout import ADAPTER_NAME, kept_model_dir
from olmpipe.models.architectures import publish_expert_layout
from olmpipe.models.folder import describe, missing_files
from olmpipe.records.files import atomic_write, publish_dir, staging_dir, staging_path, write_json
from olmpipe.records.metrics import final_metrics_path
from olmpipe.records.models import TRAIN_INFO_NAME
from olmpipe.records.train import KEPT_STATE_NAME, TRAINED_PAGES_NAME

logger = logging.getLogger(__name__)

#: transformers' TRAINING_ARGS_NAME (``trainer.py``): ``Trainer.save_model`` writes it beside the
#: weights; a final folder written from a checkpoint gets the checkpoint's copy.
TRAINING_ARGS_NAME = "training_args.bin"


@dataclass(frozen=True)
class Kept:
    """A run's kept final model: its folder, the step it was trained to and its ``olmpipe_kept.json``
    (``steps`` and ``settings``: :func:`olmpipe.job.resume.run_settings`)."""

    path: Path
    step: int
    info: Mapping[str, Any]


def read_kept(run_dir: str | Path) -> Kept | None:
    """The kept final model of ``run_dir`` (None when there is none or it cannot be used, with a warning).

    It counts when its ``olmpipe_kept.json`` reads and names the steps and settings it was trained
    with, and the folder still loads as a model (:func:`olmpipe.models.folder.missing_files`: weights
    there and not cut short, processor files): :func:`keep` publishes it whole, but its files are
    hard links that anything writing into ``model/`` in place, or deleting from either folder,
    changes too. A damaged copy is ignored like a damaged checkpoint, so a rerun never publishes a
    ``model/`` without its weights.
    """
    folder = Path(kept_model_dir(run_dir))
    path = folder / KEPT_STATE_NAME
    if not path.is_file():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logger.warning("ignoring %s: %s is unreadable (%s)", folder, KEPT_STATE_NAME, exc)
        return None
    if not isinstance(info, dict) or not isinstance(info.get("steps"), int) or not isinstance(info.get("settings"), dict):
        logger.warning("ignoring %s: its %s names no steps and settings", folder, KEPT_STATE_NAME)
        return None
    missing = missing_files(folder)
    if missing:
        logger.warning("ignoring %s: it cannot be written back as the final model (missing or damaged: %s)",
                       folder, describe(missing))
        return None
    return Kept(folder, info["steps"], info)


def _link_files(source: Path, target: Path, skip: tuple[str, ...] = ()) -> None:
    for path in sorted(source.rglob("*")):
        out = target / path.relative_to(source)
        if path.relative_to(source).as_posix() in skip:
            continue
        if path.is_dir():
            out.mkdir(parents=True, exist_ok=True)
        else:
            out.parent.mkdir(parents=True, exist_ok=True)
            os.link(path, out)


def keep(final_dir: str | Path, run_dir: str | Path, state: Mapping[str, Any]) -> Path | None:
    """Make ``model.kept/`` of ``run_dir`` hard links to the files of ``final_dir`` plus
    ``olmpipe_kept.json`` (``state``: ``steps`` and ``settings``), replacing the previous one;
    returns it, or None where the file system refuses hard links (a warning)."""
    kept = Path(kept_model_dir(run_dir))
    tmp = staging_dir(kept)
    try:
        _link_files(Path(final_dir), tmp)
    except OSError as exc:
        logger.warning("no kept copy of %s in %s (%s): when Snakemake deletes %s to rerun the job, only a "
                       "checkpoint can bring it back", final_dir, kept, exc, final_dir)
        shutil.rmtree(tmp, ignore_errors=True)
        return None
    write_json(tmp / KEPT_STATE_NAME, dict(state))
    publish_dir(tmp, kept)
    return kept


def write_final(save_weights: Callable[[Path], None], processor: Any, final_dir: str | Path, info: Mapping[str, Any],
                is_main: bool, barrier: Callable[[], None], metrics: Path, run_dir: str | Path,
                state: Mapping[str, Any]) -> None:
    """Write the final model folder atomically (a half-written folder never carries the final name).

    Every rank calls ``save_weights`` into the staging folder (collective under ZeRO/FSDP); the main
    process adds the processor, ``olmpipe_train.json`` (``info``) and the run's record of trained pages
    (:mod:`olmpipe.job.trained`), publishes the folder, keeps its
    copy with ``state`` (:func:`keep`), then writes a copy of the run's ``metrics`` file (empty when
    nothing was logged) beside it (:func:`olmpipe.records.metrics.final_metrics_path`): the workflow
    declares that copy as an output, while the live file beside the checkpoints stays undeclared so
    that a failed job's cleanup never deletes what a resumed run continues.
    """
    final_dir = Path(final_dir)
    tmp = staging_path(final_dir)  # made fresh by the main process, filled by every rank
    if is_main:
        staging_dir(final_dir)
    barrier()
    try:
        save_weights(tmp)
        if is_main:
            publish_expert_layout(tmp)  # Qwen3-VL-MoE experts in the layout vLLM reads (no-op when dense)
            processor.save_pretrained(str(tmp))
            write_json(tmp / TRAIN_INFO_NAME, dict(info))
            record = Path(run_dir) / TRAINED_PAGES_NAME  # the pages these weights trained on (olmpipe.job.trained)
            if record.is_file():
                shutil.copy2(record, tmp / TRAINED_PAGES_NAME)
            publish_dir(tmp, final_dir)
    except BaseException:
        if is_main:  # no half-written staging folder stays behind (a rerun makes a fresh one anyway)
            shutil.rmtree(tmp, ignore_errors=True)
        raise
    if is_main:
        keep(final_dir, run_dir, state)
        atomic_write(final_metrics_path(final_dir), metrics.read_text(encoding="utf-8") if metrics.exists() else "")
    barrier()


def republish(kept: Kept, final_dir: str | Path, is_main: bool, barrier: Callable[[], None], metrics: Path) -> None:
    """Write ``final_dir`` again from the kept final model (hard links; a copy where refused) and the
    metrics copy beside it: what a rerun does when no checkpoint holds the run's end any more."""
    final_dir = Path(final_dir)
    if is_main:
        tmp = staging_dir(final_dir)
        try:
            _link_files(kept.path, tmp, skip=(KEPT_STATE_NAME,))
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(kept.path, tmp, ignore=lambda folder, names: [KEPT_STATE_NAME] if folder == str(
                kept.path) else [])
        publish_dir(tmp, final_dir)
        atomic_write(final_metrics_path(final_dir), metrics.read_text(encoding="utf-8") if metrics.exists() else "")
        logger.info("wrote %s again from the kept final model %s (step %d)", final_dir, kept.path, kept.step)
    barrier()


def copy_training_args(checkpoint: str | Path, folder: str | Path) -> None:
    """Copy a checkpoint's ``training_args.bin`` into ``folder``, as ``Trainer.save_model`` writes it
    beside a final model's weights (nothing when the checkpoint has none)."""
    source = Path(checkpoint) / TRAINING_ARGS_NAME
    if source.is_file():
        shutil.copy2(source, Path(folder) / TRAINING_ARGS_NAME)


def train_info(*, seed: int, base_model: str | Path, steps: int, reward_names: list[str] | None,
               reward_weights: list[float] | None, wandb_run_id: str | None, dataset: Mapping[str, Any],
               peft: Mapping[str, Any] | None, from_checkpoint: str | None = None) -> dict[str, Any]:
    """``olmpipe_train.json`` of a final model: seed, base model, steps, rewards, wandb run and dataset
    summary; ``from_checkpoint``, the checkpoint the folder was written from when training had already
    ended; with LoRA the adapter's settings (``peft``: ``train.peft`` as it trained the adapter) and
    the adapter folder beside ``model/`` (``adapter_sibling``: ``model/`` holds the base with the
    adapter merged)."""
    info: dict[str, Any] = {"seed": seed, "base_model": str(base_model), "steps": steps, "reward_names": reward_names,
                            "reward_weights": reward_weights, "wandb_run_id": wandb_run_id, "dataset": dict(dataset)}
    if from_checkpoint is not None:
        info["from_checkpoint"] = from_checkpoint
    if peft is not None and peft.get("enabled"):
        info.update(peft=dict(peft), adapter_sibling=ADAPTER_NAME)
    return info


def stored_peft(stored: Mapping[str, Any]) -> dict[str, Any] | None:
    """``train.peft`` as a checkpoint's ``olmpipe_run.json`` stored it (``peft``, written since the
    record existed; else rebuilt from its ``train.peft.*`` settings), None for full training."""
    if isinstance(stored.get("peft"), dict):
        return stored["peft"]
    settings = stored.get("settings") or {}
    prefix = "sft.peft." if any(k.startswith("sft.") for k in settings) else "train.peft."
    peft = {k.removeprefix(prefix): v for k, v in settings.items() if k.startswith(prefix)}
    return peft if peft.get("enabled") else None
