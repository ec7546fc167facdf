"""The shapes of a Qwen VL model that decide its memory, from its folder's ``config.json`` (or
:data:`olmpipe.models.known.KNOWN_MODELS` for hub ids): parameters (total and active, for
Qwen3-VL-MoE), attention widths, the vision tower and the image tokens of a page.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.models.architectures import (
    Architecture,
    ImageBudget,
    ModelConfigError,
    UnsupportedArchitectureError,
    architecture_of,
    image_budget_of,
    num_experts,
    page_tokens,
    read_model_config,
)
from olmpipe.models.known import KNOWN_MODELS

#: GiB: 2**30 bytes, what ``nvidia-smi`` and ``torch.cuda.mem_get_info`` report.
GIB = 2**30



class PlanError(ValueError):
    """A model description or configuration the plan cannot use, or a job that does not fit."""


@dataclass(frozen=True)
class ModelShape:
    """The shapes of a Qwen VL model that decide its memory (from ``config.json``).

    The language model is a Qwen2 decoder (Qwen2-VL, Qwen2.5-VL: biased q/k/v) or a Qwen3 decoder
    (Qwen3-VL: no biases, q/k norms, an explicit ``head_dim``), with a SwiGLU MLP or, in Qwen3-VL-MoE,
    ``num_experts`` SwiGLU experts of which ``experts_per_token`` run per token. The vision tower
    follows :attr:`architecture` (Qwen2-VL: LayerNorm and a GELU MLP; Qwen2.5-VL: RMSNorm and a
    SwiGLU MLP; Qwen3-VL: LayerNorm, a GELU MLP, learned position embeddings and DeepStack mergers).
    """

    source: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    tie_word_embeddings: bool
    max_position_embeddings: int
    vision_depth: int
    vision_hidden_size: int
    vision_intermediate_size: int
    vision_out_hidden_size: int
    patch_size: int
    spatial_merge_size: int
    temporal_patch_size: int
    in_chans: int
    architecture: str = "qwen2_5_vl"
    head_dim: int = 0  # 0: hidden_size // num_heads
    num_experts: int = 0  # 0: a dense MLP in every layer
    experts_per_token: int = 0
    moe_intermediate_size: int = 0
    moe_layers: int = 0
    num_position_embeddings: int = 0
    deepstack_mergers: int = 0
    image_budget: ImageBudget | None = None

    @property
    def qwen3(self) -> bool:
        return self.architecture.startswith("qwen3")

    @property
    def head_size(self) -> int:
        """Size of one attention head (``head_dim``, else hidden / heads)."""
        return self.head_dim or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        """Width of the queries (and of the attention output) of one token: heads x head size."""
        return self.num_heads * self.head_size

    @property
    def kv_dim(self) -> int:
        """Width of the keys (and of the values) of one token: KV heads x head size."""
        return self.num_kv_heads * self.head_size

    def _attention_and_norms(self) -> int:
        """Parameters of one decoder layer besides its MLP: attention and the two RMSNorms."""
        h, q, kv = self.hidden_size, self.q_dim, self.kv_dim
        if self.qwen3:  # no biases; RMSNorm of q and k per head
            attention = h * q + 2 * h * kv + q * h + 2 * self.head_size
        else:  # q, k, v with biases, o without
            attention = h * q + 2 * h * kv + (q + 2 * kv) + q * h
        return attention + 2 * h

    def text_parameters(self, *, active: bool = False) -> int:
        """Parameters of the language model; ``active``: with only the experts one token runs."""
        h = self.hidden_size
        dense_mlp = 3 * h * self.intermediate_size
        experts = self.experts_per_token if active else self.num_experts
        moe_mlp = h * self.num_experts + experts * 3 * h * self.moe_intermediate_size  # router + experts
        mlps = self.moe_layers * moe_mlp + (self.num_layers - self.moe_layers) * dense_mlp
        embeddings = self.vocab_size * h * (1 if self.tie_word_embeddings else 2)
        return self.num_layers * self._attention_and_norms() + mlps + embeddings + h

    def vision_parameters(self) -> int:
        """Parameters of the vision tower (patch embedding, blocks, patch merger(s))."""
        h, i, out = self.vision_hidden_size, self.vision_intermediate_size, self.vision_out_hidden_size
        patch = self.in_chans * self.temporal_patch_size * self.patch_size**2 * h
        merged = h * self.spatial_merge_size**2
        attention = (h * 3 * h + 3 * h) + (h * h + h)
        mlp_out = merged * merged + merged + merged * out + out  # two biased linears
        if self.architecture == "qwen2_5_vl":  # RMSNorm x2, biased SwiGLU; merger: RMSNorm
            block = attention + 3 * (h * i) + 2 * i + h + 2 * h
            return patch + self.vision_depth * block + h + mlp_out
        # LayerNorm x2 (weight and bias) and a biased GELU MLP; merger: LayerNorm
        block = attention + (h * i + i) + (i * h + h) + 4 * h
        if self.architecture == "qwen2_vl":
            return patch + self.vision_depth * block + 2 * h + mlp_out
        # Qwen3-VL: biased patch embedding, learned positions, DeepStack mergers (norm after merging)
        extra = h + self.num_position_embeddings * h + self.deepstack_mergers * (2 * merged + mlp_out)
        return patch + extra + self.vision_depth * block + 2 * h + mlp_out

    def largest_tensor(self) -> int:
        """Elements of the model's largest single tensor: the embeddings (or the LM head), a dense
        MLP projection, or a mixture-of-experts layer's fused ``gate_up`` experts."""
        h = self.hidden_size
        return max(self.vocab_size * h, h * self.intermediate_size,
                   self.num_experts * 2 * self.moe_intermediate_size * h)

    def largest_unit(self) -> int:
        """Parameters of the largest FSDP unit of ``workflow/accelerate/fsdp.yaml`` (accelerate 1.15
        ``utils/fsdp_utils.py`` 850-872): a decoder layer, the input embeddings, or the final norm
        with the LM head."""
        h = self.hidden_size
        dense = self._attention_and_norms() + 3 * h * self.intermediate_size
        moe = (self._attention_and_norms() + h * self.num_experts
               + self.num_experts * 3 * h * self.moe_intermediate_size) if self.moe_layers else 0
        return max(dense if self.num_layers > self.moe_layers else 0, moe, self.vocab_size * h + h)

    def parameters(self) -> int:
        """All parameters (what ``sum(p.numel() for p in model.parameters())`` counts): memory."""
        return self.text_parameters() + self.vision_parameters()

    def active_parameters(self) -> int:
        """Parameters one token runs through (all but the experts it is not routed to): compute."""
        return self.text_parameters(active=True) + self.vision_parameters()

    def image_tokens(self, longest_side: int) -> tuple[int, int]:
        """(LM tokens, vision patches) of one page rendered at ``longest_side`` pixels.

        The architecture's image processor (:class:`~olmpipe.models.architectures.ImageBudget`: each side a
        multiple of patch x merge, 28 or 32 px, within the pixel limits; merge x merge patches per
        token); the page is assumed portrait US letter (:data:`olmpipe.models.architectures.PAGE_ASPECT`).
        """
        page = page_tokens(budget_of(self), longest_side)
        return page.image_tokens, page.patches

    def max_image_tokens(self, longest_side: int) -> int:
        """LM tokens of the largest page rendered at ``longest_side`` pixels: a square one (the
        architecture's image processor, pixel limits included)."""
        return budget_of(self).tokens(longest_side, longest_side)


def _moe_layers(text: Mapping[str, Any], layers: int) -> int:
    """Layers with a sparse MLP (transformers' Qwen3-VL-MoE rule: not in ``mlp_only_layers`` and
    ``(layer + 1) % decoder_sparse_step == 0``)."""
    if not num_experts(text):
        return 0
    dense = set(text.get("mlp_only_layers") or [])
    step = int(text.get("decoder_sparse_step") or 1)
    return sum(1 for layer in range(layers) if layer not in dense and (layer + 1) % step == 0)


def shape_from_config(config: Mapping[str, Any], source: str, budget: ImageBudget | None = None) -> ModelShape:
    """A :class:`ModelShape` from ``config.json`` fields (flat or with ``text_config``).

    ``budget``: the folder's image processor (default: the architecture's published one).
    """
    try:
        arch: Architecture = architecture_of(config, source)
    except UnsupportedArchitectureError as exc:
        raise PlanError(str(exc)) from None
    text = config.get("text_config") or config
    vision = config.get("vision_config")
    try:
        if not isinstance(vision, Mapping):
            raise KeyError("vision_config")
        layers = int(text["num_hidden_layers"])
        qwen2_vl = arch.key == "qwen2_vl"
        return ModelShape(
            source=source,
            vocab_size=int(text.get("vocab_size", config.get("vocab_size"))),
            hidden_size=int(text["hidden_size"]),
            intermediate_size=int(text["intermediate_size"]),
            num_layers=layers,
            num_heads=int(text["num_attention_heads"]),
            num_kv_heads=int(text.get("num_key_value_heads") or text["num_attention_heads"]),
            tie_word_embeddings=bool(config.get("tie_word_embeddings", text.get("tie_word_embeddings", False))),
            max_position_embeddings=int(text["max_position_embeddings"]),
            vision_depth=int(vision["depth"]),
            # Qwen2-VL: embed_dim is the tower's width, hidden_size its output (the LM's width)
            vision_hidden_size=int(vision["embed_dim"] if qwen2_vl else vision["hidden_size"]),
            vision_intermediate_size=int(vision["embed_dim"] * vision["mlp_ratio"] if qwen2_vl
                                         else vision["intermediate_size"]),
            vision_out_hidden_size=int(vision["hidden_size"] if qwen2_vl else vision["out_hidden_size"]),
            patch_size=int(vision["patch_size"]),
            spatial_merge_size=int(vision["spatial_merge_size"]),
            temporal_patch_size=int(vision["temporal_patch_size"]),
            in_chans=int(vision.get("in_chans", vision.get("in_channels", 3))),
            architecture=arch.key,
            head_dim=int(text.get("head_dim") or 0) if arch.key.startswith("qwen3") else 0,
            num_experts=num_experts(text) if arch.moe else 0,
            experts_per_token=int(text.get("num_experts_per_tok") or 0) if arch.moe else 0,
            moe_intermediate_size=int(text.get("moe_intermediate_size") or 0) if arch.moe else 0,
            moe_layers=_moe_layers(text, layers) if arch.moe else 0,
            num_position_embeddings=int(vision.get("num_position_embeddings") or 0),
            deepstack_mergers=len(vision.get("deepstack_visual_indexes") or ()),
            image_budget=budget or arch.image_budget,
        )
    except (KeyError, TypeError, ValueError) as exc:
        raise PlanError(f"{source}: not a {arch.label} config (missing or bad field {exc}); the memory plan "
                        "needs text hidden_size, intermediate_size, num_hidden_layers, ... and vision_config") from exc


def load_shape(model: str | Path) -> ModelShape:
    """The shapes of ``model``: a local folder's ``config.json`` (and image processor settings), or a
    hub id of :data:`KNOWN_MODELS`."""
    path = Path(model)
    config_file = path / "config.json"
    if config_file.is_file():
        try:
            config = read_model_config(path)
            budget = image_budget_of(path, architecture_of(config, str(config_file)))
        except (ModelConfigError, UnsupportedArchitectureError) as exc:
            raise PlanError(str(exc)) from None
        return shape_from_config(config, str(config_file), budget)
    if str(model) in KNOWN_MODELS:
        return shape_from_config(KNOWN_MODELS[str(model)], f"{model} (known sizes)")
    if path.is_dir():
        raise PlanError(f"{path}: model folder without config.json")
    raise PlanError(f"model {str(model)!r}: no local folder with config.json and not a known hub id "
                    f"({', '.join(KNOWN_MODELS)}); download it and set model.path to its folder")



def budget_of(shape: ModelShape) -> ImageBudget:
    """The image budget of a model shape (its processor's, else unbounded patches of its vision config)."""
    return shape.image_budget or ImageBudget(shape.patch_size, shape.spatial_merge_size, 0, 2**62)
