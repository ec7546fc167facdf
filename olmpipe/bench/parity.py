"""Parity of this engine with the reference verdicts of a ``parity-dev``-style folder.

A parity folder (see ``shared/bench/parity-dev/README.md``) holds completions (``variants/*.md``),
the reference verdict of each (completion, test) pair (``results.jsonl``), each completion's GRPO
micro/macro reward (``variants.jsonl``) and the automatic baseline tests
(``baseline_auto.jsonl``); the tests themselves are in the bench folder beside it
(``../olmocr-sample``). :func:`check_parity` reruns every pair and reports each disagreement::

    olmpipe bench parity ../shared/bench/parity-dev            # or: python scripts/parity.py
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from olmpipe.bench.folders import bench_test_files
from olmpipe.bench.model import Test, load_tests
from olmpipe.bench.run import Verdict, micro_macro, run_tests

log = logging.getLogger(__name__)


@dataclass
class Disagreement:
    """One pair where this engine's verdict differs from the reference."""

    variant_file: str
    test_id: str
    jsonl_file: str
    type: str
    expected: bool
    reason: str

    def __str__(self) -> str:
        want = "pass" if self.expected else "fail"
        return (f"{self.type:8s} {self.test_id} on {self.variant_file} ({self.jsonl_file}): "
                f"reference {want}, ours {'fail' if self.expected else 'pass'}: {self.reason or '-'}")


@dataclass
class ParityReport:
    """Agreement counts per type, the disagreements, and completions whose rewards differ."""

    by_type: dict[str, list[int]] = field(default_factory=dict)  # type -> [agree, total]
    disagreements: list[Disagreement] = field(default_factory=list)
    reward_mismatches: list[str] = field(default_factory=list)
    skipped_types: set[str] = field(default_factory=set)
    n_variants: int = 0

    @property
    def agreement(self) -> float:
        agree = sum(a for a, _ in self.by_type.values())
        total = sum(t for _, t in self.by_type.values())
        return agree / total if total else 1.0

    def type_agreement(self, test_type: str) -> float:
        agree, total = self.by_type.get(test_type, (0, 0))
        return agree / total if total else 1.0

    def to_dict(self) -> dict:
        return {
            "agreement": self.agreement,
            "by_type": {t: {"agree": a, "total": n, "agreement": a / n if n else 1.0}
                        for t, (a, n) in sorted(self.by_type.items())},
            "disagreements": [vars(d) for d in self.disagreements],
            "reward_mismatches": self.reward_mismatches,
            "skipped_types": sorted(self.skipped_types),
            "n_variants": self.n_variants,
        }


def load_parity_tests(parity_dir: Path, bench_dir: Path | None = None) -> dict[tuple[str, str], Test]:
    """Tests of the parity set keyed by (jsonl file name, test id)."""
    bench_dir = bench_dir or parity_dir.parent / "olmocr-sample"
    tests: dict[tuple[str, str], Test] = {}
    for path in [*map(Path, bench_test_files(bench_dir)), parity_dir / "baseline_auto.jsonl"]:
        for t in load_tests(path):
            tests[(path.name, t.id)] = t
    return tests


def check_parity(parity_dir: str | Path, *, bench_dir: str | Path | None = None,
                 skip_types: set[str] = frozenset(), renderer=None) -> ParityReport:
    """Rerun every (completion, test) pair of ``parity_dir``; see the module docstring."""
    parity_dir = Path(parity_dir)
    tests = load_parity_tests(parity_dir, Path(bench_dir) if bench_dir else None)
    pairs: dict[str, list[dict]] = defaultdict(list)
    with open(parity_dir / "results.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                pairs[rec["variant_file"]].append(rec)
    variants = {}
    with open(parity_dir / "variants.jsonl", encoding="utf-8") as fh:
        for line in fh:
            if line.strip():
                rec = json.loads(line)
                variants[rec["variant_file"]] = rec

    report = ParityReport()
    for variant_file in sorted(set(pairs) | set(variants)):
        with open(parity_dir / variant_file, encoding="utf-8", newline="") as fh:
            text = fh.read()
        report.n_variants += 1
        recs = [r for r in pairs.get(variant_file, []) if r["type"] not in skip_types]
        report.skipped_types.update(r["type"] for r in pairs.get(variant_file, []) if r["type"] in skip_types)
        run = [tests[(r["jsonl_file"], r["test_id"])] for r in recs]
        verdicts: dict[tuple[str, str], Verdict] = {}
        for r, v in zip(recs, run_tests(text, run, renderer=renderer), strict=True):
            verdicts[(r["jsonl_file"], r["test_id"])] = v
            counts = report.by_type.setdefault(r["type"], [0, 0])
            counts[1] += 1
            if v.passed == r["passed"]:
                counts[0] += 1
            else:
                report.disagreements.append(Disagreement(variant_file, r["test_id"], r["jsonl_file"], r["type"],
                                                         r["passed"], v.reason))
        meta = variants.get(variant_file)
        if meta is None:
            continue
        reward_tests = [tests[(meta["reward_jsonl_file"], i)] for i in meta["reward_test_ids"]]
        if any(t.type in skip_types for t in reward_tests):
            continue
        known = [verdicts.get((meta["reward_jsonl_file"], t.id)) for t in reward_tests]
        if any(v is None for v in known):
            known = run_tests(text, reward_tests, renderer=renderer)
        micro, macro = micro_macro(known)
        if micro != meta["reward_micro"] or macro != meta["reward_macro"]:
            report.reward_mismatches.append(
                f"{variant_file}: micro {micro!r} vs {meta['reward_micro']!r}, macro {macro!r} vs {meta['reward_macro']!r}")
    return report
