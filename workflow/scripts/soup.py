"""Snakemake script of rule soup: average the seeds' final weights (olmpipe.train.soup)."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.train.soup import soup

soup(
    snakemake.input.models,  # noqa: F821
    snakemake.output.model,  # noqa: F821
    dtype=snakemake.params.soup["dtype"],  # noqa: F821
)
