"""What a trainer adds to the training job: the steps that differ between GRPO and SFT.

The job (:func:`olmpipe.job.run.run_job`) is the same for every trainer: check, lock, training set,
resume decision, load, build the trainer, train, publish. A trainer is a :class:`TrainerSteps`:
its :class:`~olmpipe.job.kinds.JobKind` (its config section and knobs) and the five things only it
knows -- its own checks, its training set, what it needs besides the model (GRPO: the rewards), its
TRL config (made before the model is loaded: under ZeRO-3 it partitions the load), and the trainer
itself with its callbacks. GRPO's are :class:`olmpipe.train.run.GRPOSteps`.
"""

from __future__ import annotations

import contextlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from olmpipe.job.kinds import JobKind
    from olmpipe.job.load import LoadedModel
    from olmpipe.job.setup import JobSetup

__all__ = ["BuiltTrainer", "Prepared", "TrainerSteps", "TrainingSet"]


@dataclass(frozen=True)
class TrainingSet:
    """The examples a job trains on, as its trainer builds them from the page index.

    ``dataset``/``eval_dataset``: the datasets given to the trainer (eval: None unless evaluation
    during training is on); ``summary``: written to ``dataset.json`` and recorded with the model;
    ``identity``: what a resume compares (:func:`olmpipe.job.data.training_set_id`); ``pages``: the
    bench pages (pdf, page) of its examples, recorded as the pages the run trained on
    (:mod:`olmpipe.job.trained`; empty: the dataset's ``pdf``/``page`` columns, if any).
    """

    dataset: Any
    eval_dataset: Any
    summary: Mapping[str, Any]
    identity: Mapping[str, Any]
    pages: tuple[tuple[str, int], ...] = ()


@dataclass
class Prepared:
    """What a trainer builds around the loaded model before it trains (GRPO: the reward functions).

    ``record``: what trained the weights, stored in every checkpoint and in the final model's
    ``olmpipe_train.json`` (:func:`olmpipe.job.final.train_info`); ``parts``: the trainer's own
    objects for :meth:`TrainerSteps.build_trainer`; ``close``: called when the job ends.
    """

    record: dict[str, Any]
    parts: dict[str, Any] = field(default_factory=dict)
    close: Callable[[], None] = lambda: None


@dataclass
class BuiltTrainer:
    """A trainer ready to train, with the callbacks of its own and a check after training.

    ``callbacks`` run after the metrics files and before the run state is committed (GRPO: the
    completions table), ``last_callbacks`` after the stop signal's (GRPO: the reward-errors stop);
    ``after_train`` raises what stopped the run from inside a callback (GRPO: a reward failing on
    every completion, :class:`olmpipe.job.health.RewardErrorsStop`). The job fills in the rest:
    ``wandb_run_id``/``wandb_run`` (None: wandb off or not rank 0) and ``stopper``.
    """

    trainer: Any
    callbacks: list[Any] = field(default_factory=list)
    last_callbacks: list[Any] = field(default_factory=list)
    after_train: Callable[[], None] = lambda: None
    wandb_run_id: str | None = None
    wandb_run: Any = None
    stopper: Any = None


class TrainerSteps(ABC):
    """The steps of the training job that one trainer does its own way (see the module docstring)."""

    kind: JobKind
    #: More errors of this trainer's that stop a job with one line and exit code 2 (GRPO: its vLLM
    #: server not starting), besides every job's (:mod:`olmpipe.job.cli`).
    stop_errors: tuple[type[Exception], ...] = ()

    def check(self, setup: JobSetup) -> None:
        """Raise ``ValueError`` for settings of this trainer the job cannot run (before the process
        group exists); nothing by default."""

    @abstractmethod
    def training_set(self, setup: JobSetup, pages: str | Path, tests_dir: str | Path) -> TrainingSet:
        """The examples of the train split (and of the eval split, when evaluating during training)."""

    @abstractmethod
    def prepare(self, setup: JobSetup, processor: Any, data: TrainingSet) -> Prepared:
        """What the trainer needs besides the model (GRPO: the rewards, with the processor's tokenizer),
        and the record of what trains the weights."""

    @abstractmethod
    def trainer_args(self, setup: JobSetup, prepared: Prepared, data: TrainingSet, report_to: list[str],
                     stack: contextlib.ExitStack) -> Any:
        """The trainer's TRL config (``GRPOConfig``), made before the model is loaded; ``stack`` closes
        what it starts (GRPO: the vLLM server of server mode) when the job ends."""

    @abstractmethod
    def build_trainer(self, setup: JobSetup, loaded: LoadedModel, data: TrainingSet, prepared: Prepared,
                      args: Any) -> BuiltTrainer:
        """The trainer and its own callbacks (the job adds the metrics files, run state, stop signal and
        health callbacks)."""
