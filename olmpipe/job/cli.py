"""The command line of a training job, shared by the training stages (``python -m olmpipe.train``).

    python -m olmpipe.train --seed 0 --model results/model/tiny \\
        --pages results/validate/pages.jsonl --tests-dir results/validate/tests \\
        --run-dir results/train/seed0 [--config config/config.yaml | --config-json '{...}']

A stage's rule (``train_seed``) runs its command (behind ``resources.<section>.launcher``, e.g.
``accelerate launch`` on several GPUs) with the job's config sections as ``--config-json``;
:func:`run_cli` installs the SIGTERM handler first, checks the packages and releases, runs the job
(:func:`olmpipe.job.run.run_job` with the stage's steps) and turns what stops it into one line
and an exit code: 0
finished, 75 stopped by SIGTERM after a checkpoint (resume by running it again), 2 bad arguments
or config (settings this job cannot train: :mod:`olmpipe.job.preflight`; a checkpoint that does
not fit the model), or a package the job needs missing here (:mod:`olmpipe.job.packages`) or
outside the releases olmpipe was checked against (:mod:`olmpipe.compat.versions`), 3 a reward failed
on every completion for ``reward_error_steps`` steps, 4 a non-finite loss, gradient or weight
(both: no final model, :mod:`olmpipe.job.health`), 1 any other error (a full disk says so, and
names the checkpoint a rerun continues from).
"""

from __future__ import annotations

import argparse
import errno
import json
import logging
import os
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from olmpipe.config import ConfigError, load_config, validate_config
from olmpipe.job.setup import JobRequest
from olmpipe.layout import PAGE_INDEX, TRAIN_RUN, VALIDATED_TESTS
from olmpipe.procs import EXIT_PREEMPTED

if TYPE_CHECKING:
    from olmpipe.job.kinds import JobKind
    from olmpipe.job.steps import TrainerSteps


def parse_args(argv: list[str] | None, prog: str, description: str, kind: JobKind) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog=prog, description=description)
    parser.add_argument("--seed", type=int, required=True, help=f"seed of this run (one of {kind.section}.seeds)")
    parser.add_argument("--model", required=True, help="base model folder or hub id")
    parser.add_argument("--pages", required=True, help=f"page index ({PAGE_INDEX})")
    parser.add_argument("--tests-dir", required=True, help=f"validated test files ({VALIDATED_TESTS})")
    parser.add_argument("--run-dir", required=True, help=f"run folder (e.g. {TRAIN_RUN})")
    parser.add_argument("--final-dir", default=None, help="final model folder (default: RUN_DIR/model)")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--config", default=None, help="YAML config file (default: config/config.yaml)")
    source.add_argument("--config-json", default=None,
                        help="config as JSON (sections not given take the schema defaults)")
    parser.add_argument("--threads", type=int, default=None,
                        help=f"CPU threads (default: resources.{kind.section}.cpus_per_task)")
    return parser.parse_args(argv)


def run_cli(steps_of: Callable[[], type[TrainerSteps]], argv: list[str] | None, *, prog: str,
            description: str) -> int:
    """The command line of a training stage: ``steps_of()`` imports and returns the stage's steps
    class (called once the SIGTERM handler is in place, before the packages are checked; the class is
    instantiated after). Returns the exit code."""
    from olmpipe.job.signals import SignalFlag, StoppedBeforeTraining

    # first: a SIGTERM from here on ends the run with 75 (preempted), also while it still imports and loads
    flag = SignalFlag().install()
    try:
        flag.begin_loading()
        return _main(steps_of, argv, flag, prog, description)
    except StoppedBeforeTraining as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return EXIT_PREEMPTED
    finally:
        flag.end_loading()
        flag.restore()


def _main(steps_of: Callable[[], type[TrainerSteps]], argv: list[str] | None, flag: Any, prog: str,
          description: str) -> int:
    steps_class = steps_of()
    kind = steps_class.kind
    args = parse_args(argv, prog, description, kind)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        cfg = validate_config(json.loads(args.config_json)) if args.config_json else load_config(args.config)
    except (ConfigError, json.JSONDecodeError) as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return 2
    section = kind.section_of(cfg)
    if args.threads is not None:
        cfg["resources"][kind.section]["cpus_per_task"] = args.threads
    if args.seed not in section["seeds"]:
        logging.getLogger(__name__).warning("seed %d is not listed in %s.seeds %s", args.seed, kind.section,
                                            section["seeds"])
    from olmpipe.compat.versions import TRAINING, UntestedVersionError, require
    from olmpipe.job.packages import MissingPackageError, check, config_needs, nvidia_gpus

    try:
        # before TRL, accelerate or DeepSpeed are imported: stop with what is missing and how to get it
        check(config_needs(cfg, processes=int(os.environ.get("WORLD_SIZE", "1")), node_gpus=nvidia_gpus(), kind=kind))
        # the releases olmpipe's seams into TRL/transformers/accelerate (and PEFT) were checked against
        require(*TRAINING, *(["peft"] if section["peft"]["enabled"] else []))
    except (MissingPackageError, UntestedVersionError) as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return 2
    from olmpipe.job.errors import CheckpointLoadError, JobSetupError
    from olmpipe.job.health import TrainingStopped
    from olmpipe.job.peft import AdapterLoadError
    from olmpipe.job.resume import ResumeMismatchError
    from olmpipe.job.run import run_job
    from olmpipe.job.runlock import RunLockedError
    from olmpipe.layout import final_model_dir

    run_dir = Path(args.run_dir)
    request = JobRequest(cfg, args.seed, args.model, args.pages, args.tests_dir, run_dir,
                         Path(args.final_dir) if args.final_dir is not None else Path(final_model_dir(run_dir)))
    try:
        return run_job(steps_class(), request, signal_flag=flag)
    except (RunLockedError, ResumeMismatchError, JobSetupError, AdapterLoadError, CheckpointLoadError,
            *steps_class.stop_errors) as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return 2
    except TrainingStopped as exc:
        sys.stderr.write(f"{prog}: {exc}\n")
        return exc.exit_code
    except Exception as exc:
        if not disk_full(exc, args.run_dir):
            raise
        from olmpipe.job.checkpoints import complete_checkpoints

        logging.getLogger(__name__).error("training stopped", exc_info=exc)
        done = complete_checkpoints(args.run_dir, warn=False)
        sys.stderr.write(f"{prog}: the disk is full ({exc}). Free space and run again: training continues "
                         f"from the last complete checkpoint ({done[-1] if done else 'none yet: from the start'})\n")
        return 1


def disk_full(exc: BaseException, folder: str) -> bool:
    """Whether ``exc`` (or an exception it came from) means the disk holding ``folder`` is full.

    Writers report it differently: ``OSError`` with ``ENOSPC``/``EDQUOT`` (Python's own files),
    "No space left on device" inside another error (safetensors), or only "file write failed"
    (``torch.save``); for the last, the disk's free space decides.
    """
    seen: BaseException | None = exc
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno in (errno.ENOSPC, errno.EDQUOT):
            return True
        if "No space left on device" in str(seen) or "Disk quota exceeded" in str(seen):
            return True
        seen = seen.__cause__ or seen.__context__
    try:
        return shutil.disk_usage(folder).free < 1 << 20
    except OSError:
        return False
