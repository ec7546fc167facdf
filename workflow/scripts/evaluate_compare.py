"""Snakemake script of rules evaluate_compare and evaluate_sft_compare: baseline vs trained -> comparison.json / .csv."""

from pathlib import Path

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], snakemake.rule) as log:  # noqa: F821
    from olmpipe.evaluate.compare import ComparisonError, format_table
    from olmpipe.evaluate.stage import compare_folders

    try:
        comparison = compare_folders(
            {"model": snakemake.params.model, "evaluate": snakemake.params.evaluate},  # noqa: F821
            baseline_dir=Path(snakemake.input.baseline_verdicts).parent,  # noqa: F821
            trained_dir=Path(snakemake.input.trained_verdicts).parent,  # noqa: F821
            json_path=snakemake.output.json,  # noqa: F821
            csv_path=snakemake.output.csv,  # noqa: F821
            baseline_name=snakemake.params.names["baseline"],  # noqa: F821
            trained=snakemake.params.names["trained"],  # noqa: F821
        )
    except ComparisonError as exc:
        raise SystemExit(f"evaluate: {exc}") from None
    log.info("\n%s", format_table(comparison.to_json()))
