"""Generations: ``generations.jsonl`` of a run folder and its resume journal.

A run folder (``results/baseline/<model>/``, ``results/evaluate/<model>/``) holds one
:class:`GenerationRecord` per (pdf, page, repeat). The generate-and-score engine
(:mod:`olmpipe.evaluate.engine`) appends finished records to ``generations.journal.jsonl`` as they come
and writes ``generations.jsonl`` in one piece at the end; the comparison, the report and notebooks
read it back. A journal has one writer: :func:`hold_journal` (``.generations.journal.lock`` beside it,
naming the holder's pid, host and start time).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator
from dataclasses import MISSING, asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from olmpipe.procs import HolderLock, LockedError
from olmpipe.records.files import append_jsonl, iter_jsonl, write_jsonl

GENERATIONS_NAME = "generations.jsonl"
#: The append-only resume journal beside it (not a Snakemake output: see olmpipe.evaluate.engine).
JOURNAL_NAME = "generations.journal.jsonl"
#: The journal's lock beside it (:func:`hold_journal`): one writer per journal.
JOURNAL_LOCK_NAME = ".generations.journal.lock"
#: The fields every reader of ``generations.jsonl`` needs.
GENERATION_KEYS = ("pdf", "page", "repeat", "text")


@dataclass
class GenerationRecord:
    """One line of ``generations.jsonl``: the final answer for (pdf, page, repeat) and how it was obtained.

    ``text`` is the page text (front matter removed), the content of the candidate ``.md`` file;
    ``raw`` the model's full answer. ``failed`` is True when no attempt ended with EOS;
    ``failure`` then says why: ``"no_eos"`` (every attempt hit the token limit; the text of the
    last one is kept) or ``"error"`` (the last attempt failed in the backend; ``error`` says how);
    the pipeline mode's fallback pages may also be ``"invalid"`` (answers ended with EOS but none
    was usable).
    ``settings`` is the fingerprint of the generation settings, used to resume only compatible work.
    ``pipeline`` is set only in the pipeline-compatible mode (:mod:`olmpipe.generate.pipeline`):
    outcome, rotation attempts, applied rotation, ``fallback``; without it the line is written
    exactly as before the mode existed.
    """

    pdf: str
    page: int
    repeat: int
    image: str
    image_sha256: str
    model: str
    backend: str
    prompt: str
    settings: str
    text: str
    raw: str
    front_matter: dict[str, Any] | None
    front_matter_error: str | None
    finish_reason: str
    prompt_tokens: int
    completion_tokens: int
    seconds: float
    attempts: list[dict[str, Any]] = field(default_factory=list)
    failed: bool = False
    failure: str | None = None
    error: str | None = None
    pipeline: dict[str, Any] | None = None

    @property
    def key(self) -> tuple[str, int, int]:
        return (self.pdf, self.page, self.repeat)

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        if data["pipeline"] is None:
            del data["pipeline"]  # records of the plain mode keep their original keys
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> GenerationRecord:
        """Rebuild a record from a ``generations.jsonl`` line; ``ValueError`` names missing fields."""
        required = [f.name for f in fields(cls) if f.default is MISSING and f.default_factory is MISSING]
        missing = [name for name in required if name not in data]
        if missing:
            raise ValueError(f"generation record misses {', '.join(missing)}")
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def write_generations(path: str | Path, records: Iterable[GenerationRecord]) -> None:
    """Write ``generations.jsonl`` (or rewrite a journal) atomically, one record per line, in order."""
    write_jsonl(path, (record.to_json() for record in records))


def append_generations(journal: str | Path, records: Iterable[GenerationRecord]) -> None:
    """Append finished records to the resume journal (flushed: a kill loses at most the last line)."""
    append_jsonl(journal, (record.to_json() for record in records))


def read_generations(path: str | Path, *, error: type[Exception] = ValueError) -> list[dict[str, Any]]:
    """The lines of ``generations.jsonl`` as dicts, each with :data:`GENERATION_KEYS`; ``error`` names file and line."""
    rows = []
    for lineno, record in iter_jsonl(path, error=error):
        missing = [k for k in GENERATION_KEYS if k not in record]
        if missing:
            raise error(f"{path}:{lineno}: generation lacks key(s) {', '.join(missing)}")
        rows.append(record)
    return rows


class JournalInUseError(RuntimeError):
    """Another job writes the run folder's journal; the message names it (pid, host, start time)."""


@contextlib.contextmanager
def hold_journal(folder: str | Path) -> Iterator[Path]:
    """Hold the one-writer lock of ``folder``'s journal (:data:`JOURNAL_LOCK_NAME`, an
    :class:`olmpipe.procs.HolderLock`) for a job's whole run; yields the journal's path. A second job
    on the folder (a ``--rerun-incomplete`` while the first still runs) stops at once with
    :class:`JournalInUseError` naming the first, before it reads or writes anything: two writers would
    generate the same pages twice and interleave their lines."""
    folder = Path(folder)
    journal = folder / JOURNAL_NAME
    try:
        lock = HolderLock(folder / JOURNAL_LOCK_NAME).acquire()
    except LockedError as exc:
        raise JournalInUseError(
            f"{journal} is being written by another job ({exc.who}); stop that job first (a generation job "
            "stops when its Snakemake is gone) or wait for it: two writers would generate the same pages twice"
        ) from None
    try:
        yield journal
    finally:
        lock.release()
