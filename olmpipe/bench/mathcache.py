"""Persistent cache of KaTeX renders and of equation-pair verdicts, shared by processes (sqlite, WAL).

Two tables, both keyed by a SHA-256 of everything the value depends on:

- ``renders``: one row per (KaTeX version, render format, equation): the MathML, its normalized
  form, the leaf spans and boxes, or the KaTeX error. Errors are remembered too, so an equation
  KaTeX rejects is rendered once, not once per completion (the reference re-renders them).
- ``verdicts``: one row per (KaTeX version, comparison version, test equation, page equation):
  whether the pair matches (only definite answers; timeouts are never stored).

Several processes (the batch scorer's workers, GRPO ranks on one node) may share one file: WAL mode
lets readers proceed while one writer commits, ``busy_timeout`` waits for the write lock, and
``INSERT OR IGNORE`` makes concurrent writes of the same key harmless (values are deterministic).
A cache that cannot be opened or written is logged once and then skipped: the cache only saves
time, it never decides a verdict. Render payloads are stored zlib-compressed, and each table keeps
its newest ``max_renders`` / ``max_verdicts`` rows (older rows are pruned now and then), so a long
training run does not grow the file without bound (about 1 kB per render, 0.1 kB per verdict).

The folder is ``$OLMPIPE_CACHE_DIR`` when set, else the user's cache folder
(``platformdirs.user_cache_dir("olmpipe")``); the file is
``<folder>/math/katex-<KaTeX version>-v<render format>.sqlite3``. sqlite's WAL mode needs a local
file system: on a cluster whose home folders are on NFS, point ``OLMPIPE_CACHE_DIR`` at node-local
storage (processes of one node then share it).
"""

from __future__ import annotations

import hashlib
import logging
import os
import sqlite3
import zlib
from collections.abc import Iterable
from pathlib import Path

log = logging.getLogger(__name__)

CACHE_ENV = "OLMPIPE_CACHE_DIR"
_CHUNK = 500  # keys per SELECT ... IN (...), below sqlite's parameter limit
_PRUNE_EVERY = 500  # writes between two prunings


def default_cache_dir() -> Path:
    """``$OLMPIPE_CACHE_DIR`` when set, else the platform's user cache folder for olmpipe."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("olmpipe"))


def cache_key(*parts: str) -> str:
    """SHA-256 of the parts (NUL-separated; lone surrogates allowed) as hex."""
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()


class MathCache:
    """The sqlite file of renders and verdicts; a no-op when ``path`` is None.

    Safe across ``fork``: a child opens its own connection on first use.
    """

    def __init__(self, path: Path | None, *, max_renders: int = 500_000, max_verdicts: int = 5_000_000) -> None:
        self.path = path
        self.max_rows = {"renders": max_renders, "verdicts": max_verdicts}
        self._writes = 0
        self._conn: sqlite3.Connection | None = None
        self._conn_pid: int | None = None
        self._disabled = path is None

    def _connection(self) -> sqlite3.Connection | None:
        if self._disabled:
            return None
        if self._conn is not None and self._conn_pid == os.getpid():
            return self._conn
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(self.path, timeout=30.0, isolation_level=None, check_same_thread=False)
            conn.execute("PRAGMA busy_timeout=30000")
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")
            conn.execute("CREATE TABLE IF NOT EXISTS renders (key TEXT PRIMARY KEY, payload BLOB NOT NULL)")
            conn.execute("CREATE TABLE IF NOT EXISTS verdicts (key TEXT PRIMARY KEY, passed INTEGER NOT NULL)")
        except (sqlite3.Error, OSError) as exc:
            self._fail("open", exc)
            return None
        self._conn, self._conn_pid = conn, os.getpid()
        return conn

    def _fail(self, what: str, exc: Exception) -> None:
        log.warning("math cache %s: cannot %s (%s); continuing without the persistent cache",
                    self.path, what, exc)
        self._disabled = True
        self.close()

    def _get(self, table: str, column: str, keys: list[str]) -> dict[str, object]:
        conn = self._connection()
        if conn is None or not keys:
            return {}
        found: dict[str, object] = {}
        try:
            for start in range(0, len(keys), _CHUNK):
                chunk = keys[start : start + _CHUNK]
                marks = ",".join("?" * len(chunk))
                rows = conn.execute(f"SELECT key, {column} FROM {table} WHERE key IN ({marks})", chunk)
                found.update(rows.fetchall())
        except sqlite3.Error as exc:
            self._fail("read", exc)
            return {}
        return found

    def _put(self, table: str, rows: Iterable[tuple[str, object]]) -> None:
        rows = list(rows)
        conn = self._connection()
        if conn is None or not rows:
            return
        try:
            with conn:  # one transaction
                conn.execute("BEGIN IMMEDIATE")
                conn.executemany(f"INSERT OR IGNORE INTO {table} VALUES (?, ?)", rows)
                self._writes += 1
                if self._writes % _PRUNE_EVERY == 0:
                    # rowids grow with insertion: drop all but the newest max_rows rows
                    conn.execute(f"DELETE FROM {table} WHERE rowid <= (SELECT max(rowid) FROM {table}) - ?",
                                 (self.max_rows[table],))
        except sqlite3.Error as exc:
            self._fail("write", exc)

    def get_renders(self, keys: list[str]) -> dict[str, str]:
        """Stored render payloads (JSON text) for the keys that have one."""
        found = {}
        for key, blob in self._get("renders", "payload", keys).items():
            try:
                found[key] = zlib.decompress(blob).decode("utf-8")
            except (zlib.error, TypeError, UnicodeDecodeError):
                log.warning("math cache %s: unreadable render row %s ignored", self.path, key)
        return found

    def put_renders(self, rows: Iterable[tuple[str, str]]) -> None:
        """Store render payloads (JSON text, compressed here)."""
        self._put("renders", ((k, zlib.compress(v.encode("utf-8"), 6)) for k, v in rows))

    def get_verdicts(self, keys: list[str]) -> dict[str, bool]:
        """Stored pair verdicts for the keys that have one."""
        return {k: bool(v) for k, v in self._get("verdicts", "passed", keys).items()}

    def put_verdicts(self, rows: Iterable[tuple[str, bool]]) -> None:
        self._put("verdicts", ((k, int(v)) for k, v in rows))

    def close(self) -> None:
        if self._conn is not None and self._conn_pid == os.getpid():
            try:
                self._conn.close()
            except sqlite3.Error:
                pass
        self._conn = None
        self._conn_pid = None
