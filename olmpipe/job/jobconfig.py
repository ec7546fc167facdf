"""A seed's training job config: what the ``train_seed`` and ``sft_seed`` rules pass to the job.

:func:`seed_config` is the config a training job receives: the sections training reads, reduced to
that seed, so that adding a seed to ``train.seeds`` or changing another seed's override does not
rerun the seeds already trained. :func:`trained_config` is the part of it that changes the weights
the job writes, the rule's rerun trigger: the settings of how a run is checkpointed, logged and
operated (``resume``, ``wandb``, ``exit_with_job``, ``reward_error_steps``, ``save_steps``,
``logging_steps``, ``rewards.bench.processes``/``timeout_s``, ``model.name``, ...: :data:`OPERATIONAL`
and the kind's ``not_trajectory_knobs``) are left out. The job still receives them through a param
Snakemake does not record (a params function taking ``resources`` is a derived param:
``snakemake/rules.py`` 925-934, ``snakemake/persistence/__init__.py`` 789-795), so a changed logging
interval reruns nothing, and applies the next time the seed's job runs. What a changed setting does
to a checkpoint is :mod:`olmpipe.job.resume`'s (``run_settings``, ``trajectory_fingerprint``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

from olmpipe.job.kinds import GRPO, JobKind

__all__ = ["OPERATIONAL", "OPERATIONAL_BENCH", "rewards_trigger_json", "seed_config", "seed_config_json", "trained_config", "trained_config_json"]

#: Sections of the config a training job reads.
TRAIN_SECTIONS = ("model", "rewards", "train")
#: ... an SFT job's.
SFT_SECTIONS = ("model", "sft")
#: Keys of a trainer's section that change how a run is operated, checkpointed and logged, not the
#: weights it writes (the kind's ``not_trajectory`` minus what does: ``device``, ``dtype``,
#: ``pure_bf16``; ``seeds`` and ``seed_overrides`` are reduced to the seed by :func:`seed_config`).
OPERATIONAL = ("resume", "wandb", "completions_every", "exit_with_job", "reward_error_steps", "eval_max_pages",
               "vllm_server")
#: ``rewards.bench`` keys that bound the scoring workers or set a logged signal, not the rewards
#: (:data:`olmpipe.job.resume.NOT_TRAJECTORY_BENCH`).
OPERATIONAL_BENCH = ("processes", "timeout_s", "memory_mb", "short_signal")


def seed_config(config: Mapping[str, Any], seed: int, kind: JobKind = GRPO) -> dict[str, Any]:
    """The config sections of one seed's job: ``seeds`` is ``[seed]`` and only its overrides remain.

    Site resources (``resources.train``: memory, walltime, partition) are left out, so that moving
    to another cluster or asking for more time retrains nothing; the job gets its CPU count through
    ``--threads`` and its process count through the launch command (a rule parameter of its own).
    """
    out = {name: deepcopy(config[name]) for name in (TRAIN_SECTIONS if kind is GRPO else SFT_SECTIONS)}
    own = out[kind.section]
    own["seeds"] = [seed]
    own["seed_overrides"] = [o for o in own["seed_overrides"] if o["seed"] == seed]
    for section in ("difficulty", "peft") if kind is GRPO else ("peft",):
        if not own[section]["enabled"]:
            # Off, the difficulty filter's and LoRA's settings change nothing in training: a job
            # config (and so a trained seed) stays what it was before they existed, and editing
            # them reruns nothing. On, they are part of the run's settings (olmpipe.job.resume).
            del own[section]
    return out


def seed_config_json(config: Mapping[str, Any], seed: int, kind: JobKind = GRPO) -> str:
    """:func:`seed_config` as compact, key-sorted JSON (stable, so Snakemake's params compare equal)."""
    return json.dumps(seed_config(config, seed, kind), sort_keys=True, separators=(",", ":"))


def trained_config(config: Mapping[str, Any], seed: int, kind: JobKind = GRPO) -> dict[str, Any]:
    """:func:`seed_config` without what does not change the weights the job writes (see the module
    docstring): the rule's rerun trigger. ``train.vllm_server.logprobs_mode`` stays (in server mode
    the server's log-probs weigh the loss: :meth:`olmpipe.job.kinds.JobKind.extra_settings`)."""
    out = seed_config(config, seed, kind)
    own = out[kind.section]
    knobs = own[kind.knobs_key]
    kept = kind.extra_settings(own, kind.knobs(own, seed))
    for key in OPERATIONAL:
        own.pop(key, None)
    own.update(kept)
    own[kind.knobs_key] = {k: v for k, v in knobs.items() if k not in kind.not_trajectory_knobs}
    own["seed_overrides"] = [
        {**o, kind.knobs_key: {k: v for k, v in o.get(kind.knobs_key, {}).items() if k not in kind.not_trajectory_knobs}}
        for o in own["seed_overrides"]
    ]
    out["model"] = {k: v for k, v in out["model"].items() if k != "name"}
    if "rewards" in out:
        out["rewards"]["bench"] = {k: v for k, v in out["rewards"]["bench"].items() if k not in OPERATIONAL_BENCH}
    return out


def trained_config_json(config: Mapping[str, Any], seed: int, kind: JobKind = GRPO) -> str:
    """:func:`trained_config` as compact, key-sorted JSON (stable, so Snakemake's params compare equal)."""
    return json.dumps(trained_config(config, seed, kind), sort_keys=True, separators=(",", ":"), default=str)


def rewards_trigger_json(config: Mapping[str, Any]) -> str:
    """The ``rewards`` section without :data:`OPERATIONAL_BENCH`, as stable JSON: the rerun trigger of
    a rule that scores with the rewards (``validate_audit``), which receives the whole section through
    a derived param."""
    rewards = deepcopy(dict(config["rewards"]))
    rewards["bench"] = {k: v for k, v in rewards["bench"].items() if k not in OPERATIONAL_BENCH}
    return json.dumps(rewards, sort_keys=True, separators=(",", ":"), default=str)
