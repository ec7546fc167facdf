"""Snakemake script of rule soup: average the seeds' final weights (olmpipe.train.soup)."""

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "soup"):  # noqa: F821
    from olmpipe.train.soup import soup

    soup(
        snakemake.input.models,  # noqa: F821
        snakemake.output.model,  # noqa: F821
        dtype=snakemake.params.soup["dtype"],  # noqa: F821
    )
