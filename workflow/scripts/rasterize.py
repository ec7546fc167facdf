"""Snakemake script of rule rasterize_pdf: render one PDF (olmpipe.rasterize.rasterize_pdf)."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.rasterize import RasterizeError, rasterize_pdf

try:
    rasterize_pdf(
        snakemake.input.pdf,  # noqa: F821
        snakemake.output.pages,  # noqa: F821
        pdf_id=f"{snakemake.wildcards.pdf}.pdf",  # noqa: F821
        longest_side=snakemake.params.longest_side,  # noqa: F821
        on_error=snakemake.params.on_error,  # noqa: F821
        bench_dir=snakemake.params.bench_dir,  # noqa: F821
    )
except RasterizeError as exc:
    logging.getLogger("olmpipe.rasterize").error("%s", exc)
    raise SystemExit(f"rasterize: {exc} (set rasterize.on_error: skip to go on without it)") from None
