"""The load step of a training job: the processor, then the policy in the job's precision, and
with LoRA the adapter's configuration (the trainer wraps the model with it).

Full fine-tunes load float32 master weights (bf16 compute under autocast, :mod:`olmpipe.job.precision`);
LoRA loads the frozen base in the compute dtype (bf16 on GPUs, or quantized for QLoRA) and trains a
float32 adapter, its own master copy (:mod:`olmpipe.job.peft`). The policy is loaded after the
trainer's config exists (:meth:`olmpipe.job.steps.TrainerSteps.trainer_args`): under DeepSpeed ZeRO-3
that config is what makes ``from_pretrained`` load the weights partitioned over the ranks.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from olmpipe.job.distributed import local_rank

if TYPE_CHECKING:
    from olmpipe.job.setup import JobSetup

logger = logging.getLogger(__name__)

__all__ = ["LoadedModel", "load_model", "load_processor"]


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


def load_model(setup: JobSetup, processor: Any) -> LoadedModel:
    """Load ``setup``'s base model onto this rank's device (:func:`olmpipe.models.load.load_model`)."""
    from olmpipe.job.peft import check_model, lora_config, quantization_config
    from olmpipe.models.load import load_model as load

    peft_cfg, precision = setup.peft, setup.precision
    weights_dtype = precision.compute if peft_cfg["enabled"] else precision.weights
    model = load(setup.model_path, dtype=weights_dtype, device=f"cuda:{local_rank()}" if setup.device == "cuda" else "cpu",
                 quantization_config=quantization_config(peft_cfg, precision.compute) if peft_cfg["enabled"] else None)
    logger.info("precision: %s weights%s, %s compute, %s reference model", weights_dtype,
                " (frozen base; float32 adapter)" if peft_cfg["enabled"] else "", precision.compute,
                "the adapter disabled" if peft_cfg["enabled"] else precision.reference)
    model.train()
    if not peft_cfg["enabled"]:
        return LoadedModel(model, processor)
    # LoRA: TRL wraps the model (job/peft.py); the adapter's initial weights follow the seed
    check_model(peft_cfg, model, setup.knobs)
    return LoadedModel(model, processor, lora_config(peft_cfg, model.config.model_type))
