"""Which checkpoint a seed's run continues from, and what a changed setting does to it.

A checkpoint stores the run's *trajectory settings* (:func:`run_settings`: seed, base model, world
size and every knob that changes what is learned, as flat dotted keys) in ``olmpipe_run.json``.
``train.resume`` then decides:

- ``auto``: continue from the newest checkpoint when its settings equal today's; when they differ,
  stop with :class:`ResumeMismatchError` naming the changed keys and the two ways on. Settings that
  do not change the trajectory (logging, saving, vLLM memory share, activation checkpointing,
  scorer processes/timeout/memory, ddp_timeout, reward_error_steps, device, dtype, pure_bf16,
  wandb) are not compared.
- ``continue``: the newest checkpoint whatever its settings (a deliberate change, e.g. more steps),
  but not another LoRA adapter shape (:func:`olmpipe.train.peft.adapter_shape_changes`: its
  tensors would not load; :mod:`olmpipe.train.run` refuses before a model is loaded).
- ``restart`` (or ``never``): start over; the previous run's files are moved aside to
  ``<run folder>.old-<time>/``, never deleted.
- a checkpoint folder: continue from it.

Besides the config, the settings name the training set (``training_set.pages``/``.sha256``: the
train split's pages and test ids as the trainer builds them, :func:`olmpipe.train.data.training_set_id`),
so a resume on another page set stops like any changed key. A section that is off (``train.peft``,
``train.difficulty``) is left out on both sides of the comparison, so the checkpoints of a release
that did not have it resume unchanged; a key an older checkpoint lacks is compared with the value
every run had before it existed (:data:`IMPLIED_BEFORE`), or not at all when nothing was recorded
(the training set).

A finished run's final model is kept beside its checkpoints too (``model.kept/``, hard links,
:mod:`olmpipe.train.final`): Snakemake deletes a job's ``model/`` before it reruns the job, and a
rerun whose checkpoints are gone writes ``model/`` again from the kept copy instead of training
anew (:func:`decide` treats it as the run's last state). :func:`check_workflow_resume` runs the
``auto`` comparison when the workflow is planned, so that a changed setting stops Snakemake before
it deletes anything.

Only rank 0 moves files; :func:`decide` is read-only, so every rank computes the same decision.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.records.train import LOCK_NAME
from olmpipe.train.checkpoints import RUN_STATE_FILE, checkpoint_step, complete_checkpoints, problem

__all__ = ["RUN_STATE_FILE", "LastState", "ResumeDecision", "ResumeMismatchError", "changed_keys",
           "check_workflow_resume", "checkpoint_step", "checkpoints", "decide", "last_state", "move_aside",
           "run_settings"]

logger = logging.getLogger(__name__)

#: Keys of ``train`` that do not change what is learned (logging, resume policy, where it runs).
NOT_TRAJECTORY_TRAIN = ("resume", "wandb", "completions_every", "seeds", "seed_overrides", "device", "dtype",
                        "pure_bf16", "exit_with_job", "vllm_server", "eval_max_pages", "reward_error_steps")
#: GRPOConfig knobs that change how a run is operated, not what it learns.
NOT_TRAJECTORY_GRPO = (
    "save_steps", "save_total_limit", "save_strategy", "save_only_model", "logging_steps", "logging_first_step",
    "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
    "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
    "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "vllm_max_model_length",
    "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing",
    "activation_checkpointing_kwargs", "vllm_group_port",
    "log_completions", "num_completions_to_print", "log_unique_prompts", "report_to", "run_name",
    "eval_steps", "eval_strategy", "eval_delay", "eval_on_start", "per_device_eval_batch_size", "num_generations_eval",
    "eval_accumulation_steps", "torch_empty_cache_steps",
    "ddp_timeout", "disable_tqdm",
)
#: Keys of ``rewards.bench`` that bound or place the scorer without changing verdicts of normal pages,
#: or only set what is logged (``short_signal``: the bench/short_high_reward metric).
NOT_TRAJECTORY_BENCH = ("processes", "timeout_s", "memory_mb", "short_signal")
#: Sections that change what is learned only while switched on: (the switch, the section's key prefix).
#: Off, the section is left out of the settings, and of a stored checkpoint's before comparing.
OPTIONAL_SECTIONS = (("train.peft.enabled", "train.peft."), ("train.difficulty.enabled", "train.difficulty."))
#: LoRA keys that matter only with ``train.peft.quantization`` (QLoRA) set.
QUANTIZATION_KEYS = ("train.peft.quant_type", "train.peft.double_quant")
#: The vision tower's LoRA targets, which matter only with ``train.peft.vision`` on (its default
#: changed from Qwen2.5-VL's list to null, the architecture's names, in 2c37768).
VISION_TARGETS_KEY = "train.peft.vision_target_modules"
#: Rewards that read ``rewards.max_chars``; with none of them selected it is not compared.
MAX_CHARS_REWARDS = ("edit_distance", "medoid")
#: Keys that checkpoints written before the key existed lack, and the value every run had then: such a
#: checkpoint is compared as if it stored it (a missing key would otherwise read as a change).
IMPLIED_BEFORE: Mapping[str, Any] = {
    # TRL 1.16's `trl vllm-serve` always passed --logprobs-mode processed_logprobs
    # (trl/scripts/vllm_serve.py:270-272) before train.vllm_server.logprobs_mode could override it
    "train.vllm_server.logprobs_mode": "processed_logprobs",
    # the unit-test reward had no short-answer guard (olmpipe/bench/shortguard.py) before the key
    "rewards.bench.short_answer_guard": False,
}
#: Key prefix of the training set's identity (:func:`olmpipe.train.data.training_set_id`): what the
#: trainer builds from the page index, known only in the job (not when the workflow is planned).
TRAINING_SET = "training_set"
#: Key prefix of the base model's identity (``base_model.weights``: :func:`olmpipe.modelfolder.weights_fingerprint`
#: of the ``model`` folder). ``model`` is a path; the folder at it can hold another model than the one a
#: checkpoint grew from (the embedded model rebuilt with other ``model.tiny`` settings or builder code, a
#: local folder overwritten), and continuing would train, or finish, the old run as if on the new base.
BASE_MODEL = "base_model"
#: Prefixes that checkpoints written before they existed do not record at all: not compared then.
RECORDED_LATER = (TRAINING_SET, BASE_MODEL)


class ResumeMismatchError(RuntimeError):
    """The newest checkpoint was written with other trajectory settings (``resume: auto`` stops)."""


@dataclass(frozen=True)
class ResumeDecision:
    """``checkpoint`` to continue from (or None), whether old files must first be moved aside, and
    ``kept``: the kept final model to write ``model/`` from when no checkpoint holds the run's end."""

    checkpoint: Path | None
    move_aside: bool = False
    kept: Path | None = None


@dataclass(frozen=True)
class LastState:
    """Where a run stands: its newest complete checkpoint, or its kept final model (``model.kept/``)
    when that is further along (the checkpoints were deleted); ``stored`` is the checkpoint's
    ``olmpipe_run.json`` or the kept model's ``olmpipe_kept.json`` (both hold ``settings``)."""

    path: Path
    step: int
    stored: Mapping[str, Any]
    kept: bool = False


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def run_settings(cfg: Mapping[str, Any], seed: int, model_path: str, world_size: int = 1, *,
                 knobs: Mapping[str, Any] | None = None,
                 training_set: Mapping[str, Any] | None = None, base_model: str | None = None) -> dict[str, Any]:
    """The settings that define a run's trajectory, as ``{"train.grpo.learning_rate": 2e-06, ...}``.

    ``knobs``: the seed's GRPO knobs as the job computed them (:func:`olmpipe.train.args.grpo_knobs`);
    computed here when not given. ``training_set``: the identity of the examples the trainer built
    (``{"pages": 12, "sha256": ...}``, :func:`olmpipe.train.data.training_set_id`), stored as
    ``training_set.<key>``; the job passes it, the workflow's plan-time check cannot
    (:func:`check_workflow_resume`). ``base_model``: the base folder's weights fingerprint
    (:func:`olmpipe.modelfolder.weights_fingerprint`), stored as ``base_model.weights``.
    """
    from olmpipe.train.args import grpo_knobs

    train = {k: v for k, v in cfg["train"].items() if k not in NOT_TRAJECTORY_TRAIN and k != "grpo"}
    knobs = grpo_knobs(cfg["train"], seed) if knobs is None else knobs
    grpo = {k: v for k, v in knobs.items() if k not in NOT_TRAJECTORY_GRPO}
    if knobs["use_vllm"] and knobs["vllm_mode"] == "server":
        # the server's log-probs weigh every token of the loss (docs/recipe.md); the rest of
        # vllm_server only places and bounds the server
        train["vllm_server"] = {"logprobs_mode": cfg["train"]["vllm_server"]["logprobs_mode"]}
    rewards = json.loads(json.dumps(dict(cfg["rewards"]), default=str))
    rewards["bench"] = {k: v for k, v in rewards["bench"].items() if k not in NOT_TRAJECTORY_BENCH}
    out: dict[str, Any] = {"seed": seed, "model": str(model_path), "world_size": int(world_size)}
    _flatten({"train": {**train, "grpo": grpo}, "rewards": rewards}, "", out)
    if training_set is not None:
        _flatten({TRAINING_SET: dict(training_set)}, "", out)
    if base_model is not None:
        out[f"{BASE_MODEL}.weights"] = base_model
    return comparable(json.loads(json.dumps(out, default=str)))


def comparable(settings: Mapping[str, Any]) -> dict[str, Any]:
    """``settings`` without what cannot change the trajectory as set: a section that is off
    (:data:`OPTIONAL_SECTIONS`: LoRA and the difficulty filter, so that runs trained before they
    existed resume unchanged), QLoRA's keys without quantization, ``rewards.max_chars`` without a
    reward that reads it, the vision tower's LoRA targets without ``train.peft.vision``. Applied to
    the stored side too, so a checkpoint that recorded such keys compares equal to settings that
    leave them out."""
    out = dict(settings)
    for switch, prefix in OPTIONAL_SECTIONS:
        if out.get(switch) is False:
            out = {k: v for k, v in out.items() if not k.startswith(prefix)}
    if out.get("train.peft.quantization") == "none":
        for key in QUANTIZATION_KEYS:
            out.pop(key, None)
    if out.get("train.peft.vision") is False:
        out.pop(VISION_TARGETS_KEY, None)
    if all(out.get(f"rewards.weights.{name}") is None for name in MAX_CHARS_REWARDS):
        out.pop("rewards.max_chars", None)
    return out


def trajectory_fingerprint(settings: Mapping[str, Any]) -> str:
    """Short stable hash of a run's trajectory settings (:func:`run_settings`), stored in each checkpoint."""
    return hashlib.sha256(json.dumps(settings, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _same_model(a: Any, b: Any) -> bool:
    """The same base model: equal, or paths that resolve to the same place (``results/model/tiny``
    and its absolute path, or a symbolic link to it; a relative path is read from the working
    directory, as the trainer reads it)."""
    if a == b:
        return True
    return isinstance(a, str) and isinstance(b, str) and os.path.realpath(a) == os.path.realpath(b)


def changed_keys(stored: Mapping[str, Any], current: Mapping[str, Any], *, ignore: tuple[str, ...] = ()) -> list[str]:
    """Dotted keys whose value differs (or that exist on one side only), sorted.

    Both sides are made :func:`comparable`; the base model is compared as a resolved path
    (:func:`_same_model`); a key the stored side lacks counts with its :data:`IMPLIED_BEFORE` value;
    keys under a prefix of :data:`RECORDED_LATER` that the stored side does not record, or under a
    prefix of ``ignore``, are not compared.
    """
    stored, current = comparable(stored), comparable(current)
    for key, value in IMPLIED_BEFORE.items():
        if key in current and key not in stored:
            stored[key] = value
    unrecorded = tuple(p for p in RECORDED_LATER if not any(k.startswith(f"{p}.") for k in stored))
    skip = tuple(f"{p}." for p in (*ignore, *unrecorded))

    def differs(key: str) -> bool:
        a, b = stored.get(key, "<unset>"), current.get(key, "<unset>")
        return not _same_model(a, b) if key == "model" else a != b

    return sorted(k for k in set(stored) | set(current) if not k.startswith(skip) and differs(k))


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoint folders, oldest step first; incomplete or unreadable ones are
    named in a warning (:func:`olmpipe.train.checkpoints.complete_checkpoints`)."""
    return complete_checkpoints(run_dir)


def _stored(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / RUN_STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _has_old_files(run_dir: Path) -> bool:
    return run_dir.is_dir() and any(p.name != LOCK_NAME for p in run_dir.iterdir())


def last_state(run_dir: str | Path, *, warn: bool = True) -> LastState | None:
    """The state a resume goes on from (:class:`LastState`), None for a run with neither checkpoint
    nor kept final model. On a tie the checkpoint wins (it can also be trained on)."""
    from olmpipe.train.final import read_kept

    found = complete_checkpoints(run_dir, warn=warn)
    newest = LastState(found[-1], checkpoint_step(found[-1]), _stored(found[-1])) if found else None
    kept = read_kept(run_dir)
    if kept is not None and (newest is None or kept.step > newest.step):
        return LastState(kept.path, kept.step, kept.info, kept=True)
    return newest


def _changes(state: LastState, settings: Mapping[str, Any], ignore: tuple[str, ...] = ()) -> list[str]:
    stored = state.stored
    if "settings" in stored:
        return changed_keys(stored["settings"], settings, ignore=ignore)
    if stored.get("fingerprint") and stored["fingerprint"] != trajectory_fingerprint(settings):
        return ["(this checkpoint predates per-key settings; its fingerprint differs)"]
    return []


def _shown(state: LastState, settings: Mapping[str, Any], changed: list[str]) -> str:
    if "settings" not in state.stored:
        return ", ".join(changed)
    stored = state.stored["settings"]
    shown = ", ".join(f"{k}: {stored.get(k, IMPLIED_BEFORE.get(k, '?'))!r} -> {settings.get(k, '<unset>')!r}"
                      for k in changed[:12])
    return shown + (f" and {len(changed) - 12} more" if len(changed) > 12 else "")


def mismatch_message(state: LastState, settings: Mapping[str, Any], changed: list[str], run_dir: Path, *,
                     planned: bool = False, final_dir: str | Path | None = None) -> str:
    """What :class:`ResumeMismatchError` says: the changed keys, what happened on disk (true in
    every case: planned by the workflow, run by a job whose ``model/`` Snakemake deleted, run by
    hand) and the two ways on."""
    from olmpipe.train.final import read_kept

    what = f"{state.path} (the run's kept final model)" if state.kept else str(state.path)
    text = f"{what} was trained with other settings ({_shown(state, settings, changed)})."
    if any(k.startswith(f"{TRAINING_SET}.") for k in changed):
        text += (f" {TRAINING_SET}.* is the train split's pages and test ids as the trainer builds them from the "
                 "page index (after the difficulty filter, train.max_pages and rewards.bench's filters).")
    if any(k.startswith(f"{BASE_MODEL}.") for k in changed):
        text += (f" {BASE_MODEL}.weights identifies the weights in {settings.get('model')}: that folder now holds "
                 "another model than the one this run was trained from (rebuilt with other model.tiny settings or "
                 "builder code, or replaced).")
    kept = read_kept(run_dir)
    if planned:
        # jobs upstream of this one may have run already (Snakemake evaluates the check when it schedules train_seed)
        text += " Snakemake stopped before running this seed's training job: nothing of its run was deleted or changed."
    elif final_dir is not None and not Path(final_dir).exists() and kept is not None:
        text += (f" This job changed nothing on disk, but {final_dir} is gone (Snakemake deletes a job's outputs "
                 f"before it reruns the job); the run's finished model (step {kept.step}) is kept in {kept.path}")
        text += (f": with the settings it was trained with, the job writes {final_dir} again." if kept.step >= state.step
                 else ".")
    else:
        text += " Nothing was changed on disk."
    max_steps = settings.get("train.grpo.max_steps")
    if isinstance(max_steps, int) and 0 < max_steps <= state.step:  # finished: `continue` trains nothing
        go_on = (f"keep that run's model as it is (train.resume: continue; it is at step {state.step} of "
                 f"train.grpo.max_steps {max_steps}, so the new settings train nothing unless max_steps grows)")
    else:
        go_on = "continue that run with the new settings (train.resume: continue)"
    return text + (f" Either {go_on} or start over "
                   f"(train.resume: restart; the old run is moved to {run_dir.name}.old-<time>/, not deleted).")


def decide(resume: str, run_dir: str | Path, settings: Mapping[str, Any], *,
           final_dir: str | Path | None = None) -> ResumeDecision:
    """The checkpoint to continue from for ``train.resume`` (or the kept final model to write the final
    model from); raises :class:`ResumeMismatchError`. ``final_dir``: the run's final model folder,
    named in the error when it is gone."""
    run_dir = Path(run_dir)
    if resume in ("restart", "never"):
        return ResumeDecision(None, move_aside=_has_old_files(run_dir))
    if resume not in ("auto", "continue"):
        path = Path(resume)
        reason = problem(path, require_marker=False)
        if reason is not None:
            raise FileNotFoundError(f"train.resume: {path} is not a checkpoint to continue from ({reason})")
        return ResumeDecision(path)
    state = last_state(run_dir)
    if state is None:
        return ResumeDecision(None)
    if "settings" in state.stored and not any(k.startswith(f"{TRAINING_SET}.") for k in state.stored["settings"]):
        logger.warning("%s predates the record of the training set: its pages are not compared", state.path)
    changed = _changes(state, settings)
    if changed and resume == "auto":
        raise ResumeMismatchError(mismatch_message(state, settings, changed, run_dir, final_dir=final_dir))
    if changed:
        logger.warning("train.resume: continue: %s was trained with other settings (%s); going on with these",
                       state.path, _shown(state, settings, changed))
    return ResumeDecision(None, kept=state.path) if state.kept else ResumeDecision(state.path)


def check_workflow_resume(cfg: Mapping[str, Any], seed: int, model_path: str | Path, gpus: int,
                          run_dir: str | Path) -> None:
    """Raise :class:`ResumeMismatchError` when the ``train_seed`` job of ``seed`` would stop on its run
    folder (``train.resume: auto`` and a last state trained with other settings).

    Called when the workflow is planned (``workflow/rules/common.smk``), so that Snakemake stops
    before it deletes the job's ``model/`` to rerun it. The settings are those the job computes:
    its config (:func:`olmpipe.train.jobconfig.seed_config`, validated as the job validates it),
    ``model_path`` as the job gets it and its world size (:func:`olmpipe.launch.plan` of ``gpus``
    and ``resources.train``); the training set is left to the job (its page index may not exist yet).
    """
    from olmpipe.config import validate_config
    from olmpipe.modelfolder import weights_fingerprint
    from olmpipe.process_plan import plan
    from olmpipe.train.jobconfig import seed_config_json

    if cfg["train"]["resume"] != "auto":
        return
    state = last_state(run_dir, warn=False)
    if state is None:  # nothing to resume (every fresh plan): the job's config is not even read
        return
    job = validate_config(json.loads(seed_config_json(cfg, seed)))
    res = cfg["resources"]["train"]
    world_size = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    base = weights_fingerprint(model_path) if Path(model_path).is_dir() else None  # None: not built yet
    settings = run_settings(job, seed, str(model_path), world_size, base_model=base)
    changed = _changes(state, settings, ignore=(TRAINING_SET,) if base is not None else (TRAINING_SET, BASE_MODEL))
    if changed:
        raise ResumeMismatchError(mismatch_message(state, settings, changed, Path(run_dir), planned=True))


def move_aside(run_dir: str | Path) -> Path | None:
    """Move every file of a previous run into ``<run_dir>.old-<time>/`` (returns it; None if empty)."""
    run_dir = Path(run_dir)
    if not _has_old_files(run_dir):
        return None
    stamp = time.strftime("%Y%m%d-%H%M%S")
    target = run_dir.with_name(f"{run_dir.name}.old-{stamp}")
    n = 1
    while target.exists():
        target = run_dir.with_name(f"{run_dir.name}.old-{stamp}-{n}")
        n += 1
    target.mkdir(parents=True)
    for path in run_dir.iterdir():
        if path.name != LOCK_NAME:
            os.replace(path, target / path.name)
    logger.warning("moved the previous run of %s aside to %s", run_dir, target)
    return target
