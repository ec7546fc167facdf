"""One seed's GRPO run: dataset, rewards, TRL ``GRPOTrainer``, logging, checkpoints, resume, SIGTERM.

Layout of a run folder (``results/train/seed{seed}/``)::

    checkpoint-{step}/      TRL/transformers checkpoints (+ olmpipe_run.json: seed, step, wandb id); with
                            LoRA (train.peft) the adapter instead of the model's weights
    adapter/                LoRA only: the final adapter (PEFT folder), written before model/
    model/                  the final weights + processor (the Snakemake output; written last); with
                            LoRA the base model with the adapter merged (olmpipe.train.peft)
    model.metrics.jsonl     a copy of metrics.jsonl written after model/ (also an output)
    metrics.jsonl|csv       every logged step (continued, not duplicated, across resumes)
    completions/            step{N}.jsonl: page, completion, rewards, advantage, verdicts
    dataset.json            pages used and skipped
    wandb/, wandb_run_id    the wandb run (offline by default)
    train_summary.json      TRL's end-of-training summary

Exit codes of :func:`train_seed`: 0 finished (final model written), :data:`EXIT_PREEMPTED` (75)
stopped by SIGTERM after writing a checkpoint (run again with ``resume: auto`` to continue). A run
that cannot learn raises :class:`olmpipe.train.health.TrainingStopped` (a reward failing on every
completion, a non-finite loss or weight; ``python -m olmpipe.train`` exits with its code, 3 or 4).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import uuid
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from olmpipe.records.files import write_json
from olmpipe.records.metrics import METRICS_JSONL, truncate_metrics
from olmpipe.records.train import DATASET_NAME, KEPT_STATE_NAME, WANDB_ID_NAME
from olmpipe.train.callbacks import (
    EXIT_PREEMPTED,
    CompletionsTable,
    MetricsFiles,
    RunState,
    StopOnSignal,
)
from olmpipe.train.resume import (
    RUN_STATE_FILE,
    ResumeDecision,
    ResumeMismatchError,
    checkpoint_step,
    checkpoints,
    decide,
    move_aside,
)
from olmpipe.train.runlock import ParentWatch, RunLock
from olmpipe.train.signals import SignalFlag, StoppedBeforeTraining

__all__ = ["checkpoints", "resolve_resume", "train_seed"]

logger = logging.getLogger(__name__)

WANDB_ID_FILE = WANDB_ID_NAME


def _rank() -> int:
    return int(os.environ.get("RANK", "0"))


def _world_size() -> int:
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
    if _world_size() > 1:
        from datetime import timedelta

        from accelerate import PartialState

        PartialState(timeout=timedelta(seconds=timeout_s))


def _barrier() -> None:
    """Wait for every rank (no-op in a single process)."""
    if _world_size() > 1:
        from accelerate import PartialState

        PartialState().wait_for_everyone()


def resolve_resume(resume: str, run_dir: str | Path, settings: dict[str, Any]) -> Path | None:
    """The checkpoint to continue from (see :mod:`olmpipe.train.resume`); rank 0 moves an old run
    aside when starting over, after every rank has decided."""
    return _resolve(resume, run_dir, settings).checkpoint


def _resolve(resume: str, run_dir: str | Path, settings: dict[str, Any],
             final_dir: str | Path | None = None) -> ResumeDecision:
    decision = decide(resume, run_dir, settings, final_dir=final_dir)
    _barrier()
    if decision.move_aside and _rank() == 0:
        move_aside(run_dir)
    _barrier()
    return decision


def _stored_run_id(checkpoint: Path) -> str | None:
    path = checkpoint / RUN_STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")).get("wandb_run_id") if path.exists() else None


def _wandb_run_id(run_dir: Path, checkpoint: Path | None) -> str:
    """The wandb run id: the checkpoint's when resuming, else the run folder's, else a new one."""
    stored = _stored_run_id(checkpoint) if checkpoint is not None else None
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


def _check_adapter_shape(decision: ResumeDecision, settings: Mapping[str, Any], run_dir: Path) -> None:
    """Refuse to go on from a state whose adapter has another shape than ``train.peft`` asks for
    (``train.resume: continue`` or a checkpoint named explicitly): mid-run its adapter would not load
    (:class:`olmpipe.train.peft.AdapterLoadError`), at its end the final model would be the old adapter
    recorded as another. Checked before any model is loaded."""
    from olmpipe.train.peft import adapter_shape_changes

    state = decision.checkpoint or decision.kept
    if state is None:
        return
    path = state / RUN_STATE_FILE if decision.checkpoint is not None else state / KEPT_STATE_NAME
    stored = json.loads(path.read_text(encoding="utf-8")).get("settings") if path.is_file() else None
    changed = adapter_shape_changes(stored, settings) if isinstance(stored, dict) else []
    if changed:
        def value(side: Mapping[str, Any], key: str) -> Any:
            return side.get(key, False if key == "train.peft.enabled" else "<unset>")  # off: left out

        shown = ", ".join(f"{k}: {value(stored, k)!r} -> {value(settings, k)!r}" for k in changed)
        raise ResumeMismatchError(
            f"{state} holds an adapter of another shape ({shown}): a run can go on with other settings, not "
            f"with another adapter. Set {', '.join(changed)} back, or start over (train.resume: restart; the old "
            f"run is moved to {run_dir.name}.old-<time>/, not deleted).")


def _train_on_from_checkpoint(decision: ResumeDecision, run_dir: Path, max_steps: int) -> ResumeDecision:
    """The newest complete checkpoint instead of the kept final model when ``max_steps`` asks for more
    training than the kept model had (``train.resume: continue``): a run whose last checkpoint was
    damaged or deleted, but not the ones before it, trains on from those (was: refused as if every
    checkpoint were gone)."""
    from olmpipe.train.final import read_kept

    if decision.kept is None or max_steps <= 0:
        return decision
    kept, found = read_kept(run_dir), checkpoints(run_dir)
    if kept is None or kept.step >= max_steps or not found:
        return decision
    logger.warning("%s is at step %d of max_steps %d and holds no optimizer state: training on from %s, the "
                   "newest complete checkpoint", kept.path, kept.step, max_steps, found[-1])
    return ResumeDecision(found[-1])


def _finish_from_kept(run_dir: Path, final_dir: Path, max_steps: int) -> int:
    """Write the final model again from the run's kept copy (no checkpoint holds the run's end any
    more: :mod:`olmpipe.train.final`); refused when ``max_steps`` asks for more training."""
    from olmpipe.train.final import read_kept, republish

    kept = read_kept(run_dir)
    if 0 < max_steps and kept.step < max_steps:
        raise ResumeMismatchError(
            f"{kept.path} holds this run's final model at step {kept.step}, and no complete checkpoint is left to train on "
            f"to max_steps {max_steps}. Set train.grpo.max_steps back to {kept.step} to write "
            f"{final_dir} from it, or start over (train.resume: restart; the old run is moved to "
            f"{run_dir.name}.old-<time>/, not deleted).")
    if _rank() == 0:
        truncate_metrics(run_dir, kept.step)
    republish(kept, final_dir, _rank() == 0, _barrier, run_dir / METRICS_JSONL)
    return 0


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
    signal_flag: SignalFlag | None = None,
) -> int:
    """Train one seed; returns 0 when finished or :data:`EXIT_PREEMPTED` when stopped by SIGTERM.

    ``signal_flag``: the SIGTERM handler, installed by the caller as early as it can
    (:mod:`olmpipe.train.signals`; ``python -m olmpipe.train`` does it before its heavy imports);
    by default it is installed here, first thing. Until training starts a SIGTERM stops the run at
    once (exit 75, nothing to checkpoint); then it checkpoints after the current step.

    ``reward_funcs``/``reward_weights`` replace the configured rewards (tests use this for a task
    the tiny model can learn); by default they come from ``cfg["rewards"]``. Rank 0 holds the run
    folder's lock (:class:`olmpipe.train.runlock.RunLock`) for the whole run; raises
    :class:`~olmpipe.train.runlock.RunLockedError` when another trainer holds it and
    :class:`~olmpipe.train.resume.ResumeMismatchError` when the newest checkpoint was trained
    with other settings (``resume: auto``).
    """
    flag = signal_flag if signal_flag is not None else SignalFlag().install()
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    lock = RunLock(run_dir).acquire() if _rank() == 0 else None
    watch = ParentWatch.for_this_process().start() if cfg["train"]["exit_with_job"] else None
    try:
        flag.begin_loading()
        return _train_locked(cfg, seed=seed, model_path=model_path, pages=pages, tests_dir=tests_dir,
                             run_dir=run_dir, final_dir=final_dir, reward_funcs=reward_funcs,
                             reward_weights=reward_weights, flag=flag)
    except StoppedBeforeTraining as exc:
        logger.warning("%s", exc)
        return EXIT_PREEMPTED
    finally:
        flag.end_loading()
        if watch is not None:
            watch.stop()
        if lock is not None:
            lock.release()
        if signal_flag is None:
            flag.restore()


def _train_locked(
    cfg: Mapping[str, Any],
    *,
    seed: int,
    model_path: str | Path,
    pages: str | Path,
    tests_dir: str | Path,
    run_dir: Path,
    final_dir: str | Path | None,
    reward_funcs: list[Callable[..., list[float | None]]] | None,
    reward_weights: list[float] | None,
    flag: SignalFlag,
) -> int:
    import torch

    from olmpipe.layout import final_model_dir
    from olmpipe.modelfolder import weights_fingerprint
    from olmpipe.modelload import load_model_and_processor
    from olmpipe.rewards import build_rewards
    from olmpipe.train.args import grpo_config, grpo_knobs, resolve_device
    from olmpipe.train.data import build_examples, check_generation_batch, to_dataset, training_set_id
    from olmpipe.train.final import copy_training_args, stored_peft, train_info, write_final
    from olmpipe.train.health import RewardErrors, StopOnNonFinite, StopOnRewardErrors
    from olmpipe.train.peft import check_model, check_setup, lora_config, quantization_config
    from olmpipe.train.precision import resolve_precision, restore_fp32_masters, save_final_weights
    from olmpipe.train.preflight import check_job
    from olmpipe.train.resume import comparable, run_settings, trajectory_fingerprint
    from olmpipe.train.trainer import ResumableGRPOTrainer, load_checkpoint_weights
    from olmpipe.train.vllm_server import (
        ManagedVLLMServer,
        collective_timeout_problem,
        server_devices,
        wants_server,
    )

    tcfg, rcfg = cfg["train"], cfg["rewards"]
    final_dir = Path(final_dir if final_dir is not None else final_model_dir(run_dir))
    device = resolve_device(tcfg["device"])
    # what this device or the model cannot train, before anything is built or loaded (also checked
    # when Snakemake plans the job: olmpipe.train.preflight)
    check_job(cfg, device, model_path)
    # float32 master weights with bf16 compute unless train.pure_bf16 (olmpipe.train.precision)
    precision = resolve_precision(tcfg, device)
    if precision.weights == "bfloat16" and any(os.environ.get(f"ACCELERATE_USE_{name}", "").lower() == "true"
                                               for name in ("DEEPSPEED", "FSDP")):
        logger.warning("train.pure_bf16 has no effect under DeepSpeed or FSDP, which keep float32 master weights")
    if device == "cpu":
        torch.set_num_threads(cfg["resources"]["train"]["cpus_per_task"])

    knobs = grpo_knobs(tcfg, seed)
    problem = collective_timeout_problem(tcfg, knobs, _world_size())
    if problem:
        raise ValueError(problem)
    init_distributed(knobs["ddp_timeout"])
    peft_cfg = tcfg["peft"]
    check_setup(peft_cfg, device, knobs)
    # The training set first: its identity is a run setting (a resume on other pages stops).
    examples, summary = build_examples(
        pages, tests_dir, split="train", types=rcfg["bench"]["types"], jsonl_regex=rcfg["bench"]["jsonl_regex"],
        reference_candidate=rcfg["reference_candidate"], max_pages=tcfg["max_pages"],
    )
    settings = run_settings(cfg, seed, str(model_path), _world_size(), knobs=knobs,
                            training_set=training_set_id(examples), base_model=weights_fingerprint(model_path))
    fingerprint = trajectory_fingerprint(settings)
    decision = _resolve(tcfg["resume"], run_dir, settings, final_dir)
    max_steps = knobs["max_steps"]
    decision = _train_on_from_checkpoint(decision, run_dir, max_steps)
    checkpoint = decision.checkpoint
    _check_adapter_shape(decision, settings, run_dir)
    if decision.kept is not None:
        return _finish_from_kept(run_dir, final_dir, max_steps)
    step = checkpoint_step(checkpoint) if checkpoint is not None else 0
    if checkpoint is not None:
        logger.info("resuming from %s (step %d)", checkpoint, step)
    if _rank() == 0:
        truncate_metrics(run_dir, step)
        write_json(run_dir / DATASET_NAME, summary.to_dict())
    dataset = to_dataset(examples)
    eval_dataset = None
    if knobs.get("eval_strategy", "no") != "no":
        # Evaluation during training: the eval split's pages, rewarded like training (TRL logs
        # eval_reward, eval_rewards/<name>/mean, ... at each eval_steps).
        eval_examples, eval_summary = build_examples(
            pages, tests_dir, split="eval", types=rcfg["bench"]["types"], jsonl_regex=rcfg["bench"]["jsonl_regex"],
            reference_candidate=rcfg["reference_candidate"], max_pages=tcfg["eval_max_pages"],
        )
        eval_dataset = to_dataset(eval_examples)
        logger.info("evaluating during training on %d eval pages", eval_summary.pages)

    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    # LoRA: the frozen base in the compute dtype (bf16 on GPUs, or quantized); only the adapter
    # trains, and PEFT keeps it in float32: it is its own master copy (olmpipe.train.peft).
    weights_dtype = precision.compute if peft_cfg["enabled"] else precision.weights
    model, processor = load_model_and_processor(
        model_path, dtype=weights_dtype, device=f"cuda:{local_rank}" if device == "cuda" else "cpu",
        quantization_config=quantization_config(peft_cfg, precision.compute) if peft_cfg["enabled"] else None,
    )
    logger.info("precision: %s weights%s, %s compute, %s reference model", weights_dtype,
                " (frozen base; float32 adapter)" if peft_cfg["enabled"] else "", precision.compute,
                "the adapter disabled" if peft_cfg["enabled"] else precision.reference)
    model.train()
    # LoRA: TRL wraps the model (train/peft.py); the adapter's initial weights follow the seed.
    peft_config = None
    if peft_cfg["enabled"]:
        check_model(peft_cfg, model, knobs)
        peft_config = lora_config(peft_cfg, model.config.model_type)

    rewards = None
    if reward_funcs is None:
        eos = model.generation_config.eos_token_id
        extra_eos = [eos] if isinstance(eos, int) else list(eos or [])
        rewards = build_rewards(rcfg, tokenizer=processor, extra_eos_ids=extra_eos)
        reward_funcs, reward_weights = rewards.funcs, rewards.weights
    weights = list(reward_weights) if reward_weights is not None else [1.0] * len(reward_funcs)
    names = [getattr(f, "__name__", type(f).__name__) for f in reward_funcs]
    # what trained the weights, beside the settings in every checkpoint (a final model written from it says so)
    peft_info = dict(peft_cfg) if peft_cfg["enabled"] else None
    record = {"reward_names": names, "reward_weights": weights, "dataset": summary.to_dict(), "peft": peft_info}

    if checkpoint is not None and 0 < max_steps <= step:
        # The checkpoint already holds the whole run: training on would pass max_steps (and rotate
        # older checkpoints away). Its weights become the final model (a DeepSpeed checkpoint's float32
        # masters, not its bf16 module copy), recorded with what the checkpoint stored of its run.
        logger.info("%s is at step %d of max_steps %d: writing the final model from it", checkpoint, step, max_steps)
        if rewards is not None:
            rewards.close()
        stored = json.loads((checkpoint / RUN_STATE_FILE).read_text(encoding="utf-8"))
        # what trained these weights: the checkpoint's record (older checkpoints: the rewards and
        # dataset of today's config, as before the record existed)
        info = train_info(seed=seed, base_model=model_path, steps=step, reward_names=stored.get("reward_names", names),
                          reward_weights=stored.get("reward_weights", weights),
                          wandb_run_id=stored.get("wandb_run_id"), dataset=stored.get("dataset", record["dataset"]),
                          peft=stored_peft(stored), from_checkpoint=checkpoint.name)
        state = {"steps": step, "settings": comparable(stored.get("settings") or settings)}
        if peft_config is not None:
            from olmpipe.train.peft import adapter_and_merged_writer, copy_checkpoint_adapter

            save_weights = adapter_and_merged_writer(
                lambda path: copy_checkpoint_adapter(checkpoint, path) if _rank() == 0 else None,
                processor, model_path, final_dir, _rank() == 0, _barrier)
        else:
            # only rank 0 writes; a DeepSpeed checkpoint written on a stop has no weights copy
            if _rank() == 0 and not restore_fp32_masters(model, checkpoint):
                load_checkpoint_weights(model, checkpoint)

            def save_weights(path: Path) -> None:
                if _rank() == 0:
                    model.save_pretrained(str(path))
                    copy_training_args(checkpoint, path)

        write_final(save_weights, processor, final_dir, info, _rank() == 0, _barrier, run_dir / METRICS_JSONL,
                    run_dir, state)
        return 0

    # every reward reports the completions it could not score (olmpipe.train.health)
    reward_errors = RewardErrors()
    weighted = [name for name, w in zip(names, weights, strict=True) if w]

    wandb_on = tcfg["wandb"]["mode"] != "disabled"
    run_id = _wandb_run_id(run_dir, checkpoint) if wandb_on and _rank() == 0 else None
    stack = contextlib.ExitStack()
    wandb_run = None
    try:
        overrides = {}
        if wants_server(knobs) and _rank() == 0:
            # vllm_mode: server -- this job starts `trl vllm-serve` on the GPUs the launcher left to
            # it (olmpipe.train.vllm_server); TRL 1.16 talks to it from the main process only.
            server = stack.enter_context(ManagedVLLMServer(cfg, model_path, run_dir,
                                                           gpus=server_devices(os.environ), knobs=knobs))
            overrides = server.grpo_overrides()
        args = grpo_config(knobs, output_dir=str(run_dir), seed=seed, reward_weights=weights, device=device,
                           dtype=precision.compute, reference_dtype=precision.reference,
                           report_to=["wandb"] if wandb_on else [], overrides=overrides)
        check_generation_batch(len(dataset), args.generation_batch_size, args.num_generations)
        wandb_run = _init_wandb(cfg, run_dir, run_id, seed) if run_id is not None else None
        trainer = ResumableGRPOTrainer(model=model, reward_funcs=reward_errors.wrap(reward_funcs), args=args,
                                       train_dataset=dataset, eval_dataset=eval_dataset, processing_class=processor,
                                       peft_config=peft_config)
        stopper = StopOnSignal(flag, trainer)
        failing = StopOnRewardErrors(reward_errors, weighted, tcfg["reward_error_steps"], trainer)
        for callback in (StopOnNonFinite(trainer), MetricsFiles(run_dir),
                         CompletionsTable(trainer, run_dir, tcfg["completions_every"]),
                         RunState(seed, run_id, fingerprint, settings, knobs.get("save_total_limit"), record),
                         stopper, failing):
            trainer.add_callback(callback)
        flag.end_loading()  # from here a SIGTERM checkpoints after the current step (StopOnSignal)
        trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint is not None else None)
        if failing.stop is not None:
            raise failing.stop
        if stopper.stopped_at is not None:
            logger.warning("stopped by signal after step %d; checkpoint written, exiting with %d",
                           stopper.stopped_at, EXIT_PREEMPTED)
            if wandb_run is not None:
                wandb_run.mark_preempting()
            return EXIT_PREEMPTED
        info = train_info(seed=seed, base_model=model_path, steps=trainer.state.global_step, reward_names=names,
                          reward_weights=weights, wandb_run_id=run_id, dataset=record["dataset"], peft=peft_info)
        main, barrier = trainer.accelerator.is_main_process, trainer.accelerator.wait_for_everyone
        save_weights = lambda path: save_final_weights(trainer, path)
        if peft_config is not None:
            from olmpipe.train.peft import adapter_and_merged_writer

            # the adapter (float32 masters under DeepSpeed too), then the base with it merged
            save_weights = adapter_and_merged_writer(save_weights, None, model_path, final_dir, main, barrier)
        write_final(save_weights, processor, final_dir, info, main, barrier, run_dir / METRICS_JSONL, run_dir,
                    {"steps": trainer.state.global_step, "settings": settings})
        logger.info("finished seed %d at step %d; final model in %s", seed, trainer.state.global_step, final_dir)
        return 0
    finally:
        stack.close()
        if rewards is not None:
            rewards.close()
        if wandb_run is not None:
            wandb_run.finish()
