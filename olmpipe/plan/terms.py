"""What one copy of a model's weights costs per parameter, and the row type of the memory plan.

:mod:`olmpipe.plan.memory` sums :class:`Term` rows; the byte counts per parameter of the weights,
gradients and optimizer states under each ``resources.<section>.strategy``
(:func:`training_bytes_per_param`) and of torch autocast's bf16 copies (:func:`autocast_copy_bytes`)
live here, apart from the job arithmetic, so :mod:`olmpipe.plan.lora` can build its rows too.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Term", "autocast_copy_bytes", "training_bytes_per_param"]


def training_bytes_per_param(strategy: str, processes: int, weight_bytes: int,
                             compute_bytes: int | None = None) -> dict[str, float]:
    """Bytes per parameter and GPU of weights, gradients and AdamW states under a strategy.

    ``weight_bytes``: the dtype the policy is loaded in (4: float32 master weights, the default of
    :mod:`olmpipe.job.precision`; 2: ``train.pure_bf16``); ``compute_bytes``: 2 under bf16 mixed
    precision, 4 in float32 (default: ``weight_bytes``).

    - ``single``/``ddp``: the parameters are the master weights (bf16 only under autocast), so
      weights, gradients and both AdamW moments (torch keeps them in the parameter dtype) are whole
      on every rank: w + w + 2w (16 bytes with float32 masters, 8 with pure bf16). DDP's gradients
      are views into its all-reduce buckets (``gradient_as_bucket_view``, set by
      :class:`olmpipe.compat.trl.TrainerSeams`), not a second copy. Under bf16 autocast, float32
      masters add autocast's bf16 copies of the weights (:func:`autocast_copy_bytes`).
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


def autocast_copy_bytes(strategy: str, weight_bytes: int, compute_bytes: int, peft: bool = False) -> int:
    """Bytes per parameter of the bf16 copies torch autocast keeps of float32 weights (0 where there
    are none): ``single``/``ddp`` full fine-tunes with float32 masters and bf16 compute.

    accelerate wraps the model's forward in ``torch.autocast`` (``utils/modeling.py`` 2099-2113) and
    TRL 1.16 computes the policy's log-probs under ``accelerator.autocast()`` (``grpo_trainer.py``
    1497-1498); autocast casts each float32 weight that requires grad to bf16 once and caches the copy
    until the outermost autocast region exits (torch's ``cached_cast``, ``aten/src/ATen/autocast_mode.cpp``),
    so at the end of the forward every weight has its 2-byte copy (without activation checkpointing
    they are also what the matmuls saved for backward). DeepSpeed's module is bf16 already, FSDP2
    gathers bf16 units (its ``MixedPrecisionPolicy``), pure bf16 has nothing to cast, and LoRA's
    frozen base is loaded in bf16.
    """
    if peft or strategy not in ("single", "ddp") or weight_bytes != 4 or compute_bytes != 2:
        return 0
    return 2


@dataclass(frozen=True)
class Term:
    """One row of the plan: what takes memory, how much, and the setting that shrinks it."""

    name: str
    gib: float
    note: str
    fix: str
