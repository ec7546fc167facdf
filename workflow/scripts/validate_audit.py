"""Snakemake script of rule validate_audit: what trivial answers earn per page -> audit.jsonl, audit.json."""

import logging
import sys

logging.basicConfig(filename=snakemake.log[0], level=logging.INFO, force=True)  # noqa: F821

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
logging.getLogger("validate_audit").info("\n%s", table)
sys.stdout.write(f"\n{table}\n")
