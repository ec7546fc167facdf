"""The first step of a training job: what it is asked to do, and whether this process can do it.

:func:`check` resolves the device and the precision, computes the seed's knobs once, runs the
preflight (:mod:`olmpipe.job.preflight`: settings this device or model cannot train) and the
trainer's own checks, sets the CPU threads and joins the process group -- all before anything is
read or loaded, so that a job that cannot run stops within a second with one line naming the key.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from olmpipe.job.distributed import init_distributed
from olmpipe.job.kinds import JobKind

if TYPE_CHECKING:
    from olmpipe.job.precision import Precision

logger = logging.getLogger(__name__)

__all__ = ["JobRequest", "JobSetup", "check"]


@dataclass(frozen=True)
class JobRequest:
    """What a training job is asked to do: the config and seed, the base model, the page index and
    validated tests it reads, the run folder it writes and the final model folder it publishes."""

    cfg: Mapping[str, Any]
    seed: int
    model_path: str | Path
    pages: str | Path
    tests_dir: str | Path
    run_dir: Path
    final_dir: Path


@dataclass(frozen=True)
class JobSetup:
    """A checked request: the device it trains on, its precision and the seed's knobs."""

    request: JobRequest
    kind: JobKind
    device: str
    precision: Precision
    knobs: Mapping[str, Any]

    @property
    def cfg(self) -> Mapping[str, Any]:
        return self.request.cfg

    @property
    def section(self) -> Mapping[str, Any]:
        """The trainer's config section (``train`` for GRPO)."""
        return self.kind.section_of(self.request.cfg)

    @property
    def peft(self) -> Mapping[str, Any]:
        return self.section["peft"]

    @property
    def seed(self) -> int:
        return self.request.seed

    @property
    def run_dir(self) -> Path:
        return self.request.run_dir

    @property
    def final_dir(self) -> Path:
        return self.request.final_dir

    @property
    def model_path(self) -> str | Path:
        return self.request.model_path

    @property
    def max_steps(self) -> int:
        return self.knobs["max_steps"]


def check(request: JobRequest, kind: JobKind, trainer_check: Callable[[JobSetup], None]) -> JobSetup:
    """The checked :class:`JobSetup` of ``request`` for a trainer of ``kind``; ``trainer_check``: its
    own checks (:meth:`olmpipe.job.steps.TrainerSteps.check`). Raises
    :class:`olmpipe.job.errors.JobSetupError` (or ``ValueError``) naming what this job cannot train."""
    import torch

    from olmpipe.job.peft import check_setup
    from olmpipe.job.precision import resolve_device, resolve_precision
    from olmpipe.job.preflight import check_job

    section = kind.section_of(request.cfg)
    device = resolve_device(section["device"])
    # what this device or the model cannot train, before anything is built or loaded (also checked
    # when Snakemake plans the job: olmpipe.job.preflight)
    check_job(request.cfg, device, request.model_path, kind)
    # float32 master weights with bf16 compute unless pure_bf16 (olmpipe.job.precision)
    precision = resolve_precision(section, device)
    if precision.weights == "bfloat16" and any(os.environ.get(f"ACCELERATE_USE_{name}", "").lower() == "true"
                                               for name in ("DEEPSPEED", "FSDP")):
        logger.warning("%s.pure_bf16 has no effect under DeepSpeed or FSDP, which keep float32 master weights",
                       kind.section)
    if device == "cpu":
        torch.set_num_threads(request.cfg["resources"][kind.section]["cpus_per_task"])
    setup = JobSetup(request, kind, device, precision, kind.knobs(section, request.seed))
    trainer_check(setup)
    init_distributed(setup.knobs["ddp_timeout"])
    check_setup(section["peft"], device, setup.knobs)
    return setup
