"""GRPO training for real on the tiny model: a full run with the configured rewards, a learning
test (the loop optimizes, not only runs), resume after a kill and SIGTERM preemption."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from support.gate import StepGate
from trainkit import LowIdReward, make_page_index

from olmpipe.config import load_config
from olmpipe.job.callbacks import EXIT_PREEMPTED, RUN_STATE_FILE
from olmpipe.records.metrics import read_metrics
from olmpipe.train.run import train_seed

pytestmark = pytest.mark.slow

SMALL = {"max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 4,
         "gradient_accumulation_steps": 2, "max_completion_length": 12, "save_steps": 2, "logging_steps": 1}




def test_full_run_with_configured_rewards(tmp_path, tiny_model_dir):
    """The embedded default's rewards (bench + front matter + EOS) through TRL: files, metrics, table."""
    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "completions_every": 2, "grpo": SMALL},
                                 "rewards": {"bench": {"processes": 1}}})
    run = tmp_path / "seed3"
    assert train_seed(cfg, seed=3, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run) == 0
    assert (run / "model" / "config.json").exists() and (run / "model" / "olmpipe_train.json").exists()
    assert (run / "model" / "preprocessor_config.json").exists() or (run / "model" / "processor_config.json").exists()
    # the declared metrics output of train_seed: a copy of the run's live file, made with the model
    assert (run / "model.metrics.jsonl").read_bytes() == (run / "metrics.jsonl").read_bytes()
    assert not (run / "model" / "metrics.jsonl").exists()  # the model folder holds the model only
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3, 4]
    for key in ("rewards/bench_reward/mean", "rewards/front_matter_reward/mean", "rewards/eos_reward/mean",
                "frac_reward_zero_std", "bench/timeouts", "bench/errors", "bench/pass_rate"):
        assert key in rows[-1], key
    assert any(k.startswith("bench/pass_rate/type/") for k in rows[-1])
    assert any(k.startswith("bench/pass_rate/jsonl/") for k in rows[-1])
    assert sorted(p.name for p in (run / "completions").iterdir()) == ["step000002.jsonl", "step000004.jsonl"]
    table = [json.loads(x) for x in (run / "completions" / "step000004.jsonl").read_text().splitlines()]
    assert len(table) == 8 and all(r["verdicts"] and r["page"] for r in table)
    assert set(table[0]["rewards"]) == {"bench_reward", "front_matter_reward", "eos_reward"}
    assert json.loads((run / "dataset.json").read_text())["skipped_no_tests"] == 1
    state = json.loads((run / "checkpoint-4" / "trainer_state.json").read_text())
    assert state["global_step"] == 4


def test_a_moe_run_writes_its_final_model_in_the_published_expert_layout(tmp_path, tiny_models):
    """Qwen3-VL-MoE trains like the others; its final model stores the experts as published checkpoints
    do (what vLLM loads, olmpipe.models.architectures), and reads back as the trained weights."""
    import torch
    from safetensors import safe_open

    from olmpipe.models.architectures import publish_expert_layout
    from olmpipe.models.load import load_model_and_processor

    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"},
                                           "grpo": {**SMALL, "max_steps": 1, "save_steps": 1}},
                                 "rewards": {"bench": {"processes": 0}}})
    run = tmp_path / "moe"
    assert train_seed(cfg, seed=0, model_path=tiny_models("qwen3_vl_moe"), pages=pages, tests_dir=tests,
                      run_dir=run, reward_funcs=[LowIdReward()]) == 0
    final, checkpoint = run / "model", run / "checkpoint-1"
    assert publish_expert_layout(final) == 0  # already in the published layout
    with safe_open(str(final / "model.safetensors"), framework="pt") as fh:
        shapes = {n: tuple(fh.get_slice(n).get_shape()) for n in fh.keys() if ".experts." in n}  # noqa: SIM118
    assert shapes and all(s in ((4, 64, 96), (4, 48, 64)) for s in shapes.values())  # [E, H, 2I], [E, I, H]
    a, _ = load_model_and_processor(final)
    b, _ = load_model_and_processor(checkpoint)  # the trainer's own save of the same step
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values(), strict=True))


#: LoRA on the tiny model: an adapter on every language-model projection plus lm_head trained in
#: full (modules_to_save). Adapters inside the model alone cannot move this reward: the tiny random
#: model's logits are nearly uniform and a hidden state passes the final RMSNorm into a small random
#: lm_head, so the best adapter shifts a token's logit by ~1 out of ~1000 tokens.
LORA_LEARNS = {"enabled": True, "r": 8, "alpha": 16, "modules_to_save": ["lm_head"]}


@pytest.mark.parametrize(("peft", "steps"), [({}, 8), (LORA_LEARNS, 12)], ids=["full", "lora"])
def test_learning_raises_a_reachable_reward(tmp_path, tiny_model_dir, peft, steps):
    """Over several seeds the mean reward of the last steps is clearly above that of the first steps
    (full training, and a LoRA adapter, which needs a few more steps)."""
    pages, tests = make_page_index(tmp_path)
    grpo = {"max_steps": steps, "learning_rate": 0.05, "lr_scheduler_type": "constant", "num_generations": 4,
            "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "max_completion_length": 8,
            "save_steps": 1000, "logging_steps": 1}
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": grpo, "peft": peft}})
    gains = []
    for seed in (0, 1, 2):
        run = tmp_path / f"seed{seed}"
        assert train_seed(cfg, seed=seed, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                          reward_funcs=[LowIdReward(256)]) == 0
        assert (run / "adapter").is_dir() == bool(peft)
        rewards = [r["reward"] for r in read_metrics(run / "metrics.jsonl")]
        first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
        gains.append(last - first)
        assert last > first + 0.15, f"seed {seed}: rewards {rewards}"
    assert sum(gains) / len(gains) > 0.25


def _command(tmp_path: Path, tiny_model_dir: Path, run: Path, wandb_mode: str) -> list[str]:
    pages, tests = make_page_index(tmp_path)
    cfg = {"train": {"wandb": {"mode": wandb_mode}, "grpo": {**SMALL, "max_steps": 6, "save_total_limit": None}},
           "rewards": {"bench": {"processes": 0}}}
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump(cfg))
    return [sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(tiny_model_dir),
            "--pages", str(pages), "--tests-dir", str(tests), "--run-dir", str(run), "--config", str(config)]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, f"training ended early with {proc.returncode}"
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


def _env() -> dict[str, str]:
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}


def test_resume_after_kill_continues_steps_metrics_and_wandb_run(tmp_path, tiny_model_dir):
    """Kill -9 after the step-2 checkpoint; `resume: auto` finishes with the same step count, a
    continued metrics file (each step once) and the same wandb run."""
    run = tmp_path / "seed0"
    cmd = _command(tmp_path, tiny_model_dir, run, "offline")
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, env=_env(), stdout=log, stderr=subprocess.STDOUT)
        _wait_for(run / "checkpoint-2" / RUN_STATE_FILE, proc)
        proc.kill()
        proc.wait()
    first_id = json.loads((run / "checkpoint-2" / RUN_STATE_FILE).read_text())["wandb_run_id"]
    assert not (run / "model").exists()
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "resuming from" in done.stderr
    state = json.loads((run / "checkpoint-6" / "trainer_state.json").read_text())
    assert state["global_step"] == 6
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
    assert json.loads((run / "checkpoint-6" / RUN_STATE_FILE).read_text())["wandb_run_id"] == first_id
    assert json.loads((run / "model" / "olmpipe_train.json").read_text())["steps"] == 6


def test_sigterm_checkpoints_and_exits_with_preempted_code(tmp_path, tiny_model_dir):
    """SIGTERM (SLURM preemption) saves a checkpoint after the current step and exits with 75."""
    run = tmp_path / "seed0"
    cmd = _command(tmp_path, tiny_model_dir, run, "disabled")
    gate = StepGate(tmp_path / "gate")  # the trainer waits after step 1 until released
    with open(tmp_path / "first.log", "w") as log:
        proc = subprocess.Popen(cmd, env={**_env(), **gate.env()}, stdout=log, stderr=subprocess.STDOUT)
        gate.wait_reached(run.name, proc)
        proc.send_signal(signal.SIGTERM)
        gate.wait_signalled(run.name, proc)
        gate.release(run.name)
        proc.wait(timeout=300)
    assert proc.returncode == EXIT_PREEMPTED, (tmp_path / "first.log").read_text()[-3000:]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-1"]  # the step it stopped after
    assert not (run / "model").exists()
    assert max(r["step"] for r in read_metrics(run / "metrics.jsonl")) == 1
    done = subprocess.run(cmd, env=_env(), capture_output=True, text=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3, 4, 5, 6]
