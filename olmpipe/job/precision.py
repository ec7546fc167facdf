"""Training precision: float32 master weights with bfloat16 compute, and a final model saved from them.

Why: bfloat16 has 8 significant bits. A weight of 0.02 moves only for an update above ~6e-5 (half
its spacing, 2**-13), and AdamW's update is about the learning rate (olmOCR 2's recipe: 2e-6). A
model whose *parameters* are bfloat16 therefore rounds nearly every update away and "trains"
without learning. The updates must land in float32 copies of the weights ("master weights").

What :func:`resolve_precision` decides from ``train.dtype`` (``auto``: bfloat16 on CUDA, float32 on
the CPU) and ``train.pure_bf16``:

==================  ==============  ===================================================================
``train.dtype``     policy loaded   compute
==================  ==============  ===================================================================
``float32``         float32         float32
``bfloat16``        float32         bf16 autocast (``single``/``ddp``/``fsdp``); DeepSpeed: bf16 module,
                                    fp32 master partitions in its ZeRO optimizer
+ ``pure_bf16``     bfloat16        bfloat16 weights, gradients and AdamW states: no master copy
==================  ==============  ===================================================================

How the pinned libraries behave with float32 parameters and ``GRPOConfig(bf16=True)``:

- transformers 5.24 ``training_args.py:1614-1618`` turns ``bf16`` into ``mixed_precision="bf16"``,
  which ``trainer.py:744`` hands to the ``Accelerator``; the Trainer casts the model only for
  ``bf16_full_eval`` (``trainer.py:2947-2952``), never for training.
- accelerate 1.15 ``accelerator.py:586-593``: bf16 outside DeepSpeed/Megatron sets ``native_amp``;
  ``prepare_model`` (``accelerator.py:1824-1835``) wraps ``model.forward`` in
  ``torch.autocast(dtype=bfloat16)`` (``utils/modeling.py:2099-2113``, FSDP included) and leaves the
  parameters float32. TRL 1.16 computes the policy's and the reference model's log-probs under
  ``accelerator.autocast()`` too (``trl/trainer/grpo_trainer.py:1497``). So matmuls run in bf16,
  gradients and AdamW states are float32 like the parameters, and the update is applied in float32.
- FSDP2: accelerate's ``MixedPrecisionPolicy`` computes in bf16 (``utils/dataclasses.py:2109-2121``,
  ``utils/fsdp_utils.py:779``) over float32 sharded parameters; a model loaded in bf16 is upcast
  to float32 masters there (``utils/fsdp_utils.py:814-820``), so a float32 load changes nothing but
  the load's memory.
- DeepSpeed 0.19 (ZeRO-2/3): accelerate enables DeepSpeed's ``bf16`` section
  (``utils/dataclasses.py:1415-1427``); the engine casts the module's parameters to bf16
  (``runtime/engine.py:2080-2088``) and its ZeRO optimizer keeps float32 partitions of them, which
  AdamW updates; a float32 load only costs memory until that cast.
- The reference model (``beta > 0``): TRL loads it from the policy's folder with
  ``args.model_init_kwargs``, ``dtype`` defaulting to the policy's (``grpo_trainer.py:993-1003``).
  It is frozen and only ever runs forward under bf16 autocast, so olmpipe loads it in the compute
  dtype (``model_init_kwargs={"dtype": "bfloat16"}``): half the memory of a float32 copy, and exact
  for bf16 checkpoints (all published Qwen2.5-VL / olmOCR ones). TRL warns that
  ``model_init_kwargs`` are ignored for the policy (``grpo_trainer.py:351-354``): true, and harmless.
- vLLM weight sync: TRL streams each parameter in its own dtype (``trl/generation/vllm_generation.py:
  496-505``, ``vllm_client.py:837-850``), so float32 masters travel as float32 (twice the bytes of
  bf16) and vLLM's weight loader copies them into its bf16 weights (``--dtype`` of the server stays
  ``bfloat16``, :func:`olmpipe.train.vllm_server.build_command`). Under DeepSpeed the bf16 module is sent.

The final ``model/`` holds float32 weights whenever master weights exist, so what a run learned
reaches the soup and evaluation even when it is below bf16's resolution: outside DeepSpeed the
parameters are the masters (``Trainer.save_model``); under ZeRO the module is bf16, so
:func:`save_final_weights` gathers the fp32 partitions from the live engine
(``deepspeed.utils.safe_get_full_fp32_param``, DeepSpeed 0.19 ``utils/tensor_fragment.py:135-151``:
an all-reduce per parameter, no extra checkpoint read) and :func:`fp32_weights_from_checkpoint`
reads them from a DeepSpeed checkpoint folder (``deepspeed.utils.zero_to_fp32
.get_fp32_state_dict_from_zero_checkpoint``) when a finished run's last checkpoint becomes the model.
vLLM serves a float32 folder in bf16 (vLLM 0.31 ``config/model.py:2372-2374``).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

__all__ = ["Precision", "fp32_weights_from_checkpoint", "resolve_device", "resolve_dtype", "resolve_precision",
           "restore_fp32_masters", "save_final_weights"]


def resolve_device(device: str) -> str:
    """``cpu`` or ``cuda`` for ``train.device`` (``auto`` picks CUDA when available)."""
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device is 'cuda' but torch sees no CUDA device; set train.device: auto or cpu")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    """The compute dtype, ``float32`` or ``bfloat16``, of ``train.dtype`` (``auto``: bfloat16 on CUDA,
    float32 on CPU). Weights stay float32 either way (:func:`olmpipe.job.precision.resolve_precision`)."""
    if dtype == "auto":
        return "bfloat16" if device == "cuda" else "float32"
    return dtype


@dataclass(frozen=True)
class Precision:
    """The dtypes of one training run.

    ``weights``: what the policy is loaded in (its parameters, gradients and AdamW states outside
    DeepSpeed); ``compute``: bf16 mixed precision (``GRPOConfig(bf16=True)``) or float32;
    ``reference``: TRL's reference model.
    """

    weights: str
    compute: str
    reference: str

    @property
    def bf16(self) -> bool:
        """True when the forward and backward passes run in bf16 (``GRPOConfig.bf16``)."""
        return self.compute == "bfloat16"

    def master_weights(self, deepspeed: bool) -> bool:
        """True when updates land in float32 (always under DeepSpeed, else with float32 weights)."""
        return deepspeed or self.weights == "float32"


def resolve_precision(train_cfg: Mapping[str, Any], device: str) -> Precision:
    """The :class:`Precision` of ``train.dtype`` / ``train.pure_bf16`` on ``device`` (``cpu``/``cuda``).

    >>> resolve_precision({"dtype": "auto", "pure_bf16": False}, "cuda")
    Precision(weights='float32', compute='bfloat16', reference='bfloat16')
    >>> resolve_precision({"dtype": "auto", "pure_bf16": False}, "cpu")
    Precision(weights='float32', compute='float32', reference='float32')
    """
    compute = resolve_dtype(train_cfg["dtype"], device)
    if train_cfg["pure_bf16"]:
        if compute != "bfloat16":
            raise ValueError(f"train.pure_bf16: true asks for bfloat16 weights, but train.dtype {train_cfg['dtype']!r} "
                             f"computes in {compute} on {device}: set train.dtype: bfloat16, or pure_bf16: false")
        return Precision(weights="bfloat16", compute=compute, reference=compute)
    return Precision(weights="float32", compute=compute, reference=compute)


def _deepspeed_fp32_state(module: Any) -> dict[str, Any] | None:
    """The module's state dict with every trained parameter replaced by DeepSpeed's float32 master
    copy, on the CPU (rank 0; None elsewhere). A collective: every rank must call it."""
    import torch
    import torch.distributed as dist
    from deepspeed.utils import safe_get_full_fp32_param

    main = not dist.is_initialized() or dist.get_rank() == 0
    masters: dict[int, Any] = {}
    for _, param in module.named_parameters():
        full = safe_get_full_fp32_param(param)  # all-reduce over the data-parallel group
        if full is not None and main:
            masters[id(param)] = full.detach().to("cpu", torch.float32).clone()
        del full
    if not main:
        return None
    if not masters:
        raise RuntimeError("DeepSpeed returned no float32 master weights (not a ZeRO/bf16 optimizer?)")
    state = module.state_dict()
    for name, param in module.named_parameters(remove_duplicate=False):
        if id(param) in masters:  # tied names share one tensor, as in the live model
            state[name] = masters[id(param)]
    return state


def save_final_weights(trainer: Any, path: str | Path) -> None:
    """Write the trained weights to ``path`` (every rank calls it): float32 masters when they exist.

    Outside DeepSpeed the parameters are the master weights: ``Trainer.save_model``. Under
    DeepSpeed the float32 partitions are gathered (:func:`_deepspeed_fp32_state`) and saved with
    ``save_pretrained``; ``config.json`` then says ``float32`` (transformers writes the module's
    dtype, bf16, ``modeling_utils.py:3440-3443``).
    """
    if not trainer.is_deepspeed_enabled:
        trainer.save_model(str(path))
        return
    model = trainer.accelerator.unwrap_model(trainer.model)
    state = _deepspeed_fp32_state(model)
    if state is not None:
        model.save_pretrained(str(path), state_dict=state)
        _config_says_float32(model, path)
        logger.info("final model saved from DeepSpeed's float32 master weights (%d tensors)", len(state))
    del state


def _config_says_float32(model: Any, path: str | Path) -> None:
    import copy

    config = copy.deepcopy(model.config)
    config.dtype = "float32"
    config.save_pretrained(str(path))


def fp32_weights_from_checkpoint(checkpoint: str | Path) -> dict[str, Any] | None:
    """The float32 master weights of a DeepSpeed checkpoint folder (live module names), or None when
    the folder holds no DeepSpeed state (``global_step*/`` with ZeRO optimizer files)."""
    folder = Path(checkpoint)
    if not any(p.is_dir() and p.name.startswith("global_step") for p in folder.iterdir()):
        return None
    from deepspeed.utils.zero_to_fp32 import get_fp32_state_dict_from_zero_checkpoint

    return get_fp32_state_dict_from_zero_checkpoint(str(folder))


def restore_fp32_masters(model: Any, checkpoint: str | Path) -> bool:
    """Copy a DeepSpeed checkpoint's float32 master weights into ``model`` (in place, every trained
    tensor, else :class:`~olmpipe.job.errors.CheckpointLoadError`); False for other checkpoints."""
    import torch

    from olmpipe.job.errors import CheckpointLoadError

    masters = fp32_weights_from_checkpoint(checkpoint)
    if masters is None:
        return False
    params = dict(model.named_parameters(remove_duplicate=False))
    unknown = sorted(set(masters) - set(params))
    missing = sorted(n for n, p in params.items() if p.requires_grad and n not in masters)
    if unknown or missing:
        raise CheckpointLoadError(f"{checkpoint}: DeepSpeed's float32 weights do not fit the model "
                                  f"({len(missing)} missing, e.g. {missing[:3]}; {len(unknown)} unknown, e.g. "
                                  f"{unknown[:3]})")
    with torch.no_grad():
        for name, tensor in masters.items():
            params[name].copy_(tensor.to(device=params[name].device, dtype=params[name].dtype))
    logger.info("restored %d float32 master tensors from %s", len(masters), checkpoint)
    return True
