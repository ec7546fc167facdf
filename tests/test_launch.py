"""olmpipe.launch: the training command line from the job's GPUs, strategy and nodes (every module of
the package: commands, devices, slurm, supervise, cli; and olmpipe.config.processes)."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from olmpipe.config.processes import STRATEGIES, LaunchError, plan
from olmpipe.launch.cli import main
from olmpipe.launch.commands import launch_command, launch_prefix
from olmpipe.launch.devices import server_mode_command
from olmpipe.launch.slurm import first_host, node_command, slurm_node_resources

REPO = Path(__file__).resolve().parents[1]
CONFIGS = REPO / "workflow" / "accelerate"
SLURM_ENV = {"SLURM_PROCID": "1", "SLURM_JOB_ID": "123456", "SLURM_JOB_NODELIST": "gpu-a,gpu-b"}


def test_a_cpu_job_runs_the_module_directly() -> None:
    assert launch_command("olmpipe.train", ["--seed", "3"], gpus=0, python="py") == [
        "py", "-m", "olmpipe.train", "--seed", "3"]


@pytest.mark.parametrize(("env", "expected"), [
    ({}, {"CUDA_VISIBLE_DEVICES": "0"}),  # a workstation: GPU 0 of all
    ({"CUDA_VISIBLE_DEVICES": "2,3"}, {"CUDA_VISIBLE_DEVICES": "2"}),  # more exported than the job asked for
    ({"CUDA_VISIBLE_DEVICES": "5"}, {"CUDA_VISIBLE_DEVICES": "5"}),  # SLURM's grant stays
    ({"CUDA_VISIBLE_DEVICES": ""}, {}),  # GPUs hidden on purpose: left alone
])
def test_one_gpu_process_sees_only_its_gpu(env: dict, expected: dict) -> None:
    """transformers counts every visible GPU and TRL's GRPOTrainer refuses n_gpu > 1: the one process
    of a GPU job gets one device, through `olmpipe.launch --exec` (exec keeps the PID for SIGTERM)."""
    job = launch_command("olmpipe.train", ["--seed", "3"], gpus=1, python="py", stop_grace_s=60)
    assert job[:6] == ["py", "-m", "olmpipe.launch", "--exec", "--gpus", "1"]
    assert job[-3:] == ["olmpipe.train", "--seed", "3"]
    cmd, changes = server_mode_command("olmpipe.train", ["--seed", "3"], gpus=1, vllm_server_gpus=0, env=env,
                                       python="py")
    assert cmd == ["py", "-m", "olmpipe.train", "--seed", "3"] and changes == expected
    # several training processes keep every GPU of the job (accelerate gives rank i cuda:i)
    assert server_mode_command("m", [], gpus=2, vllm_server_gpus=0, env=env, python="py")[1] == {}


def test_exec_gives_one_process_its_gpu_only(tmp_path: Path) -> None:
    """`olmpipe.launch --exec --gpus 1` really replaces itself by the module with one visible GPU."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "PROBE_OUT": str(tmp_path),
           "CUDA_VISIBLE_DEVICES": "4,5,6"}
    env.pop("RANK", None)
    proc = subprocess.Popen([sys.executable, "-m", "olmpipe.launch", "--exec", "--gpus", "1", "distprobe"], env=env,
                            cwd=tmp_path)
    assert proc.wait(timeout=120) == 0
    record = json.loads((tmp_path / "rank0.json").read_text())
    assert record["env"]["CUDA_VISIBLE_DEVICES"] == "4"


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "zero3", "fsdp"])
def test_one_training_process_is_plain_whatever_the_strategy(strategy: str) -> None:
    # two GPUs, one for the vLLM server: a single training process, no launcher needed
    cmd, env = server_mode_command("m", ["--x"], gpus=2, vllm_server_gpus=1, env={}, python="py", strategy=strategy)
    assert cmd == ["py", "-m", "m", "--x"] and env["CUDA_VISIBLE_DEVICES"] == "0"
    assert plan(2, vllm_server_gpus=1, strategy=strategy).effective_strategy == "single"


def test_server_mode_splits_the_devices_inside_the_job() -> None:
    """The job-level command defers to `olmpipe.launch --exec`, which gives the vLLM server the last
    GPUs SLURM granted and the trainer the others (olmpipe.train.vllm_server reads them back)."""
    from olmpipe.launch.devices import SERVER_DEVICES_ENV
    from olmpipe.train.vllm_server import server_devices

    job = launch_command("olmpipe.train", ["--seed", "3"], gpus=8, vllm_server_gpus=1, python="py",
                         strategy="zero2")
    assert job[:4] == ["py", "-m", "olmpipe.launch", "--exec"] and job[-3:] == ["olmpipe.train", "--seed", "3"]
    cmd, env = server_mode_command("olmpipe.train", ["--seed", "3"], gpus=8, vllm_server_gpus=1, strategy="zero2",
                                   env={"CUDA_VISIBLE_DEVICES": "8,9,10,11,12,13,14,15"}, python="py",
                                   main_process_port=29511)
    assert env == {"CUDA_VISIBLE_DEVICES": "8,9,10,11,12,13,14", SERVER_DEVICES_ENV: "15"}
    assert server_devices(env) == ["15"]
    assert cmd[cmd.index("--num_processes") + 1] == "7"
    with pytest.raises(LaunchError, match="sees 1 GPU"):
        server_mode_command("m", [], gpus=2, vllm_server_gpus=1, env={"CUDA_VISIBLE_DEVICES": "3"})


def test_exec_runs_the_trainer_on_its_gpus_and_names_the_servers(tmp_path: Path) -> None:
    """`olmpipe.launch --exec` really replaces itself by the trainer with the split devices."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "PROBE_OUT": str(tmp_path),
           "CUDA_VISIBLE_DEVICES": "5,6"}
    env.pop("RANK", None)
    subprocess.run([sys.executable, "-m", "olmpipe.launch", "--exec", "--gpus", "2", "--vllm-server-gpus", "1",
                    "distprobe"], env=env, cwd=tmp_path, check=True, timeout=120)
    seen = json.loads((tmp_path / "rank0.json").read_text())["env"]
    assert (seen["CUDA_VISIBLE_DEVICES"], seen["OLMPIPE_VLLM_SERVER_DEVICES"]) == ("5", "6")


def test_cli_exec_print_shows_the_environment(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2,3")
    assert main(["--exec", "--print", "--gpus", "4", "--vllm-server-gpus", "1", "olmpipe.train", "--seed", "1"]) == 0
    out = capsys.readouterr().out.split()
    assert out[:2] == ["CUDA_VISIBLE_DEVICES=0,1,2", "OLMPIPE_VLLM_SERVER_DEVICES=3"]
    assert out[out.index("--num_processes") + 1] == "3"


def test_accelerate_gets_the_strategy_file_and_one_process_per_gpu() -> None:
    cmd = launch_command("olmpipe.train", ["--seed", "3"], gpus=7, python="py", main_process_port=29511,
                         strategy="zero2")
    assert cmd[:3] == ["py", "-m", "accelerate.commands.launch"]
    assert cmd[cmd.index("--config_file") + 1] == "workflow/accelerate/zero2.yaml"
    assert cmd[cmd.index("--num_processes") + 1] == "7"
    assert cmd[cmd.index("--main_process_port") + 1] == "29511"
    assert cmd[-4:] == ["-m", "olmpipe.train", "--seed", "3"]


@pytest.mark.parametrize(("strategy", "kind", "checks"), [
    ("ddp", "MULTI_GPU", {}),
    ("zero2", "DEEPSPEED", {"deepspeed_config": {"zero_stage": 2}}),
    ("zero3", "DEEPSPEED", {"deepspeed_config": {"zero_stage": 3, "zero3_save_16bit_model": True}}),
    # the final model/ must be a plain Hugging Face folder: save_model gathers only FULL_STATE_DICT
    ("fsdp", "FSDP", {"fsdp_config": {"fsdp_version": 2, "fsdp_state_dict_type": "FULL_STATE_DICT"}}),
    ("single", "NO", {}),
])
def test_strategy_files_are_accelerate_configs_of_their_kind(strategy: str, kind: str, checks: dict) -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    assert sorted(p.stem for p in CONFIGS.glob("*.yaml")) == sorted(STRATEGIES)
    loaded = load_config_from_file(str(CONFIGS / f"{strategy}.yaml"))
    assert loaded.distributed_type.value == kind
    for section, values in checks.items():
        for key, value in values.items():
            assert getattr(loaded, section)[key] == value, (section, key)
    assert loaded.mixed_precision is None  # follows train.dtype through GRPOConfig


@pytest.mark.parametrize("strategy", ["ddp", "zero2", "zero3", "fsdp"])
def test_accelerate_command_is_accepted_by_accelerate(strategy: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # accelerate parses and validates the flags and config file we build (without launching)
    from accelerate.commands.launch import _validate_launch_command, launch_command_parser

    monkeypatch.chdir(REPO)
    cmd = launch_command("olmpipe.train", ["--seed", "1"], gpus=4, python=sys.executable, strategy=strategy)
    args, _, _ = _validate_launch_command(launch_command_parser().parse_args(cmd[3:]))
    assert args.num_processes == 4 and args.num_machines == 1 and args.module
    assert args.training_script == "olmpipe.train" and args.training_script_args == ["--seed", "1"]
    assert (args.use_deepspeed, args.use_fsdp, args.multi_gpu) == (
        strategy.startswith("zero"), strategy == "fsdp", strategy == "ddp")
    if strategy.startswith("zero"):
        assert args.zero_stage == int(strategy[-1])


def test_torchrun_standalone() -> None:
    cmd = launch_command("olmpipe.train", [], gpus=2, launcher="torchrun", python="py")
    assert cmd[:3] == ["py", "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
    assert "--standalone" in cmd and cmd[-2:] == ["-m", "olmpipe.train"]


def test_torchrun_command_is_accepted_by_torchrun() -> None:
    from torch.distributed.run import get_args_parser

    cmd = launch_command("olmpipe.train", ["--seed", "1"], gpus=2, launcher="torchrun", python=sys.executable)
    args = get_args_parser().parse_args(cmd[3:])
    assert args.nproc_per_node == "2" and args.module and args.training_script == "olmpipe.train"


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"gpus": 1, "vllm_server_gpus": 1}, "more GPUs than the server"),
    ({"gpus": 2, "vllm_server_gpus": 2}, "more GPUs than the server"),
    ({"gpus": -1}, ">= 0"),
    ({"gpus": 2, "launcher": "deepspeed"}, "launcher must be one of"),
    ({"gpus": 2, "strategy": "zero9"}, "strategy must be one of"),
    ({"gpus": 4, "strategy": "single"}, "single runs one process"),
    ({"gpus": 4, "launcher": "torchrun", "strategy": "zero2"}, "launcher: accelerate"),
    ({"gpus": 8, "nodes": 0}, "nodes must be >= 1"),
    ({"gpus": 12, "nodes": 8}, "multiple of resources.train.nodes"),
    ({"gpus": 16, "nodes": 2, "vllm_server_gpus": 1}, "vllm_mode: colocate"),
])
def test_bad_plans_say_what_to_change(kwargs: dict, message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        plan(**kwargs)


def test_prefix_is_a_shell_string_that_round_trips() -> None:
    prefix = launch_prefix(2, "accelerate", strategy="fsdp")
    assert shlex.split(prefix) == launch_command("olmpipe.train", [], 2, "accelerate", strategy="fsdp")


def test_cli_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "2", "--launcher", "torchrun", "olmpipe.train", "--", "--seed", "1"]) == 0
    out = capsys.readouterr().out.split()
    assert out[-4:] == ["-m", "olmpipe.train", "--seed", "1"]
    assert "--nproc_per_node" in out


def test_module_entry_point() -> None:
    proc = subprocess.run([sys.executable, "-m", "olmpipe.launch", "--gpus", "0", "olmpipe.train"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split()[1:] == ["-m", "olmpipe.train"]


# --- several nodes ---------------------------------------------------------------------------


def test_multi_node_job_is_one_srun_task_per_node() -> None:
    cmd = launch_command("olmpipe.train", ["--seed", "1"], gpus=16, nodes=2, strategy="zero2", python="py")
    assert cmd[:4] == ["srun", "--ntasks=2", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
    node = cmd[4:]
    assert node[:4] == ["py", "-m", "olmpipe.launch", "--node"]
    assert node[-3:] == ["olmpipe.train", "--seed", "1"]
    # the per-node command line parses back to the same job
    for flag, value in (("--gpus", "16"), ("--nodes", "2"), ("--strategy", "zero2")):
        assert node[node.index(flag) + 1] == value


def test_node_command_takes_rank_address_and_port_from_slurm() -> None:
    cmd = node_command("olmpipe.train", ["--seed", "1"], gpus=16, nodes=2, env=SLURM_ENV, strategy="zero3",
                       python="py")
    assert cmd[cmd.index("--config_file") + 1] == "workflow/accelerate/zero3.yaml"
    assert cmd[cmd.index("--num_processes") + 1] == "16"  # accelerate's total over machines
    assert cmd[cmd.index("--num_machines") + 1] == "2"
    assert cmd[cmd.index("--machine_rank") + 1] == "1"
    assert cmd[cmd.index("--main_process_ip") + 1] == "gpu-a"
    assert cmd[cmd.index("--main_process_port") + 1] == str(29500 + 123456 % 10000)
    assert cmd[-4:] == ["-m", "olmpipe.train", "--seed", "1"]
    tr = node_command("m", [], gpus=16, nodes=2, env={**SLURM_ENV, "SLURM_PROCID": "0"}, launcher="torchrun",
                      python="py", main_process_port=2222)
    assert tr[tr.index("--node_rank") + 1] == "0" and tr[tr.index("--nproc_per_node") + 1] == "8"
    assert tr[tr.index("--master_addr") + 1] == "gpu-a" and tr[tr.index("--master_port") + 1] == "2222"


def test_node_command_expands_bracketed_node_lists_with_scontrol() -> None:
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 0, stdout="node07\nnode08\n", stderr="")

    assert first_host("node[07-08]", run=fake_run) == "node07"
    assert calls == [["scontrol", "show", "hostnames", "node[07-08]"]]


@pytest.mark.parametrize(("env", "message"), [
    ({}, "inside `srun` of a SLURM job"),
    ({**SLURM_ENV, "SLURM_PROCID": "2"}, "one task per node"),
])
def test_node_command_outside_a_proper_srun_says_so(env: dict, message: str) -> None:
    with pytest.raises(LaunchError, match=message):
        node_command("m", [], gpus=16, nodes=2, env=env)


def test_cli_node_print(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    for key, value in SLURM_ENV.items():
        monkeypatch.setenv(key, value)
    assert main(["--node", "--print", "--gpus", "4", "--nodes", "2", "olmpipe.train", "--seed", "2"]) == 0
    out = capsys.readouterr().out.split()
    assert out[out.index("--machine_rank") + 1] == "1" and out[-2:] == ["--seed", "2"]


def test_slurm_resources_of_multi_node_jobs() -> None:
    assert slurm_node_resources(1) == {}
    assert slurm_node_resources(3) == {"nodes": 3, "tasks": 3, "tasks_per_gpu": 0, "mpi": "srun"}


def _probe(out: Path, env: dict[str, str]) -> dict[int, dict]:
    records = {}
    for path in sorted(out.glob("rank*.json")):
        record = json.loads(path.read_text())
        records[record["rank"]] = record
    return records


@pytest.mark.slow
def test_two_machines_rendezvous_through_the_node_commands(tmp_path: Path) -> None:
    """Two `--node` launchers standing for two machines (CPU, gloo) form one process group."""
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "PROBE_OUT": str(tmp_path), "OMP_NUM_THREADS": "1",
           "SLURM_JOB_ID": str(os.getpid()), "SLURM_JOB_NODELIST": "localhost"}
    procs = [subprocess.Popen([sys.executable, "-m", "olmpipe.launch", "--node", "--gpus", "2", "--nodes", "2",
                               "--config-dir", str(CONFIGS), "distprobe"],
                              env={**env, "SLURM_PROCID": str(rank)}, cwd=tmp_path,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for rank in (0, 1)]
    outputs = [p.communicate(timeout=240)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], "\n".join(o[-3000:] for o in outputs)
    records = _probe(tmp_path, env)
    assert sorted(records) == [0, 1]
    assert all(r["world_size"] == 2 and r["sum"] == 3.0 for r in records.values())
    assert [records[r]["env"]["GROUP_RANK"] for r in (0, 1)] == ["0", "1"]  # machine ranks from SLURM_PROCID



@pytest.mark.slow
@pytest.mark.slurm
def test_two_srun_tasks_rendezvous_under_slurm(cluster, tmp_path: Path) -> None:
    """Under a real SLURM job, two srun tasks (one node here, standing for two machines) each run
    `olmpipe.launch --node`, which reads SLURM_PROCID/SLURM_JOB_NODELIST/SLURM_JOB_ID and starts
    accelerate with the ddp file; their processes join one gloo group. The job-level srun differs
    only in --ntasks-per-node=1 (one task per real node)."""
    node = [sys.executable, "-m", "olmpipe.launch", "--node", "--gpus", "2", "--nodes", "2",
            "--config-dir", str(CONFIGS), "distprobe"]
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/bash\nset -euo pipefail\nsrun --ntasks=2 --kill-on-bad-exit=1 "
                      + shlex.join(node) + "\n")
    env = {**os.environ, "PYTHONPATH": str(REPO / "tests"), "PROBE_OUT": str(tmp_path), "OMP_NUM_THREADS": "1"}
    started = time.monotonic()
    proc = subprocess.run(["timeout", "-k", "10", "300", "sbatch", "--wait", "--nodes=1", "--ntasks=2",
                           "--cpus-per-task=1", "--mem=4000", "-t", "10", "-o", str(tmp_path / "job.log"),
                           str(script)], env=env, cwd=tmp_path, capture_output=True, text=True, check=False)
    log = (tmp_path / "job.log").read_text(errors="replace") if (tmp_path / "job.log").exists() else ""
    assert proc.returncode == 0, f"{proc.stdout}{proc.stderr}\n{log[-4000:]}"
    records = _probe(tmp_path, env)
    assert sorted(records) == [0, 1], log[-4000:]
    assert all(r["world_size"] == 2 and r["sum"] == 3.0 for r in records.values())
    assert sorted(r["env"]["SLURM_PROCID"] for r in records.values()) == ["0", "1"]
    assert time.monotonic() - started < 300


@pytest.mark.slow
@pytest.mark.slurm
def test_scancel_term_stops_a_two_process_training_job_with_a_checkpoint(cluster, tmp_path: Path,
                                                                        tiny_model_dir: Path) -> None:
    """`scancel --signal=TERM` on a SLURM job training with 2 processes (supervised launcher, as the
    train rule starts it): every rank stops after the same step, one complete checkpoint is on
    disk, the job ends with exit code 75 within the grace period, and no process is left."""
    from trainkit import make_page_index

    pages, tests = make_page_index(tmp_path)
    run = tmp_path / "seed0"
    job = {"train": {"wandb": {"mode": "disabled"}, "grpo": {
        "max_steps": 200, "num_generations": 4, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
        "max_completion_length": 8, "save_steps": 1000, "logging_steps": 1}}, "rewards": {"bench": {"processes": 0}}}
    cmd = launch_command("olmpipe.train", ["--seed", "0", "--model", str(tiny_model_dir), "--pages", str(pages),
                                           "--tests-dir", str(tests), "--run-dir", str(run), "--threads", "1",
                                           "--config-json", json.dumps(job)],
                         gpus=2, strategy="ddp", main_process_port=23000 + os.getpid() % 9000, stop_grace_s=60,
                         config_dir=CONFIGS)
    script = tmp_path / "job.sh"
    script.write_text(f"#!/bin/bash\nset -euo pipefail\ncd {shlex.quote(str(REPO))}\nsrun --ntasks=1 {shlex.join(cmd)}\n")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    submitted = subprocess.run(["sbatch", "--parsable", "--nodes=1", "--ntasks=1", "--cpus-per-task=2",
                                "--mem=6000", "-t", "15", "-o", str(tmp_path / "job.log"), str(script)],
                               env=env, cwd=tmp_path, capture_output=True, text=True, check=True)
    job_id = submitted.stdout.strip().split(";")[0]

    def state() -> dict[str, str]:
        out = subprocess.run(["scontrol", "-o", "show", "job", job_id], capture_output=True, text=True,
                             check=False).stdout
        return dict(kv.split("=", 1) for kv in out.split() if "=" in kv)

    deadline = time.monotonic() + 400
    while not (run / "metrics.jsonl").exists():
        log = (tmp_path / "job.log").read_text(errors="replace") if (tmp_path / "job.log").exists() else ""
        assert state().get("JobState") in ("PENDING", "RUNNING", "CONFIGURING"), log[-4000:]
        assert time.monotonic() < deadline, log[-4000:]
        time.sleep(0.5)
    sent = time.monotonic()
    subprocess.run(["scancel", "--signal=TERM", job_id], check=True, capture_output=True, text=True)
    while state().get("JobState") in ("RUNNING", "COMPLETING", "CONFIGURING"):
        assert time.monotonic() - sent < 120, "the job did not stop"
        time.sleep(0.5)
    final = state()
    log = (tmp_path / "job.log").read_text(errors="replace")
    assert final.get("ExitCode") == "75:0", f"{final}\n{log[-4000:]}"
    assert time.monotonic() - sent < 60 + 30
    saved = sorted(run.glob("checkpoint-*"))
    assert len(saved) == 1 and (saved[0] / "trainer_state.json").exists(), log[-4000:]
    assert sorted(p.name for p in saved[0].glob("rng_state_*.pth")) == ["rng_state_0.pth", "rng_state_1.pth"]
    leftovers = subprocess.run(["pgrep", "-f", str(run)], capture_output=True, text=True, check=False).stdout.split()
    assert not leftovers, f"processes left: {leftovers}"
