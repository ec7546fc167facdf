"""The rasterize manifests: ``manifest.json`` of each rendered PDF folder and the merged ``manifest.jsonl``.

Written by the rasterize stage (:mod:`olmpipe.rasterize`): one folder per PDF holds its page images
(:func:`page_image_name`) and a :class:`PdfManifest`, written last so that its presence marks a
complete folder; the stage then joins the manifests into ``results/rasterize/manifest.jsonl``
(:func:`write_merged_manifest`), which the validate stage reads (:func:`read_merged_manifest`).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Literal

from olmpipe.records.files import write_json, write_jsonl

#: The manifest of one rendered PDF, in its page folder.
PDF_MANIFEST_NAME = "manifest.json"
#: The merged manifest of every PDF (rule ``rasterize``'s output, under ``results/rasterize/``).
MERGED_MANIFEST_NAME = "manifest.jsonl"
#: The page images of a rendered PDF folder (:func:`page_image_name`).
PAGE_IMAGE_GLOB = "pg*.png"


def page_image_name(page: int) -> str:
    """The file name of page ``page`` (1-based) in a rendered PDF folder: ``pg<page>.png``."""
    return f"pg{page}.png"


@dataclass(frozen=True)
class PageImage:
    """One rendered page: its PNG path, pixel size, source size in points and rotation (degrees)."""

    page: int
    image: str
    width: int
    height: int
    width_pt: float
    height_pt: float
    rotation: int


@dataclass
class PdfManifest:
    """What was rendered of one PDF (``manifest.json`` of its folder; one line of ``manifest.jsonl``).

    ``pdf`` is the PDF's path relative to the bench's ``pdfs/`` folder (the tests' ``pdf`` field).
    ``status`` is ``"ok"`` or ``"skipped"``; ``error`` says why a PDF was skipped. ``bench_dir`` is
    the bench folder the PDF belongs to (the workflow may read a train and an eval bench).
    ``code`` is the rasterize code version that rendered it (:func:`olmpipe.rasterize.rasterize_pdfs`
    re-renders a folder whose code version differs); ``None`` when the caller gave none.
    """

    pdf: str
    sha256: str | None
    status: Literal["ok", "skipped"]
    error: str | None
    longest_side: int
    pages: list[PageImage] = field(default_factory=list)
    bench_dir: str | None = None
    code: str | None = None

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> PdfManifest:
        pages = [PageImage(**p) for p in data.get("pages", [])]
        return cls(**{**data, "pages": pages})


def pdf_manifest_path(page_dir: str | Path) -> Path:
    """The ``manifest.json`` of a rendered PDF folder."""
    return Path(page_dir) / PDF_MANIFEST_NAME


def write_manifest(page_dir: str | Path, manifest: PdfManifest) -> None:
    """Write the ``manifest.json`` of a rendered PDF folder, atomically."""
    write_json(pdf_manifest_path(page_dir), manifest.to_dict(), indent=1, sort_keys=True)


def read_manifest(page_dir: str | Path) -> PdfManifest:
    """Read the ``manifest.json`` of one rendered PDF folder."""
    with open(pdf_manifest_path(page_dir), encoding="utf-8") as fh:
        return PdfManifest.from_dict(json.load(fh))


def write_merged_manifest(path: str | Path, manifests: Iterable[PdfManifest]) -> None:
    """Write ``manifest.jsonl`` atomically: one line per PDF, in the order given."""
    write_jsonl(path, (manifest.to_dict() for manifest in manifests), sort_keys=True, ensure_ascii=True)


def read_merged_manifest(path: str | Path) -> list[PdfManifest]:
    """Read ``manifest.jsonl`` back into :class:`PdfManifest` objects."""
    with open(path, encoding="utf-8") as fh:
        return [PdfManifest.from_dict(json.loads(line)) for line in fh if line.strip()]
