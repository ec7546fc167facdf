"""Snakemake script of rule validate: check the bench tests, write tests/, report.json, pages.jsonl."""

import shutil
from pathlib import Path

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "validate"):  # noqa: F821
    from olmpipe.validate.stage import OutputError, ValidationFailed, run_validate

    try:
        run_validate(
            {"bench": snakemake.params.bench, "validate": snakemake.params.validate},  # noqa: F821
            manifest_path=snakemake.input.manifest,  # noqa: F821
            tests_dir=snakemake.output.tests,  # noqa: F821
            report_path=snakemake.output.report,  # noqa: F821
            pages_path=snakemake.output.pages,  # noqa: F821
        )
    except ValidationFailed as exc:
        # Snakemake deletes the outputs of a failed job: keep the report next to the log.
        log = Path(snakemake.log[0])  # noqa: F821
        kept = log.with_name(f"{log.stem}.{Path(snakemake.output.report).name}")  # noqa: F821
        shutil.copyfile(snakemake.output.report, kept)  # noqa: F821
        raise SystemExit(f"validate: {exc}\nfull report: {kept} (and {snakemake.log[0]})") from None  # noqa: F821
    except OutputError as exc:
        raise SystemExit(f"validate: {exc}") from None
