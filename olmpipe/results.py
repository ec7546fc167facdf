"""A run's results as pandas DataFrames: the public API for notebooks.

The stages write their records as files (``docs/architecture.md``, "Files between stages"); this
module reads them back into tables, one row per record, so that a question about a run is one
pandas expression rather than a loop over JSON lines::

    from olmpipe.results import load_results
    results = load_results("results")
    results.verdicts.groupby(["stage", "type"])["passed"].mean().unstack("stage")

:func:`load_results` finds every run of a results folder: ``baseline/<model>/`` and
``evaluate/<model>/`` (verdicts, generations; columns ``stage`` and ``model`` say which),
``train/seed<n>/`` (metrics, completions; column ``seed``), ``difficulty/`` (the difficulty
stage's per-page statistics) and ``evaluate/comparison.json``. Each
table is read when first used; a stage that has not run gives an empty table. The single-file
readers (:func:`read_verdicts`, ...) take one run folder or file. A malformed line raises
``ValueError`` naming the file and line; every file is read through its owner in :mod:`olmpipe.records`.
"""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import pandas as pd

from olmpipe.layout import (
    BASELINE_DIR,
    COMPARISON_JSON,
    DIFFICULTY_DIR,
    EVALUATE_DIR,
    RESULTS,
    TRAIN_DIR,
    in_results,
    seed_of,
)
from olmpipe.records import completions, difficulty, generations, metrics, verdicts
from olmpipe.records.comparison import read_comparison as read_comparison_json

#: The scored run folders' stages: (``stage`` column, folder under the results folder).
_SCORED = (("baseline", in_results(BASELINE_DIR)), ("evaluate", in_results(EVALUATE_DIR)))


def read_verdicts(run_dir: str | Path) -> pd.DataFrame:
    """``verdicts.jsonl`` of a scored run folder: one row per test and repeat (``passed`` is bool)."""
    rows = [row for _, row in verdicts.read_verdicts(Path(run_dir) / verdicts.VERDICTS_NAME)]
    frame = pd.DataFrame.from_records(rows)
    columns = list(verdicts.VERDICT_COLUMNS)
    return frame.reindex(columns=[*columns, *[c for c in frame.columns if c not in columns]])


def read_generations(run_dir: str | Path) -> pd.DataFrame:
    """``generations.jsonl`` of a run folder: one row per (pdf, page, repeat); nested fields stay dicts/lists."""
    return pd.DataFrame.from_records(generations.read_generations(Path(run_dir) / generations.GENERATIONS_NAME))


def read_metrics(train_dir: str | Path) -> pd.DataFrame:
    """``metrics.jsonl`` of a training run folder (``results/train/seed<n>/``): one row per logged step.

    Empty when the file does not exist yet (a run before its first logged step).
    """
    rows = metrics.read_metrics(Path(train_dir) / metrics.METRICS_JSONL)
    return pd.DataFrame.from_records(rows) if rows else pd.DataFrame()


def read_completions(train_dir: str | Path) -> pd.DataFrame:
    """Every ``completions/step*.jsonl`` of a training run folder, in step order.

    One row per completion: ``step``, ``page`` (``<pdf>#<page>``), ``completion``, ``advantage``,
    one ``rewards/<name>`` column per reward function and ``verdicts`` (a list of dicts).
    """
    records = completions.read_completions(train_dir)
    if not records:
        return pd.DataFrame()
    return pd.json_normalize(records, sep="/", max_level=1)


def read_comparison(path: str | Path) -> pd.DataFrame:
    """The score rows of ``comparison.json`` (overall, per type, per JSONL file), as ``comparison.csv`` holds them.

    :func:`olmpipe.records.comparison.read_comparison` returns the whole file (per-test and
    per-page tables, guards).
    """
    return pd.DataFrame.from_records(read_comparison_json(path)["rows"])


def read_difficulty(folder: str | Path) -> pd.DataFrame:
    """The difficulty stage's ``stats.jsonl`` (``results/difficulty/``): one row per sampled train page.

    Columns: ``pdf``, ``page``, ``samples``, ``scored``, ``rewards`` (the k totals), ``mean``,
    ``spread``, ``zero_spread``, ``pass_rate``, ``all_pass``, ``all_fail``, ``by_reward`` and
    ``tests`` (dicts), ... and ``dropped``: the filter's reason when it left the page out, else missing
    (also when the filter has not run). Empty when the stage has not run.
    """
    folder = Path(folder)
    if not (folder / difficulty.STATS_NAME).exists():
        return pd.DataFrame()
    frame = pd.DataFrame.from_records([page.to_json() for page in difficulty.read_stats(folder / difficulty.STATS_NAME)])
    reasons = {}
    if (folder / difficulty.DROPPED_NAME).exists():
        reasons = {(d["pdf"], d["page"]): d["reason"] for d in difficulty.read_dropped(folder / difficulty.DROPPED_NAME)}
    frame["dropped"] = [reasons.get(key) for key in zip(frame["pdf"], frame["page"], strict=True)]
    return frame


def _concat(frames: list[pd.DataFrame]) -> pd.DataFrame:
    frames = [f for f in frames if not f.empty]
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


class Results:
    """The records of one results folder as DataFrames, each read on first use (see the module docstring)."""

    def __init__(self, root: str | Path = RESULTS) -> None:
        self.root = Path(root)
        if not self.root.is_dir():
            raise FileNotFoundError(f"{self.root}: no such results folder (run the workflow, or give its path)")

    def scored_runs(self) -> list[tuple[str, str, Path]]:
        """(stage, model, folder) of every scored run: ``baseline/<model>/`` and ``evaluate/<model>/``."""
        return [(stage, folder.name, folder) for stage, runs in _SCORED
                for folder in sorted((self.root / runs).glob(f"*/{verdicts.VERDICTS_NAME}"))
                for folder in [folder.parent]]

    def train_runs(self) -> list[tuple[int, Path]]:
        """(seed, folder) of every training run folder ``train/seed<n>/``, by seed."""
        train = self.root / in_results(TRAIN_DIR)
        return sorted((seed, d) for d in train.glob("*") if (seed := seed_of(d)) is not None)

    def _scored(self, reader) -> pd.DataFrame:
        return _concat([reader(folder).assign(stage=stage, model=model)
                        for stage, model, folder in self.scored_runs()])

    @cached_property
    def verdicts(self) -> pd.DataFrame:
        """Every test verdict of every scored run, with ``stage`` and ``model``."""
        return self._scored(read_verdicts)

    @cached_property
    def generations(self) -> pd.DataFrame:
        """Every generation of every scored run, with ``stage`` and ``model``."""
        return self._scored(lambda folder: read_generations(folder) if (folder / generations.GENERATIONS_NAME).exists()
                            else pd.DataFrame())

    @cached_property
    def metrics(self) -> pd.DataFrame:
        """The training metrics of every seed, with ``seed``."""
        return _concat([read_metrics(folder).assign(seed=seed) for seed, folder in self.train_runs()])

    @cached_property
    def completions(self) -> pd.DataFrame:
        """The logged training completions of every seed, with ``seed``."""
        return _concat([read_completions(folder).assign(seed=seed) for seed, folder in self.train_runs()])

    @cached_property
    def difficulty(self) -> pd.DataFrame:
        """The difficulty stage's per-page statistics with the filter's reason (empty before the stage)."""
        return read_difficulty(self.root / in_results(DIFFICULTY_DIR))

    @cached_property
    def comparison(self) -> pd.DataFrame:
        """The trained-vs-baseline score rows (empty before the evaluate stage)."""
        path = self.root / in_results(COMPARISON_JSON)
        return read_comparison(path) if path.exists() else pd.DataFrame()


def load_results(root: str | Path = RESULTS) -> Results:
    """The results folder ``root`` (the workflow's ``results/``) as DataFrames: see :class:`Results`."""
    return Results(root)
