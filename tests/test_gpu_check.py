"""benchmarks/gpu_check.py cannot rot: its CPU mode runs every check it can here (tiny shapes, the
precision and checkpointing steps, the memory probe against the plan; ZeRO-2 where DeepSpeed is
installed), and everything its checks import is either on the GPU image or in its wheelhouse.

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
    proc, table = run(tmp_path, "--cpu", "--only", "precision,memory")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = {r["check"]: r for r in table["rows"]}
    assert list(rows) == ["environment", "precision bf16", "activation checkpointing", "memory 7B (checkpointed)",
                          "memory 7B (not checkpointed)"]
    assert all(r["status"] == "ok" for r in rows.values()), rows
    assert "precision bf16" in proc.stdout and "s in all" in proc.stdout  # the printed table
    # bf16 mixed precision keeps the step; bf16 weights (the control) lose most of it
    mixed, control = rows["precision bf16"]["data"]["mixed"], rows["precision bf16"]["data"]["pure_bf16"]
    assert mixed["tensor_share"] >= gpu_check.TENSOR_SHARE and control["tensor_share"] < 0.5
    # the probe's plan has every term the GPU run compares
    terms = rows["memory 7B (checkpointed)"]["data"]["terms"]
    assert {"weights", "gradients", "reference model", "activations", "vision activations", "logits"} <= set(terms)
    assert terms["activations"] < rows["memory 7B (not checkpointed)"]["data"]["terms"]["activations"]
    unknown = [d for d in table["imports"] if d not in gpu_check.DEVICE_HAS and d not in gpu_check.WHEELHOUSE
               and d not in gpu_check.OPTIONAL and not d.startswith(gpu_check.OPTIONAL_PREFIXES)]
    assert not unknown, f"the check imports {unknown}: add them to WHEELHOUSE (or DEVICE_HAS, if the image has them)"


@pytest.mark.slow
@needs_deepspeed
def test_cpu_mode_zero2_resume_is_bitwise(tmp_path: Path) -> None:
    proc, table = run(tmp_path, "--cpu", "--only", "zero2", timeout=1200)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    (row,) = [r for r in table["rows"] if r["check"] == "zero2 resume"]
    assert row["status"] == "ok" and row["data"]["equal"] and row["data"]["ranks"] == 2, row


def test_without_a_gpu_the_table_says_not_run(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    proc, table = run(tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = table["rows"]
    assert rows[0]["check"] == "environment" and rows[0]["status"] == "ok"
    assert {r["check"] for r in rows[1:]} == {c for _, labels, _, _ in gpu_check.CHECKS for c in labels}
    assert all(r["status"] == "skipped" and r["detail"] == "not run: no GPU" for r in rows[1:]), rows


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
