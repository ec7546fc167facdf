"""The load step of a training job: the processor, then the policy in the job's precision, and
with LoRA the adapter's configuration (the trainer wraps the model with it).

Full fine-tunes load float32 master weights (bf16 compute under autocast, :mod:`olmpipe.job.precision`);
LoRA loads the frozen base in the compute dtype (bf16 on GPUs, or quantized for QLoRA) and trains a
float32 adapter, its own master copy (:mod:`olmpipe.job.peft`). The policy is loaded after the
trainer's config exists (:meth:`olmpipe.job.steps.TrainerSteps.trainer_args`): under DeepSpeed ZeRO-3
that config is what makes ``from_pretrained`` load the weights partitioned over the ranks.

Where and in which dtype the policy is loaded follows what the strategy does with it next
(:func:`load_placement`), so that no rank ever holds the whole float32 model on its GPU where
sharding was asked for (the load peak of ``olmpipe plan``, :mod:`olmpipe.plan.memory`):

- **ZeRO-3**: ``from_pretrained`` runs under ``deepspeed.zero.Init`` (transformers 5.24
  ``modeling_utils.py`` 3820-3833: ``HfDeepSpeedConfig`` exists once the TRL config does, accelerate 1.15
  ``utils/dataclasses.py`` 1459-1488, ``training_args.py`` 1716-1721), which partitions every
  parameter as its module is built, in DeepSpeed's dtype (bf16 with ``train.dtype: bfloat16``:
  ``runtime/zero/partition_parameters.py`` 397-410) and on the rank's device (1168); the load then
  gathers one module at a time. Nothing is moved afterwards (the engine skips the move of a
  ``zero.Init`` model too: ``runtime/engine.py`` 2077-2094).
- **ZeRO-2**: the compute dtype (bf16), not float32: the engine casts the module to bf16 before it
  moves and partitions it (``runtime/engine.py`` 2080-2094) and builds its float32 masters from that
  bf16 module (``runtime/zero/stage_1_and_2.py`` 560-561), so a float32 load only doubles the
  rank's load peak (a run loaded either way ends bitwise equal, ``tests/test_train_deepspeed.py``).
- **FSDP**: on the CPU, in float32: accelerate's FSDP2 preparation upcasts trained parameters to
  float32 (``utils/fsdp_utils.py`` 814-820) and ``fully_shard`` moves each unit to the rank's GPU as
  it shards it (the comment at ``utils/fsdp_utils.py`` 831: "fully_shard moves the model to GPU if it
  was on CPU"), so a GPU holds its shards plus one unit, never the whole model. The Trainer leaves
  the model where it is under FSDP (transformers ``trainer.py`` 480-496, ``place_model_on_device``).
  Host memory: each rank holds its float32 copy until it is sharded (4 bytes per parameter and rank).
- ``single``/``ddp`` (and QLoRA, whose quantized layers load straight onto their GPU): the rank's GPU.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from olmpipe.job.distributed import local_rank

if TYPE_CHECKING:
    from olmpipe.job.setup import JobSetup

logger = logging.getLogger(__name__)

__all__ = ["LoadedModel", "load_model", "load_placement", "load_processor", "sharding"]


@dataclass(frozen=True)
class LoadedModel:
    """The policy in training mode, its processor, and the LoRA config (None for full fine-tuning)."""

    model: Any
    processor: Any
    peft_config: Any = None


def load_processor(setup: JobSetup) -> Any:
    """The base model's processor (tokenizer, image processor, chat template)."""
    from olmpipe.models.load import load_processor as load

    return load(setup.model_path)


def sharding(environ: Mapping[str, str] | None = None) -> str | None:
    """``zero2``, ``zero3`` or ``fsdp`` when this process trains under DeepSpeed or FSDP, else None.

    Read from the variables ``accelerate launch`` sets for its ranks and that accelerate and
    transformers themselves read to decide it (accelerate 1.15 ``utils/launch.py`` 305 and 566-568:
    ``ACCELERATE_USE_FSDP``, ``ACCELERATE_USE_DEEPSPEED``, ``ACCELERATE_DEEPSPEED_ZERO_STAGE``; the
    stage of ``workflow/accelerate/zero{2,3}.yaml``).
    """
    env = os.environ if environ is None else environ
    if env.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":
        return "zero3" if env.get("ACCELERATE_DEEPSPEED_ZERO_STAGE") == "3" else "zero2"
    if env.get("ACCELERATE_USE_FSDP", "false").lower() == "true":
        return "fsdp"
    return None


def load_placement(setup: JobSetup, strategy: str | None) -> tuple[str, str]:
    """(dtype, device) the policy of ``setup`` is loaded in under ``strategy`` (this process's is
    :func:`sharding`; None: no sharding, ``single``/``ddp``); see the module docstring.

    Full fine-tunes: float32 masters (``train.pure_bf16``: bf16), except under DeepSpeed, whose
    bf16 module is the load (the compute dtype); LoRA: the frozen base in the compute dtype. Device:
    the CPU on a CPU job and under FSDP (not for QLoRA: bitsandbytes loads onto its GPU), else this
    rank's GPU.
    """
    peft_cfg, precision = setup.peft, setup.precision
    deepspeed = strategy in ("zero2", "zero3")
    dtype = precision.compute if peft_cfg["enabled"] or deepspeed else precision.weights
    quantized = peft_cfg["enabled"] and peft_cfg["quantization"] != "none"
    on_cpu = setup.device != "cuda" or (strategy == "fsdp" and not quantized)
    return dtype, "cpu" if on_cpu else f"cuda:{local_rank()}"


def load_model(setup: JobSetup, processor: Any, *, publish_only: bool = False) -> LoadedModel:
    """Load ``setup``'s base model as the job's strategy takes it (:func:`load_placement`;
    :func:`olmpipe.models.load.load_model`).

    ``publish_only``: the model is only written out (:func:`olmpipe.job.publish.finish_from_checkpoint`),
    so it is loaded as a single process would, on the CPU: float32 masters for a full fine-tune
    (what a DeepSpeed checkpoint's masters are copied into), never onto a GPU every rank shares.
    """
    from olmpipe.job.peft import check_model, lora_config, quantization_config
    from olmpipe.models.load import load_model as load

    peft_cfg, precision = setup.peft, setup.precision
    weights_dtype, device = load_placement(setup, None if publish_only else sharding())
    quantization = quantization_config(peft_cfg, precision.compute) if peft_cfg["enabled"] else None
    if publish_only and quantization is None:
        device = "cpu"
    model = load(setup.model_path, dtype=weights_dtype, device=device, quantization_config=quantization)
    masters = (" (frozen base; float32 adapter)" if peft_cfg["enabled"] else
               " (DeepSpeed's module; its optimizer keeps float32 masters)" if weights_dtype != precision.weights else "")
    logger.info("precision: %s weights%s on %s, %s compute, %s reference model", weights_dtype, masters, device,
                precision.compute, "the adapter disabled" if peft_cfg["enabled"] else precision.reference)
    model.train()
    if not peft_cfg["enabled"]:
        return LoadedModel(model, processor)
    # LoRA: TRL wraps the model (job/peft.py); the adapter's initial weights follow the seed
    check_model(peft_cfg, model, setup.knobs)
    return LoadedModel(model, processor, lora_config(peft_cfg, model.config.model_type))
