"""LoRA and QLoRA training (``train.peft``): the adapter TRL trains, what it targets, its checkpoints
and the merged model a run leaves.

How TRL 1.16 trains an adapter (``trl/trainer/grpo_trainer.py`` at v1.16.0), which this module
feeds and relies on:

- it wraps the model itself: ``get_peft_model(model, peft_config)`` (:476), after ``set_seed(args.seed)``
  (:333), so the adapter's initial weights are a function of the seed. PEFT's default
  ``autocast_adapter_dtype=True`` keeps the adapter in float32 on a bfloat16 base (TRL turns it
  off only under ZeRO-3, :461-463): the frozen base stays in ``train.dtype``, the trained weights
  have fp32 precision;
- the KL reference of ``beta > 0`` is the same model with the adapter disabled, no second copy:
  ``ref_model = None`` for a PEFT model (:987-990), then ``use_adapter(model, adapter_name=None)``
  (:2726-2727), which is ``model.disable_adapter()`` (``trl/trainer/utils.py``:1442-1444);
- activation checkpointing: ``model.enable_input_require_grads()`` (:529-530), so checkpointed
  blocks whose weights are all frozen still pass gradients to the adapter;
- QLoRA: the trainable adapter weights are cast to bfloat16 (:537-541, "following the QLoRA
  paper"); :func:`restore_fp32_adapter` casts them back to float32 before the optimizer exists, so
  a small learning rate's updates do not round away (the reason issue 19 keeps fp32 masters);
- vLLM weight sync: ``merge_adapter()``, every parameter under its vLLM name, ``unmerge_adapter()``
  (``trl/generation/vllm_generation.py``:443-469). On a bfloat16 base the merge and the unmerge
  each round, so every sync moves the *frozen* base weights a little (measured: a third of the
  adapted weights of the tiny model changed after 20 syncs) -- the reference, the resume and the
  final model would all drift. :func:`merged_named_params` yields the same merged tensors one layer
  at a time and restores each base weight bit for bit (:class:`olmpipe.train.trainer.ResumableGRPOTrainer`
  installs it). QLoRA with vLLM is refused: the merged 4-bit weights reach vLLM packed (trl issues
  3466 and 4973).

Each seed's ``model/`` is the base with the final adapter merged (:func:`write_merged_model`: base
loaded on the CPU in float32, ``merge_and_unload``, saved), a plain Hugging Face folder
that evaluation, vLLM and the soup read like any model; ``adapter/`` beside it is the adapter
(``PeftModel.from_pretrained(base, "results/train/seed0/adapter")``).
"""

from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.job.errors import JobSetupError
from olmpipe.layout import ADAPTER_NAME

logger = logging.getLogger(__name__)

#: The folder beside a seed's final model that holds the trained adapter.
ADAPTER_DIR = ADAPTER_NAME


#: The largest scale of the adapter's update olmpipe trains with: LoRA adds ``alpha / r x B A x``
#: (``alpha / sqrt(r)`` with rsLoRA) to a layer's output; the usual ``alpha`` of ``r`` to ``2 r`` scales it
#: by 1 or 2, rsLoRA's by a few. A scale far above this makes the first optimizer step (each entry of
#: ``B`` moves by about the learning rate) outweigh the layer itself, and one above float32's range
#: (``alpha: 1e300``) is infinite: NaN at the first forward pass.
MAX_LORA_SCALE = 1024.0


def lora_scale(peft_cfg: Mapping[str, Any]) -> float:
    """The factor LoRA scales its update by: ``alpha / r``, or ``alpha / sqrt(r)`` with ``rslora``
    (PEFT 0.21 ``tuners/lora/layer.py`` ``update_layer``).

    >>> lora_scale({"alpha": 64, "r": 32, "rslora": False}), lora_scale({"alpha": 16, "r": 64, "rslora": True})
    (2.0, 2.0)
    """
    r = float(peft_cfg["r"])
    return float(peft_cfg["alpha"]) / (r**0.5 if peft_cfg["rslora"] else r)


class PeftSetupError(JobSetupError):
    """A ``train.peft`` setting this machine or this combination of settings cannot train."""


@dataclass(frozen=True)
class ModelParts:
    """Where the language model's layers and the vision tower's blocks sit in a model's module names.

    Adapters go on linear layers below these prefixes; the vision prefix names the tower's
    transformer blocks, so a name like ``proj`` does not also catch the patch embedding's convolution.
    ``vision_linears``: the blocks' linear layers, the vision targets when ``vision_target_modules``
    is null (they differ by architecture: Qwen2.5-VL's gated MLP, Qwen2-VL's fc1/fc2, Qwen3-VL's
    linear_fc1/linear_fc2).
    """

    language_model: str
    vision: str
    vision_linears: tuple[str, ...] = ()


def model_parts(model_type: str) -> ModelParts:
    """The :class:`ModelParts` of an architecture (:mod:`olmpipe.models.architectures`, transformers 5 live
    names); raises :class:`PeftSetupError` for one olmpipe does not support."""
    from olmpipe.models.architectures import ARCHITECTURES, supported

    arch = ARCHITECTURES.get(model_type)
    if arch is None:
        raise PeftSetupError(f"train.peft: no adapter targets known for model_type {model_type!r}; olmpipe "
                             f"supports {supported()} (olmpipe/models/architectures.py)")
    return ModelParts(language_model=arch.language_prefix.rstrip("."), vision=f"{arch.vision_prefix}blocks",
                      vision_linears=arch.vision_linear_names)


def target_modules(parts: ModelParts, peft_cfg: Mapping[str, Any]) -> str:
    """PEFT's ``target_modules`` as one regular expression (PEFT full-matches it against module names).

    >>> parts = ModelParts("model.language_model", "model.visual.blocks")
    >>> pattern = target_modules(parts, {"target_modules": ["q_proj"], "vision": False})
    >>> bool(re.fullmatch(pattern, "model.language_model.layers.3.self_attn.q_proj"))
    True
    >>> bool(re.fullmatch(pattern, "model.visual.blocks.0.attn.q_proj"))
    False
    """

    alternatives = [module_pattern(parts.language_model, list(peft_cfg["target_modules"]))]
    if peft_cfg["vision"]:
        alternatives.append(module_pattern(parts.vision, list(peft_cfg["vision_target_modules"] or parts.vision_linears)))
    return "|".join(f"(?:{a})" for a in alternatives)


def module_pattern(prefix: str, names: list[str]) -> str:
    """A regular expression that full-matches the modules below ``prefix`` whose names end in one of ``names``.

    >>> bool(re.fullmatch(module_pattern("model.visual.blocks", ["qkv"]), "model.visual.blocks.0.attn.qkv"))
    True
    """
    return rf"{re.escape(prefix)}\..*\.(?:{'|'.join(re.escape(n) for n in names)})"


def lora_config(peft_cfg: Mapping[str, Any], model_type: str):
    """The ``peft.LoraConfig`` of ``train.peft`` for a model of ``model_type``.

    Qwen3-VL-MoE: the experts are fused parameters, not ``nn.Linear``, so MLP names in
    ``target_modules`` match no expert; the adapter goes on attention (as the MoE SFT config of
    olmocr main's ``train/configs/v0.5.0/`` does), which is logged.
    """
    from peft import LoraConfig

    from olmpipe.models.architectures import ARCHITECTURES

    arch = ARCHITECTURES.get(model_type)
    mlp = sorted(set(peft_cfg["target_modules"]) & {"gate_proj", "up_proj", "down_proj"})
    if arch is not None and arch.moe and mlp:
        logger.info("train.peft on %s: %s match no expert (fused parameters, not nn.Linear); the adapter goes on "
                    "attention", arch.label, ", ".join(mlp))

    return LoraConfig(
        r=int(peft_cfg["r"]),
        lora_alpha=float(peft_cfg["alpha"]),
        lora_dropout=float(peft_cfg["dropout"]),
        target_modules=target_modules(model_parts(model_type), peft_cfg),
        modules_to_save=list(peft_cfg["modules_to_save"]) or None,
        use_rslora=bool(peft_cfg["rslora"]),
        use_dora=bool(peft_cfg["dora"]),
        bias="none",
        task_type="CAUSAL_LM",
    )


def setup_problem(peft_cfg: Mapping[str, Any], device: str, knobs: Mapping[str, Any]) -> str | None:
    """Why ``train.peft`` cannot train on ``device`` with these GRPO knobs: an update scale above
    :data:`MAX_LORA_SCALE`, QLoRA on the CPU or with vLLM rollouts, adapter dropout that TRL's
    ``disable_dropout`` would switch off (None: it can).
    Also checked before a job is submitted (:mod:`olmpipe.job.preflight`)."""
    if not peft_cfg["enabled"]:
        return None
    scale = lora_scale(peft_cfg)
    if not scale <= MAX_LORA_SCALE:
        how = "alpha / sqrt(r) (train.peft.rslora)" if peft_cfg["rslora"] else "alpha / r"
        return (f"train.peft.alpha: {peft_cfg['alpha']:g} scales the adapter's update by {how} = {scale:.3g} "
                f"(train.peft.r: {peft_cfg['r']}), more than olmpipe trains with ({MAX_LORA_SCALE:g}): the first "
                "step would outweigh the layers it adapts"
                + (", and the scale overflows float32 (NaN at the first forward pass)" if scale > 3.4e38 else "")
                + f". LoRA's usual alpha is r to 2 r (a scale of 1 or 2); set train.peft.alpha to at most "
                f"{MAX_LORA_SCALE * (float(peft_cfg['r']) ** 0.5 if peft_cfg['rslora'] else float(peft_cfg['r'])):g}.")
    if float(peft_cfg["dropout"]) > 0 and knobs.get("disable_dropout"):
        # TRL sets p = 0 on every nn.Dropout after PEFT wrapped the model (trl/trainer/utils.py:194-197,
        # grpo_trainer.py:1006), LoRA's lora_dropout included: the setting would do nothing, silently
        return (f"train.peft.dropout: {peft_cfg['dropout']:g} asks for dropout on the adapter's input, but "
                "train.grpo.disable_dropout: true makes TRL set every dropout of the model to 0, the adapter's "
                "included (trl/trainer/utils.py:194-197), so it would train without any. Set train.peft.dropout: 0 "
                "(log-probabilities of a completion then agree in every forward pass), or "
                "train.grpo.disable_dropout: false to train with dropout (the model's own too).")
    quant = peft_cfg["quantization"]
    if quant == "none":
        return None
    if device != "cuda":
        return (f"train.peft.quantization: {quant} (QLoRA) needs a CUDA GPU: bitsandbytes' quantized layers do not "
                "train on the CPU. Set train.peft.quantization: none (LoRA on a full-precision base works "
                "everywhere) or train on a GPU.")
    if knobs.get("use_vllm"):
        return (f"train.peft.quantization: {quant} with train.grpo.use_vllm: TRL 1.16 merges the adapter into the "
                "quantized weights and sends vLLM the packed tensors (trl issues 3466, 4973). Use "
                "train.grpo.use_vllm: false with QLoRA, or quantization: none to roll out with vLLM.")
    return None


def check_setup(peft_cfg: Mapping[str, Any], device: str, knobs: Mapping[str, Any]) -> None:
    """Refuse what cannot train, before a model is loaded (:func:`setup_problem`), and QLoRA without bitsandbytes."""
    problem = setup_problem(peft_cfg, device, knobs)
    if problem:
        raise PeftSetupError(problem)
    quant = peft_cfg["quantization"]
    if not peft_cfg["enabled"] or quant == "none":
        return
    import importlib.util

    if importlib.util.find_spec("bitsandbytes") is None:
        raise PeftSetupError(f"train.peft.quantization: {quant} needs bitsandbytes: pip install -e '.[qlora]'")


def check_model(peft_cfg: Mapping[str, Any], model: Any, knobs: Mapping[str, Any]) -> None:
    """Refuse what the loaded model cannot train: a trained copy of a tied lm_head with vLLM rollouts.

    With ``tie_word_embeddings`` vLLM's Qwen2 skips ``lm_head.weight`` when loading weights and uses
    the embeddings, so a trained ``modules_to_save`` copy of ``lm_head`` or ``embed_tokens`` would
    never reach the rollouts (the log-probabilities of trainer and vLLM would drift apart).
    """
    saved = {m.rsplit(".", 1)[-1] for m in peft_cfg["modules_to_save"]}
    tied = bool(getattr(model.config.get_text_config(), "tie_word_embeddings", False)
                or getattr(model.config, "tie_word_embeddings", False))
    if knobs.get("use_vllm") and tied and saved & {"lm_head", "embed_tokens"}:
        raise PeftSetupError("train.peft.modules_to_save trains a copy of lm_head/embed_tokens, which this model "
                             "ties (tie_word_embeddings): vLLM rollouts would keep using the untrained "
                             "embeddings. Remove them from modules_to_save or set train.grpo.use_vllm: false.")


def quantization_config(peft_cfg: Mapping[str, Any], compute_dtype: str):
    """The ``BitsAndBytesConfig`` of ``train.peft.quantization`` (None for ``none``)."""
    quant = peft_cfg["quantization"]
    if quant == "none":
        return None
    import torch
    from transformers import BitsAndBytesConfig

    if quant == "8bit":
        return BitsAndBytesConfig(load_in_8bit=True)
    return BitsAndBytesConfig(
        load_in_4bit=True,
        bnb_4bit_quant_type=peft_cfg["quant_type"],
        bnb_4bit_use_double_quant=bool(peft_cfg["double_quant"]),
        bnb_4bit_compute_dtype=getattr(torch, compute_dtype) if compute_dtype != "float32" else torch.bfloat16,
    )


def restore_fp32_adapter(model: Any) -> int:
    """Cast every trainable weight of the PEFT ``model`` to float32; returns how many were cast.

    Two kinds arrive in another dtype: TRL 1.16 casts the adapter to bfloat16 on a quantized base
    (grpo_trainer.py:537-541), and PEFT makes the trained copy of each ``modules_to_save`` module as a
    deep copy of the base module (peft 0.21 ``utils/other.py``:632-656, ``ModulesToSaveWrapper.update``), in
    the base's bf16, which PEFT's ``autocast_adapter_dtype`` does not touch (it casts LoRA's own
    tensors only) -- trained in bf16 without a master copy, most of its updates at small learning
    rates round away (probe F7: 4% of its elements moved in a step at lr 2e-6). Called before the
    optimizer is created, so AdamW keeps fp32 states of fp32 weights; under autocast (bf16 compute)
    the float32 copy runs like a master weight.
    """
    import torch

    cast = 0
    for param in model.parameters():
        if param.requires_grad and param.dtype != torch.float32:
            param.data = param.data.float()
            cast += 1
    return cast


class AdapterLoadError(RuntimeError):
    """A checkpoint's adapter does not fit the model's (a resume must not go on from a fresh adapter)."""


def adapter_state_keys(model: Any) -> set[str]:
    """Names (as saved: without the adapter name) of the trained adapter's tensors of a PEFT model."""
    from peft import get_peft_model_state_dict

    return set(get_peft_model_state_dict(model))


def load_adapter_checkpoint(model: Any, checkpoint: str | Path) -> None:
    """Copy the adapter of ``checkpoint`` (``adapter_model.safetensors``) into the PEFT ``model`` in place.

    Every adapter tensor of the model must be in the file with its shape, and nothing else: a
    resume either restores the adapter exactly or raises :class:`AdapterLoadError`. In place,
    because the optimizer state loaded next refers to these very parameters.
    """
    from peft import get_peft_model_state_dict, set_peft_model_state_dict
    from safetensors.torch import load_file

    folder = Path(checkpoint)
    path = folder / "adapter_model.safetensors"
    if not path.exists():
        raise AdapterLoadError(f"{folder}: no adapter_model.safetensors (a full-model checkpoint?); this run "
                               "trains a LoRA adapter (train.peft.enabled). Move the checkpoint aside to start over.")
    stored = load_file(str(path), device="cpu")
    own = get_peft_model_state_dict(model)
    missing, unexpected = sorted(set(own) - set(stored)), sorted(set(stored) - set(own))
    wrong = sorted(k for k in set(own) & set(stored) if own[k].shape != stored[k].shape)
    if missing or unexpected or wrong:
        raise AdapterLoadError(f"{folder}: the checkpoint's adapter does not fit the model's ({len(missing)} "
                               f"missing, {len(unexpected)} unexpected, {len(wrong)} of another shape; e.g. "
                               f"{(missing + unexpected + wrong)[:3]}). Refusing to resume from a fresh adapter.")
    result = set_peft_model_state_dict(model, stored, adapter_name=model.active_adapter)
    if result.unexpected_keys:
        raise AdapterLoadError(f"{folder}: adapter tensors PEFT could not place: {result.unexpected_keys[:3]}")
    logger.info("restored %d adapter tensors from %s", len(stored), folder)


def merged_named_params(model: Any) -> Iterator[tuple[str, Any]]:
    """The merged model's parameters under vLLM's names, without changing the base weights.

    What TRL 1.16's ``VLLMGeneration._iter_named_params`` yields for a PEFT model outside ZeRO-3 and
    FSDP (``trl/generation/vllm_generation.py``:443-469: ``merge_adapter()``, the names with
    ``base_model.model.`` and ``.base_layer`` removed, the adapter's own tensors and
    ``original_module`` skipped, ``modules_to_save.default.`` removed, ``unmerge_adapter()``), but
    merged one adapted layer at a time, and each base weight put back from a copy after its
    unmerge, so repeated syncs leave the frozen base bit for bit as it was (an unmerge in
    bfloat16 does not undo its merge). A merged weight is yielded as a copy of its own, taken
    before the base is restored: vLLM's packed NCCL broadcast (server mode, vLLM 0.31
    ``distributed/weight_transfer/packed_tensor.py`` ``pack_tensors``) keeps the tensors of a
    chunk and concatenates them only after asking for the next ones. Extra memory: one layer's
    weight twice, plus what the consumer keeps.
    """
    from peft.tuners.lora import LoraLayer

    owners = {}
    for module_name, module in model.named_modules():
        if isinstance(module, LoraLayer):
            owners[f"{module_name}.base_layer.weight"] = module
    prefix = model.prefix
    for name, param in model.named_parameters():
        vllm_name = name.removeprefix("base_model.model.").replace(".base_layer", "")
        if prefix in vllm_name or "original_module" in vllm_name:
            continue
        vllm_name = vllm_name.replace("modules_to_save.default.", "")
        layer = owners.get(name)
        if layer is None or layer.merged:
            yield vllm_name, param.data
            continue
        original = param.data.clone()
        layer.merge()
        try:
            merged = layer.get_base_layer().weight.data.clone()
        finally:
            layer.unmerge()
            layer.get_base_layer().weight.data.copy_(original)
            del original
        yield vllm_name, merged


def final_adapter_dir(final_dir: str | Path) -> Path:
    """``adapter/`` beside a seed's final ``model/`` folder."""
    return Path(final_dir).with_name(ADAPTER_DIR)


def write_merged_model(base_model: str | Path, adapter_dir: str | Path, out_dir: str | Path) -> None:
    """Save ``base_model`` with the adapter of ``adapter_dir`` merged into ``out_dir`` (weights + config).

    The base is loaded on the CPU in float32 (exact for a bf16 checkpoint; never quantized, so a
    QLoRA adapter merges into the real weights, not the 4-bit ones) and the float32 adapter update is
    added (PEFT's ``merge_and_unload``): no rounding, so an update below bf16's resolution is kept,
    like full training's float32 ``model/`` (:mod:`olmpipe.job.precision`), and the soup of LoRA
    seeds is exactly the base plus the mean of their updates. Host memory: the base in float32.
    """
    from peft import PeftModel

    from olmpipe.models.load import load_model_and_processor

    base, _ = load_model_and_processor(base_model, dtype="float32", device="cpu")
    merged = PeftModel.from_pretrained(base, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(str(out_dir))
    logger.info("merged %s into %s -> %s (float32)", adapter_dir, base_model, out_dir)


def adapter_and_merged_writer(save_adapter: Callable[[Path], None], processor: Any | None, base_model: str | Path,
                              final_dir: str | Path, is_main: bool, barrier: Callable[[], None]) -> Callable[[Path], None]:
    """The ``save_weights`` of a LoRA run's final folder (:func:`olmpipe.job.final.write_final`).

    Every rank calls ``save_adapter`` (``trainer.save_model``: collective under ZeRO/FSDP, which
    also writes the processor; or a checkpoint's adapter files, then ``processor`` is saved beside
    them) into a staging folder, which becomes ``adapter/`` beside the final model; then the main
    process writes the merged model into the final model's staging folder (published last, by the
    caller).
    """
    from olmpipe.records.files import publish_dir, staging_dir, staging_path

    adapter_dir = final_adapter_dir(final_dir)

    def save(model_tmp: Path) -> None:
        staging = staging_path(adapter_dir)
        if is_main:
            staging_dir(adapter_dir)
        barrier()
        try:
            save_adapter(staging)
            barrier()
        except BaseException:
            if is_main:  # no half-written adapter.tmp/ stays behind
                shutil.rmtree(staging, ignore_errors=True)
            raise
        if is_main:
            if processor is not None:
                processor.save_pretrained(str(staging))
            publish_dir(staging, adapter_dir)
            write_merged_model(base_model, adapter_dir, model_tmp)

    return save


#: What a checkpoint holds of what ``trainer.save_model`` writes into ``adapter/`` besides the
#: processor: PEFT's files (peft.utils.constants CONFIG_NAME, SAFETENSORS_WEIGHTS_NAME; the model
#: card) and transformers' ``training_args.bin``; a finished run's adapter/ is made of these.
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors", "README.md", "training_args.bin")
#: Of :data:`ADAPTER_FILES`, those a checkpoint may lack (a model card or arguments not written).
OPTIONAL_ADAPTER_FILES = ("README.md", "training_args.bin")


def copy_checkpoint_adapter(checkpoint: str | Path, out_dir: Path, base: Any = None, peft_config: Any = None) -> None:
    """Copy a checkpoint's adapter files (:data:`ADAPTER_FILES`) into ``out_dir`` (a finished run's last
    checkpoint); with the run's ``base`` model and ``peft_config``, a DeepSpeed checkpoint's adapter
    tensors are its float32 masters (:func:`adapter_from_fp32_masters`), not the copy in the file."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for name in ADAPTER_FILES:
        if name not in OPTIONAL_ADAPTER_FILES or (Path(checkpoint) / name).exists():
            shutil.copy2(Path(checkpoint) / name, out_dir / name)
    if base is not None:
        adapter_from_fp32_masters(base, peft_config, checkpoint, out_dir / "adapter_model.safetensors")


def adapter_from_fp32_masters(base: Any, peft_config: Any, checkpoint: str | Path, path: Path) -> bool:
    """Rewrite the adapter file ``path`` (a copy of ``checkpoint``'s) with the float32 master weights of
    a DeepSpeed checkpoint; False (nothing done) for other checkpoints.

    Under DeepSpeed with bf16 the module the Trainer saves into a checkpoint is DeepSpeed's bf16 copy
    (``Trainer.save_model`` -> ``accelerator.get_state_dict(self.deepspeed)``, transformers 5.24
    ``trainer.py:4109-4121``; the cast: DeepSpeed 0.19 ``runtime/engine.py`` 2080-2088), so its
    ``adapter_model.safetensors`` holds the adapter rounded to bf16, while a run that trains to its end
    saves the float32 masters (:func:`olmpipe.job.precision.save_final_weights`). The masters come
    from the ZeRO files (:func:`olmpipe.job.precision.fp32_weights_from_checkpoint`, live names such as
    ``...q_proj.lora_A.default.weight``); PEFT names them as it saves them (``get_peft_model_state_dict``
    on ``base`` wrapped with ``peft_config``), and the file must then hold exactly those tensors with
    those shapes, else :class:`~olmpipe.job.errors.CheckpointLoadError`. ``base`` is wrapped in place.
    """
    from olmpipe.job.precision import fp32_weights_from_checkpoint

    masters = fp32_weights_from_checkpoint(checkpoint)
    if masters is None:
        return False
    import torch
    from peft import get_peft_model, get_peft_model_state_dict
    from safetensors.torch import load_file, save_file

    from olmpipe.job.errors import CheckpointLoadError

    model = get_peft_model(base, peft_config)
    params = dict(model.named_parameters())
    unknown = sorted(set(masters) - set(params))
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in masters)
    if unknown or missing:
        raise CheckpointLoadError(f"{checkpoint}: DeepSpeed's float32 weights do not fit the adapter ({len(missing)} "
                                  f"missing, e.g. {missing[:3]}; {len(unknown)} unknown, e.g. {unknown[:3]})")
    with torch.no_grad():
        for name, tensor in masters.items():
            params[name].data = tensor.detach().to("cpu", torch.float32).clone()
    state = {k: v.detach().contiguous() for k, v in get_peft_model_state_dict(model).items()}
    stored = load_file(str(path), device="cpu")
    wrong = sorted(k for k in set(state) & set(stored) if tuple(state[k].shape) != tuple(stored[k].shape))
    if set(state) != set(stored) or wrong:
        raise CheckpointLoadError(f"{checkpoint}: the adapter file's tensors are not the adapter DeepSpeed trained "
                                  f"({sorted(set(state) ^ set(stored))[:3]}, shapes {wrong[:3]})")
    save_file(state, str(path), metadata={"format": "pt"})
    logger.info("adapter of %s written from DeepSpeed's float32 masters (%d tensors)", checkpoint, len(state))
    return True
