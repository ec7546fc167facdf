"""What the difficulty filter saves: zero-spread GRPO groups with and without it, rollouts, break-even.

On a bench with a known mix of easy (every test passes), hard (every test fails) and informative
pages (each of a page's two sentences is written with probability ``--p``), answered by a scripted
OCR model (``tests/support/difficultybench.py``; what is measured is the pipeline, not a model):

1. the difficulty stage runs for real (:func:`olmpipe.difficulty.run_difficulty`: the generation
   engine with its journal, ``k`` samples per page at the trainer's sampling, the configured rewards
   bench + front matter + EOS scored by the unit-test engine) and its filter;
2. training is replayed for ``--epochs`` epochs on the full and on the filtered page index: every
   epoch each page gets a GRPO group of ``--num-generations`` completions with fresh seeds, scored
   by the same stage code, so a group's spread is the one the trainer's advantages would see.

Prints one table: pages, rollouts, zero-spread groups (exact: all totals equal; and as TRL's
``frac_reward_zero_std`` counts them), informative groups per 1,000 rollouts, rollouts saved, the
stage's cost in generations and its wall time; then the break-even epochs of the cost model in
docs/difficulty.md for the measured share of dropped pages::

    python benchmarks/difficulty.py                              # 60 pages (24 easy, 12 hard, 24 informative), G = k = 8, 2 epochs
    python benchmarks/difficulty.py --mix 200 100 100 --num-generations 28 --samples 8 --epochs 1 --json out.json
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "tests"))

from olmpipe.config import load_config


def replay_training(cfg, model, pages, tests, out: Path, kinds, p: float, epochs: int) -> dict:
    """GRPO groups of ``epochs`` epochs over the train pages of ``pages``, each scored like training.

    Each epoch is one run of the stage with ``samples = num_generations`` and its own seed (a fresh
    group per page); returns the counts over all epochs.
    """
    from support.difficultybench import ScriptedOCR

    from olmpipe.difficulty import run_difficulty
    from olmpipe.records.difficulty import read_stats

    groups = zero = trl_zero = 0
    for epoch in range(epochs):
        run_cfg = json.loads(json.dumps(cfg))
        run_cfg["train"]["difficulty"].update(samples=None, seed=1000 + epoch)
        folder = out / f"epoch{epoch}"
        run_difficulty(run_cfg, model, pages, tests, folder, backend=ScriptedOCR(kinds, p), progress=False)
        for page in read_stats(folder / "stats.jsonl"):
            groups += 1
            zero += page.zero_spread
            trl_zero += page.spread is not None and abs(page.spread) <= 1e-8  # torch.isclose(std, 0)
    return {"groups": groups, "zero_spread": zero, "trl_zero_std": trl_zero}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mix", type=int, nargs=3, default=[24, 12, 24], metavar=("EASY", "HARD", "INFORMATIVE"))
    parser.add_argument("--p", type=float, default=0.5, help="pass probability of each sentence on informative pages")
    parser.add_argument("--num-generations", type=int, default=8, help="GRPO group size G (olmOCR 2: 28)")
    parser.add_argument("--samples", type=int, default=None, help="k samples per page (default: G)")
    parser.add_argument("--epochs", type=int, default=2, help="training epochs replayed")
    parser.add_argument("--json", type=Path, help="also write the figures as JSON")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING)

    from support.difficultybench import ScriptedOCR, make_mixed_bench

    from olmpipe.difficulty import FilterSettings, filter_page_index, run_difficulty
    from olmpipe.models.tiny import build_tiny_model

    k = args.samples or args.num_generations
    g = args.num_generations
    with tempfile.TemporaryDirectory(prefix="olmpipe-difficulty-bench-") as tmp:
        root = Path(tmp)
        model = build_tiny_model(root / "model", seed=0)  # its tokenizer rebuilds the EOS reward's ids
        easy, hard, informative = args.mix
        pages, tests, kinds = make_mixed_bench(root / "bench", {"easy": easy, "hard": hard,
                                                                "informative": informative})
        cfg = load_config(overrides={
            "train": {"grpo": {"num_generations": g, "max_completion_length": 64},
                      "difficulty": {"samples": k}},
            "generation": {"batch_size": 64},
            "rewards": {"bench": {"processes": 1}},
        })
        backend = ScriptedOCR(kinds, args.p)
        t0 = time.perf_counter()
        run_difficulty(cfg, model, pages, tests, root / "difficulty", backend=backend, progress=False)
        stage_s = time.perf_counter() - t0
        d = root / "difficulty"
        summary = filter_page_index(d / "stats.jsonl", pages, d / "train_pages.jsonl", d / "dropped.jsonl",
                                    d / "filter.json", FilterSettings(), num_generations=g)
        dropped = [json.loads(line) for line in (d / "dropped.jsonl").read_text().splitlines()]
        false_drops = sum(kinds[x["pdf"]] == "informative" for x in dropped)
        without = replay_training(cfg, model, pages, tests, root / "full", kinds, args.p, args.epochs)
        with_ = replay_training(cfg, model, d / "train_pages.jsonl", tests, root / "kept", kinds, args.p, args.epochs)

    n = sum(args.mix)
    stage_rollouts = n * k
    rows = []
    for name, counts in (("without filter", without), ("with filter", with_)):
        rollouts = counts["groups"] * g
        informative_groups = counts["groups"] - counts["zero_spread"]
        rows.append({
            "run": name, "pages": counts["groups"] // args.epochs, "rollouts": rollouts,
            "zero_spread_share": counts["zero_spread"] / counts["groups"],
            "trl_zero_std_share": counts["trl_zero_std"] / counts["groups"],
            "informative_per_1000": 1000 * informative_groups / rollouts,
        })
    saved = rows[0]["rollouts"] - rows[1]["rollouts"]
    d_share = summary["dropped"] / n
    print(f"bench: {easy} easy, {hard} hard, {informative} informative pages (p = {args.p}); G = {g}, k = {k}, "
          f"{args.epochs} epoch(s); rewards bench + front_matter + eos")
    print(f"difficulty stage: {stage_rollouts} generations, {stage_s:.1f} s wall ({1000 * stage_s / stage_rollouts:.1f} "
          f"ms per completion: engine + scoring, the scripted model is free); dropped {summary['dropped']} pages "
          f"({summary['dropped_all_pass']} all pass, {summary['dropped_all_fail']} all fail, "
          f"{false_drops} informative pages whose k samples happened to agree)\n")
    print("| run | train pages | rollouts | zero-spread groups | as TRL counts them | informative groups per 1,000 rollouts |")
    print("|---|---:|---:|---:|---:|---:|")
    for r in rows:
        print(f"| {r['run']} | {r['pages']} | {r['rollouts']} | {100 * r['zero_spread_share']:.1f}% | "
              f"{100 * r['trl_zero_std_share']:.1f}% | {r['informative_per_1000']:.1f} |")
    print(f"\nrollouts saved: {saved} of {rows[0]['rollouts']} ({100 * saved / rows[0]['rollouts']:.1f}%); the stage "
          f"cost {stage_rollouts} generations (k x pages = {k / g:.2f} generation pass); net {saved - stage_rollouts:+d} "
          f"rollouts before counting that a training rollout also costs a backward pass")
    print("\nbreak-even epochs E* = (k/G)(c_d/c_g) / (d (1 + t/g)), d = share of pages dropped "
          f"= {d_share:.2f}, c_d/c_g = 1 (the stage generates as fast as training):")
    print("| t/g (training cost beyond generation, per rollout) | E* (k = G) | E* (k = G/4) |")
    print("|---:|---:|---:|")
    breakeven = []
    for tg in (0.0, 0.5, 1.0, 2.0):
        e_full = 1 / (d_share * (1 + tg)) if d_share else float("inf")
        e_quarter = 0.25 * e_full
        breakeven.append({"t_over_g": tg, "epochs_k_eq_G": e_full, "epochs_k_quarter_G": e_quarter})
        print(f"| {tg:.1f} | {e_full:.2f} | {e_quarter:.2f} |")
    if args.json:
        args.json.write_text(json.dumps({"args": {**vars(args), "json": str(args.json)}, "filter": summary,
                                         "false_drops": false_drops, "stage_seconds": stage_s, "rows": rows,
                                         "rollouts_saved": saved, "stage_rollouts": stage_rollouts,
                                         "breakeven": breakeven}, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
