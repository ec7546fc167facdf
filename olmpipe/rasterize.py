"""Stage 1: render every page of a bench's PDFs to PNG with pypdfium2, plus a manifest per PDF.

One call of :func:`rasterize_pdf` renders one PDF into its own folder (``pg{page}.png`` and
``manifest.json``). :func:`rasterize_pdfs` renders a whole bench in one process (or a pool of
``workers``) and reuses every folder whose manifest already records the same PDF bytes (sha256),
longest side, bench and rasterize code version, so a changed PDF re-renders only that PDF; the
Snakemake rule ``rasterize`` is one such job, because one job per PDF paid a Python start and the
package imports per PDF, ~3x the rendering itself (``benchmarks/rasterize_scale.py``).
:func:`merge_manifests` joins the per-PDF manifests into ``manifest.jsonl``. Pages are rendered
once here instead of inside a training dataset every epoch.

Run without Snakemake (:func:`rasterize_benches`, as the rule does: the config's benches, or one
bench folder given on the command line)::

    olmpipe rasterize --config config/config.yaml
    python -m olmpipe.rasterize data/bench/olmocr-sample --out results/rasterize --longest-side 1288

A corrupt, encrypted, empty (0-byte) or zero-page PDF raises :class:`RasterizeError` naming the file, or with
``on_error="skip"`` is recorded in its manifest with ``status: "skipped"`` and the reason.
"""

from __future__ import annotations

import argparse
import logging
import math
import multiprocessing
import re
import sys
from collections.abc import Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import Literal

import pypdfium2 as pdfium

from olmpipe.records.files import file_sha256
from olmpipe.records.manifest import (
    MERGED_MANIFEST_NAME,
    PAGE_IMAGE_GLOB,
    PageImage,
    PdfManifest,
    page_image_name,
    pdf_manifest_path,
    read_manifest,
    write_manifest,
    write_merged_manifest,
)

logger = logging.getLogger(__name__)

OnError = Literal["error", "skip"]
# zlib level of the PNGs: on the bundled sample at 1288 px, level 1 makes rasterization 1.4-2.8x
# faster than PIL's default 6 for files 6% larger (benchmarks/rasterize.py).
PNG_COMPRESS_LEVEL = 1


class RasterizeError(RuntimeError):
    """A PDF that cannot be rendered; the message names the file and the reason."""


def scale_for(width_pt: float, height_pt: float, longest_side: int) -> float:
    """Scale factor (pixels per point) that makes the longest side exactly ``longest_side`` pixels.

    pypdfium2 sizes bitmaps with ``ceil(points * scale)``, so a float product a hair above an
    integer would add a pixel; the scale is nudged down in that case.
    """
    longest_pt = max(width_pt, height_pt)
    scale = longest_side / longest_pt
    if math.ceil(longest_pt * scale) > longest_side:
        scale = (longest_side - 1e-3) / longest_pt
    return scale


def render_page(page: pdfium.PdfPage, longest_side: int):
    """Render one pdfium page to an RGB PIL image whose longest side is ``longest_side`` pixels."""
    width_pt, height_pt = page.get_size()
    bitmap = page.render(scale=scale_for(width_pt, height_pt, longest_side), rev_byteorder=True)
    image = bitmap.to_pil()
    return image.convert("RGB") if image.mode != "RGB" else image


_ENCRYPT = re.compile(rb"/Encrypt\b")
_PAGE_OBJECT = re.compile(rb"/Type\s*/Page\b")
_EMPTY_PAGE_TREE = re.compile(rb"/Count\s+0\b")


def _describe_open_error(pdf_path: Path, exc: pdfium.PdfiumError) -> str:
    """Why pdfium could not open a PDF: encrypted, without pages, or corrupt.

    PDFium's error code is process-global and is not reset for every failure (a PDF without pages
    fails with a stale code), so the cause is read from the file's own structure instead.
    """
    data = pdf_path.read_bytes()
    if _ENCRYPT.search(data):
        return "encrypted PDF (needs a password; decrypt it or remove it from the bench)"
    if _EMPTY_PAGE_TREE.search(data) and not _PAGE_OBJECT.search(data):
        return "the PDF has zero pages"
    return f"corrupt or unreadable PDF ({exc})"


def _open(pdf_path: Path) -> pdfium.PdfDocument:
    """Open a PDF or raise :class:`RasterizeError` with the reason (corrupt, encrypted, no pages)."""
    if not pdf_path.is_file():
        raise RasterizeError(f"{pdf_path}: no such PDF file")
    if pdf_path.stat().st_size == 0:  # pdfium calls it corrupt; say what it is
        raise RasterizeError(f"{pdf_path}: the file is empty (0 bytes); an interrupted copy or download?")
    try:
        doc = pdfium.PdfDocument(str(pdf_path))
    except pdfium.PdfiumError as exc:
        raise RasterizeError(f"{pdf_path}: {_describe_open_error(pdf_path, exc)}") from exc
    if len(doc) == 0:
        doc.close()
        raise RasterizeError(f"{pdf_path}: the PDF has zero pages")
    return doc


def rasterize_pdf(
    pdf_path: str | Path,
    out_dir: str | Path,
    *,
    pdf_id: str,
    longest_side: int,
    on_error: OnError = "error",
    bench_dir: str | None = None,
    code: str | None = None,
) -> PdfManifest:
    """Render every page of ``pdf_path`` to ``out_dir/pg{page}.png`` and write ``out_dir/manifest.json``.

    ``pdf_id`` is the PDF's path relative to the bench's ``pdfs/`` folder, recorded in the manifest
    with ``code`` (the rasterize code version). An existing manifest is removed first and written
    last, so its presence marks a complete folder; pages of an earlier render that the PDF no longer
    has (``pg{n}.png`` beyond its page count) are removed, as Snakemake removed the whole folder of a
    job before rerunning it.

    >>> m = rasterize_pdf("data/bench/olmocr-sample/pdfs/mattsnotes.pdf", "/tmp/mn",
    ...                   pdf_id="mattsnotes.pdf", longest_side=256)  # doctest: +SKIP
    >>> [(p.page, max(p.width, p.height)) for p in m.pages]  # doctest: +SKIP
    [(1, 256), (2, 256), (3, 256)]
    """
    if on_error not in ("error", "skip"):
        raise ValueError(f"on_error must be 'error' or 'skip', got {on_error!r}")
    pdf_path, out_dir = Path(pdf_path), Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pdf_manifest_path(out_dir).unlink(missing_ok=True)
    sha = file_sha256(pdf_path) if pdf_path.is_file() else None
    manifest = PdfManifest(pdf=pdf_id, sha256=sha, status="ok", error=None, longest_side=longest_side,
                           bench_dir=bench_dir, code=code)
    try:
        doc = _open(pdf_path)
        try:
            manifest.pages = _render_all(doc, pdf_path, out_dir, longest_side)
        finally:
            doc.close()
    except RasterizeError as exc:
        if on_error == "error":
            raise
        logger.warning("skipping %s", exc)
        manifest.status, manifest.error, manifest.pages = "skipped", str(exc), []
    current = {Path(p.image).name for p in manifest.pages}
    for stale in out_dir.glob(PAGE_IMAGE_GLOB):
        if stale.name not in current:
            stale.unlink()
    write_manifest(out_dir, manifest)
    logger.info("%s: %s, %d page(s) at longest side %d", pdf_id, manifest.status, len(manifest.pages),
                longest_side)
    return manifest


def _render_all(doc: pdfium.PdfDocument, pdf_path: Path, out_dir: Path, longest_side: int) -> list[PageImage]:
    pages = []
    for index in range(len(doc)):
        number = index + 1
        try:
            page = doc[index]
            try:
                width_pt, height_pt = page.get_size()
                rotation = int(page.get_rotation())
                image = render_page(page, longest_side)
            finally:
                page.close()
        except pdfium.PdfiumError as exc:
            raise RasterizeError(f"{pdf_path}: page {number} cannot be rendered: {exc}") from exc
        target = out_dir / page_image_name(number)
        image.save(target, format="PNG", compress_level=PNG_COMPRESS_LEVEL)
        pages.append(
            PageImage(
                page=number,
                image=str(target),
                width=image.width,
                height=image.height,
                width_pt=round(float(width_pt), 3),
                height_pt=round(float(height_pt), 3),
                rotation=rotation,
            )
        )
    return pages


def merge_manifests(page_dirs: list[str | Path], out_path: str | Path) -> list[PdfManifest]:
    """Join the per-PDF manifests of ``page_dirs`` into one JSONL file (one line per PDF, sorted)."""
    manifests = sorted((read_manifest(d) for d in page_dirs), key=lambda m: m.pdf)
    write_merged_manifest(out_path, manifests)
    skipped = [m.pdf for m in manifests if m.status != "ok"]
    logger.info("merged %d manifests (%d pages, %d skipped PDFs%s) into %s", len(manifests),
                sum(len(m.pages) for m in manifests), len(skipped),
                f": {', '.join(skipped)}" if skipped else "", out_path)
    return manifests


@dataclass(frozen=True)
class PdfJob:
    """One PDF to render: its file, its id (path under ``pdfs/``), its page folder and bench folder."""

    pdf_path: str
    pdf_id: str
    out_dir: str
    bench_dir: str | None = None


def reusable_manifest(job: PdfJob, *, longest_side: int, code: str | None) -> PdfManifest | None:
    """The manifest of ``job.out_dir`` if it is a complete render of the same input, else ``None``.

    Same input means: status ``ok``, the same PDF id, bench, longest side and code version, the
    sha256 of the PDF's current bytes, and every listed PNG still present. A skipped PDF is never
    reused (trying it again is cheap and picks up a changed ``on_error``).
    """
    try:
        manifest = read_manifest(job.out_dir)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    same = (manifest.status == "ok" and manifest.pdf == job.pdf_id and manifest.bench_dir == job.bench_dir
            and manifest.longest_side == longest_side and manifest.code == code)
    if not same or not Path(job.pdf_path).is_file() or manifest.sha256 != file_sha256(job.pdf_path):
        return None
    return manifest if all(Path(p.image).is_file() for p in manifest.pages) else None


def _render_job(job: PdfJob, *, longest_side: int, on_error: OnError,
                code: str | None) -> tuple[dict | None, str | None, bool]:
    """Pool task: reuse or render one PDF; returns (manifest dict, error message, reused).

    A :class:`RasterizeError` comes back as a message so that one bad PDF does not stop the others.
    """
    reused = reusable_manifest(job, longest_side=longest_side, code=code)
    if reused is not None:
        return reused.to_dict(), None, True
    try:
        manifest = rasterize_pdf(job.pdf_path, job.out_dir, pdf_id=job.pdf_id, longest_side=longest_side,
                                 on_error=on_error, bench_dir=job.bench_dir, code=code)
    except RasterizeError as exc:
        return None, str(exc), False
    return manifest.to_dict(), None, False


def rasterize_pdfs(
    jobs: list[PdfJob], *, longest_side: int, on_error: OnError = "error", code: str | None = None,
    workers: int = 1,
) -> list[PdfManifest]:
    """Render many PDFs in this process (``workers=1``) or a pool of ``workers`` processes.

    A folder whose manifest matches its PDF (:func:`reusable_manifest`) is kept as it is, so a rerun
    after one PDF changed renders that PDF only. Every PDF is tried; with ``on_error="error"`` the
    failures are then raised together in one :class:`RasterizeError` (one line per PDF), after the
    good PDFs' folders are complete. Returns the manifests in the order of ``jobs``.
    """
    if on_error not in ("error", "skip"):
        raise ValueError(f"on_error must be 'error' or 'skip', got {on_error!r}")
    render = partial(_render_job, longest_side=longest_side, on_error=on_error, code=code)
    if workers <= 1 or len(jobs) <= 1:
        results = [render(job) for job in jobs]
    else:
        # fork, not spawn: a spawned worker re-runs the caller's __main__ (a Snakemake script, which
        # needs its `snakemake` object) and pays the imports again. The parent opens no PDF before
        # forking, so the workers start from pdfium's clean initialised state. Chunks amortise the
        # per-task overhead.
        context = multiprocessing.get_context("fork")
        try:
            with ProcessPoolExecutor(max_workers=min(workers, len(jobs)), mp_context=context) as pool:
                results = list(pool.map(render, jobs, chunksize=max(1, min(16, len(jobs) // (4 * workers)))))
        except BrokenProcessPool as exc:
            raise RasterizeError(f"a rendering process died ({exc}); killed for memory? A rerun keeps the "
                                 "PDFs already rendered") from exc
    errors = [error for _, error, _ in results if error]
    reused = sum(r for _, _, r in results)
    manifests = [PdfManifest.from_dict(data) for data, _, _ in results if data is not None]
    logger.info("%d PDF(s): %d rendered, %d reused unchanged, %d failed (%d worker(s))", len(jobs),
                len(jobs) - reused - len(errors), reused, len(errors), max(1, workers))
    if errors:
        raise RasterizeError("\n".join(errors) if len(errors) == 1 else
                             f"{len(errors)} PDFs cannot be rendered:\n" + "\n".join(errors))
    return manifests


def bench_jobs(bench_dir: str | Path, pages_root: str | Path) -> list[PdfJob]:
    """One :class:`PdfJob` per PDF of a bench folder, its pages under ``pages_root/<stem>/``."""
    from olmpipe.bench.folders import clean_dir, pdf_files, pdf_path_for
    from olmpipe.layout import page_dir_for

    return [PdfJob(pdf_path_for(bench_dir, stem, pdf_id), pdf_id, str(page_dir_for(stem, root=pages_root)),
                   clean_dir(bench_dir))
            for stem, pdf_id in pdf_files(bench_dir).items()]


def rasterize_benches(
    benches: Sequence[tuple[str | Path, str | Path]],
    manifest_path: str | Path,
    *,
    longest_side: int,
    on_error: OnError,
    code: str | None,
    workers: int = 1,
) -> list[PdfManifest]:
    """The rasterize stage: render every PDF of each ``(bench folder, page root)`` into
    ``<page root>/<pdf stem>/`` (:func:`rasterize_pdfs`) and join the manifests into ``manifest_path``.

    What the rule ``rasterize`` and ``olmpipe rasterize`` both run.
    """
    jobs = [job for bench_dir, pages_root in benches for job in bench_jobs(bench_dir, pages_root)]
    rasterize_pdfs(jobs, longest_side=longest_side, on_error=on_error, code=code, workers=workers)
    return merge_manifests([job.out_dir for job in jobs], manifest_path)


def rasterize_bench(
    bench_dir: str | Path, out_dir: str | Path, *, longest_side: int, on_error: OnError, workers: int = 1
) -> list[PdfManifest]:
    """Render every PDF of one bench folder into ``out_dir/pages/<pdf>/`` and write ``out_dir/manifest.jsonl``.

    The same layout, code version and reuse as the Snakemake rule ``rasterize``, without Snakemake.
    """
    from olmpipe.codeversion import rule_code_version
    from olmpipe.layout import MAIN_PAGES

    out_dir = Path(out_dir)
    return rasterize_benches([(bench_dir, out_dir / MAIN_PAGES)], out_dir / MERGED_MANIFEST_NAME,
                             longest_side=longest_side, on_error=on_error, code=rule_code_version("rasterize"),
                             workers=workers)


def main(argv: list[str] | None = None) -> int:
    """Command line: render the benches of the config as the workflow does, or one bench folder."""
    from olmpipe.bench.folders import BenchLayoutError, benches
    from olmpipe.codeversion import rule_code_version
    from olmpipe.config import ConfigError, load_config
    from olmpipe.layout import MAIN_PAGES, RASTERIZE_DIR, stage_config

    parser = argparse.ArgumentParser(prog="olmpipe rasterize", description=__doc__.split("\n\n")[0])
    parser.add_argument("bench_dir", nargs="?",
                        help="one bench folder (default: the benches of the config, as the workflow reads them: "
                             "bench.dir and bench.eval_dir, or with synth.enabled the synthetic bench and the real one)")
    parser.add_argument("--out", default=str(RASTERIZE_DIR), help="output folder (default: %(default)s)")
    parser.add_argument("--config", help="config YAML whose rasterize section gives the defaults")
    parser.add_argument("--longest-side", type=int, help="longest side in pixels (overrides the config)")
    parser.add_argument("--on-error", choices=["error", "skip"], help="overrides rasterize.on_error")
    parser.add_argument("--workers", type=int, default=1, help="rendering processes (default: %(default)s)")
    parser.add_argument("-v", "--verbose", action="store_true")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO,
                        format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = stage_config(load_config(args.config))
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    out = Path(args.out)
    if args.bench_dir:
        pairs = [(args.bench_dir, out / MAIN_PAGES)]
    else:
        pairs = [(bench.dir, out / bench.pages) for bench in benches(cfg)]
    longest_side = args.longest_side or cfg["rasterize"]["longest_side"]
    on_error = args.on_error or cfg["rasterize"]["on_error"]
    try:
        rasterize_benches(pairs, out / MERGED_MANIFEST_NAME, longest_side=longest_side, on_error=on_error,
                          code=rule_code_version("rasterize"), workers=args.workers)
    except (RasterizeError, FileNotFoundError, BenchLayoutError) as exc:
        hint = ("; synth.enabled trains on the synthetic bench: build it first (olmpipe synth build, or "
                "snakemake synth)") if cfg["synth"]["enabled"] and not args.bench_dir else ""
        logger.error("%s%s", exc, hint)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
