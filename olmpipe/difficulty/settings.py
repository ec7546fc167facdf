"""What the difficulty stage samples with, what its filter keeps, and the config its job receives.

The stage samples like the trainer: its decoding settings come from ``train.grpo`` (TRL's
``GRPOConfig`` sampling knobs, :data:`SAMPLING_KNOBS`), one attempt per completion (no temperature
ladder: TRL samples each completion once), ``train.difficulty.samples`` completions per page
(default ``train.grpo.num_generations``, the GRPO group) and seeds derived from
``train.difficulty.seed``. The backend (``generation.backend`` and its section) and the batch size
are the baseline's.

:func:`job_config` is what the ``difficulty_sample`` rule hands its job: only the settings that
change the stage's result, so that a new learning rate or another baseline temperature ladder does
not sample again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from copy import deepcopy
from dataclasses import dataclass
from typing import Any

from olmpipe.generate.decoding import DecodingSettings

logger = logging.getLogger(__name__)

#: ``train.grpo`` keys that decide how the trainer samples a completion (TRL 1.16 hands them to
#: ``GenerationConfig`` or vLLM's ``SamplingParams``: trl/trainer/grpo_trainer.py:1130-1136, 1154-1166).
SAMPLING_KNOBS = ("max_completion_length", "temperature", "top_p", "top_k", "min_p", "repetition_penalty")
#: ``train.grpo`` knobs the schema leaves to TRL's ``GRPOConfig`` default when unset, with that
#: default (trl 1.16 trl/trainer/grpo_config.py:550 ``min_p: float | None = None``).
TRL_DEFAULTS = {"min_p": None}
#: ``generation`` keys the stage reads: the backend, its section, batching and the error budget.
GENERATION_KEYS = ("backend", "batch_size", "max_error_fraction", "transformers", "vllm", "openai")


class DifficultyError(RuntimeError):
    """Bad stage input (page index, tests, statistics, settings) or a run with too many backend failures."""


def trainer_sampling(train: Mapping[str, Any]) -> dict[str, Any]:
    """The trainer's sampling knobs from the ``train`` section (``train.grpo``), by GRPOConfig name.

    Raises :class:`DifficultyError` for ``train.grpo.generation_kwargs``: arbitrary generation
    arguments cannot be carried to every backend, so the stage would sample differently from the
    trainer. Per-seed overrides of a sampling knob are not followed (one sampling per stage); a
    warning names them.
    """
    grpo = train["grpo"]
    if grpo.get("generation_kwargs"):  # GRPOConfig's default is None; the schema does not set it
        raise DifficultyError(
            "train.grpo.generation_kwargs is set: the difficulty stage cannot sample with arbitrary "
            "generation arguments; move them into train.grpo's own keys or disable train.difficulty"
        )
    out = {name: grpo[name] if name in grpo else TRL_DEFAULTS[name] for name in SAMPLING_KNOBS}
    for override in train["seed_overrides"]:
        changed = sorted(set(override["grpo"]) & set(SAMPLING_KNOBS))
        if changed:
            logger.warning(
                "train.seed_overrides changes %s for seed %d; the difficulty stage samples with train.grpo's values",
                ", ".join(changed), override["seed"],
            )
    return out


#: Most completions per page (the schema's maximum of ``train.difficulty.samples``): rewards that
#: compare a page's completions pairwise (``medoid``) cost k(k-1)/2 edit distances per page.
MAX_SAMPLES = 128


def samples_per_page(train: Mapping[str, Any]) -> int:
    """``train.difficulty.samples``, or the GRPO group size ``train.grpo.num_generations`` when null."""
    samples = train["difficulty"]["samples"]
    k = int(samples if samples is not None else train["grpo"]["num_generations"])
    if k < 2:
        raise DifficultyError(f"train.difficulty.samples: need at least 2 completions per page for a spread, got {k}")
    if k > MAX_SAMPLES:
        source = "" if samples is not None else f" (null: train.grpo.num_generations, {k})"
        raise DifficultyError(f"train.difficulty.samples{source}: at most {MAX_SAMPLES} completions per page (a "
                              f"reward that compares them pairwise costs k(k-1)/2 edit distances per page); set "
                              f"train.difficulty.samples to {MAX_SAMPLES} or fewer")
    return k


def decoding_settings(cfg: Mapping[str, Any]) -> DecodingSettings:
    """The decoding settings of the stage: the trainer's sampling, one attempt, k repeats per page."""
    sampling = trainer_sampling(cfg["train"])
    if sampling["max_completion_length"] is None:
        raise DifficultyError("train.grpo.max_completion_length is null; the difficulty stage needs a token limit")
    return DecodingSettings(
        max_new_tokens=int(sampling["max_completion_length"]),
        temperatures=(float(sampling["temperature"]),),
        top_p=float(sampling["top_p"]),
        seed=int(cfg["train"]["difficulty"]["seed"]),
        repeats=samples_per_page(cfg["train"]),
        batch_size=int(cfg["generation"]["batch_size"]),
        top_k=int(sampling["top_k"] or 0),
        min_p=float(sampling["min_p"] or 0.0),
        repetition_penalty=float(sampling["repetition_penalty"]),
    )


@dataclass(frozen=True)
class FilterSettings:
    """``train.difficulty``'s filter: keep pages whose spread is above ``min_spread`` and whose pass
    rate lies in ``[min_pass_rate, max_pass_rate]`` (each bound off when None)."""

    min_spread: float = 0.0
    min_pass_rate: float | None = None
    max_pass_rate: float | None = None

    def __post_init__(self) -> None:
        low, high = self.min_pass_rate, self.max_pass_rate
        if low is not None and high is not None and low > high:
            raise DifficultyError(f"train.difficulty: min_pass_rate {low} is above max_pass_rate {high}")

    @property
    def uses_pass_rate(self) -> bool:
        return self.min_pass_rate is not None or self.max_pass_rate is not None

    @classmethod
    def from_config(cls, difficulty: Mapping[str, Any]) -> FilterSettings:
        """From the validated ``train.difficulty`` section."""
        return cls(
            min_spread=float(difficulty["min_spread"]),
            min_pass_rate=difficulty["min_pass_rate"],
            max_pass_rate=difficulty["max_pass_rate"],
        )

    def to_json(self) -> dict[str, Any]:
        return {"min_spread": self.min_spread, "min_pass_rate": self.min_pass_rate,
                "max_pass_rate": self.max_pass_rate}


def training_batch_pages(cfg: Mapping[str, Any]) -> int:
    """Pages one generation batch of training takes (:func:`olmpipe.config.grpo_fields.batch_pages`),
    the most over the trained seeds' knobs, with the training processes ``resources.train`` plans: the
    filter must keep at least this many train pages, or training cannot take a step."""
    from olmpipe.config import train_processes
    from olmpipe.config.grpo_fields import batch_pages

    processes = train_processes(cfg) or 1
    train = cfg["train"]
    knobs = [train["grpo"], *({**train["grpo"], **o["grpo"]} for o in train["seed_overrides"]
                              if o["seed"] in train["seeds"])]
    return max(batch_pages(k, processes) for k in knobs)


def job_config(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The config sections the sampling job reads, reduced to what changes its result.

    ``model.name`` (written into the records), the backend part of ``generation``, the ``rewards``
    section and from ``train`` only the sampling knobs, ``k`` (``difficulty.samples`` resolved:
    ``num_generations`` when null) and ``difficulty.seed`` (not the filter's thresholds, which the
    filter rule reads). The batch knobs are left to their schema defaults: with the resolved ``k``
    the job needs no ``num_generations``, so its config stays valid whatever the recipe's batch
    arithmetic.
    """
    train = cfg["train"]
    grpo = {name: train["grpo"][name] for name in (*SAMPLING_KNOBS, "generation_kwargs") if name in train["grpo"]}
    return {
        "model": {"name": cfg["model"]["name"]},
        "generation": {key: deepcopy(cfg["generation"][key]) for key in GENERATION_KEYS},
        "rewards": deepcopy(cfg["rewards"]),
        "train": {
            "grpo": grpo,
            # k resolved (checked by the job: the workflow must parse whatever the config)
            "difficulty": {"samples": samples_per_page(train), "seed": train["difficulty"]["seed"]},
        },
    }


def job_config_json(cfg: Mapping[str, Any]) -> str:
    """:func:`job_config` as compact, key-sorted JSON (stable, so Snakemake's params compare equal)."""
    return json.dumps(job_config(cfg), sort_keys=True, separators=(",", ":"))


def job_trigger_json(cfg: Mapping[str, Any]) -> str:
    """The part of :func:`job_config` whose change reruns the sampling job (its rule's params): without
    the generation's and scoring workers' operational keys (batch size, concurrency, timeouts:
    :mod:`olmpipe.generate.tracked`, :data:`olmpipe.job.jobconfig.OPERATIONAL_BENCH`), which change how
    the samples are made and not what they are, and without ``model.name``."""
    from olmpipe.generate.tracked import generation_trigger
    from olmpipe.job.jobconfig import OPERATIONAL_BENCH

    job = job_config(cfg)
    job["generation"] = {k: v for k, v in generation_trigger(cfg)["generation"].items()
                         if k in GENERATION_KEYS}
    job["rewards"]["bench"] = {k: v for k, v in job["rewards"]["bench"].items() if k not in OPERATIONAL_BENCH}
    job.pop("model")
    return json.dumps(job, sort_keys=True, separators=(",", ":"), default=str)
