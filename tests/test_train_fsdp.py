"""FSDP2 on two CPU ranks over gloo (issue 31, items 11 and 16).

accelerate applies FSDP to GPU process groups only, so ``workflow/accelerate/fsdp.yaml`` on CPUs
would silently run DDP (tests/test_train_multiprocess.py); here ``OLMPIPE_TEST_CPU_FSDP=1``
(tests/support/trainhooks.py) switches accelerate's state to FSDP on the gloo ranks, and torch's
``fully_shard`` shards the model there as on GPUs (the checkpoints hold FSDP's own
``pytorch_model_fsdp.bin``, which proves it). ``train.dtype: bfloat16``: accelerate's
``MixedPrecisionPolicy`` over float32 shards, as on GPUs.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from support.gloo import launch, probe_events
from trainkit import make_page_index

pytestmark = pytest.mark.slow

FSDP = {"OLMPIPE_TEST_CPU_FSDP": "1"}
JOB = {"train": {"wandb": {"mode": "disabled"}, "dtype": "bfloat16",
                 "grpo": {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 2,
                          "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 1,
                          "logging_steps": 1, "learning_rate": 0.01, "save_total_limit": None, "beta": 0.01},
                 "peft": {"enabled": True, "r": 4, "alpha": 8}},
       "rewards": {"bench": {"processes": 0}}}


def _ok(proc) -> None:
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]


def _adapter(run: Path) -> dict[str, torch.Tensor]:
    return load_file(str(run / "adapter_model.safetensors"))


def _equal(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> bool:
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_lora_under_fsdp_moves_resumes_bitwise_and_merges_its_update(tmp_path, tiny_model_dir):
    """Item 16's FSDP half: one step moves the adapter (every lora_B); a run resumed from checkpoint-1
    and a run finished from checkpoint-2 end with the uninterrupted run's adapter/ and model/ bit for
    bit (FSDP's adapter is float32: accelerate upcasts trained parameters, utils/fsdp_utils.py
    814-820); model/ is the base plus (alpha / r) B @ A; item 11: the frozen base was loaded on the
    CPU (fully_shard moves it to the rank's device unit by unit)."""
    pages, tests = make_page_index(tmp_path)
    full, resumed, finished = tmp_path / "full", tmp_path / "resumed", tmp_path / "finished"
    probe = tmp_path / "probe.jsonl"
    _ok(launch("fsdp", tiny_model_dir, pages, tests, full, JOB, env={**FSDP, "OLMPIPE_TEST_PROBE": str(probe)}))
    assert (full / "checkpoint-1" / "pytorch_model_fsdp.bin").exists(), "FSDP was not applied"
    policy = probe_events(probe, "load")[:2]  # then rank 0 loads the float32 base again to merge the adapter
    assert [(e["requested_device"], e["dtype"], e["rank"]) for e in sorted(policy, key=lambda e: e["rank"])] == [
        ("cpu", "torch.bfloat16", 0), ("cpu", "torch.bfloat16", 1)]
    assert not probe_events(probe, "ddp")
    adapter = _adapter(full / "adapter")
    assert {t.dtype for t in adapter.values()} == {torch.float32}
    step1 = _adapter(full / "checkpoint-1")
    lora_b = [k for k in step1 if "lora_B" in k]
    assert lora_b and all(bool(step1[k].abs().sum() > 0) for k in lora_b), "step 1 left lora_B at zero"

    for run, checkpoint in ((resumed, "checkpoint-1"), (finished, "checkpoint-2")):
        run.mkdir()
        shutil.copytree(full / checkpoint, run / checkpoint)
        _ok(launch("fsdp", tiny_model_dir, pages, tests, run, JOB, env=FSDP))
        assert _equal(_adapter(run / "adapter"), adapter), (checkpoint, "adapter/")
        assert _equal(load_file(str(run / "model" / "model.safetensors")),
                      load_file(str(full / "model" / "model.safetensors"))), (checkpoint, "model/")

    merged, base = load_file(str(full / "model" / "model.safetensors")), load_file(str(tiny_model_dir / "model.safetensors"))
    changed = 0
    for key, a in adapter.items():
        if ".lora_A." not in key:
            continue
        target = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        name = target if target in merged else target.replace("model.language_model.", "model.")
        expected = base[name].float() + (8 / 4) * (adapter[key.replace("lora_A", "lora_B")] @ a)
        assert torch.allclose(merged[name], expected, atol=1e-6), name
        changed += 1
    untouched = [k for k in base if all(k != (t := x.removeprefix("base_model.model.").replace(
        ".lora_A.weight", ".weight")) and k != t.replace("model.language_model.", "model.") for x in adapter)]
    assert changed > 0 and all(torch.equal(merged[k], base[k].float()) for k in untouched)


def test_a_full_fine_tune_under_fsdp_loads_on_the_cpu_and_resumes_bitwise(tmp_path, tiny_model_dir):
    """Item 11: under FSDP the float32 policy is loaded on the CPU (sharded from there), and such a
    run resumes bitwise."""
    pages, tests = make_page_index(tmp_path)
    job = {**JOB, "train": {k: v for k, v in JOB["train"].items() if k != "peft"}}
    full, resumed, probe = tmp_path / "full", tmp_path / "resumed", tmp_path / "probe.jsonl"
    _ok(launch("fsdp", tiny_model_dir, pages, tests, full, job, env={**FSDP, "OLMPIPE_TEST_PROBE": str(probe)}))
    assert [(e["requested_device"], e["dtype"]) for e in probe_events(probe, "load")] == [("cpu", "torch.float32")] * 2
    assert (full / "checkpoint-1" / "pytorch_model_fsdp.bin").exists()
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-1", resumed / "checkpoint-1")
    _ok(launch("fsdp", tiny_model_dir, pages, tests, resumed, job, env=FSDP))
    x, y = (load_file(str(run / "model" / "model.safetensors")) for run in (full, resumed))
    assert _equal(x, y)
    base = load_file(str(tiny_model_dir / "model.safetensors"))
    assert any(not torch.equal(x[k], base[k]) for k in base)
