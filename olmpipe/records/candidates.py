"""Candidate folders: page texts in olmOCR-Bench's layout, one ``.md`` file per (pdf, page, repeat).

A scored run folder holds ``candidate/`` (written by :mod:`olmpipe.evaluate.engine`), so that
olmOCR-Bench's own ``benchmark.py`` can score it; a bench folder's candidate folders (a reference
answer such as the synthetic bench's ``reference/``) are read by ``olmpipe bench score``
(:mod:`olmpipe.bench.aggregate`) and, for reference answers, by training
(:mod:`olmpipe.job.data`). The file name is ``<pdf path without .pdf>_pg<page>_repeat<k>.md``
(olmOCR-Bench's ``benchmark.py``); :func:`candidate_name` spells it, :func:`parse_candidate_name`
reads it back.
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterable
from pathlib import Path
from typing import Any

#: The candidate folder of a scored run folder.
CANDIDATE_DIR = "candidate"
#: The page text files of a candidate folder (matched recursively).
CANDIDATE_GLOB = "*.md"
_CANDIDATE_FILE = re.compile(r"^(?P<stem>.+)_pg(?P<page>\d+)_repeat(?P<repeat>\d+)\.md$")


def pdf_stem(pdf: str) -> str:
    """A PDF id without its ``.pdf`` suffix (any case), as candidate file names carry it."""
    return pdf[: -len(".pdf")] if pdf.lower().endswith(".pdf") else pdf


def candidate_name(pdf: str, page: int, repeat: int) -> str:
    """olmOCR-Bench's candidate file name: ``<pdf path without .pdf>_pg<page>_repeat<k>.md``.

    >>> candidate_name("headers/x.pdf", 2, 1)
    'headers/x_pg2_repeat1.md'
    """
    return f"{pdf_stem(pdf)}_pg{page}_repeat{repeat}.md"


def parse_candidate_name(relative: str) -> tuple[str, int, int] | None:
    """(pdf stem, page, repeat) of a candidate file's path relative to its folder; None for other files."""
    m = _CANDIDATE_FILE.match(relative)
    return (m["stem"], int(m["page"]), int(m["repeat"])) if m else None


def write_candidate(folder: str | Path, records: Iterable[Any]) -> int:
    """Rewrite ``folder`` to hold exactly one ``.md`` per record (its ``text``); returns the count.

    A record has ``pdf``, ``page``, ``repeat`` and ``text`` (a
    :class:`~olmpipe.records.generations.GenerationRecord`).
    """
    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    count = 0
    for record in records:
        target = folder / candidate_name(record.pdf, record.page, record.repeat)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(record.text, encoding="utf-8")
        count += 1
    return count
