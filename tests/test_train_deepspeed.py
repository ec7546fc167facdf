"""DeepSpeed on two CPU ranks over gloo (issue 31): how the policy is loaded (item 11), a LoRA run
finished from its checkpoint (item 16) and a non-finite gradient (item 17), with ``train.dtype:
bfloat16`` so that DeepSpeed runs its bf16 module and float32 masters as on GPUs.

DeepSpeed's first ZeRO run compiles its shared-memory op (about 2 minutes, once per machine).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.deepspeed import needs_deepspeed
from support.gloo import launch, probe_events
from trainkit import make_page_index

pytestmark = [pytest.mark.slow]

JOB = {"train": {"wandb": {"mode": "disabled"}, "dtype": "bfloat16",
                 "grpo": {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 2,
                          "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 1,
                          "logging_steps": 1, "learning_rate": 0.01, "save_total_limit": None, "beta": 0.01}},
       "rewards": {"bench": {"processes": 0}}}


def _job(**grpo) -> dict:
    return {**JOB, "train": {**JOB["train"], "grpo": {**JOB["train"]["grpo"], **grpo}}}


def _lora_job() -> dict:
    return {**JOB, "train": {**JOB["train"], "peft": {"enabled": True, "r": 4, "alpha": 8}}}


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _tensors(folder: Path, name: str = "model.safetensors") -> dict[str, torch.Tensor]:
    return load_file(str(folder / name))


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


@needs_deepspeed
def test_zero3_loads_partitioned_and_zero2_loads_deepspeeds_bf16_module(tmp_path, tiny_model_dir):
    """Item 11: under ZeRO-3 the policy is partitioned as it loads (zero.Init: the TRL config exists
    first), in DeepSpeed's bf16, and reaches the engine so (the engine then moves nothing), and its
    checkpoints and final model keep the checkpoint's key names; under
    ZeRO-2 it is loaded as DeepSpeed's bf16 module instead of float32 masters, and the run ends
    bitwise equal to one that loaded float32 (DeepSpeed builds its masters from the bf16 module)."""
    pages, tests = make_page_index(tmp_path)
    job = _job(max_steps=1)
    probes = {name: tmp_path / f"{name}.jsonl" for name in ("zero3", "zero2", "zero2-float32")}
    _ok(launch("zero3", tiny_model_dir, pages, tests, tmp_path / "zero3", job,
               env={"OLMPIPE_TEST_PROBE": str(probes["zero3"])}))
    loads = probe_events(probes["zero3"], "load")
    assert len(loads) == 2 and all(e["partitioned"] and e["dtype"] == "torch.bfloat16" for e in loads), loads
    engines = probe_events(probes["zero3"], "engine")
    assert len(engines) == 4 and all(e["partitioned"] and e["local_numel"] == 0 for e in engines), engines
    # saved under the checkpoint's own names (transformers' ZeRO-3 load recorded every renaming of its
    # mapping, used or not, and the save reverted them all: model.model.* keys; compat.transformers)
    base = set(_tensors(tiny_model_dir))
    for folder in ("model", "checkpoint-1"):
        assert set(_tensors(tmp_path / "zero3" / folder)) == base, folder

    _ok(launch("zero2", tiny_model_dir, pages, tests, tmp_path / "zero2", job,
               env={"OLMPIPE_TEST_PROBE": str(probes["zero2"])}))
    loads = probe_events(probes["zero2"], "load")
    assert [(e["dtype"], e["partitioned"]) for e in loads] == [("torch.bfloat16", False)] * 2, loads
    _ok(launch("zero2", tiny_model_dir, pages, tests, tmp_path / "zero2-float32", job,
               env={"OLMPIPE_TEST_PROBE": str(probes["zero2-float32"]), "OLMPIPE_TEST_LOAD_DTYPE": "float32"}))
    assert {e["dtype"] for e in probe_events(probes["zero2-float32"], "load")} == {"torch.float32"}
    bf16, fp32 = _tensors(tmp_path / "zero2" / "model"), _tensors(tmp_path / "zero2-float32" / "model")
    assert _equal(bf16, fp32), "a float32 load trained other weights than DeepSpeed's bf16 module"
    base = _tensors(tiny_model_dir)
    assert any(not torch.equal(bf16[k], base[k].float()) for k in base), "the step did not move the weights"
    assert {t.dtype for t in bf16.values()} == {torch.float32}  # the final model: DeepSpeed's float32 masters


@needs_deepspeed
def test_a_lora_run_finished_from_its_zero2_checkpoint_is_the_uninterrupted_run(tmp_path, tiny_model_dir):
    """Item 16: LoRA under ZeRO-2 with bf16 compute. One step moves the adapter; a run resumed from
    checkpoint-1 ends bitwise equal to the uninterrupted one; a run finished from checkpoint-2 (max_steps
    reached) writes the float32 adapter DeepSpeed trained -- not the bf16 copy the checkpoint's
    adapter_model.safetensors holds -- so its adapter/ and merged model/ equal the uninterrupted run's;
    and the merged model is the base plus (alpha / r) B @ A of that adapter."""
    pages, tests = make_page_index(tmp_path)
    job = _lora_job()
    full, resumed, finished = tmp_path / "full", tmp_path / "resumed", tmp_path / "finished"
    _ok(launch("zero2", tiny_model_dir, pages, tests, full, job))
    checkpoint_adapter = _tensors(full / "checkpoint-2", "adapter_model.safetensors")
    assert {t.dtype for t in checkpoint_adapter.values()} == {torch.bfloat16}  # DeepSpeed's bf16 module copy
    adapter = _tensors(full / "adapter", "adapter_model.safetensors")
    assert {t.dtype for t in adapter.values()} == {torch.float32}
    step1 = _tensors(full / "checkpoint-1", "adapter_model.safetensors")
    assert all(bool(t.abs().sum() > 0) for k, t in step1.items() if "lora_B" in k), "step 1 left lora_B at zero"

    for run, checkpoint in ((resumed, "checkpoint-1"), (finished, "checkpoint-2")):
        run.mkdir()
        shutil.copytree(full / checkpoint, run / checkpoint)
        _ok(launch("zero2", tiny_model_dir, pages, tests, run, job))
        assert _equal(_tensors(run / "adapter", "adapter_model.safetensors"), adapter), (checkpoint, "adapter/")
        assert _equal(_tensors(run / "model"), _tensors(full / "model")), (checkpoint, "model/")

    merged, base = _tensors(full / "model"), _tensors(tiny_model_dir)
    scale = 8 / 4
    changed = 0
    for key, weight in adapter.items():
        if ".lora_A." not in key:
            continue
        target = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        stored = target.replace("model.language_model.", "model.").replace("model.visual.", "visual.")
        name = target if target in merged else stored
        b = adapter[key.replace("lora_A", "lora_B")]
        expected = base[name if name in base else stored].float() + scale * (b @ weight)
        assert torch.allclose(merged[name], expected, atol=1e-6), name
        changed += 1
    assert changed > 0


@needs_deepspeed
@pytest.mark.parametrize("strategy", ["zero2", "zero3"])
def test_a_nan_gradient_stops_a_deepspeed_run(tmp_path, tiny_model_dir, strategy):
    """Item 17: a NaN gradient at step 1 with a finite loss. DeepSpeed's step ran inside backward and
    skipped the update silently (the run used to end with exit 0 and a final model); the health check
    reads the engine's gradient norm and stops the run on every rank, exit 4, before any checkpoint of
    the step."""
    pages, tests = make_page_index(tmp_path)
    run = tmp_path / strategy
    proc = launch(strategy, tiny_model_dir, pages, tests, run, _job(max_steps=2),
                  env={"OLMPIPE_TEST_NAN_STEP": "1"})
    # every rank stops at the same step and exits 4 (as python -m olmpipe.train does); torchrun reports
    # the first rank's code (it may SIGTERM the other one first) and exits 1
    assert proc.returncode != 0 and "exitcode  : 4" in proc.stderr, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert proc.stderr.count("NonFiniteStop: step 1: the gradient norm is inf (not finite), and DeepSpeed skipped "
                             "this update") == 2, proc.stderr[-5000:]
    assert not (run / "model").exists() and not list(run.glob("checkpoint-*"))
