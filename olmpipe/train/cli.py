"""Command line of stage 4: ``python -m olmpipe.train`` (or ``olmpipe train``).

    python -m olmpipe.train --seed 0 --model results/model/tiny \\
        --pages results/validate/pages.jsonl --tests-dir results/validate/tests \\
        --run-dir results/train/seed0 [--config config/config.yaml | --config-json '{...}']

Snakemake's ``train_seed`` rule runs this command (behind ``train.launcher``, e.g. ``accelerate
launch`` on several GPUs) with the job's config sections as ``--config-json``. Exit codes: 0
finished, 75 stopped by SIGTERM after a checkpoint (resume by running it again), 2 bad arguments
or config, or a package the job needs missing here (:mod:`olmpipe.train.packages`), 1 any other
error.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys

from olmpipe.config import ConfigError, load_config, validate_config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="olmpipe train", description="GRPO training of one seed (stage 4).")
    parser.add_argument("--seed", type=int, required=True, help="seed of this run (one of train.seeds)")
    parser.add_argument("--model", required=True, help="base model folder or hub id")
    parser.add_argument("--pages", required=True, help="page index (results/validate/pages.jsonl)")
    parser.add_argument("--tests-dir", required=True, help="validated test files (results/validate/tests)")
    parser.add_argument("--run-dir", required=True, help="run folder (results/train/seed{seed})")
    parser.add_argument("--final-dir", default=None, help="final model folder (default: RUN_DIR/model)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", default=None, help="YAML config file (default: config/config.yaml)")
    source.add_argument("--config-json", default=None,
                        help="config as JSON (sections not given take the schema defaults)")
    parser.add_argument("--threads", type=int, default=None, help="CPU threads (default: resources.train.cpus_per_task)")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = validate_config(json.loads(args.config_json)) if args.config_json else load_config(args.config)
    except (ConfigError, json.JSONDecodeError) as exc:
        sys.stderr.write(f"olmpipe train: {exc}\n")
        return 2
    if args.threads is not None:
        cfg["resources"]["train"]["cpus_per_task"] = args.threads
    if args.seed not in cfg["train"]["seeds"]:
        logging.getLogger(__name__).warning("seed %d is not listed in train.seeds %s", args.seed, cfg["train"]["seeds"])
    from olmpipe.train.packages import MissingPackageError, check, config_needs, nvidia_gpus

    try:
        # before TRL, accelerate or DeepSpeed are imported: stop with what is missing and how to get it
        check(config_needs(cfg, processes=int(os.environ.get("WORLD_SIZE", "1")), node_gpus=nvidia_gpus()))
    except MissingPackageError as exc:
        sys.stderr.write(f"olmpipe train: {exc}\n")
        return 2
    from olmpipe.train.resume import ResumeMismatchError
    from olmpipe.train.run import train_seed
    from olmpipe.train.runlock import RunLockedError
    from olmpipe.train.vllm_server import VLLMServerError

    try:
        return train_seed(cfg, seed=args.seed, model_path=args.model, pages=args.pages, tests_dir=args.tests_dir,
                          run_dir=args.run_dir, final_dir=args.final_dir)
    except (RunLockedError, ResumeMismatchError, VLLMServerError) as exc:
        sys.stderr.write(f"olmpipe train: {exc}\n")
        return 2
