"""The README's GPU set-up command (``scripts/setup.sh --gpu``) resolves and installs; the conda
file for ``--sdm conda`` and the job-start check say the same.

A GPU install downloads several GB, so CI (no GPU, network to the package index only) proves it in
parts: ``scripts/setup.sh --gpu --resolve-only`` runs the script's own pip call against the package
index in a throwaway environment (pip resolves from the wheels' metadata files, PEP 658, so no
large wheel is downloaded), the report is checked (a CUDA torch 2.13.0 that nothing replaces, vLLM
in TRL 1.16's range for image rollouts, DeepSpeed), every source distribution of the set is built
into a wheel, and DeepSpeed (an sdist: the piece most likely to fail at install) is installed
``--no-deps`` with its small dependencies and imported beside this environment's torch.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet
from packaging.version import Version

from olmpipe.job.packages import SUPPORTED

REPO = Path(__file__).resolve().parents[1]
SETUP = REPO / "scripts" / "setup.sh"
GPU_ENV = REPO / "workflow" / "envs" / "olmpipe-gpu.yaml"
#: Output of a pip that cannot reach the package index (then the resolve test skips: CI has it).
NETWORK_ERRORS = ("NewConnectionError", "Temporary failure in name resolution", "Max retries exceeded",
                  "ProxyError", "Network is unreachable", "Could not fetch URL", "ConnectTimeoutError")


def setup_gpu_packages() -> tuple[list[str], str]:
    """The GPU package set as scripts/setup.sh spells it: (pip arguments, extras without --dev)."""
    text = SETUP.read_text()
    extras = re.search(r'^\s*extras="([^"]+)"', text, re.MULTILINE).group(1)
    packages = re.search(r"^\s*gpu_packages=\((.+)\)$", text, re.MULTILINE).group(1)
    return packages.replace('"', "").split(), extras


def test_supported_versions_are_the_extras() -> None:
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    for name, versions in SUPPORTED.items():
        (line,) = extras[{"bitsandbytes": "qlora"}.get(name, name)]  # the QLoRA extra is named for its use
        req = Requirement(line)
        assert req.name == name and req.specifier == SpecifierSet(versions), (name, line, versions)
    # server-mode image rollouts need vLLM >= 0.30 (trl/scripts/vllm_serve.py 266-267); TRL 1.16
    # supports up to 0.31.0 (trl/import_utils.py 107): the range allows exactly those releases
    vllm = SpecifierSet(SUPPORTED["vllm"])
    assert [v for v in ("0.29.0", "0.30.0", "0.31.0", "0.32.0") if Version(v) in vllm] == ["0.30.0", "0.31.0"]


def test_trl_enables_the_render_endpoint_from_vllm_0_30() -> None:
    """The fact the vLLM floor rests on, read from the installed TRL: `trl vllm-serve` adds
    `--enable-scale-out` (which registers /v1/chat/completions/render) only from vLLM 0.30.0."""
    import importlib.util

    trl = Path(importlib.util.find_spec("trl").origin).parent
    serve = (trl / "scripts" / "vllm_serve.py").read_text()
    assert 'if is_vllm_available(min_version="0.30.0"):\n        command += ["--enable-scale-out"]' in serve
    client = (trl / "generation" / "vllm_client.py").read_text()
    assert 'f"{self.base_url}/v1/chat/completions/render"' in client
    assert 'if not (Version("0.22.0") <= _vllm_base_version <= Version("0.31.0")):' in (
        trl / "import_utils.py").read_text()


def test_conda_gpu_environment_is_the_setup_set() -> None:
    packages, extras = setup_gpu_packages()
    assert packages == ["torch==2.13.0", "-e", ".[$extras]"] and extras == "vllm,deepspeed,qlora"
    env = yaml.safe_load(GPU_ENV.read_text())
    pip = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    assert pip == ["torch==2.13.0", f"-e ../..[{extras}]"]
    assert "python=3.11" in env["dependencies"]


def test_rules_given_gpus_use_the_gpu_environment(tmp_path: Path) -> None:
    """Under `--sdm conda`, the GPU environment appears exactly when a rule is given GPUs: none for
    the embedded default, and once training or generation asks for a GPU. (`conda` itself is not
    installed here: a stand-in answers Snakemake's `conda info`, `config` and `--version` queries;
    `--list-conda-envs` creates nothing.)"""
    fake = tmp_path / "bin" / "conda"
    fake.parent.mkdir()
    fake.write_text('#!/bin/sh\ncase "$1" in\n  --version) echo "conda 24.11.0";;\n'
                    '  info) echo \'{"conda_prefix": "/nonexistent", "platform": "linux-64"}\';;\n'
                    '  config) echo \'{"get": {"channel_priority": "strict"}}\';;\n'
                    '  *) echo "{}";;\nesac\n')
    fake.chmod(0o755)
    env = {**os.environ, "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"}

    def envs(resources: dict | None = None) -> set[str]:
        args = ["snakemake", "-n", "train", "--sdm", "conda", "--list-conda-envs",
                "--conda-prefix", str(tmp_path / "conda")]
        if resources is not None:
            extra = tmp_path / "resources.yaml"
            extra.write_text(yaml.safe_dump({"resources": resources}))
            args += ["--configfile", str(extra)]
        proc = subprocess.run(args, cwd=REPO, env=env, capture_output=True, text=True, timeout=300, check=False)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return set(re.findall(r"workflow/envs/(\S+\.yaml)", proc.stdout))

    assert envs() == {"olmpipe.yaml"}
    assert envs({"train": {"gpu": 1}}) == {"olmpipe.yaml", "olmpipe-gpu.yaml"}
    assert envs({"generate": {"gpu": 1}}) == {"olmpipe.yaml", "olmpipe-gpu.yaml"}


def _index_env() -> dict[str, str]:
    """This environment without pip's local configuration: a fresh GPU machine resolves against
    the package index only (this build machine's find-links hold a CPU-only torch 2.13.0, which
    would satisfy `torch==2.13.0`). An index given by PIP_INDEX_URL is kept."""
    env = {k: v for k, v in os.environ.items() if k not in ("PIP_FIND_LINKS", "PIP_EXTRA_INDEX_URL",
                                                             "PIP_CONSTRAINT", "VIRTUAL_ENV")}
    env["PIP_CONFIG_FILE"] = os.devnull
    return env


def installed_here(name: str) -> bool:
    from importlib.metadata import PackageNotFoundError, version

    try:
        version(name)
    except PackageNotFoundError:
        return False
    return True


@pytest.mark.slow
def test_gpu_set_resolves_and_deepspeed_installs(tmp_path: Path) -> None:
    report_path = tmp_path / "report.json"
    cache = tmp_path / "pip-cache"  # what pip fetched, measured below
    env = {**_index_env(), "OLMPIPE_VENV": str(tmp_path / "venv"), "PYTHON": sys.executable,
           "PIP_CACHE_DIR": str(cache)}
    proc = subprocess.run(["bash", str(SETUP), "--gpu", "--resolve-only", str(report_path)], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=900, check=False)
    output = proc.stdout + proc.stderr
    if proc.returncode != 0 and any(marker in output for marker in NETWORK_ERRORS):
        pytest.skip(f"the package index is unreachable from here: {output.strip().splitlines()[-1]}")
    assert proc.returncode == 0, output[-5000:]
    report = json.loads(report_path.read_text())
    install = {item["metadata"]["name"].lower().replace("_", "-"): item for item in report["install"]}

    def version(name: str) -> Version:
        return Version(install[name]["metadata"]["version"])

    def requires(name: str) -> list[Requirement]:
        return [Requirement(r) for r in install[name]["metadata"].get("requires_dist", [])]

    # torch 2.13.0 itself, a CUDA build: no local label (2.13.0+cpu) and NVIDIA's CUDA runtime as a dependency
    assert install["torch"]["metadata"]["version"] == "2.13.0"
    assert any(r.name.startswith(("nvidia-", "cuda-")) and (r.marker is None or r.marker.evaluate())
               for r in requires("torch"))
    # vLLM in the supported range, pinning that same torch (so it cannot replace it)
    assert version("vllm") in SpecifierSet(SUPPORTED["vllm"])
    assert [str(r.specifier) for r in requires("vllm") if r.name == "torch"] == ["==2.13.0"]
    assert version("deepspeed") in SpecifierSet(SUPPORTED["deepspeed"])
    assert version("bitsandbytes") in SpecifierSet(SUPPORTED["bitsandbytes"])  # QLoRA (train.peft.quantization)
    assert str(version("trl")) == "1.16.0" and version("accelerate") >= Version("1.4")
    assert version("transformers") in SpecifierSet(">=5.17,<5.25")
    assert install["olmpipe"]["is_direct"] and "vllm" in install["olmpipe"]["requested_extras"]
    # resolved from metadata: the multi-GB wheels of torch, vLLM and CUDA were not downloaded
    fetched = sum(f.stat().st_size for f in cache.rglob("*") if f.is_file())
    assert fetched < 100 * 2**20, f"resolving fetched {fetched / 2**20:.0f} MiB"

    # every source distribution of the set builds into a wheel (a wheel installs by its tags)
    sdists = [f"{name}=={item['metadata']['version']}" for name, item in install.items()
              if name != "olmpipe" and not item["download_info"]["url"].endswith(".whl")]
    assert any(s.startswith("deepspeed==") for s in sdists)
    venv_python = tmp_path / "venv" / "bin" / "python"
    wheels = tmp_path / "wheels"
    proc = subprocess.run([venv_python, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", wheels, *sdists],
                          env=env, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    # DeepSpeed with the dependencies this environment lacks (hjson, ninja, ...; torch is here),
    # --no-deps into a folder, then imported beside this environment's torch
    target = tmp_path / "target"
    small = []
    for req in requires("deepspeed"):
        if (req.marker is None or req.marker.evaluate({"extra": ""})) and not installed_here(req.name):
            name = req.name.lower().replace("_", "-")
            small.append(f"{req.name}=={install[name]['metadata']['version']}")
    assert small and not any(s.startswith("torch==") for s in small)
    deepspeed_wheel = next(wheels.glob("deepspeed-*.whl"))
    proc = subprocess.run([venv_python, "-m", "pip", "install", "--quiet", "--no-deps", "--target", target,
                           deepspeed_wheel, *small], env=env, capture_output=True, text=True, timeout=900,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    proc = subprocess.run([sys.executable, "-c", "import deepspeed, sys; sys.stdout.write(deepspeed.__version__)"],
                          env={**os.environ, "PYTHONPATH": str(target)}, capture_output=True, text=True,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.strip().splitlines()[-1] == str(version("deepspeed"))
