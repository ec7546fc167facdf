"""Reward cost of a GRPO step: seconds per step of the configured rewards, and their share of a step.

One olmOCR 2 step scores 8 pages x 28 completions. This benchmark

1. scores such a step with the embedded default's rewards (``bench`` + ``front_matter`` + ``eos``,
   built by :func:`olmpipe.rewards.build_rewards` exactly as training builds them) on realistic
   completions: the parity-dev variants of the bundled sample's pages (olmocr outputs and their
   mutations, ``../shared/bench/parity-dev``), cycled to 28 per page, or the sample's olmocr outputs
   with seeded line drops when parity-dev is absent. It runs with ``rewards.bench.processes`` = 0
   (in the training process, the baseline of the table), 1 and 2, warm (the second of two calls);
2. times GRPO steps of the same geometry (8 pages x 28 completions) on the embedded tiny model with a
   constant reward, through olmpipe.train's own trainer setup (``train_seed``), and reports the
   rewards' share of a step: reward / (step without reward + reward).

    python benchmarks/reward.py                     # 8 pages x 28, 2 tiny steps, processes 0 1 2
    python benchmarks/reward.py --pages 4 --generations 8 --steps 2 --processes 0 2 --json out.json

Pages with math tests need the KaTeX checker (headless Chromium); without it they fail fast with
"math checker unavailable", which makes the step look cheaper: the table says how many math tests
there were.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import random
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data" / "bench" / "olmocr-sample"
PARITY = REPO.parent / "shared" / "bench" / "parity-dev"


def test_helper(name: str):
    """The test helper module ``tests/<name>.py``, loaded by its path.

    olmpipe is imported as installed (``pip install -e .``); ``tests/`` is not put on ``sys.path``,
    where its modules could shadow the package's. Only the page-index fixture is borrowed from it.
    """
    spec = importlib.util.spec_from_file_location(f"_olmpipe_tests_{name}", REPO / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def sample_pages() -> dict[tuple[str, int], list[dict]]:
    """The sample's tests by (pdf, page), from its first test file per page (as olmOCR's GRPO dataset)."""
    pages: dict[tuple[str, int], list[dict]] = defaultdict(list)
    for name in ("blanks.jsonl", "dataset.jsonl"):
        for line in (SAMPLE / name).read_text(encoding="utf-8").splitlines():
            if line.strip():
                record = json.loads(line)
                key = (record["pdf"], record["page"])
                if key not in pages or pages[key][0]["_file"] == name:
                    pages[key].append({**record, "_file": name})
    return pages


def completions_for(pdf: str, page: int, n: int, rng: random.Random) -> list[str]:
    """``n`` realistic completions of one page (parity variants, else mutated olmocr outputs)."""
    texts = []
    if PARITY.is_dir():
        for line in (PARITY / "variants.jsonl").read_text(encoding="utf-8").splitlines():
            row = json.loads(line)
            if row["pdf"] == pdf and row["page"] == page:
                texts.append((PARITY / row["variant_file"]).read_text(encoding="utf-8"))
    if not texts:
        source = SAMPLE / "olmocr_pipeline" / f"{pdf[:-4]}_pg{page}_repeat1.md"
        base = source.read_text(encoding="utf-8").splitlines() if source.exists() else ["empty"]
        texts = ["\n".join(x for x in base if rng.random() > 0.2) for _ in range(n)]
    return [texts[i % len(texts)] for i in range(n)]


def reward_step(keys, pages, generations: int, processes: int, rng: random.Random, rounds: int) -> dict:
    from olmpipe.config import load_config
    from olmpipe.models.tiny import TinySpec, build_tokenizer
    from olmpipe.rewards import build_rewards

    cfg = load_config(overrides={"rewards": {"bench": {"processes": processes}}})
    tokenizer = build_tokenizer(TinySpec())
    rewards = build_rewards(cfg["rewards"], tokenizer=tokenizer)
    completions, kwargs = [], defaultdict(list)
    for pdf, page in keys:
        tests = pages[(pdf, page)]
        for text in completions_for(pdf, page, generations, rng):
            completions.append([{"role": "assistant", "content": text}])
            kwargs["test_ids"].append([t["id"] for t in tests])
            kwargs["test_files"].append([str(SAMPLE / t["_file"]) for t in tests])
            kwargs["pdf"].append(pdf)
            kwargs["page"].append(page)
            kwargs["completion_ids"].append(tokenizer(text[:2000])["input_ids"] + [tokenizer.eos_token_id])
    ids = kwargs.pop("completion_ids")
    times = []
    metrics: dict[str, float] = {}
    try:
        for _ in range(1 + rounds):  # the first call starts the workers (and their browsers)
            start = time.perf_counter()
            for func in rewards.funcs:
                func(prompts=[None] * len(completions), completions=completions, completion_ids=ids,
                     log_metric=metrics.__setitem__, **kwargs)
            times.append(time.perf_counter() - start)
    finally:
        rewards.close()
    math_tests = sum(t["type"] == "math" for k in keys for t in pages[k]) * generations
    return {"processes": processes, "completions": len(completions), "cold_s": times[0], "warm_s": min(times[1:]),
            "timeouts": metrics.get("bench/timeouts", 0.0), "math_tests": math_tests}


class ConstantReward:
    __name__ = "constant_reward"

    def __call__(self, completions=None, **kwargs):
        return [0.0] * len(completions)


def tiny_step(n_pages: int, generations: int, steps: int, max_len: int) -> float:
    """Seconds per GRPO step of the tiny model with a free reward (median of the steps after the first)."""
    import torch
    make_page_index = test_helper("trainkit").make_page_index

    from olmpipe.config import load_config
    from olmpipe.models.tiny import build_tiny_model
    from olmpipe.records.metrics import read_metrics
    from olmpipe.train.run import train_seed

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "model")
        index, tests = make_page_index(root / "data", n_train=n_pages, n_eval=0, extra_empty=False)
        grpo = {"max_steps": steps + 1, "num_generations": generations, "per_device_train_batch_size": generations,
                "gradient_accumulation_steps": n_pages, "max_completion_length": max_len, "save_steps": 10_000,
                "logging_steps": 1}
        cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": grpo}})
        train_seed(cfg, seed=0, model_path=model, pages=index, tests_dir=tests, run_dir=root / "run",
                   reward_funcs=[ConstantReward()])
        times = sorted(r["step_time"] for r in read_metrics(root / "run" / "metrics.jsonl")[1:])
        return times[len(times) // 2]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--pages", type=int, default=8)
    parser.add_argument("--generations", type=int, default=28)
    parser.add_argument("--processes", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=2, help="tiny-model steps timed (after one warm-up step)")
    parser.add_argument("--max-completion-length", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3, help="warm reward calls per setting (best kept)")
    parser.add_argument("--tiny-step-s", type=float, default=None,
                        help="use this tiny-model step time instead of measuring it")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import logging

    logging.basicConfig(level=logging.WARNING)
    pages = sample_pages()
    rng = random.Random(0)
    keys = sorted(pages)
    rng.shuffle(keys)
    keys = keys[: args.pages]
    rows = [reward_step(keys, pages, args.generations, p, rng, args.rounds) for p in args.processes]
    step = args.tiny_step_s or tiny_step(args.pages, args.generations, args.steps, args.max_completion_length)
    base = rows[0]["warm_s"]
    print(f"GRPO step: {args.pages} pages x {args.generations} completions; tiny-model step without reward "
          f"{step:.2f} s (max_completion_length {args.max_completion_length}, 1 thread)")
    print(f"{'processes':>9} {'cold s':>8} {'warm s':>8} {'ms/compl':>9} {'vs first':>9} {'share':>7} "
          f"{'timeouts':>8} {'math tests':>10}")
    for row in rows:
        row["share"] = row["warm_s"] / (step + row["warm_s"])
        print(f"{row['processes']:>9} {row['cold_s']:>8.2f} {row['warm_s']:>8.2f} "
              f"{1000 * row['warm_s'] / row['completions']:>9.2f} {base / row['warm_s']:>8.2f}x "
              f"{100 * row['share']:>6.1f}% {row['timeouts']:>8.0f} {row['math_tests']:>10}")
    if args.json:
        Path(args.json).write_text(json.dumps({"tiny_step_s": step, "rows": rows}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
