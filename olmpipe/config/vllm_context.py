"""The vLLM context length against the longest prompt: a square page of the model's image budget
plus the prompt's text and the answer.

Read by the config check (:mod:`olmpipe.config`, before anything is submitted) and by the memory
plan (:mod:`olmpipe.plan.memory`); it imports neither.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olmpipe.models.architectures import ImageBudget
from olmpipe.prompts import PROMPT_TEXT_TOKENS


def context_problems(cfg: Mapping[str, Any], budget: ImageBudget) -> list[str]:
    """vLLM context lengths too short for the longest prompt plus the answer, each naming its key.

    The longest prompt is a square page at ``rasterize.longest_side`` (no page shape has more image
    tokens): ``budget``'s image tokens (the architecture's patch and merge size and pixel limits:
    2116 on Qwen2.5-VL, 1600 on Qwen3-VL for 1288 px) plus :data:`~olmpipe.prompts.PROMPT_TEXT_TOKENS`;
    vLLM refuses a request longer than its ``max_model_len``. Checked: ``generation.vllm.max_model_len``
    against ``generation.max_new_tokens`` (backend vllm) and ``train.grpo.vllm_max_model_length``
    against ``max_completion_length`` (with ``use_vllm``).
    """
    side = cfg["rasterize"]["longest_side"]
    square = budget.tokens(side, side)
    prompt = square + PROMPT_TEXT_TOKENS
    what = (f"a square page at rasterize.longest_side ({square} image tokens at {budget.factor} x {budget.factor} "
            f"px per token) + ~{PROMPT_TEXT_TOKENS} text")
    problems = []
    gen = cfg["generation"]
    need = prompt + gen["max_new_tokens"]
    if gen["backend"] == "vllm" and gen["vllm"]["max_model_len"] < need:
        problems.append(f"generation.vllm.max_model_len ({gen['vllm']['max_model_len']}) is shorter than the longest "
                        f"prompt and answer: {what} + generation.max_new_tokens ({gen['max_new_tokens']}) = {need}; "
                        f"vLLM refuses such a request: raise max_model_len to at least {need}")
    grpo = cfg["train"]["grpo"]
    limit, need = grpo["vllm_max_model_length"], prompt + grpo["max_completion_length"]
    if grpo["use_vllm"] and limit is not None and limit < need:
        problems.append(f"train.grpo.vllm_max_model_length ({limit}) is shorter than the longest prompt and "
                        f"completion: {what} + max_completion_length ({grpo['max_completion_length']}) = {need}; "
                        f"vLLM refuses such a request: raise vllm_max_model_length to at least {need}")
    return problems
