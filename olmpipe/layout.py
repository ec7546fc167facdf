"""Where the workflow reads and writes: the bench folders of the config and the result paths.

Kept in the package, not in the ``.smk`` files, so that the rules (through
``workflow/rules/common.smk``) and the stages run without Snakemake (``python -m olmpipe.<stage>``)
use the same paths, tested like any other code. Which code reruns which rule is
:mod:`olmpipe.codeversion`.

    >>> model_dir({"model": {"path": "embedded"}})
    'results/model/tiny'
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any

from olmpipe.records.difficulty import (
    DROPPED_NAME,
    FILTER_NAME,
    FILTERED_INDEX_NAME,
    STATS_NAME,
    SUMMARY_NAME,
)
from olmpipe.records.generations import GENERATIONS_NAME

RESULTS = PurePosixPath("results")
RASTERIZE_DIR = RESULTS / "rasterize"
VALIDATE_DIR = RESULTS / "validate"
#: The page index and the validated tests (rule ``validate``) that training and scoring read.
PAGE_INDEX = VALIDATE_DIR / "pages.jsonl"
VALIDATED_TESTS = VALIDATE_DIR / "tests"
#: The difficulty stage (rule ``difficulty``): k completions per training page (its generations and
#: their resume journal, :mod:`olmpipe.records.generations`) and their statistics.
DIFFICULTY_DIR = RESULTS / "difficulty"
DIFFICULTY_STATS = DIFFICULTY_DIR / STATS_NAME
DIFFICULTY_SUMMARY = DIFFICULTY_DIR / SUMMARY_NAME
DIFFICULTY_GENERATIONS = DIFFICULTY_DIR / GENERATIONS_NAME
#: The filter of ``train.difficulty.enabled`` (rule ``difficulty_filter``): the page index training
#: reads, the pages left out with their reason, and the counts.
FILTERED_PAGE_INDEX = DIFFICULTY_DIR / FILTERED_INDEX_NAME
DIFFICULTY_DROPPED = DIFFICULTY_DIR / DROPPED_NAME
DIFFICULTY_FILTER = DIFFICULTY_DIR / FILTER_NAME
TINY_MODEL_DIR = RESULTS / "model" / "tiny"
#: Models downloaded from the Hugging Face hub (rule ``download_model``): ``<org>--<name>/<revision>/``.
HUB_MODEL_DIR = RESULTS / "model" / "hub"
#: A hub repository id as ``model.path`` may give it: ``org/name`` (no leading ``.`` or ``/``).
HUB_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*")
#: The average of the seeds' final weights (rule ``soup``), the model the evaluate stage scores.
SOUP_MODEL_DIR = RESULTS / "train" / "soup" / "model"


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
    out = [Bench(role="main", dir=clean_dir(cfg["bench"]["dir"]), pages="pages")]
    if cfg["bench"]["eval_dir"]:
        out.append(Bench(role="eval", dir=clean_dir(cfg["bench"]["eval_dir"]), pages="eval-pages"))
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
            f"bench folder {bench_dir}: no pdfs/ subfolder (expected olmOCR-Bench layout: pdfs/**.pdf, *.jsonl)"
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
                    f"the folder {folder}/ under results/rasterize/, which would also hold the folder of "
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
    """The test files of a bench: every ``*.jsonl`` at its top level, sorted (olmOCR-Bench rule)."""
    return sorted(str(p) for p in Path(bench_dir).glob("*.jsonl") if p.is_file())


def pdf_path_for(bench_dir: str | Path, stem: str, pdf_id: str | None = None) -> str:
    """Path of the PDF with stem ``stem`` (path under ``pdfs/`` without ``.pdf``).

    Give ``pdf_id`` (from :func:`pdf_files`) for a PDF whose suffix is not lower case (``x.PDF``).
    """
    return str(PurePosixPath(str(bench_dir)) / "pdfs" / (pdf_id or f"{stem}.pdf"))


def page_dir_for(stem: str, root: str | Path = RASTERIZE_DIR / "pages") -> Path:
    """Folder that holds the rendered pages and ``manifest.json`` of one PDF."""
    return Path(root) / stem


def page_dirs(bench: Bench) -> list[str]:
    """The rasterize output folders of every PDF of a bench (the rasterize jobs Snakemake runs)."""
    return [str(bench.pages_root / stem) for stem in discover_pdfs(bench.dir)]


class ModelPathError(ValueError):
    """``model.path`` names no model the workflow can load; the message says what to set."""


def hub_model(cfg: Mapping[str, Any]) -> tuple[str, str] | None:
    """``(repo id, revision)`` when ``model.path`` is a hub id to download, else None.

    ``model.path`` is a hub id when it is no existing file or folder (read from the working
    directory) and has the form ``org/name``, the rule ``transformers`` applies too; any other path
    is a local folder (one that does not exist is a missing input of the jobs). A hub id needs
    ``model.revision`` (what is downloaded, once): raises :class:`ModelPathError` without it.

    >>> hub_model({"model": {"path": "allenai/olmOCR-7B-0825", "revision": "main"}})
    ('allenai/olmOCR-7B-0825', 'main')
    """
    path = cfg["model"]["path"]
    if path == "embedded" or os.path.exists(path) or not HUB_ID.fullmatch(path):
        return None
    revision = cfg["model"]["revision"]
    if not revision:
        raise ModelPathError(f"model.path {path!r} is a hub id: set model.revision to the revision to download "
                             "once into results/model/hub/ (a commit hash pins it; a branch or tag is resolved "
                             "to a commit at the first download)")
    return path, revision


def hub_model_dir(repo_id: str, revision: str) -> str:
    """The folder a hub model's revision is downloaded into: ``results/model/hub/<org>--<name>/<revision>``
    (``/`` in a revision such as ``refs/pr/1`` becomes ``--``)."""
    return str(HUB_MODEL_DIR / repo_id.replace("/", "--") / revision.replace("/", "--"))


def model_dir(cfg: Mapping[str, Any]) -> str:
    """The model folder the stages load: the built tiny model when ``model.path`` is ``embedded``, the
    downloaded folder (:func:`hub_model_dir`) for a hub id, else ``model.path`` itself.

    No job resolves a hub id: the ``download_model`` rule fetches it on the submitting machine, and
    the jobs read its folder offline (:mod:`olmpipe.hubmodel`).
    """
    if cfg["model"]["path"] == "embedded":
        return str(TINY_MODEL_DIR)
    hub = hub_model(cfg)
    return hub_model_dir(*hub) if hub else cfg["model"]["path"]


def model_input(cfg: Mapping[str, Any]) -> list[str]:
    """The model folder as a rule input, ``[folder]``: built (``build_model``), downloaded
    (``download_model``) or local (a relative path is read from the working directory)."""
    return [model_dir(cfg)]


def baseline_run_dir(cfg: Mapping[str, Any]) -> str:
    """Run folder of the base model's generation and scores: ``results/baseline/<model.name>``."""
    return str(RESULTS / "baseline" / cfg["model"]["name"])


def evaluate_run_dir(cfg: Mapping[str, Any]) -> str:
    """Run folder of the trained model's generation and scores (the baseline's layout):
    ``results/evaluate/<model.name>``."""
    return str(RESULTS / "evaluate" / cfg["model"]["name"])


def train_page_index(cfg: Mapping[str, Any]) -> str:
    """The page index training reads: the difficulty filter's when ``train.difficulty.enabled``,
    else the validate stage's."""
    return str(FILTERED_PAGE_INDEX if cfg["train"]["difficulty"]["enabled"] else PAGE_INDEX)
