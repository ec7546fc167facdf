"""A scored run folder's scores and run summary: ``scores.json``, ``scores.csv`` and ``summary.json``.

Written by the generate-and-score engine (:mod:`olmpipe.evaluate.engine`) into ``results/baseline/<model>/``
and ``results/evaluate/<model>/``: the olmOCR-Bench scores (overall with its 95% interval, per test
type, per JSONL file; beside them the same scores under the short-answer guard, key
``short_answer_guard`` and the ``guarded_*`` columns) as JSON and as a table, and the run statistics (pages, EOS share, failures,
tokens, throughput; the pipeline-compatible mode's counts under ``pipeline``). The report reads
the summary's counts back (:func:`read_pipeline_counts`).
"""

from __future__ import annotations

import csv
import json
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.records.files import atomic_writer, write_json

logger = logging.getLogger(__name__)

SCORES_JSON_NAME = "scores.json"
SCORES_CSV_NAME = "scores.csv"
SUMMARY_NAME = "summary.json"
#: The columns of ``scores.csv``.
SCORES_CSV_COLUMNS = ("scope", "name", "score", "tests", "ci95_low", "ci95_high",
                      "guarded_score", "guarded_ci95_low", "guarded_ci95_high")


def write_scores(run_dir: str | Path, score: Any) -> None:
    """Write ``scores.json`` (``score.to_json()``) and ``scores.csv`` of a bench score into ``run_dir``.

    ``score`` is a :class:`olmpipe.bench.aggregate.CandidateScore`. ``scores.csv`` has one row per
    scope (overall, each test type, each JSONL file) with its test count; the 95% interval
    (bootstrap within JSONL files, as olmOCR-Bench does) exists for the overall score only. The
    ``guarded_*`` columns hold the same scores under the short-answer guard (``score.guarded``,
    empty when the score has none).
    """
    run_dir = Path(run_dir)
    write_json(run_dir / SCORES_JSON_NAME, score.to_json())
    guarded = score.guarded or {}
    g_type, g_jsonl, g_ci = guarded.get("by_type", {}), guarded.get("by_jsonl", {}), guarded.get("ci95", ["", ""])
    total = sum(n for _, n in score.jsonl_counts.values())
    rows = [["overall", "overall", score.overall, total, score.ci95[0], score.ci95[1],
             guarded.get("overall", ""), g_ci[0], g_ci[1]]]
    rows += [
        ["type", name, value, score.type_counts.get(name, ""), "", "", g_type.get(name, ""), "", ""]
        for name, value in score.by_type.items()
    ]
    rows += [
        ["jsonl", name, value, score.jsonl_counts.get(name, (0, ""))[1], "", "", g_jsonl.get(name, ""), "", ""]
        for name, value in score.by_jsonl.items()
    ]
    with atomic_writer(run_dir / SCORES_CSV_NAME, newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(SCORES_CSV_COLUMNS)
        writer.writerows(rows)


def write_summary(run_dir: str | Path, summary: Mapping[str, Any]) -> None:
    """Write the run statistics ``summary.json`` into ``run_dir``."""
    write_json(Path(run_dir) / SUMMARY_NAME, summary)


def read_summary(run_dir: str | Path) -> dict[str, Any] | None:
    """The ``summary.json`` of a run folder; None (with a warning) when it is missing or unreadable."""
    path = Path(run_dir) / SUMMARY_NAME
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        logger.warning("%s: no readable run summary (%s)", path, exc)
        return None
    return data if isinstance(data, dict) else None


def read_pipeline_counts(run_dir: str | Path) -> dict[str, Any] | None:
    """The pipeline-mode counts of a run folder's ``summary.json`` (None: mode off, or no summary)."""
    data = read_summary(run_dir)
    counts = data.get("pipeline") if data is not None else None  # absent when the mode was off
    return counts if isinstance(counts, dict) else None
