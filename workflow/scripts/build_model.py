"""Snakemake script of rule build_model: build the embedded tiny model (model.tiny)."""

import os

os.environ.setdefault("OMP_NUM_THREADS", str(snakemake.threads))  # noqa: F821

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "build_model"):  # noqa: F821
    from olmpipe.models.tiny import build_tiny_model

    tiny = snakemake.params.tiny  # noqa: F821
    build_tiny_model(
        snakemake.output.model,  # noqa: F821
        seed=tiny["seed"],
        hidden_size=tiny["hidden_size"],
        num_layers=tiny["num_layers"],
        image_mean=tiny["image_mean"],
        num_heads=tiny["num_heads"],
        vocab_size=tiny["vocab_size"],
        architecture=tiny["architecture"],
    )
