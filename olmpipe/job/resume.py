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
  but not another LoRA adapter shape (:func:`adapter_shape_changes`: its
  tensors would not load; :mod:`olmpipe.train.run` refuses before a model is loaded).
- ``restart`` (or ``never``): start over; the previous run's files are moved aside to
  ``<run folder>.old-<time>/``, never deleted.
- a checkpoint folder: continue from it.

Besides the config, the settings name the training set (``training_set.pages``/``.sha256``: the
train split's pages and test ids as the trainer builds them, :func:`olmpipe.job.data.training_set_id`),
so a resume on another page set stops like any changed key. A section that is off (``train.peft``,
``train.difficulty``) is left out on both sides of the comparison, so the checkpoints of a release
that did not have it resume unchanged; a key an older checkpoint lacks is compared with the value
every run had before it existed (:data:`IMPLIED_BEFORE`), or not at all when nothing was recorded
(the training set).

A finished run's final model is kept beside its checkpoints too (``model.kept/``, hard links,
:mod:`olmpipe.job.final`): Snakemake deletes a job's ``model/`` before it reruns the job, and a
rerun whose checkpoints are gone writes ``model/`` again from the kept copy instead of training
anew (:func:`decide` treats it as the run's last state). :func:`check_workflow_resume` runs the
``auto`` comparison when the workflow is planned, so that a changed setting stops Snakemake before
it deletes anything.

Only rank 0 moves files; :func:`decide` is read-only, so every rank computes the same decision.

The module is a little over 500 lines on purpose: the settings a checkpoint records, their
comparison and the refusal that explains it are one contract (what is compared is what the message
names, and what the workflow's plan-time check and the job's own check both decide), and splitting
them would put the two halves of each rule in two files.
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

from olmpipe.job.checkpoints import RUN_STATE_FILE, checkpoint_step, complete_checkpoints, nonfinite, problem
from olmpipe.job.kinds import GRPO, JobKind
from olmpipe.records.train import LOCK_NAME

__all__ = ["RUN_STATE_FILE", "LastState", "ResumeDecision", "ResumeMismatchError", "changed_keys",
           "check_workflow_resume", "checkpoint_step", "checkpoints", "decide", "last_state", "move_aside",
           "run_settings"]

logger = logging.getLogger(__name__)

#: Keys of ``train`` that do not change what is learned (logging, resume policy, where it runs).
NOT_TRAJECTORY_TRAIN = GRPO.not_trajectory
#: GRPOConfig knobs that change how a run is operated, not what it learns.
NOT_TRAJECTORY_GRPO = GRPO.not_trajectory_knobs
#: Keys of ``rewards.bench`` that bound or place the scorer without changing verdicts of normal pages,
#: or only set what is logged (``short_signal``: the bench/short_high_reward metric).
NOT_TRAJECTORY_BENCH = ("processes", "timeout_s", "memory_mb", "short_signal")
#: Sections that change what is learned only while switched on: (the switch, the section's key prefix).
#: Off, the section is left out of the settings, and of a stored checkpoint's before comparing.
OPTIONAL_SECTIONS = (("train.peft.enabled", "train.peft."), ("train.difficulty.enabled", "train.difficulty."),
                     ("sft.peft.enabled", "sft.peft."))
#: LoRA keys that matter only with ``train.peft.quantization`` (QLoRA) set.
QUANTIZATION_KEYS = ("peft.quant_type", "peft.double_quant")
#: The vision tower's LoRA targets, which matter only with ``train.peft.vision`` on (its default
#: changed from Qwen2.5-VL's list to null, the architecture's names, in 2c37768).
VISION_TARGETS_KEY = "peft.vision_target_modules"
#: The sections of the trainers' run settings (:mod:`olmpipe.job.kinds`): GRPO's and SFT's.
TRAINER_SECTIONS = ("train", "sft")
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
#: Key prefix of the training set's identity (:func:`olmpipe.job.data.training_set_id`): what the
#: trainer builds from the page index, known only in the job (not when the workflow is planned).
TRAINING_SET = "training_set"
#: Key prefix of the base model's identity (``base_model.weights``: :func:`olmpipe.models.folder.weights_fingerprint`
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
                 training_set: Mapping[str, Any] | None = None, base_model: str | None = None,
                 kind: JobKind = GRPO) -> dict[str, Any]:
    """The settings that define a run's trajectory, as ``{"train.grpo.learning_rate": 2e-06, ...}``.

    ``kind``: the trainer (:mod:`olmpipe.job.kinds`): its section, minus the keys that do not change
    what is learned, with its TRL knobs (``knobs``: the seed's, as the job computed them with
    :meth:`~olmpipe.job.kinds.JobKind.knobs`; computed here when not given), and the ``rewards``
    section when the kind trains on rewards. ``training_set``: the identity of the examples the
    trainer built (``{"pages": 12, "sha256": ...}``, :func:`olmpipe.job.data.training_set_id`), stored
    as ``training_set.<key>``; the job passes it, the workflow's plan-time check cannot
    (:func:`check_workflow_resume`). ``base_model``: the base folder's weights fingerprint
    (:func:`olmpipe.models.folder.weights_fingerprint`), stored as ``base_model.weights``.
    """
    section = kind.section_of(cfg)
    kept = {k: v for k, v in section.items() if k not in kind.not_trajectory and k != kind.knobs_key}
    knobs = kind.knobs(section, seed) if knobs is None else knobs
    trainer = {k: v for k, v in knobs.items() if k not in kind.not_trajectory_knobs}
    kept.update(kind.extra_settings(section, knobs))
    tree: dict[str, Any] = {kind.section: {**kept, kind.knobs_key: trainer}}
    if kind.rewards:
        rewards = json.loads(json.dumps(dict(cfg["rewards"]), default=str))
        rewards["bench"] = {k: v for k, v in rewards["bench"].items() if k not in NOT_TRAJECTORY_BENCH}
        tree["rewards"] = rewards
    out: dict[str, Any] = {"seed": seed, "model": str(model_path), "world_size": int(world_size)}
    _flatten(tree, "", out)
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
    for section in TRAINER_SECTIONS:
        if out.get(f"{section}.peft.quantization") == "none":
            for key in QUANTIZATION_KEYS:
                out.pop(f"{section}.{key}", None)
        if out.get(f"{section}.peft.vision") is False:
            out.pop(f"{section}.{VISION_TARGETS_KEY}", None)
    if all(out.get(f"rewards.weights.{name}") is None for name in MAX_CHARS_REWARDS):
        out.pop("rewards.max_chars", None)
    return out


def section_of(settings: Mapping[str, Any]) -> str:
    """The trainer's config section a run's settings belong to (``train`` for GRPO, ``sft``)."""
    return "sft" if any(k.startswith("sft.") for k in settings) else "train"


def _kind_of(settings: Mapping[str, Any]) -> JobKind:
    from olmpipe.job.kinds import KINDS

    return next(k for k in KINDS.values() if k.section == section_of(settings))


#: ``train.peft`` keys that change the adapter's tensors: a checkpoint's adapter fits only the same values.
ADAPTER_SHAPE_KEYS = ("enabled", "r", "target_modules", "vision", "vision_target_modules", "modules_to_save", "dora")


def adapter_shape_changes(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """The ``train.peft`` keys among :data:`ADAPTER_SHAPE_KEYS` whose values differ between two run
    settings (:func:`run_settings`; LoRA off on one side counts as ``enabled``)."""
    a, b = comparable(stored), comparable(current)
    peft = f"{section_of(current)}.peft"
    if a.get(f"{peft}.enabled", False) != b.get(f"{peft}.enabled", False):
        return [f"{peft}.enabled"]  # an adapter against none: the other keys follow
    keys = [f"{peft}.{k}" for k in ADAPTER_SHAPE_KEYS]
    return [k for k in keys if a.get(k, "<unset>") != b.get(k, "<unset>")]


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
    """The run's complete checkpoint folders, oldest step first; incomplete or unreadable ones, and
    the newest ones whose weights are not finite, are named in a warning
    (:func:`olmpipe.job.checkpoints.complete_checkpoints`)."""
    return complete_checkpoints(run_dir, values=True)


def _stored(checkpoint: Path) -> dict[str, Any]:
    path = checkpoint / RUN_STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}


def _has_old_files(run_dir: Path) -> bool:
    return run_dir.is_dir() and any(p.name != LOCK_NAME for p in run_dir.iterdir())


def last_state(run_dir: str | Path, *, warn: bool = True, values: bool = False) -> LastState | None:
    """The state a resume goes on from (:class:`LastState`), None for a run with neither checkpoint
    nor kept final model. On a tie the checkpoint wins (it can also be trained on). ``values``: skip
    the newest checkpoints whose weights are not finite (:func:`olmpipe.job.checkpoints.nonfinite`;
    the job does, the workflow's plan-time check does not read weights)."""
    from olmpipe.job.final import read_kept

    found = complete_checkpoints(run_dir, warn=warn, values=values)
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


def stored_model(state: LastState) -> str:
    """The base model folder a run's checkpoint or kept model records (``?`` when it has none)."""
    return str(state.stored.get("settings", {}).get("model", "?"))


def mismatch_message(state: LastState, settings: Mapping[str, Any], changed: list[str], run_dir: Path, *,
                     planned: bool = False, final_dir: str | Path | None = None) -> str:
    """What :class:`ResumeMismatchError` says: the changed keys, what happened on disk (true in
    every case: planned by the workflow, run by a job whose ``model/`` Snakemake deleted, run by
    hand) and the two ways on."""
    from olmpipe.job.final import read_kept

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
    kind = _kind_of(settings)
    steps_key = f"{kind.section}.{kind.knobs_key}.max_steps"
    max_steps = settings.get(steps_key)
    if "model" in changed or any(k.startswith(f"{BASE_MODEL}.") for k in changed):
        # another base model: its checkpoint cannot be continued (other shapes or weights); the two ways
        # on are going back to that model, which reruns nothing, or a fresh run beside the old one
        return text + (f" Either go back to the model this run was trained from ({stored_model(state)}: its model.* "
                       "settings; nothing is then trained again) or start over with this one "
                       f"({kind.section}.resume: restart; the old run is moved to {run_dir.name}.old-<time>/, not "
                       f"deleted, and moving it back to {run_dir.name}/ later resumes it).")
    if isinstance(max_steps, int) and 0 < max_steps <= state.step:  # finished: `continue` trains nothing
        go_on = (f"keep that run's model as it is ({kind.section}.resume: continue; it is at step {state.step} of "
                 f"{steps_key} {max_steps}, so the new settings train nothing unless max_steps grows)")
    else:
        go_on = f"continue that run with the new settings ({kind.section}.resume: continue)"
    return text + (f" Either {go_on} or start over "
                   f"({kind.section}.resume: restart; the old run is moved to {run_dir.name}.old-<time>/, not deleted).")


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
        reason = reason if reason is not None else nonfinite(path)
        if reason is not None:
            raise FileNotFoundError(f"{section_of(settings)}.resume: {path} is not a checkpoint to continue from "
                                    f"({reason})")
        return ResumeDecision(path)
    state = last_state(run_dir, values=True)
    if state is None:
        return ResumeDecision(None)
    if "settings" in state.stored and not any(k.startswith(f"{TRAINING_SET}.") for k in state.stored["settings"]):
        logger.warning("%s predates the record of the training set: its pages are not compared", state.path)
    changed = _changes(state, settings)
    if changed and resume == "auto":
        raise ResumeMismatchError(mismatch_message(state, settings, changed, run_dir, final_dir=final_dir))
    if changed:
        logger.warning("%s.resume: continue: %s was trained with other settings (%s); going on with these",
                       section_of(settings), state.path, _shown(state, settings, changed))
    return ResumeDecision(None, kept=state.path) if state.kept else ResumeDecision(state.path)


def check_workflow_resume(cfg: Mapping[str, Any], seed: int, model_path: str | Path, gpus: int,
                          run_dir: str | Path, kind: JobKind = GRPO) -> None:
    """Raise :class:`ResumeMismatchError` when the ``train_seed`` job of ``seed`` would stop on its run
    folder (``train.resume: auto`` and a last state trained with other settings).

    Called when the workflow is planned (``workflow/rules/common.smk``), so that Snakemake stops
    before it deletes the job's ``model/`` to rerun it. The settings are those the job computes:
    its config (:func:`olmpipe.job.jobconfig.seed_config`, validated as the job validates it),
    ``model_path`` as the job gets it and its world size (:func:`olmpipe.launch.plan` of ``gpus``
    and ``resources.train``); the training set is left to the job (its page index may not exist yet).
    """
    from olmpipe.config import validate_config
    from olmpipe.config.processes import plan
    from olmpipe.job.jobconfig import seed_config_json
    from olmpipe.models.folder import weights_fingerprint

    if kind.section_of(cfg)["resume"] != "auto":
        return
    state = last_state(run_dir, warn=False)
    if state is None:  # nothing to resume (every fresh plan): the job's config is not even read
        return
    job = validate_config(json.loads(seed_config_json(cfg, seed, kind)))
    res = cfg["resources"][kind.section]
    world_size = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    base = weights_fingerprint(model_path) if Path(model_path).is_dir() else None  # None: not built yet
    settings = run_settings(job, seed, str(model_path), world_size, base_model=base, kind=kind)
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


# ------------------------------------------------------------------ the resume step of a job


@dataclass(frozen=True)
class JobResume:
    """Where a job starts: the resume :class:`ResumeDecision`, and the run settings (and their
    fingerprint) every checkpoint it writes stores."""

    decision: ResumeDecision
    settings: dict[str, Any]
    fingerprint: str

    @property
    def checkpoint(self) -> Path | None:
        return self.decision.checkpoint

    @property
    def step(self) -> int:
        """The step the job starts at (0, or its checkpoint's)."""
        return checkpoint_step(self.decision.checkpoint) if self.decision.checkpoint is not None else 0


def resume_job(setup: Any, training_set: Mapping[str, Any]) -> JobResume:
    """The resume step of a training job (``setup``: :class:`olmpipe.job.setup.JobSetup`): its run
    settings (the training set's ``identity`` and the base folder's weights fingerprint included),
    then :func:`decide` for ``<section>.resume`` -- rank 0 moves an old run aside when starting over,
    after every rank has decided -- then the newest checkpoint instead of a kept final model that
    holds fewer steps than ``max_steps`` asks for, and a refusal to go on with another adapter shape.
    Raises :class:`ResumeMismatchError`."""
    from olmpipe.job.distributed import world_size
    from olmpipe.models.folder import weights_fingerprint

    settings = run_settings(setup.cfg, setup.seed, str(setup.model_path), world_size(), knobs=setup.knobs,
                            training_set=training_set, base_model=weights_fingerprint(setup.model_path),
                            kind=setup.kind)
    decision = resolve_decision(setup.section["resume"], setup.run_dir, settings, setup.final_dir)
    decision = train_on_from_checkpoint(decision, setup.run_dir, setup.max_steps)
    check_adapter_shape(decision, settings, setup.run_dir)
    return JobResume(decision, settings, trajectory_fingerprint(settings))


def resolve_decision(resume: str, run_dir: str | Path, settings: dict[str, Any],
                     final_dir: str | Path | None = None) -> ResumeDecision:
    """:func:`decide` on every rank; then rank 0 moves an old run aside when starting over."""
    from olmpipe.job.distributed import barrier, rank

    decision = decide(resume, run_dir, settings, final_dir=final_dir)
    barrier()
    if decision.move_aside and rank() == 0:
        move_aside(run_dir)
    barrier()
    return decision


def train_on_from_checkpoint(decision: ResumeDecision, run_dir: Path, max_steps: int) -> ResumeDecision:
    """The newest complete checkpoint instead of the kept final model when ``max_steps`` asks for more
    training than the kept model had (``train.resume: continue``): a run whose last checkpoint was
    damaged or deleted, but not the ones before it, trains on from those (was: refused as if every
    checkpoint were gone)."""
    from olmpipe.job.final import read_kept

    if decision.kept is None or max_steps <= 0:
        return decision
    kept, found = read_kept(run_dir), checkpoints(run_dir)
    if kept is None or kept.step >= max_steps or not found:
        return decision
    logger.warning("%s is at step %d of max_steps %d and holds no optimizer state: training on from %s, the "
                   "newest complete checkpoint", kept.path, kept.step, max_steps, found[-1])
    return ResumeDecision(found[-1])


def check_adapter_shape(decision: ResumeDecision, settings: Mapping[str, Any], run_dir: Path) -> None:
    """Refuse to go on from a state whose adapter has another shape than ``train.peft`` asks for
    (``train.resume: continue`` or a checkpoint named explicitly): mid-run its adapter would not load
    (:class:`olmpipe.job.peft.AdapterLoadError`), at its end the final model would be the old adapter
    recorded as another. Checked before any model is loaded."""
    from olmpipe.records.train import KEPT_STATE_NAME

    state = decision.checkpoint or decision.kept
    if state is None:
        return
    path = state / RUN_STATE_FILE if decision.checkpoint is not None else state / KEPT_STATE_NAME
    stored = json.loads(path.read_text(encoding="utf-8")).get("settings") if path.is_file() else None
    changed = adapter_shape_changes(stored, settings) if isinstance(stored, dict) else []
    if changed:
        def value(side: Mapping[str, Any], key: str) -> Any:
            return side.get(key, False if key.endswith(".peft.enabled") else "<unset>")  # off: left out

        shown = ", ".join(f"{k}: {value(stored, k)!r} -> {value(settings, k)!r}" for k in changed)
        raise ResumeMismatchError(
            f"{state} holds an adapter of another shape ({shown}): a run can go on with other settings, not "
            f"with another adapter. Set {', '.join(changed)} back, or start over ({section_of(settings)}.resume: "
            f"restart; the old "
            f"run is moved to {run_dir.name}.old-<time>/, not deleted).")
