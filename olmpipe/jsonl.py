"""Reading the JSONL files the stages exchange, with errors that name the file and the line.

Every stage reads records written by another (page index, generations, verdicts, metrics); one
reader keeps their error messages the same: ``<file>:<line>: <reason>``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any


def iter_jsonl(
    path: str | Path, *, error: type[Exception] = ValueError, what: str = "file", hint: str = ""
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, record)`` for each non-blank line of a JSONL file of JSON objects.

    Raises ``error`` with ``<file>: file not found`` (or ``cannot read the <what> (...)``, plus ``hint``),
    ``<file>:<line>: not valid JSON (...)`` or ``<file>:<line>: expected a JSON object``.
    """
    path = Path(path)
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        reason = "file not found" if isinstance(exc, FileNotFoundError) else (exc.strerror or str(exc))
        message = reason if what == "file" else f"cannot read the {what} ({reason})"
        raise error(f"{path}: {message}{hint}") from None
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise error(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def read_page_index(
    path: str | Path, *, required: tuple[str, ...], error: type[Exception] = ValueError
) -> list[dict[str, Any]]:
    """The records of a page index (``results/validate/pages.jsonl``), each with its ``_line``.

    Checks that every record has the ``required`` fields and a positive integer ``page`` and that
    no (pdf, page) occurs twice.
    """
    records: list[dict[str, Any]] = []
    seen: set[tuple[str, int]] = set()
    for lineno, record in iter_jsonl(path, error=error, what="page index", hint="; run the validate stage"):
        missing = [k for k in required if k not in record]
        if missing:
            raise error(f"{path}:{lineno}: page entry misses {', '.join(missing)}")
        page = record.get("page")
        if "page" in required and (not isinstance(page, int) or isinstance(page, bool) or page < 1):
            raise error(f"{path}:{lineno}: page must be a positive integer, got {page!r}")
        key = (str(record.get("pdf")), page)
        if key in seen:
            raise error(f"{path}:{lineno}: duplicate entry for {key[0]} page {key[1]}")
        seen.add(key)
        record["_line"] = lineno
        records.append(record)
    return records
