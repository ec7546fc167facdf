"""Snakemake script of rule rasterize_manifest: merge the per-PDF manifests into one JSONL."""

import logging

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.rasterize import merge_manifests

merge_manifests(list(snakemake.input.pages), snakemake.output.manifest)  # noqa: F821
