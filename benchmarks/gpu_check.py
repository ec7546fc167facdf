"""GPU check, ready to run on a lent GPU machine: a few GRPO steps and generation on CUDA, one table.

    python benchmarks/gpu_check.py                  # after scripts/setup.sh --dev, on a CUDA machine
    python benchmarks/gpu_check.py --json out.json  # also write the rows

What it runs (all on the embedded tiny Qwen2.5-VL, built locally; nothing is downloaded):

1. ``grpo bf16 recipe``: 4 GRPO steps of one process in bfloat16 on cuda:0 with the olmOCR 2
   recipe's loss settings (``config/olmocr2.yaml``: bnpo loss, beta 0.01 with a reference model,
   group-scaled rewards, token-level importance sampling, the recipe's rewards) but transformers
   generation (vLLM is not carried to the GPU machine); then a resume from checkpoint-2 compared
   with the uninterrupted run (max abs weight difference: 0 when deterministic on that GPU).
2. ``generate bf16``: pages/s of the transformers backend on 8 sample pages at 1288 px.
3. ``grpo zero2 x2``: when ``deepspeed`` imports and 2+ GPUs are visible, 2 steps under
   ``accelerate`` with ``workflow/accelerate/zero2.yaml`` on 2 GPUs.

Every row has a status (ok / failed / skipped and why), so a run always ends with the table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

RECIPE_LOSS = ("loss_type", "beta", "scale_rewards", "importance_sampling_level", "epsilon", "num_iterations",
               "use_bias_correction_kl", "temperature", "top_p")


def _grpo(work: Path, model: Path, pages: Path, tests: Path) -> dict:
    import torch
    from safetensors.torch import load_file

    from olmpipe.config import load_config
    from olmpipe.train.run import train_seed

    recipe = load_config(REPO / "config" / "olmocr2.yaml")["train"]["grpo"]
    grpo = {k: recipe[k] for k in RECIPE_LOSS}
    grpo.update({"max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 4,
                 "gradient_accumulation_steps": 2, "max_completion_length": 64, "save_steps": 1,
                 "logging_steps": 1, "save_total_limit": None, "learning_rate": 1e-3, "use_vllm": False})
    cfg = load_config(overrides={"train": {"device": "cuda", "dtype": "bfloat16", "wandb": {"mode": "disabled"},
                                           "grpo": grpo}, "rewards": {"bench": {"processes": 1}}})
    start = time.perf_counter()
    assert train_seed(cfg, seed=0, model_path=model, pages=pages, tests_dir=tests, run_dir=work / "full") == 0
    seconds = time.perf_counter() - start
    (work / "resumed").mkdir()
    shutil.copytree(work / "full" / "checkpoint-2", work / "resumed" / "checkpoint-2")
    assert train_seed(cfg, seed=0, model_path=model, pages=pages, tests_dir=tests, run_dir=work / "resumed") == 0
    a, b = (load_file(str(work / r / "model" / "model.safetensors")) for r in ("full", "resumed"))
    diff = max((a[k].float() - b[k].float()).abs().max().item() for k in a)
    rows = [json.loads(x) for x in (work / "full" / "metrics.jsonl").read_text().splitlines()]
    return {"value": f"{seconds / 4:.2f} s/step", "detail": f"resume max |dw| {diff:.3g}; reward "
            f"{rows[-1].get('reward')}; {torch.cuda.get_device_name(0)}"}


def _generate(work: Path, model: Path) -> dict:
    cmd = [sys.executable, str(REPO / "benchmarks" / "generate.py"), "--model", str(model), "--device", "cuda",
           "--dtype", "bfloat16", "--pages", "8", "--rounds", "2", "--threads", "1", "--json", str(work / "gen.json")]
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    best = max(r["pages_per_s"] for r in json.loads((work / "gen.json").read_text())["best"].values())
    return {"value": f"{best:.2f} pages/s", "detail": "8 pages, 1288 px, transformers backend"}


def _zero2(work: Path, model: Path, pages: Path, tests: Path) -> dict:
    import importlib.util

    import torch

    if importlib.util.find_spec("deepspeed") is None:
        return {"status": "skipped", "detail": "deepspeed is not installed in this image"}
    if torch.cuda.device_count() < 2:
        return {"status": "skipped", "detail": f"{torch.cuda.device_count()} GPU visible, zero2 needs 2"}
    from olmpipe.launch import launch_command

    job = {"train": {"device": "cuda", "dtype": "bfloat16", "wandb": {"mode": "disabled"}, "grpo": {
        "max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 2, "gradient_accumulation_steps": 2,
        "max_completion_length": 32, "save_steps": 2, "logging_steps": 1}}}
    cmd = launch_command("olmpipe.train", ["--seed", "0", "--model", str(model), "--pages", str(pages),
                                           "--tests-dir", str(tests), "--run-dir", str(work / "zero2"),
                                           "--config-json", json.dumps(job)], gpus=2, strategy="zero2")
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, check=False, timeout=900)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-2000:])
    return {"value": f"{(time.perf_counter() - start) / 2:.2f} s/step", "detail": "2 ranks, ZeRO-2, bf16"}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="also write the rows to this JSON file")
    args = parser.parse_args(argv)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("WANDB_MODE", "disabled")
    import torch
    from trainkit import make_page_index

    from olmpipe.tinymodel import build_tiny_model

    rows = []
    if not torch.cuda.is_available():
        rows.append({"check": "cuda", "status": "skipped", "value": "", "detail": "torch sees no CUDA device"})
    else:
        with tempfile.TemporaryDirectory(prefix="olmpipe-gpu-check-") as tmp:
            work = Path(tmp)
            model = build_tiny_model(work / "tiny", seed=0)
            pages, tests = make_page_index(work / "data")
            for name, run in (("grpo bf16 recipe", lambda: _grpo(work / "grpo", model, pages, tests)),
                              ("generate bf16", lambda: _generate(work, model)),
                              ("grpo zero2 x2", lambda: _zero2(work, model, pages, tests))):
                (work / "grpo").mkdir(exist_ok=True)
                try:
                    row = {"status": "ok", "value": "", "detail": "", **run()}
                except Exception as exc:  # noqa: BLE001 -- the table must report every check
                    row = {"status": "failed", "value": "", "detail": f"{type(exc).__name__}: {exc}"[:300]}
                    traceback.print_exc()
                rows.append({"check": name, **row})
    width = max(len(r["check"]) for r in rows)
    sys.stdout.write(f"{'check':<{width}}  {'status':<8}  {'value':<16}  detail\n")
    for r in rows:
        sys.stdout.write(f"{r['check']:<{width}}  {r['status']:<8}  {r['value']:<16}  {r['detail']}\n")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
