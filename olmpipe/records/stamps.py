"""Content stamps: small files that change when, and only when, the bytes of the files they cover change.

Snakemake reruns a job when an input file is newer than its outputs (the mtime trigger); it
checksums only files under 1 MB to ignore a touch that changed nothing. A bench's PDFs are often
larger, so touching one (a copy, a checkout, ``touch``) would rerun rendering, validation,
generation and training. The workflow therefore gives the rasterize and validate rules, instead of
the bench's PDFs and test files, one stamp each (:func:`write_stamp`, called when the workflow is
parsed): a JSON list of every covered file with the sha256 of its bytes, rewritten only when that
list changes, so that its modification time moves only with the content. A changed, added or
removed file changes the stamp and reruns what depends on it; a touched one reruns nothing.

Hashing is cached beside the stamp (``<stamp>.cache.json``: path, size and modification time ->
sha256), so an unchanged bench is not read again at every parse; a touched file is hashed once.

    write_stamp(pdfs, Path("results/rasterize/inputs/pages-pdfs.json"))
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Iterable
from pathlib import Path

from olmpipe.records.files import atomic_write, file_sha256

__all__ = ["write_stamp"]

logger = logging.getLogger(__name__)


def _cache_path(stamp: Path) -> Path:
    return stamp.with_name(stamp.name + ".cache.json")


def _read_cache(path: Path) -> dict[str, list]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def write_stamp(files: Iterable[str | Path], stamp: str | Path) -> str:
    """Write the stamp of ``files`` (their paths as given, and their bytes' sha256) to ``stamp``,
    leaving the file untouched when its content would not change; returns ``stamp`` as a string
    (for a rule's input). A file that cannot be read is named with its error in the stamp (the
    rule that reads it reports it)."""
    stamp = Path(stamp)
    cache_file = _cache_path(stamp)
    cache = _read_cache(cache_file)
    fresh: dict[str, list] = {}
    rows = []
    for name in sorted({str(f) for f in files}):
        try:
            st = os.stat(name)
            known = cache.get(name)
            if isinstance(known, list) and len(known) == 3 and known[:2] == [st.st_size, st.st_mtime_ns]:
                digest = known[2]
            else:
                digest = file_sha256(name)
            fresh[name] = [st.st_size, st.st_mtime_ns, digest]
        except OSError as exc:
            digest = f"unreadable: {exc.strerror or exc}"
        rows.append([name, digest])
    text = json.dumps({"files": rows}, indent=0) + "\n"
    stamp.parent.mkdir(parents=True, exist_ok=True)
    try:
        unchanged = stamp.read_text(encoding="utf-8") == text
    except OSError:
        unchanged = False
    if not unchanged:
        atomic_write(stamp, text)
        logger.info("%s: content changed (%d files)", stamp, len(rows))
    if fresh != cache:
        atomic_write(cache_file, json.dumps(fresh, sort_keys=True))
    return str(stamp)
