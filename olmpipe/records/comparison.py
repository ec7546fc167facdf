"""The comparison: ``results/evaluate/comparison.json`` and ``comparison.csv``.

Written by the evaluate stage (:mod:`olmpipe.evaluate.compare` builds it); read by the report, its plots,
``olmpipe evaluate --table`` and notebooks. The JSON holds everything (score rows, per-test and
per-page tables, settings, guards); the CSV one line per score row (:data:`CSV_COLUMNS`).
"""

from __future__ import annotations

import csv
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.records.files import atomic_writer, write_json

COMPARISON_JSON_NAME = "comparison.json"
COMPARISON_CSV_NAME = "comparison.csv"
CSV_COLUMNS = (
    "scope", "name", "tests", "baseline", "baseline_low", "baseline_high", "trained", "trained_low",
    "trained_high", "difference", "difference_low", "difference_high", "p_value", "test_method",
    "changed", "gained", "lost",
)  # fmt: skip


def write_comparison(
    data: Mapping[str, Any], csv_rows: Sequence[Mapping[str, Any]], json_path: str | Path, csv_path: str | Path
) -> None:
    """Write ``comparison.json`` (``data``, the whole comparison) and ``comparison.csv`` (``csv_rows``), atomically."""
    write_json(json_path, data)
    with atomic_writer(csv_path, newline="") as fh:
        writer = csv.DictWriter(fh, fieldnames=CSV_COLUMNS)
        writer.writeheader()
        writer.writerows(csv_rows)


def read_comparison(path: str | Path, *, error: type[Exception] = ValueError) -> dict[str, Any]:
    """Read a ``comparison.json``; ``error`` names the file (and line) of a missing or malformed one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise error(f"{path}: file not found (run the evaluate stage first)") from None
    except json.JSONDecodeError as exc:
        raise error(f"{path}:{exc.lineno}: not valid JSON: {exc.msg}") from None
    if not isinstance(data, dict) or "rows" not in data:
        raise error(f"{path}: not a comparison file (no 'rows')")
    return data
