"""benchmarks/gpu_check.py cannot rot: its CPU mode runs every check it can here (tiny shapes, the
precision and checkpointing steps, the memory probes against the plan, the float32 autocast step
with and without DDP's bucket views, the LoRA step and merge round trip; ZeRO-2 and the ZeRO-3 load
where DeepSpeed is installed), and everything its checks import is either on the GPU image or in its
wheelhouse.

The GPU table itself needs a GPU (none is lent to the sessions so far: README, benchmarks).
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.deepspeed import needs_deepspeed

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "benchmarks" / "gpu_check.py"
_spec = importlib.util.spec_from_file_location("gpu_check", SCRIPT)
gpu_check = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gpu_check)


def run(tmp_path: Path, *args: str, timeout: int = 900) -> tuple[subprocess.CompletedProcess, dict]:
    out = tmp_path / "gpu_check.json"
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, str(SCRIPT), "--json", str(out), *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)
    return proc, json.loads(out.read_text()) if out.exists() else {}


@pytest.mark.slow
def test_cpu_mode_passes_and_imports_only_what_the_gpu_machine_gets(tmp_path: Path) -> None:
    proc, table = run(tmp_path, "--cpu", "--only", "autocast,lora,precision,memory,qlora")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r for r in table["rows"]}
    assert list(rows) == ["environment", "memory 3B fp32 autocast step", "lora 7B step + merge round trip",
                          "precision bf16", "activation checkpointing", "memory 7B (checkpointed)", "qlora tiny step"]
    assert rows.pop("qlora tiny step")["status"] == "skipped"  # bitsandbytes trains on GPUs only
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert "precision bf16" in proc.stdout and "s in all" in proc.stdout  # the printed table
    # bf16 mixed precision keeps the step; bf16 weights (the control) lose most of it
    mixed, control = rows["precision bf16"]["data"]["mixed"], rows["precision bf16"]["data"]["pure_bf16"]
    assert mixed["tensor_share"] >= gpu_check.TENSOR_SHARE and control["tensor_share"] < 0.5
    # the probes' plans have every term the GPU run compares (issue 31, items 12 and 20)
    terms = rows["memory 7B (checkpointed)"]["data"]["terms"]
    assert {"weights", "gradients", "reference model", "activations", "vision activations", "logits"} <= set(terms)
    autocast = rows["memory 3B fp32 autocast step"]["data"]
    assert {"autocast weight copies", "optimizer states"} <= set(autocast["terms"])
    assert set(autocast["peaks_gib"]) == {"first step", "without views", "with views"}
    lora = rows["lora 7B step + merge round trip"]["data"]
    assert lora["moved"] == lora["lora_b"] > 0 and lora["identical"] and lora["merge_ok"]
    assert lora["control_drifted"] > 0  # TRL's in-place merge/unmerge rounds the bf16 base; ours does not
    unknown = [d for d in table["imports"] if d not in gpu_check.DEVICE_HAS and d not in gpu_check.WHEELHOUSE
               and d not in gpu_check.OPTIONAL and not d.startswith(gpu_check.OPTIONAL_PREFIXES)]
    assert not unknown, f"the check imports {unknown}: add them to WHEELHOUSE (or DEVICE_HAS, if the image has them)"


@pytest.mark.slow
@needs_deepspeed
def test_cpu_mode_zero2_resume_is_bitwise_and_zero3_loads_partitioned(tmp_path: Path) -> None:
    proc, table = run(tmp_path, "--cpu", "--only", "load,zero2", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r for r in table["rows"]}
    row = rows["zero2 resume"]
    assert row["status"] == "ok" and row["data"]["equal"] and row["data"]["ranks"] == 2, row
    load = rows["load peak 7B zero3 (1 rank)"]
    assert load["status"] == "ok" and load["data"]["partitioned"] and load["data"]["dtypes"] == ["torch.bfloat16"]


def test_the_checks_fit_the_budget_in_order_of_value() -> None:
    """Issue 31, item 20: the estimated seconds of every check (and the environment row) fit the
    9-minute budget; each check may take at most what is left of it (main()); the GPU-only items the
    one GPU cannot settle have a row of their own."""
    assert sum(estimate for _, _, estimate, _, _ in gpu_check.CHECKS) + 10 <= gpu_check.BUDGET_S == 540
    names = [name for name, *_ in gpu_check.CHECKS]
    assert names[:3] == ["load", "autocast", "lora"] and {"qlora", "precision", "memory", "zero2"} <= set(names)
    assert "13-15" in gpu_check.MULTI_GPU_ROW["check"] and gpu_check.MULTI_GPU_ROW["status"] == "skipped"
    assert gpu_check.WHEELHOUSE["bitsandbytes"] == "binary"


def test_without_a_gpu_the_table_says_not_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    proc, table = run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = table["rows"]
    assert rows[0]["check"] == "environment" and rows[0]["status"] == "ok"
    assert rows[-1] == gpu_check.MULTI_GPU_ROW
    assert [r["check"] for r in rows[1:-1]] == [c for _, labels, *_ in gpu_check.CHECKS for c in labels]
    assert all(r["status"] == "skipped" and r["detail"] == "not run: no GPU" for r in rows[1:-1]), rows


def test_the_wheelhouse_is_small_files_for_the_gpu_machine() -> None:
    """Every carried distribution is one this environment runs (or DeepSpeed, the GPU set's), and
    none is one the GPU image already has."""
    from importlib.metadata import PackageNotFoundError, version

    from olmpipe.job.packages import SUPPORTED

    # hjson: a requirement of DeepSpeed (0.16-0.19) only, so absent where DeepSpeed is
    for dist in gpu_check.WHEELHOUSE:
        try:
            version(dist)
        except PackageNotFoundError:
            assert dist in SUPPORTED or dist == "hjson", dist
    assert not set(gpu_check.WHEELHOUSE) & gpu_check.DEVICE_HAS
    assert set(gpu_check.WHEELHOUSE.values()) <= {"pure", "binary", "sdist"}
