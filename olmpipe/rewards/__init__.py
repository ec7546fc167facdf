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

Besides TRL's keywords, olmpipe's rewards accept ``log_error(index, reason)``: each completion a
reward could not score (not one it scored low) is reported there. TRL never passes it; olmpipe's
trainer does (:mod:`olmpipe.job.health`), and stops a run whose every completion fails.

The workflow builds the selected rewards and their weights from the ``rewards`` config section
with :func:`build_rewards`, which looks each name up in the registry of
:mod:`olmpipe.rewards.registry` (name -> factory).
"""

from __future__ import annotations

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
from olmpipe.rewards.registry import REWARD_NAMES, REWARDS, RewardContext, RewardSet, build_rewards
from olmpipe.rewards.text import completion_text, scored_text

__all__ = [
    "REWARDS",
    "REWARD_NAMES",
    "BenchReward",
    "EditDistanceReward",
    "EosReward",
    "MedoidReward",
    "RewardContext",
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
