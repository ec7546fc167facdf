"""The packages a training job needs beyond the base install, checked on the job's node at start.

The base install (``scripts/setup.sh``) runs every stage on the CPU. A GPU job may need more: the
``zero2``/``zero3`` strategies need DeepSpeed (accelerate imports it), TRL's vLLM rollouts
(``train.grpo.use_vllm``) need vLLM in the range this project supports, and a job on a node with
NVIDIA GPUs needs a CUDA build of torch. Without them the job used to die deep inside accelerate or TRL, or -- a CPU
torch on a GPU node with ``train.device: auto`` -- train on the CPU. :func:`check_job` stops it at
start instead, naming each missing or unsupported package and the set-up command that installs
them (:data:`SETUP_COMMAND`, README):

    python -m olmpipe.job.packages --strategy zero2 --processes 7 --vllm-mode server --cuda

prints what such a job needs and whether this environment has it (exit 0), or the problems
(exit 2). Two callers run the check on the job's node: :mod:`olmpipe.launch.cli` before it starts a
multi-process launcher, for the strategy's packages (accelerate would otherwise fail first, with its
own message), by installed version only, so that the long-lived supervisor imports nothing; and
every rank of :mod:`olmpipe.train.cli` before training, which also imports them (TRL and accelerate
import them in that process anyway) so that a broken install is caught too, and checks torch's
build when the node has NVIDIA GPUs and ``train.device`` is not ``cpu``: a CUDA build that cannot
reach them (``torch.cuda.is_available()`` False: an NVIDIA driver older than the build's CUDA
needs, 580 for torch 2.13.0's CUDA 13.0) stops the job there, naming the driver, instead of letting
``train.device: auto`` load the model on the CPU.

Supported versions (:data:`SUPPORTED`) are the ``vllm``, ``deepspeed`` and ``qlora`` (bitsandbytes) extras of
``pyproject.toml`` (``tests/test_setup_gpu.py`` keeps them equal):

- vLLM >= 0.30: TRL 1.16 sends the images of server-mode rollouts to
  ``/v1/chat/completions/render`` (``trl/generation/vllm_client.py`` 326-368,
  ``VLLMClient.image_features``, called from ``trl/generation/vllm_generation.py`` 611), which
  ``trl vllm-serve`` registers with ``--enable-scale-out`` only from vLLM 0.30.0
  (``trl/scripts/vllm_serve.py`` 207-208 and 266-267); on 0.22-0.29 the first rollout fails.
- vLLM < 0.32: TRL 1.16 supports vLLM 0.22.0 to 0.31.0 (``trl/import_utils.py`` 107); vLLM
  0.30.0, 0.31.0 and 0.32.0 pin torch 2.13.0 (their ``Requires-Dist``), 0.33.0 pins 2.14.0.
"""

from __future__ import annotations

import argparse
import importlib
import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.compat.versions import TESTED, installed_version
from olmpipe.config.processes import DEEPSPEED_STRATEGIES
from olmpipe.job.kinds import GRPO, JobKind

#: The README's command that sets up a GPU machine with everything a job may need.
SETUP_COMMAND = "scripts/setup.sh --gpu"
#: Supported versions of the optional packages: the extras of the same names in pyproject.toml
#: (vLLM's: the releases olmpipe's seams into it were checked against, olmpipe.compat.versions).
SUPPORTED = {
    "bitsandbytes": ">=0.45,<0.51",
    "deepspeed": ">=0.16,<0.20",
    "vllm": TESTED["vllm"],
}
VLLM_MODES = ("none", "colocate", "server")
#: One folder per GPU that the loaded NVIDIA driver sees (Linux).
NVIDIA_GPUS_DIR = "/proc/driver/nvidia/gpus"
#: The loaded NVIDIA kernel module's version line (Linux): "NVRM version: NVIDIA UNIX x86_64 Kernel
#: Module  570.86.15  ..." (or "... Open Kernel Module for x86_64  580.65.06 ...").
NVIDIA_DRIVER_VERSION_FILE = "/proc/driver/nvidia/version"
#: The oldest driver branch that runs each CUDA major version torch may be built for: NVIDIA's
#: "Supported Drivers and CUDA Toolkit Versions" (data-center drivers, table 2: R580 supports CUDA
#: 13.0+, R535 and R570 CUDA 12.x, all through minor version compatibility; CUDA 12.0 itself needs
#: 525). torch 2.13.0's default wheel is a CUDA 13.0 build (README, scripts/setup.sh: driver 580).
CUDA_MIN_DRIVER = {13: 580, 12: 525}


class MissingPackageError(RuntimeError):
    """A job's environment lacks a package it needs; the message names each and the set-up command."""


@dataclass(frozen=True)
class Need:
    """One package a job needs: import name, supported versions ('' for any), why, and whether a CUDA
    build is required (torch on a node with GPUs)."""

    module: str
    versions: str
    reason: str
    cuda: bool = False


def nvidia_gpus(root: str | Path = NVIDIA_GPUS_DIR) -> int:
    """GPUs of this node as the NVIDIA driver lists them (0 without the driver).

    Read from the driver, not from torch, so that a CPU-only torch on a GPU node is noticed; and not
    from the job's ``gpu`` resource, which CPU test clusters set to start several CPU processes.
    """
    try:
        return sum(1 for _ in Path(root).iterdir())
    except OSError:
        return 0


def job_needs(*, strategy: str, processes: int, vllm_mode: str = "none", cuda: bool = False,
              section: str = "train") -> list[Need]:
    """The optional packages of a training job.

    ``strategy``: ``resources.train.strategy``; ``processes``: training ranks (a strategy other
    than ``single`` shards nothing with one rank, and the launcher runs it as ``single``);
    ``vllm_mode``: ``none`` without ``train.grpo.use_vllm``, else ``train.grpo.vllm_mode``;
    ``cuda``: the job will train on CUDA (needs a CUDA build of torch); ``section``: the trainer's
    config section, named in the reasons.

    >>> [n.module for n in job_needs(strategy="zero2", processes=7, vllm_mode="server", cuda=True)]
    ['torch', 'deepspeed', 'vllm']
    >>> job_needs(strategy="zero2", processes=1)
    []
    """
    if vllm_mode not in VLLM_MODES:
        raise ValueError(f"vllm_mode must be one of {', '.join(VLLM_MODES)}, got {vllm_mode!r}")
    needs = []
    if cuda:
        needs.append(Need("torch", "", "training on this node's NVIDIA GPUs", cuda=True))
    if strategy in DEEPSPEED_STRATEGIES and processes > 1:
        needs.append(Need("deepspeed", SUPPORTED["deepspeed"], f"resources.{section}.strategy: {strategy}"))
    if vllm_mode != "none":
        needs.append(Need("vllm", SUPPORTED["vllm"], f"{section}.grpo.use_vllm with vllm_mode: {vllm_mode}"))
    return needs


def config_needs(cfg: Mapping[str, Any], *, processes: int, node_gpus: int = 0, kind: JobKind = GRPO) -> list[Need]:
    """:func:`job_needs` of a validated config (``resources.<section>.strategy``, the knobs' ``use_vllm``,
    ``<section>.device``) for a job of ``kind`` (:mod:`olmpipe.job.kinds`) of ``processes`` ranks on a
    node with ``node_gpus`` NVIDIA GPUs."""
    section = kind.section_of(cfg)
    knobs, peft = section[kind.knobs_key], section["peft"]
    vllm_mode = knobs["vllm_mode"] if knobs.get("use_vllm") else "none"
    needs = job_needs(strategy=cfg["resources"][kind.section]["strategy"], processes=processes, vllm_mode=vllm_mode,
                      cuda=node_gpus > 0 and section["device"] != "cpu", section=kind.section)
    if peft["enabled"] and peft["quantization"] != "none" and node_gpus > 0:
        # QLoRA (olmpipe.job.peft); without a GPU it is refused with its own message
        needs.append(Need("bitsandbytes", SUPPORTED["bitsandbytes"],
                          f"{kind.section}.peft.quantization: {peft['quantization']}"))
    return needs


def _version_problem(need: Need) -> str | None:
    from packaging.specifiers import SpecifierSet
    from packaging.version import InvalidVersion, Version

    found = installed_version(need.module)
    wanted = f"{need.module}{need.versions}" if need.versions else need.module
    if found is None:
        return f"{wanted} is not installed ({need.reason} needs it)"
    dist, version = found
    if need.versions:
        try:
            base = Version(Version(version).base_version)  # "0.31.0+cu130" -> 0.31.0
        except InvalidVersion:
            return f"{dist} {version} has a version this check cannot read ({need.reason} needs {wanted})"
        if base not in SpecifierSet(need.versions):
            return f"{dist} {version} is installed, but {need.reason} needs {wanted}"
    return None


def nvidia_driver(path: str | Path | None = None) -> str | None:
    """The loaded NVIDIA driver's version (``"570.86.15"``), None without one or when unreadable."""
    try:
        text = Path(path or NVIDIA_DRIVER_VERSION_FILE).read_text(encoding="utf-8", errors="replace")
    except OSError:
        return None
    found = re.search(r"Kernel Module.*?\s(\d+\.\d+(?:\.\d+)?)(?:\s|$)", text)
    return found.group(1) if found else None


def _cuda_problem(module: Any, need: Need) -> str | None:
    """Why a CUDA build of torch cannot train on this node's GPUs (None when it can): a CPU-only
    build, or CUDA unavailable -- with ``train.device: auto`` the job would load the model on the CPU
    and fail much later (in NCCL or vLLM), so it stops here, naming the driver when it is too old
    for the build's CUDA (:data:`CUDA_MIN_DRIVER`). A job whose ``CUDA_VISIBLE_DEVICES`` hides every
    GPU on purpose (empty or ``-1``) is left to train on the CPU."""
    version = getattr(module, "__version__", "?")
    cuda = getattr(getattr(module, "version", None), "cuda", None)
    if cuda is None:
        return f"torch {version} is a CPU-only build; {need.reason} needs a CUDA build"
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) in ("", "-1") or module.cuda.is_available():
        return None
    driver = nvidia_driver()
    major = int(str(cuda).split(".")[0])
    minimum = CUDA_MIN_DRIVER.get(major)
    what = (f"torch {version} (CUDA {cuda}) cannot use this node's NVIDIA GPUs (torch.cuda.is_available() "
            f"is False), which {need.reason} needs")
    if driver is not None and minimum is not None and int(driver.split(".")[0]) < minimum:
        return (f"{what}: the NVIDIA driver is {driver}, and CUDA {major} needs driver {minimum} or newer. "
                f"Update the driver, install a torch built for the driver's CUDA, or set train.device: cpu to "
                "train on the CPU on purpose")
    return (f"{what}; the NVIDIA driver is {driver or 'unreadable'} ({NVIDIA_DRIVER_VERSION_FILE}). Check "
            "CUDA_VISIBLE_DEVICES and the driver (nvidia-smi), or set train.device: cpu to train on the CPU on purpose")


def _import_problem(need: Need) -> str | None:
    try:
        module = importlib.import_module(need.module)
    except Exception as exc:  # noqa: BLE001 - any failure to import is the problem to report
        return f"{need.module} is installed but does not import ({type(exc).__name__}: {exc}); {need.reason} needs it"
    if need.cuda:
        return _cuda_problem(module, need)
    return None


def problems(needs: Sequence[Need], *, import_modules: bool) -> list[str]:
    """What is wrong with this environment for ``needs`` (empty when nothing is).

    Installed versions are read from the package metadata; with ``import_modules`` each package
    that passes is imported too. A need for a CUDA build (torch) is always imported: only the
    imported module says how it was built.
    """
    out = []
    for need in needs:
        problem = _version_problem(need)
        if problem is None and (import_modules or need.cuda):
            problem = _import_problem(need)
        if problem is not None:
            out.append(problem)
    return out


def check(needs: Sequence[Need], *, import_modules: bool = True) -> None:
    """Raise :class:`MissingPackageError` naming every problem of ``needs`` and the set-up command."""
    found = problems(needs, import_modules=import_modules)
    if found:
        lines = "\n".join(f"  - {p}" for p in found)
        raise MissingPackageError(
            f"this training job cannot run in {sys.prefix} (python {sys.executable}):\n{lines}\n"
            f"Set up this machine's environment with `{SETUP_COMMAND}` (README: set-up), or install the "
            "extras named in pyproject.toml (`pip install -e '.[vllm,deepspeed,qlora]'` with a CUDA torch 2.13.0)."
        )


def main(argv: list[str] | None = None) -> int:
    """Print what a job needs and what this environment has; exit 2 when something is missing."""
    parser = argparse.ArgumentParser(prog="python -m olmpipe.job.packages", description=__doc__.splitlines()[0])
    parser.add_argument("--strategy", default="single", help="resources.train.strategy")
    parser.add_argument("--processes", type=int, default=1, help="training ranks")
    parser.add_argument("--vllm-mode", choices=VLLM_MODES, default="none",
                        help="train.grpo.vllm_mode when train.grpo.use_vllm, else none")
    parser.add_argument("--cuda", action="store_true", help="the job trains on CUDA (needs a CUDA torch)")
    parser.add_argument("--no-import", action="store_true", help="check installed versions only")
    ns = parser.parse_args(argv)
    needs = job_needs(strategy=ns.strategy, processes=ns.processes, vllm_mode=ns.vllm_mode, cuda=ns.cuda)
    for need in needs:
        found = installed_version(need.module)
        have = f"{found[0]} {found[1]}" if found else "missing"
        sys.stdout.write(f"{need.module}{need.versions or ''}: {have} ({need.reason})\n")
    try:
        check(needs, import_modules=not ns.no_import)
    except MissingPackageError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    sys.stdout.write("every package this job needs is installed\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
