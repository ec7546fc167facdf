"""Stop a run that can no longer learn, naming why: a reward that fails on every completion, or a
non-finite loss, gradient or weight.

**Rewards that only fail.** A reward that cannot score anything -- every scoring worker out of
memory (``rewards.bench.memory_mb`` too small), a test file gone -- returns 0 or None for every
completion: the run goes on, learns nothing from it, and writes a final model as if all were well.
olmpipe's rewards report each completion they could not score through an optional ``log_error``
keyword (``log_error(index, reason)``; TRL itself never passes it, so they stay plain TRL reward
functions). :class:`RewardErrors` wraps each reward the trainer gets so that the keyword is passed
and the failures of each step are counted; :class:`StopOnRewardErrors` (a ``TrainerCallback``) ends
training once a weighted reward failed on every completion of ``train.reward_error_steps``
consecutive steps, and :func:`olmpipe.train.run.train_seed` then raises :class:`RewardErrorsStop`
naming the reward and its first error (exit code :data:`EXIT_REWARD_ERRORS`, no final model).

**Non-finite numbers.** ``learning_rate: 1e39`` (finite in the config, infinite in float32) or a
reward returning ``inf`` makes the weights or the loss non-finite; transformers then trains on and
saves NaN weights (its ``logging_nan_inf_filter`` even hides the loss from the logs).
:class:`StopOnNonFinite` checks, at every optimizer step, the loss of the step's micro-batches and
the gradients before the update (``on_pre_optimizer_step``) and the weights after it
(``on_optimizer_step``, before any checkpoint of that step is written), and raises
:class:`NonFiniteStop` naming the step and the first bad tensor (exit code :data:`EXIT_NON_FINITE`).
The checks cost one float32 sum per trained tensor and one synchronisation per step.

Under DeepSpeed the update happens inside ``backward``: accelerate's ``DeepSpeedEngineWrapper.backward``
calls ``engine.step()`` at the accumulation boundary (accelerate 1.15 ``utils/deepspeed.py`` 264-281),
before transformers calls ``on_pre_optimizer_step`` (``trainer.py`` 1942), so the module's gradients
are gone by then (None under ZeRO-2, empty partitions under ZeRO-3); and DeepSpeed 0.19 *skips* a
step whose gradient norm is not finite, silently (bf16 ``check_grad_overflow`` defaults to True,
``runtime/precision_config.py`` 56; ZeRO-2 ``zero/stage_1_and_2.py`` 3028-3067, ZeRO-3
``zero/stage3.py`` 2826-2830 and 2883-2894: the norm becomes ``inf``, the gradients are dropped).
There the gradient check reads what the engine computed instead: its global gradient norm
(``engine.get_global_grad_norm()``, ``runtime/engine.py`` 1357-1368; DeepSpeed's own test of it,
``runtime/utils.py`` 231-234) and whether the step was applied (``engine.was_step_applied()``,
2813-2821). The weight check reads, under ZeRO-3, the float32 master partition each rank owns
(``deepspeed.utils.safe_get_local_fp32_param``, ``utils/tensor_fragment.py`` 289-299) where the
module holds none; ZeRO-2's module keeps whole bf16 weights, checked as they are.

In several processes every decision is gathered over the ranks, so all of them stop at the same
step (a rank stopping alone would leave the others waiting in a collective).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from transformers import TrainerCallback

logger = logging.getLogger(__name__)

#: Exit code of a run stopped because a reward failed on every completion (python -m olmpipe.train).
EXIT_REWARD_ERRORS = 3
#: Exit code of a run stopped on a non-finite loss, gradient or weight.
EXIT_NON_FINITE = 4


class TrainingStopped(RuntimeError):
    """Training was stopped because it cannot learn; ``exit_code`` is what the trainer exits with."""

    exit_code = 1


class RewardErrorsStop(TrainingStopped):
    """A weighted reward failed on every completion for ``train.reward_error_steps`` steps in a row."""

    exit_code = EXIT_REWARD_ERRORS


class NonFiniteStop(TrainingStopped):
    """The loss, a gradient or a weight became NaN or infinite."""

    exit_code = EXIT_NON_FINITE


class _Tracked:
    """A reward function as the trainer calls it: passes ``log_error`` and records what it reports."""

    def __init__(self, func: Callable[..., list[float | None]], ledger: RewardErrors) -> None:
        self.func = func
        self.ledger = ledger
        self.__name__ = getattr(func, "__name__", type(func).__name__)

    def __call__(self, *args: Any, **kwargs: Any) -> list[float | None]:
        errors: dict[int, str] = {}

        def log_error(index: int, reason: str) -> None:
            errors.setdefault(int(index), str(reason))

        out = self.func(*args, log_error=log_error, **kwargs)
        self.ledger.record(self.__name__, len(out), errors)
        return out

    def __repr__(self) -> str:
        return f"tracked({self.func!r})"


class RewardErrors:
    """Per reward: completions scored and completions it could not score since the last step."""

    def __init__(self) -> None:
        self._counts: dict[str, list[Any]] = {}

    def wrap(self, funcs: Iterable[Any]) -> list[Any]:
        """``funcs`` with every plain callable wrapped (reward models, given as modules or names, stay)."""
        return [f if isinstance(f, str) or _is_module(f) else _Tracked(f, self) for f in funcs]

    def record(self, name: str, completions: int, errors: dict[int, str]) -> None:
        entry = self._counts.setdefault(name, [0, 0, None])
        entry[0] += completions
        entry[1] += len(errors)
        if errors and entry[2] is None:
            entry[2] = errors[min(errors)]

    def take(self) -> dict[str, tuple[int, int, str | None]]:
        """The counts since the last call, ``{name: (completions, failed, first reason)}``; resets them."""
        out = {name: (int(c), int(e), first) for name, (c, e, first) in self._counts.items()}
        self._counts = {}
        return out


def _is_module(obj: Any) -> bool:
    import torch

    return isinstance(obj, torch.nn.Module)


def _gather_sum(trainer: Any, values: Sequence[float]) -> list[float]:
    """``values`` summed over the training processes (as they are in one process)."""
    accelerator = getattr(trainer, "accelerator", None)
    if accelerator is None or accelerator.num_processes == 1 or not values:
        return list(values)
    import torch

    local = torch.tensor(list(values), dtype=torch.float64, device=accelerator.device)
    return accelerator.gather(local).reshape(accelerator.num_processes, -1).sum(dim=0).tolist()


class StopOnRewardErrors(TrainerCallback):
    """Ends training after ``steps`` consecutive steps in which a weighted reward failed on every
    completion (``steps`` 0: never); :attr:`stop` then holds the :class:`RewardErrorsStop` to raise.

    A step in which no reward was computed (a generation batch serves several steps) neither counts
    nor breaks a streak.
    """

    def __init__(self, ledger: RewardErrors, names: Sequence[str], steps: int, trainer: Any = None) -> None:
        self.ledger = ledger
        self.names = sorted(set(names))
        self.steps = int(steps)
        self.trainer = trainer
        self.streak = dict.fromkeys(self.names, 0)
        self.first_error: dict[str, str | None] = dict.fromkeys(self.names)
        self.first_step: dict[str, int] = {}
        self.stop: RewardErrorsStop | None = None

    def on_step_end(self, args, state, control, **kwargs):
        counts = self.ledger.take()
        local = [float(v) for name in self.names for v in counts.get(name, (0, 0, None))[:2]]
        summed = _gather_sum(self.trainer, local)
        for i, name in enumerate(self.names):
            completions, failed = summed[2 * i], summed[2 * i + 1]
            if completions == 0:
                continue
            if failed < completions:
                self.streak[name], self.first_error[name] = 0, None
                continue
            if self.streak[name] == 0:
                self.first_step[name] = state.global_step
                self.first_error[name] = counts.get(name, (0, 0, None))[2]
            self.streak[name] += 1
            if self.steps and self.streak[name] >= self.steps and self.stop is None:
                self.stop = RewardErrorsStop(
                    f"reward {name} failed on every completion of {self.streak[name]} consecutive steps "
                    f"(steps {self.first_step[name]}-{state.global_step}); its first error: "
                    f"{self.first_error[name] or '(reported on another process)'}. Training stopped without a "
                    f"final model (train.reward_error_steps: {self.steps}); fix the cause and run again to "
                    f"continue from the last checkpoint.")
                logger.error("%s", self.stop)
                control.should_training_stop = True
        return control


def _local(tensor: Any) -> Any:
    """The part of ``tensor`` this process holds (an FSDP2 ``DTensor``'s shard), detached."""
    return (tensor.to_local() if hasattr(tensor, "to_local") else tensor).detach()


def _has_nonfinite(tensor: Any) -> bool:
    """Whether ``tensor`` holds a NaN or infinity, checked in slices (no full-size temporary)."""
    import torch

    return any(not bool(torch.isfinite(part).all()) for part in tensor.reshape(-1).split(1 << 24))


def _first_nonfinite(named: Iterable[tuple[str, Any]]) -> str | None:
    """The name of the first tensor holding a NaN or infinity (None: all finite).

    One float32 sum per tensor and one synchronisation; only a tensor whose sum is not finite (a
    NaN/inf inside, or finite values so large their sum overflows) is then checked element-wise.
    """
    import torch

    items = [(name, _local(t)) for name, t in named if t is not None]
    items = [(name, t) for name, t in items if t.numel()]
    if not items:
        return None
    finite = torch.isfinite(torch.stack([t.sum(dtype=torch.float32) for _, t in items]))
    if bool(finite.all()):
        return None
    for index in (~finite).nonzero().flatten().tolist():
        name, tensor = items[index]
        if _has_nonfinite(tensor):
            return name
    return None


def _deepspeed_gradient_problem(engine: Any) -> str | None:
    """What was wrong with the gradients of the step DeepSpeed just ran (None: nothing); see the
    module docstring."""
    import math

    norm = engine.get_global_grad_norm()
    if norm is not None:
        value = float(norm)
        if not math.isfinite(value) or value < 0:
            return (f"the gradient norm is {value} (not finite), and DeepSpeed skipped this update "
                    "(its overflow check drops such gradients)")
    if not engine.was_step_applied():
        return "DeepSpeed skipped this update: its gradients were not finite (overflow)"
    return None


def _deepspeed_local_masters(trained: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """``trained`` with each ZeRO-3 parameter replaced by the float32 master partition this rank owns
    (the module's own partition is empty outside the forward pass)."""
    if not any(hasattr(p, "ds_id") for _, p in trained):
        return trained
    from deepspeed.utils import safe_get_local_fp32_param

    return [(n, safe_get_local_fp32_param(p) if hasattr(p, "ds_id") else p) for n, p in trained]


class StopOnNonFinite(TrainerCallback):
    """Raises :class:`NonFiniteStop` at the first optimizer step whose loss or gradients (before the
    update) or weights (after it) hold a NaN or infinity; ``trainer`` is an
    :class:`olmpipe.train.trainer.ResumableGRPOTrainer` (it records the step's losses)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    def _any_rank(self, bad: bool) -> bool:
        return _gather_sum(self.trainer, [float(bad)])[0] > 0 if self.trainer is not None else bad

    def _raise(self, what: str, state: Any) -> None:
        step = state.global_step + 1  # transformers counts the step after on_optimizer_step
        raise NonFiniteStop(
            f"step {step}: {what}. Training stopped before any checkpoint of this step was written, "
            "without a final model; lower train.grpo.learning_rate (or check the rewards: a reward of "
            "inf or NaN makes the advantages NaN) and run again to continue from the last checkpoint.")

    def _engine(self) -> Any:
        """The DeepSpeed engine of a DeepSpeed run (None otherwise)."""
        trainer = self.trainer
        if trainer is None or not getattr(trainer, "is_deepspeed_enabled", False):
            return None
        return getattr(trainer, "deepspeed", None) or getattr(trainer, "model_wrapped", None)

    def on_pre_optimizer_step(self, args, state, control, model=None, **kwargs):
        loss = self.trainer.take_nonfinite_loss() if self.trainer is not None else None
        grad = None
        engine = self._engine()
        if engine is not None:
            grad = _deepspeed_gradient_problem(engine)
        elif model is not None:
            name = _first_nonfinite([(n, p.grad) for n, p in model.named_parameters() if p.requires_grad])
            grad = None if name is None else f"the gradient of {name} is not finite"
        local = loss is not None or grad is not None
        if self._any_rank(local):
            if loss is not None:
                self._raise(f"the loss is {loss} (not finite)", state)
            if grad is not None:
                self._raise(grad, state)
            self._raise("another process saw a non-finite loss or gradient", state)
        return control

    def on_optimizer_step(self, args, state, control, model=None, **kwargs):
        trained = [(n, p) for n, p in model.named_parameters() if p.requires_grad] if model is not None else []
        if self._engine() is not None:
            trained = _deepspeed_local_masters(trained)
        bad = _first_nonfinite(trained)  # frozen weights (a LoRA base) cannot have changed
        if self._any_rank(bad is not None):
            lr = args.learning_rate
            self._raise(f"weight {bad or '(on another process)'} is not finite after the optimizer step "
                        f"(train.grpo.learning_rate {lr:g})", state)
        return control
