"""Memory terms of LoRA and QLoRA training (``train.peft``) for :mod:`olmpipe.plan`.

With an adapter only the adapter trains: the base weights are frozen (in ``train.dtype``, or
quantized by bitsandbytes), and gradients and AdamW states exist for the adapter alone (and for
``modules_to_save``). There is no reference model: TRL 1.16 computes the reference log-probabilities
with the adapter disabled (``trl/trainer/grpo_trainer.py``:987-990). A frozen vision tower keeps no
activations for the backward pass (nothing before it trains).

Sizes:

- adapter: ``r x (in + out)`` parameters per adapted linear layer (+ ``out`` with DoRA's magnitude),
  trained in float32 (PEFT's ``autocast_adapter_dtype``; olmpipe keeps QLoRA adapters in float32
  too): 4 bytes of weights, 4 of gradients, 8 of AdamW moments per parameter;
- ``modules_to_save``: a trained copy in the base's dtype (weights, gradients, two moments) beside
  the frozen original;
- 4-bit base (NF4/FP4): half a byte per linear-layer weight plus one absmax per 64 weights (fp32,
  or 8-bit with an fp32 constant per 256 blocks under double quantization: Dettmers et al. 2023,
  QLoRA, section 3); 8-bit: one byte per weight plus an fp32 scale per row (LLM.int8). Embeddings,
  ``lm_head``, norms and biases stay in the compute dtype (bitsandbytes quantizes ``nn.Linear`` only,
  transformers leaves ``lm_head`` out).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: Bytes per quantized linear weight.
QUANT_BYTES = {
    ("4bit", True): 0.5 + 1 / 64 + 4 / (64 * 256),  # NF4 + 8-bit absmax per 64 + fp32 per 256 blocks
    ("4bit", False): 0.5 + 4 / 64,  # NF4 + fp32 absmax per 64
    ("8bit", True): 1.0,
    ("8bit", False): 1.0,
}


def text_linear_shapes(shape: Any) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one language-model layer, by module name."""
    h, i, kv = shape.hidden_size, shape.intermediate_size, shape.kv_dim
    return {"q_proj": (h, h), "k_proj": (h, kv), "v_proj": (h, kv), "o_proj": (h, h),
            "gate_proj": (h, i), "up_proj": (h, i), "down_proj": (i, h)}


def vision_linear_shapes(shape: Any) -> dict[str, tuple[int, int]]:
    """(in, out) features of each linear layer of one vision block, by module name."""
    hv, iv = shape.vision_hidden_size, shape.vision_intermediate_size
    return {"qkv": (hv, 3 * hv), "proj": (hv, hv), "gate_proj": (hv, iv), "up_proj": (hv, iv), "down_proj": (iv, hv)}


def linear_parameters(shape: Any) -> int:
    """Weights of every linear layer bitsandbytes quantizes (language-model layers, vision blocks, merger)."""
    text = sum(a * b for a, b in text_linear_shapes(shape).values()) * shape.num_layers
    vision = sum(a * b for a, b in vision_linear_shapes(shape).values()) * shape.vision_depth
    merged = shape.vision_hidden_size * shape.spatial_merge_size**2
    return text + vision + merged * merged + merged * shape.vision_out_hidden_size


def adapter_parameters(shape: Any, peft: Mapping[str, Any]) -> tuple[int, list[str]]:
    """(adapter parameters, target names the plan does not know) of ``train.peft`` on ``shape``."""
    r, extra = int(peft["r"]), bool(peft["dora"])
    unknown: list[str] = []

    def count(table: dict[str, tuple[int, int]], names: list[str], depth: int) -> int:
        total = 0
        for name in names:
            if name not in table:
                unknown.append(name)
                continue
            fan_in, fan_out = table[name]
            total += r * (fan_in + fan_out) + (fan_out if extra else 0)
        return total * depth

    total = count(text_linear_shapes(shape), list(peft["target_modules"]), shape.num_layers)
    if peft["vision"]:
        total += count(vision_linear_shapes(shape), list(peft["vision_target_modules"]), shape.vision_depth)
    return total, unknown


def saved_module_parameters(shape: Any, peft: Mapping[str, Any]) -> tuple[int, list[str]]:
    """(parameters of ``modules_to_save``, names the plan does not know)."""
    merged = shape.vision_hidden_size * shape.spatial_merge_size**2
    sizes = {"lm_head": shape.vocab_size * shape.hidden_size, "embed_tokens": shape.vocab_size * shape.hidden_size,
             "merger": shape.vision_hidden_size + merged * merged + merged
             + merged * shape.vision_out_hidden_size + shape.vision_out_hidden_size}
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
