"""Command line of the SFT stage: ``olmpipe sft`` (or ``python -m olmpipe.sft``).

    olmpipe sft pairs [--config C]                 # the pairs (rule sft_pairs; olmpipe.sft.pairs)
    python -m olmpipe.sft --seed 0 --model M --pages results/sft/pairs.jsonl --tests-dir T \\
        --run-dir results/sft/seed0 [--config C | --config-json '{...}']      # one seed (rule sft_seed)

The job's command line and exit codes are every training job's (:mod:`olmpipe.job.cli`): 0
finished, 75 stopped by SIGTERM after a checkpoint, 2 bad arguments, config or packages, 4 a
non-finite loss, gradient or weight, 1 any other error. ``--pages`` is the pairs file;
``--tests-dir`` is accepted for the common command line and not read.
"""

from __future__ import annotations

from olmpipe.job.cli import run_cli


def _sft_steps():
    from olmpipe.sft.steps import SFTSteps

    return SFTSteps


def main(argv: list[str] | None = None) -> int:
    import sys

    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["pairs"]:
        from olmpipe.sft.pairs import main as pairs_main

        return pairs_main(argv[1:])
    return run_cli(_sft_steps, argv, prog="olmpipe sft",
                   description="Supervised fine-tuning of one seed on (page image, answer) pairs "
                               "(`olmpipe sft pairs` writes the pairs).")
