"""Snakemake script of rule rasterize: render the bench PDFs (olmpipe.rasterize.rasterize_pdfs), merge."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.rasterize import RasterizeError, bench_jobs, merge_manifests, rasterize_pdfs

benches = snakemake.params.benches  # noqa: F821
jobs = [job for bench_dir, pages_root in benches for job in bench_jobs(bench_dir, pages_root)]
try:
    rasterize_pdfs(
        jobs,
        longest_side=snakemake.params.longest_side,  # noqa: F821
        on_error=snakemake.params.on_error,  # noqa: F821
        code=snakemake.params.code,  # noqa: F821
        workers=snakemake.threads,  # noqa: F821
    )
except RasterizeError as exc:
    logging.getLogger("olmpipe.rasterize").error("%s", exc)
    raise SystemExit(f"rasterize: {exc}\n(set rasterize.on_error: skip to go on without them)") from None
merge_manifests([job.out_dir for job in jobs], snakemake.output.manifest)  # noqa: F821
