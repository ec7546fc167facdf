"""Snakemake script of rule report_plots: reward curves, per-type pass rates, per-page change (PNG)."""

import logging
from pathlib import Path

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

from olmpipe.compare import read_comparison
from olmpipe.plots import write_plots

seed_runs = [Path(m).parent for m in snakemake.input.seed_models]  # noqa: F821
written = write_plots(
    read_comparison(snakemake.input.comparison),  # noqa: F821
    # results/train/seed{seed}/model -> label seed{seed}, results/train/seed{seed}/metrics.jsonl
    {run.name: run / "metrics.jsonl" for run in seed_runs},
    Path(snakemake.output.rewards).parent,  # noqa: F821
)
expected = {Path(p) for p in snakemake.output}  # noqa: F821
if set(written.values()) != expected:
    raise SystemExit(f"report_plots: wrote {sorted(written.values())}, the rule declares {sorted(expected)}")
