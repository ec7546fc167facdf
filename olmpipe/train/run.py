"""One seed's GRPO run: dataset, rewards, TRL ``GRPOTrainer``, logging, checkpoints, resume, SIGTERM.

Layout of a run folder (``results/train/seed{seed}/``)::

    checkpoint-{step}/      TRL/transformers checkpoints (+ olmpipe_run.json: seed, step, wandb id)
    model/                  the final weights + processor (the Snakemake output; written last)
    metrics.jsonl|csv       every logged step (continued, not duplicated, across resumes)
    completions/            step{N}.jsonl: page, completion, rewards, advantage, verdicts
    dataset.json            pages used and skipped
    wandb/, wandb_run_id    the wandb run (offline by default)
    train_summary.json      TRL's end-of-training summary

Exit codes of :func:`train_seed`: 0 finished (final model written), :data:`EXIT_PREEMPTED` (75)
stopped by SIGTERM after writing a checkpoint (run again with ``resume: auto`` to continue).
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from olmpipe.train.callbacks import (
    EXIT_PREEMPTED,
    METRICS_CSV,
    METRICS_JSONL,
    RUN_STATE_FILE,
    CompletionsTable,
    MetricsFiles,
    RunState,
    SignalFlag,
    StopOnSignal,
    truncate_metrics,
)

logger = logging.getLogger(__name__)

WANDB_ID_FILE = "wandb_run_id"


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's checkpoint folders, oldest step first."""
    found = []
    for path in Path(run_dir).glob("checkpoint-*"):
        suffix = path.name.split("-", 1)[1]
        if path.is_dir() and suffix.isdigit() and (path / "trainer_state.json").exists():
            found.append((int(suffix), path))
    return [p for _, p in sorted(found)]


def resolve_resume(resume: str, run_dir: Path, fingerprint: str | None = None) -> Path | None:
    """The checkpoint to continue from for ``train.resume`` (``auto``, ``never`` or a folder).

    With ``auto``, the newest checkpoint is used only when it was written by a run with the same
    ``fingerprint`` (:func:`olmpipe.train.workflow.run_fingerprint`); otherwise the old run's files
    are removed and training starts over.
    """
    if resume == "auto":
        found = checkpoints(run_dir)
        if not found:
            return None
        state_file = found[-1] / RUN_STATE_FILE
        stored = json.loads(state_file.read_text(encoding="utf-8")).get("fingerprint") if state_file.exists() else None
        if fingerprint is not None and stored is not None and stored != fingerprint:
            logger.warning("%s was written with other settings (fingerprint %s, now %s): starting over",
                           found[-1], stored, fingerprint)
            if _rank() == 0:
                _start_over(run_dir)
            return None
        return found[-1]
    if resume == "never":
        return None
    path = Path(resume)
    if not (path / "trainer_state.json").exists():
        raise FileNotFoundError(f"train.resume: {path} is not a checkpoint folder (no trainer_state.json)")
    return path


def _start_over(run_dir: Path) -> None:
    """``resume: never``: remove what a previous run left, so that a later ``auto`` cannot mix runs."""
    for path in checkpoints(run_dir):
        shutil.rmtree(path)
    for name in (METRICS_JSONL, METRICS_CSV, WANDB_ID_FILE):
        (run_dir / name).unlink(missing_ok=True)
    shutil.rmtree(run_dir / "completions", ignore_errors=True)


def _wandb_run_id(run_dir: Path, checkpoint: Path | None) -> str:
    """The wandb run id: the checkpoint's when resuming, else the run folder's, else a new one."""
    if checkpoint is not None and (checkpoint / RUN_STATE_FILE).exists():
        stored = json.loads((checkpoint / RUN_STATE_FILE).read_text(encoding="utf-8")).get("wandb_run_id")
        if stored:
            return stored
    id_file = run_dir / WANDB_ID_FILE
    if checkpoint is not None and id_file.exists():
        return id_file.read_text(encoding="utf-8").strip()
    run_id = uuid.uuid4().hex[:12]
    id_file.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def _init_wandb(cfg: Mapping[str, Any], run_dir: Path, run_id: str, seed: int) -> Any:
    import wandb

    wcfg = cfg["train"]["wandb"]
    return wandb.init(
        project=wcfg["project"],
        entity=wcfg["entity"],
        id=run_id,
        resume="allow",
        mode=wcfg["mode"],
        dir=str(run_dir),
        name=f"{cfg['model']['name']}-seed{seed}",
        config={"seed": seed, "train": cfg["train"], "rewards": cfg["rewards"], "model": cfg["model"]},
    )


def _save_final(trainer: Any, processor: Any, final_dir: Path, info: dict[str, Any]) -> None:
    """Write the final model folder atomically (a half-written folder never carries the final name)."""
    tmp = final_dir.with_name(final_dir.name + ".tmp")
    if trainer.accelerator.is_main_process:
        shutil.rmtree(tmp, ignore_errors=True)
    trainer.accelerator.wait_for_everyone()
    trainer.save_model(str(tmp))
    if trainer.accelerator.is_main_process:
        processor.save_pretrained(str(tmp))
        (tmp / "olmpipe_train.json").write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        shutil.rmtree(final_dir, ignore_errors=True)
        os.replace(tmp, final_dir)


def train_seed(
    cfg: Mapping[str, Any],
    *,
    seed: int,
    model_path: str | Path,
    pages: str | Path,
    tests_dir: str | Path,
    run_dir: str | Path,
    final_dir: str | Path | None = None,
    reward_funcs: list[Callable[..., list[float | None]]] | None = None,
    reward_weights: list[float] | None = None,
) -> int:
    """Train one seed; returns 0 when finished or :data:`EXIT_PREEMPTED` when stopped by SIGTERM.

    ``reward_funcs``/``reward_weights`` replace the configured rewards (tests use this for a task
    the tiny model can learn); by default they come from ``cfg["rewards"]``.
    """
    import torch
    from trl import GRPOTrainer

    from olmpipe.rewards import build_rewards
    from olmpipe.tinymodel import load_model_and_processor
    from olmpipe.train.args import grpo_config, resolve_device, resolve_dtype
    from olmpipe.train.data import build_examples, to_dataset
    from olmpipe.train.workflow import run_fingerprint

    tcfg, rcfg = cfg["train"], cfg["rewards"]
    run_dir = Path(run_dir)
    final_dir = Path(final_dir) if final_dir is not None else run_dir / "model"
    run_dir.mkdir(parents=True, exist_ok=True)
    device = resolve_device(tcfg["device"])
    dtype = resolve_dtype(tcfg["dtype"], device)
    if device == "cpu":
        torch.set_num_threads(cfg["resources"]["train"]["cpus_per_task"])

    fingerprint = run_fingerprint(cfg, seed, str(model_path))
    if tcfg["resume"] == "never" and _rank() == 0:
        _start_over(run_dir)
    checkpoint = resolve_resume(tcfg["resume"], run_dir, fingerprint)
    if checkpoint is not None:
        step = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))["global_step"]
        logger.info("resuming from %s (step %d)", checkpoint, step)
        if _rank() == 0:
            truncate_metrics(run_dir, step)
    elif _rank() == 0:
        truncate_metrics(run_dir, 0)

    examples, summary = build_examples(
        pages, tests_dir, split="train", types=rcfg["bench"]["types"], jsonl_regex=rcfg["bench"]["jsonl_regex"],
        reference_candidate=rcfg["reference_candidate"], max_pages=tcfg["max_pages"],
    )
    if _rank() == 0:
        (run_dir / "dataset.json").write_text(json.dumps(summary.to_dict(), indent=2) + "\n", encoding="utf-8")
    dataset = to_dataset(examples)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    model, processor = load_model_and_processor(
        model_path, dtype=dtype, device=f"cuda:{local_rank}" if device == "cuda" else "cpu"
    )
    model.train()
    rewards = None
    if reward_funcs is None:
        eos = model.generation_config.eos_token_id
        extra_eos = [eos] if isinstance(eos, int) else list(eos or [])
        rewards = build_rewards(rcfg, tokenizer=processor, extra_eos_ids=extra_eos)
        reward_funcs, reward_weights = rewards.funcs, rewards.weights
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)

    wandb_on = tcfg["wandb"]["mode"] != "disabled"
    run_id = _wandb_run_id(run_dir, checkpoint) if wandb_on and _rank() == 0 else None
    args = grpo_config(tcfg, output_dir=str(run_dir), seed=seed, reward_weights=weights, device=device,
                       dtype=dtype, report_to=["wandb"] if wandb_on else [])
    wandb_run = _init_wandb(cfg, run_dir, run_id, seed) if run_id is not None else None
    flag = SignalFlag().install()
    try:
        trainer = GRPOTrainer(model=model, reward_funcs=reward_funcs, args=args, train_dataset=dataset,
                              processing_class=processor)
        stopper = StopOnSignal(flag, trainer)
        for callback in (MetricsFiles(run_dir), CompletionsTable(trainer, run_dir, tcfg["completions_every"]),
                         RunState(seed, run_id, fingerprint), stopper):
            trainer.add_callback(callback)
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
        if stopper.stopped_at is not None:
            logger.warning("stopped by signal after step %d; checkpoint written, exiting with %d",
                           stopper.stopped_at, EXIT_PREEMPTED)
            if wandb_run is not None:
                wandb_run.mark_preempting()
            return EXIT_PREEMPTED
        info = {"seed": seed, "base_model": str(model_path), "steps": trainer.state.global_step,
                "reward_names": [getattr(f, "__name__", type(f).__name__) for f in reward_funcs],
                "reward_weights": weights, "wandb_run_id": run_id, "dataset": summary.to_dict()}
        _save_final(trainer, processor, final_dir, info)
        logger.info("finished seed %d at step %d; final model in %s", seed, trainer.state.global_step, final_dir)
        return 0
    finally:
        flag.restore()
        if rewards is not None:
            rewards.close()
        if wandb_run is not None:
            wandb_run.finish()
