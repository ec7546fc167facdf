"""Stage 4: GRPO training of the OCR model with olmOCR-Bench unit tests as rewards (TRL GRPOTrainer).

    python -m olmpipe.train --seed 0 --model results/model/tiny --pages results/validate/pages.jsonl \\
        --tests-dir results/validate/tests --run-dir results/train/seed0

One seed's run is :func:`olmpipe.train.run.train_seed`; the modules, by job:

- :mod:`~olmpipe.train.cli`: the command line (``--config``/``--config-json``, exit codes);
- :mod:`~olmpipe.train.jobconfig`: the config sections a ``train_seed`` job receives;
- :mod:`~olmpipe.train.data`: the training set from the page index (prompts, images, test ids);
- :mod:`~olmpipe.train.args`: the seed's GRPO knobs (``grpo_knobs``, once per job) and ``GRPOConfig``;
- :mod:`~olmpipe.train.grpo_fields`: every ``GRPOConfig`` field, checked by name and type;
- :mod:`~olmpipe.train.precision`: float32 master weights, bfloat16 compute, the final weights;
- :mod:`~olmpipe.train.peft`: LoRA/QLoRA adapters;
- :mod:`~olmpipe.train.trainer`: ``GRPOTrainer`` with a resume that restores the trained weights;
- :mod:`~olmpipe.train.callbacks`: metrics files, completions table, SIGTERM, run state;
- :mod:`~olmpipe.train.health`: stops a run that cannot learn (rewards failing, non-finite values);
- :mod:`~olmpipe.train.checkpoints`: what a complete checkpoint is (commit, check, list, rotate);
- :mod:`~olmpipe.train.resume`: which checkpoint a run continues from, and what a changed setting
  does to it (trajectory settings and their fingerprint);
- :mod:`~olmpipe.train.runlock`: one trainer per run folder, none outliving its job;
- :mod:`~olmpipe.train.vllm_server`: the ``trl vllm-serve`` process of a server-mode job;
- :mod:`~olmpipe.train.packages`: the packages a job needs, checked on its node at start;
- :mod:`~olmpipe.train.preflight`: settings the job that runs them cannot train, checked before it;
- :mod:`~olmpipe.train.signals`: SIGTERM while loading (exit 75 at once) and while training;
- :mod:`~olmpipe.train.final`: the final ``model/`` (and ``adapter/``), and the kept copy of it;
- :mod:`~olmpipe.train.errors`: the errors a job stops with (one line, exit 2);
- :mod:`~olmpipe.train.run`: one seed's run, tying them together.
"""

from __future__ import annotations

from olmpipe.train.cli import main

__all__ = ["main"]
