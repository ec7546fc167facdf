"""Snakemake script of rule report_html: the self-contained HTML report; ends with the console table."""

import sys
from pathlib import Path

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "report_html") as log:  # noqa: F821
    from olmpipe.evaluate.compare import format_table, read_comparison
    from olmpipe.records.difficulty import read_summary
    from olmpipe.report.page import ReportSettings, write_report

    comparison = read_comparison(snakemake.input.comparison)  # noqa: F821
    write_report(
        snakemake.output.html,  # noqa: F821
        comparison=comparison,
        plots={Path(p).stem: p for p in snakemake.input.plots},  # noqa: F821
        settings=ReportSettings.from_config({"report": snakemake.params.report}),  # noqa: F821
        config=snakemake.params.config,  # noqa: F821
        pages_index=snakemake.input.pages,  # noqa: F821
        tests_dir=snakemake.input.tests,  # noqa: F821
        baseline_dir=Path(snakemake.input.baseline_generations).parent,  # noqa: F821
        trained_dir=Path(snakemake.input.trained_generations).parent,  # noqa: F821
        # the difficulty filter's counts (no input: the filter was off) and each seed's training metrics
        difficulty=read_summary(snakemake.input.difficulty) if snakemake.input.difficulty else None,  # noqa: F821
        metrics={Path(m).parent.name: m for m in snakemake.input.metrics},  # noqa: F821
        # with an SFT stage: base vs the SFT model (the base -> SFT -> GRPO section)
        sft_comparison=read_comparison(snakemake.input.sft_comparison) if snakemake.input.sft_comparison else None,  # noqa: F821
    )
    # The last job of the `train` target: its table is what the user reads when the run ends (with an
    # SFT stage, base -> SFT first, then SFT -> GRPO).
    table = format_table(comparison)
    if snakemake.input.sft_comparison:  # noqa: F821
        table = format_table(read_comparison(snakemake.input.sft_comparison)) + "\n\n" + table  # noqa: F821
    log.info("\n%s", table)
    sys.stdout.write(f"\n{table}\nreport: {snakemake.output.html}\n")  # noqa: F821
