"""Stage 4: GRPO training of the OCR model with olmOCR-Bench unit tests as rewards (TRL GRPOTrainer).

    python -m olmpipe.train --seed 0 --model results/model/tiny --pages results/validate/pages.jsonl \\
        --tests-dir results/validate/tests --run-dir results/train/seed0

One seed's run is :func:`olmpipe.train.run.train_seed`; the modules, by job:

- :mod:`~olmpipe.train.cli`: the command line (``--config``/``--config-json``, exit codes);
- :mod:`~olmpipe.job.jobconfig`: the config sections a ``train_seed`` job receives;
- :mod:`~olmpipe.job.data`: the training set from the page index (prompts, images, test ids);
- :mod:`~olmpipe.train.args`: the seed's GRPO knobs (``grpo_knobs``, once per job) and ``GRPOConfig``;
- :mod:`~olmpipe.config.grpo_fields`: every ``GRPOConfig`` field, checked by name and type;
- :mod:`~olmpipe.job.precision`: float32 master weights, bfloat16 compute, the final weights;
- :mod:`~olmpipe.job.peft`: LoRA/QLoRA adapters;
- :mod:`~olmpipe.train.trainer`: ``GRPOTrainer`` with a resume that restores the trained weights;
- :mod:`~olmpipe.job.callbacks`: metrics files, completions table, SIGTERM, run state;
- :mod:`~olmpipe.job.health`: stops a run that cannot learn (rewards failing, non-finite values);
- :mod:`~olmpipe.job.checkpoints`: what a complete checkpoint is (commit, check, list, rotate);
- :mod:`~olmpipe.job.resume`: which checkpoint a run continues from, and what a changed setting
  does to it (trajectory settings and their fingerprint);
- :mod:`~olmpipe.job.runlock`: one trainer per run folder, none outliving its job;
- :mod:`~olmpipe.train.vllm_server`: the ``trl vllm-serve`` process of a server-mode job;
- :mod:`~olmpipe.job.packages`: the packages a job needs, checked on its node at start;
- :mod:`~olmpipe.job.preflight`: settings the job that runs them cannot train, checked before it;
- :mod:`~olmpipe.job.signals`: SIGTERM while loading (exit 75 at once) and while training;
- :mod:`~olmpipe.job.final`: the final ``model/`` (and ``adapter/``), and the kept copy of it;
- :mod:`~olmpipe.job.errors`: the errors a job stops with (one line, exit 2);
- :mod:`~olmpipe.train.run`: one seed's run, tying them together.
"""

from __future__ import annotations

from olmpipe.train.cli import main

__all__ = ["main"]
