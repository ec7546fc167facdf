"""Which checkpoint a seed's run continues from, and what a changed setting does to it.

A checkpoint stores the run's *trajectory settings* (:func:`run_settings`: seed, base model, world
size and every knob that changes what is learned, as flat dotted keys) in ``olmpipe_run.json``.
``train.resume`` then decides:

- ``auto``: continue from the newest checkpoint when its settings equal today's; when they differ,
  stop with :class:`ResumeMismatchError` naming the changed keys and the two ways on. Settings that
  do not change the trajectory (logging, saving, vLLM memory share, activation checkpointing,
  scorer processes/timeout/memory, device, dtype, pure_bf16, wandb) are not compared.
- ``continue``: the newest checkpoint whatever its settings (a deliberate change, e.g. more steps).
- ``restart`` (or ``never``): start over; the previous run's files are moved aside to
  ``<run folder>.old-<time>/``, never deleted.
- a checkpoint folder: continue from it.

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

__all__ = ["RUN_STATE_FILE", "ResumeDecision", "ResumeMismatchError", "checkpoint_step", "checkpoints", "decide",
           "move_aside", "run_settings"]

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
#: Keys of ``rewards.bench`` that bound or place the scorer without changing verdicts of normal pages.
NOT_TRAJECTORY_BENCH = ("processes", "timeout_s", "memory_mb")


class ResumeMismatchError(RuntimeError):
    """The newest checkpoint was written with other trajectory settings (``resume: auto`` stops)."""


@dataclass(frozen=True)
class ResumeDecision:
    """``checkpoint`` to continue from (or None), and whether old files must first be moved aside."""

    checkpoint: Path | None
    move_aside: bool = False


def _flatten(value: Any, prefix: str, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping) and value:
        for key in sorted(value):
            _flatten(value[key], f"{prefix}.{key}" if prefix else str(key), out)
    else:
        out[prefix] = value


def run_settings(cfg: Mapping[str, Any], seed: int, model_path: str, world_size: int = 1, *,
                 knobs: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The settings that define a run's trajectory, as ``{"train.grpo.learning_rate": 2e-06, ...}``.

    ``knobs``: the seed's GRPO knobs as the job computed them (:func:`olmpipe.train.args.grpo_knobs`);
    computed here when not given.
    """
    from olmpipe.train.args import grpo_knobs

    train = {k: v for k, v in cfg["train"].items() if k not in NOT_TRAJECTORY_TRAIN and k != "grpo"}
    if not cfg["train"]["difficulty"]["enabled"]:
        # The difficulty filter changes the pages trained on only when on; off, its settings are
        # not compared (runs trained before it existed resume unchanged).
        del train["difficulty"]
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
    return json.loads(json.dumps(out, default=str))


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


def changed_keys(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Dotted keys whose value differs (or that exist on one side only), sorted; the base model is
    compared as a resolved path (:func:`_same_model`)."""
    def differs(key: str) -> bool:
        a, b = stored.get(key, "<unset>"), current.get(key, "<unset>")
        return not _same_model(a, b) if key == "model" else a != b

    return sorted(k for k in set(stored) | set(current) if differs(k))


def checkpoints(run_dir: str | Path) -> list[Path]:
    """The run's complete checkpoint folders, oldest step first; incomplete or unreadable ones are
    named in a warning (:func:`olmpipe.train.checkpoints.complete_checkpoints`)."""
    return complete_checkpoints(run_dir)


def _stored(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / RUN_STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _has_old_files(run_dir: Path) -> bool:
    return run_dir.is_dir() and any(p.name != LOCK_NAME for p in run_dir.iterdir())


def decide(resume: str, run_dir: str | Path, settings: Mapping[str, Any]) -> ResumeDecision:
    """The checkpoint to continue from for ``train.resume``; raises :class:`ResumeMismatchError`."""
    run_dir = Path(run_dir)
    if resume in ("restart", "never"):
        return ResumeDecision(None, move_aside=_has_old_files(run_dir))
    if resume not in ("auto", "continue"):
        path = Path(resume)
        reason = problem(path, require_marker=False)
        if reason is not None:
            raise FileNotFoundError(f"train.resume: {path} is not a checkpoint to continue from ({reason})")
        return ResumeDecision(path)
    found = checkpoints(run_dir)
    if not found:
        return ResumeDecision(None)
    newest = found[-1]
    if resume == "continue":
        return ResumeDecision(newest)
    stored = _stored(newest)
    if "settings" in stored:
        changed = changed_keys(stored["settings"], settings)
    elif stored.get("fingerprint") and stored["fingerprint"] != trajectory_fingerprint(settings):
        changed = ["(this checkpoint predates per-key settings; its fingerprint differs)"]
    else:
        changed = []
    if changed:
        shown = ", ".join(
            f"{k}: {stored.get('settings', {}).get(k, '?')!r} -> {settings.get(k, '<unset>')!r}"
            if "settings" in stored else k for k in changed[:12])
        more = f" and {len(changed) - 12} more" if len(changed) > 12 else ""
        raise ResumeMismatchError(
            f"{newest} was trained with other settings ({shown}{more}). Nothing was changed on disk. "
            f"Either continue that run with the new settings (train.resume: continue) or start over "
            f"(train.resume: restart; the old run is moved to {run_dir.name}.old-<time>/, not deleted)."
        )
    return ResumeDecision(newest)


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
