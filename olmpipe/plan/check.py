"""The check the train rule runs before it submits a job: settings the job cannot train, the
memory plan, TRL's batch arithmetic with the GPUs the job really gets; then its launch prefix.

    launch=lambda wildcards, resources: checked_launch_prefix(config, resources.gpu, MODEL_DIR)
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.config.processes import LaunchError, plan
from olmpipe.job.kinds import GRPO, JobKind
from olmpipe.launch.commands import launch_prefix
from olmpipe.models.known import KNOWN_MODELS
from olmpipe.plan.memory import MemoryPlan, memory_plan
from olmpipe.plan.shape import PlanError, load_shape

logger = logging.getLogger(__name__)


def model_for_plan(cfg: Mapping[str, Any], model: str | Path | None = None) -> str:
    """The model the plan reads: ``model``, else the stages' (:func:`olmpipe.layout.model_dir`), or
    the hub id itself (:data:`KNOWN_MODELS`) while its download folder does not exist yet."""
    from olmpipe.layout import hub_model, model_dir

    if model is not None:
        return str(model)
    folder = model_dir(cfg)
    hub = hub_model(cfg)
    return hub[0] if hub and not Path(folder).exists() else folder


def check_fits(cfg: Mapping[str, Any], gpus: int, model: str | Path, slurm_extra: str | None = None,
               kind: JobKind = GRPO) -> MemoryPlan | None:
    """Raise :class:`PlanError` naming the terms that do not fit (GPU memory, or a checkpoint that
    cannot be written within the stop grace or SLURM's signal lead); None when there is nothing to check.

    CPU jobs (``gpus == 0``) have no GPU memory to plan. A model whose shapes are unknown yet (the
    embedded model before it is built) is logged and skipped.
    """
    if gpus <= 0:
        return None
    try:
        shape = load_shape(model)
    except PlanError as exc:
        from olmpipe.layout import RESULTS

        if Path(model).parts[:1] == RESULTS.parts and not Path(model).exists():
            if cfg["model"]["path"] in KNOWN_MODELS:  # a hub id not downloaded yet: its known sizes
                shape = load_shape(cfg["model"]["path"])
            else:
                logger.warning("memory plan skipped until the model is built or downloaded: %s", exc)
                return None
        else:
            raise
    result = memory_plan(cfg, shape, gpus, slurm_extra=slurm_extra, kind=kind)
    if not result.fits:
        what = [w for w, bad in (("does not fit in GPU memory", result.problems),
                                 ("cannot write its checkpoint in time", result.checkpoints.problems)) if bad]
        raise PlanError(f"the {kind.label} training job {' and '.join(what)} (olmpipe plan prints the table):\n"
                        + "\n".join(f"  - {m}" for m in result.all_problems))
    return result


@functools.cache
def _warn_missing_packages(needs: tuple[Any, ...]) -> None:
    """Warn (once per set of needs, not once per seed) when this environment lacks a package the
    training jobs need. Only a warning: the jobs may run in another environment (a GPU node's, or
    ``--sdm conda``'s); each job checks its own node at start and stops there
    (:mod:`olmpipe.job.packages`)."""
    from olmpipe.job.packages import SETUP_COMMAND, problems

    missing = problems(needs, import_modules=False)
    if missing:
        logger.warning("this environment lacks what the training jobs need (%s); a job stops at start unless "
                       "its node has it (`%s` sets one up)", "; ".join(missing), SETUP_COMMAND)


def checked_launch_prefix(cfg: Mapping[str, Any], gpus: int, model: str | Path, slurm_extra: str | None = None,
                          kind: JobKind = GRPO) -> str:
    """A training rule's launch prefix (``train_seed``; ``sft_seed`` with ``kind`` SFT), after
    :func:`olmpipe.job.preflight.job_problems` (settings this job's device or model cannot train) and
    :func:`check_fits` (raises before anything starts); ``slurm_extra``: the rule's resource of that
    name (a profile's ``--signal`` lead)."""
    from olmpipe.job.preflight import job_problems

    res = cfg["resources"][kind.section]
    problems = job_problems(cfg, gpus, model, kind)
    if problems:
        what = "training job" if kind is GRPO else f"{kind.label} training job"
        raise LaunchError(f"the {what} cannot run with these settings (checked before it is submitted):\n"
                          + "\n".join(f"  - {p}" for p in problems))
    check_fits(cfg, gpus, model, slurm_extra, kind)
    from olmpipe.job.packages import config_needs

    processes = plan(gpus, res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    if kind is GRPO:
        from olmpipe.config import seed_batch_problems

        batch = seed_batch_problems(cfg, processes)  # TRL's batch arithmetic with the GPUs this job really gets
        if batch:
            raise LaunchError(f"the training batch does not fit {processes} training process(es) "
                              f"({gpus} GPU(s)):\n" + "\n".join(f"  - {p}" for p in batch))
    _warn_missing_packages(tuple(config_needs(cfg, processes=processes, kind=kind)))
    return launch_prefix(gpus, res["launcher"], res["vllm_server_gpus"], module=kind.module, strategy=res["strategy"],
                         nodes=res["nodes"], stop_grace_s=res["stop_grace_s"])
