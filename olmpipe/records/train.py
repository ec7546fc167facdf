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
- ``.olmpipe.lock``: the run lock (:mod:`olmpipe.job.runlock`), never moved aside;
- ``olmpipe_trained_pages.jsonl`` (:data:`TRAINED_PAGES_NAME`): every page whose tests trained the
  run's weights, this run's (over all its resumes) and its base model's; the run copies it into each
  model folder it publishes and the soup unites its seeds' (:mod:`olmpipe.job.trained`), so that any
  model folder says which pages an evaluation must not score (:mod:`olmpipe.evaluate.engine`).

The final model folder's own file is :data:`olmpipe.records.models.TRAIN_INFO_NAME`.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

from olmpipe.records.files import iter_jsonl, write_jsonl

RUN_STATE_NAME = "olmpipe_run.json"
DATASET_NAME = "dataset.json"
TRAIN_SUMMARY_NAME = "train_summary.json"
WANDB_ID_NAME = "wandb_run_id"
LOCK_NAME = ".olmpipe.lock"
#: In ``model.kept/`` only: the step and run settings of the kept final model (:mod:`olmpipe.job.final`).
KEPT_STATE_NAME = "olmpipe_kept.json"

#: In a run folder and in every model folder it publishes: the pages that trained the weights.
TRAINED_PAGES_NAME = "olmpipe_trained_pages.jsonl"


def write_trained_pages(path: str | Path, pages: Mapping[tuple[str, int], str]) -> None:
    """Write ``olmpipe_trained_pages.jsonl`` atomically: one ``{"pdf", "page", "by"}`` line per page,
    sorted; ``by`` names what trained on it (a run folder, or the base model it came with)."""
    write_jsonl(path, ({"pdf": pdf, "page": page, "by": by} for (pdf, page), by in sorted(pages.items())))


def read_trained_pages(path: str | Path, *, error: type[Exception] = ValueError) -> dict[tuple[str, int], str]:
    """The pages of an ``olmpipe_trained_pages.jsonl`` ({(pdf, page): by}; empty when the file does not
    exist: a model no olmpipe run trained, or one of a release before the record); raises ``error``
    as ``<file>:<line>: <reason>``."""
    if not Path(path).is_file():
        return {}
    out: dict[tuple[str, int], str] = {}
    for lineno, row in iter_jsonl(path, error=error, what="trained pages"):
        try:
            out.setdefault((str(row["pdf"]), int(row["page"])), str(row.get("by") or ""))
        except (KeyError, TypeError, ValueError):
            raise error(f"{path}:{lineno}: a trained page needs pdf and page") from None
    return out


def unite_trained_pages(*records: Mapping[tuple[str, int], str]) -> dict[tuple[str, int], str]:
    """The pages of every record, each with the first ``by`` that names it."""
    out: dict[tuple[str, int], str] = {}
    for record in records:
        for key, by in record.items():
            out.setdefault(key, by)
    return out


def trained_pages_of(folder: str | Path, *, error: type[Exception] = ValueError) -> dict[tuple[str, int], str]:
    """The trained pages a model or run folder records (:data:`TRAINED_PAGES_NAME`; empty: none)."""
    return read_trained_pages(Path(folder) / TRAINED_PAGES_NAME, error=error)

