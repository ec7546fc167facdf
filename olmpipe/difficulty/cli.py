"""Command line of the difficulty stage: ``olmpipe difficulty [sample|filter]`` (``python -m olmpipe.difficulty``).

    olmpipe difficulty                       # both steps on config/config.yaml
    olmpipe difficulty sample --model results/model/tiny --threads 2
    olmpipe difficulty filter --config my.yaml

The workflow's ``difficulty_sample`` rule runs ``python -m olmpipe.difficulty sample --settings
JSON`` through ``shell:`` (vLLM spawns its engine process, which re-imports the main module: a
module with a main guard is safe, a Snakemake-generated script is not; docs/vllm.md); the
``difficulty_filter`` rule calls :func:`olmpipe.difficulty.filter_page_index` from its script.
Exit codes: 0 done, 1 the stage failed (one logged line says why; also when another sampler writes the
folder's journal), 2 bad arguments or config, 75 stopped by SIGTERM or, with ``--exit-with-job``, because
its Snakemake is gone (the journal keeps every finished generation).
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import sys
from pathlib import Path
from typing import Any

from olmpipe.records.difficulty import DROPPED_NAME, FILTER_NAME, FILTERED_INDEX_NAME, STATS_NAME

logger = logging.getLogger(__name__)

STEPS = ("all", "sample", "filter")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from olmpipe.layout import DIFFICULTY_DIR, PAGE_INDEX, TINY_MODEL_DIR, VALIDATED_TESTS

    parser = argparse.ArgumentParser(prog="olmpipe difficulty", description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("step", nargs="?", choices=STEPS, default="all",
                        help="sample (k completions per train page, scored), filter (the training page "
                             "index without the pages that carry no signal) or all (default)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", help="config YAML (default config/config.yaml)")
    source.add_argument("--settings", metavar="JSON",
                        help="config sections as one JSON object, instead of --config (workflow)")
    parser.add_argument("--model", help=f"model folder (default: the config's model, {TINY_MODEL_DIR} when embedded)")
    parser.add_argument("--pages", default=str(PAGE_INDEX), help="page index (default: %(default)s)")
    parser.add_argument("--tests", default=str(VALIDATED_TESTS), help="validated tests (default: %(default)s)")
    parser.add_argument("--out", default=str(DIFFICULTY_DIR), help="sampling output folder (default: %(default)s)")
    parser.add_argument("--stats", help=f"statistics the filter reads (default: OUT/{STATS_NAME})")
    parser.add_argument("--filtered", help=f"filtered page index to write (default: OUT/{FILTERED_INDEX_NAME})")
    parser.add_argument("--dropped", help=f"dropped pages to write (default: OUT/{DROPPED_NAME})")
    parser.add_argument("--summary", help=f"filter counts to write (default: OUT/{FILTER_NAME})")
    parser.add_argument("--threads", type=int, default=1, help="CPU cores of the job (default: %(default)s)")
    parser.add_argument("--backend", choices=["transformers", "vllm", "openai"], help="overrides generation.backend")
    parser.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    parser.add_argument("--exit-with-job", action="store_true",
                        help="stop (exit 75; the journal keeps every finished generation) when the process that "
                             "started this one is gone, e.g. Snakemake killed (the workflow passes it)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    from olmpipe.config import ConfigError, config_from_settings, load_config
    from olmpipe.generate import GenerationError

    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = {"generation": {"backend": args.backend}} if args.backend else {}
    try:
        cfg = config_from_settings(args.settings, overrides) if args.settings else load_config(args.config, overrides)
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    from olmpipe.difficulty import DifficultyError, FilterSettings, filter_page_index, run_difficulty
    from olmpipe.difficulty.settings import training_batch_pages
    from olmpipe.layout import model_dir
    from olmpipe.procs import exit_with_job

    out = Path(args.out)
    try:
        if args.step in ("all", "sample"):
            with exit_with_job("sampler") if args.exit_with_job else contextlib.nullcontext():
                run_difficulty(cfg, args.model or model_dir(cfg), args.pages, args.tests, args.out, args.threads,
                               progress=not args.no_progress)
        if args.step in ("all", "filter"):
            filter_page_index(args.stats or out / STATS_NAME, args.pages, args.filtered or out / FILTERED_INDEX_NAME,
                              args.dropped or out / DROPPED_NAME, args.summary or out / FILTER_NAME,
                              FilterSettings.from_config(cfg["train"]["difficulty"]),
                              num_generations=int(cfg["train"]["grpo"]["num_generations"]),
                              batch_pages=training_batch_pages(cfg))
    except (DifficultyError, GenerationError) as exc:
        logger.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
