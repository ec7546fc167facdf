"""bf16 training keeps float32 master weights: one optimizer step at the recipe's learning rate
(2e-6) moves nearly every trained tensor, and the final model/ carries that change although it is
below bf16's resolution. Run for every strategy the CPU can run: one process, DDP over gloo
(``accelerate launch``, workflow/accelerate/ddp.yaml) and DeepSpeed ZeRO-2 and ZeRO-3 on DeepSpeed's
CPU accelerator when the ``deepspeed`` extra is installed.

"Trained tensors" are those a float32 run of the same step moves (one process, float32 weights and
compute); a tensor counts as moved when at least half of the elements the float32 run moved in it
moved too. Weights are compared in the dtype they were trained in (the base rounded to it), read
from the final model folder, i.e. what the soup and evaluation see. Before float32 masters (commit
1d966ff), ``train.dtype: bfloat16`` trained bf16 weights and this step moved almost nothing.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.deepspeed import NEEDS_DEEPSPEED
from trainkit import LowIdReward, make_page_index, moved_elements
from trainkit import moved_summary as summary

from olmpipe.config import load_config
from olmpipe.train.run import train_seed

pytestmark = pytest.mark.slow

REPO = Path(__file__).resolve().parents[1]
LR = 2e-6
GRPO = {"max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
        "max_completion_length": 8, "learning_rate": LR, "lr_scheduler_type": "constant", "warmup_steps": 0,
        "beta": 0.01, "save_steps": 1, "logging_steps": 1}
#: Shares the assertions ask for: trained tensors moved, and trained elements moved.
TENSOR_SHARE, ELEMENT_SHARE = 0.95, 0.9


def _job(dtype: str, **grpo) -> dict:
    return {"train": {"wandb": {"mode": "disabled"}, "device": "cpu", "dtype": dtype, "grpo": {**GRPO, **grpo}},
            "rewards": {"bench": {"processes": 0}}, "resources": {"train": {"cpus_per_task": 1}}}


def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _single(setup: dict, name: str, dtype: str) -> Path:
    run = setup["root"] / name
    cfg = load_config(overrides=_job(dtype))
    assert train_seed(cfg, seed=0, model_path=setup["model"], pages=setup["pages"], tests_dir=setup["tests"],
                      run_dir=run, reward_funcs=[LowIdReward()]) == 0
    return run


def _launched(setup: dict, name: str, strategy: str) -> Path:
    """Two ranks under ``accelerate launch`` with the strategy's config file (CPU: gloo)."""
    run = setup["root"] / name
    job = _job("bfloat16", per_device_train_batch_size=2, gradient_accumulation_steps=2)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests")])}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "workflow" / "accelerate" / f"{strategy}.yaml"), "--num_processes", "2",
           "--main_process_port", str(23000 + os.getpid() % 9000), str(REPO / "tests" / "lowid_train.py"),
           str(setup["model"]), str(setup["pages"]), str(setup["tests"]), str(run), json.dumps(job)]
    proc = subprocess.run(["timeout", "-k", "10", "600", *cmd], cwd=REPO, env=env, capture_output=True, text=True,
                          check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    return run


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("precision")
    pages, tests = make_page_index(root)
    out = {"root": root, "pages": pages, "tests": tests, "model": tiny_model_dir}
    reference = _single(out, "float32", "float32")
    out["reference"] = moved_elements(tiny_model_dir, reference / "model")
    return out



@pytest.mark.parametrize("strategy", [
    "single",
    "ddp",
    pytest.param("zero2", marks=NEEDS_DEEPSPEED),
    pytest.param("zero3", marks=NEEDS_DEEPSPEED),
])
def test_one_bf16_step_at_lr_2e6_moves_nearly_every_trained_tensor(strategy: str, setup: dict) -> None:
    run = _single(setup, "bf16-single", "bfloat16") if strategy == "single" else \
        _launched(setup, f"bf16-{strategy}", strategy)
    model = run / "model"
    moved = moved_elements(setup["model"], model)
    result = summary(moved, setup["reference"])
    sys.stdout.write(f"\nprecision {strategy}: {json.dumps(result)}\n")
    assert result["trained_tensors"] > 0.9 * result["all_tensors"], result  # the step trains nearly everything
    assert result["tensor_share"] >= TENSOR_SHARE and result["element_share"] >= ELEMENT_SHARE, result
    # what reaches the soup and evaluation: float32 weights whose change is below bf16's resolution
    weights, base = _weights(model), _weights(setup["model"])
    assert set(weights) == set(base) and {t.dtype for t in weights.values()} == {torch.float32}
    assert json.loads((model / "config.json").read_text())["dtype"] == "float32"
    changed = {k: base[k] != weights[k] for k in weights}
    hidden = sum(int((base[k].bfloat16() == weights[k].bfloat16())[changed[k]].sum()) for k in weights)
    assert hidden >= 0.9 * sum(int(c.sum()) for c in changed.values()), "the test needs sub-bf16 changes"
    # the checkpoint's weights and optimizer files are what olmpipe plan counts per parameter (the
    # tiny model's tied embeddings are written twice by DeepSpeed's weights copy: a few % over)
    from olmpipe.plan import load_shape
    from olmpipe.plan.checkpoint import checkpoint_bytes_per_param

    files = [p for p in (run / "checkpoint-1").rglob("*") if p.is_file() and (
        p.suffix == ".safetensors" or p.name == "optimizer.pt" or p.parent.name.startswith("global_step"))]
    measured = sum(p.stat().st_size for p in files) / load_shape(setup["model"]).parameters()
    planned = sum(checkpoint_bytes_per_param("ddp" if strategy == "single" else strategy, 4, 2).values())
    sys.stdout.write(f"checkpoint {strategy}: {measured:.2f} B/param on disk, {planned:g} planned\n")
    assert planned <= measured <= 1.1 * planned, (measured, planned, sorted(p.name for p in files))
    if strategy in ("zero2", "zero3"):
        # a finished run whose model/ is lost rewrites it from the checkpoint's float32 masters
        again = setup["root"] / f"{strategy}-again"
        shutil.copytree(run, again)
        shutil.rmtree(again / "model")
        _launched(setup, again.name, strategy)
        x, y = _weights(model), _weights(again / "model")
        assert all(torch.equal(x[k], y[k]) for k in x), "model/ from the checkpoint differs from the run's"


def test_pure_bf16_is_explicit_and_loses_the_step(setup: dict) -> None:
    """``train.pure_bf16: true`` trains bf16 weights (the documented opt-out): the same step then moves
    almost nothing; it refuses float32 compute."""
    run = setup["root"] / "pure"
    cfg = load_config(overrides={**_job("bfloat16"), "train": {**_job("bfloat16")["train"], "pure_bf16": True}})
    assert train_seed(cfg, seed=0, model_path=setup["model"], pages=setup["pages"], tests_dir=setup["tests"],
                      run_dir=run, reward_funcs=[LowIdReward()]) == 0
    result = summary(moved_elements(setup["model"], run / "model"), setup["reference"])
    sys.stdout.write(f"\nprecision pure_bf16: {json.dumps(result)}\n")
    assert result["tensor_share"] < 0.5, result
    bad = load_config(overrides={"train": {"pure_bf16": True, "dtype": "float32"}})
    with pytest.raises(ValueError, match="train.pure_bf16"):
        train_seed(bad, seed=0, model_path=setup["model"], pages=setup["pages"], tests_dir=setup["tests"],
                   run_dir=setup["root"] / "bad")


def test_trl_trains_float32_weights_under_bf16_autocast_with_a_bf16_reference(setup: dict) -> None:
    """The seams the run relies on, through the installed TRL/accelerate: ``bf16=True`` over float32
    parameters is autocast (the parameters stay float32), and the reference model is bf16."""
    from olmpipe.job.data import build_examples, to_dataset
    from olmpipe.job.precision import resolve_precision
    from olmpipe.models.load import load_model_and_processor
    from olmpipe.train.args import grpo_config, grpo_knobs
    from olmpipe.train.trainer import ResumableGRPOTrainer

    cfg = load_config(overrides=_job("bfloat16"))
    precision = resolve_precision(cfg["train"], "cpu")
    assert (precision.weights, precision.compute, precision.reference) == ("float32", "bfloat16", "bfloat16")
    model, processor = load_model_and_processor(setup["model"], dtype=precision.weights, device="cpu")
    args = grpo_config(grpo_knobs(cfg["train"], 0), output_dir=str(setup["root"] / "seams"), seed=0,
                       reward_weights=[1.0], device="cpu", dtype=precision.compute,
                       reference_dtype=precision.reference)
    examples, _ = build_examples(setup["pages"], setup["tests"])
    trainer = ResumableGRPOTrainer(model=model, reward_funcs=[LowIdReward()], args=args,
                                   train_dataset=to_dataset(examples), processing_class=processor)
    assert args.bf16 and trainer.accelerator.mixed_precision == "bf16" and trainer.accelerator.native_amp
    assert {p.dtype for p in trainer.model.parameters()} == {torch.float32}
    assert {p.dtype for p in trainer.ref_model.parameters()} == {torch.bfloat16}
    with trainer.accelerator.autocast():
        x = torch.ones(2, 2)
        assert (x @ x).dtype == torch.bfloat16


def _lora_step(setup: dict, name: str, dtype: str) -> dict[str, torch.Tensor]:
    """One LoRA step at lr 2e-6 with the vision merger in ``modules_to_save``: the checkpoint's adapter file."""
    run = setup["root"] / name
    job = _job(dtype)
    job["train"]["peft"] = {"enabled": True, "r": 4, "modules_to_save": ["merger"]}
    assert train_seed(load_config(overrides=job), seed=0, model_path=setup["model"], pages=setup["pages"],
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    return load_file(str(run / "checkpoint-1" / "adapter_model.safetensors"))


def test_lora_modules_to_save_train_in_float32_on_a_bf16_base(setup: dict) -> None:
    """Probe F7: PEFT's trained copy of a ``modules_to_save`` module is a deep copy of the base module,
    bf16 on a bf16 base (any GPU run), and PEFT casts only LoRA's own tensors to float32: one step at
    lr 2e-6 moved 4% of the merger copy's elements (the LoRA B matrices: 99.9%). Every trained tensor
    is float32 now and moves like the float32 run's."""
    from olmpipe.models.load import load_model_and_processor

    reference = _lora_step(setup, "lora-float32", "float32")
    trained = _lora_step(setup, "lora-bf16", "bfloat16")
    base, _ = load_model_and_processor(setup["model"], dtype="bfloat16", device="cpu")
    start = {f"base_model.model.{k}": v for k, v in base.state_dict().items() if ".merger." in k}
    saved = sorted(k for k in trained if ".merger." in k)
    assert saved and set(saved) <= set(start), saved

    def moved(weights: dict[str, torch.Tensor], k: str) -> tuple[int, int]:
        return int((weights[k] != start[k].to(weights[k].dtype)).sum()), weights[k].numel()

    result = summary({k: moved(trained, k) for k in saved}, {k: moved(reference, k) for k in saved})
    sys.stdout.write(f"\nprecision lora modules_to_save: {json.dumps(result)}\n")
    assert result["trained_tensors"] >= 2, result  # the merger's linear layers moved in the float32 run
    assert result["tensor_share"] >= TENSOR_SHARE and result["element_share"] >= ELEMENT_SHARE, result
    assert {trained[k].dtype for k in trained} == {torch.float32}, {k: trained[k].dtype for k in saved}
