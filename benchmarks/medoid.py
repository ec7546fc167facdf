"""Cost of the ``medoid`` reward per page: seconds for a group of k completions, against the pairwise
loop it replaced, with the rewards compared.

The ``medoid`` reward (:class:`olmpipe.rewards.reference.MedoidReward`) needs every pairwise edit
distance of a page's k completions. The loop it replaced summed them with
``total[m] = sum(d for pair, d in dist.items() if m in pair)``: every member scanned all k^2/2 pairs
in Python, O(k^3) (7.5 s per page at k = 400 on short texts, ~1 h at k = 3200). Now one C call per
row computes each distance once and the sums are k^2 additions: O(k^2) distances
(:func:`olmpipe.rewards.reference.medoid_agreement`, what the reward runs per page on the page
texts). The baseline is that loop, measured in the same run on the same texts (copied below as
:func:`pairwise_loop`), and every row checks that both give the same rewards bit for bit.

Completions are seeded mutations of one page text (20 character edits each: a policy's samples of
one page are alike), of ``--chars`` characters: short texts show the bookkeeping the old loop added,
page-length texts (3,000 characters, the default ``rewards.max_chars`` is 10,000) the edit distances
that remain. The difficulty stage's ``train.difficulty.samples`` has a schema maximum (128) from
these figures::

    python benchmarks/medoid.py                                  # k = 28 64 128 256 400, 100 and 3000 chars
    python benchmarks/medoid.py --k 28 128 --chars 3000 10000 --json out.json
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from collections import defaultdict


def pairwise_loop(texts: list[str]) -> list[float]:
    """The medoid rewards as the reward computed them before (olmpipe/rewards/reference.py at c955618)."""
    from rapidfuzz.distance import Levenshtein

    members = list(range(len(texts)))
    if len(members) == 1:
        return [1.0]
    dist = {
        (a, b): Levenshtein.normalized_distance(texts[a], texts[b])
        for i, a in enumerate(members)
        for b in members[i + 1:]
    }
    total = {m: sum(d for pair, d in dist.items() if m in pair) for m in members}
    medoid = min(members, key=lambda m: (total[m], m))
    return [1.0 if m == medoid else 1.0 - dist[(min(m, medoid), max(m, medoid))] for m in members]


def group(k: int, chars: int, seed: int) -> list[str]:
    """k seeded mutations (20 character edits each) of one random text of ``chars`` characters."""
    rng = random.Random(seed)
    words = ["".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 9))) for _ in range(400)]
    base = " ".join(rng.choice(words) for _ in range(chars))[:chars]
    out = []
    for _ in range(k):
        text = list(base)
        for _ in range(20):
            text[rng.randrange(len(text))] = rng.choice("xyz .")
        out.append("".join(text))
    return out


def timed(fn, *args) -> tuple[float, object]:
    """(seconds, result) of ``fn(*args)``: the fastest of 5 runs when one takes under a second."""
    best, result = float("inf"), None
    for _ in range(5):
        start = time.perf_counter()
        result = fn(*args)
        best = min(best, time.perf_counter() - start)
        if best >= 1.0:
            break
    return best, result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", type=int, nargs="+", default=[28, 64, 128, 256, 400], help="completions per page")
    parser.add_argument("--chars", type=int, nargs="+", default=[100, 3000], help="characters per completion")
    parser.add_argument("--baseline-budget", type=float, default=60.0,
                        help="skip the old loop where its estimate (k^3 from the previous row) exceeds this many s")
    parser.add_argument("--json", default=None, help="also write the rows here")
    args = parser.parse_args(argv)

    from olmpipe.rewards.reference import medoid_agreement

    medoid_agreement(["warm", "up"])  # imports (numpy, rapidfuzz) outside the timings
    rows = []
    last_old: dict[int, tuple[int, float]] = defaultdict(lambda: (0, 0.0))
    for chars in args.chars:
        for k in sorted(args.k):
            texts = group(k, chars, seed=k * 7919 + chars)
            new_s, new = timed(medoid_agreement, texts)
            prev_k, prev_s = last_old[chars]
            estimate = prev_s * (k / prev_k) ** 3 if prev_k else 0.0
            old_s = old = None
            if estimate <= args.baseline_budget:
                old_s, old = timed(pairwise_loop, texts)
                last_old[chars] = (k, old_s)
            rows.append({"chars": chars, "k": k, "distances": k * (k - 1) // 2, "new_s": round(new_s, 4),
                         "old_s": round(old_s, 4) if old_s is not None else None,
                         "speedup": round(old_s / new_s, 1) if old_s is not None and new_s > 0 else None,
                         "equal": (old == new) if old is not None else None})
            print(rows[-1], file=sys.stderr, flush=True)
    print(f"{'chars':>6} {'k':>5} {'distances':>10} {'new s':>9} {'old s':>9} {'speed-up':>9} {'same rewards':>13}")
    for r in rows:
        old = f"{r['old_s']:.3f}" if r["old_s"] is not None else "skipped"
        speed = f"{r['speedup']:.1f}x" if r["speedup"] is not None else "-"
        same = {True: "yes", False: "NO", None: "-"}[r["equal"]]
        print(f"{r['chars']:>6} {r['k']:>5} {r['distances']:>10} {r['new_s']:>9.3f} {old:>9} {speed:>9} {same:>13}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=2)
    return 1 if any(r["equal"] is False for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
