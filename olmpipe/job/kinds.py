"""The kinds of training job, as the config sees them: which section a trainer reads, its trainer
config's knobs, and which of its settings change what is learned.

Each training stage runs the same job (:mod:`olmpipe.job.run`); what differs between them *before*
any model is loaded -- the section of the config (``train`` for GRPO), the key of the TRL config
knobs in it (``train.grpo``, passed to ``GRPOConfig`` unchanged), the per-seed overrides, the keys
that do not change the trajectory (logging, saving, where it runs) and whether the rewards are part
of the run -- is a :class:`JobKind`. It is data plus small pure functions, so that the config check,
the memory plan (:mod:`olmpipe.plan`), the resume comparison (:mod:`olmpipe.job.resume`) and the
preflight (:mod:`olmpipe.job.preflight`) read a kind without importing a trainer. What a kind
*builds* (dataset, trainer, callbacks) is its stage's (:mod:`olmpipe.train.grpo`).
"""

from __future__ import annotations

from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

__all__ = ["GRPO", "KINDS", "SFT", "JobKind"]


@dataclass(frozen=True)
class JobKind:
    """One trainer's jobs as the config sees them (see the module docstring).

    ``name``: the trainer (``grpo``); ``section``: its config section (``train``); ``knobs_key``: the
    key of its TRL config's knobs in that section (``grpo``); ``rule``: the Snakemake rule of one
    seed's job; ``not_trajectory``: keys of the section that do not change what is learned;
    ``not_trajectory_knobs``: such knobs; ``rewards``: whether the ``rewards`` section is part of the
    run (GRPO's rewards are its objective); ``label``: what messages call a run of it; ``module``:
    what runs a seed's job (``python -m olmpipe.train``).
    """

    name: str
    section: str
    knobs_key: str
    rule: str
    not_trajectory: tuple[str, ...]
    not_trajectory_knobs: tuple[str, ...]
    rewards: bool
    label: str
    #: the module whose ``python -m`` runs one seed's job (:mod:`olmpipe.launch` starts it)
    module: str = "olmpipe.train"

    def section_of(self, cfg: Mapping[str, Any]) -> Mapping[str, Any]:
        """The kind's section of a (validated) config."""
        return cfg[self.section]

    def check_knobs(self, knobs: Mapping[str, Any], where: str) -> list[str]:
        """Problems of ``knobs`` against the kind's TRL config fields (:mod:`olmpipe.config.grpo_fields`)."""
        from olmpipe.config.grpo_fields import check_knobs

        return check_knobs(knobs, where)

    def knobs(self, section: Mapping[str, Any], seed: int) -> dict[str, Any]:
        """The TRL config knobs of ``seed``: ``section[knobs_key]`` with that seed's ``seed_overrides``
        applied (each override's knobs checked against the TRL config's fields first)."""
        knobs = deepcopy(dict(section[self.knobs_key]))
        for override in section["seed_overrides"]:
            if override["seed"] != seed:
                continue
            problems = self.check_knobs(override[self.knobs_key],
                                        f"{self.section}.seed_overrides (seed {seed}).{self.knobs_key}")
            if problems:
                raise ValueError("; ".join(problems))
            knobs.update(override[self.knobs_key])
        return knobs

    def extra_settings(self, section: Mapping[str, Any], knobs: Mapping[str, Any]) -> dict[str, Any]:
        """Keys of ``not_trajectory`` parts that do change the trajectory under these knobs (none here)."""
        return {}


@dataclass(frozen=True)
class _GRPOKind(JobKind):
    def extra_settings(self, section: Mapping[str, Any], knobs: Mapping[str, Any]) -> dict[str, Any]:
        """In vLLM server mode the server's log-probs weigh every token of the loss (docs/recipe.md);
        the rest of ``train.vllm_server`` only places and bounds the server."""
        if knobs["use_vllm"] and knobs["vllm_mode"] == "server":
            return {"vllm_server": {"logprobs_mode": section["vllm_server"]["logprobs_mode"]}}
        return {}


#: GRPO (stage ``train``, rule ``train_seed``): ``train.grpo`` are ``GRPOConfig``'s knobs.
GRPO = _GRPOKind(
    name="grpo",
    section="train",
    knobs_key="grpo",
    rule="train_seed",
    # keys of `train` that do not change what is learned (logging, resume policy, where it runs)
    not_trajectory=("resume", "wandb", "completions_every", "seeds", "seed_overrides", "device", "dtype",
                    "pure_bf16", "exit_with_job", "vllm_server", "eval_max_pages", "reward_error_steps"),
    # GRPOConfig knobs that change how a run is operated, not what it learns
    not_trajectory_knobs=(
        "save_steps", "save_total_limit", "save_strategy", "save_only_model", "logging_steps", "logging_first_step",
        "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
        "vllm_server_base_url", "vllm_server_host", "vllm_server_port", "vllm_server_timeout",
        "vllm_gpu_memory_utilization", "vllm_enable_sleep_mode", "vllm_max_model_length",
        "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing",
        "activation_checkpointing_kwargs", "vllm_group_port",
        "log_completions", "num_completions_to_print", "log_unique_prompts", "report_to", "run_name",
        "eval_steps", "eval_strategy", "eval_delay", "eval_on_start", "per_device_eval_batch_size",
        "num_generations_eval", "eval_accumulation_steps", "torch_empty_cache_steps",
        "ddp_timeout", "disable_tqdm",
    ),
    rewards=True,
    label="GRPO",
)

@dataclass(frozen=True)
class _SFTKind(JobKind):
    def check_knobs(self, knobs: Mapping[str, Any], where: str) -> list[str]:
        """Problems of ``knobs`` against TRL's ``SFTConfig`` fields (:mod:`olmpipe.config.sft_fields`)."""
        from olmpipe.config.sft_fields import check_knobs

        return check_knobs(knobs, where)


#: SFT (stage ``sft``, rule ``sft_seed``): ``sft.args`` are ``SFTConfig``'s knobs.
SFT = _SFTKind(
    name="sft",
    section="sft",
    knobs_key="args",
    rule="sft_seed",
    # keys of `sft` that do not change what is learned; `enabled`, the pairs' source and
    # max_pages change the training set, which is compared as such (its identity)
    not_trajectory=("resume", "wandb", "seeds", "seed_overrides", "device", "dtype", "pure_bf16", "exit_with_job",
                    "enabled", "source", "candidate", "pairs_dir", "front_matter", "max_pages"),
    not_trajectory_knobs=(
        "save_steps", "save_total_limit", "save_strategy", "save_only_model", "logging_steps", "logging_first_step",
        "dataloader_num_workers", "dataloader_pin_memory", "dataloader_persistent_workers",
        "gradient_checkpointing", "gradient_checkpointing_kwargs", "activation_checkpointing",
        "activation_checkpointing_kwargs", "report_to", "run_name", "eval_steps", "eval_strategy", "eval_delay",
        "eval_on_start", "per_device_eval_batch_size", "eval_accumulation_steps", "torch_empty_cache_steps",
        "ddp_timeout", "disable_tqdm",
    ),
    rewards=False,
    label="SFT",
    module="olmpipe.sft",
)

#: Every kind by name.
KINDS: Mapping[str, JobKind] = {GRPO.name: GRPO, SFT.name: SFT}
