"""The train rules run for real by Snakemake on a small config, and the plan of the olmOCR 2 recipe."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml
from benchdata import REPO, make_small_bench
from support import workflow
from support.workflow import job_counts
from trainkit import folder_files

pytestmark = pytest.mark.slow


def snakemake(workdir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return workflow.snakemake(workdir, *args, cores=2, check=check)


def test_olmocr2_plan_lists_six_gpu_seeds_and_the_soup(tmp_path):
    """`snakemake -n train --configfile config/olmocr2.yaml`: six 8-GPU training jobs (7 training
    ranks + 1 vLLM server GPU), the soup, the evaluation; token-level and sequence-level seeds."""
    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    proc = snakemake(tmp_path, "-n", "-p", "train", "--configfile", str(REPO / "config" / "olmocr2.yaml"))
    counts = job_counts(proc)
    assert counts["train_seed"] == 6 and counts["soup"] == 1 and counts["evaluate_compare"] == 1
    assert "build_model" not in counts  # a real model, not the embedded one
    text = proc.stdout + proc.stderr
    jobs = re.findall(r"rule train_seed:\n(.*?)\n\n", text + "\n\n", flags=re.DOTALL)
    assert len(jobs) == 6
    for job in jobs:
        assert "gpu=8" in job and "runtime=2880" in job and "mem_mb=480000" in job
    commands = re.findall(r"exec (.*?--config-json '(.*?)'.*)", text)
    assert len(commands) == 6
    levels = {}
    for command, config in commands:
        # 7 training ranks under ZeRO-2 + 1 GPU for `trl vllm-serve`, split inside the job
        assert "-m olmpipe.launch --exec --gpus 8 --vllm-server-gpus 1 --launcher accelerate --strategy zero2" in command
        seed = int(re.search(r"--seed (\d+)", command)[1])
        job = json.loads(config)
        assert job["train"]["seeds"] == [seed] and job["model"]["path"] == "allenai/olmOCR-7B-0825"
        overrides = job["train"]["seed_overrides"]
        levels[seed] = overrides[0]["grpo"]["importance_sampling_level"] if overrides else "token"
    assert levels == {1: "token", 2: "token", 3: "token", 4: "sequence", 5: "sequence", 6: "sequence"}


CONFIG = {
    "bench": {"dir": "bench", "split": {"eval_fraction": 0.34}},
    "rasterize": {"longest_side": 200},
    "validate": {"check_math": False},
    "rewards": {"bench": {"processes": 0}},
    "train": {"seeds": [0, 1], "wandb": {"mode": "disabled"},
              "grpo": {"max_steps": 2, "max_completion_length": 8, "save_steps": 1}},
}


def test_seeds_train_as_jobs_and_soup(tmp_path):
    """Two seeds and their soup for real; rerunning does nothing; a new seed trains only itself."""
    make_small_bench(tmp_path / "bench")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG))
    first = snakemake(tmp_path, "soup")
    assert job_counts(first) == {"rasterize": 1, "validate": 1, "build_model": 1,
                                 "train_seed": 2, "soup": 1}
    for seed in (0, 1):
        run = tmp_path / "results" / "train" / f"seed{seed}"
        assert (run / "model" / "config.json").exists() and (run / "checkpoint-2").is_dir()
        assert [r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())] == [1, 2]
    soup = tmp_path / "results" / "train" / "soup" / "model"
    assert json.loads((soup / "olmpipe_soup.json").read_text())["inputs"] == [
        "results/train/seed0/model", "results/train/seed1/model"]
    assert job_counts(snakemake(tmp_path, "soup")) == {}
    CONFIG_3 = {**CONFIG, "train": {**CONFIG["train"], "seeds": [0, 1, 2]}}
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(CONFIG_3))
    assert job_counts(snakemake(tmp_path, "soup")) == {"train_seed": 1, "soup": 1}


def test_a_lora_run_of_the_embedded_default_finishes(tmp_path):
    """Acceptance of issue 21: the embedded default with `train.peft.enabled` through Snakemake's
    `train` target: two LoRA seeds (model/ loads with from_pretrained, adapter/ with PEFT), their
    soup, the evaluation and the report."""
    import torch
    from peft import PeftModel

    from olmpipe.models.load import load_model_and_processor

    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    lora = tmp_path / "lora.yaml"
    lora.write_text(yaml.safe_dump({"train": {"seeds": [0, 1], "wandb": {"mode": "disabled"},
                                              "peft": {"enabled": True, "r": 4, "alpha": 8},
                                              "grpo": {"max_steps": 1, "save_steps": 1}}}))
    snakemake(tmp_path, "train", "--configfile", str(lora))
    results = tmp_path / "results"
    for seed in (0, 1):
        run = results / "train" / f"seed{seed}"
        assert json.loads((run / "model" / "olmpipe_train.json").read_text())["peft"]["enabled"] is True
        assert (run / "checkpoint-1" / "adapter_model.safetensors").exists()
        merged, processor = load_model_and_processor(run / "model", device="cpu")
        base, _ = load_model_and_processor(results / "model" / "tiny", device="cpu")
        adapted = PeftModel.from_pretrained(base, str(run / "adapter"))
        ids = processor.tokenizer(["<|im_start|>user\nhello<|im_end|>"], return_tensors="pt")
        with torch.no_grad():
            assert torch.allclose(merged(**ids).logits, adapted(**ids).logits, atol=1e-4)
    assert (results / "train" / "soup" / "model" / "model.safetensors").exists()
    assert (results / "evaluate" / "comparison.json").exists()
    assert (results / "report" / "index.html").exists()


QWEN3_OVERRIDES = {
    "bench": {"dir": "bench", "split": {"eval_fraction": 0.34}},
    "rasterize": {"longest_side": 200},
    "validate": {"check_math": False},
    "generation": {"max_new_tokens": 8},
    # agreement with the group's medoid: rewards that differ within a group (unlike the bench
    # tests on 8-token answers of a random model), so that one step moves the weights
    "rewards": {"bench": {"processes": 0}, "weights": {"medoid": 1.0}},
    "train": {"seeds": [0, 1], "wandb": {"mode": "disabled"},
              "grpo": {"max_steps": 1, "max_completion_length": 8, "save_steps": 1000}},
}


def test_whole_chain_on_a_tiny_qwen3_vl(tmp_path):
    """Acceptance: `snakemake --cores all train` with config/tiny-qwen3vl.yaml (model.tiny.architecture:
    qwen3_vl) builds a tiny Qwen3-VL, trains two seeds that move its weights, soups them (the float32
    mean), evaluates the soup against the baseline and writes the report."""
    from safetensors.torch import load_file

    make_small_bench(tmp_path / "bench")
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump(QWEN3_OVERRIDES))
    proc = snakemake(tmp_path, "train", "--configfile", str(REPO / "config" / "tiny-qwen3vl.yaml"))
    assert job_counts(proc) == {"rasterize": 1, "validate": 1, "validate_audit": 1, "build_model": 1,
                                "baseline_generate": 1, "train_seed": 2, "soup": 1, "evaluate_generate": 1,
                                "evaluate_compare": 1, "report_plots": 1, "report_html": 1, "train": 1}
    results = tmp_path / "results"
    folders = [results / "model" / "tiny-qwen3_vl", *(results / "train" / f"seed{s}" / "model" for s in (0, 1)),
               results / "train" / "soup" / "model"]
    for folder in folders:
        assert json.loads((folder / "config.json").read_text())["model_type"] == "qwen3_vl", folder
    base, seed0, seed1, soup = (load_file(str(f / "model.safetensors")) for f in folders)
    moved = [n for n in base if not base[n].equal(seed0[n])]
    assert moved and any(not base[n].equal(seed1[n]) for n in base)  # both seeds trained
    for name in moved:
        assert soup[name].allclose((seed0[name].float() + seed1[name].float()) / 2)
    generations = [json.loads(x) for x in (results / "evaluate" / "tiny-qwen3-vl" / "generations.jsonl")
                   .read_text().splitlines()]
    assert generations and {g["model"] for g in generations} == {"tiny-qwen3-vl+grpo"}
    comparison = json.loads((results / "evaluate" / "comparison.json").read_text())
    assert comparison["baseline"]["name"] == "tiny-qwen3-vl" and comparison["rows"]
    assert "tiny-qwen3-vl" in (results / "report" / "index.html").read_text()


def test_qwen3_vl_8b_recipe_plans_one_8_gpu_seed(tmp_path):
    """`snakemake -n train --configfile config/olmocr2-qwen3vl-8b.yaml`: the hub model downloaded once,
    one 8-GPU seed (7 ZeRO-2 ranks + 1 vLLM server GPU; the plan fits), the soup and the evaluation."""
    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    proc = snakemake(tmp_path, "-n", "-p", "train", "--configfile", str(REPO / "config" / "olmocr2-qwen3vl-8b.yaml"))
    counts = job_counts(proc)
    assert counts["train_seed"] == 1 and counts["download_model"] == 1 and counts["evaluate_compare"] == 1
    assert "build_model" not in counts
    text = proc.stdout + proc.stderr
    [(command, config)] = re.findall(r"exec (.*?--config-json '(.*?)'.*)", text)
    assert "--gpus 8 --vllm-server-gpus 1 --launcher accelerate --strategy zero2" in command
    job = json.loads(config)
    assert job["model"]["path"] == "Qwen/Qwen3-VL-8B-Instruct" and job["train"]["seeds"] == [1]
    assert job["train"]["grpo"]["importance_sampling_level"] == "sequence"


def test_a_changed_setting_on_a_finished_seed_deletes_nothing(tmp_path):
    """A finished seed, then: a changed trajectory setting stops Snakemake while it plans (also
    `-n`), before it deletes model/, naming the key and the two ways on; `train.resume: continue`
    writes model/ again from the last checkpoint, recorded with the checkpoint's settings; with the
    checkpoints deleted, a rerun writes model/ again from model.kept/ instead of training; another
    training set (the split changed) reaches the job, which stops saying truly what is on disk."""
    make_small_bench(tmp_path / "bench")
    (tmp_path / "config").mkdir()
    config = tmp_path / "config" / "config.yaml"
    lr = 1e-4
    small = {**CONFIG, "train": {**CONFIG["train"], "seeds": [0], "grpo": {**CONFIG["train"]["grpo"], "learning_rate": lr}}}

    def write(**train):
        config.write_text(yaml.safe_dump({**small, "train": {**small["train"], **train}}))

    write()
    snakemake(tmp_path, "train_seeds")
    run = tmp_path / "results" / "train" / "seed0"
    trained = folder_files(run / "model")
    metrics = (run / "metrics.jsonl").read_bytes()

    grpo = {**small["train"]["grpo"], "learning_rate": lr * 2}
    write(grpo=grpo)
    for args in (("-n",), ()):
        proc = snakemake(tmp_path, "train_seeds", *args, check=False)
        text = proc.stdout + proc.stderr
        assert proc.returncode != 0 and "train_seed (seed 0): results/train/seed0/checkpoint-2 was trained with " \
            f"other settings (train.grpo.learning_rate: {lr!r} -> {lr * 2!r}). Snakemake stopped before running this " \
            "seed's training job: nothing of its run was deleted or changed. Either keep that run's model as it is (train.resume: continue; it is " \
            "at step 2 of train.grpo.max_steps 2, so the new settings train nothing unless max_steps grows) or " \
            "start over (train.resume: restart" in " ".join(text.split()), text[-3000:]
        assert folder_files(run / "model") == trained and (run / "model.metrics.jsonl").exists()

    write(grpo=grpo, resume="continue")
    assert job_counts(snakemake(tmp_path, "train_seeds"))["train_seed"] == 1
    assert folder_files(run / "model")["model.safetensors"] == trained["model.safetensors"]
    info = json.loads((run / "model" / "olmpipe_train.json").read_text())
    assert info["from_checkpoint"] == "checkpoint-2"
    kept = json.loads((run / "model.kept" / "olmpipe_kept.json").read_text())
    assert kept["settings"]["train.grpo.learning_rate"] == lr  # what trained it, not the config's

    for checkpoint in run.glob("checkpoint-*"):
        shutil.rmtree(checkpoint)
    write()  # back to the settings it was trained with: train_seed reruns (its params changed back)
    assert job_counts(snakemake(tmp_path, "train_seeds"))["train_seed"] == 1
    assert folder_files(run / "model")["model.safetensors"] == trained["model.safetensors"]
    assert (run / "metrics.jsonl").read_bytes() == metrics  # nothing trained again
    assert "again from the kept final model" in (tmp_path / "logs" / "train_seed" / "seed0.log").read_text()

    config.write_text(yaml.safe_dump({**small, "bench": {**small["bench"], "split": {"eval_fraction": 0.67}}}))
    proc = snakemake(tmp_path, "train_seeds", check=False)
    log = " ".join((tmp_path / "logs" / "train_seed" / "seed0.log").read_text().split())
    assert proc.returncode != 0 and "model.kept (the run's kept final model) was trained with other settings " \
        "(training_set.pages: 2 -> 1, training_set.sha256:" in log, log[-3000:]
    assert "This job changed nothing on disk, but results/train/seed0/model is gone (Snakemake deletes a job's " \
        "outputs before it reruns the job); the run's finished model (step 2) is kept in " \
        "results/train/seed0/model.kept: with the settings it was trained with, the job writes " \
        "results/train/seed0/model again." in log
    assert not (run / "model").exists() and folder_files(run / "model.kept")["model.safetensors"] == \
        trained["model.safetensors"]
