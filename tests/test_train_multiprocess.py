"""Training with several processes on CPUs (gloo), started exactly as the train rule starts it.

The command comes from :func:`olmpipe.launch.commands.launch_command` (accelerate with
``workflow/accelerate/ddp.yaml``); accelerate's multi-GPU launcher runs torchrun, and on a machine
without CUDA the ranks join a gloo group. ``fsdp`` is not run here: accelerate applies FSDP only to
GPU process groups (accelerate/state.py, ``distributed_type`` stays ``MULTI_CPU``), so a CPU run of
``fsdp.yaml`` would silently be DDP and prove nothing. ``zero2`` runs when the ``deepspeed`` extra is
installed (DeepSpeed's CPU accelerator; the first run compiles its shared-memory op, ~2 minutes).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.deepspeed import NEEDS_DEEPSPEED, needs_deepspeed
from trainkit import make_page_index

from olmpipe.launch.commands import launch_command
from olmpipe.procs import group_members
from olmpipe.records.metrics import read_metrics

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
JOB = {"train": {"wandb": {"mode": "disabled"},
                 "grpo": {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 2,
                          "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 2,
                          "logging_steps": 1}},
       "rewards": {"bench": {"processes": 0}}}



@pytest.mark.parametrize("strategy", [
    "ddp",
    pytest.param("zero2", marks=NEEDS_DEEPSPEED),
])
def test_two_processes_train_and_save_a_plain_model(strategy: str, tmp_path: Path, tiny_model_dir: Path) -> None:
    """Two ranks train 2 steps; each rank's RNG state (and ZeRO optimizer shard) is checkpointed; the
    final model is a plain Hugging Face folder holding the trained weights."""
    pages, tests = make_page_index(tmp_path)
    run = tmp_path / "seed0"
    cmd = launch_command("olmpipe.train", ["--seed", "0", "--model", str(tiny_model_dir), "--pages", str(pages),
                                           "--tests-dir", str(tests), "--run-dir", str(run), "--threads", "1",
                                           "--config-json", json.dumps(JOB)],
                         gpus=2, strategy=strategy, main_process_port=20000 + os.getpid() % 10000)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run(["timeout", "-k", "10", "600", *cmd], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    rows = read_metrics(run / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2]
    checkpoint = run / "checkpoint-2"
    assert sorted(p.name for p in checkpoint.glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    if strategy == "zero2":
        assert len(list(checkpoint.glob("global_step2/zero_pp_rank_*_optim_states.pt"))) == 2

    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(run / "model")
    base, _ = load_model_and_processor(tiny_model_dir)
    changed = [n for (n, p), (_, q) in zip(model.named_parameters(), base.named_parameters(), strict=True)
               if not p.detach().equal(q.detach())]
    # the saved model is the trained one: it differs from the base exactly when a step had a gradient
    # (a step whose groups all got equal rewards has zero advantages and leaves the weights alone)
    stepped = any(r["grad_norm"] > 0 for r in rows)
    assert bool(changed) == stepped, [(r["grad_norm"], r["reward_std"]) for r in rows]


def test_two_process_resume_equals_the_uninterrupted_run(tmp_path: Path, tiny_model_dir: Path) -> None:
    """DDP on 2 ranks: a run resumed from checkpoint-2 ends with bitwise the weights of an
    uninterrupted run at checkpoint-3, checkpoint-4 and the final model."""
    import shutil

    import torch
    from safetensors.torch import load_file

    pages, tests = make_page_index(tmp_path)
    job = {"train": {"wandb": {"mode": "disabled"}, "grpo": {
        "max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
        "max_completion_length": 8, "save_steps": 1, "logging_steps": 1, "learning_rate": 0.01,
        "save_total_limit": None}}, "rewards": {"bench": {"processes": 0}}}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO / "tests")}

    def run(run_dir: Path, seed: int = 0) -> None:
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "workflow/accelerate/ddp.yaml"), "--num_processes", "2", "--main_process_port",
               str(21000 + os.getpid() % 9000), str(REPO / "tests" / "lowid_train.py"), str(tiny_model_dir),
               str(pages), str(tests), str(run_dir), json.dumps(job), str(seed)]
        proc = subprocess.run(["timeout", "-k", "10", "600", *cmd], cwd=REPO,
                              env={**env, "SCORE_LOG": str(run_dir) + ".scores"}, capture_output=True,
                              text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    full, resumed = tmp_path / "full", tmp_path / "resumed"
    run(full)
    # every completion scored once: per step 2 prompts x 4 generations = 8 completions over 2 ranks
    calls = [line.split() for line in Path(str(full) + ".scores").read_text().splitlines()]
    assert sum(int(n) for _, n in calls) == 4 * 8 and {rank for rank, _ in calls} == {"0", "1"}
    # metrics and completions written once (rank 0)
    assert [r["step"] for r in read_metrics(full / "metrics.jsonl")] == [1, 2, 3, 4]
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-2", resumed / "checkpoint-2")
    run(resumed)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    for name in ("checkpoint-3", "checkpoint-4", "model"):
        x = load_file(str(full / name / "model.safetensors"))
        y = load_file(str(resumed / name / "model.safetensors"))
        assert set(x) == set(y)
        assert all(torch.equal(x[k], y[k]) for k in x), f"{name} differs after a 2-process resume"
    assert any(not torch.equal(base[k], x[k]) for k in x if k in base), "training did not move the weights"
    # two such seeds soup into a model that loads with from_pretrained and is their float32 mean
    from olmpipe.models.load import load_model_and_processor
    from olmpipe.train.soup import soup

    other = tmp_path / "seed1"
    run(other, seed=1)
    souped = soup([full / "model", other / "model"], tmp_path / "soup")
    load_model_and_processor(souped)
    a, b = load_file(str(full / "model" / "model.safetensors")), load_file(str(other / "model" / "model.safetensors"))
    s = load_file(str(souped / "model.safetensors"))
    assert all(torch.allclose(s[k].float(), (a[k].float() + b[k].float()) / 2, atol=1e-7) for k in s)


def _alive(pid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat")
    return stat.exists() and stat.read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_sigterm_to_the_supervised_launcher_stops_every_rank_with_a_checkpoint(tmp_path: Path,
                                                                              tiny_model_dir: Path) -> None:
    """SIGTERM to the job's process (as SLURM sends it): both ranks stop after the same step, one
    complete checkpoint is on disk, the job exits 75 within the grace period and no rank is left;
    running it again resumes to the end."""
    import signal
    import time

    pages, tests = make_page_index(tmp_path)
    run = tmp_path / "seed0"
    job = {"train": {"wandb": {"mode": "disabled"}, "grpo": {**JOB["train"]["grpo"], "max_steps": 200,
                                                                "save_steps": 1000}},
           "rewards": {"bench": {"processes": 0}}}
    cmd = launch_command("olmpipe.train", ["--seed", "0", "--model", str(tiny_model_dir), "--pages", str(pages),
                                           "--tests-dir", str(tests), "--run-dir", str(run), "--threads", "1",
                                           "--config-json", json.dumps(job)],
                         gpus=2, strategy="ddp", main_process_port=22000 + os.getpid() % 9000, stop_grace_s=60)
    assert cmd[1:4] == ["-m", "olmpipe.launch", "--supervise"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    with open(tmp_path / "job.log", "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 400
        while not (run / "metrics.jsonl").exists():
            assert proc.poll() is None and time.monotonic() < deadline, (tmp_path / "job.log").read_text()[-4000:]
            time.sleep(0.2)
        group = group_members(proc.pid)
        sent = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        code = proc.wait(timeout=120)
    elapsed = time.monotonic() - sent
    text = (tmp_path / "job.log").read_text()
    assert code == 75, text[-4000:]
    assert elapsed < 60 + 10
    saved = sorted(run.glob("checkpoint-*"))
    assert len(saved) == 1 and (saved[0] / "trainer_state.json").exists(), text[-4000:]
    assert sorted(p.name for p in saved[0].glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    assert text.count("exiting with 75") >= 1
    assert not [pid for pid in group if _alive(pid)], "a rank outlived the job"


@pytest.mark.parametrize("strategy", [
    "ddp",
    pytest.param("zero2", marks=NEEDS_DEEPSPEED),
])
def test_the_process_group_uses_the_configured_timeout(strategy: str, tmp_path: Path) -> None:
    """train.grpo.ddp_timeout is the timeout of the group every collective uses, also after transformers
    builds its own state; a barrier a rank never reaches fails after it instead of after the default
    (gloo 30 min here, NCCL 10 min on GPUs) that a bare PartialState() gave."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "workflow" / "accelerate" / f"{strategy}.yaml"), "--num_processes", "2",
           "--main_process_port", str(24000 + os.getpid() % 9000), str(REPO / "tests" / "barrier_probe.py"), "5",
           str(tmp_path)]
    # a group with the default timeout would hold the barrier for 30 minutes: the harness stops it at 240 s
    proc = subprocess.run(["timeout", "-k", "10", "240", *cmd], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert (tmp_path / "done.json").exists(), proc.stdout[-3000:] + proc.stderr[-5000:]
    for rank in (0, 1):
        seen = json.loads((tmp_path / f"rank{rank}.json").read_text())
        assert seen == {"timeout_s": 5.0, "after_trainer_args_s": 5.0}, seen
    ended = json.loads((tmp_path / "done.json").read_text())["barrier"]
    assert ended != "passed" and "timed out" in ended.lower(), ended


def test_a_server_job_refuses_a_collective_timeout_shorter_than_the_server_start() -> None:
    from olmpipe.config import load_config
    from olmpipe.config.checks import collective_timeout_problem

    cfg = load_config(overrides={"train": {"grpo": {"use_vllm": True, "vllm_mode": "server", "ddp_timeout": 600},
                                           "vllm_server": {"startup_timeout_s": 900}}})
    problem = collective_timeout_problem(cfg["train"], cfg["train"]["grpo"], 7)
    assert "train.grpo.ddp_timeout (600 s)" in problem and "raise train.grpo.ddp_timeout to 1020" in problem
    assert collective_timeout_problem(cfg["train"], cfg["train"]["grpo"], 1) is None  # one rank waits for nobody
    ok = load_config(overrides={"train": {"grpo": {"use_vllm": True, "vllm_mode": "server"}}})
    assert collective_timeout_problem(ok["train"], ok["train"]["grpo"], 7) is None  # defaults 1800 vs 900


@needs_deepspeed
def test_a_zero2_checkpoint_written_on_sigterm_is_lighter_and_resumes_bitwise(tmp_path: Path,
                                                                                tiny_model_dir: Path) -> None:
    """Under DeepSpeed the checkpoint written on SIGTERM leaves out the Hugging Face weights copy (a
    resume reads DeepSpeed's module and float32 masters; olmpipe.plan.checkpoint), and a run resumed
    from it ends with bitwise the weights of the uninterrupted run."""
    import signal

    import torch
    from safetensors.torch import load_file
    from support.gate import StepGate

    pages, tests = make_page_index(tmp_path)
    job = {"train": {"wandb": {"mode": "disabled"}, "grpo": {
        "max_steps": 3, "num_generations": 4, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
        "max_completion_length": 8, "save_steps": 1, "logging_steps": 1, "learning_rate": 0.01,
        "save_total_limit": None}}, "rewards": {"bench": {"processes": 0}},
        "resources": {"train": {"cpus_per_task": 1}}}
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}

    def command(run: Path, port: int) -> list[str]:
        return launch_command("lowid_train", [str(tiny_model_dir), str(pages), str(tests), str(run), json.dumps(job)],
                              gpus=2, strategy="zero2", main_process_port=port, stop_grace_s=300)

    def finish(run: Path, port: int) -> None:
        proc = subprocess.run(["timeout", "-k", "10", "600", *command(run, port)], cwd=REPO, env=env,
                              capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]

    port = 25000 + os.getpid() % 9000
    full, stopped = tmp_path / "full", tmp_path / "stopped"
    finish(full, port)
    gate = StepGate(tmp_path / "gate", step=2)
    with open(tmp_path / "stopped.log", "w") as log:
        proc = subprocess.Popen(command(stopped, port + 1), cwd=REPO, env={**env, **gate.env(env)}, stdout=log,
                                stderr=subprocess.STDOUT)
        gate.wait_reached("stopped", proc)
        gate.wait_reached("stopped", proc, rank=1)
        proc.send_signal(signal.SIGTERM)
        gate.wait_signalled("stopped", proc)
        gate.release("stopped")
        assert proc.wait(timeout=400) == 75, (tmp_path / "stopped.log").read_text()[-5000:]
    checkpoint = stopped / "checkpoint-2"
    assert (checkpoint / "global_step2").is_dir() and not list(checkpoint.glob("*.safetensors"))
    assert (full / "checkpoint-2" / "model.safetensors").exists()  # periodic checkpoints keep the copy
    finish(stopped, port + 2)
    x, y = load_file(str(full / "model" / "model.safetensors")), load_file(str(stopped / "model" / "model.safetensors"))
    assert set(x) == set(y) and all(torch.equal(x[k], y[k]) for k in x), "the resumed run ends elsewhere"
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(base[k], x[k]) for k in base), "training did not move the weights"


def test_ddp_gradients_are_bucket_views_and_train_the_same_weights(tmp_path: Path, tiny_model_dir: Path) -> None:
    """Issue 31, item 12: DDP gets gradient_as_bucket_view=True (each gradient a view into its
    all-reduce bucket, not a second float32 copy), and a run with it ends bitwise equal to one
    without (bf16 autocast over float32 masters, gradient accumulation 2, the health check on)."""
    import torch
    from safetensors.torch import load_file
    from support.gloo import launch, probe_events

    pages, tests = make_page_index(tmp_path)
    job = {**JOB, "train": {**JOB["train"], "dtype": "bfloat16",
                            "grpo": {**JOB["train"]["grpo"], "learning_rate": 0.01}}}
    runs = {}
    for view in ("1", "0"):
        probe = tmp_path / f"probe{view}.jsonl"
        proc = launch("ddp", tiny_model_dir, pages, tests, tmp_path / f"view{view}", job,
                      env={"OLMPIPE_TEST_PROBE": str(probe), **({"OLMPIPE_TEST_BUCKET_VIEW": "0"} if view == "0" else {})})
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
        assert [e["gradient_as_bucket_view"] for e in probe_events(probe, "ddp")] == [view == "1"] * 2
        runs[view] = load_file(str(tmp_path / f"view{view}" / "model" / "model.safetensors"))
    assert runs["1"].keys() == runs["0"].keys() and all(torch.equal(runs["1"][k], runs["0"][k]) for k in runs["1"])
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(runs["1"][k], base[k]) for k in base), "training did not move the weights"
