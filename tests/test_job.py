"""The training job skeleton (olmpipe.job.run.run_job) serving both trainers: GRPO (olmpipe.train)
and SFT (olmpipe.sft) go through the same steps in the same order and leave run folders of the same
layout; the job's functions stay short (issue 27: "a training job readable top to bottom")."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from trainkit import LowIdReward, make_page_index

import olmpipe.job.run as job_run
from olmpipe.config import load_config
from olmpipe.job.setup import JobRequest
from olmpipe.sft.pairs import build_pairs
from olmpipe.sft.steps import SFTSteps
from olmpipe.train.run import GRPOSteps

REPO = Path(__file__).resolve().parents[1]
GRPO_KNOBS = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4,
              "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 1, "logging_steps": 1}
SFT_ARGS = {"max_steps": 2, "save_steps": 1, "per_device_train_batch_size": 2, "max_length": 400}
#: The job's steps as :func:`olmpipe.job.run.run_job` calls them (module functions and trainer steps).
STEPS = ("check", "hold_run", "training_set", "resume_job", "load_processor", "prepare", "trainer_args",
         "load_model", "build_trainer", "train", "publish_trained")


def _recorded(monkeypatch) -> list[str]:
    """Wrap every step of the job (olmpipe.job.run's and both trainers' own) to record its call."""
    import olmpipe.job.load

    calls: list[str] = []

    def wrap(owner, name):
        original = getattr(owner, name)

        def step(*args, **kwargs):
            calls.append(name)
            return original(*args, **kwargs)

        monkeypatch.setattr(owner, name, step)

    for name in ("check", "hold_run", "resume_job", "train", "publish_trained"):
        wrap(job_run, name)
    for name in ("load_processor", "load_model"):
        wrap(olmpipe.job.load, name)
    for steps in (GRPOSteps, SFTSteps):
        for name in ("training_set", "prepare", "trainer_args", "build_trainer"):
            wrap(steps, name)
    return calls


@pytest.mark.slow
def test_grpo_and_sft_run_the_same_steps_in_the_same_order(tmp_path, tiny_model_dir, monkeypatch):
    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO_KNOBS},
                                 "sft": {"wandb": {"mode": "disabled"}, "candidate": "olmocr_pipeline", "args": SFT_ARGS},
                                 "rewards": {"bench": {"processes": 0}}})
    build_pairs(cfg, pages, tmp_path / "pairs.jsonl", tmp_path / "pairs.json")
    calls = _recorded(monkeypatch)
    grpo_run, sft_run = tmp_path / "grpo", tmp_path / "sft"
    assert job_run.run_job(GRPOSteps([LowIdReward()], [1.0]),
                           JobRequest(cfg, 0, tiny_model_dir, pages, tests, grpo_run, grpo_run / "model")) == 0
    grpo_calls, calls[:] = list(calls), []
    assert job_run.run_job(SFTSteps(), JobRequest(cfg, 0, tiny_model_dir, tmp_path / "pairs.jsonl", tests, sft_run,
                                                  sft_run / "model")) == 0
    assert grpo_calls == list(STEPS) and calls == list(STEPS), (grpo_calls, calls)
    # the same run folder: committed checkpoints, metrics, the dataset summary, the final and kept model
    common = {"checkpoint-1", "checkpoint-2", "metrics.jsonl", "metrics.csv", "dataset.json", "model", "model.kept",
              "model.metrics.jsonl", "train_summary.json"}
    for run in (grpo_run, sft_run):
        assert common <= {p.name for p in run.iterdir()}, sorted(p.name for p in run.iterdir())
        assert (run / "checkpoint-2" / "olmpipe_run.json").is_file()
    assert (grpo_run / "completions").is_dir() and not (sft_run / "completions").exists()  # GRPO's own callback


def _functions(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]


def test_the_training_jobs_functions_are_short():
    """No function of the training job (olmpipe/job/, the trainers' steps) is over 80 lines."""
    files = [*sorted((REPO / "olmpipe" / "job").glob("*.py")), REPO / "olmpipe" / "train" / "run.py",
             *sorted((REPO / "olmpipe" / "sft").glob("*.py"))]
    long = [f"{p.relative_to(REPO)}:{n.lineno} {n.name} ({n.end_lineno - n.lineno + 1} lines)"
            for p in files for n in _functions(p) if n.end_lineno - n.lineno + 1 > 80]
    assert not long, long


def test_run_job_names_every_step_in_order():
    """The skeleton is one short function whose body calls the steps in the documented order."""
    import re

    source = (REPO / "olmpipe" / "job" / "run.py").read_text(encoding="utf-8")
    body = source[source.index("def run_job("):source.index("def _begin_run_folder(")]
    order = ["check(", "hold_run(", "steps.training_set(", "resume_job(", "load_processor(", "steps.prepare(",
             "steps.trainer_args(", "load_model(", "_build(", "train(", "publish_trained("]
    at = 0
    for call in order:  # each call found after the one before it, as a call of its own name
        found = re.compile(r"(?<![\w.])" + re.escape(call) if "." not in call else re.escape(call)).search(body, at)
        assert found is not None, f"{call} not called after the step before it"
        at = found.end()
