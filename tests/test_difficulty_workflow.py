"""The difficulty stage in the workflow, run for real by Snakemake on a small bench: where it sits in
the plan, and what reruns it (the model, the pages, the tests, the rewards, its own settings) and what
does not (the learning rate, the baseline's decoding, the filter's thresholds rerun only the filter)."""

from __future__ import annotations

import json
import re
import subprocess
from copy import deepcopy
from pathlib import Path

import pytest
import yaml
from benchdata import REPO, make_small_bench, sample_records, write_jsonl
from support import workflow

pytestmark = pytest.mark.slow

# The tiny random model gets the same bench, front matter and EOS reward on nearly every completion;
# a small medoid weight gives every page some spread, so that the filter has pages to keep.
CONFIG = {
    "bench": {"dir": "bench", "split": {"eval_fraction": 0.34}},
    "rasterize": {"longest_side": 200},
    "validate": {"check_math": False},
    "rewards": {"bench": {"processes": 0}, "weights": {"medoid": 0.1}},
    "train": {"wandb": {"mode": "disabled"}, "difficulty": {"enabled": True, "samples": 2},
              "grpo": {"max_completion_length": 8}},
}


def snakemake(workdir: Path, *args: str) -> subprocess.CompletedProcess:
    return workflow.snakemake(workdir, *args, cores=2)


def job_counts(proc: subprocess.CompletedProcess) -> dict[str, int]:
    return workflow.job_counts(proc, ("difficulty", "train"))


def write_config(workdir: Path, **changes) -> None:
    cfg = deepcopy(CONFIG)
    for path, value in changes.items():
        node = cfg
        *parents, key = path.split("__")
        for part in parents:
            node = node.setdefault(part, {})
        node[key] = value
    (workdir / "config").mkdir(exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))


def test_plan_and_reruns_of_the_difficulty_stage(tmp_path):
    make_small_bench(tmp_path / "bench")
    write_config(tmp_path, train__difficulty__enabled=False)
    # the command: the plan of `train` with the filter switched on from the command line is
    # validate -> difficulty_sample -> difficulty_filter -> train_seed (on the filtered index)
    plan = snakemake(tmp_path, "-n", "-p", "train", "--config", "train={difficulty: {enabled: true}}")
    counts = job_counts(plan)
    assert counts["difficulty_sample"] == 1 and counts["difficulty_filter"] == 1 and counts["train_seed"] == 1
    text = plan.stdout
    assert re.search(r"rule difficulty_filter:\n\s+input: results/difficulty/stats.jsonl, "
                     r"results/difficulty/summary.json, results/validate/pages.jsonl", text)
    assert "--pages results/difficulty/train_pages.jsonl" in text  # the training job reads the filtered index
    order = [m for m in re.findall(r"^rule (\w+):", text, flags=re.MULTILINE) if m in
             ("validate", "difficulty_sample", "difficulty_filter", "train_seed")]
    assert order == ["validate", "difficulty_sample", "difficulty_filter", "train_seed"]

    write_config(tmp_path)
    first = snakemake(tmp_path, "difficulty")
    assert job_counts(first) == {"rasterize": 1, "validate": 1, "build_model": 1, "difficulty_sample": 1,
                                 "difficulty_filter": 1}
    results = tmp_path / "results" / "difficulty"
    summary = json.loads((results / "summary.json").read_text())
    assert summary["samples_per_page"] == 2 and summary["generated"] == summary["pages"] * 2
    assert summary["sampling"]["max_completion_length"] == 8
    assert json.loads((results / "filter.json").read_text())["sampled"] == summary["pages"]
    assert job_counts(snakemake(tmp_path, "difficulty")) == {}

    # the filter's thresholds rerun the filter only
    write_config(tmp_path, train__difficulty__min_spread=0.001)
    assert job_counts(snakemake(tmp_path, "-n", "difficulty")) == {"difficulty_filter": 1}
    # the learning rate and the baseline's decoding ladder rerun nothing here
    write_config(tmp_path, train__grpo__learning_rate=0.5, generation__temperatures=[0.3])
    assert job_counts(snakemake(tmp_path, "-n", "difficulty")) == {}
    # the trainer's sampling, the tests and the model do
    write_config(tmp_path, train__grpo__temperature=0.7)
    assert job_counts(snakemake(tmp_path, "-n", "difficulty")) == {"difficulty_sample": 1, "difficulty_filter": 1}
    write_config(tmp_path, model__tiny__seed=3)
    assert job_counts(snakemake(tmp_path, "-n", "difficulty")) == {
        "build_model": 1, "difficulty_sample": 1, "difficulty_filter": 1}
    write_config(tmp_path)
    records = sample_records()
    write_jsonl(tmp_path / "bench" / "dataset.jsonl", [*records, {**records[0], "id": "one-more"}])
    assert job_counts(snakemake(tmp_path, "-n", "difficulty")) == {
        "validate": 1, "difficulty_sample": 1, "difficulty_filter": 1}
    write_jsonl(tmp_path / "bench" / "dataset.jsonl", records)
    snakemake(tmp_path, "validate")  # back to the first tests (validate reruns: its input changed)

    # a new reward weight samples nothing again: the journal holds every generation, only scoring reruns
    write_config(tmp_path, rewards__weights__eos=0.5)
    assert job_counts(snakemake(tmp_path, "difficulty")) == {"difficulty_sample": 1, "difficulty_filter": 1}
    again = json.loads((results / "summary.json").read_text())
    assert (again["generated"], again["reused"]) == (0, summary["generations"])
    assert again["rewards"]["eos_reward"] == 0.5

    # off: the training plan has no difficulty job and reads the validated index
    write_config(tmp_path, rewards__weights__eos=0.5, train__difficulty__enabled=False)
    plan = snakemake(tmp_path, "-n", "-p", "train")
    assert "difficulty_sample" not in job_counts(plan) and "difficulty_filter" not in job_counts(plan)
    assert "--pages results/validate/pages.jsonl" in plan.stdout


def test_embedded_default_trains_on_the_filtered_pages_and_reports_them(tmp_path):
    """The whole chain on the embedded default (bundled sample, tiny model) with the filter on: the
    pages whose tests the model never passes are dropped (a pass-rate window; the medoid reward gives
    every page spread), the training job reads the filtered index, and the report counts the drops."""
    (tmp_path / "data").symlink_to(REPO / "data")
    cfg = {
        "rasterize": {"longest_side": 200},
        "validate": {"check_math": False},
        "generation": {"max_new_tokens": 8, "temperatures": [0.1]},
        "eval_run": {"max_pages": 2, "progress": False},
        "rewards": {"bench": {"processes": 0}, "weights": {"medoid": 0.1}},
        "train": {"wandb": {"mode": "disabled"}, "difficulty": {"enabled": True, "samples": 2, "min_pass_rate": 0.01},
                  "grpo": {"max_steps": 1, "max_completion_length": 8}},
    }
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(cfg))
    counts = job_counts(snakemake(tmp_path, "train"))
    assert counts["difficulty_sample"] == counts["difficulty_filter"] == counts["train_seed"] == 1
    results = tmp_path / "results"
    summary = json.loads((results / "difficulty" / "filter.json").read_text())
    dropped = [json.loads(line) for line in (results / "difficulty" / "dropped.jsonl").read_text().splitlines()]
    assert summary["dropped"] == len(dropped) > 0 and summary["kept"] >= 2
    assert {d["reason"] for d in dropped} == {"pass_rate_below_min"} and {d["pass_rate"] for d in dropped} == {0.0}
    trained = json.loads((results / "train" / "seed0" / "dataset.json").read_text())
    assert trained["pages"] == summary["kept"]  # every kept page, none of the dropped ones
    html = (results / "report" / "index.html").read_text()
    assert f"<b>{summary['kept']}</b> / <b>{summary['dropped']}</b> ({summary['dropped']} pass rate below min;" in html
    assert "<th>JSONL file</th>" in html and "<tr><td>seed0</td><td>1</td>" in html
