"""Rewards by name: the ``rewards.weights`` keys of the config, each with the factory that builds it.

Like ``reward_funcs_registry`` in TRL's ``trl/scripts/grpo.py``, a name maps to how to get the
reward callable; here the value is a factory taking a :class:`RewardContext` (the ``rewards``
config section, the tokenizer, the rewards built so far), because most rewards are parameterised
by the config. :func:`build_rewards` builds the selected ones in :data:`REWARDS` order::

    from olmpipe.rewards import build_rewards
    rewards = build_rewards(cfg["rewards"], tokenizer=processor)
    GRPOTrainer(..., reward_funcs=rewards.funcs, args=GRPOConfig(reward_weights=rewards.weights))

Adding a reward: write it (TRL contract, ``__name__`` ending in ``_reward``), add a factory and a
:data:`REWARDS` entry here, and a ``rewards.weights`` key to the config and its schema.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from olmpipe.rewards.answer import EosReward, front_matter_reward
from olmpipe.rewards.bench import BenchReward
from olmpipe.rewards.reference import (
    EditDistanceReward,
    MedoidReward,
    element_count_reward,
    rect_tables_reward,
)

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., list[float | None]]


@dataclass
class RewardContext:
    """What a reward factory builds from: the ``rewards`` config section, the tokenizer (or
    processor) and the model's extra end tokens, and the rewards already built for this run."""

    cfg: Mapping[str, Any]
    tokenizer: Any = None
    extra_eos_ids: Sequence[int] = ()
    built: list[RewardFunc] = field(default_factory=list)


RewardFactory = Callable[[RewardContext], RewardFunc]


def _bench(ctx: RewardContext, average: str) -> BenchReward:
    """A unit-test reward; the first one built logs the verdicts and owns the scoring pool, a
    second (micro and macro selected together) shares it, so each batch is scored once."""
    bench_cfg = ctx.cfg["bench"]
    first = next((f for f in ctx.built if isinstance(f, BenchReward)), None)
    if first is None and bench_cfg["processes"] == 0:
        logger.warning("rewards.bench.processes is 0: the unit tests run inside the trainer, where timeout_s is "
                       "only checked between tests, so one slow test (a long fuzzy match) holds the whole step; "
                       "use 1 or more to bound every completion")
    return BenchReward(
        average=average,
        types=bench_cfg["types"],
        jsonl_regex=bench_cfg["jsonl_regex"],
        score_text=ctx.cfg["score_text"],
        processes=bench_cfg["processes"],
        timeout_s=bench_cfg["timeout_s"],
        memory_mb=bench_cfg["memory_mb"],
        log_details=first is None,
        share_scoring_with=first,
        short_answer_guard=bench_cfg["short_answer_guard"],
        short_length_share=bench_cfg["short_signal"]["length_share"],
        short_min_reward=bench_cfg["short_signal"]["min_reward"],
    )


def build_bench(ctx: RewardContext) -> RewardFunc:
    """``bench``: share of the page's unit tests passed (micro average)."""
    return _bench(ctx, "micro")


def build_bench_macro(ctx: RewardContext) -> RewardFunc:
    """``bench_macro``: mean of the per-test-type pass rates (macro average)."""
    return _bench(ctx, "macro")


def build_front_matter(ctx: RewardContext) -> RewardFunc:
    """``front_matter``: the YAML front matter parses and matches the reference answer's."""
    return front_matter_reward


def build_eos(ctx: RewardContext) -> RewardFunc:
    """``eos``: the completion ends with one of the tokenizer's (or model's) end tokens."""
    if ctx.tokenizer is None:
        raise ValueError("rewards.weights.eos is set but no tokenizer was given to build the EOS reward")
    return EosReward.for_tokenizer(ctx.tokenizer, ctx.extra_eos_ids)


def build_edit_distance(ctx: RewardContext) -> RewardFunc:
    """``edit_distance``: edit similarity to the reference page text."""
    return EditDistanceReward(max_chars=ctx.cfg["max_chars"])


def build_element_count(ctx: RewardContext) -> RewardFunc:
    """``element_count``: tables and equations counted as in the reference answer."""
    return element_count_reward


def build_rect_tables(ctx: RewardContext) -> RewardFunc:
    """``rect_tables``: share of the completion's HTML tables that are rectangular."""
    return rect_tables_reward


def build_medoid(ctx: RewardContext) -> RewardFunc:
    """``medoid``: agreement with the medoid of the page's completions."""
    return MedoidReward(max_chars=ctx.cfg["max_chars"])


#: ``rewards.weights`` key -> factory, in the order the rewards are built (and logged).
REWARDS: Mapping[str, RewardFactory] = MappingProxyType({
    "bench": build_bench,
    "bench_macro": build_bench_macro,
    "front_matter": build_front_matter,
    "eos": build_eos,
    "edit_distance": build_edit_distance,
    "element_count": build_element_count,
    "rect_tables": build_rect_tables,
    "medoid": build_medoid,
})

#: Reward names accepted in ``rewards.weights``, in the order they are built.
REWARD_NAMES = tuple(REWARDS)


@dataclass
class RewardSet:
    """The reward functions of a run, their weights (``GRPOConfig.reward_weights``) and names."""

    funcs: list[RewardFunc]
    weights: list[float]

    @property
    def names(self) -> list[str]:
        return [f.__name__ for f in self.funcs]

    def close(self) -> None:
        """Stop the scoring pools of the bench rewards."""
        for func in self.funcs:
            if isinstance(func, BenchReward):
                func.close()


def build_rewards(rewards_cfg: Mapping[str, Any], *, tokenizer: Any = None,
                  extra_eos_ids: Sequence[int] = ()) -> RewardSet:
    """The rewards selected in the ``rewards`` config section, with their weights.

    A reward is selected when its weight in ``rewards.weights`` is a number (0 computes and logs
    it without letting it steer training); null leaves it out. ``tokenizer`` (or a processor) is
    needed for ``eos``; ``extra_eos_ids`` adds the model's other end tokens (its generation config's
    ``eos_token_id``, where TRL also stops).
    """
    weights = rewards_cfg["weights"]
    unknown = sorted(set(weights) - set(REWARDS))
    if unknown:
        raise ValueError(f"rewards.weights: unknown reward(s) {unknown}; known: {', '.join(REWARDS)}")
    ctx = RewardContext(cfg=rewards_cfg, tokenizer=tokenizer, extra_eos_ids=extra_eos_ids)
    out_weights: list[float] = []
    for name, factory in REWARDS.items():
        weight = weights.get(name)
        if weight is None:
            continue
        ctx.built.append(factory(ctx))
        out_weights.append(float(weight))
    if not ctx.built:
        raise ValueError("rewards.weights selects no reward; give at least one a number (e.g. bench: 1.0)")
    return RewardSet(funcs=ctx.built, weights=out_weights)
