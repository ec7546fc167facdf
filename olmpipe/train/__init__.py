"""Stage 4: GRPO training of the OCR model with olmOCR-Bench unit tests as rewards (TRL GRPOTrainer).

    python -m olmpipe.train --seed 0 --model results/model/tiny --pages results/validate/pages.jsonl \\
        --tests-dir results/validate/tests --run-dir results/train/seed0

Modules: :mod:`~olmpipe.train.data` (page index -> dataset), :mod:`~olmpipe.train.args`
(``GRPOConfig`` from the config), :mod:`~olmpipe.train.precision` (float32 master weights, bf16
compute, the final weights), :mod:`~olmpipe.train.callbacks` (metrics files, completions
table, SIGTERM, run state), :mod:`~olmpipe.train.run` (one seed's run, resume),
:mod:`~olmpipe.train.cli` (the command line).
"""

from __future__ import annotations

from olmpipe.train.cli import main

__all__ = ["main"]
