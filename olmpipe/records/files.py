"""File primitives every stage shares: atomic writes, JSON Lines, content hashes.

One implementation of each, so that every inter-stage file is written the same crash-safe way
(a reader never sees half a file: the text goes to ``<name>.tmp`` beside the target, which is then
renamed over it) and read with the same error messages (``<file>:<line>: <reason>``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

logger = logging.getLogger(__name__)


@contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """A temporary path (``<path>.tmp``) to write instead of ``path``; renamed over it when the block ends.

    On an exception the temporary file is removed and ``path`` keeps its old content. The parent
    folder is created. For writers that want a path (an image's ``save``, a PDF library).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = staging_path(path)
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextmanager
def atomic_writer(path: str | Path, *, newline: str | None = None) -> Iterator[IO[str]]:
    """A UTF-8 text file that replaces ``path`` when the block ends (see :func:`atomic_path`).

    ``newline=""`` is what the :mod:`csv` module wants.
    """
    with atomic_path(path) as tmp, open(tmp, "w", encoding="utf-8", newline=newline) as fh:
        yield fh


def staging_path(path: str | Path) -> Path:
    """``<path>.tmp``: where a file or folder is built before it replaces ``path``."""
    path = Path(path)
    return path.with_name(path.name + ".tmp")


def staging_dir(path: str | Path) -> Path:
    """A fresh, empty :func:`staging_path` folder to build a folder in before :func:`publish_dir` names it ``path``."""
    tmp = staging_path(path)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    return tmp


def publish_dir(staging: str | Path, path: str | Path) -> None:
    """Replace the folder ``path`` by the finished ``staging`` folder: a half-built folder never has the final name."""
    shutil.rmtree(path, ignore_errors=True)
    os.replace(staging, path)


def fsync_tree(path: str | Path) -> None:
    """Flush a file, or every file and folder under a folder, to the disk (``os.fsync``).

    For a folder that must be whole on disk before something marks it complete (a checkpoint):
    after this returns, a crash of the machine loses none of it. Costs the time the disk takes to
    write what is still in the page cache.
    """
    path = Path(path)
    paths = [path] if path.is_file() else [*sorted(p for p in path.rglob("*") if p.is_file()), path,
                                           *sorted(p for p in path.rglob("*") if p.is_dir())]
    for item in [*paths, path.parent]:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def atomic_write(path: str | Path, text: str) -> None:
    """Write ``text`` to ``path`` (UTF-8) so that readers see the old or the new file, never a part."""
    with atomic_writer(path) as fh:
        fh.write(text)


def write_json(path: str | Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False) -> None:
    """Write one JSON document atomically (ASCII, non-ASCII escaped), with a final newline."""
    atomic_write(path, json.dumps(data, indent=indent, sort_keys=sort_keys) + "\n")


def write_jsonl(
    path: str | Path, rows: Iterable[Mapping[str, Any]], *, sort_keys: bool = False, ensure_ascii: bool = False
) -> None:
    """Write JSON Lines atomically: one object per line (non-ASCII kept as is unless ``ensure_ascii``)."""
    with atomic_writer(path) as fh:
        fh.writelines(json.dumps(row, ensure_ascii=ensure_ascii, sort_keys=sort_keys) + "\n" for row in rows)


def append_jsonl(path: str | Path, rows: Iterable[Mapping[str, Any]]) -> None:
    """Append rows to a JSON Lines journal and flush (a killed writer loses at most its last line)."""
    with open(path, "a", encoding="utf-8") as fh:
        fh.writelines(json.dumps(row, ensure_ascii=False) + "\n" for row in rows)
        fh.flush()


def iter_jsonl(
    path: str | Path, *, error: type[Exception] = ValueError, what: str = "file", hint: str = "",
    torn_last_line_ok: bool = False,
) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line number, record)`` for each non-blank line of a JSONL file of JSON objects.

    Raises ``error`` with ``<file>: file not found`` (or ``cannot read the <what> (...)``, plus ``hint``),
    ``<file>:<line>: not valid JSON (...)`` or ``<file>:<line>: expected a JSON object``. With
    ``torn_last_line_ok`` (a journal appended line by line, :func:`append_jsonl`), a last line that is
    not valid JSON -- a writer killed or out of disk space in the middle of it -- is skipped with a
    warning naming file and line; an unreadable line before it is still an error.
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
            if torn_last_line_ok and not any(rest.strip() for rest in lines[lineno:]):
                logger.warning("%s:%d: ignoring the unreadable last line (%s; a write was interrupted)",
                               path, lineno, exc.msg)
                return
            raise error(f"{path}:{lineno}: not valid JSON ({exc.msg})") from None
        if not isinstance(record, dict):
            raise error(f"{path}:{lineno}: expected a JSON object, got {type(record).__name__}")
        yield lineno, record


def read_journal(path: str | Path) -> list[Any]:
    """The records of an append-only journal; unreadable lines (a killed writer's last one) are skipped with a warning.

    Empty when the journal does not exist. Unlike :func:`iter_jsonl` nothing raises: a journal is a
    cache of finished work, and a bad line only means that work is done again.
    """
    path = Path(path)
    if not path.exists():
        return []
    out = []
    lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    for lineno, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            where = "last line (interrupted write)" if lineno == len(lines) else f"line {lineno}"
            logger.warning("%s: ignoring unreadable %s", path, where)
    return out


def file_sha256(path: str | Path, length: int | None = None) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks; the first ``length`` digits when given.

    The full digest identifies a PDF in its rasterize manifest; 16 digits identify the page image a
    generation was made from (the generation journal's ``image_sha256``).
    """
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()[:length] if length else digest.hexdigest()
