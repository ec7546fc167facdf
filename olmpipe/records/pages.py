"""The page index ``results/validate/pages.jsonl``: one line per rendered page that has tests.

Written by the validate stage; read by generation (``eval`` pages), training (``train`` pages),
the report (page images) and notebooks. Each line is a :class:`PageEntry`. The difficulty filter
writes a subset of its lines, in the same format, as ``results/difficulty/train_pages.jsonl``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from olmpipe.records.files import iter_jsonl, write_jsonl

#: Where the validate stage writes the page index (under ``results/validate/``).
PAGE_INDEX_NAME = "pages.jsonl"
#: The fields a consumer that needs every part of an entry checks for (training).
PAGE_FIELDS = ("pdf", "page", "image", "split", "test_ids", "jsonl_files", "types")


@dataclass(frozen=True)
class PageEntry:
    """One line of ``pages.jsonl``: a rendered page, its split and the ids of its valid tests."""

    pdf: str
    page: int
    image: str
    split: Literal["train", "eval"]
    bench_dir: str
    test_ids: list[str]
    jsonl_files: dict[str, str]
    types: dict[str, str]


def write_page_index(path: str | Path, pages: Iterable[PageEntry]) -> None:
    """Write the page index atomically, one JSON object per entry (ASCII, as it always was)."""
    write_jsonl(path, (asdict(page) for page in pages), ensure_ascii=True)


def write_page_index_rows(path: str | Path, rows: Iterable[dict[str, Any]]) -> None:
    """Write page index records as :func:`read_page_index` returns them (their ``_line`` dropped), in
    the format of :func:`write_page_index`: e.g. the difficulty filter's index (a subset of the lines)."""
    write_jsonl(path, ({k: v for k, v in row.items() if k != "_line"} for row in rows), ensure_ascii=True)


def read_page_index(
    path: str | Path,
    *,
    required: tuple[str, ...] = ("pdf", "page", "image", "split"),
    error: type[Exception] = ValueError,
    split: str | None = None,
) -> list[dict[str, Any]]:
    """The records of a page index, each with its ``_line``; only those of ``split`` when given.

    Checks that every record has the ``required`` fields and a positive integer ``page`` and that
    no (pdf, page) occurs twice; raises ``error`` as ``<file>:<line>: <reason>``.
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
        if split is None or record.get("split") == split:
            records.append(record)
    return records
