"""The rerun matrix (docs/reruns.md): after one finished run of the embedded default, each single
change -- a setting of each stage, a touched or changed bench file, an edited module, a seed added,
a resource -- reruns exactly the jobs whose outputs it can change, checked by dry run; and the
costliest cases run for real, checking that nothing computed is made again.

The run is made from a copy of the workflow and the package (Snakemake puts the Snakefile's folder
first on ``sys.path``), which the code cases edit, so the checkout is never written.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import yaml
from benchdata import REPO
from support import workflow
from support.workflow import job_counts

pytestmark = pytest.mark.slow

#: A PDF of the embedded bench larger than the 1 MB under which Snakemake checksums files.
BIG_PDF = "pdfs/test-graphical-text.pdf"
#: Every job after validate: what a changed page set or test reruns.
AFTER_VALIDATE = {"validate", "validate_audit", "baseline_generate", "train_seed", "soup", "evaluate_generate",
                  "evaluate_compare", "report_plots", "report_html"}
#: The comparison and the report: what a changed statistic reruns.
COMPARE = {"evaluate_compare", "report_plots", "report_html"}
#: Both generation runs and what reads them.
GENERATE = {"baseline_generate", "evaluate_generate", *COMPARE}

#: (case, how: config | touch | edit-bench | edit-code, what, the rules expected to rerun)
MATRIX = [
    ("nothing", "config", None, set()),
    # how a run is checkpointed, logged and operated: no job
    ("train.grpo.save_steps", "config", {"train": {"grpo": {"save_steps": 3}}}, set()),
    ("train.grpo.save_total_limit", "config", {"train": {"grpo": {"save_total_limit": 5}}}, set()),
    ("train.grpo.logging_steps", "config", {"train": {"grpo": {"logging_steps": 2}}}, set()),
    ("train.completions_every", "config", {"train": {"completions_every": 3}}, set()),
    ("train.resume", "config", {"train": {"resume": "continue"}}, set()),
    ("train.wandb.mode", "config", {"train": {"wandb": {"mode": "disabled"}}}, set()),
    ("train.exit_with_job", "config", {"train": {"exit_with_job": False}}, set()),
    ("train.reward_error_steps", "config", {"train": {"reward_error_steps": 5}}, set()),
    ("rewards.bench.processes", "config", {"rewards": {"bench": {"processes": 2}}}, set()),
    ("rewards.bench.timeout_s", "config", {"rewards": {"bench": {"timeout_s": 20}}}, set()),
    ("generation.batch_size", "config", {"generation": {"batch_size": 2}}, set()),
    ("generation.vllm.* (backend transformers)", "config", {"generation": {"vllm": {"max_model_len": 8192}}}, set()),
    ("eval_run.progress", "config", {"eval_run": {"progress": False}}, set()),
    ("resources.train.mem_mb", "config", {"resources": {"train": {"mem_mb": 9000}}}, set()),
    ("resources.generate.runtime", "config", {"resources": {"generate": {"runtime": 60}}}, set()),
    ("sft.args.learning_rate (sft off)", "config", {"sft": {"args": {"learning_rate": 1.0e-3}}}, set()),
    ("synth.seed (synth off)", "config", {"synth": {"seed": 3}}, set()),
    # what the stages make
    ("report.sample_pages", "config", {"report": {"sample_pages": 3}}, {"report_html"}),
    ("validate.audit.warn_share", "config", {"validate": {"audit": {"warn_share": 0.5}}}, {"validate_audit"}),
    ("evaluate.bootstrap_samples", "config", {"evaluate": {"bootstrap_samples": 500}}, COMPARE),
    ("generation.max_new_tokens", "config", {"generation": {"max_new_tokens": 48}}, GENERATE),
    ("model.name (new run folders)", "config", {"model": {"name": "renamed"}}, GENERATE),
    ("train.seeds + 1", "config", {"train": {"seeds": [0, 1]}},
     {"train_seed", "soup", "evaluate_generate", *COMPARE}),
    ("rasterize.longest_side", "config", {"rasterize": {"longest_side": 1000}}, {"rasterize", *AFTER_VALIDATE}),
    # files
    ("touch a PDF > 1 MB", "touch", BIG_PDF, set()),
    ("touch a test file", "touch", "dataset.jsonl", set()),
    ("a changed PDF", "edit-bench", BIG_PDF, {"rasterize", *AFTER_VALIDATE}),
    ("a changed test line", "edit-bench", "blanks.jsonl", AFTER_VALIDATE),
    # code
    ("olmpipe/records/synth.py (synth off)", "edit-code", "records/synth.py", set()),
    ("olmpipe/records/difficulty.py (difficulty off)", "edit-code", "records/difficulty.py",
     {"validate_audit", "report_plots", "report_html"}),
    ("olmpipe/synth/mine.py (synth off)", "edit-code", "synth/mine.py", set()),
    ("olmpipe/report/plots.py", "edit-code", "report/plots.py", {"report_plots", "report_html"}),
    ("olmpipe/evaluate/stats.py", "edit-code", "evaluate/stats.py", COMPARE),
    ("olmpipe/rasterize.py", "edit-code", "rasterize.py", {"rasterize", *AFTER_VALIDATE}),
    ("olmpipe/train/trainer.py", "edit-code", "train/trainer.py", {"train_seed", "soup", "evaluate_generate", *COMPARE}),
]


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A finished `snakemake train` of the embedded default on a copy of its bench, and a copy of
    the package for the code cases."""
    work = tmp_path_factory.mktemp("reruns")
    shutil.copytree(REPO / "data" / "bench" / "olmocr-sample", work / "bench")
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["bench"]["dir"] = str(work / "bench")
    (work / "config").mkdir()
    (work / "config" / "config.yaml").write_text(yaml.safe_dump(config))
    (work / "src").mkdir()
    for part in ("Snakefile", "workflow", "olmpipe", "data", "config"):
        copy = shutil.copytree if (REPO / part).is_dir() else shutil.copy2
        copy(REPO / part, work / "src" / part, **({"ignore": shutil.ignore_patterns("__pycache__")}
                                                 if copy is shutil.copytree else {}))
    snakemake(work, "train", cores=2)
    assert (work / "results" / "report" / "index.html").is_file()
    return work


def snakemake(work: Path, *args: str, cores: int = 1):
    """Snakemake on ``work`` with the copied Snakefile (and so the copied package)."""
    return workflow.snakemake(work, "-s", str(work / "src" / "Snakefile"), *args, cores=cores)


def _dry(work: Path, *args: str) -> set[str]:
    proc = snakemake(work, "train", "-n", *args)
    return set(job_counts(proc, targets=("train",)))


@pytest.mark.parametrize(("case", "how", "what", "expected"), MATRIX, ids=[m[0] for m in MATRIX])
def test_a_single_change_reruns_exactly_its_jobs(finished, case, how, what, expected):
    work = finished
    if how == "config":
        args = ("--config", *(f"{k}={json.dumps(v)}" for k, v in (what or {}).items()))
        assert _dry(work, *args) == expected
    elif how == "touch":
        path = work / "bench" / what
        os.utime(path)
        assert _dry(work) == expected
    elif how == "edit-bench":
        path = work / "bench" / what
        original = path.read_bytes()
        try:
            path.write_bytes(original + (b"\n%changed\n" if path.suffix == ".pdf" else b"\n"))
            if path.suffix == ".jsonl":  # one test's text changed
                lines = original.decode().splitlines()
                record = json.loads(lines[0])
                record["id"] = f"{record['id']}-changed"
                path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")
            assert _dry(work) == expected
        finally:
            path.write_bytes(original)
        assert _dry(work) == set()  # back to the content it was run with: the stamp matches again
    else:
        path = work / "src" / "olmpipe" / what
        original = path.read_bytes()
        try:
            path.write_bytes(original + b"\n# edited\n")
            assert _dry(work) == expected
        finally:
            path.write_bytes(original)


def test_the_costliest_cases_make_nothing_again(finished):
    """For real: a changed checkpoint interval runs nothing; a touched 1 MB PDF and an edited module
    of a stage that is off run nothing; a forced retrain that writes the same weights reuses every
    evaluation generation (the journal's count); no page image is rendered again."""
    work = finished
    pngs = {p: p.stat().st_mtime_ns for p in (work / "results" / "rasterize").rglob("*.png")}
    proc = snakemake(work, "train", "--config", 'train={"grpo": {"save_steps": 3}}')
    assert "Nothing to be done" in proc.stdout + proc.stderr
    os.utime(work / "bench" / BIG_PDF)
    synth = work / "src" / "olmpipe" / "records" / "synth.py"
    synth.write_text(synth.read_text() + "\n# edited\n")
    proc = snakemake(work, "train")
    assert "Nothing to be done" in proc.stdout + proc.stderr
    weights = (work / "results" / "train" / "soup" / "model" / "model.safetensors").read_bytes()
    proc = snakemake(work, "train", "-R", "train_seed", "--config", 'train={"grpo": {"save_steps": 1}}', cores=2)
    assert job_counts(proc, targets=("train",))["evaluate_generate"] == 1
    assert (work / "results" / "train" / "soup" / "model" / "model.safetensors").read_bytes() == weights
    log = (work / "logs" / "evaluate_generate" / "evaluate_generate.log").read_text()
    assert "8 reused, 0 to generate" in log, log[-2000:]
    assert {p: p.stat().st_mtime_ns for p in pngs} == pngs


def test_switching_the_model_and_back_deletes_nothing_and_follows_its_advice(finished):
    """From the finished default: the tiny Qwen3-VL config is refused at plan time naming both ways
    on, with nothing deleted; its model builds into a folder of its own, so the first way (back to
    the model the run was trained from) is "Nothing to be done", with no rebuild; the second
    (`train.resume: restart`) plans the new model's training without touching the old run."""
    work = finished
    qwen3 = ("--configfile", str(work / "config" / "config.yaml"), str(REPO / "config" / "tiny-qwen3vl.yaml"))
    base = work / "results" / "model" / "tiny"
    before = {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()}
    run = work / "results" / "train" / "seed0"
    proc = workflow.snakemake(work, "-s", str(work / "src" / "Snakefile"), "train", "-n", *qwen3, check=False)
    text = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0 and "Either go back to the model this run was trained from (results/model/tiny" in text
    assert "train.resume: restart; the old run is moved to seed0.old-<time>/" in text, text[-2000:]
    snakemake(work, "build_model", "--configfile", *qwen3[1:])  # the new model, beside the old one
    assert (work / "results" / "model" / "tiny-qwen3_vl" / "config.json").is_file()
    assert {p.name: p.read_bytes() for p in base.iterdir() if p.is_file()} == before
    assert (run / "model").is_dir()
    assert _dry(work) == set()  # back: nothing rebuilt, nothing retrained
    planned = _dry(work, "--configfile", *qwen3[1:], "--config", 'train={"resume": "restart"}')
    assert {"train_seed", "baseline_generate", "evaluate_generate"} <= planned and "build_model" not in planned
