"""Snakemake script of rule download_model: fetch the hub model once into its results folder."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.models.hub import download

download(snakemake.params.repo, snakemake.params.revision, snakemake.output.model)  # noqa: F821
