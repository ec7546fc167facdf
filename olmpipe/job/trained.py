"""The record of the pages a run trained on, which evaluation holds its eval split to.

A model's scores on pages it was trained on measure memory, not reading. Nothing stopped that:
after a finished run, ``bench.split.seed`` changed with ``train.resume: continue`` trained on, and
then evaluated on, a split whose eval pages included pages the continued checkpoint had trained on.
So every run folder keeps ``olmpipe_trained_pages.jsonl`` (:data:`olmpipe.records.train.TRAINED_PAGES_NAME`):

- the pages of the training set the job builds (its examples' ``pdf`` and ``page``: GRPO's train
  split, SFT's pairs of bench pages), added when the
  job begins training (:func:`record_trained_pages`), over every resume (a run continued on another
  split keeps the pages of the first), and moved aside with the run on ``train.resume: restart``;
- the pages its base model was trained on, when the base folder records them (a run on an SFT
  model's output, or on another run's model: the weights hold what both trained on).

The final ``model/`` gets a copy (:func:`olmpipe.job.final.write_final`), the soup the union of its
seeds' (:mod:`olmpipe.train.soup`); the evaluation of a model refuses eval pages its folder records
(or flags them, ``eval_run.on_trained_pages``; :mod:`olmpipe.evaluate.engine`). The job warns at
start already when the page index's eval split holds pages the run has trained on.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from olmpipe.records.train import (
    TRAINED_PAGES_NAME,
    trained_pages_of,
    unite_trained_pages,
    write_trained_pages,
)

logger = logging.getLogger(__name__)

__all__ = ["record_trained_pages", "training_set_pages"]


def training_set_pages(data: Any) -> list[tuple[str, int]]:
    """The bench pages (pdf, page) of a training set (:class:`olmpipe.job.steps.TrainingSet`): its
    ``pages``, else its dataset's ``pdf`` and ``page`` columns; none when it names none."""
    if data.pages:
        return [(str(pdf), int(page)) for pdf, page in data.pages]
    dataset = data.dataset
    columns = getattr(dataset, "column_names", None) or []
    if dataset is None or "pdf" not in columns or "page" not in columns:
        return []
    return [(str(pdf), int(page)) for pdf, page in zip(dataset["pdf"], dataset["page"], strict=True)]


def record_trained_pages(run_dir: str | Path, base_model: str | Path, pages: list[tuple[str, int]], *,
                         step: int, eval_pages: list[tuple[str, int]] | None = None) -> dict[tuple[str, int], str]:
    """Add ``pages`` (the training set, trained on from ``step``) and the base model's recorded pages to
    ``run_dir``'s record; returns the whole record. Called by rank 0 before training begins.
    ``eval_pages``: the page index's eval split, warned about where it holds recorded pages."""
    run_dir = Path(run_dir)
    ours = {key: f"{run_dir} (from step {step})" for key in pages}
    base = {key: by or f"the base model {base_model}" for key, by in trained_pages_of(base_model).items()}
    record = unite_trained_pages(trained_pages_of(run_dir), base, ours)
    if not pages:
        logger.warning("the training set names no pages (pdf, page): %s records none of this run's",
                       run_dir / TRAINED_PAGES_NAME)
    write_trained_pages(run_dir / TRAINED_PAGES_NAME, record)
    seen = sorted(set(eval_pages or ()) & set(record))
    if seen:
        shown = ", ".join(f"{pdf} page {page} ({record[(pdf, page)]})" for pdf, page in seen[:3])
        logger.warning("%d eval page(s) of the page index are pages this model has been trained on (%s%s): their "
                       "scores would measure memory, so the evaluation refuses them (eval_run.on_trained_pages: "
                       "refuse; flag evaluates them flagged); bench.split as it was when they were trained keeps "
                       "them out of the eval split", len(seen), shown, " ..." if len(seen) > 3 else "")
    return record
