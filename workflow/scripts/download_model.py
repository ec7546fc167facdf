"""Snakemake script of rule download_model: fetch the hub model once into its results folder."""

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "download_model"):  # noqa: F821
    from olmpipe.models.hub import ModelDownloadError, download

    try:
        download(snakemake.params.repo, snakemake.params.revision, snakemake.output.model)  # noqa: F821
    except ModelDownloadError as exc:
        # the refusal says what is wrong and how to fix it; the traceback would add nothing
        raise SystemExit(f"download_model: {exc}\n(log: {snakemake.log[0]})") from None  # noqa: F821
