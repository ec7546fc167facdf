"""Memory plan of a training job: does the configuration fit in GPU memory? Checked before launch.

The estimate is arithmetic on the model's shapes (:mod:`olmpipe.plan.shape`: Qwen2-VL, Qwen2.5-VL,
Qwen3-VL and Qwen3-VL-MoE, whose total parameters count for memory and whose active parameters
(experts per token) for activations) and the config: per training GPU, the weights, gradients and
AdamW states under ``resources.train.strategy`` (:func:`training_bytes_per_param`: float32 master
weights with bf16 compute, :mod:`olmpipe.job.precision`), the reference model when
``train.grpo.beta > 0`` (in the compute dtype), activations of one micro-batch
(``per_device_train_batch_size`` sequences of page-image tokens from ``rasterize.longest_side``
(the architecture's image processor: :mod:`olmpipe.models.architectures`) + prompt + ``max_completion_length``,
with or without ``activation_checkpointing``), the completion logits, a fixed runtime reserve, and
vLLM's share (colocate mode); in server mode, the server GPU's weights and KV cache. vLLM must hold
its weights plus the KV cache of one sequence of ``vllm_max_model_length`` tokens (the model's
context length when unset, e.g. 128000 for Qwen2.5-VL: vLLM refuses to start otherwise).

Sizes are GiB (2**30 bytes, :data:`olmpipe.plan.shape.GIB`); ``resources.train.gpu_memory_gb`` is
one GPU's memory in those units. It is an estimate meant to catch the configurations that cannot
fit (a missing sharding strategy, a vLLM share smaller than the weights, an unset context length),
not to tune the last GiB. The train rule calls :func:`olmpipe.plan.check.checked_launch_prefix`, so
``snakemake`` stops before submitting a job that cannot fit; ``olmpipe plan`` prints the table
(:mod:`olmpipe.plan.cli`).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from olmpipe.config.checks import collective_timeout_problem
from olmpipe.config.processes import DEEPSPEED_STRATEGIES, LaunchPlan, plan
from olmpipe.config.vllm_context import context_problems
from olmpipe.job.kinds import GRPO, JobKind
from olmpipe.job.precision import Precision, resolve_precision
from olmpipe.models.architectures import page_size
from olmpipe.plan.checkpoint import CheckpointPlan, checkpoint_plan
from olmpipe.plan.lora import adapter_bytes, lora_terms
from olmpipe.plan.shape import GIB, ModelShape, PlanError, budget_of
from olmpipe.plan.terms import Term, autocast_copy_bytes, training_bytes_per_param
from olmpipe.prompts import PROMPT_TEXT_TOKENS

#: CUDA context, NCCL buffers and allocator fragmentation per GPU (a rough, fixed reserve).
RUNTIME_RESERVE_GIB = 2.0
#: Bytes per parameter of vLLM's weights and per KV cache value (bf16, vLLM's ``dtype: auto`` on
#: Qwen VL checkpoints).
VLLM_BYTES = 2


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
    #: What a training GPU holds while the job loads, before training (:func:`_load_terms`).
    load_terms: tuple[Term, ...] = ()

    @property
    def all_problems(self) -> tuple[str, ...]:
        """Memory and launch problems, then checkpoint problems."""
        return self.problems + (self.checkpoints.problems if self.checkpoints is not None else ())

    @property
    def train_total(self) -> float:
        """GiB per training GPU."""
        return sum(t.gib for t in self.train_terms)

    @property
    def load_total(self) -> float:
        """GiB per training GPU while the job loads (the load peak)."""
        return sum(t.gib for t in self.load_terms)

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
        width = max(len(t.name) for t in (*self.train_terms, *self.server_terms, *self.load_terms))
        for title, terms, total_name in (("per training GPU", self.train_terms, "total"),
                                         ("while loading", self.load_terms, "load peak"),
                                         ("vLLM server GPU", self.server_terms, "total")):
            if not terms:
                continue
            lines.append(f"{title:<{width}}  {'GiB':>7}  note")
            lines += [f"{t.name:<{width}}  {t.gib:7.1f}  {t.note}" for t in terms]
            total = sum(t.gib for t in terms)
            lines.append(f"{total_name:<{width}}  {total:7.1f}  of {self.gpu_memory_gib:g} GiB")
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


def _precision(cfg: Mapping[str, Any], kind: JobKind = GRPO) -> Precision:
    """The training precision on a GPU (:func:`olmpipe.job.precision.resolve_precision`)."""
    try:
        return resolve_precision(kind.section_of(cfg), "cuda")
    except ValueError as exc:
        raise PlanError(str(exc)) from exc


@dataclass(frozen=True)
class _Job:
    """What the terms of a plan are computed from: the config's sections, the launch and precision."""

    cfg: Mapping[str, Any]
    shape: ModelShape
    launch: LaunchPlan
    precision: Precision
    #: bytes of what runs (activations, reference model); the weights' own bytes are in per_param
    w: int
    gpu_gib: float
    kind: JobKind = GRPO

    @property
    def knobs(self) -> Mapping[str, Any]:
        """The trainer's TRL config knobs (``train.grpo``; ``sft.args``)."""
        return self.kind.section_of(self.cfg)[self.kind.knobs_key]

    @property
    def grpo(self) -> Mapping[str, Any]:
        return self.knobs

    @property
    def key(self) -> str:
        """Where the knobs live, for the messages (``train.grpo``)."""
        return f"{self.kind.section}.{self.kind.knobs_key}"

    @property
    def peft(self) -> Mapping[str, Any]:
        return self.kind.section_of(self.cfg)["peft"]

    @property
    def sft(self) -> bool:
        """An SFT job: no generation, no reference model, the loss over the whole answer."""
        return not self.kind.rewards

    @property
    def weight_bytes(self) -> int:
        return 2 if self.precision.weights == "bfloat16" else 4


#: The setting that shards weights over the ranks (the fix of the weights' and reference's terms).
_SHARD = "zero3 or fsdp (shard it over the ranks)"


def _weight_terms(job: _Job) -> list[Term]:
    """Weights, gradients and optimizer states (LoRA: the adapter's, :func:`_lora_terms`), and the
    reference model of ``beta > 0`` (in the compute dtype; LoRA's reference is the adapter disabled)."""
    shape, strategy, n = job.shape, job.launch.effective_strategy, job.launch.train_processes
    params = shape.parameters()
    per_param = training_bytes_per_param(strategy, n, job.weight_bytes, job.w)
    terms = lora_terms(shape, job.peft, job.w, job.kind.section) if job.peft["enabled"] else [
        Term("weights", params * per_param["weights"] / GIB, f"{params / 1e9:.2f}B x {per_param['weights']:.3g} B",
             f"resources.{job.kind.section}.strategy: {_SHARD}"),
        Term("gradients", params * per_param["gradients"] / GIB, f"x {per_param['gradients']:.3g} B",
             f"resources.{job.kind.section}.strategy: zero2, zero3 or fsdp"),
        Term("optimizer states", params * per_param["optimizer"] / GIB, f"AdamW, x {per_param['optimizer']:.3g} B",
             f"resources.{job.kind.section}.strategy: zero2, zero3 or fsdp (shards them; more GPUs shard them thinner)"),
    ]
    copies = autocast_copy_bytes(strategy, job.weight_bytes, job.w, job.peft["enabled"])
    if copies:
        terms.append(Term("autocast weight copies", params * copies / GIB,
                          f"x {copies} B: bf16 casts of the float32 weights, kept for the forward",
                          f"resources.{job.kind.section}.strategy: zero2, zero3 or fsdp (their modules compute "
                          "in bf16 without copies)"))
    beta = job.knobs.get("beta", 0.0)
    if beta > 0 and not job.peft["enabled"]:
        ref = job.w / n if strategy in ("zero3", "fsdp") else job.w
        terms.append(Term("reference model", params * ref / GIB, f"beta={beta:g}, x {ref:.3g} B",
                          f"train.grpo.beta: 0 (no reference model), or resources.train.strategy: {_SHARD}"))
    return terms


def _answer_tokens(job: _Job) -> int:
    """Tokens of the answer a training sequence holds: GRPO's ``max_completion_length``; for SFT the
    answers' longest, planned as ``generation.max_new_tokens`` (the answers the stages generate),
    unless ``sft.args.max_length`` caps the whole sequence (:func:`_sequence`)."""
    return job.cfg["generation"]["max_new_tokens"] if job.sft else job.knobs["max_completion_length"]


def _load_terms(job: _Job) -> list[Term]:
    """What each training GPU holds while the job loads, before the first step (:mod:`olmpipe.job.load`).

    The policy as it is loaded, TRL's reference model (``beta > 0``) as ``GRPOTrainer.__init__``
    prepares it, and a colocated vLLM engine, which TRL builds in the same ``__init__``
    (``trl/generation/vllm_generation.py`` 347); the optimizer's states come later, at the first step.

    - ``single``/``ddp``: the float32 policy and the bf16 reference whole on each GPU (as when training);
    - ``zero2``: the policy in the compute dtype, whole (DeepSpeed's module, moved to the GPU by the engine,
      ``runtime/engine.py`` 2080-2094), the reference whole (TRL's stage-0 engine, ``trl/models/utils.py``
      285-286);
    - ``zero3``: both partitioned as they load (``zero.Init``), plus the largest tensor gathered whole
      while its module loads (:meth:`~olmpipe.plan.shape.ModelShape.largest_tensor`);
    - ``fsdp``: loaded on the CPU and sharded unit by unit (``fully_shard`` moves a unit to the GPU,
      then keeps its shard): the float32 shards plus one whole unit
      (:meth:`~olmpipe.plan.shape.ModelShape.largest_unit`), the reference's shards likewise.
    """
    shape, strategy, n, c = job.shape, job.launch.effective_strategy, job.launch.train_processes, job.w
    params = shape.parameters()
    peft = job.peft
    if peft["enabled"]:
        from olmpipe.plan.lora import base_weight_bytes

        whole, _ = base_weight_bytes(shape, peft, c)
        unit_bytes = c
        how = "frozen base"
    else:
        per = {"zero2": c, "zero3": c, "fsdp": 4}.get(strategy, job.weight_bytes)
        whole, unit_bytes = params * per, per
        how = f"x {per} B"
    sharded = strategy in ("zero3", "fsdp")
    if strategy == "zero3":
        policy = Term("policy", whole / n / GIB, f"{how} / {n} ranks, partitioned as it loads (zero.Init)", "-")
        extra = Term("largest tensor gathered", shape.largest_tensor() * c / GIB,
                     f"{shape.largest_tensor() / 1e6:.0f}M x {c} B, whole while its module loads", "-")
    elif strategy == "fsdp":
        policy = Term("policy", whole / n / GIB, f"{how} / {n} ranks, sharded from the CPU", "-")
        extra = Term("FSDP unit being sharded", shape.largest_unit() * unit_bytes / GIB,
                     f"{shape.largest_unit() / 1e6:.0f}M x {unit_bytes} B, whole until fully_shard shards it", "-")
    else:
        policy = Term("policy", whole / GIB, f"{how}, whole" + (" (DeepSpeed's module)" if strategy == "zero2" else ""),
                      "-")
        extra = None
    terms = [policy] + ([extra] if extra is not None else [])
    if job.knobs.get("beta", 0.0) > 0 and not peft["enabled"]:
        ref = c / n if sharded else c
        terms.append(Term("reference model", params * ref / GIB, f"x {ref:.3g} B", "-"))
    grpo = job.knobs
    if not job.sft and grpo["use_vllm"] and grpo["vllm_mode"] == "colocate":
        share = grpo["vllm_gpu_memory_utilization"] * job.gpu_gib
        terms.append(Term("vLLM share (colocate)", share, "built in GRPOTrainer.__init__", "-"))
    terms.append(Term("runtime reserve", RUNTIME_RESERVE_GIB, "CUDA context, NCCL, allocator", "-"))
    return terms


def _load_problem(job: _Job, terms: list[Term]) -> str | None:
    """The problem when the load peak does not fit one GPU (None when it does)."""
    total = sum(t.gib for t in terms)
    if total <= job.gpu_gib:
        return None
    strategy, section = job.launch.effective_strategy, job.kind.section
    fix = (f"more training GPUs (resources.{section}.gpu, nodes) shard it thinner" if strategy in ("zero3", "fsdp") else
           f"resources.{section}.strategy: zero3 (loads partitioned) or fsdp (loads on the CPU and shards)")
    top = max(terms, key=lambda t: t.gib)
    return (f"a training GPU holds {total:.1f} GiB while the job loads, before training starts, more than "
            f"resources.{section}.gpu_memory_gb ({job.gpu_gib:g}); largest: {top.name} ({top.gib:.1f} GiB, {top.note}): "
            f"{fix}")


def _sequence(job: _Job) -> tuple[int, int, int]:
    """(tokens of one training sequence, image tokens, vision patches) of a page at ``rasterize.longest_side``."""
    img_tokens, patches = job.shape.image_tokens(job.cfg["rasterize"]["longest_side"])
    seq = img_tokens + PROMPT_TEXT_TOKENS + _answer_tokens(job)
    if job.sft and job.knobs.get("max_length"):
        seq = min(seq, int(job.knobs["max_length"]))
    return seq, img_tokens, patches


def _activation_terms(job: _Job) -> list[Term]:
    """Activations of one micro-batch (text and vision), the completion logits and the runtime reserve.

    Values kept for backward per token and layer (Korthikanti et al. 2022, with SDPA/flash attention:
    no attention matrix): norm in/out, q, k, v, attention out, second norm in/out, SwiGLU's gate, up,
    act, product -> 4h + 2q + 2kv + 4i (6h + 2kv + 4i where q is h wide). A mixture-of-experts layer
    keeps the router's logits and the SwiGLU values of the experts each token runs (active, not
    total parameters). With checkpointing, each layer's input plus one layer recomputed.
    """
    shape, grpo, peft, w = job.shape, job.knobs, job.peft, job.w
    batch = grpo["per_device_train_batch_size"]
    seq, img_tokens, patches = _sequence(job)
    # the tokens whose logits the loss keeps: GRPO's completion; SFT's whole sequence (TRL computes
    # the logits of every position and masks the prompt in the loss)
    completion = seq if job.sft else grpo["max_completion_length"]
    h, hv = shape.hidden_size, shape.vision_hidden_size
    attention_values = 4 * h + 2 * shape.q_dim + 2 * shape.kv_dim
    dense_values = attention_values + 4 * shape.intermediate_size
    moe_values = attention_values + shape.num_experts + 4 * shape.experts_per_token * shape.moe_intermediate_size
    dense_layers = shape.num_layers - shape.moe_layers
    all_layer_values = dense_layers * dense_values + shape.moe_layers * moe_values
    layer_values = max(dense_values if dense_layers else 0, moe_values if shape.moe_layers else 0)
    vision_values = 8 * hv + 4 * shape.vision_intermediate_size
    # float32 weights under autocast: the text residual stream is float32 (the embedding lookup is
    # not autocast, and RMSNorm's float32 weight promotes its output), so each layer's input and the
    # two norm inputs take 4 bytes; the vision tower starts from the bf16 patch convolution
    resid = 4 if autocast_copy_bytes(job.launch.effective_strategy, job.weight_bytes, w, peft["enabled"]) else w
    if grpo["activation_checkpointing"]:
        text_act = batch * seq * (shape.num_layers * h * resid + layer_values * w)
        vision_act = batch * patches * (shape.vision_depth * hv + vision_values) * w
        act_note = "checkpointed"
    else:
        text_act = batch * seq * (all_layer_values * w + shape.num_layers * 2 * h * (resid - w))
        vision_act = batch * patches * shape.vision_depth * vision_values * w
        act_note = "not checkpointed"
    text_note = act_note + (", float32 residual stream" if resid != w else "")
    if peft["enabled"] and not peft["vision"] and "merger" not in peft["modules_to_save"]:
        vision_act, act_note_vision = 0.0, "frozen: nothing kept for backward"
    else:
        act_note_vision = act_note
    act_fix = (f"{job.key}.activation_checkpointing: true, or lower per_device_train_batch_size, "
               + ("max_length" if job.sft else "max_completion_length") + " or rasterize.longest_side")
    return [
        Term("activations", text_act / GIB, f"{batch} x {seq} tokens ({img_tokens} image), {text_note}", act_fix),
        Term("vision activations", vision_act / GIB, f"{batch} x {patches} patches, {act_note_vision}", act_fix),
        # logits of the completion tokens and their log-softmax kept for backward
        Term("logits", batch * completion * shape.vocab_size * 2 * w / GIB,
             f"{batch} x {completion} x {shape.vocab_size} vocab",
             f"lower {job.key}." + ("max_length" if job.sft else "max_completion_length")
             + " or per_device_train_batch_size"),
        Term("runtime reserve", RUNTIME_RESERVE_GIB, "CUDA context, NCCL, allocator", "-"),
    ]


def _generation_terms(job: _Job) -> list[Term]:
    """Without vLLM, the KV cache of transformers' ``generate()``, which runs the process's whole
    generation batch at once (TRL 1.16 grpo_trainer.py:1873): every prompt + completion token of it."""
    grpo = job.knobs
    if job.sft or grpo["use_vllm"]:
        return []
    seq = _sequence(job)[0]
    gen_batch = grpo["per_device_train_batch_size"] * (grpo["steps_per_generation"] or grpo["gradient_accumulation_steps"])
    kv = 2 * job.shape.num_layers * job.shape.kv_dim * gen_batch * seq * job.w
    return [Term("generation KV cache", kv / GIB, f"transformers generate, {gen_batch} x {seq} tokens",
                 "lower per_device_train_batch_size x steps_per_generation or max_completion_length, or use_vllm")]


def _vllm_terms(job: _Job) -> tuple[list[Term], list[Term], list[str]]:
    """(terms of each training GPU, terms of the vLLM server GPU, problems) of ``use_vllm``: the
    colocated share, or the server's weights and the KV cache of one ``vllm_max_model_length`` sequence."""
    grpo, shape, gpu_gib = job.knobs, job.shape, job.gpu_gib
    if job.sft or not grpo["use_vllm"]:
        return [], [], []
    train: list[Term] = []
    server: list[Term] = []
    problems: list[str] = []
    seq = _sequence(job)[0]
    max_len = grpo["vllm_max_model_length"] or shape.max_position_embeddings
    unset = "" if grpo["vllm_max_model_length"] else " (unset: the model's context)"
    len_fix = "set train.grpo.vllm_max_model_length (prompt + completion tokens, e.g. " \
              f"{seq + 64})" if not grpo["vllm_max_model_length"] else "lower train.grpo.vllm_max_model_length"
    # the context against the longest prompt: context_problems (memory_plan)
    tp = grpo["vllm_tensor_parallel_size"]
    utilization = grpo["vllm_gpu_memory_utilization"]
    share = utilization * gpu_gib
    weights, kv = _vllm_need(shape, max_len, tp)
    if grpo["vllm_mode"] == "colocate":
        train.append(Term("vLLM share (colocate)", share, f"vllm_gpu_memory_utilization {utilization:g} x "
                          f"{gpu_gib:g} GiB", "lower train.grpo.vllm_gpu_memory_utilization or use vllm_mode: server"))
        where = f"vLLM's share ({utilization:g} x {gpu_gib:g} = {share:.1f} GiB of each training GPU)"
        other = "or use vllm_mode: server with resources.train.vllm_server_gpus"
    else:
        # trl vllm-serve gets the same grpo.vllm_* settings (olmpipe.train.vllm_server)
        server = [Term("vLLM weights", weights, f"{shape.parameters() / 1e9:.2f}B x {VLLM_BYTES} B / tp {tp}", "-"),
                  Term("vLLM KV cache (1 sequence)", kv, f"{max_len} tokens{unset}", len_fix)]
        where = f"the vLLM server's share ({utilization:g} x {gpu_gib:g} = {share:.1f} GiB)"
        other = "or raise train.grpo.vllm_tensor_parallel_size with more vllm_server_gpus"
        timeout = collective_timeout_problem(job.cfg["train"], grpo, job.launch.train_processes)
        if timeout:
            problems.append(timeout)
        if job.launch.vllm_server_gpus < tp:
            problems.append(f"train.grpo.vllm_mode: server needs resources.train.vllm_server_gpus >= "
                            f"vllm_tensor_parallel_size ({tp}), got {job.launch.vllm_server_gpus}: give the server "
                            "GPUs of the job or use vllm_mode: colocate")
    if weights + kv > share:
        need = math.ceil((weights + kv) / gpu_gib * 100) / 100
        raise_share = (f"raise train.grpo.vllm_gpu_memory_utilization to at least {need:.2f}" if need <= 1 else
                       f"no share helps: they need {weights + kv:.1f} GiB, more than the whole GPU "
                       f"(resources.train.gpu_memory_gb: {gpu_gib:g}); use a larger GPU")
        problems.append(
            f"{where} cannot hold its bf16 weights ({weights:.1f} GiB) and the KV cache of one "
            f"{max_len}-token sequence ({kv:.1f} GiB){unset}: {raise_share}, {len_fix}, {other}")
    return train, server, problems


def _precision_note(job: _Job) -> str:
    """How the plan's job holds its weights (the table's ``precision:`` line)."""
    precision, peft = job.precision, job.peft
    masters = ("float32 master weights" if precision.master_weights(job.launch.effective_strategy
                                                                     in DEEPSPEED_STRATEGIES + ("fsdp",))
               else "bf16 weights without master copy (train.pure_bf16)")
    if peft["enabled"]:
        masters = f"frozen {'quantized' if peft['quantization'] != 'none' else precision.compute} base, float32 adapter"
    if job.sft:
        return f"{masters}, {precision.compute} compute, no reference model (SFT)"
    reference = "reference: the adapter disabled" if peft["enabled"] else f"{precision.reference} reference model"
    return f"{masters}, {precision.compute} compute, {reference}"


def memory_plan(cfg: Mapping[str, Any], shape: ModelShape, gpus: int | None = None, *,
                slurm_extra: str | None = None, signal_source: str = "the train rule's slurm_extra",
                kind: JobKind = GRPO) -> MemoryPlan:
    """The per-GPU memory plan of ``cfg`` (a validated config) for a model of ``shape``, with its
    checkpoints' disk and write time (:mod:`olmpipe.plan.checkpoint`).

    ``gpus``: the job's GPUs (``resources.<section>.gpu`` when None; the rule passes its resource);
    ``slurm_extra``: the rule's sbatch flags (SLURM's ``--signal`` lead), ``signal_source`` where
    they come from (for the messages); ``kind``: the trainer (:mod:`olmpipe.job.kinds`; GRPO's job,
    or SFT's: no generation, no reference model, no vLLM).
    """
    res = cfg["resources"][kind.section]
    gpus = res["gpu"] if gpus is None else gpus
    launch = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"])
    precision = _precision(cfg, kind)
    job = _Job(cfg, shape, launch, precision, 2 if precision.bf16 else 4, float(res["gpu_memory_gb"]), kind)
    vllm_train, server, problems = _vllm_terms(job)
    terms = _weight_terms(job) + _activation_terms(job) + _generation_terms(job) + vllm_train
    total = sum(t.gib for t in terms)
    strategy, n = launch.effective_strategy, launch.train_processes
    loading = _load_terms(job)
    load_problem = _load_problem(job, loading)
    if load_problem:
        problems.append(load_problem)
    if total > job.gpu_gib:
        top = max(terms, key=lambda t: t.gib)
        hint = f"; {_zero3_hint(cfg, shape, gpus, job.gpu_gib, kind)}" if strategy in ("ddp", "zero2") and n > 1 else ""
        problems.append(f"a training GPU needs {total:.1f} GiB, more than resources.{kind.section}.gpu_memory_gb "
                        f"({job.gpu_gib:g}); largest term: {top.name} ({top.gib:.1f} GiB): {top.fix}{hint}")
    if not job.sft:
        problems += context_problems(cfg, budget_of(shape))
    peft = job.peft
    checkpoints = checkpoint_plan(cfg, strategy=strategy, processes=n, parameters=shape.parameters(),
                                  weight_bytes=job.weight_bytes, compute_bytes=job.w,
                                  slurm_extra=slurm_extra, signal_source=signal_source,
                                  adapter_bytes=adapter_bytes(shape, peft) if peft["enabled"] else None, kind=kind)
    height, width = page_size(cfg["rasterize"]["longest_side"])
    return MemoryPlan(launch=launch, shape=shape, gpu_memory_gib=job.gpu_gib, train_terms=tuple(terms),
                      server_terms=tuple(server), problems=tuple(problems), precision=_precision_note(job),
                      checkpoints=checkpoints, image_tokens=_sequence(job)[1], page_height=height,
                      page_width=width, load_terms=tuple(loading))


def _zero3_hint(cfg: Mapping[str, Any], shape: ModelShape, gpus: int, gpu_gib: float, kind: JobKind = GRPO) -> str:
    """What ZeRO-3 (everything sharded) would need per training GPU, for a job ZeRO-2/DDP cannot fit."""
    from olmpipe.config import deep_update

    alternative = deep_update(json.loads(json.dumps(cfg)), {"resources": {kind.section: {"strategy": "zero3"}}})
    need = sum(t.gib for t in memory_plan(alternative, shape, gpus, kind=kind).train_terms)
    verdict = "fits" if need <= gpu_gib else f"still does not fit: more GPUs (resources.{kind.section}.gpu, nodes)"
    return (f"with resources.{kind.section}.strategy: zero3 a training GPU would need {need:.1f} GiB of "
            f"{gpu_gib:g} ({verdict})")

