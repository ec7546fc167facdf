"""olmpipe.job.preflight: settings the training job cannot run with stop the plan, ``olmpipe plan``
and the trainer's start, naming the key (probe findings F6 and F9: each used to pass ``snakemake -n``
and ``olmpipe plan`` and fail inside the submitted job, as a traceback, some after the model loaded)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from olmpipe.config import load_config
from olmpipe.config.processes import LaunchError
from olmpipe.job.preflight import JobSetupError, device_problems, job_problems, module_problems
from olmpipe.plan import checked_launch_prefix, main

REPO = Path(__file__).resolve().parents[1]
QLORA = {"train": {"peft": {"enabled": True, "quantization": "4bit"}}}
PURE_BF16 = {"train": {"pure_bf16": True}}
NOTHING = {"train": {"peft": {"enabled": True, "target_modules": ["nothing_here"]}}}


def _cfg(*overrides: dict) -> dict:
    merged: dict = {}
    for override in overrides:
        for section, values in override.items():
            merged.setdefault(section, {}).update(values)
    return load_config(overrides=merged)


@pytest.mark.parametrize(("override", "message"), [
    (QLORA, r"train.peft.quantization: 4bit \(QLoRA\) needs a CUDA GPU"),
    (PURE_BF16, r"train.pure_bf16: true asks for bfloat16 weights, but train.dtype 'auto' computes in float32 on cpu"),
    ({"train": {"grpo": {"use_vllm": True, "vllm_mode": "server"}}}, "train.grpo.vllm_mode: server needs CUDA"),
])
def test_a_job_without_gpu_refuses_what_only_a_gpu_trains(override, message):
    """F9: each of these failed inside the submitted job (QLoRA after 27 s of dataset building)."""
    cfg = _cfg(override)
    problems = job_problems(cfg, 0, None)
    assert len(problems) == 1 and problems[0].endswith(
        "[the training job has no GPU (GPUs: 0, train.device: auto), so it trains on the CPU]"), problems
    assert re.search(message, problems[0]), problems
    assert job_problems(cfg, 1, None) == []  # the same settings on a GPU job (auto: CUDA)
    assert device_problems(_cfg(override, {"train": {"device": "cpu"}}), "cpu")  # an explicit CPU job too


def test_target_modules_are_checked_against_the_models_own_module_names(tiny_model_dir):
    """F6/F9: `target_modules: [nothing_here]` ended in PEFT's NoMatchingPeftModuleError (a regex the
    user never wrote) after the model loaded; a name beside others that match was ignored silently,
    and so was a modules_to_save name that matches nothing."""
    peft = _cfg(NOTHING)["train"]["peft"]
    assert module_problems({**peft, "target_modules": ["q_proj", "v_proj"]}, tiny_model_dir) == []
    [problem] = module_problems({**peft, "target_modules": ["q_proj", "nothing_here"]}, tiny_model_dir)
    assert problem.startswith("train.peft.target_modules: 'nothing_here' names no module of the language model "
                              f"(model.language_model) of {tiny_model_dir} (qwen2_5_vl); its layers LoRA can adapt: ")
    assert "q_proj" in problem and "down_proj" in problem
    [problem] = module_problems({**peft, "target_modules": ["q_proj"], "vision": True,
                                 "vision_target_modules": ["mlp", "qkv"]}, tiny_model_dir)
    assert "train.peft.vision_target_modules: 'mlp' names Qwen2_5_VLMLP modules of the vision tower" in problem
    assert "which LoRA cannot adapt" in problem and "qkv" in problem
    [problem] = module_problems({**peft, "target_modules": ["q_proj"], "modules_to_save": ["merger", "mergr"]},
                                tiny_model_dir)
    assert problem.startswith("train.peft.modules_to_save: 'mergr' names no module") and "merger" in problem
    # a folder that does not exist yet (the embedded model before its rule ran) is checked at job start
    assert module_problems(peft, tiny_model_dir.parent / "not-built") == []
    assert module_problems({**peft, "enabled": False}, tiny_model_dir) == []


def test_the_trainer_stops_before_it_builds_or_loads_anything(tmp_path, tiny_model_dir):
    """The job's own check: the model folder here has only config.json (the check builds the model on
    the meta device), and no page index exists: nothing was built or loaded before the refusal."""
    from olmpipe.train.cli import main as train_main
    from olmpipe.train.run import train_seed

    config_only = tmp_path / "model"
    config_only.mkdir()
    shutil.copy(tiny_model_dir / "config.json", config_only / "config.json")
    cfg = _cfg(NOTHING, {"train": {"wandb": {"mode": "disabled"}}})
    with pytest.raises(JobSetupError, match="train.peft.target_modules: 'nothing_here' names no module"):
        train_seed(cfg, seed=0, model_path=config_only, pages=tmp_path / "none.jsonl", tests_dir=tmp_path,
                   run_dir=tmp_path / "run")
    assert not (tmp_path / "run" / "dataset.json").exists()
    code = train_main(["--seed", "0", "--model", str(config_only), "--pages", str(tmp_path / "none.jsonl"),
                       "--tests-dir", str(tmp_path), "--run-dir", str(tmp_path / "run"),
                       "--config-json", json.dumps({"train": {"wandb": {"mode": "disabled"}, "pure_bf16": True,
                                                              "device": "cpu"}})])
    assert code == 2


def test_the_plan_refuses_them_too(tmp_path, tiny_model_dir, capsys):
    """F9: `olmpipe plan` printed "not sized: nothing_here" and "fits"; a CPU job was not checked at all."""
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump(_merge(QLORA, NOTHING)))
    assert main(["--configfile", str(override), "--model", str(tiny_model_dir)]) == 2
    err = capsys.readouterr().err
    assert "train.peft.quantization: 4bit (QLoRA) needs a CUDA GPU" in err and "'nothing_here' names no module" in err
    assert main(["--configfile", str(override), "--model", str(tiny_model_dir), "--gpus", "1"]) == 2
    err = capsys.readouterr().err
    assert "QLoRA" not in err and "'nothing_here' names no module" in err
    with pytest.raises(LaunchError, match="(?s)cannot run with these settings.*'nothing_here' names no module"):
        checked_launch_prefix(_cfg(NOTHING), 0, tiny_model_dir)


def _merge(*overrides: dict) -> dict:
    out: dict = {}
    for override in overrides:
        for section, values in override.items():
            for key, value in values.items():
                out.setdefault(section, {}).setdefault(key, {})
                out[section][key] = {**out[section][key], **value} if isinstance(value, dict) else value
    return out


def test_plan_messages_say_what_was_given(capsys):
    """F11: `--gpus -3` said "resources.train.gpu is 0"; `--gpus 0` was reported as the config's value."""
    assert main(["--gpus", "-3"]) == 2
    assert "--gpus -3: a job has 0 GPUs (a CPU job) or more" in capsys.readouterr().err
    assert main(["--gpus", "0"]) == 0
    assert capsys.readouterr().out.startswith("--gpus 0: a CPU job")
    assert main([]) == 0
    assert capsys.readouterr().out.startswith("resources.train.gpu is 0: a CPU job")


def test_a_vllm_share_above_the_whole_gpu_is_not_advised(tmp_path, capsys):
    """F11: `gpu_memory_gb: 0.001` with colocated vLLM advised a share of 15882.87."""
    override = tmp_path / "tiny-gpu.yaml"
    override.write_text(yaml.safe_dump({"resources": {"train": {"gpu_memory_gb": 0.001}}}))
    assert main(["--configfile", str(REPO / "config" / "olmocr2-lora-1gpu.yaml"), str(override)]) == 1
    out = capsys.readouterr().out
    assert "raise train.grpo.vllm_gpu_memory_utilization to at least" not in out
    assert "no share helps: they need" in out and "more than the whole GPU (resources.train.gpu_memory_gb: 0.001)" in out


def test_an_adapter_that_does_not_load_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    """F6: a checkpoint whose adapter does not fit the model (one without olmpipe_run.json settings,
    so no settings check caught it before) ended the job in a traceback; now one line, exit 2."""
    import olmpipe.job.run
    from olmpipe.job.peft import AdapterLoadError
    from olmpipe.train.cli import main as train_main

    def fails(*args, **kwargs):
        raise AdapterLoadError("run/checkpoint-4: the checkpoint's adapter does not fit the model's")

    monkeypatch.setattr(olmpipe.job.run, "run_job", fails)
    code = train_main(["--seed", "0", "--model", str(tmp_path), "--pages", str(tmp_path / "p.jsonl"),
                       "--tests-dir", str(tmp_path), "--run-dir", str(tmp_path / "run"),
                       "--config-json", json.dumps({"train": {"wandb": {"mode": "disabled"}}})])
    err = capsys.readouterr().err
    assert code == 2 and err == "olmpipe train: run/checkpoint-4: the checkpoint's adapter does not fit the model's\n"


@pytest.mark.slow
def test_snakemake_stops_before_submitting_what_the_job_cannot_train(tmp_path, tiny_model_dir):
    """F9 through the workflow: the train rule's plan (DAG time, the rule's own GPU count) refuses QLoRA
    on a CPU job and a target module the built model lacks; `snakemake -n` fails, naming both."""
    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    (tmp_path / "results" / "model").mkdir(parents=True)
    (tmp_path / "results" / "model" / "tiny").symlink_to(tiny_model_dir)
    override = tmp_path / "override.yaml"
    override.write_text(yaml.safe_dump(_merge(QLORA, NOTHING)))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--nolock",
           "-n", "train_seeds", "--configfile", str(REPO / "config" / "config.yaml"), str(override)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "the training job cannot run with these settings (checked before it is submitted)" in out, out[-3000:]
    assert "train.peft.quantization: 4bit (QLoRA) needs a CUDA GPU" in out
    assert "train.peft.target_modules: 'nothing_here' names no module" in out


def test_an_embedded_model_about_to_be_rebuilt_is_not_checked_at_plan_time(tmp_path, tiny_model_dir):
    """Probe2 G2: with model.tiny.architecture changed to qwen3_vl and its vision names, the plan
    checked the old Qwen2.5-VL folder (which build_model rebuilds first) and refused a valid config.
    A folder built from other model.tiny settings is left to the job; the folder as configured is checked."""
    folder = tmp_path / "tiny"
    shutil.copytree(tiny_model_dir, folder)
    peft = {"enabled": True, "vision": True, "vision_target_modules": ["linear_fc1", "linear_fc2"]}
    qwen3 = _cfg({"model": {"tiny": {"architecture": "qwen3_vl"}}, "train": {"peft": peft}})
    assert job_problems(qwen3, 0, folder) == []
    assert module_problems(qwen3["train"]["peft"], folder)  # the job, on this folder, would refuse
    as_built = _cfg({"train": {"peft": peft}})
    assert [p.split(":")[0] for p in job_problems(as_built, 0, folder)] == ["train.peft.vision_target_modules"] * 2


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_the_vision_tower_with_its_default_targets_plans_and_checks(arch, tiny_models, tmp_path, capsys):
    """Issue 31 item 1: `train.peft.vision: true` with the default `vision_target_modules: null` (the
    architecture's own vision linears, docs/lora.md) crashed the module check, and with it the plan, with
    `TypeError: 'NoneType' object is not iterable`. Null now checks the architecture's vision linears."""
    model = tiny_models(arch)
    cfg = _cfg({"model": {"tiny": {"architecture": arch}}, "train": {"peft": {"enabled": True, "vision": True}}})
    assert cfg["train"]["peft"]["vision_target_modules"] is None
    assert module_problems(cfg["train"]["peft"], model) == []
    assert job_problems(cfg, 1, model) == []
    override = tmp_path / "vision.yaml"
    override.write_text(yaml.safe_dump({"model": {"tiny": {"architecture": arch}},
                                        "train": {"peft": {"enabled": True, "vision": True}}}))
    assert main(["--configfile", str(override), "--model", str(model), "--gpus", "1"]) == 0
    assert "vision" in capsys.readouterr().out


def test_lora_rank_alpha_and_seeds_are_bounded_at_plan_time(tiny_model_dir, tmp_path, capsys):
    """Issue 31 item 4: `peft.r: 1e9` (an adapter of 10^9 x (in + out) per layer: 256 GB at the first
    step), `peft.alpha: 1e300` (the update scaled by alpha / r overflows float32: NaN at the first forward)
    and `train.seeds: [7, 7]` (one seed's job twice, averaged with itself) passed the plan. The rank is
    bounded by the smallest layer it adapts (LoRA's update has rank min(in, out) at most), the scale
    alpha / r by olmpipe.job.peft.MAX_LORA_SCALE, and a seed is listed once."""
    from olmpipe.config import ConfigError
    from olmpipe.job.peft import MAX_LORA_SCALE

    peft = _cfg({"train": {"peft": {"enabled": True}}})["train"]["peft"]
    assert module_problems(peft, tiny_model_dir) == []  # r 32 on 64-wide layers
    [problem] = module_problems({**peft, "r": 10**9}, tiny_model_dir)
    assert problem.startswith("train.peft.r: 1000000000 is larger than the smallest layer it adapts: "), problem
    assert "down_proj of the language model" in problem and "128 x 64" in problem, problem
    assert "set train.peft.r to 64 or less" in problem, problem
    assert module_problems({**peft, "r": 64}, tiny_model_dir) == []
    vision = {**peft, "r": 64, "vision": True}  # the tiny vision tower's proj is 32 x 32
    [problem] = module_problems(vision, tiny_model_dir)
    assert "proj of the vision tower" in problem and "set train.peft.r to 32 or less" in problem, problem
    for alpha, r, rslora in ((1e300, 32, False), (MAX_LORA_SCALE * 32 * 1.01, 32, False), (1e6, 4, True)):
        cfg = _cfg({"train": {"peft": {"enabled": True, "alpha": alpha, "r": r, "rslora": rslora}}})
        [problem] = job_problems(cfg, 0, None)
        assert f"train.peft.alpha: {alpha:g} scales the adapter's update by" in problem, problem
    assert job_problems(_cfg({"train": {"peft": {"enabled": True, "alpha": MAX_LORA_SCALE * 32}}}), 0, None) == []
    with pytest.raises(ConfigError, match=r"train/seeds: \[7, 7\] has non-unique elements"):
        _cfg({"train": {"seeds": [7, 7]}})
    override = tmp_path / "big.yaml"
    override.write_text(yaml.safe_dump({"train": {"peft": {"enabled": True, "r": 10**9, "alpha": 1e300}}}))
    assert main(["--configfile", str(override), "--model", str(tiny_model_dir)]) == 2  # a CPU job too
    err = capsys.readouterr().err
    assert "train.peft.r: 1000000000 is larger" in err and "train.peft.alpha: 1e+300" in err, err
