"""A seed's training job config: what the ``train_seed`` rule passes to the job.

:func:`seed_config` is the config a ``train_seed`` job receives (its ``params``): the sections
training reads, reduced to that seed, so that adding a seed to ``train.seeds`` or changing another
seed's override does not rerun the seeds already trained. What a changed setting does to a
checkpoint is :mod:`olmpipe.job.resume`'s (``run_settings``, ``trajectory_fingerprint``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

from olmpipe.job.kinds import GRPO, JobKind

#: Sections of the config a training job reads.
TRAIN_SECTIONS = ("model", "rewards", "train")
#: ... an SFT job's.
SFT_SECTIONS = ("model", "sft")


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
