"""Snakemake script of rule rasterize: render the bench PDFs (olmpipe.rasterize.rasterize_benches), merge."""

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "rasterize"):  # noqa: F821
    from olmpipe.rasterize import RasterizeError, rasterize_benches

    try:
        rasterize_benches(
            snakemake.params.benches,  # noqa: F821
            snakemake.output.manifest,  # noqa: F821
            longest_side=snakemake.params.longest_side,  # noqa: F821
            on_error=snakemake.params.on_error,  # noqa: F821
            code=snakemake.params.code,  # noqa: F821
            workers=snakemake.threads,  # noqa: F821
        )
    except RasterizeError as exc:
        raise SystemExit(f"rasterize: {exc}\n(set rasterize.on_error: skip to go on without them)") from None
