"""TRL reward functions for OCR with olmOCR-Bench unit tests (olmOCR 2's GRPO rewards).

Every reward follows TRL's contract: keyword arguments (``prompts``, ``completions``,
``completion_ids``, the dataset's columns, ``**kwargs``), one ``float | None`` per completion,
and a ``__name__`` ending in ``_reward`` (TRL logs ``rewards/<name>/mean``). Parameterised rewards
are picklable classes, so they work from any TRL script:

    from olmpipe.rewards import BenchReward, EosReward, front_matter_reward
    reward_funcs = [BenchReward(), front_matter_reward, EosReward.for_tokenizer(processor)]

================  =====================================================  ==============
name              what it scores                                         module
================  =====================================================  ==============
bench             share of the page's unit tests passed (micro)          rewards.bench
bench_macro       mean of per-test-type pass rates (macro)               rewards.bench
front_matter      0.5 if the YAML front matter parses, +0.1 per field    rewards.answer
                  equal to the reference answer's
eos               1 if the completion ends with an EOS token             rewards.answer
edit_distance     edit similarity to the reference page text             rewards.reference
element_count     tables / equations counted as in the reference         rewards.reference
rect_tables       share of HTML tables that are rectangular              rewards.reference
medoid            agreement with the medoid of the page's completions    rewards.reference
================  =====================================================  ==============

The workflow builds the selected rewards and their weights from the ``rewards`` config section
with :func:`build_rewards`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from olmpipe.rewards.answer import EosReward, front_matter_reward
from olmpipe.rewards.bench import BenchReward, TestLookupError, bench_macro_reward, bench_reward
from olmpipe.rewards.reference import (
    EditDistanceReward,
    MedoidReward,
    count_elements,
    element_count_reward,
    rect_tables_reward,
    table_is_rectangular,
)
from olmpipe.rewards.text import completion_text, scored_text

#: Reward names accepted in ``rewards.weights``, in the order they are built.
REWARD_NAMES = ("bench", "bench_macro", "front_matter", "eos", "edit_distance", "element_count",
                "rect_tables", "medoid")

__all__ = [
    "REWARD_NAMES",
    "BenchReward",
    "EditDistanceReward",
    "EosReward",
    "MedoidReward",
    "RewardSet",
    "TestLookupError",
    "bench_macro_reward",
    "bench_reward",
    "build_rewards",
    "completion_text",
    "count_elements",
    "element_count_reward",
    "front_matter_reward",
    "rect_tables_reward",
    "scored_text",
    "table_is_rectangular",
]


@dataclass
class RewardSet:
    """The reward functions of a run, their weights (``GRPOConfig.reward_weights``) and names."""

    funcs: list[Callable[..., list[float | None]]]
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
    unknown = sorted(set(weights) - set(REWARD_NAMES))
    if unknown:
        raise ValueError(f"rewards.weights: unknown reward(s) {unknown}; known: {', '.join(REWARD_NAMES)}")
    bench_cfg = rewards_cfg["bench"]
    funcs: list[Callable[..., list[float | None]]] = []
    out_weights: list[float] = []
    details_logged = False
    first_bench: BenchReward | None = None
    for name in REWARD_NAMES:
        weight = weights.get(name)
        if weight is None:
            continue
        if name in ("bench", "bench_macro"):
            func: Any = BenchReward(
                average="micro" if name == "bench" else "macro",
                types=bench_cfg["types"],
                jsonl_regex=bench_cfg["jsonl_regex"],
                score_text=rewards_cfg["score_text"],
                processes=bench_cfg["processes"],
                timeout_s=bench_cfg["timeout_s"],
                memory_mb=bench_cfg["memory_mb"],
                log_details=not details_logged,
                share_scoring_with=first_bench,  # micro and macro together: one pool, scored once
            )
            details_logged = True
            first_bench = first_bench or func
        elif name == "eos":
            if tokenizer is None:
                raise ValueError("rewards.weights.eos is set but no tokenizer was given to build the EOS reward")
            func = EosReward.for_tokenizer(tokenizer, extra_eos_ids)
        elif name == "front_matter":
            func = front_matter_reward
        elif name == "edit_distance":
            func = EditDistanceReward(max_chars=rewards_cfg["max_chars"])
        elif name == "element_count":
            func = element_count_reward
        elif name == "rect_tables":
            func = rect_tables_reward
        else:
            func = MedoidReward(max_chars=rewards_cfg["max_chars"])
        funcs.append(func)
        out_weights.append(float(weight))
    if not funcs:
        raise ValueError("rewards.weights selects no reward; give at least one a number (e.g. bench: 1.0)")
    return RewardSet(funcs=funcs, weights=out_weights)
