"""TRL's ``GRPOTrainer`` with a resume that really restores the trained weights and the data order
of an uninterrupted run, and a colocated vLLM that generates with the latest weights.

The weights' half is every trainer's (:class:`olmpipe.job.trainer.ResumableTrainer`: transformers 5
saves checkpoints in the hub's key format and would resume silently from the base weights).

The data order is the second half of an exact resume. TRL's ``RepeatSampler`` (``trl/trainer/utils.py``)
draws each epoch's permutation from one generator seeded once at construction, so epoch ``e`` of a
run gets the generator's ``e``-th draw -- but a resumed run builds a fresh sampler whose *first*
draw serves the epoch it resumes in, and trains on another page order than the run it continues.
:class:`~olmpipe.compat.trl.EpochSeededRepeatSampler` makes the permutation a function of
``(seed, epoch)`` alone (``set_epoch``, which the Trainer and accelerate call at the start of every
epoch), so an interrupted and an uninterrupted run see the same pages at every step.

The private methods of TRL and transformers this needs are overridden in :mod:`olmpipe.compat.trl`
(with the upstream lines and releases they were checked against), not here.
"""

from __future__ import annotations

import logging
from typing import Any

from olmpipe.compat.trl import (
    RESET_ENCODER_CACHE,
    EpochSeededRepeatSampler,
    GRPOTrainerSeams,
    after_server_weight_sync,
    after_vllm_weight_sync,
    epoch_seeded,
    reset_server_encoder_cache,
)
from olmpipe.job.trainer import ResumableTrainer, load_checkpoint_weights
from olmpipe.train.vllm_server import VLLMServerError

logger = logging.getLogger(__name__)


def _drop_engine_caches(llm: Any) -> None:
    """:func:`olmpipe.compat.vllm.drop_stale_caches` (imported at the sync: only colocate mode has vLLM)."""
    from olmpipe.compat.vllm import drop_stale_caches

    drop_stale_caches(llm)


__all__ = ["ResumableGRPOTrainer", "load_checkpoint_weights"]


class ResumableGRPOTrainer(ResumableTrainer, GRPOTrainerSeams):
    """``GRPOTrainer`` whose resume restores the model weights and the data order exactly, and whose
    colocated vLLM engine generates with the weights of the latest step.

    The hooks of :class:`~olmpipe.compat.trl.GRPOTrainerSeams` (TRL's and transformers' private
    methods) restore checkpoints (:meth:`restore_checkpoint`, :meth:`restore_best_model`), seed the
    data order per epoch (:meth:`make_train_sampler`) and leave the weights copy out of a stop
    signal's DeepSpeed checkpoint (:meth:`checkpoint_weights_wanted`).

    vLLM colocate mode: before the engine is built, :func:`olmpipe.compat.vllm.keep_cpu_linear_weights`
    keeps vLLM's CPU build from repacking linear weights (otherwise TRL's weight sync fails for the
    vision tower and leaves stale packed copies of the language model), and
    :func:`~olmpipe.compat.vllm.keep_cpu_expert_weights` does the same for Qwen3-VL-MoE's
    experts; after every ``sync_weights`` the engine's prefix and vision-encoder caches are dropped
    (:func:`~olmpipe.compat.vllm.drop_stale_caches`; TRL 1.16 resets only the
    prefix cache), and an engine whose MoE kernel repacks the experts is refused
    (:meth:`check_colocated_experts`). Server mode: after every sync the server's vision-encoder
    cache is dropped too (:meth:`refresh_after_sync`). Qwen3-VL-MoE's expert weights are sent in the
    layout vLLM loads (:meth:`sync_experts_in_published_layout`, colocate and server mode). See docs/vllm.md.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        config = kwargs.get("args")
        colocate = bool(config is not None and config.use_vllm and config.vllm_mode == "colocate")
        if colocate:
            from olmpipe.compat.vllm import keep_cpu_expert_weights, keep_cpu_linear_weights

            keep_cpu_linear_weights()
            keep_cpu_expert_weights()
        super().__init__(*args, **kwargs)  # ResumableTrainer: LoRA's adapter prepared (prepare_adapter)
        if colocate:
            self.check_colocated_experts()
        self.refresh_after_sync()
        self.sync_experts_in_published_layout()

    def check_colocated_experts(self) -> None:
        """Refuse a colocated vLLM engine whose mixture-of-experts kernel repacks the expert weights
        after loading (FlashInfer's on Blackwell GPUs): TRL's colocated sync would write the trained
        experts into it unpacked (:func:`olmpipe.compat.vllm.repacked_moe_backends`)."""
        from olmpipe.compat.trl import colocated_llm
        from olmpipe.compat.vllm import repacked_moe_backends
        from olmpipe.job.errors import JobSetupError

        llm = colocated_llm(self)
        backends = repacked_moe_backends(llm) if llm is not None else []
        if backends:
            raise JobSetupError(
                f"train.grpo.vllm_mode: colocate with {type(self.model).__name__} on this GPU: vLLM picked the "
                f"{', '.join(backends)} mixture-of-experts kernel, which repacks the expert weights after loading "
                "(vLLM 0.31 fused_moe/oracle/unquantized.py 432-467), and TRL's colocated weight sync writes them "
                "unpacked, so every rollout after the first step would use scrambled experts. Use "
                "train.grpo.vllm_mode: server (its weight transfer repacks them) with resources.train.vllm_server_gpus, "
                "or GPUs whose default kernel is Triton (Hopper, Ampere).")

    def sync_experts_in_published_layout(self) -> None:
        """Qwen3-VL-MoE: send the fused expert weights to vLLM in the layout its loader expects.

        vLLM 0.31 loads Qwen3-VL-MoE experts as published checkpoints store them and transposes them
        (``vllm/model_executor/models/qwen3_vl_moe.py``, ``is_fused_checkpoint_transposed=True``), also
        when TRL pushes the live weights (``load_weights`` in colocate mode, the server's in server
        mode); the live parameters are the transpose (:mod:`olmpipe.models.architectures`). The stream TRL's
        sync reads both paths from is wrapped (:func:`olmpipe.compat.trl.set_vllm_weight_stream`).
        """
        from olmpipe.compat.trl import set_vllm_weight_stream, vllm_weight_stream
        from olmpipe.models.architectures import ARCHITECTURES, published_layout

        named_params = vllm_weight_stream(self)
        arch = ARCHITECTURES.get(getattr(self.model.config, "model_type", ""))
        if named_params is None or arch is None or not arch.moe:
            return
        set_vllm_weight_stream(self, lambda: published_layout(named_params()))

    def prepare_adapter(self) -> None:
        """LoRA: every trained tensor in float32 (:meth:`ResumableTrainer.prepare_adapter`), and vLLM
        syncs that leave the base as it was.

        See :mod:`olmpipe.job.peft`. Outside ZeRO-3 and FSDP, where TRL's own gathers are needed and
        kept, the weights TRL's vLLM sync streams come from
        :func:`~olmpipe.job.peft.merged_named_params` (:func:`olmpipe.compat.trl.set_vllm_weight_stream`).
        """
        from olmpipe.compat.trl import set_vllm_weight_stream, vllm_sync_sharding, vllm_weight_stream
        from olmpipe.job.peft import merged_named_params

        super().prepare_adapter()
        if vllm_weight_stream(self) is None:
            return
        sharding = vllm_sync_sharding(self)
        if sharding is not None:
            logger.warning("LoRA with %s: TRL's vLLM sync merges and unmerges the adapter in place, which "
                           "rounds the frozen base weights a little at every sync in bfloat16", sharding)
            return
        model = self.model
        set_vllm_weight_stream(self, lambda: merged_named_params(model))

    def refresh_after_sync(self) -> None:
        """After every weight sync, drop what vLLM computed with the old weights.

        TRL 1.16 resets only the prefix cache (``trl/generation/vllm_generation.py`` 513-517); vLLM
        keeps vision-encoder outputs per image hash and serves them again for a page seen before
        (``v1/core/encoder_cache_manager.py`` 124-134), and says to reset them "when model weights
        are updated" (``v1/engine/llm_engine.py`` 366-372). Colocate mode: the engine's caches
        (:func:`olmpipe.compat.vllm.drop_stale_caches`). Server mode: the server's encoder-cache reset
        (:func:`olmpipe.compat.trl.reset_server_encoder_cache`), from the main process once now (a server without the endpoint
        stops the job before training) and after every sync.
        """
        if after_vllm_weight_sync(self, _drop_engine_caches):
            return
        post_reset = reset_server_encoder_cache(self)
        if post_reset is None:
            return

        def reset() -> None:
            response = post_reset()
            if response.status_code != 200:
                raise VLLMServerError(
                    f"the vLLM server answered {RESET_ENCODER_CACHE} with {response.status_code} "
                    f"({response.text[:200]}): it must drop its vision-encoder cache after each weight update, or "
                    "pages seen before are answered with stale image embeddings. vLLM 0.31 serves the endpoint "
                    "with VLLM_SERVER_DEV_MODE=1, which trl vllm-serve sets (train.vllm_server.program; a server "
                    "given by train.grpo.vllm_server_base_url needs it in its environment)")

        reset()
        after_server_weight_sync(self, reset)

    def make_train_sampler(self, sampler: Any) -> EpochSeededRepeatSampler:
        """TRL's sampler, its shuffle seeded by ``seed + epoch`` (:func:`~olmpipe.compat.trl.epoch_seeded`)."""
        return epoch_seeded(sampler)
