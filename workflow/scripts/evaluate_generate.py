"""Snakemake script of rule evaluate_generate: generate and score the eval pages with the trained model."""

import logging
from pathlib import Path

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.baseline import BaselineError  # noqa: E402
from olmpipe.evaluate import generate_trained  # noqa: E402
from olmpipe.generate import GenerationError  # noqa: E402

try:
    generate_trained(
        {k: getattr(snakemake.params, k) for k in ("model", "generation", "baseline")},  # noqa: F821
        model_path=snakemake.input.model,  # noqa: F821
        pages_index=snakemake.input.pages,  # noqa: F821
        tests_dir=snakemake.input.tests,  # noqa: F821
        out_dir=Path(snakemake.output.scores).parent,  # noqa: F821
        threads=snakemake.threads,  # noqa: F821
    )
except (BaselineError, GenerationError) as exc:
    raise SystemExit(f"evaluate: {exc}\nlog: {snakemake.log[0]}") from None  # noqa: F821
