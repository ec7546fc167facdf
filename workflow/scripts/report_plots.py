"""Snakemake script of rule report_plots: reward curves, per-type pass rates, per-page change (PNG)."""

from pathlib import Path

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "report_plots"):  # noqa: F821
    from olmpipe.evaluate.compare import read_comparison
    from olmpipe.report.plots import write_plots

    written = write_plots(
        read_comparison(snakemake.input.comparison),  # noqa: F821
        # results/train/seed{seed}/model.metrics.jsonl (train_seed's copy) -> label seed{seed}
        {Path(m).parent.name: Path(m) for m in snakemake.input.metrics},  # noqa: F821
        Path(snakemake.output.rewards).parent,  # noqa: F821
        # with an SFT stage: each SFT seed's metrics (results/sft/seed{seed}/model.metrics.jsonl) -> "sft seed{seed}"
        {f"sft {Path(m).parent.name}": Path(m) for m in snakemake.input.sft_metrics}  # noqa: F821
        if snakemake.input.sft_metrics  # noqa: F821
        else None,
    )
    expected = {Path(p) for p in snakemake.output}  # noqa: F821
    if set(written.values()) != expected:
        raise SystemExit(f"report_plots: wrote {sorted(written.values())}, the rule declares {sorted(expected)}")
