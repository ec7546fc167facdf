"""Snakemake script of rule validate_audit: what trivial answers earn per page -> audit.jsonl, audit.json."""

import sys

from olmpipe.rulejob import rule_job

with rule_job(snakemake.log[0], "validate_audit") as log:  # noqa: F821
    from olmpipe.validate.audit import AuditError, format_audit, run_audit

    cfg = {
        "rewards": snakemake.params.rewards,  # noqa: F821
        "validate": {"audit": snakemake.params.audit},  # noqa: F821
        "train": {"grpo": {"max_completion_length": snakemake.params.max_completion_length}},  # noqa: F821
    }
    try:
        summary = run_audit(cfg, pages_path=snakemake.input.pages, tests_dir=snakemake.input.tests,  # noqa: F821
                            records_path=snakemake.output.records, summary_path=snakemake.output.summary)  # noqa: F821
    except AuditError as exc:
        raise SystemExit(f"validate_audit: {exc}") from None
    table = format_audit(summary)
    log.info("\n%s", table)
    sys.stdout.write(f"\n{table}\n")
