"""Memory terms of LoRA and QLoRA training (``train.peft``) for :mod:`olmpipe.plan.memory`.

With an adapter only the adapter trains: the base weights are frozen (in ``train.dtype``, or
quantized by bitsandbytes), and gradients and AdamW states exist for the adapter alone (and for
``modules_to_save``). There is no reference model: TRL 1.16 computes the reference log-probabilities
with the adapter disabled (``trl/trainer/grpo_trainer.py``:987-990). A frozen vision tower keeps no
activations for the backward pass (nothing before it trains).

Sizes:

- adapter: ``r x (in + out)`` parameters per adapted linear layer (+ ``out`` with DoRA's magnitude),
  trained in float32 (PEFT's ``autocast_adapter_dtype``; olmpipe keeps QLoRA adapters in float32
  too): 4 bytes of weights, 4 of gradients, 8 of AdamW moments per parameter;
- ``modules_to_save``: a trained float32 copy beside the frozen original (PEFT copies the module in
  the base's dtype; olmpipe casts every trained tensor to float32, :func:`olmpipe.job.peft.restore_fp32_adapter`):
  16 bytes per parameter like the adapter;
- 4-bit base (NF4/FP4): half a byte per linear-layer weight plus one absmax per 64 weights (fp32,
  or 8-bit with an fp32 constant per 256 blocks under double quantization: Dettmers et al. 2023,
  QLoRA, section 3); 8-bit: one byte per weight plus an fp32 scale per row (LLM.int8). Embeddings,
  ``lm_head``, norms and biases stay in the compute dtype (bitsandbytes quantizes ``nn.Linear`` only,
  transformers leaves ``lm_head`` out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from olmpipe.plan.shape import GIB, ModelShape
from olmpipe.plan.terms import Term

#: Bytes per quantized linear weight.
QUANT_BYTES = {
    ("4bit", True): 0.5 + 1 / 64 + 4 / (64 * 256),  # NF4 + 8-bit absmax per 64 + fp32 per 256 blocks
    ("4bit", False): 0.5 + 4 / 64,  # NF4 + fp32 absmax per 64
    ("8bit", True): 1.0,
    ("8bit", False): 1.0,
}


def _arch(shape: Any) -> Any:
    from olmpipe.models.architectures import ARCHITECTURES

    return ARCHITECTURES[shape.architecture]


def text_linear_shapes(shape: Any) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one language-model layer, by module name.

    Queries and the attention output are ``heads x head_dim`` wide (Qwen3-VL's head size is its
    own); the MLP's projections exist in dense layers only (:func:`linear_layer_counts`).
    """
    h, i, q, kv = shape.hidden_size, shape.intermediate_size, shape.q_dim, shape.kv_dim
    return {"q_proj": (h, q), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (q, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def linear_layer_counts(shape: Any) -> dict[str, int]:
    """How many language-model layers hold each linear layer: attention in every one, the MLP's
    projections only in dense layers (Qwen3-VL-MoE's experts are fused parameters, not ``nn.Linear``)."""
    dense = shape.num_layers - shape.moe_layers
    return {name: shape.num_layers if name.endswith(("q_proj", "k_proj", "v_proj", "o_proj")) else dense
            for name in text_linear_shapes(shape)}


def vision_linear_shapes(shape: Any) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one vision block, by module name (the MLP's names
    follow the architecture: gate/up/down on Qwen2.5-VL, fc1/fc2 on Qwen2-VL, linear_fc1/2 on Qwen3-VL)."""
    hv, iv = shape.vision_hidden_size, shape.vision_intermediate_size
    mlp = _arch(shape).vision_mlp
    if len(mlp) == 3:
        return {"qkv": (hv, 3 * hv), "proj": (hv, hv), mlp[0]: (hv, iv), mlp[1]: (hv, iv), mlp[2]: (iv, hv)}
    return {"qkv": (hv, 3 * hv), "proj": (hv, hv), mlp[0]: (hv, iv), mlp[1]: (iv, hv)}


def linear_parameters(shape: Any) -> int:
    """Weights of every linear layer bitsandbytes quantizes (language-model layers, vision blocks, the
    patch merger and Qwen3-VL's DeepStack mergers); not Qwen3-VL-MoE's experts (no ``nn.Linear``)."""
    counts = linear_layer_counts(shape)
    text = sum(a * b * counts[name] for name, (a, b) in text_linear_shapes(shape).items())
    vision = sum(a * b for a, b in vision_linear_shapes(shape).values()) * shape.vision_depth
    merged = shape.vision_hidden_size * shape.spatial_merge_size**2
    mergers = 1 + shape.deepstack_mergers
    return text + vision + mergers * (merged * merged + merged * shape.vision_out_hidden_size)


def adapter_parameters(shape: Any, peft: Mapping[str, Any]) -> tuple[int, list[str]]:
    """(adapter parameters, target names the plan does not know) of ``train.peft`` on ``shape``."""
    r, extra = int(peft["r"]), bool(peft["dora"])
    unknown: list[str] = []

    def count(table: dict[str, tuple[int, int]], names: list[str], depth: dict[str, int]) -> int:
        total = 0
        for name in names:
            if name not in table:
                unknown.append(name)
                continue
            fan_in, fan_out = table[name]
            total += (r * (fan_in + fan_out) + (fan_out if extra else 0)) * depth[name]
        return total

    total = count(text_linear_shapes(shape), list(peft["target_modules"]), linear_layer_counts(shape))
    if peft["vision"]:
        table = vision_linear_shapes(shape)
        names = list(peft["vision_target_modules"] or table)
        total += count(table, names, dict.fromkeys(table, shape.vision_depth))
    return total, unknown


def saved_module_parameters(shape: Any, peft: Mapping[str, Any]) -> tuple[int, list[str]]:
    """(parameters of ``modules_to_save``, names the plan does not know)."""
    merged = shape.vision_hidden_size * shape.spatial_merge_size**2
    norm = shape.vision_hidden_size * (1 if shape.architecture == "qwen2_5_vl" else 2)  # RMSNorm, else LayerNorm
    sizes = {"lm_head": shape.vocab_size * shape.hidden_size, "embed_tokens": shape.vocab_size * shape.hidden_size,
             "merger": norm + merged * merged + merged + merged * shape.vision_out_hidden_size
             + shape.vision_out_hidden_size}
    unknown = [m for m in peft["modules_to_save"] if m.rsplit(".", 1)[-1] not in sizes]
    return sum(sizes.get(m.rsplit(".", 1)[-1], 0) for m in peft["modules_to_save"]), unknown


def base_weight_bytes(shape: Any, peft: Mapping[str, Any], weight_bytes: int) -> tuple[float, str]:
    """(bytes, note) of the frozen base weights: in the compute dtype, or linear layers quantized."""
    params = shape.parameters()
    if peft["quantization"] == "none":
        return params * weight_bytes, f"{params / 1e9:.2f}B x {weight_bytes} B, frozen"
    linear = linear_parameters(shape)
    per = QUANT_BYTES[(peft["quantization"], bool(peft["double_quant"]))]
    note = (f"{linear / 1e9:.2f}B linear x {per:.3g} B ({peft['quantization']}) + {(params - linear) / 1e9:.2f}B "
            f"x {weight_bytes} B, frozen")
    return linear * per + (params - linear) * weight_bytes, note


def adapter_bytes(shape: ModelShape, peft: Mapping[str, Any]) -> float:
    """Bytes of what LoRA trains: the adapter and the modules_to_save copies, all float32 (:mod:`olmpipe.plan.lora`)."""
    return (adapter_parameters(shape, peft)[0] + saved_module_parameters(shape, peft)[0]) * 4


def lora_terms(shape: ModelShape, peft: Mapping[str, Any], w: int, section: str = "train") -> list[Term]:
    """Weights, gradients and optimizer states of LoRA/QLoRA training (:mod:`olmpipe.plan.lora`)."""
    base, base_note = base_weight_bytes(shape, peft, w)
    adapter, unknown = adapter_parameters(shape, peft)
    saved, unknown_saved = saved_module_parameters(shape, peft)
    trained = adapter_bytes(shape, peft)  # fp32 adapter and modules_to_save copies (16 B/param with grads, AdamW)
    note_unknown = f"; not sized: {', '.join(unknown + unknown_saved)}" if unknown or unknown_saved else ""
    quant_fix = f"{section}.peft.quantization: 4bit (QLoRA" + (", rollouts without vLLM)" if section == "train" else ")")
    return [
        Term("base weights (frozen)", base / GIB, base_note,
             quant_fix if peft["quantization"] == "none" else "a smaller model"),
        Term("adapter weights", trained / GIB,
             f"LoRA r={peft['r']}: {adapter / 1e6:.1f}M x 4 B" + (f" + {saved / 1e6:.1f}M saved x 4 B" if saved else "")
             + note_unknown, f"lower {section}.peft.r or fewer target_modules"),
        Term("gradients", trained / GIB, "adapter only", f"lower {section}.peft.r"),
        Term("optimizer states", 2 * trained / GIB, "AdamW, adapter only", f"lower {section}.peft.r"),
    ]
