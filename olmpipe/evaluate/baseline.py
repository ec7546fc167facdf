"""Stage 3, baseline: how good is the model before training? Generate the eval pages and score them.

    python -m olmpipe.evaluate.baseline --config config/config.yaml
    olmpipe baseline --model results/model/tiny --out results/baseline/tiny-qwen2.5-vl

A thin entry point: the work is done by :mod:`olmpipe.evaluate.engine`, the engine the evaluate stage runs
on the trained model too, with the same ``generation`` and ``eval_run`` settings. Writes
``results/baseline/<model name>/`` (layout in :mod:`olmpipe.evaluate.engine`).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from typing import Any

logger = logging.getLogger(__name__)


def main(argv: list[str] | None = None) -> int:
    """Command line: ``olmpipe baseline [--config C] [--model PATH] [--out DIR] [--threads N]``.

    The workflow's ``baseline_generate`` rule runs this through ``shell:`` with ``--settings``;
    not through ``script:``, because vLLM spawns its engine process, which re-imports the main
    module: a Snakemake-generated script would run again there (docs/vllm.md).
    """
    from olmpipe.config import ConfigError, config_from_settings, load_config
    from olmpipe.evaluate.engine import run_logged
    from olmpipe.layout import (
        BASELINE_DIR,
        PAGE_INDEX,
        TINY_MODEL_DIR,
        VALIDATED_TESTS,
        baseline_run_dir,
        model_dir,
    )
    from olmpipe.procs import exit_with_job

    parser = argparse.ArgumentParser(prog="olmpipe baseline", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="config YAML (default config/config.yaml)")
    parser.add_argument(
        "--settings", metavar="JSON", help="config sections as one JSON object, instead of --config (workflow)"
    )
    parser.add_argument(
        "--model", help=f"model folder (default: the config's model, {TINY_MODEL_DIR} when embedded)"
    )
    parser.add_argument(
        "--pages", default=str(PAGE_INDEX), help="page index (default: %(default)s)"
    )
    parser.add_argument(
        "--tests", default=str(VALIDATED_TESTS), help="validated tests (default: %(default)s)"
    )
    parser.add_argument("--out", help=f"output folder (default: {BASELINE_DIR}/<model.name>)")
    parser.add_argument("--threads", type=int, default=1, help="CPU cores of the job (default: %(default)s)")
    parser.add_argument(
        "--backend", choices=["transformers", "vllm", "openai"], help="overrides generation.backend"
    )
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--exit-with-job", action="store_true",
                        help="stop (exit 75; the journal keeps every finished generation) when the process that "
                             "started this one is gone, e.g. Snakemake killed (the workflow passes it)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = {}
    if args.backend:
        overrides["generation"] = {"backend": args.backend}
    if args.no_progress:
        overrides["eval_run"] = {"progress": False}
    try:
        cfg = config_from_settings(args.settings, overrides) if args.settings else load_config(args.config, overrides)
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    out = args.out or baseline_run_dir(cfg)
    with exit_with_job("generation job") if args.exit_with_job else contextlib.nullcontext():
        return run_logged(cfg, args.model or model_dir(cfg), args.pages, args.tests, out, args.threads)


if __name__ == "__main__":
    sys.exit(main())
