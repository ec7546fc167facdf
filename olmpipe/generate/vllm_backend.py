"""The vLLM backend: vLLM's offline engine (``vllm.LLM``) with multimodal inputs, batched.

vLLM is imported only here and only when this backend is built without an injected engine, so the
main install never needs it. It runs on GPUs (the ``vllm`` extra) and on CPUs with vLLM's CPU build
(``scripts/setup.sh --vllm``, docs/vllm.md). vLLM starts its engine in a spawned process that
re-imports the main module: call it from a module with a main guard (``python -m olmpipe.evaluate.baseline``,
as the workflow does), never from a Snakemake ``script:``. Every call hands all its requests to ``LLM.generate`` at once (one
``SamplingParams`` per request, each with its own seed); vLLM schedules them together, so
``generation.batch_size`` should be large (hundreds) with this backend.

The boundary with vLLM is three names, so tests replace the engine with a fake:
- the engine: ``engine.generate(prompts, sampling_params=[...], use_tqdm=False)`` where each prompt
  is ``{"prompt": <chat-templated text>, "multi_modal_data": {"image": <PIL image>}}``;
- the sampling parameters class, called as ``SamplingParams(n=1, temperature=..., top_p=...,
  max_tokens=..., seed=...)``, plus ``top_k``/``min_p``/``repetition_penalty`` when a request sets
  them (the difficulty stage's TRL knobs);
- the results: a list of ``RequestOutput`` in prompt order, each with ``prompt_token_ids`` and
  ``outputs[0]`` a ``CompletionOutput`` with ``text``, ``token_ids`` and ``finish_reason``
  (``"stop"`` or ``"length"``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.generate.base import (
    FINISH_ERROR,
    FINISH_LENGTH,
    FINISH_STOP,
    Completion,
    GenerationBackend,
    PageRequest,
    Sampling,
    check_lengths,
)
from olmpipe.generate.transformers_backend import load_page_image
from olmpipe.prompts import build_messages

logger = logging.getLogger(__name__)


def _has_cuda() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def engine_kwargs(
    model_path: str | Path, generation: Mapping[str, Any], *, cuda: bool | None = None
) -> dict[str, Any]:
    """Arguments of ``vllm.LLM`` from the ``generation.vllm`` section (one image, no video per prompt).

    ``cuda`` (default: whether torch sees a GPU) decides the two CPU/GPU differences: without a GPU
    the KV cache is ``cpu_kv_cache_gb`` (vLLM's CPU build would otherwise reserve
    ``gpu_memory_utilization`` of the machine's memory, and refuses to start when that much is not
    free), and ``enforce_eager: null`` means eager mode (no torch.compile, which takes minutes on
    a small CPU); on a GPU null leaves vLLM's CUDA graphs on.
    """
    section = generation["vllm"]
    cuda = _has_cuda() if cuda is None else cuda
    kwargs: dict[str, Any] = {
        "model": str(model_path),
        "gpu_memory_utilization": float(section["gpu_memory_utilization"]),
        "max_model_len": int(section["max_model_len"]),
        "tensor_parallel_size": int(section["tensor_parallel_size"]),
        "dtype": section["dtype"],
        "seed": int(generation["seed"]),
        "limit_mm_per_prompt": {"image": 1, "video": 0},
        "enforce_eager": (not cuda) if section["enforce_eager"] is None else bool(section["enforce_eager"]),
    }
    if not cuda:
        kwargs["kv_cache_memory_bytes"] = int(float(section["cpu_kv_cache_gb"]) * 2**30)
    return kwargs


def _vllm_engine(**kwargs: Any) -> Any:
    try:
        from vllm import LLM
    except ImportError as exc:
        raise ImportError(
            "generation.backend is 'vllm' but vllm is not installed; install the extra "
            "(pip install 'olmpipe[vllm]') on a GPU machine, build the CPU environment with "
            "scripts/setup.sh --vllm (docs/vllm.md), or choose the transformers backend"
        ) from exc
    return LLM(**kwargs)


def _vllm_sampling_params() -> Callable[..., Any]:
    from vllm import SamplingParams

    return SamplingParams


class VLLMBackend(GenerationBackend):
    """Generate with a vLLM engine; ``engine`` and ``sampling_params_cls`` may be injected (tests)."""

    name = "vllm"

    def __init__(
        self,
        engine: Any,
        processor: Any,
        *,
        sampling_params_cls: Callable[..., Any] | None = None,
        model_path: str = "",
        engine_settings: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__()
        self.engine = engine
        self.processor = processor
        self.sampling_params_cls = sampling_params_cls or _vllm_sampling_params()
        self.model_path = str(model_path)
        self.engine_settings = dict(engine_settings or {})

    @classmethod
    def from_config(
        cls,
        model_path: str | Path,
        generation: Mapping[str, Any],
        *,
        engine_factory: Callable[..., Any] | None = None,
        sampling_params_cls: Callable[..., Any] | None = None,
        processor: Any = None,
    ) -> VLLMBackend:
        """Start the engine for ``model_path`` with ``engine_factory`` (default ``vllm.LLM``)."""
        kwargs = engine_kwargs(model_path, generation)
        if processor is None:
            from olmpipe.models.load import load_processor

            processor = load_processor(model_path)
        engine = (engine_factory or _vllm_engine)(**kwargs)
        logger.info("vLLM backend: %s (%s)", model_path, {k: v for k, v in kwargs.items() if k != "model"})
        return cls(
            engine,
            processor,
            sampling_params_cls=sampling_params_cls,
            model_path=str(model_path),
            engine_settings=kwargs,
        )

    def generate(self, requests: Sequence[PageRequest], sampling: Sequence[Sampling]) -> list[Completion]:
        check_lengths(requests, sampling)
        out: list[Completion | None] = [None] * len(requests)
        prompts, params, live = [], [], []
        for i, (request, s) in enumerate(zip(requests, sampling, strict=True)):
            try:
                image = load_page_image(request.image)
            except (OSError, ValueError) as exc:
                out[i] = Completion("", FINISH_ERROR, error=f"cannot read page image {request.image}: {exc}")
                continue
            text = self.processor.apply_chat_template(
                build_messages(image), tokenize=False, add_generation_prompt=True
            )
            prompts.append({"prompt": text, "multi_modal_data": {"image": image}})
            params.append(
                self.sampling_params_cls(
                    n=1,
                    temperature=s.temperature,
                    top_p=s.top_p,
                    max_tokens=s.max_new_tokens,
                    seed=s.seed,
                    **s.extra_knobs(),
                )
            )
            live.append(i)
        if live:
            t0 = time.perf_counter()
            results = self.engine.generate(prompts, sampling_params=params, use_tqdm=False)
            elapsed = time.perf_counter() - t0
            self.model_seconds += elapsed
            if len(results) != len(live):
                raise RuntimeError(f"vLLM returned {len(results)} outputs for {len(live)} prompts")
            for i, result in zip(live, results, strict=True):
                out[i] = _to_completion(result, elapsed / len(live))
        return out  # type: ignore[return-value]

    def close(self) -> None:
        self.engine = None


def _to_completion(result: Any, seconds: float) -> Completion:
    """Convert one vLLM ``RequestOutput`` (first sample) into a :class:`Completion`."""
    prompt_tokens = len(getattr(result, "prompt_token_ids", None) or [])
    outputs = getattr(result, "outputs", None) or []
    if not outputs:
        return Completion(
            "",
            FINISH_ERROR,
            prompt_tokens=prompt_tokens,
            seconds=seconds,
            error="vLLM returned no output for the request",
        )
    first = outputs[0]
    reason = getattr(first, "finish_reason", None)
    tokens = len(getattr(first, "token_ids", None) or [])
    text = getattr(first, "text", "") or ""
    if reason == "stop":
        finish, error = FINISH_STOP, None
    elif reason == "length":
        finish, error = FINISH_LENGTH, None
    else:
        finish, error = FINISH_ERROR, f"vLLM finish_reason {reason!r}"
    return Completion(
        text, finish, prompt_tokens=prompt_tokens, completion_tokens=tokens, seconds=seconds, error=error
    )
