"""Command line of stage 4, GRPO: ``python -m olmpipe.train`` (or ``olmpipe train``).

    python -m olmpipe.train --seed 0 --model results/model/tiny \\
        --pages results/validate/pages.jsonl --tests-dir results/validate/tests \\
        --run-dir results/train/seed0 [--config config/config.yaml | --config-json '{...}']

Snakemake's ``train_seed`` rule runs this command (behind ``train.launcher``, e.g. ``accelerate
launch`` on several GPUs) with the job's config sections as ``--config-json``. The command line
and its exit codes are every training job's (:mod:`olmpipe.job.cli`): 0 finished, 75 stopped by
SIGTERM after a checkpoint, 2 bad arguments, config or packages, 3 a reward failed on every
completion for ``train.reward_error_steps`` steps, 4 a non-finite loss, gradient or weight, 1 any
other error.
"""

from __future__ import annotations

from olmpipe.job.cli import run_cli


def _grpo_steps():
    from olmpipe.train.run import GRPOSteps

    return GRPOSteps


def main(argv: list[str] | None = None) -> int:
    return run_cli(_grpo_steps, argv, prog="olmpipe train", description="GRPO training of one seed (stage 4).")
