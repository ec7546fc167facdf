"""Bench folders: which ones the config names, and the PDFs and test files each one holds.

A bench folder has olmOCR-Bench's layout: ``pdfs/**.pdf`` and test files (``*.jsonl``) at its top
level, plus any candidate folders. The workflow reads ``bench.dir`` (split into train and eval
pages) and, when set, ``bench.eval_dir`` (all eval pages); with ``synth.enabled`` the section is
first switched to the synthetic bench (:func:`olmpipe.layout.bench_section`). Where their pages
and results go is :mod:`olmpipe.layout`.

A module of its own, apart from the result paths, because it decides what the rasterize and
validate stages read: it is in their code versions (:mod:`olmpipe.codeversion`), while adding a
result path to :mod:`olmpipe.layout` reruns nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from olmpipe.layout import BENCH_TESTS_GLOB, EVAL_PAGES, MAIN_PAGES, RASTERIZE_DIR


@dataclass(frozen=True)
class Bench:
    """A bench folder the workflow reads, with the folder (under results/rasterize) its pages go to.

    ``role`` is ``"main"`` for ``bench.dir`` (split into train and eval pages) and ``"eval"`` for
    ``bench.eval_dir`` (all eval pages).
    """

    role: str
    dir: str
    pages: str  # folder name under results/rasterize/: "pages" or "eval-pages"

    @property
    def pages_root(self) -> PurePosixPath:
        return RASTERIZE_DIR / self.pages


def benches(cfg: Mapping[str, Any]) -> list[Bench]:
    """The bench folders named by the config: ``bench.dir`` and, when set, ``bench.eval_dir``."""
    out = [Bench(role="main", dir=clean_dir(cfg["bench"]["dir"]), pages=MAIN_PAGES)]
    if cfg["bench"]["eval_dir"]:
        out.append(Bench(role="eval", dir=clean_dir(cfg["bench"]["eval_dir"]), pages=EVAL_PAGES))
    return out


def clean_dir(path: str | Path) -> str:
    """A bench folder as the workflow names it everywhere: normalized, no trailing slash."""
    return os.path.normpath(str(path))


class BenchLayoutError(ValueError):
    """A bench folder whose PDFs cannot each get their own rasterize folder; names both paths."""


def _missing_bench(bench_dir: str | Path) -> FileNotFoundError:
    return FileNotFoundError(
        f"bench folder {bench_dir} does not exist (a relative path is read from the working "
        f"directory, {Path.cwd()})"
    )


def pdf_files(bench_dir: str | Path) -> dict[str, str]:
    """The PDFs of a bench: ``{stem: pdf id}``, sorted by stem.

    The id is the PDF's exact path under ``pdfs/`` (``UPPER.PDF`` stays ``UPPER.PDF``: the tests'
    ``pdf`` field must match it exactly); the stem is the id without its last four characters
    (the ``.pdf`` suffix in any case) and names the PDF's rasterize folder and Snakemake wildcard.
    Raises :class:`BenchLayoutError` when two PDFs would share a folder (``x.pdf`` and ``x.PDF``)
    or one PDF's folder would hold another's (``sub.pdf`` renders to ``.../pages/sub/``, the
    parent of ``sub/x.pdf``'s ``.../pages/sub/x/``), and FileNotFoundError when the folder or its
    ``pdfs/`` is missing.
    """
    bench_dir = Path(bench_dir)
    if not bench_dir.is_dir():
        raise _missing_bench(bench_dir)
    root = bench_dir / "pdfs"
    if not root.is_dir():
        raise FileNotFoundError(
            f"bench folder {bench_dir}: no pdfs/ subfolder (expected olmOCR-Bench layout: pdfs/**.pdf, "
            f"{BENCH_TESTS_GLOB})"
        )
    found: dict[str, str] = {}
    for path in root.rglob("*"):
        if path.is_file() and path.suffix.lower() == ".pdf":
            pdf_id = path.relative_to(root).as_posix()
            stem = pdf_id[: -len(".pdf")]
            if stem in found:
                first, second = sorted((found[stem], pdf_id))
                raise BenchLayoutError(
                    f"{root / first} and {root / second} differ only in the case of '.pdf' and would "
                    f"be rendered into the same folder {stem}/; rename or remove one of them"
                )
            found[stem] = pdf_id
    stems = sorted(found)
    known = set(stems)
    for stem in stems:
        parts = stem.split("/")
        for depth in range(1, len(parts)):
            folder = "/".join(parts[:depth])
            if folder in known:
                raise BenchLayoutError(
                    f"{root / found[folder]} and {root / found[stem]}: the pages of {found[folder]} go to "
                    f"the folder {folder}/ under {RASTERIZE_DIR}/, which would also hold the folder of "
                    f"{found[stem]}; rename {found[folder]} or the folder {root / folder}"
                )
    return {stem: found[stem] for stem in stems}


def discover_pdfs(bench_dir: str | Path) -> list[str]:
    """PDF stems of a bench: paths under ``pdfs/`` without ``.pdf``, posix-style, sorted (see :func:`pdf_files`).

    >>> discover_pdfs("data/bench/olmocr-sample")[:2]  # doctest: +SKIP
    ['blank_book_pg1', 'buildingnotes']
    """
    return list(pdf_files(bench_dir))


def bench_test_files(bench_dir: str | Path) -> list[str]:
    """The test files of a bench: every ``*.jsonl`` at its top level, sorted (olmOCR-Bench rule).

    The validated tests folder (:data:`VALIDATED_TESTS`) has the same layout.
    """
    return sorted(str(p) for p in Path(bench_dir).glob(BENCH_TESTS_GLOB) if p.is_file())


def pdf_path_for(bench_dir: str | Path, stem: str, pdf_id: str | None = None) -> str:
    """Path of the PDF with stem ``stem`` (path under ``pdfs/`` without ``.pdf``).

    Give ``pdf_id`` (from :func:`pdf_files`) for a PDF whose suffix is not lower case (``x.PDF``).
    """
    return str(PurePosixPath(str(bench_dir)) / "pdfs" / (pdf_id or f"{stem}.pdf"))


def page_dirs(bench: Bench) -> list[str]:
    """The rasterize output folders of every PDF of a bench (the rasterize jobs Snakemake runs)."""
    return [str(bench.pages_root / stem) for stem in discover_pdfs(bench.dir)]
