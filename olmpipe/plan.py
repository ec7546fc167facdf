"""Memory plan of a training job: does the configuration fit in GPU memory? Checked before launch.

    olmpipe plan --configfile config/olmocr2.yaml            # table per GPU, "fits" or why not
    olmpipe plan --configfile my.yaml --gpus 4 --model /models/qwen7b

The estimate is arithmetic on the model's shapes (its folder's ``config.json``, or
:data:`KNOWN_MODELS` for hub ids; Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE, whose total
parameters count for memory and whose active parameters (experts per token) for activations) and
the config: per training GPU, the weights, gradients and
AdamW states under ``resources.train.strategy`` (:func:`training_bytes_per_param`: float32 master
weights with bf16 compute, :mod:`olmpipe.train.precision`), the reference model when
``train.grpo.beta > 0`` (in the compute dtype), activations of one micro-batch
(``per_device_train_batch_size`` sequences of page-image tokens from ``rasterize.longest_side``
(the architecture's image processor: :mod:`olmpipe.architectures`) + prompt + ``max_completion_length``,
with or without ``activation_checkpointing``), the completion logits, a fixed runtime reserve, and
vLLM's share (colocate mode); in server mode, the server GPU's weights and KV cache. vLLM must hold
its weights plus the KV cache of one sequence of ``vllm_max_model_length`` tokens (the model's
context length when unset, e.g. 128000 for Qwen2.5-VL: vLLM refuses to start otherwise).

Sizes are GiB (2**30 bytes, what ``nvidia-smi`` and ``torch.cuda.mem_get_info`` report);
``resources.train.gpu_memory_gb`` is one GPU's memory in those units. It is an estimate meant to
catch the configurations that cannot fit (a missing sharding strategy, a vLLM share smaller than
the weights, an unset context length), not to tune the last GiB. The train rule calls
:func:`checked_launch_prefix`, so ``snakemake`` stops before submitting a job that cannot fit.
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import math
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.architectures import (
    Architecture,
    ImageBudget,
    ModelConfigError,
    UnsupportedArchitectureError,
    architecture_of,
    image_budget_of,
    num_experts,
    page_size,
    page_tokens,
    read_model_config,
)
from olmpipe.checkpoint_plan import CheckpointPlan, ProfileError, checkpoint_plan, profile_slurm_extra
from olmpipe.known_models import KNOWN_MODELS
from olmpipe.launch.commands import launch_prefix
from olmpipe.process_plan import DEEPSPEED_STRATEGIES, LaunchError, LaunchPlan, plan
from olmpipe.prompts import PROMPT_TEXT_TOKENS
from olmpipe.train.precision import Precision, resolve_precision
from olmpipe.train.vllm_server import collective_timeout_problem
from olmpipe.vllm_context import context_problems

logger = logging.getLogger(__name__)

GIB = 2**30
#: The SLURM profile ``olmpipe plan`` reads for the train rule's ``--signal`` lead (relative to the
#: working directory, the repository root).
DEFAULT_PROFILE = "workflow/profiles/slurm"
#: CUDA context, NCCL buffers and allocator fragmentation per GPU (a rough, fixed reserve).
RUNTIME_RESERVE_GIB = 2.0
#: Bytes per parameter of vLLM's weights and per KV cache value (bf16, vLLM's ``dtype: auto`` on
#: Qwen VL checkpoints).
VLLM_BYTES = 2

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

    def parameters(self) -> int:
        """All parameters (what ``sum(p.numel() for p in model.parameters())`` counts): memory."""
        return self.text_parameters() + self.vision_parameters()

    def active_parameters(self) -> int:
        """Parameters one token runs through (all but the experts it is not routed to): compute."""
        return self.text_parameters(active=True) + self.vision_parameters()

    def image_tokens(self, longest_side: int) -> tuple[int, int]:
        """(LM tokens, vision patches) of one page rendered at ``longest_side`` pixels.

        The architecture's image processor (:class:`~olmpipe.architectures.ImageBudget`: each side a
        multiple of patch x merge, 28 or 32 px, within the pixel limits; merge x merge patches per
        token); the page is assumed portrait US letter (:data:`olmpipe.architectures.PAGE_ASPECT`).
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


def training_bytes_per_param(strategy: str, processes: int, weight_bytes: int,
                             compute_bytes: int | None = None) -> dict[str, float]:
    """Bytes per parameter and GPU of weights, gradients and AdamW states under a strategy.

    ``weight_bytes``: the dtype the policy is loaded in (4: float32 master weights, the default of
    :mod:`olmpipe.train.precision`; 2: ``train.pure_bf16``); ``compute_bytes``: 2 under bf16 mixed
    precision, 4 in float32 (default: ``weight_bytes``).

    - ``single``/``ddp``: the parameters are the master weights (bf16 only under autocast), so
      weights, gradients and both AdamW moments (torch keeps them in the parameter dtype) are whole
      on every rank: w + w + 2w (16 bytes with float32 masters, 8 with pure bf16). DDP may add a
      bucket copy of the gradients; left to the reserve.
    - ``zero2``: DeepSpeed casts the module to the compute dtype (c, whole); gradients sharded;
      fp32 master weights + fp32 moments (12 bytes, 8 without mixed precision) sharded (ZeRO paper,
      Rajbhandari et al. 2020, Pos+g).
    - ``zero3``: everything sharded (Pos+g+p).
    - ``fsdp``: FSDP2 under mixed precision keeps fp32 sharded parameters, gradients and moments
      (accelerate upcasts low-precision parameters): 16 bytes / ranks.
    """
    w, n = weight_bytes, processes
    c = w if compute_bytes is None else compute_bytes
    master = 8 + (4 if c < 4 else 0)
    table = {
        "single": (w, w, 2 * w),
        "ddp": (w, w, 2 * w),
        "zero2": (c, c / n, master / n),
        "zero3": (c / n, c / n, master / n),
        "fsdp": (4 / n, 4 / n, 8 / n),
    }
    weights, grads, optimizer = table[strategy]
    return {"weights": weights, "gradients": grads, "optimizer": optimizer}


@dataclass(frozen=True)
class Term:
    """One row of the plan: what takes memory, how much, and the setting that shrinks it."""

    name: str
    gib: float
    note: str
    fix: str


@dataclass(frozen=True)
class MemoryPlan:
    """Per-GPU memory of a training job (training GPUs, and the vLLM server GPU in server mode)."""

    launch: LaunchPlan
    shape: ModelShape
    gpu_memory_gib: float
    train_terms: tuple[Term, ...]
    server_terms: tuple[Term, ...]
    problems: tuple[str, ...]
    precision: str = ""
    checkpoints: CheckpointPlan | None = None
    #: Image tokens of one page and the page's size (``rasterize.longest_side``, portrait letter).
    image_tokens: int = 0
    page_height: int = 0
    page_width: int = 0

    @property
    def all_problems(self) -> tuple[str, ...]:
        """Memory and launch problems, then checkpoint problems."""
        return self.problems + (self.checkpoints.problems if self.checkpoints is not None else ())

    @property
    def train_total(self) -> float:
        """GiB per training GPU."""
        return sum(t.gib for t in self.train_terms)

    @property
    def fits(self) -> bool:
        """True when no check failed (memory, launch and checkpoints)."""
        return not self.all_problems

    def table(self) -> str:
        """The plan as a text table (what ``olmpipe plan`` prints)."""
        p = self.launch
        shape = self.shape
        active = (f" ({shape.active_parameters() / 1e9:.2f}B active per token: {shape.experts_per_token} of "
                  f"{shape.num_experts} experts)" if shape.num_experts else "")
        budget = shape.image_budget
        lines = [f"model: {shape.source}, {shape.parameters() / 1e9:.2f}B parameters{active}",
                 (f"page image: {self.image_tokens} tokens ({shape.architecture}: {budget.factor} x {budget.factor} "
                  f"px per token, {self.page_height} x {self.page_width} px page)") if budget else "",
                 (f"strategy: {p.effective_strategy}, {p.train_processes} training rank(s) on {p.nodes} node(s), "
                  f"{p.vllm_server_gpus} vLLM server GPU(s); GPU memory {self.gpu_memory_gib:g} GiB")]
        if self.precision:
            lines.append(f"precision: {self.precision}")
        lines.append("")
        width = max(len(t.name) for t in (*self.train_terms, *self.server_terms))
        for title, terms in (("per training GPU", self.train_terms), ("vLLM server GPU", self.server_terms)):
            if not terms:
                continue
            lines.append(f"{title:<{width}}  {'GiB':>7}  note")
            lines += [f"{t.name:<{width}}  {t.gib:7.1f}  {t.note}" for t in terms]
            total = sum(t.gib for t in terms)
            lines.append(f"{'total':<{width}}  {total:7.1f}  of {self.gpu_memory_gib:g} GiB")
            lines.append("")
        if self.checkpoints is not None:
            lines += [self.checkpoints.table(), ""]
        lines.append("fits" if self.fits else "does not fit:\n" + "\n".join(f"- {m}" for m in self.all_problems))
        return "\n".join(line for i, line in enumerate(lines) if line or i > 1)


def _vllm_need(shape: ModelShape, max_len: int, tp: int) -> tuple[float, float]:
    """(weights, KV cache of one ``max_len`` sequence) in GiB of one vLLM GPU (tensor parallel ``tp``)."""
    weights = shape.parameters() * VLLM_BYTES / tp / GIB
    kv = 2 * shape.num_layers * shape.kv_dim * VLLM_BYTES * max_len / tp / GIB
    return weights, kv


def _precision(cfg: Mapping[str, Any]) -> Precision:
    """The training precision on a GPU (:func:`olmpipe.train.precision.resolve_precision`)."""
    try:
        return resolve_precision(cfg["train"], "cuda")
    except ValueError as exc:
        raise PlanError(str(exc)) from exc


def memory_plan(cfg: Mapping[str, Any], shape: ModelShape, gpus: int | None = None, *,
                slurm_extra: str | None = None, signal_source: str = "the train rule's slurm_extra") -> MemoryPlan:
    """The per-GPU memory plan of ``cfg`` (a validated config) for a model of ``shape``, with its
    checkpoints' disk and write time (:mod:`olmpipe.checkpoint_plan`).

    ``gpus``: the job's GPUs (``resources.train.gpu`` when None; the rule passes its resource);
    ``slurm_extra``: the train rule's sbatch flags (SLURM's ``--signal`` lead), ``signal_source`` where
    they come from (for the messages).
    """
    res, grpo = cfg["resources"]["train"], cfg["train"]["grpo"]
    gpus = res["gpu"] if gpus is None else gpus
    launch = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"])
    strategy, n = launch.effective_strategy, launch.train_processes
    precision = _precision(cfg)
    # w: bytes of what runs (activations, reference model); the weights' own bytes are in per_param
    w = 2 if precision.bf16 else 4
    params = shape.parameters()
    per_param = training_bytes_per_param(strategy, n, 2 if precision.weights == "bfloat16" else 4, w)
    shard = "zero3 or fsdp (shard it over the ranks)"
    peft = cfg["train"]["peft"]
    terms = _lora_terms(shape, peft, w) if peft["enabled"] else [
        Term("weights", params * per_param["weights"] / GIB, f"{params / 1e9:.2f}B x {per_param['weights']:.3g} B",
             f"resources.train.strategy: {shard}"),
        Term("gradients", params * per_param["gradients"] / GIB, f"x {per_param['gradients']:.3g} B",
             "resources.train.strategy: zero2, zero3 or fsdp"),
        Term("optimizer states", params * per_param["optimizer"] / GIB, f"AdamW, x {per_param['optimizer']:.3g} B",
             "resources.train.strategy: zero2, zero3 or fsdp (shards them; more GPUs shard them thinner)"),
    ]
    if grpo["beta"] > 0 and not peft["enabled"]:  # LoRA: the reference is the adapter disabled
        ref = w / n if strategy in ("zero3", "fsdp") else w
        terms.append(Term("reference model", params * ref / GIB, f"beta={grpo['beta']:g}, x {ref:.3g} B",
                          f"train.grpo.beta: 0 (no reference model), or resources.train.strategy: {shard}"))
    batch, completion = grpo["per_device_train_batch_size"], grpo["max_completion_length"]
    img_tokens, patches = shape.image_tokens(cfg["rasterize"]["longest_side"])
    seq = img_tokens + PROMPT_TEXT_TOKENS + completion
    h, hv = shape.hidden_size, shape.vision_hidden_size
    # Values kept for backward per token and layer (Korthikanti et al. 2022, with SDPA/flash attention:
    # no attention matrix): norm in/out, q, k, v, attention out, second norm in/out, SwiGLU's gate, up,
    # act, product -> 4h + 2q + 2kv + 4i (6h + 2kv + 4i where q is h wide). A mixture-of-experts layer
    # keeps the router's logits and the SwiGLU values of the experts each token runs (active, not
    # total parameters). With checkpointing, each layer's input plus one layer recomputed.
    attention_values = 4 * h + 2 * shape.q_dim + 2 * shape.kv_dim
    dense_values = attention_values + 4 * shape.intermediate_size
    moe_values = attention_values + shape.num_experts + 4 * shape.experts_per_token * shape.moe_intermediate_size
    dense_layers = shape.num_layers - shape.moe_layers
    all_layer_values = dense_layers * dense_values + shape.moe_layers * moe_values
    layer_values = max(dense_values if dense_layers else 0, moe_values if shape.moe_layers else 0)
    vision_values = 8 * hv + 4 * shape.vision_intermediate_size
    if grpo["activation_checkpointing"]:
        text_act = batch * seq * (shape.num_layers * h + layer_values) * w
        vision_act = batch * patches * (shape.vision_depth * hv + vision_values) * w
        act_note = "checkpointed"
    else:
        text_act = batch * seq * all_layer_values * w
        vision_act = batch * patches * shape.vision_depth * vision_values * w
        act_note = "not checkpointed"
    if peft["enabled"] and not peft["vision"] and "merger" not in peft["modules_to_save"]:
        vision_act, act_note_vision = 0.0, "frozen: nothing kept for backward"
    else:
        act_note_vision = act_note
    act_fix = ("train.grpo.activation_checkpointing: true, or lower per_device_train_batch_size, "
               "max_completion_length or rasterize.longest_side")
    terms += [
        Term("activations", text_act / GIB, f"{batch} x {seq} tokens ({img_tokens} image), {act_note}", act_fix),
        Term("vision activations", vision_act / GIB, f"{batch} x {patches} patches, {act_note_vision}", act_fix),
        # logits of the completion tokens and their log-softmax kept for backward
        Term("logits", batch * completion * shape.vocab_size * 2 * w / GIB,
             f"{batch} x {completion} x {shape.vocab_size} vocab",
             "lower train.grpo.max_completion_length or per_device_train_batch_size"),
        Term("runtime reserve", RUNTIME_RESERVE_GIB, "CUDA context, NCCL, allocator", "-"),
    ]
    if not grpo["use_vllm"]:
        # transformers' generate() runs the process's whole generation batch at once (TRL 1.16
        # grpo_trainer.py:1873): its KV cache holds every prompt + completion token of it.
        gen_batch = batch * (grpo["steps_per_generation"] or grpo["gradient_accumulation_steps"])
        kv = 2 * shape.num_layers * shape.kv_dim * gen_batch * seq * w
        terms.append(Term("generation KV cache", kv / GIB, f"transformers generate, {gen_batch} x {seq} tokens",
                          "lower per_device_train_batch_size x steps_per_generation or max_completion_length, "
                          "or use_vllm"))
    problems: list[str] = []
    server: list[Term] = []
    gpu_gib = float(res["gpu_memory_gb"])
    if grpo["use_vllm"]:
        max_len = grpo["vllm_max_model_length"] or shape.max_position_embeddings
        unset = "" if grpo["vllm_max_model_length"] else " (unset: the model's context)"
        len_fix = "set train.grpo.vllm_max_model_length (prompt + completion tokens, e.g. " \
                  f"{seq + 64})" if not grpo["vllm_max_model_length"] else "lower train.grpo.vllm_max_model_length"
        # the context against the longest prompt: context_problems, below
        tp = grpo["vllm_tensor_parallel_size"]
        utilization = grpo["vllm_gpu_memory_utilization"]
        share = utilization * gpu_gib
        weights, kv = _vllm_need(shape, max_len, tp)
        if grpo["vllm_mode"] == "colocate":
            terms.append(Term("vLLM share (colocate)", share, f"vllm_gpu_memory_utilization {utilization:g} x "
                              f"{gpu_gib:g} GiB", "lower train.grpo.vllm_gpu_memory_utilization or use vllm_mode: server"))
            where = f"vLLM's share ({utilization:g} x {gpu_gib:g} = {share:.1f} GiB of each training GPU)"
            other = "or use vllm_mode: server with resources.train.vllm_server_gpus"
        else:
            # trl vllm-serve gets the same grpo.vllm_* settings (olmpipe.train.vllm_server)
            server = [Term("vLLM weights", weights, f"{params / 1e9:.2f}B x {VLLM_BYTES} B / tp {tp}", "-"),
                      Term("vLLM KV cache (1 sequence)", kv, f"{max_len} tokens{unset}", len_fix)]
            where = f"the vLLM server's share ({utilization:g} x {gpu_gib:g} = {share:.1f} GiB)"
            other = "or raise train.grpo.vllm_tensor_parallel_size with more vllm_server_gpus"
            timeout = collective_timeout_problem(cfg["train"], grpo, n)
            if timeout:
                problems.append(timeout)
            if launch.vllm_server_gpus < tp:
                problems.append(f"train.grpo.vllm_mode: server needs resources.train.vllm_server_gpus >= "
                                f"vllm_tensor_parallel_size ({tp}), got {launch.vllm_server_gpus}: give the server "
                                "GPUs of the job or use vllm_mode: colocate")
        if weights + kv > share:
            need = math.ceil((weights + kv) / gpu_gib * 100) / 100
            raise_share = (f"raise train.grpo.vllm_gpu_memory_utilization to at least {need:.2f}" if need <= 1 else
                           f"no share helps: they need {weights + kv:.1f} GiB, more than the whole GPU "
                           f"(resources.train.gpu_memory_gb: {gpu_gib:g}); use a larger GPU")
            problems.append(
                f"{where} cannot hold its bf16 weights ({weights:.1f} GiB) and the KV cache of one "
                f"{max_len}-token sequence ({kv:.1f} GiB){unset}: {raise_share}, {len_fix}, {other}")
    total = sum(t.gib for t in terms)
    if total > gpu_gib:
        top = max(terms, key=lambda t: t.gib)
        hint = f"; {_zero3_hint(cfg, shape, gpus, gpu_gib)}" if strategy in ("ddp", "zero2") and n > 1 else ""
        problems.append(f"a training GPU needs {total:.1f} GiB, more than resources.train.gpu_memory_gb "
                        f"({gpu_gib:g}); largest term: {top.name} ({top.gib:.1f} GiB): {top.fix}{hint}")
    problems += context_problems(cfg, budget_of(shape))
    masters = "float32 master weights" if precision.master_weights(strategy in DEEPSPEED_STRATEGIES + ("fsdp",)) \
        else "bf16 weights without master copy (train.pure_bf16)"
    if peft["enabled"]:
        masters = f"frozen {'quantized' if peft['quantization'] != 'none' else precision.compute} base, float32 adapter"
    checkpoints = checkpoint_plan(cfg, strategy=strategy, processes=n, parameters=params,
                                  weight_bytes=2 if precision.weights == "bfloat16" else 4, compute_bytes=w,
                                  slurm_extra=slurm_extra, signal_source=signal_source,
                                  adapter_bytes=_adapter_bytes(shape, peft) if peft["enabled"] else None)
    height, width = page_size(cfg["rasterize"]["longest_side"])
    return MemoryPlan(launch=launch, shape=shape, gpu_memory_gib=gpu_gib, train_terms=tuple(terms),
                      server_terms=tuple(server), problems=tuple(problems),
                      precision=f"{masters}, {precision.compute} compute, "
                                + ("reference: the adapter disabled" if peft["enabled"]
                                   else f"{precision.reference} reference model"),
                      checkpoints=checkpoints, image_tokens=img_tokens, page_height=height, page_width=width)


def _adapter_bytes(shape: ModelShape, peft: Mapping[str, Any]) -> float:
    """Bytes of what LoRA trains: the adapter and the modules_to_save copies, all float32 (:mod:`olmpipe.loraplan`)."""
    from olmpipe.loraplan import adapter_parameters, saved_module_parameters

    return (adapter_parameters(shape, peft)[0] + saved_module_parameters(shape, peft)[0]) * 4


def _lora_terms(shape: ModelShape, peft: Mapping[str, Any], w: int) -> list[Term]:
    """Weights, gradients and optimizer states of LoRA/QLoRA training (:mod:`olmpipe.loraplan`)."""
    from olmpipe.loraplan import adapter_parameters, base_weight_bytes, saved_module_parameters

    base, base_note = base_weight_bytes(shape, peft, w)
    adapter, unknown = adapter_parameters(shape, peft)
    saved, unknown_saved = saved_module_parameters(shape, peft)
    trained = _adapter_bytes(shape, peft)  # fp32 adapter and modules_to_save copies (16 B/param with grads, AdamW)
    note_unknown = f"; not sized: {', '.join(unknown + unknown_saved)}" if unknown or unknown_saved else ""
    quant_fix = "train.peft.quantization: 4bit (QLoRA, rollouts without vLLM)"
    return [
        Term("base weights (frozen)", base / GIB, base_note,
             quant_fix if peft["quantization"] == "none" else "a smaller model"),
        Term("adapter weights", trained / GIB,
             f"LoRA r={peft['r']}: {adapter / 1e6:.1f}M x 4 B" + (f" + {saved / 1e6:.1f}M saved x 4 B" if saved else "")
             + note_unknown, "lower train.peft.r or fewer target_modules"),
        Term("gradients", trained / GIB, "adapter only", "lower train.peft.r"),
        Term("optimizer states", 2 * trained / GIB, "AdamW, adapter only", "lower train.peft.r"),
    ]


def _zero3_hint(cfg: Mapping[str, Any], shape: ModelShape, gpus: int, gpu_gib: float) -> str:
    """What ZeRO-3 (everything sharded) would need per training GPU, for a job ZeRO-2/DDP cannot fit."""
    from olmpipe.config import deep_update

    alternative = deep_update(json.loads(json.dumps(cfg)), {"resources": {"train": {"strategy": "zero3"}}})
    need = sum(t.gib for t in memory_plan(alternative, shape, gpus).train_terms)
    verdict = "fits" if need <= gpu_gib else "still does not fit: more GPUs (resources.train.gpu, nodes)"
    return (f"with resources.train.strategy: zero3 a training GPU would need {need:.1f} GiB of {gpu_gib:g} "
            f"({verdict})")


def budget_of(shape: ModelShape) -> ImageBudget:
    """The image budget of a model shape (its processor's, else unbounded patches of its vision config)."""
    return shape.image_budget or ImageBudget(shape.patch_size, shape.spatial_merge_size, 0, 2**62)


def model_for_plan(cfg: Mapping[str, Any], model: str | Path | None = None) -> str:
    """The model the plan reads: ``model``, else the stages' (:func:`olmpipe.layout.model_dir`), or
    the hub id itself (:data:`KNOWN_MODELS`) while its download folder does not exist yet."""
    from olmpipe.layout import hub_model, model_dir

    if model is not None:
        return str(model)
    folder = model_dir(cfg)
    hub = hub_model(cfg)
    return hub[0] if hub and not Path(folder).exists() else folder


def check_fits(cfg: Mapping[str, Any], gpus: int, model: str | Path, slurm_extra: str | None = None) -> MemoryPlan | None:
    """Raise :class:`PlanError` naming the terms that do not fit (GPU memory, or a checkpoint that
    cannot be written within the stop grace or SLURM's signal lead); None when there is nothing to check.

    CPU jobs (``gpus == 0``) have no GPU memory to plan. A model whose shapes are unknown yet (the
    embedded model before it is built) is logged and skipped.
    """
    if gpus <= 0:
        return None
    try:
        shape = load_shape(model)
    except PlanError as exc:
        from olmpipe.layout import RESULTS

        if Path(model).parts[:1] == RESULTS.parts and not Path(model).exists():
            if cfg["model"]["path"] in KNOWN_MODELS:  # a hub id not downloaded yet: its known sizes
                shape = load_shape(cfg["model"]["path"])
            else:
                logger.warning("memory plan skipped until the model is built or downloaded: %s", exc)
                return None
        else:
            raise
    result = memory_plan(cfg, shape, gpus, slurm_extra=slurm_extra)
    if not result.fits:
        what = [w for w, bad in (("does not fit in GPU memory", result.problems),
                                 ("cannot write its checkpoint in time", result.checkpoints.problems)) if bad]
        raise PlanError(f"the training job {' and '.join(what)} (olmpipe plan prints the table):\n"
                        + "\n".join(f"  - {m}" for m in result.all_problems))
    return result


@functools.cache
def _warn_missing_packages(needs: tuple[Any, ...]) -> None:
    """Warn (once per set of needs, not once per seed) when this environment lacks a package the
    training jobs need. Only a warning: the jobs may run in another environment (a GPU node's, or
    ``--sdm conda``'s); each job checks its own node at start and stops there
    (:mod:`olmpipe.train.packages`)."""
    from olmpipe.train.packages import SETUP_COMMAND, problems

    missing = problems(needs, import_modules=False)
    if missing:
        logger.warning("this environment lacks what the training jobs need (%s); a job stops at start unless "
                       "its node has it (`%s` sets one up)", "; ".join(missing), SETUP_COMMAND)


def checked_launch_prefix(cfg: Mapping[str, Any], gpus: int, model: str | Path, slurm_extra: str | None = None) -> str:
    """The train rule's launch prefix, after :func:`olmpipe.train.preflight.job_problems` (settings this
    job's device or model cannot train) and :func:`check_fits` (raises before anything starts);
    ``slurm_extra``: the rule's resource of that name (a profile's ``--signal`` lead)."""
    from olmpipe.train.preflight import job_problems

    res = cfg["resources"]["train"]
    problems = job_problems(cfg, gpus, model)
    if problems:
        raise LaunchError("the training job cannot run with these settings (checked before it is submitted):\n"
                          + "\n".join(f"  - {p}" for p in problems))
    check_fits(cfg, gpus, model, slurm_extra)
    from olmpipe.train.packages import config_needs

    processes = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    from olmpipe.config import seed_batch_problems

    batch = seed_batch_problems(cfg, processes)  # TRL's batch arithmetic with the GPUs this job really gets
    if batch:
        raise LaunchError(f"the training batch does not fit {processes} training process(es) "
                          f"({gpus} GPU(s)):\n" + "\n".join(f"  - {p}" for p in batch))
    _warn_missing_packages(tuple(config_needs(cfg, processes=processes)))
    return launch_prefix(gpus, res["launcher"], res["vllm_server_gpus"], strategy=res["strategy"],
                         nodes=res["nodes"], stop_grace_s=res["stop_grace_s"])


def load_configs(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``config/config.yaml`` with each ``--configfile`` merged on top, validated (as Snakemake does)."""
    import yaml

    from olmpipe.config import DEFAULT_CONFIG_PATH, ConfigError, deep_update, validate_config

    merged: dict[str, Any] = {}
    for path in [DEFAULT_CONFIG_PATH, *paths]:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read the config: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        deep_update(merged, raw)
    return validate_config(merged)


def main(argv: list[str] | None = None) -> int:
    """``olmpipe plan``: print the memory table; exit 0 when it fits, 1 when not, 2 on bad input."""
    parser = argparse.ArgumentParser(prog="olmpipe plan", description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=[],
                        help="config files merged over config/config.yaml, as snakemake --configfile")
    parser.add_argument("--gpus", type=int, default=None, help="GPUs of the job (default: resources.train.gpu)")
    parser.add_argument("--model", default=None, help="model folder or hub id (default: model.path)")
    parser.add_argument("--profile", default=None,
                        help="Snakemake profile folder whose set-resources.train_seed.slurm_extra gives SLURM's "
                             f"--signal lead (default: {DEFAULT_PROFILE} when it exists here; 'none' for no SLURM)")
    ns = parser.parse_args(argv)
    from olmpipe.config import ConfigError
    from olmpipe.train.preflight import job_problems

    if ns.gpus is not None and ns.gpus < 0:
        sys.stderr.write(f"olmpipe plan: --gpus {ns.gpus}: a job has 0 GPUs (a CPU job) or more\n")
        return 2
    try:
        cfg = load_configs(ns.configfile)
        gpus = cfg["resources"]["train"]["gpu"] if ns.gpus is None else ns.gpus
        model = model_for_plan(cfg, ns.model)
        problems = job_problems(cfg, gpus, model)
        if problems:
            raise PlanError("the training job cannot run with these settings:\n"
                            + "\n".join(f"  - {p}" for p in problems))
        if gpus <= 0:
            source = "--gpus 0" if ns.gpus is not None else "resources.train.gpu is 0"
            sys.stdout.write(f"{source}: a CPU job, no GPU memory to plan\n")
            return 0
        profile = ns.profile if ns.profile is not None else (DEFAULT_PROFILE if Path(DEFAULT_PROFILE).is_dir() else "none")
        extra = None if profile == "none" else profile_slurm_extra(profile)
        result = memory_plan(cfg, load_shape(model), gpus, slurm_extra=extra,
                             signal_source=f"{Path(profile) / 'config.yaml'}" if profile != "none" else "no profile")
    except (ConfigError, PlanError, LaunchError, ProfileError) as exc:
        sys.stderr.write(f"olmpipe plan: {exc}\n")
        return 2
    sys.stdout.write(result.table() + "\n")
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
