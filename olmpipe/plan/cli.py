"""``olmpipe plan``: the memory table of a training job, "fits" or what to change.

    olmpipe plan --configfile config/olmocr2.yaml            # table per GPU, "fits" or why not
    olmpipe plan --configfile my.yaml --gpus 4 --model /models/qwen7b
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from olmpipe.config.processes import LaunchError
from olmpipe.job.kinds import GRPO, SFT
from olmpipe.plan.check import model_for_plan
from olmpipe.plan.checkpoint import ProfileError, profile_slurm_extra
from olmpipe.plan.memory import memory_plan
from olmpipe.plan.shape import PlanError, load_shape

GIB = 2**30
#: The SLURM profile ``olmpipe plan`` reads for the train rule's ``--signal`` lead (relative to the
#: working directory, the repository root).
DEFAULT_PROFILE = "workflow/profiles/slurm"
#: ``--stage`` -> the training job it plans.
KINDS_BY_STAGE = {"train": GRPO, "sft": SFT}



def load_configs(paths: Sequence[str | Path]) -> dict[str, Any]:
    """``config/config.yaml`` with each ``--configfile`` merged on top, validated (as Snakemake does)."""
    import yaml

    from olmpipe.config import DEFAULT_CONFIG_PATH, ConfigError, deep_update, validate_config

    merged: dict[str, Any] = {}
    for path in [DEFAULT_CONFIG_PATH, *paths]:
        try:
            raw = yaml.safe_load(Path(path).read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise ConfigError(f"{path}: cannot read the config: {exc}") from exc
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: the top level must be a mapping of sections")
        deep_update(merged, raw)
    return validate_config(merged)


def main(argv: list[str] | None = None) -> int:
    """``olmpipe plan``: print the memory table; exit 0 when it fits, 1 when not, 2 on bad input."""
    parser = argparse.ArgumentParser(prog="olmpipe plan", description="per-GPU memory plan of the training job (fits or what to change)")
    parser.add_argument("--configfile", nargs="+", default=[],
                        help="config files merged over config/config.yaml, as snakemake --configfile")
    parser.add_argument("--stage", choices=sorted(KINDS_BY_STAGE), default="train",
                        help="the training job to plan: train (GRPO, default) or sft")
    parser.add_argument("--gpus", type=int, default=None,
                        help="GPUs of the job (default: resources.<stage>.gpu)")
    parser.add_argument("--model", default=None, help="model folder or hub id (default: model.path)")
    parser.add_argument("--profile", default=None,
                        help="Snakemake profile folder whose set-resources.<rule>.slurm_extra gives SLURM's "
                             f"--signal lead (default: {DEFAULT_PROFILE} when it exists here; 'none' for no SLURM)")
    ns = parser.parse_args(argv)
    from olmpipe.config import ConfigError
    from olmpipe.job.preflight import job_problems

    if ns.gpus is not None and ns.gpus < 0:
        sys.stderr.write(f"olmpipe plan: --gpus {ns.gpus}: a job has 0 GPUs (a CPU job) or more\n")
        return 2
    kind = KINDS_BY_STAGE[ns.stage]
    try:
        cfg = load_configs(ns.configfile)
        gpus = cfg["resources"][kind.section]["gpu"] if ns.gpus is None else ns.gpus
        model = model_for_plan(cfg, ns.model)
        problems = job_problems(cfg, gpus, model, kind)
        if problems:
            raise PlanError(f"the {kind.label} training job cannot run with these settings:\n"
                            + "\n".join(f"  - {p}" for p in problems))
        if gpus <= 0:
            source = "--gpus 0" if ns.gpus is not None else f"resources.{kind.section}.gpu is 0"
            sys.stdout.write(f"{source}: a CPU job, no GPU memory to plan\n")
            return 0
        profile = ns.profile if ns.profile is not None else (DEFAULT_PROFILE if Path(DEFAULT_PROFILE).is_dir() else "none")
        extra = None if profile == "none" else profile_slurm_extra(profile, kind.rule)
        result = memory_plan(cfg, load_shape(model), gpus, slurm_extra=extra, kind=kind,
                             signal_source=f"{Path(profile) / 'config.yaml'}" if profile != "none" else "no profile")
    except (ConfigError, PlanError, LaunchError, ProfileError) as exc:
        sys.stderr.write(f"olmpipe plan: {exc}\n")
        return 2
    sys.stdout.write(f"{kind.label} job ({kind.rule}, resources.{kind.section})\n" + result.table() + "\n")
    return 0 if result.fits else 1


if __name__ == "__main__":
    sys.exit(main())
