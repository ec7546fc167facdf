"""olmpipe.job.health: a run whose reward fails on every completion, or whose loss or weights
become non-finite, stops naming why, with its own exit code and without a final model."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import pytest
import torch
from trainkit import LowIdReward, make_page_index

from olmpipe.config import load_config
from olmpipe.job.health import (
    EXIT_NON_FINITE,
    EXIT_REWARD_ERRORS,
    NonFiniteStop,
    RewardErrors,
    RewardErrorsStop,
    StopOnRewardErrors,
)
from olmpipe.records.metrics import read_metrics
from olmpipe.rewards import BenchReward, EosReward
from olmpipe.train.run import train_seed

SMALL = {"max_steps": 5, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
         "max_completion_length": 8, "save_steps": 1, "logging_steps": 1}


def _failing(name: str, only: set[int] | None = None):
    """A reward called ``name`` that reports every completion (or those in ``only``) as failed."""

    def reward(completions=None, log_error=None, **kwargs):
        for i in range(len(completions)):
            if only is None or i in only:
                log_error(i, f"cannot score {i}")
        return [0.0] * len(completions)

    reward.__name__ = name
    return reward


def test_the_streak_counts_steps_where_every_completion_failed():
    """Only steps where *every* completion failed count, consecutively; steps without reward calls
    neither count nor break a streak; a step where some completions scored breaks it; a reward
    with weight 0 (not in the watched names) is not watched."""
    ledger = RewardErrors()
    bad, half, unwatched = ledger.wrap([_failing("bad_reward"), _failing("half_reward", {0}),
                                        _failing("unwatched_reward")])
    guard = StopOnRewardErrors(ledger, ["bad_reward", "half_reward"], steps=2)
    control = SimpleNamespace(should_training_stop=False)
    assert bad.__name__ == "bad_reward"

    def step(n, *funcs):
        for f in funcs:
            f(completions=["a", "b"])
        guard.on_step_end(None, SimpleNamespace(global_step=n), control)

    step(1, bad, half, unwatched)
    step(2)  # no reward computed at this step (a generation batch serving two steps)
    step(3, half, unwatched)  # bad_reward scored nothing here either: its streak stays
    assert not control.should_training_stop and guard.streak == {"bad_reward": 1, "half_reward": 0}
    step(4, bad, half, unwatched)
    assert control.should_training_stop and isinstance(guard.stop, RewardErrorsStop)
    assert str(guard.stop).startswith("reward bad_reward failed on every completion of 2 consecutive steps "
                                      "(steps 1-4); its first error: cannot score 0.")
    never = StopOnRewardErrors(ledger, ["bad_reward"], steps=0)
    for n in range(5):
        bad(completions=["a"])
        never.on_step_end(None, SimpleNamespace(global_step=n), SimpleNamespace(should_training_stop=False))
    assert never.stop is None and never.streak["bad_reward"] == 5  # 0: never stops


@pytest.mark.slow
def test_a_reward_that_fails_on_every_completion_stops_the_run(tmp_path, tiny_model_dir):
    """Issue 20 item 7: with every scoring worker out of memory (``memory_mb: 10``, now refused by
    the schema) bench/errors was 8/8 each step, the reward 0, and the run exited 0 with a final
    model. Now the run stops after ``reward_error_steps`` such steps, naming the reward and its first
    error, with no final model; the EOS reward, which works, does not count."""
    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": SMALL, "reward_error_steps": 2}})
    run = tmp_path / "seed0"
    with BenchReward(processes=1, memory_mb=10) as bench:
        eos = EosReward(eos_token_ids=[0])
        with pytest.raises(RewardErrorsStop) as stopped:
            train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                       reward_funcs=[bench, eos], reward_weights=[1.0, 1.0])
    message = str(stopped.value)
    assert message.startswith("reward bench_reward failed on every completion of 2 consecutive steps (steps 1-2); "
                              "its first error: "), message
    assert "worker crashed" in message or "memory" in message, message
    assert stopped.value.exit_code == EXIT_REWARD_ERRORS == 3
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2] and all(r["bench/errors"] == 4 for r in rows)
    assert not (run / "model").exists()


def _nan_in_training_forward(monkeypatch):
    """Make the model's token embeddings NaN in the training forward pass only (generation runs
    without gradients and stays finite): what an overflow in the loss's forward looks like."""
    import olmpipe.models.load

    load = olmpipe.models.load.load_model

    def load_with_hook(*args, **kwargs):
        model = load(*args, **kwargs)
        model.get_input_embeddings().register_forward_hook(
            lambda module, inputs, out: out * math.nan if torch.is_grad_enabled() else out)
        return model

    monkeypatch.setattr(olmpipe.models.load, "load_model", load_with_hook)


@pytest.mark.slow
@pytest.mark.parametrize(("grpo", "nan_forward", "message"), [
    ({"learning_rate": 1e39}, False, (r"step 1: weight \S+ is not finite after the optimizer step "
                                      r"\(train.grpo.learning_rate 1e\+39\)")),
    ({}, True, r"step 1: the loss is nan \(not finite\)"),
], ids=["learning_rate_1e39", "nan_loss"])
def test_a_non_finite_loss_or_weight_stops_at_that_step(tmp_path, tiny_model_dir, monkeypatch, grpo, nan_forward,
                                                        message):
    """Issue 20 item 8: ``learning_rate: .inf`` trained and wrote a model of 56 non-finite tensors
    (the config check now refuses it). A learning rate finite in the config but infinite in float32
    (1e39), or a NaN loss, stops at step 1 naming the tensor or the loss, before a checkpoint or a
    final model is written (TRL's own NaN guards zero NaN advantages; the loss can still overflow)."""
    if nan_forward:
        _nan_in_training_forward(monkeypatch)
    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": {**SMALL, **grpo}}})
    run = tmp_path / "seed0"
    with pytest.raises(NonFiniteStop, match=message) as stopped:
        train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                   reward_funcs=[LowIdReward()])
    assert stopped.value.exit_code == EXIT_NON_FINITE == 4
    assert not list(run.glob("checkpoint-*")) and not (run / "model").exists()


class _Engine:
    """What StopOnNonFinite reads of a DeepSpeed engine after the step it ran inside backward."""

    def __init__(self, norm, applied=True):
        self.norm, self.applied = norm, applied

    def get_global_grad_norm(self):
        return self.norm

    def was_step_applied(self):
        return self.applied


def _deepspeed_trainer(engine):
    return SimpleNamespace(is_deepspeed_enabled=True, deepspeed=engine, model_wrapped=engine,
                           accelerator=SimpleNamespace(num_processes=1), take_nonfinite_loss=lambda: None)


@pytest.mark.parametrize(("norm", "applied", "message"), [
    (float("inf"), False, "the gradient norm is inf (not finite), and DeepSpeed skipped this update"),
    (torch.tensor(float("nan")), False, "the gradient norm is nan"),
    (None, False, "DeepSpeed skipped this update: its gradients were not finite"),
    (-1.0, True, "the gradient norm is -1.0"),  # DeepSpeed's sentinel of an invalid group norm
])
def test_under_deepspeed_the_gradient_check_reads_the_engines_norm(norm, applied, message):
    """Issue 31, item 17: DeepSpeed's step ran inside backward (accelerate utils/deepspeed.py 264-281),
    so the module's gradients are None (ZeRO-2) or empty (ZeRO-3) when on_pre_optimizer_step runs,
    and DeepSpeed silently skipped the step of a non-finite norm: the check reads the engine."""
    from olmpipe.job.health import StopOnNonFinite

    model = torch.nn.Linear(3, 1)  # grads None: what the callback sees under ZeRO-2
    callback = StopOnNonFinite(_deepspeed_trainer(_Engine(norm, applied)))
    state, args = SimpleNamespace(global_step=4), SimpleNamespace(learning_rate=1e-5)
    with pytest.raises(NonFiniteStop, match=f"step 5: {message}".replace("(", r"\(").replace(")", r"\)")):
        callback.on_pre_optimizer_step(args, state, SimpleNamespace(), model=model)
    healthy = StopOnNonFinite(_deepspeed_trainer(_Engine(0.25)))
    healthy.on_pre_optimizer_step(args, state, SimpleNamespace(), model=model)
    healthy.on_optimizer_step(args, state, SimpleNamespace(), model=model)


def test_the_trainer_command_exits_with_the_stop_code(tmp_path, monkeypatch, capsys):
    """``python -m olmpipe.train`` turns each stop into its exit code and one line naming why."""
    import olmpipe.job.run
    from olmpipe.train.cli import main

    def stopped(*args, **kwargs):
        raise RewardErrorsStop("reward bench_reward failed on every completion of 3 consecutive steps")

    monkeypatch.setattr(olmpipe.job.run, "run_job", stopped)
    argv = ["--seed", "0", "--model", "m", "--pages", "p", "--tests-dir", "t", "--run-dir", str(tmp_path),
            "--config-json", json.dumps({"train": {"wandb": {"mode": "disabled"}}})]
    assert main(argv) == EXIT_REWARD_ERRORS
    assert "olmpipe train: reward bench_reward failed on every completion" in capsys.readouterr().err
