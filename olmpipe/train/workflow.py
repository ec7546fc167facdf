"""What the Snakemake train rules pass to a seed's job, and what makes a checkpoint resumable.

:func:`seed_config` is the config a ``train_seed`` job receives (its ``params``): the sections
training reads, reduced to that seed, so that adding a seed to ``train.seeds`` or changing another
seed's override does not rerun the seeds already trained. :func:`run_fingerprint` hashes the
settings that define a run; ``resume: auto`` continues a checkpoint only when its fingerprint
matches, so a rerun after a hyperparameter change starts over instead of silently continuing the
old run.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

#: Modules whose source reruns a training job when edited (``params: code`` of the train rule): the
#: trainer, the rewards and the prompt. The unit-test engine (``olmpipe.bench``) is left out on
#: purpose, as validate leaves out the scorer: a refactor there must not throw away days of GPU
#: training; after a change of test semantics retrain with ``snakemake -R train_seed``.
TRAIN_CODE = ("olmpipe.train", "olmpipe.rewards", "olmpipe.prompts")
#: Sections of the config a training job reads.
TRAIN_SECTIONS = ("model", "rewards", "train")
#: Keys of ``train`` that do not change what is trained (logging, resume policy).
NOT_IN_FINGERPRINT = ("resume", "wandb", "completions_every", "seeds", "seed_overrides")
#: GRPOConfig knobs that change how a run is operated, not what it learns.
OPERATIONAL_GRPO = ("save_steps", "save_total_limit", "logging_steps", "dataloader_num_workers",
                    "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout")


def seed_config(config: Mapping[str, Any], seed: int) -> dict[str, Any]:
    """The config sections of one seed's job: ``seeds`` is ``[seed]`` and only its overrides remain.

    Site resources (``resources.train``: memory, walltime, partition) are left out, so that moving
    to another cluster or asking for more time retrains nothing; the job gets its CPU count through
    ``--threads`` and its process count through the launch command (a rule parameter of its own).
    """
    out = {name: deepcopy(config[name]) for name in TRAIN_SECTIONS}
    out["train"]["seeds"] = [seed]
    out["train"]["seed_overrides"] = [o for o in out["train"]["seed_overrides"] if o["seed"] == seed]
    return out


def seed_config_json(config: Mapping[str, Any], seed: int) -> str:
    """:func:`seed_config` as compact, key-sorted JSON (stable, so Snakemake's params compare equal)."""
    return json.dumps(seed_config(config, seed), sort_keys=True, separators=(",", ":"))


def run_fingerprint(cfg: Mapping[str, Any], seed: int, model_path: str) -> str:
    """Hash of what defines a run: seed, base model, rewards and the effective training knobs."""
    from olmpipe.train.args import grpo_knobs

    train = {k: v for k, v in cfg["train"].items() if k not in NOT_IN_FINGERPRINT and k != "grpo"}
    grpo = {k: v for k, v in grpo_knobs(cfg["train"], seed).items() if k not in OPERATIONAL_GRPO}
    rewards = deepcopy(dict(cfg["rewards"]))
    rewards["bench"] = {k: v for k, v in rewards["bench"].items() if k != "processes"}
    payload = {"seed": seed, "model": str(model_path), "rewards": rewards, "train": train, "grpo": grpo}
    return hashlib.sha256(json.dumps(payload, sort_keys=True, default=str).encode()).hexdigest()[:16]
