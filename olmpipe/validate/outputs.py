"""The validate stage's outputs, written all or nothing: the validated test files, ``report.json``
and the page index (``results/validate/``), through a staging folder beside them, then renamed into
place; the previous outputs come back if any rename fails.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.records.pages import write_page_index
from olmpipe.validate.result import ValidationResult

__all__ = ["OutputError", "write_outputs"]


class OutputError(OSError):
    """The outputs could not be written; the previous outputs (if any) are left as they were."""


def write_outputs(result: ValidationResult, *, tests_dir: str | Path, report_path: str | Path,
                  pages_path: str | Path, settings: Mapping[str, Any]) -> None:
    """Write the validated test files, ``report.json`` and ``pages.jsonl``, all or nothing.

    Everything is first written into a temporary folder beside the outputs (in their common parent
    folder, so the moves are renames on one file system), then moved into place: ``tests/`` as a
    whole (test files of a previous run that no longer exist in the bench go with it), then the
    report and the page index. When writing fails (read-only folder, full disk) the previous
    outputs are left as they were; raises :class:`OutputError` naming the folder and the reason.
    """
    tests_dir, report_path, pages_path = Path(tests_dir), Path(report_path), Path(pages_path)
    parent = Path(os.path.commonpath([p.absolute().parent for p in (tests_dir, report_path, pages_path)]))
    try:
        parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=".validate-", dir=parent))
    except OSError as exc:
        raise OutputError(f"cannot write the validate outputs in {parent}: {exc.strerror or exc}") from exc
    try:
        new_tests = staging / tests_dir.name
        new_tests.mkdir()
        for out_name, lines in result.kept.items():
            target = new_tests / out_name
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
        new_report, new_pages = staging / report_path.name, staging / pages_path.name
        new_report.write_text(json.dumps(result.report(settings), indent=1) + "\n", encoding="utf-8")
        write_page_index(new_pages, result.pages)
        for target in (tests_dir, report_path, pages_path):
            target.parent.mkdir(parents=True, exist_ok=True)
        _move_into_place(staging, [(new_tests, tests_dir), (new_report, report_path), (new_pages, pages_path)])
    except OSError as exc:
        if not isinstance(exc, _Stranded):  # else the previous outputs wait in the staging folder
            shutil.rmtree(staging, ignore_errors=True)
        raise OutputError(f"cannot write the validate outputs in {parent}: {exc.strerror or exc}") from exc
    shutil.rmtree(staging, ignore_errors=True)


class _Stranded(OSError):
    """A failed move whose rollback could not put every previous output back."""


def _move_into_place(staging: Path, moves: Sequence[tuple[Path, Path]]) -> None:
    """Rename each new output onto its target, the previous one first set aside in ``staging``;
    if any rename fails, put every previous output back (all or nothing) and re-raise. Should a
    previous output fail to go back, it stays in ``staging`` and the error says so."""
    done: list[tuple[Path, Path | None]] = []
    try:
        for number, (new, target) in enumerate(moves):
            backup = None
            if target.exists() or target.is_symlink():
                backup = staging / f"previous-{number}"
                target.rename(backup)
            done.append((target, backup))
            new.rename(target)
    except OSError as exc:
        stranded = []
        for target, backup in reversed(done):
            try:
                if target.is_dir() and not target.is_symlink():
                    shutil.rmtree(target)
                elif target.exists() or target.is_symlink():
                    target.unlink()
                if backup is not None:
                    backup.rename(target)
            except OSError:
                stranded.append(f"{target} (kept as {backup})")
        if stranded:
            raise _Stranded(exc.errno, f"{exc.strerror or exc}; could not put back the previous "
                                       f"{', '.join(stranded)}") from exc
        raise
