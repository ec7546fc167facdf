"""Rasterization throughput: olmpipe.rasterize (pypdfium2, in process) vs one pdftoppm subprocess per page.

The scripts olmpipe replaces render each page with a ``pdftoppm`` subprocess (olmOCR's
``render_pdf_to_base64png`` also runs ``pdfinfo`` first to get the page size). This benchmark
renders the same pages at the same longest side with each method in the same run, rounds
interleaved, and prints pages/s (best round) with the ratio to the pdftoppm baseline::

    python benchmarks/rasterize.py                          # the bundled sample, 1288 px, 3 rounds
    python benchmarks/rasterize.py --bench DIR --longest-side 1024 --rounds 5 --json out.json

Single-threaded on purpose (one job per PDF is how Snakemake parallelizes rasterization).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import pypdfium2 as pdfium
from PIL import Image

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from olmpipe.bench.folders import discover_pdfs, pdf_path_for
from olmpipe.rasterize import rasterize_pdf, render_page


def pages_of(bench: Path) -> list[tuple[Path, int]]:
    """(pdf path, 1-based page) of every page of the bench."""
    pages = []
    for stem in discover_pdfs(bench):
        path = Path(pdf_path_for(bench, stem))
        doc = pdfium.PdfDocument(str(path))
        pages += [(path, n) for n in range(1, len(doc) + 1)]
        doc.close()
    return pages


def run_olmpipe(pages, out: Path, longest: int) -> list[tuple[int, int]]:
    """olmpipe.rasterize.rasterize_pdf on each PDF (render + PNG + manifest)."""
    sizes = []
    for i, pdf in enumerate(sorted({p for p, _ in pages})):
        manifest = rasterize_pdf(pdf, out / str(i), pdf_id=pdf.name, longest_side=longest)
        sizes += [(p.width, p.height) for p in manifest.pages]
    return sizes


def run_render_only(pages, out: Path, longest: int) -> list[tuple[int, int]]:
    """pypdfium2 rendering to PIL images, no PNG encoding: the cost of the renderer alone."""
    sizes = []
    for pdf in sorted({p for p, _ in pages}):
        doc = pdfium.PdfDocument(str(pdf))
        for index in range(len(doc)):
            image = render_page(doc[index], longest)
            sizes.append(image.size)
        doc.close()
    return sizes


def run_png_level6(pages, out: Path, longest: int) -> list[tuple[int, int]]:
    """Like olmpipe but with PIL's default PNG compression (level 6), to justify level 1."""
    sizes = []
    for i, (pdf, page) in enumerate(pages):
        doc = pdfium.PdfDocument(str(pdf))
        image = render_page(doc[page - 1], longest)
        image.save(out / f"{i}.png", format="PNG", compress_level=6)
        sizes.append(image.size)
        doc.close()
    return sizes


def run_pdftoppm(pages, out: Path, longest: int) -> list[tuple[int, int]]:
    """One ``pdftoppm -png -scale-to`` subprocess per page, PNG written to a file."""
    sizes = []
    for i, (pdf, page) in enumerate(pages):
        target = out / f"{i}"
        subprocess.run(["pdftoppm", "-png", "-f", str(page), "-l", str(page), "-scale-to", str(longest),
                        "-singlefile", str(pdf), str(target)], check=True, capture_output=True, timeout=120)
        with Image.open(f"{target}.png") as image:
            sizes.append(image.size)
    return sizes


def run_olmocr_style(pages, out: Path, longest: int) -> list[tuple[int, int]]:
    """olmOCR's render_pdf_to_base64png: ``pdfinfo`` for the MediaBox, then ``pdftoppm -r`` to stdout."""
    sizes = []
    for pdf, page in pages:
        info = subprocess.run(["pdfinfo", "-f", str(page), "-l", str(page), "-box", str(pdf)], check=True,
                              capture_output=True, text=True, timeout=120).stdout
        box = next(line for line in info.splitlines() if "MediaBox" in line).split(":")[1].split()
        x0, y0, x1, y1 = map(float, box)
        dpi = longest * 72 / max(abs(x1 - x0), abs(y1 - y0))
        png = subprocess.run(["pdftoppm", "-png", "-f", str(page), "-l", str(page), "-r", str(dpi), str(pdf)],
                             check=True, capture_output=True, timeout=120).stdout
        from io import BytesIO

        with Image.open(BytesIO(png)) as image:
            sizes.append(image.size)
    return sizes


METHODS: dict[str, tuple[str, Callable]] = {
    "olmpipe": ("olmpipe.rasterize (pypdfium2 + PNG level 1)", run_olmpipe),
    "render-only": ("pypdfium2 render only, no PNG", run_render_only),
    "png-level-6": ("pypdfium2 + PNG level 6 (PIL default)", run_png_level6),
    "pdftoppm": ("pdftoppm subprocess per page (baseline)", run_pdftoppm),
    "olmocr": ("pdfinfo + pdftoppm per page (olmOCR scripts)", run_olmocr_style),
}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bench", type=Path, default=REPO / "data" / "bench" / "olmocr-sample")
    parser.add_argument("--longest-side", type=int, default=1288)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    parser.add_argument("--json", type=Path, help="also write the figures as JSON here")
    args = parser.parse_args(argv)
    if shutil.which("pdftoppm") is None:
        parser.error("pdftoppm not found (apt-get install poppler-utils)")
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    pages = pages_of(args.bench)
    best: dict[str, float] = {}
    sizes: dict[str, list] = {}
    for _ in range(args.rounds):
        for name in args.methods:
            with tempfile.TemporaryDirectory() as tmp:
                start = time.perf_counter()
                sizes[name] = METHODS[name][1](pages, Path(tmp), args.longest_side)
                elapsed = time.perf_counter() - start
            best[name] = min(best.get(name, float("inf")), elapsed)

    baseline = best.get("pdftoppm")
    print(f"{len(pages)} pages of {args.bench}, longest side {args.longest_side} px, best of {args.rounds} rounds\n")
    print(f"{'method':<48} {'seconds':>8} {'pages/s':>9} {'vs pdftoppm':>12} {'longest side':>13}")
    rows = []
    for name in args.methods:
        seconds = best[name]
        rate = len(pages) / seconds
        ratio = baseline / seconds if baseline else float("nan")
        longest = sorted({max(s) for s in sizes[name]})
        print(f"{METHODS[name][0]:<48} {seconds:>8.2f} {rate:>9.1f} {ratio:>11.2f}x {longest!s:>13}")
        rows.append({"method": name, "seconds": seconds, "pages_per_s": rate, "ratio_vs_pdftoppm": ratio,
                     "longest_sides": longest})
    if args.json:
        args.json.write_text(json.dumps({"pages": len(pages), "longest_side": args.longest_side,
                                         "rounds": args.rounds, "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
