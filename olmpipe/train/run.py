"""One seed's GRPO run: the training job (:mod:`olmpipe.job.run`) with GRPO's own steps.

    train_seed(cfg, seed=0, model_path="results/model/tiny", pages="results/validate/pages.jsonl",
               tests_dir="results/validate/tests", run_dir="results/train/seed0")

:class:`GRPOSteps` is what GRPO adds to the job every trainer runs: its check (the collectives'
timeout against the vLLM server's start-up), its training set (the train split's pages with the
columns the rewards read, :mod:`olmpipe.job.data`), its rewards (:mod:`olmpipe.rewards`, each
wrapped to report the completions it could not score: :mod:`olmpipe.job.health`), and TRL's
``GRPOTrainer`` (:class:`olmpipe.train.trainer.ResumableGRPOTrainer`) with its ``GRPOConfig``
(:mod:`olmpipe.train.args`), the completions table and, in vLLM server mode, the job's own
``trl vllm-serve`` (:mod:`olmpipe.train.vllm_server`). Exit codes: see :func:`olmpipe.job.run.run_job`.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from olmpipe.job.distributed import rank, world_size
from olmpipe.job.kinds import GRPO
from olmpipe.job.resume import checkpoints, resolve_decision
from olmpipe.job.run import run_job
from olmpipe.job.setup import JobRequest, JobSetup
from olmpipe.job.signals import SignalFlag
from olmpipe.job.steps import BuiltTrainer, Prepared, TrainerSteps, TrainingSet
from olmpipe.train.vllm_server import VLLMServerError

__all__ = ["GRPOSteps", "checkpoints", "resolve_resume", "train_seed"]

logger = logging.getLogger(__name__)

RewardFuncs = list[Callable[..., list[float | None]]]


class GRPOSteps(TrainerSteps):
    """GRPO's steps of the training job (see the module docstring).

    ``reward_funcs``/``reward_weights`` replace the configured rewards (tests use this for a task
    the tiny model can learn); by default they come from ``cfg["rewards"]``.
    """

    kind = GRPO
    stop_errors = (VLLMServerError,)

    def __init__(self, reward_funcs: RewardFuncs | None = None, reward_weights: list[float] | None = None):
        self.reward_funcs = reward_funcs
        self.reward_weights = reward_weights

    def check(self, setup: JobSetup) -> None:
        """Only rank 0 starts a vLLM server; the others wait in a collective that must not time out first."""
        from olmpipe.config.checks import collective_timeout_problem

        problem = collective_timeout_problem(setup.section, setup.knobs, world_size())
        if problem:
            raise ValueError(problem)

    def training_set(self, setup: JobSetup, pages: str | Path, tests_dir: str | Path) -> TrainingSet:
        """The train split's examples (their identity is a run setting: a resume on other pages stops),
        and with ``eval_strategy`` the eval split's, rewarded like training (TRL logs ``eval_reward``,
        ``eval_rewards/<name>/mean``, ... at each ``eval_steps``)."""
        from olmpipe.job.data import build_examples, to_dataset, training_set_id

        bench, tcfg = setup.cfg["rewards"]["bench"], setup.section
        common = {"types": bench["types"], "jsonl_regex": bench["jsonl_regex"],
                  "reference_candidate": setup.cfg["rewards"]["reference_candidate"]}
        examples, summary = build_examples(pages, tests_dir, split="train", max_pages=tcfg["max_pages"], **common)
        eval_dataset = None
        if setup.knobs.get("eval_strategy", "no") != "no":
            eval_examples, eval_summary = build_examples(pages, tests_dir, split="eval",
                                                         max_pages=tcfg["eval_max_pages"], **common)
            eval_dataset = to_dataset(eval_examples)
            logger.info("evaluating during training on %d eval pages", eval_summary.pages)
        return TrainingSet(to_dataset(examples), eval_dataset, summary.to_dict(), training_set_id(examples),
                           pages=tuple((ex.pdf, ex.page) for ex in examples))

    def prepare(self, setup: JobSetup, processor: Any, data: TrainingSet) -> Prepared:
        """The reward functions (configured ones with the model's EOS ids, or the injected ones) and the
        record of what trains the weights: reward names and weights, the dataset summary, LoRA's settings."""
        from olmpipe.models.load import model_eos_ids
        from olmpipe.rewards import build_rewards

        funcs, weights, close = self.reward_funcs, self.reward_weights, (lambda: None)
        if funcs is None:
            rewards = build_rewards(setup.cfg["rewards"], tokenizer=processor,
                                    extra_eos_ids=model_eos_ids(setup.model_path))
            funcs, weights, close = rewards.funcs, rewards.weights, rewards.close
        weights = list(weights) if weights is not None else [1.0] * len(funcs)
        names = [getattr(f, "__name__", type(f).__name__) for f in funcs]
        peft = dict(setup.peft) if setup.peft["enabled"] else None
        record = {"reward_names": names, "reward_weights": weights, "dataset": dict(data.summary), "peft": peft}
        return Prepared(record, {"funcs": funcs, "weights": weights, "names": names}, close)

    def trainer_args(self, setup: JobSetup, prepared: Prepared, data: TrainingSet, report_to: list[str],
                     stack: contextlib.ExitStack) -> Any:
        """``GRPOConfig`` from the seed's knobs, after the vLLM server of server mode (rank 0) is up;
        TRL's batch arithmetic checked against the training set's pages."""
        from olmpipe.config.checks import wants_server
        from olmpipe.job.data import check_generation_batch
        from olmpipe.job.load import sharding
        from olmpipe.train.args import grpo_config
        from olmpipe.train.vllm_server import ManagedVLLMServer, server_devices

        knobs = setup.knobs
        overrides: Mapping[str, Any] = {}
        if wants_server(knobs) and rank() == 0:
            # vllm_mode: server -- this job starts `trl vllm-serve` on the GPUs the launcher left to
            # it (olmpipe.train.vllm_server); TRL 1.16 talks to it from the main process only.
            server = stack.enter_context(ManagedVLLMServer(setup.cfg, setup.model_path, setup.run_dir,
                                                           gpus=server_devices(os.environ), knobs=knobs))
            overrides = server.grpo_overrides()
        args = grpo_config(knobs, output_dir=str(setup.run_dir), seed=setup.seed,
                           reward_weights=prepared.parts["weights"], device=setup.device,
                           dtype=setup.precision.compute, reference_dtype=setup.precision.reference,
                           reference_device="cpu" if sharding() == "fsdp" else None,
                           report_to=report_to, overrides=overrides)
        check_generation_batch(len(data.dataset), args.generation_batch_size, args.num_generations)
        return args

    def build_trainer(self, setup: JobSetup, loaded: Any, data: TrainingSet, prepared: Prepared,
                      args: Any) -> BuiltTrainer:
        """TRL's trainer with each reward reporting what it could not score, the completions table and
        the reward-errors stop."""
        from olmpipe.job.health import RewardErrors, StopOnRewardErrors
        from olmpipe.train.completions import CompletionsTable
        from olmpipe.train.trainer import ResumableGRPOTrainer

        tcfg = setup.section
        funcs, weights, names = (prepared.parts[k] for k in ("funcs", "weights", "names"))
        # every reward reports the completions it could not score (olmpipe.job.health)
        reward_errors = RewardErrors()
        trainer = ResumableGRPOTrainer(model=loaded.model, reward_funcs=reward_errors.wrap(funcs), args=args,
                                       train_dataset=data.dataset, eval_dataset=data.eval_dataset,
                                       processing_class=loaded.processor, peft_config=loaded.peft_config)
        weighted = [name for name, w in zip(names, weights, strict=True) if w]
        failing = StopOnRewardErrors(reward_errors, weighted, tcfg["reward_error_steps"], trainer)

        def after_train() -> None:
            if failing.stop is not None:
                raise failing.stop

        return BuiltTrainer(trainer, callbacks=[CompletionsTable(trainer, setup.run_dir, tcfg["completions_every"])],
                            last_callbacks=[failing], after_train=after_train)


def train_seed(
    cfg: Mapping[str, Any],
    *,
    seed: int,
    model_path: str | Path,
    pages: str | Path,
    tests_dir: str | Path,
    run_dir: str | Path,
    final_dir: str | Path | None = None,
    reward_funcs: RewardFuncs | None = None,
    reward_weights: list[float] | None = None,
    signal_flag: SignalFlag | None = None,
) -> int:
    """Train one GRPO seed; returns 0 when finished or 75 when stopped by SIGTERM
    (:func:`olmpipe.job.run.run_job`). ``final_dir``: the final model folder (default
    ``RUN_DIR/model``); ``reward_funcs``/``reward_weights``: see :class:`GRPOSteps`."""
    from olmpipe.layout import final_model_dir

    run_dir = Path(run_dir)
    final = Path(final_dir if final_dir is not None else final_model_dir(run_dir))
    request = JobRequest(cfg, seed, model_path, pages, tests_dir, run_dir, final)
    return run_job(GRPOSteps(reward_funcs, reward_weights), request, signal_flag=signal_flag)


def resolve_resume(resume: str, run_dir: str | Path, settings: dict[str, Any]) -> Path | None:
    """The checkpoint to continue from (see :mod:`olmpipe.job.resume`); rank 0 moves an old run
    aside when starting over, after every rank has decided."""
    return resolve_decision(resume, run_dir, settings).checkpoint
