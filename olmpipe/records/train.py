"""The olmpipe files of a training run folder (``results/train/seed<n>/``).

Beside TRL's checkpoints (``checkpoint-<step>/``) and the records of :mod:`.metrics` and
:mod:`.completions`, a run folder holds:

- ``checkpoint-<step>/olmpipe_run.json`` (:data:`RUN_STATE_NAME`): seed, step, wandb run id and
  trajectory settings of the checkpoint (:class:`olmpipe.job.callbacks.RunState` writes it,
  :mod:`olmpipe.job.resume` compares it);
- ``dataset.json``: the pages used and skipped (:class:`olmpipe.job.data.DatasetSummary`);
- ``model.kept/`` (:data:`olmpipe.layout.KEPT_MODEL_NAME`): hard links to the last final model and
  ``olmpipe_kept.json`` (:data:`KEPT_STATE_NAME`: its step and run settings)
  (:mod:`olmpipe.job.final`);
- ``train_summary.json``: TRL's end-of-training summary; ``wandb_run_id``: the wandb run it continues;
- ``.olmpipe.lock``: the run lock (:mod:`olmpipe.job.runlock`), never moved aside.

The final model folder's own file is :data:`olmpipe.records.models.TRAIN_INFO_NAME`.
"""

from __future__ import annotations

RUN_STATE_NAME = "olmpipe_run.json"
DATASET_NAME = "dataset.json"
TRAIN_SUMMARY_NAME = "train_summary.json"
WANDB_ID_NAME = "wandb_run_id"
LOCK_NAME = ".olmpipe.lock"
#: In ``model.kept/`` only: the step and run settings of the kept final model (:mod:`olmpipe.job.final`).
KEPT_STATE_NAME = "olmpipe_kept.json"

