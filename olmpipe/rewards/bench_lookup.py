"""Finding the olmOCR-Bench tests of a dataset row: ``test_ids`` and their JSONL files to test objects.

A GRPO dataset names each page's tests by id and file (see :mod:`olmpipe.rewards.bench`);
:class:`TestLookup` loads each file once (again only when it changes), applies the reward's
``types`` and ``jsonl_regex`` filters, and turns every way a row can fail to name real tests into a
:class:`TestLookupError` whose message says what is wrong, so that the reward can score that row
None instead of raising into the trainer.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any


class TestLookupError(ValueError):
    """A dataset row names a test file or test id that does not exist; the message says which."""

    __test__ = False


class TestLookup:
    """The (filtered) tests of dataset rows, with the tests of each JSONL file cached by id.

    - ``types``: only tests of these types are kept (empty: all types);
    - ``jsonl_regex``: only tests from JSONL files whose name matches (``re.search``, case-insensitive).

    The cache is not pickled (a copy reloads the files it needs).

    >>> lookup = TestLookup(types=["table"])
    >>> lookup.tests_for([], None)
    []
    """

    __test__ = False

    def __init__(self, *, types: Iterable[str] = (), jsonl_regex: str | None = None) -> None:
        self.types = frozenset(types)
        self.jsonl_regex = jsonl_regex
        self._pattern = re.compile(jsonl_regex, re.IGNORECASE) if jsonl_regex else None
        self._files: dict[str, tuple[float, dict[str, Any]]] = {}  # path -> (mtime, tests by id)

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_files": {}}

    def file_tests(self, path: str) -> dict[str, Any]:
        """Tests of one JSONL file by id, cached until the file changes."""
        from olmpipe.bench import TestLoadError, load_tests

        try:
            mtime = os.stat(path).st_mtime
        except OSError as exc:
            raise TestLookupError(f"test file {path} cannot be read: {exc.strerror or exc}") from None
        cached = self._files.get(path)
        if cached is None or cached[0] != mtime:
            try:
                cached = (mtime, {t.id: t for t in load_tests(path)})
            except (TestLoadError, OSError, UnicodeDecodeError) as exc:
                raise TestLookupError(f"test file {path} cannot be loaded: {exc}") from None
            self._files[path] = cached
        return cached[1]

    def keeps_file(self, path: str) -> bool:
        """Whether tests from ``path`` count (its name matches ``jsonl_regex``, if any)."""
        return self._pattern is None or bool(self._pattern.search(Path(path).name))

    def tests_for(self, test_ids: Sequence[str] | None, files: Sequence[str] | str | None) -> list[Any]:
        """The (filtered) test objects of one dataset row; raises :class:`TestLookupError` when
        they cannot be found.

        ``files`` is either one file per id (``test_files``) or one file for the row (olmOCR's
        ``jsonl_file``).
        """
        if isinstance(test_ids, (str, bytes)):
            raise TestLookupError(f"test_ids {test_ids[:60]!r} is a string; each row needs a list of test ids")
        if not test_ids:
            return []
        try:
            test_ids = list(test_ids)
        except TypeError:
            raise TestLookupError(f"test_ids {test_ids!r} is not a list of test ids") from None
        if files is None:
            raise TestLookupError(
                f"tests {list(test_ids)[:3]}...: the dataset has neither a 'test_files' nor a 'jsonl_file' "
                "column saying which JSONL file holds them"
            )
        paths = [files] * len(test_ids) if isinstance(files, (str, os.PathLike)) else list(files)
        if len(paths) != len(test_ids):
            raise TestLookupError(f"test_files has {len(paths)} entries for {len(test_ids)} test ids")
        files_by_path = {p: self.file_tests(p) for p in dict.fromkeys(map(str, paths)) if self.keeps_file(p)}
        tests = []
        for test_id, path in zip(test_ids, paths, strict=True):
            by_id = files_by_path.get(str(path))
            if by_id is None:
                continue
            if test_id not in by_id:
                raise TestLookupError(f"test id {test_id!r} is not in {path}")
            test = by_id[test_id]
            if not self.types or test.type in self.types:
                tests.append(test)
        return tests
