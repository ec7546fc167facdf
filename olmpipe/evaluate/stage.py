"""Stage 5, evaluate: did training help, where, and is the difference real?

    python -m olmpipe.evaluate.stage --config config/config.yaml
    olmpipe evaluate --compare-only          # compare existing run folders only
    olmpipe evaluate --table results/evaluate/comparison.json   # print the console table again
    python -m olmpipe.evaluate.stage --generate-only --settings JSON ...  # step 1 only (rule evaluate_generate)

Two steps:

1. generate the eval pages with the trained (souped) model and score them, through the very
   engine the baseline stage uses (:func:`olmpipe.evaluate.engine.run_generation_and_scoring`) with the
   same config sections (``generation``, ``eval_run``), so both runs share every setting; the
   output folder ``results/evaluate/<model name>/`` has the baseline's layout;
2. compare it with ``results/baseline/<model name>/`` (:mod:`olmpipe.evaluate.compare`): overall, per test
   type and per JSONL category, bootstrap intervals, a paired sign-flip test and the
   reward-hacking guards, written to ``results/evaluate/comparison.json`` and ``.csv``. The
   console (and the Snakemake log) ends with a short table.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.evaluate.compare import (
    CompareSettings,
    Comparison,
    ComparisonError,
    compare_runs,
    format_table,
    load_run,
    read_comparison,
    write_comparison,
)
from olmpipe.layout import (
    BASELINE_DIR,
    COMPARISON_CSV,
    COMPARISON_JSON,
    EVALUATE_DIR,
    PAGE_INDEX,
    SOUP_MODEL_DIR,
    VALIDATED_TESTS,
    baseline_run_dir,
    evaluate_run_dir,
)

log = logging.getLogger(__name__)

def trained_name(cfg: Mapping[str, Any]) -> str:
    """Display name of the trained (GRPO) model in tables and the report."""
    return f"{cfg['model']['name']}+grpo"


def grpo_baseline_name(cfg: Mapping[str, Any]) -> str:
    """Display name of the model GRPO started from, the baseline of ``comparison.json``: the SFT
    model (``<model.name>+sft``) with ``sft.enabled``, else the base model (``model.name``)."""
    from olmpipe.layout import sft_model_name

    return sft_model_name(cfg) if cfg["sft"]["enabled"] else cfg["model"]["name"]


def compare_folders(
    cfg: Mapping[str, Any],
    baseline_dir: str | Path,
    trained_dir: str | Path,
    json_path: str | Path = str(COMPARISON_JSON),
    csv_path: str | Path = str(COMPARISON_CSV),
    *,
    baseline_name: str | None = None,
    trained: str | None = None,
) -> Comparison:
    """Compare two scored run folders with the config's ``evaluate`` settings and write the files.

    ``baseline_name``/``trained``: the two models' names in the comparison (default: the model GRPO
    started from, :func:`grpo_baseline_name`, and :func:`trained_name`); the SFT comparison passes
    the base model's and the SFT model's.
    """
    settings = CompareSettings.from_config(cfg)
    comparison = compare_runs(
        load_run(baseline_dir, baseline_name or grpo_baseline_name(cfg)),
        load_run(trained_dir, trained or trained_name(cfg)), settings,
    )
    write_comparison(comparison, json_path, csv_path)
    log.info("comparison written to %s and %s", json_path, csv_path)
    return comparison


def main(argv: list[str] | None = None) -> int:
    """Command line of the evaluate stage (see the module docstring)."""
    from olmpipe.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="olmpipe evaluate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="config YAML (default config/config.yaml)")
    parser.add_argument(
        "--settings", metavar="JSON", help="config sections as one JSON object, instead of --config (workflow)"
    )
    parser.add_argument("--model", default=str(SOUP_MODEL_DIR), help="trained model folder (default: %(default)s)")
    parser.add_argument(
        "--pages", default=str(PAGE_INDEX), help="page index (default: %(default)s)"
    )
    parser.add_argument(
        "--tests", default=str(VALIDATED_TESTS), help="validated tests (default: %(default)s)"
    )
    parser.add_argument("--baseline", help=f"baseline run folder (default: {BASELINE_DIR}/<model.name>)")
    parser.add_argument("--out", help=f"trained run folder (default: {EVALUATE_DIR}/<model.name>)")
    parser.add_argument("--json", default=str(COMPARISON_JSON), help="comparison JSON (default: %(default)s)")
    parser.add_argument("--csv", default=str(COMPARISON_CSV), help="comparison CSV (default: %(default)s)")
    parser.add_argument("--threads", type=int, default=1, help="torch CPU threads (default: %(default)s)")
    parser.add_argument(
        "--compare-only", action="store_true", help="skip generation; compare existing folders"
    )
    parser.add_argument(
        "--generate-only", action="store_true", help="only generate and score the trained model (workflow)"
    )
    parser.add_argument("--table", metavar="JSON", help="only print the console table of a comparison file")
    parser.add_argument("--name", help="name of the generated model in its records (default: <model.name>+grpo)")
    parser.add_argument("--exit-with-job", action="store_true",
                        help="stop (exit 75; the journal keeps every finished generation) when the process that "
                             "started this one is gone, e.g. Snakemake killed (the workflow passes it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        if args.table:
            sys.stdout.write(format_table(read_comparison(args.table)) + "\n")
            return 0
        if args.settings:
            from olmpipe.config import config_from_settings

            cfg = config_from_settings(args.settings)
        else:
            cfg = load_config(args.config)
    except (ConfigError, ComparisonError) as exc:
        log.error("%s", exc)
        return 2 if isinstance(exc, ConfigError) else 1
    baseline_dir = args.baseline or baseline_run_dir(cfg)
    out_dir = args.out or evaluate_run_dir(cfg)
    try:
        if not args.compare_only:
            from olmpipe.evaluate.engine import run_logged
            from olmpipe.procs import exit_with_job

            with exit_with_job("generation job") if args.exit_with_job else contextlib.nullcontext():
                code = run_logged(cfg, args.model, args.pages, args.tests, out_dir, args.threads,
                                  model_name=args.name or trained_name(cfg))
            if code:
                return code
            if args.generate_only:
                return 0
        comparison = compare_folders(cfg, baseline_dir, out_dir, args.json, args.csv)
    except ComparisonError as exc:
        log.error("%s", exc)
        return 1
    sys.stdout.write(format_table(comparison.to_json()) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
