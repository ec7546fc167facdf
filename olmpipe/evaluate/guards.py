"""Reward-hacking guards: signs that a higher unit-test score was bought with worse output.

Unit-test rewards can be gamed. An empty page passes every ``absent`` test; a model that stops
early or never stops changes output length wholesale; a model that drops the YAML front matter
breaks the olmOCR output format while the page tests may still pass. These checks compare the
raw generations and per-test outcomes of the baseline and the trained run and are reported
beside the scores:

- output length per page (mean characters over repeats), its ratio trained / baseline, and the
  pages whose ratio lies outside ``[1 / length_ratio_limit, length_ratio_limit]``;
- the tests gained and lost per type, and the share of gains that are ``absent`` tests;
- pages (and repeats) whose output became empty, or lost its front matter;
- the EOS rate (share of generations that ended on the end-of-sequence token rather than the
  length limit) and the count of failed generations.
"""

from __future__ import annotations

import statistics
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# finish_reason values meaning the model emitted its end-of-sequence token
EOS_REASONS = frozenset({"stop", "eos"})


@dataclass(frozen=True)
class GuardSettings:
    """Thresholds above which a guard adds a warning (config ``evaluate.guards``)."""

    length_ratio_limit: float = 2.0
    absent_gain_share_warn: float = 0.5
    eos_drop_warn: float = 0.1


@dataclass(frozen=True)
class Generation:
    """The part of a ``generations.jsonl`` line the guards need."""

    pdf: str
    page: int
    repeat: int
    text: str
    has_front_matter: bool
    finish_reason: str
    failed: bool

    @property
    def eos(self) -> bool:
        return self.finish_reason in EOS_REASONS


def _index(gens: Iterable[Generation], which: str) -> dict[tuple[str, int, int], Generation]:
    out: dict[tuple[str, int, int], Generation] = {}
    for g in gens:
        key = (g.pdf, g.page, g.repeat)
        if key in out:
            raise ValueError(
                f"{which} generations: duplicate line for {g.pdf} page {g.page} repeat {g.repeat}"
            )
        out[key] = g
    return out


def _rate(gens: Sequence[Generation]) -> float | None:
    return sum(g.eos for g in gens) / len(gens) if gens else None


def check_guards(
    tests: Sequence[Mapping[str, Any]],
    baseline: Sequence[Generation],
    trained: Sequence[Generation],
    settings: GuardSettings,
    *,
    trained_on: Mapping[str, Iterable[tuple[str, int]]] | None = None,
) -> dict[str, Any]:
    """Run every guard. ``tests`` are the per-test records of the comparison (with ``change``);
    ``trained_on``: per run (``baseline``, ``trained``) the eval pages its model was trained on and
    that were scored anyway (``eval_run.on_trained_pages: flag``).

    Returns a JSON-ready dict: ``pages`` (one record per page), ``length``, ``gains``,
    ``became_empty``, ``lost_front_matter``, ``eos`` and ``warnings`` (human-readable strings); with
    trained-on pages also ``trained_pages`` ({run: [{pdf, page}]}), ``trained_on`` (the runs) on each
    such page and a warning.
    Raises ValueError when the two runs did not generate the same pages and repeats.
    """
    b_idx, t_idx = _index(baseline, "baseline"), _index(trained, "trained")
    if set(b_idx) != set(t_idx):
        only_b = sorted(set(b_idx) - set(t_idx))[:3]
        only_t = sorted(set(t_idx) - set(b_idx))[:3]
        raise ValueError(
            "the runs generated different pages/repeats (generate the trained model with the "
            f"baseline's settings): only baseline {only_b}, only trained {only_t}"
        )

    per_page_tests: dict[tuple[str, int], list[Mapping[str, Any]]] = defaultdict(list)
    for t in tests:
        per_page_tests[(t["pdf"], int(t["page"]))].append(t)
    per_page_gens: dict[tuple[str, int], list[tuple[Generation, Generation]]] = defaultdict(list)
    for key in sorted(b_idx):
        per_page_gens[key[:2]].append((b_idx[key], t_idx[key]))

    pages, empty, lost_fm = [], [], []
    limit = settings.length_ratio_limit
    for pdf, page in sorted(set(per_page_tests) | set(per_page_gens)):
        ptests, pairs = per_page_tests.get((pdf, page), []), per_page_gens.get((pdf, page), [])
        b_chars = statistics.fmean(len(b.text) for b, _ in pairs) if pairs else 0.0
        t_chars = statistics.fmean(len(t.text) for _, t in pairs) if pairs else 0.0
        ratio = t_chars / b_chars if b_chars else None
        empty_rep = [b.repeat for b, t in pairs if b.text.strip() and not t.text.strip()]
        lost_rep = [b.repeat for b, t in pairs if b.has_front_matter and not t.has_front_matter]
        n = len(ptests)
        record = {
            "pdf": pdf, "page": page, "tests": n,
            "baseline_passed": sum(bool(t["baseline_passed"]) for t in ptests),
            "trained_passed": sum(bool(t["trained_passed"]) for t in ptests),
            "baseline_chars": b_chars, "trained_chars": t_chars, "length_ratio": ratio,
            "length_outside_limit": ratio is not None and not (1 / limit <= ratio <= limit),
            "became_empty_repeats": empty_rep, "lost_front_matter_repeats": lost_rep,
        }  # fmt: skip
        record["change"] = (record["trained_passed"] - record["baseline_passed"]) / n if n else 0.0
        pages.append(record)
        if empty_rep:
            empty.append({"pdf": pdf, "page": page, "repeats": empty_rep})
        if lost_rep:
            lost_fm.append({"pdf": pdf, "page": page, "repeats": lost_rep})

    gained = Counter(t["type"] for t in tests if t["change"] > 0)
    lost = Counter(t["type"] for t in tests if t["change"] < 0)
    n_gained = sum(gained.values())
    absent_share = gained["absent"] / n_gained if n_gained else None
    ratios = [p["length_ratio"] for p in pages if p["length_ratio"] is not None]
    outside = [p for p in pages if p["length_outside_limit"]]
    b_eos, t_eos = _rate(baseline), _rate(trained)

    warnings = []
    if absent_share is not None and absent_share >= settings.absent_gain_share_warn:
        warnings.append(
            f"{gained['absent']} of {n_gained} gained tests are `absent` tests "
            f"({100 * absent_share:.0f}% >= {100 * settings.absent_gain_share_warn:.0f}%): "
            "gains may come from writing less"
        )
    if empty:
        warnings.append(f"output became empty on {len(empty)} page(s) that had text before")
    if lost_fm:
        warnings.append(f"front matter lost on {len(lost_fm)} page(s)")
    if outside:
        warnings.append(
            f"output length changed by more than {limit:g}x on {len(outside)} of {len(pages)} page(s)"
        )
    if b_eos is not None and t_eos is not None and b_eos - t_eos > settings.eos_drop_warn:
        warnings.append(f"EOS rate fell from {100 * b_eos:.0f}% to {100 * t_eos:.0f}%")
    flagged = {run: sorted(set(pages_of)) for run, pages_of in (trained_on or {}).items() if pages_of}
    for record in pages:
        runs = [run for run, seen in flagged.items() if (record["pdf"], record["page"]) in set(seen)]
        if runs:
            record["trained_on"] = runs
    for run, seen in flagged.items():
        warnings.append(f"{len(seen)} eval page(s) are pages the {run} model was trained on "
                        "(eval_run.on_trained_pages: flag): their scores measure memory, not reading")

    report = {
        "pages": pages,
        "length": {
            "baseline_mean_chars": statistics.fmean(len(g.text) for g in baseline) if baseline else 0.0,
            "trained_mean_chars": statistics.fmean(len(g.text) for g in trained) if trained else 0.0,
            "median_page_ratio": statistics.median(ratios) if ratios else None,
            "pages_outside_limit": [
                {"pdf": p["pdf"], "page": p["page"], "ratio": p["length_ratio"]} for p in outside
            ],
        },
        "gains": {
            "gained": n_gained,
            "lost": sum(lost.values()),
            "gained_by_type": dict(sorted(gained.items())),
            "lost_by_type": dict(sorted(lost.items())),
            "absent_share_of_gains": absent_share,
        },
        "became_empty": empty,
        "lost_front_matter": lost_fm,
        "eos": {
            "baseline_rate": b_eos,
            "trained_rate": t_eos,
            "baseline_failed": sum(g.failed for g in baseline),
            "trained_failed": sum(g.failed for g in trained),
            "generations": len(baseline),
        },
        "warnings": warnings,
    }
    if flagged:
        report["trained_pages"] = {run: [{"pdf": pdf, "page": page} for pdf, page in seen]
                                   for run, seen in flagged.items()}
    return report
