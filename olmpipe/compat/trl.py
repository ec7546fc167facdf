"""Seams into TRL's ``GRPOTrainer`` (and the transformers ``Trainer`` below it) that have no public hook.

Checked against TRL 1.16.0, transformers 5.17 and 5.24, accelerate 1.15 (importing this module
checks the installed releases: :func:`olmpipe.compat.versions.require`); ``tests/test_compat.py``
drives every seam through the installed classes. Line numbers are TRL 1.16.0's, transformers
5.24.0's (5.17.0's in brackets), accelerate 1.15.0's.

- :class:`TrainerSeams` (any transformers ``Trainer``), :class:`GRPOTrainerSeams` (TRL's
  ``GRPOTrainer``) and :class:`SFTTrainerSeams` (TRL's ``SFTTrainer``) override private methods and hand each to a public hook of olmpipe's trainers
  (:class:`olmpipe.job.trainer.ResumableTrainer`, :class:`olmpipe.train.trainer.ResumableGRPOTrainer`):
  ``_load_from_checkpoint`` -> :meth:`~TrainerSeams.restore_checkpoint`, ``_load_best_model`` ->
  :meth:`~TrainerSeams.restore_best_model`, ``save_model``'s private ``_internal_call`` (the call
  that writes a checkpoint) -> :meth:`~TrainerSeams.checkpoint_weights_wanted`, and
  ``_get_train_sampler`` -> :meth:`~GRPOTrainerSeams.make_train_sampler`, ``_build_accelerator_args``
  -> :meth:`~TrainerSeams.configure_ddp`.
- :class:`EpochSeededRepeatSampler` subclasses TRL's ``RepeatSampler`` (``trl/trainer/utils.py``,
  not exported) and relies on its attributes; :func:`epoch_seeded` rebuilds TRL's sampler from its
  constructor's parameters and refuses one it cannot carry over.
- :func:`latest_generation_batch` reads ``GRPOTrainer._logs``, TRL's record of the latest generation.
- :func:`add_fused_lm_head` is TRL's (not exported) fused LM head of the policy's log-probabilities.
- :func:`after_vllm_weight_sync`, :func:`after_server_weight_sync`, :func:`vllm_server_post` (and
  :func:`reset_server_encoder_cache`, vLLM's dev endpoint :data:`RESET_ENCODER_CACHE` through it),
  :func:`vllm_weight_stream` / :func:`set_vllm_weight_stream`, :func:`vllm_sync_sharding`: TRL's
  ``VLLMGeneration`` (``trl/generation/vllm_generation.py``), whose ``sync_weights``, client and
  private ``_iter_named_params`` / ``_dist`` the trainer adjusts.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from olmpipe.compat.versions import UpstreamChangedError, require

require("trl", "transformers", "accelerate")

# after the version check, which names what is wrong before an import could fail on it
from trl import GRPOTrainer, SFTTrainer
from trl.trainer.utils import RepeatSampler

logger = logging.getLogger(__name__)

__all__ = ["RESET_ENCODER_CACHE", "EpochSeededRepeatSampler", "GRPOTrainerSeams", "GenerationBatch", "SFTTrainerSeams", "TrainerSeams",
           "add_fused_lm_head", "after_server_weight_sync", "after_vllm_weight_sync", "colocated_llm", "epoch_seeded",
           "latest_generation_batch", "reset_server_encoder_cache", "set_vllm_weight_stream", "vllm_server_post", "vllm_sync_sharding",
           "vllm_weight_stream"]

NamedTensors = Iterator[tuple[str, Any]]


class EpochSeededRepeatSampler(RepeatSampler):
    """TRL's ``RepeatSampler`` whose shuffle of epoch ``e`` is seeded by ``seed + e`` alone.

    TRL's sampler (``trl/trainer/utils.py:908-948``) draws each epoch's permutation from one
    ``self.generator`` seeded once in ``__init__``, so epoch ``e`` gets the generator's ``e``-th
    draw -- but a resumed run builds a fresh sampler whose *first* draw serves the epoch it resumes
    in. Reseeding ``self.generator`` before TRL's ``__iter__`` makes the order a function of
    ``(seed, epoch)``. ``set_epoch`` is called at the start of every epoch by transformers'
    ``Trainer`` through accelerate's data loader: ``train_dataloader.set_epoch(epoch)``
    (transformers ``trainer.py:1859-1860`` [1787-1788]) -> ``DataLoaderShard.set_epoch``
    (accelerate ``data_loader.py:622-635``), which forwards to ``batch_sampler.sampler`` (one
    process) and ``batch_sampler.batch_sampler.sampler`` (a ``BatchSamplerShard``, several).
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            self.generator.manual_seed(int(self.seed or 0) + self.epoch)
        return super().__iter__()


def epoch_seeded(sampler: Any) -> EpochSeededRepeatSampler:
    """:class:`EpochSeededRepeatSampler` with every constructor argument of TRL's ``sampler``.

    TRL builds its sampler in ``GRPOTrainer._get_train_sampler`` (``grpo_trainer.py:1280-1316``)
    from values that live only there (``num_generations``, ``generation_batch_size // num_generations``,
    ``num_iterations * steps_per_generation``, ``shuffle_dataset``, ``seed``); they are read back
    from the attributes its ``__init__`` stores under the parameters' names. A parameter without
    such an attribute (a new argument of a later TRL) raises :class:`UpstreamChangedError` instead of
    being dropped.
    """
    if not isinstance(sampler, RepeatSampler):
        raise UpstreamChangedError(f"TRL's GRPOTrainer._get_train_sampler returned a {type(sampler).__name__}, "
                                   "not the RepeatSampler olmpipe reseeds per epoch (olmpipe/compat/trl.py)")
    params = [p for p in inspect.signature(type(sampler).__init__).parameters.values()
              if p.name != "self" and p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    ours = set(inspect.signature(RepeatSampler.__init__).parameters)
    lost = [p.name for p in params if not hasattr(sampler, p.name) or p.name not in ours]
    if lost:
        raise UpstreamChangedError(
            f"TRL's {type(sampler).__name__} takes {', '.join(lost)}, which olmpipe's epoch-seeded copy cannot "
            "carry over (no attribute of that name, or not a RepeatSampler argument); update "
            "olmpipe/compat/trl.py epoch_seeded for this TRL release"
        )
    return EpochSeededRepeatSampler(**{p.name: getattr(sampler, p.name) for p in params})


class TrainerSeams:
    """transformers ``Trainer``'s private checkpoint methods turned into public hooks: a mixin put
    before a ``Trainer`` subclass (TRL's ``GRPOTrainer``: :class:`GRPOTrainerSeams`).

    Subclasses override the hooks; by default each does what transformers does. Every override
    below is the upstream private method with the same signature:

    - ``_load_from_checkpoint(resume_from_checkpoint, model=None)`` (transformers ``trainer.py:3610``
      [3462], called by ``train`` at ``:1564`` [1508] and ``:1815`` [1743]) -> :meth:`restore_checkpoint`;
    - ``_load_best_model()`` (``trainer.py:3743`` [3591], called at ``:2025`` [1949] with
      ``load_best_model_at_end``) -> :meth:`restore_best_model`;
    - ``save_model(output_dir, _internal_call)`` (``trainer.py:4085`` [3930]): ``_internal_call=True``
      is the call of ``_save_checkpoint`` (``trainer.py:3377`` [3229]), which writes the Hugging Face
      copy of the weights into a checkpoint before the optimizer and DeepSpeed states ->
      :meth:`checkpoint_weights_wanted`;
    - ``_build_accelerator_args(**kwargs)`` (``trainer.py:741-781`` [715-755]), which makes the
      ``Accelerator``'s DDP settings (``DistributedDataParallelKwargs`` at ``:766`` [740]: only
      ``find_unused_parameters``, ``bucket_cap_mb``, ``broadcast_buffers``, ``static_graph``) ->
      :meth:`configure_ddp` on that object.
    """

    def restore_checkpoint(self, checkpoint: str, model: Any) -> bool:
        """Restore a checkpoint's weights into ``model`` on resume; False leaves it to transformers."""
        return False

    def restore_best_model(self) -> bool:
        """Restore ``self.state.best_model_checkpoint`` at the end of training; False leaves it to transformers."""
        return False

    def checkpoint_weights_wanted(self, output_dir: str | None) -> bool:
        """Whether the checkpoint being written into ``output_dir`` gets the Hugging Face copy of the weights."""
        return True

    def configure_ddp(self, ddp_kwargs: Any) -> None:
        """Adjust the ``accelerate.utils.DistributedDataParallelKwargs`` the Trainer's ``Accelerator``
        wraps the model in DDP with (used only when it runs DDP); by default nothing changes."""

    def _build_accelerator_args(self, **kwargs: Any) -> dict[str, Any]:
        from accelerate.utils import DistributedDataParallelKwargs

        args = super()._build_accelerator_args(**kwargs)
        handlers = [h for h in args.get("kwargs_handlers") or [] if isinstance(h, DistributedDataParallelKwargs)]
        if len(handlers) != 1:
            raise UpstreamChangedError(
                f"transformers' Trainer._build_accelerator_args made {len(handlers)} DistributedDataParallelKwargs, "
                "not the one olmpipe configures (transformers 5.24 trainer.py:766); update olmpipe/compat/trl.py")
        self.configure_ddp(handlers[0])
        return args

    def _load_from_checkpoint(self, resume_from_checkpoint: str, model: Any = None) -> None:
        if not self.restore_checkpoint(resume_from_checkpoint, model if model is not None else self.model):
            super()._load_from_checkpoint(resume_from_checkpoint, model)

    def _load_best_model(self) -> None:
        if not self.restore_best_model():
            super()._load_best_model()

    def save_model(self, output_dir: str | None = None, _internal_call: bool = False) -> None:
        if _internal_call and not self.checkpoint_weights_wanted(output_dir):
            return
        super().save_model(output_dir, _internal_call=_internal_call)


class GRPOTrainerSeams(TrainerSeams, GRPOTrainer):
    """``GRPOTrainer`` with its private extension points turned into public hooks: transformers'
    checkpoint methods (:class:`TrainerSeams`), and

    - ``_get_train_sampler(dataset)`` (``grpo_trainer.py:1280``; called through ``sampler_fn`` from
      ``get_train_dataloader``, ``:1276``) -> :meth:`make_train_sampler` of TRL's sampler.
    """

    def make_train_sampler(self, sampler: Any) -> Any:
        """The training sampler to use instead of TRL's ``sampler`` (default: TRL's)."""
        return sampler

    def _get_train_sampler(self, dataset: Any = None) -> Any:
        return self.make_train_sampler(super()._get_train_sampler(dataset))


class SFTTrainerSeams(TrainerSeams, SFTTrainer):
    """TRL's ``SFTTrainer`` with transformers' checkpoint methods as public hooks (:class:`TrainerSeams`).

    Its data order needs no seam: ``SFTTrainer`` keeps transformers' sampler, which accelerate 1.15
    replaces by its ``SeedableRandomSampler`` (``data_loader.py:73-106, 1196-1207``; transformers
    5.24 ``use_seedable_sampler`` defaults to True, ``trainer_pt_utils.py:1508``): epoch ``e``'s
    permutation is drawn from ``data_seed + e``, and a resume skips the batches already seen
    (``trainer.py:1852``), so it sees the pages of an uninterrupted run.
    """


# ------------------------------------------------------------------ the record of the latest batch

#: The keys of ``GRPOTrainer._logs`` (``grpo_trainer.py:1088-1095``) read here.
LOG_KEYS = ("completion", "rewards", "advantages", "extra")


@dataclass(frozen=True)
class GenerationBatch:
    """The latest generation batch as TRL recorded it, gathered over every rank, one entry per completion.

    ``completions``: each completion (conversational: a list of messages); ``rewards``: reward
    function name -> its value per completion (NaN where it returned None); ``advantages``: per
    completion; ``extra``: the columns rewards logged with ``log_extra`` -> value per completion.
    """

    completions: list[Any]
    rewards: dict[str, list[float]]
    advantages: list[float]
    extra: dict[str, list[Any]]


def latest_generation_batch(trainer: Any) -> GenerationBatch | None:
    """TRL's record of the latest generation batch (``GRPOTrainer._logs``), or None before the first one.

    TRL fills it in ``_generate_and_score_completions`` (``grpo_trainer.py:2833-2844``: completions,
    rewards per function, advantages, the ``log_extra`` columns; deques sized to one generation
    batch), for its own ``log_completions`` table, which cannot hold multimodal prompts. Raises
    :class:`UpstreamChangedError` when the record is not there or lacks a key.
    """
    record = getattr(trainer, "_logs", None)
    missing = [k for k in LOG_KEYS if not isinstance(record, Mapping) or k not in record]
    if missing:
        raise UpstreamChangedError(f"{type(trainer).__name__}._logs has no {', '.join(missing)} (TRL 1.16.0 "
                                   "grpo_trainer.py:1088-1095); update olmpipe/compat/trl.py latest_generation_batch")
    if not record["completion"]:
        return None
    return GenerationBatch(
        completions=list(record["completion"]),
        rewards={name: list(values) for name, values in record["rewards"].items()},
        advantages=list(record["advantages"]),
        extra={name: list(values) for name, values in record["extra"].items()},
    )


def add_fused_lm_head(model: Any, temperature: float = 1.0) -> None:
    """Patch ``model`` with TRL 1.16's fused LM head, as ``GRPOTrainer.__init__`` does for the policy and
    the reference model (``grpo_trainer.py:1066-1077``; ``add_fused_lm_head``, ``trl/trainer/utils.py:1548``,
    not exported): ``model(..., labels=labels, fused_lm_head=True)`` then returns the completion
    tokens' log-probabilities computed in ``[4096, 32768]`` tiles (``trl/kernels/chunked_logprob.py:31``,
    ``utils.py:1506``), never the whole logits. Used by benchmarks/gpu_check.py's memory probes, whose
    peak must be what TRL's own computation takes (``grpo_trainer.py:1497-1498``)."""
    from trl.trainer.utils import add_fused_lm_head as trl_add_fused_lm_head

    trl_add_fused_lm_head(model, temperature=temperature, outputs=("log_probs",))


# ------------------------------------------------------------------ the weight sync to vLLM


def _generation(trainer: Any) -> Any:
    """TRL's ``VLLMGeneration`` of a trainer with ``use_vllm`` (``grpo_trainer.py:1105-1107``), else None."""
    return getattr(trainer, "vllm_generation", None)


def after_vllm_weight_sync(trainer: Any, callback: Callable[[Any], None]) -> bool:
    """Call ``callback(llm)`` after every weight sync of a colocated vLLM engine; False without one.

    TRL syncs through the instance attribute (``self.vllm_generation.sync_weights()``,
    ``grpo_trainer.py:1771`` and ``:2204``), so the wrap replaces it on that instance;
    ``VLLMGeneration.sync_weights`` (``vllm_generation.py:481-517``) ends with the prefix-cache reset.
    ``llm`` is the colocated ``vllm.LLM`` (``vllm_generation.py:347``).
    """
    generation = _generation(trainer)
    if generation is None or getattr(generation, "mode", None) != "colocate":
        return False
    sync = generation.sync_weights

    def sync_then(*args: Any, **kwargs: Any) -> Any:
        result = sync(*args, **kwargs)
        if getattr(generation, "llm", None) is not None:
            callback(generation.llm)
        return result

    generation.sync_weights = sync_then
    return True


def colocated_llm(trainer: Any) -> Any:
    """The colocated ``vllm.LLM`` of a trainer with ``vllm_mode: colocate`` (``vllm_generation.py``
    347), else None."""
    generation = _generation(trainer)
    if generation is None or getattr(generation, "mode", None) != "colocate":
        return None
    return getattr(generation, "llm", None)


def vllm_server_post(trainer: Any) -> Callable[[str], Any] | None:
    """``post(path)``: a POST to the trainer's vLLM server through TRL's client, returning the
    ``requests`` response; None without a server or off the main process.

    TRL 1.16 connects to the server from the main process only (``vllm_generation.py`` 300-308:
    ``self.vllm_client``), whose ``base_url`` and ``requests.Session`` (``vllm_client.py`` 218,
    244-248) are reused, with their proxy bypass and retries.
    """
    generation = _generation(trainer)
    if generation is None or getattr(generation, "mode", None) != "server":
        return None
    if not generation.accelerator.is_main_process:
        return None
    client = generation.vllm_client

    def post(path: str) -> Any:
        return client.session.post(f"{client.base_url}{path}")

    return post


#: vLLM's endpoint that drops the server's vision-encoder cache (vLLM 0.31
#: ``entrypoints/serve/dev/cache/api_router.py`` 57-64; in the dev router, which ``trl vllm-serve``
#: enables with ``VLLM_SERVER_DEV_MODE=1``, ``trl/scripts/vllm_serve.py`` 280-283).
RESET_ENCODER_CACHE = "/reset_encoder_cache"


def reset_server_encoder_cache(trainer: Any) -> Callable[[], Any] | None:
    """``reset()``: a POST of :data:`RESET_ENCODER_CACHE` to the trainer's vLLM server (the
    ``requests`` response; its status is the caller's to judge), through :func:`vllm_server_post`;
    None without a server or off the main process."""
    post = vllm_server_post(trainer)
    if post is None:
        return None
    return lambda: post(RESET_ENCODER_CACHE)


def after_server_weight_sync(trainer: Any, callback: Callable[[], None]) -> bool:
    """Call ``callback()`` after every weight sync to a vLLM server (``vllm_mode: server``) on the
    main process; False elsewhere (no server, or not the main process, which posts nothing).

    As :func:`after_vllm_weight_sync`: the instance's ``sync_weights`` (``vllm_generation.py:481-517``,
    whose server branch ends with ``vllm_client.reset_prefix_cache()``, 513-515) is wrapped.
    """
    if vllm_server_post(trainer) is None:
        return False
    generation = _generation(trainer)
    sync = generation.sync_weights

    def sync_then(*args: Any, **kwargs: Any) -> Any:
        result = sync(*args, **kwargs)
        callback()
        return result

    generation.sync_weights = sync_then
    return True


def vllm_weight_stream(trainer: Any) -> Callable[[], NamedTensors] | None:
    """The function TRL's weight sync reads ``(vLLM name, tensor)`` pairs from; None without vLLM.

    ``VLLMGeneration._iter_named_params`` (``vllm_generation.py:435-479``, private), called by
    ``sync_weights`` in both modes (server: ``:503-506``, metadata first, then the stream; colocate:
    ``:510-511``). Every rank iterates it (gathers are collectives).
    """
    generation = _generation(trainer)
    return None if generation is None else generation._iter_named_params


def set_vllm_weight_stream(trainer: Any, stream: Callable[[], NamedTensors]) -> None:
    """Make TRL's weight sync read ``stream()`` instead (see :func:`vllm_weight_stream`).

    ``sync_weights`` looks the stream up on the instance at every sync, so this holds for every
    later sync. Compose with the current one: ``set_vllm_weight_stream(t, lambda: f(current()))``.
    """
    generation = _generation(trainer)
    if generation is None:
        raise ValueError("set_vllm_weight_stream: this trainer has no vLLM generation (train.grpo.use_vllm false)")
    generation._iter_named_params = stream


def vllm_sync_sharding(trainer: Any) -> str | None:
    """``"FSDP"`` or ``"ZeRO-3"`` when TRL's sync gathers sharded parameters, else None.

    TRL's ``DistributedBackend`` of the generation (``generation._dist``, ``trl/distributed.py:41-56``),
    the one that decides how ``_iter_named_params`` gathers.
    """
    generation = _generation(trainer)
    if generation is None:
        return None
    dist = generation._dist
    if dist.is_fsdp:
        return "FSDP"
    return "ZeRO-3" if dist.is_zero3 else None
