"""Rasterize at olmOCR-Bench's scale: the Snakemake stage vs rendering in one process, in one run.

Builds a bench of ``--pdfs`` PDFs (default 1,407, olmOCR-Bench's size) from the bundled sample by
copying its PDFs under new names (``c<k>/<pdf>``) with their tests (ids suffixed), then measures:

1. **in process**: :func:`olmpipe.rasterize.rasterize_pdf` on every PDF, one after another, in this
   Python process (the rate the issue compares against, 14.3 pages/s on the reference machine);
2. **stage**: ``snakemake --cores N rasterize`` then ``validate`` on that bench (a fresh working
   directory, the repository's Snakefile), wall time of each command and pages/s of both together;
3. **no-op dry run**: ``snakemake -n validate`` once everything is up to date (target: under 5 s);
4. **one changed PDF**: one PDF rewritten, then ``snakemake rasterize``: how many PDFs it re-rendered.

Prints a table; the stage's rate should be at least 80% of the in-process rate (issue 14, item 8)::

    python benchmarks/rasterize_scale.py                       # 1,407 PDFs at 1288 px, --cores 2
    python benchmarks/rasterize_scale.py --pdfs 200 --cores 2 --json out.json

Validate runs with ``check_math: false`` unless ``--check-math`` (the KaTeX check is the validate
stage's own cost, not rasterization's; with it, the math cache makes the copies cheap).
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
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "bench" / "olmocr-sample"


def build_bench(root: Path, n_pdfs: int) -> tuple[int, int]:
    """Copy the sample's PDFs round-robin under ``root/pdfs/c<k>/`` with their tests; (pdfs, tests)."""
    pdfs = sorted(p.relative_to(SAMPLE / "pdfs").as_posix() for p in (SAMPLE / "pdfs").rglob("*.pdf"))
    records = [json.loads(line) for f in sorted(SAMPLE.glob("*.jsonl"))
               for line in f.read_text().splitlines() if line.strip()]
    by_pdf: dict[str, list[dict]] = {}
    for record in records:
        by_pdf.setdefault(record["pdf"], []).append(record)
    tests = []
    for k in range(n_pdfs):
        source = pdfs[k % len(pdfs)]
        name = f"c{k // len(pdfs):03d}/{source}"
        target = root / "pdfs" / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(SAMPLE / "pdfs" / source, target)
        tests += [{**r, "pdf": name, "id": f"{r['id']}-c{k}"} for r in by_pdf.get(source, [])]
    with open(root / "dataset.jsonl", "w", encoding="utf-8") as fh:
        fh.writelines(json.dumps(t) + "\n" for t in tests)
    return n_pdfs, len(tests)


def in_process(bench: Path, out: Path, longest_side: int) -> tuple[int, float]:
    """Render every PDF of ``bench`` here, one after another; (pages, seconds)."""
    from olmpipe.rasterize import bench_jobs, rasterize_pdf

    start = time.perf_counter()
    pages = 0
    for job in bench_jobs(bench, out):
        pages += len(rasterize_pdf(job.pdf_path, job.out_dir, pdf_id=job.pdf_id,
                                   longest_side=longest_side).pages)
    return pages, time.perf_counter() - start


def snakemake(workdir: Path, cores: int, *args: str) -> float:
    """Run the repository's Snakefile in ``workdir``; wall seconds (raises with the output on failure)."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--cores", str(cores), "--nolock", *args]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    return seconds


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pdfs", type=int, default=1407, help="PDFs in the bench (default: %(default)s)")
    parser.add_argument("--longest-side", type=int, default=1288, help="default: %(default)s")
    parser.add_argument("--cores", type=int, default=2, help="snakemake --cores (default: %(default)s)")
    parser.add_argument("--check-math", action="store_true", help="validate with the KaTeX math check")
    parser.add_argument("--json", help="also write the figures to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    with tempfile.TemporaryDirectory(prefix="rasterize-scale-") as tmp:
        work = Path(tmp)
        n_pdfs, n_tests = build_bench(work / "bench", args.pdfs)
        pages, local_s = in_process(work / "bench", work / "inprocess", args.longest_side)
        shutil.rmtree(work / "inprocess")
        (work / "config").mkdir()
        (work / "config" / "config.yaml").write_text(
            f"bench:\n  dir: bench\nrasterize:\n  longest_side: {args.longest_side}\n"
            f"validate:\n  check_math: {str(args.check_math).lower()}\n")
        rasterize_s = snakemake(work, args.cores, "rasterize")
        validate_s = snakemake(work, args.cores, "validate")
        dry_s = snakemake(work, args.cores, "-n", "validate")
        changed = work / "bench" / "pdfs" / "c000" / "earnings.pdf"
        changed.write_bytes(changed.read_bytes() + b"\n% changed\n")
        rerun_s = snakemake(work, args.cores, "rasterize")
        rerun_log = (work / "logs" / "rasterize" / "rasterize.log").read_text().strip().splitlines()
        rendered_line = next(line for line in reversed(rerun_log) if "PDF(s):" in line)

    local_rate = pages / local_s
    stage_rate = pages / (rasterize_s + validate_s)
    rows = [
        ("bench", f"{n_pdfs} PDFs, {pages} pages, {n_tests} tests, {args.longest_side} px"),
        ("in process (1 process)", f"{local_s:.1f} s, {local_rate:.1f} pages/s"),
        (f"snakemake rasterize (--cores {args.cores})", f"{rasterize_s:.1f} s, {pages / rasterize_s:.1f} pages/s"),
        ("snakemake validate", f"{validate_s:.1f} s"),
        ("stage: rasterize + validate", f"{stage_rate:.1f} pages/s = {stage_rate / local_rate:.0%} of in process"),
        ("no-op dry run (-n validate)", f"{dry_s:.1f} s"),
        ("one PDF changed, rasterize", f"{rerun_s:.1f} s; {rendered_line.split(':', 2)[-1].strip()}"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value}")  # a benchmark prints its table
    if args.json:
        Path(args.json).write_text(json.dumps({
            "pdfs": n_pdfs, "pages": pages, "tests": n_tests, "longest_side": args.longest_side,
            "cores": args.cores, "in_process_s": local_s, "rasterize_s": rasterize_s, "validate_s": validate_s,
            "dry_run_s": dry_s, "changed_pdf_rerun_s": rerun_s, "stage_share_of_in_process": stage_rate / local_rate,
        }, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
