"""One seed's training job, top to bottom, for any trainer (GRPO: :class:`olmpipe.train.run.GRPOSteps`).

    run_job(GRPOSteps(), JobRequest(cfg, seed=0, model_path="results/model/tiny", ...))

:func:`run_job` says the steps in order; each is a function of the module that owns it:

1. **check** -- device, precision, knobs, preflight, process group (:func:`olmpipe.job.setup.check`);
2. **lock** -- one trainer per run folder, none outliving its job (:func:`olmpipe.job.runlock.hold_run`);
3. **training set** -- the trainer's examples from the page index (:meth:`TrainerSteps.training_set`);
4. **resume decision** -- the checkpoint to continue from, or the kept final model, or a fresh
   start; a changed setting stops here (:func:`olmpipe.job.resume.resume_job`);
5. **load** -- the processor, what the trainer needs besides the model (:meth:`TrainerSteps.prepare`:
   GRPO's rewards), its TRL config (:meth:`TrainerSteps.trainer_args`, first: under ZeRO-3 it makes
   the load partitioned), then the policy in the job's precision and LoRA's config
   (:func:`olmpipe.job.load.load_model`);
6. **build the trainer** -- the trainer's own parts (:meth:`TrainerSteps.build_trainer`) and the
   callbacks every job has (:func:`job_callbacks`);
7. **train** -- :func:`train` (a SIGTERM checkpoints after the step and ends with 75);
8. **publish** -- the final ``model/`` (:mod:`olmpipe.job.publish`).

Layout of a run folder (``results/train/seed{seed}/``)::

    checkpoint-{step}/      TRL/transformers checkpoints (+ olmpipe_run.json: seed, step, wandb id); with
                            LoRA the adapter instead of the model's weights
    adapter/                LoRA only: the final adapter (PEFT folder), written before model/
    model/                  the final weights + processor (the Snakemake output; written last); with
                            LoRA the base model with the adapter merged (olmpipe.job.peft)
    model.metrics.jsonl     a copy of metrics.jsonl written after model/ (also an output)
    metrics.jsonl|csv       every logged step (continued, not duplicated, across resumes)
    completions/            GRPO: step{N}.jsonl: page, completion, rewards, advantage, verdicts
    dataset.json            pages used and skipped
    wandb/, wandb_run_id    the wandb run (offline by default)
    train_summary.json      the trainer's end-of-training summary

:func:`run_job` returns 0 when finished (final model written) or :data:`EXIT_PREEMPTED` (75) when
stopped by SIGTERM after writing a checkpoint (run again with ``resume: auto`` to continue). A run
that cannot learn raises :class:`olmpipe.job.health.TrainingStopped` (the command line exits with
its code, 3 or 4).
"""

from __future__ import annotations

import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from olmpipe.job.distributed import rank
from olmpipe.job.publish import finish_from_checkpoint, finish_from_kept, publish_trained
from olmpipe.job.resume import JobResume, resume_job
from olmpipe.job.runlock import hold_run
from olmpipe.job.setup import JobRequest, JobSetup, check
from olmpipe.job.signals import SignalFlag, StoppedBeforeTraining
from olmpipe.procs import EXIT_PREEMPTED
from olmpipe.records.files import write_json
from olmpipe.records.metrics import truncate_metrics
from olmpipe.records.train import DATASET_NAME

if TYPE_CHECKING:
    from olmpipe.job.load import LoadedModel
    from olmpipe.job.steps import BuiltTrainer, Prepared, TrainerSteps, TrainingSet

logger = logging.getLogger(__name__)

__all__ = ["JobRequest", "TrainOutcome", "job_callbacks", "run_job", "train"]


def run_job(steps: TrainerSteps, request: JobRequest, *, signal_flag: SignalFlag | None = None) -> int:
    """Train one seed with ``steps``' trainer; returns 0 or :data:`EXIT_PREEMPTED` (see the module docstring).

    ``signal_flag``: the SIGTERM handler, installed by the caller as early as it can
    (:mod:`olmpipe.job.signals`; ``python -m olmpipe.train`` does it before its heavy imports); by
    default it is installed here, first thing. Until training starts a SIGTERM stops the run at once
    (exit 75, nothing to checkpoint); then it checkpoints after the current step. Raises
    :class:`~olmpipe.job.runlock.RunLockedError` when another trainer holds the run folder and
    :class:`~olmpipe.job.resume.ResumeMismatchError` when its last state was trained with other
    settings (``resume: auto``).
    """
    flag = signal_flag if signal_flag is not None else SignalFlag().install()
    try:
        flag.begin_loading()
        setup = check(request, steps.kind, steps.check)
        with hold_run(setup.run_dir, setup.section["exit_with_job"]):
            return _from_training_set(steps, setup, flag)
    except StoppedBeforeTraining as exc:
        logger.warning("%s", exc)
        return EXIT_PREEMPTED
    finally:
        flag.end_loading()
        if signal_flag is None:
            flag.restore()


def _from_training_set(steps: TrainerSteps, setup: JobSetup, flag: SignalFlag) -> int:
    """Steps 3 to 8, in the locked run folder."""
    from olmpipe.job.load import load_model, load_processor

    data = steps.training_set(setup, setup.request.pages, setup.request.tests_dir)
    start = resume_job(setup, data.identity)
    if start.decision.kept is not None:
        finish_from_kept(setup)
        return 0
    _begin_run_folder(setup, start, data)
    processor = load_processor(setup)
    prepared = steps.prepare(setup, processor, data)
    try:
        if start.checkpoint is not None and 0 < setup.max_steps <= start.step:
            loaded = load_model(setup, processor, publish_only=True)
            finish_from_checkpoint(setup, loaded, prepared.record, start.checkpoint, start.step, start.settings)
            return 0
        with contextlib.ExitStack() as stack:
            wandb_on = setup.section["wandb"]["mode"] != "disabled"
            args = steps.trainer_args(setup, prepared, data, ["wandb"] if wandb_on else [], stack)
            loaded = load_model(setup, processor)
            built = _build(steps, setup, loaded, data, prepared, args, start, flag, stack)
            outcome = train(built, start)
            if outcome.preempted:
                return EXIT_PREEMPTED
            publish_trained(setup, built.trainer, loaded, prepared.record, built.wandb_run_id, start.settings)
            return 0
    finally:
        prepared.close()


def _begin_run_folder(setup: JobSetup, start: JobResume, data: TrainingSet) -> None:
    """The run folder as a run from ``start`` continues it: the metrics of steps after its checkpoint
    dropped (no duplicates across resumes), the training set's summary written and its pages added to
    the record of trained pages (:mod:`olmpipe.job.trained`)."""
    from olmpipe.job.trained import record_trained_pages, training_set_pages
    from olmpipe.records.pages import read_page_index

    if start.checkpoint is not None:
        logger.info("resuming from %s (step %d)", start.checkpoint, start.step)
    if rank() == 0:
        truncate_metrics(setup.run_dir, start.step)
        write_json(setup.run_dir / DATASET_NAME, dict(data.summary))
        try:  # a page index's eval split (SFT's training set is a pairs file: nothing to warn about)
            evals = [(str(r["pdf"]), int(r["page"])) for r in read_page_index(setup.request.pages, split="eval")]
        except ValueError:
            evals = []
        record_trained_pages(setup.run_dir, setup.model_path, training_set_pages(data), step=start.step,
                             eval_pages=evals)


def _build(steps: TrainerSteps, setup: JobSetup, loaded: LoadedModel, data: TrainingSet, prepared: Prepared,
           args: Any, start: JobResume, flag: SignalFlag, stack: contextlib.ExitStack) -> BuiltTrainer:
    """Step 6: the trainer with its own callbacks, every job's (:func:`job_callbacks`), and its wandb run."""
    from olmpipe.job.wandb import init_wandb, wandb_run_id

    wandb_on = setup.section["wandb"]["mode"] != "disabled"
    run_id = wandb_run_id(setup.run_dir, start.checkpoint) if wandb_on and rank() == 0 else None
    built = steps.build_trainer(setup, loaded, data, prepared, args)
    built.wandb_run_id = run_id
    if run_id is not None:
        built.wandb_run = init_wandb(setup.cfg, setup.kind.section, setup.run_dir, run_id, setup.seed,
                                     f"{setup.cfg['model']['name']}-seed{setup.seed}")
        stack.callback(built.wandb_run.finish)
    for callback in job_callbacks(setup, built, start, prepared.record, flag):
        built.trainer.add_callback(callback)
    return built


def job_callbacks(setup: JobSetup, built: BuiltTrainer, start: JobResume, record: dict[str, Any],
                  flag: SignalFlag) -> list[Any]:
    """The callbacks of a training job in their order: non-finite values stop the run
    (:class:`~olmpipe.job.health.StopOnNonFinite`), the metrics files, the trainer's own, the run
    state committed with each checkpoint, a SIGTERM checkpoint (:class:`~olmpipe.job.callbacks.StopOnSignal`,
    ``built.stopper``), the trainer's last ones."""
    from olmpipe.job.callbacks import MetricsFiles, RunState, StopOnSignal
    from olmpipe.job.health import StopOnNonFinite

    trainer = built.trainer
    built.stopper = StopOnSignal(flag, trainer)
    state = RunState(setup.seed, built.wandb_run_id, start.fingerprint, start.settings,
                     setup.knobs.get("save_total_limit"), record)
    return [StopOnNonFinite(trainer), MetricsFiles(setup.run_dir), *built.callbacks, state, built.stopper,
            *built.last_callbacks]


@dataclass(frozen=True)
class TrainOutcome:
    """How training ended: to its last step, or stopped by a signal after a checkpoint (``preempted``)."""

    preempted: bool
    step: int


def train(built: BuiltTrainer, start: JobResume) -> TrainOutcome:
    """Step 7: train from ``start``'s checkpoint (or from the start); a stop from a callback raises
    (``built.after_train``), a SIGTERM's checkpoint ends the run as preempted."""
    stopper, trainer = built.stopper, built.trainer
    stopper.flag.end_loading()  # from here a SIGTERM checkpoints after the current step (StopOnSignal)
    trainer.train(resume_from_checkpoint=str(start.checkpoint) if start.checkpoint is not None else None)
    built.after_train()
    if stopper.stopped_at is not None:
        logger.warning("stopped by signal after step %d; checkpoint written, exiting with %d",
                       stopper.stopped_at, EXIT_PREEMPTED)
        if built.wandb_run is not None:
            built.wandb_run.mark_preempting()
        return TrainOutcome(preempted=True, step=stopper.stopped_at)
    return TrainOutcome(preempted=False, step=trainer.state.global_step)
