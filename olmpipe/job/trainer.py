"""What makes any olmpipe trainer resumable exactly: checkpoint weights restored in full (or the
run stops), a stop signal's checkpoint without the weights copy, every micro-batch loss kept for the
health check.

Why this exists: transformers 5 saves checkpoints in the model's *original* (hub) key format --
``save_pretrained`` reverts its weight conversions (``revert_weight_conversion`` in
``transformers/modeling_utils.py``, ``save_original_format=True``), so a Qwen2.5-VL checkpoint holds
``visual.*`` / ``model.*`` keys while the live model names them ``model.visual.*`` /
``model.language_model.*``. transformers' checkpoint load (olmpipe.compat.trl, transformers 5.24
``trainer.py:3610``, the load at ``:3703``) then calls ``model.load_state_dict(state_dict, strict=False)`` on the
raw file: no key matches, nothing is loaded, and a resumed run silently continues from the *base*
weights with the checkpoint's optimizer state, step count and metrics (every preemption restart
lost the training before it).

:func:`load_checkpoint_weights` loads a checkpoint folder into a live model the way
``from_pretrained`` reads it (with the conversions), checks that every tensor of the model was
restored, and raises :class:`CheckpointLoadError` otherwise -- a resume either restores the weights
exactly or stops. DeepSpeed and FSDP checkpoints keep transformers' own loaders (their shards use
the live module names).

:class:`ResumableTrainer` is the mixin every trainer of a training stage puts before its seams
class (:class:`olmpipe.compat.trl.GRPOTrainerSeams`, whose hooks stand for transformers' private
checkpoint methods): GRPO's :class:`olmpipe.train.trainer.ResumableGRPOTrainer`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from olmpipe.compat.transformers import tied_weight_names
from olmpipe.job.errors import CheckpointLoadError

logger = logging.getLogger(__name__)

__all__ = ["ResumableTrainer", "load_checkpoint_weights", "restore_trained_weights"]


def _weight_map(folder: Path) -> dict[str, str]:
    """Tensor name -> safetensors file of a checkpoint folder (single file or sharded)."""
    from olmpipe.records.models import NotAWeightsFolder, weight_map

    try:
        return weight_map(folder)
    except NotAWeightsFolder as exc:
        raise CheckpointLoadError(str(exc)) from None


def _stored_shapes(folder: Path, stored: dict[str, str]) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape as stored, read from the safetensors headers (no tensor is loaded)."""
    from safetensors import safe_open

    shapes = {}
    for file in sorted(set(stored.values())):
        with safe_open(str(folder / file), framework="pt") as fh:
            shapes.update({name: tuple(fh.get_slice(name).get_shape()) for name in fh.keys()})  # noqa: SIM118
    return shapes


def _load_plain(model: Any, folder: Path, files: set[str]) -> None:
    """Load a checkpoint whose keys are the live model's own names (strict)."""
    from safetensors.torch import load_file

    state = {}
    for name in sorted(files):
        state.update(load_file(str(folder / name), device="cpu"))
    result = model.load_state_dict(state, strict=False)
    _check_complete(model, folder, result.missing_keys, result.unexpected_keys)


def _check_complete(model: Any, folder: Path, missing: list[str], unexpected: list[str]) -> None:
    tied = tied_weight_names(model)
    missing = [k for k in missing if k not in tied]
    if missing or unexpected:
        raise CheckpointLoadError(
            f"{folder}: the checkpoint's weights do not fit the model ({len(missing)} missing, "
            f"{len(unexpected)} unexpected; e.g. missing {missing[:3]}, unexpected {unexpected[:3]}). "
            "Refusing to resume from the base weights; move the checkpoint aside to start over."
        )


def load_checkpoint_weights(model: Any, checkpoint: str | Path) -> None:
    """Copy the weights of ``checkpoint`` into ``model`` in place, or raise :class:`CheckpointLoadError`.

    When the stored names and shapes are the model's own (no conversion), the files are loaded
    strictly. Otherwise (renamed prefixes of Qwen2/2.5-VL, Qwen3-VL-MoE experts in the published
    layout: :mod:`olmpipe.models.architectures`) the checkpoint is read with ``type(model).from_pretrained`` on the CPU in the model's
    dtype -- the same conversion path as any model load -- and copied tensor by tensor; this holds a
    second copy of the weights in host memory for the moment of the copy. Either way a tensor the
    checkpoint lacks (other than a tied one, :func:`olmpipe.compat.transformers.tied_weight_names`) is
    an error: ``from_pretrained`` would initialise it afresh, and its loading report names it.
    """
    import torch

    folder = Path(checkpoint)
    stored = _weight_map(folder)
    keys = set(stored)
    state = model.state_dict()
    own = set(state)
    if (keys <= own and own - keys <= tied_weight_names(model)
            and _stored_shapes(folder, stored) == {k: tuple(state[k].shape) for k in keys}):
        _load_plain(model, folder, set(stored.values()))
        logger.info("restored %d tensors from %s", len(keys), folder)
        return
    # from_pretrained initialises what the files lack: its loading report says what that was
    loaded, report = type(model).from_pretrained(str(folder), dtype=model.dtype, device_map="cpu",
                                                 output_loading_info=True)
    source = loaded.state_dict()
    target = model.state_dict()
    missing = set(target) - set(source) | set(report["missing_keys"])
    _check_complete(model, folder, sorted(missing), sorted(set(source) - set(target) | set(report["unexpected_keys"])))
    with torch.no_grad():
        for name, tensor in target.items():
            if source[name].shape != tensor.shape:
                raise CheckpointLoadError(f"{folder}: {name} has shape {tuple(source[name].shape)}, "
                                          f"the model {tuple(tensor.shape)}")
            tensor.copy_(source[name].to(device=tensor.device, dtype=tensor.dtype))
    del loaded, source
    logger.info("restored %d tensors from %s (converted from the saved format)", len(target), folder)


class ResumableTrainer:
    """The hooks of olmpipe's trainer seams (:class:`olmpipe.compat.trl.TrainerSeams`) that make a
    resume exact, for any ``transformers.Trainer`` subclass: put it first in the bases.

    - :meth:`restore_checkpoint`, :meth:`restore_best_model`: every weight (or the adapter) of the
      checkpoint restored, or the run stops (:func:`restore_trained_weights`);
    - :meth:`checkpoint_weights_wanted`: no weights copy in a stop signal's DeepSpeed checkpoint;
    - :meth:`training_step` keeps each micro-batch's loss for :meth:`take_nonfinite_loss`
      (:class:`olmpipe.job.health.StopOnNonFinite`);
    - :meth:`prepare_adapter`: LoRA's trained tensors in float32 before the optimizer exists;
    - :meth:`configure_ddp`: DDP's gradients are views into its all-reduce buckets.
    """

    #: Set by :class:`olmpipe.job.callbacks.StopOnSignal` when a stop signal arrived: the checkpoint
    #: written next holds only what a resume reads (:meth:`checkpoint_weights_wanted`).
    stopping = False

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._step_losses: list[Any] = []  # this optimizer step's micro-batch losses (take_nonfinite_loss)
        super().__init__(*args, **kwargs)
        from accelerate.utils import is_peft_model

        if is_peft_model(self.model):
            self.prepare_adapter()

    def prepare_adapter(self) -> None:
        """LoRA: every trained tensor (the adapter, and the copies of ``modules_to_save``, which PEFT
        makes in the base's dtype) in float32, before the optimizer exists
        (:func:`olmpipe.job.peft.restore_fp32_adapter`)."""
        from olmpipe.job.peft import restore_fp32_adapter

        cast = restore_fp32_adapter(self.model)
        if cast:
            logger.info("trained tensors of the adapter and modules_to_save cast to float32: %d", cast)

    def configure_ddp(self, ddp_kwargs: Any) -> None:
        """DDP with ``gradient_as_bucket_view=True``: each gradient is a view into DDP's all-reduce
        bucket instead of a second float32 copy of it (4 bytes per parameter less on every rank).

        transformers leaves it unset (``trainer.py:758-766``), accelerate's default is False
        (``utils/dataclasses.py:188``), as torch 2.13's (``torch/nn/parallel/distributed.py:828``;
        its docstring, 731-742: the view "can reduce peak memory usage, where the saved memory size
        will be equal to the total gradients size"). Torch's one caveat is ``detach_()`` on a gradient;
        neither transformers' step (``zero_grad`` sets gradients to None, which torch allows) nor
        olmpipe's health check calls it, and a run with the view ends bitwise equal to one without
        (``tests/test_train_multiprocess.py``).
        """
        ddp_kwargs.gradient_as_bucket_view = True

    def checkpoint_weights_wanted(self, output_dir: str | None) -> bool:
        """The Hugging Face copy of the weights in every checkpoint, except the one written on a stop
        signal under DeepSpeed.

        transformers writes every checkpoint by saving the model first (its checkpoint writer, see olmpipe.compat.trl
        -> :meth:`save_model`, :class:`~olmpipe.compat.trl.TrainerSeams`), then DeepSpeed's own
        ``save_checkpoint`` (transformers 5.24 ``trainer.py:3552-3561``), which holds the 16-bit module
        and the float32 master weights a resume loads (``deepspeed_load_checkpoint``). The Hugging
        Face copy of the weights is for people only; on a stop it is left out, so the checkpoint that
        must land within the stop grace is ~2 bytes per parameter smaller, all of them written by
        rank 0 (:mod:`olmpipe.plan.checkpoint`). Every rank skips it together (the stop flag is agreed
        across ranks), so no collective of the ZeRO-3 gather is left waiting.
        """
        if self.stopping and self.is_deepspeed_enabled:
            logger.info("checkpoint on a stop signal: DeepSpeed state only (no weights copy in %s)", output_dir)
            return False
        return True

    def training_step(self, model: Any, inputs: Any, num_items_in_batch: Any = None) -> Any:
        """The trainer's step (forward, loss, backward); the loss is kept for :meth:`take_nonfinite_loss`
        (transformers' ``logging_nan_inf_filter`` would only hide a NaN loss from the logs)."""
        loss = super().training_step(model, inputs, num_items_in_batch)
        self._step_losses.append(loss.detach().reshape(()))
        return loss

    def take_nonfinite_loss(self) -> float | None:
        """The first non-finite loss among the micro-batches since the last call (None: all finite).

        Read by :class:`olmpipe.job.health.StopOnNonFinite` once per optimizer step (one sync).
        """
        import torch

        losses, self._step_losses = self._step_losses, []
        if not losses:
            return None
        stacked = torch.stack(losses)
        bad = ~torch.isfinite(stacked)
        return float(stacked[bad][0]) if bool(bad.any()) else None

    def restore_checkpoint(self, checkpoint: str, model: Any) -> bool:
        """A resume restores every weight (or the adapter) of the checkpoint, or raises; DeepSpeed and
        FSDP checkpoints keep transformers' loaders (their shards use the live module names)."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return False
        restore_trained_weights(self.accelerator.unwrap_model(model), checkpoint)
        return True

    def restore_best_model(self) -> bool:
        """``load_best_model_at_end`` reads the best checkpoint with the same raw ``load_state_dict``
        (transformers 5.24 ``trainer.py:3832``): load it like a resume instead."""
        if self.is_deepspeed_enabled or self.is_fsdp_enabled:
            return False
        logger.info("loading the best model from %s (score %s)", self.state.best_model_checkpoint,
                    self.state.best_metric)
        restore_trained_weights(self.accelerator.unwrap_model(self.model), self.state.best_model_checkpoint)
        return True


def restore_trained_weights(model: Any, checkpoint: str | Path) -> None:
    """A checkpoint's trained weights into ``model``: the adapter of a LoRA run, else every weight.

    transformers' own PEFT branch (its checkpoint load, olmpipe.compat.trl; transformers 5.24 trainer.py:3709-3728) calls
    ``load_adapter``, which does not check what it restored; :func:`olmpipe.job.peft.load_adapter_checkpoint`
    restores every adapter tensor in place or raises.
    """
    from accelerate.utils import is_peft_model

    if is_peft_model(model):
        from olmpipe.job.peft import load_adapter_checkpoint

        load_adapter_checkpoint(model, checkpoint)
    else:
        load_checkpoint_weights(model, checkpoint)
