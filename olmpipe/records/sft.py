"""The SFT stage's pairs ``results/sft/pairs.jsonl`` and their summary ``results/sft/pairs.json``.

Written by rule ``sft_pairs`` (:mod:`olmpipe.sft.pairs`), read by each SFT job (:mod:`olmpipe.sft.steps`)
and the report. Each line is an :class:`SFTPair`: a page image and the answer the model should
write for it, in GRPO's answer format (olmOCR front matter + page text), with where it came from.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from olmpipe.records.files import iter_jsonl, write_json, write_jsonl

#: The pairs file and its summary (under ``results/sft/``).
PAIRS_NAME = "pairs.jsonl"
PAIRS_SUMMARY_NAME = "pairs.json"
#: The fields every line has.
PAIR_FIELDS = ("name", "image", "image_sha256", "target", "source")


@dataclass(frozen=True)
class SFTPair:
    """One (page image, answer) pair.

    ``name``: the page's id (``<pdf>#<page>`` for a bench page, the file stem for a pairs folder);
    ``image``: the PNG (or JPEG) path; ``image_sha256``: its content, so that a resume on other
    pixels stops; ``target``: the answer (front matter + text); ``source``: ``bench:<candidate>`` or
    ``pairs:<folder>``; ``pdf``/``page``: the bench page (None for a pairs folder).
    """

    name: str
    image: str
    image_sha256: str
    target: str
    source: str
    pdf: str | None = None
    page: int | None = None


def write_pairs(path: str | Path, pairs: Iterable[SFTPair]) -> None:
    """Write the pairs atomically, one JSON object per line."""
    write_jsonl(path, (asdict(pair) for pair in pairs))


def read_pairs(path: str | Path, *, error: type[Exception] = ValueError) -> list[SFTPair]:
    """The pairs of ``path``; a line that is no pair raises ``error`` as ``<file>:<line>: <reason>``."""
    pairs = []
    for lineno, record in iter_jsonl(path, error=error, what="SFT pairs", hint="; run the sft_pairs rule"):
        missing = [k for k in PAIR_FIELDS if not isinstance(record.get(k), str)]
        if missing:
            raise error(f"{path}:{lineno}: SFT pair misses {', '.join(missing)} (or one is not a string)")
        page = record.get("page")
        if page is not None and (not isinstance(page, int) or isinstance(page, bool) or page < 1):
            raise error(f"{path}:{lineno}: page must be a positive integer or null, got {page!r}")
        pairs.append(SFTPair(**{k: record.get(k) for k in SFTPair.__dataclass_fields__}))
    return pairs


def write_pairs_summary(path: str | Path, summary: Mapping[str, Any]) -> None:
    write_json(path, dict(summary), indent=1)
