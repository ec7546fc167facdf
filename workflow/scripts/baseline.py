"""Snakemake script of rule baseline_generate: generate and score the eval pages with the base model."""

import logging
from pathlib import Path

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.baseline import BaselineError, run_generation_and_scoring  # noqa: E402
from olmpipe.generate import GenerationError  # noqa: E402

# The model is an input when it is a folder (built or local); otherwise model.path is a hub id.
model_input = snakemake.input.model  # noqa: F821
model_inputs = [model_input] if isinstance(model_input, str) else list(model_input)
model_path = model_inputs[0] if model_inputs else snakemake.params.model["path"]  # noqa: F821

try:
    run_generation_and_scoring(
        {k: getattr(snakemake.params, k) for k in ("model", "generation", "baseline")},  # noqa: F821
        model_path=model_path,
        pages_index=snakemake.input.pages,  # noqa: F821
        tests_dir=snakemake.input.tests,  # noqa: F821
        out_dir=Path(snakemake.output.scores).parent,  # noqa: F821
        threads=snakemake.threads,  # noqa: F821
    )
except (BaselineError, GenerationError) as exc:
    raise SystemExit(f"baseline: {exc}\nlog: {snakemake.log[0]}") from None  # noqa: F821
