"""Comparison of two scored runs (baseline vs trained) on the same olmOCR-Bench unit tests.

Reads each run folder's ``verdicts.jsonl`` (one line per test and repeat) and ``generations.jsonl``
(one line per page and repeat), as written by the baseline and evaluate stages, and answers
"did it get better, where, and is the difference real?":

- scores with olmOCR-Bench's aggregation (``olmocr/bench/benchmark.py``, as
  :mod:`olmpipe.bench.aggregate` reproduces it, so the numbers equal each run's ``scores.json``):
  a test passes when the majority of its repeats pass (strictly more than half); a category
  (JSONL file) scores the share of its tests passed; the overall score is the mean over
  categories. Per test type, the score is the mean over the type's tests of their pass rate over
  repeats (with one repeat: the share of tests passed);
- beside the overall score, the same under the short-answer guard (row ``guarded``/``overall``:
  passes through a fuzzy match inside an answer too short to hold the test's text count as failed,
  :mod:`olmpipe.bench.shortguard`; from the verdicts' ``short_answer`` key);
- for every score, bootstrap 95% intervals for both runs and for the paired difference, and a
  paired sign-flip test on per-test outcomes (:mod:`olmpipe.evaluate.stats`, fixed seed);
- reward-hacking guards (:mod:`olmpipe.evaluate.guards`): output length per page, gains coming only from
  ``absent`` tests, pages whose output became empty or lost its front matter, EOS rate.

The result is a :class:`Comparison`, written as ``comparison.json`` and ``comparison.csv`` by
:func:`write_comparison`; :func:`format_table` renders the short console table.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from olmpipe.evaluate import guards as guards_mod
from olmpipe.evaluate.stats import Interval, paired_bootstrap, sign_flip_test, stratified_score
from olmpipe.records import comparison as records
from olmpipe.records.generations import GENERATIONS_NAME, read_generations
from olmpipe.records.scores import SUMMARY_NAME, read_summary
from olmpipe.records.verdicts import SHORT_ANSWER_KEY, VERDICTS_NAME, read_verdicts

log = logging.getLogger(__name__)



class ComparisonError(ValueError):
    """Run folders that cannot be compared; the message names the file, line and reason."""


@dataclass(frozen=True)
class CompareSettings:
    """How the comparison resamples and when the guards warn (config section ``evaluate``)."""

    bootstrap_samples: int = 1000
    ci_level: float = 0.95
    permutations: int = 10000
    exact_max: int = 16
    seed: int = 0
    guards: guards_mod.GuardSettings = field(default_factory=guards_mod.GuardSettings)

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> CompareSettings:
        """Build from a validated config (``cfg["evaluate"]``)."""
        ev = cfg["evaluate"]
        g = ev["guards"]
        return cls(
            bootstrap_samples=ev["bootstrap_samples"],
            ci_level=ev["ci_level"],
            permutations=ev["permutations"],
            exact_max=ev["exact_max"],
            seed=ev["seed"],
            guards=guards_mod.GuardSettings(
                length_ratio_limit=g["length_ratio_limit"],
                absent_gain_share_warn=g["absent_gain_share_warn"],
                eos_drop_warn=g["eos_drop_warn"],
            ),
        )


@dataclass(frozen=True)
class TestOutcome:
    """One test aggregated over repeats: ``passes`` of ``repeats`` passed."""

    test_id: str
    type: str
    jsonl: str
    pdf: str
    page: int
    passes: int
    repeats: int
    reason: str = ""
    short_passes: int = 0  # passes the short-answer guard rejects

    @property
    def guarded_passed(self) -> bool:
        """:attr:`passed` with the short-answer guard (its rejected passes count as failed)."""
        return 2 * (self.passes - self.short_passes) > self.repeats

    @property
    def passed(self) -> bool:
        """Majority over repeats, strictly more than half (olmOCR-Bench: ``avg > 0.5``)."""
        return 2 * self.passes > self.repeats

    @property
    def rate(self) -> float:
        """Share of repeats that passed (0 for a page without output)."""
        return self.passes / self.repeats if self.repeats else 0.0


@dataclass(frozen=True)
class RunData:
    """A scored run folder: per-test outcomes and raw generations."""

    name: str
    folder: str
    tests: dict[str, TestOutcome]
    generations: list[guards_mod.Generation]
    #: Eval pages the run's model was trained on, scored with ``eval_run.on_trained_pages: flag``
    #: (its ``summary.json``'s ``trained_pages``): flagged by the guards.
    trained_pages: frozenset[tuple[str, int]] = frozenset()


@dataclass(frozen=True)
class ComparisonRow:
    """One line of the comparison: a score of both runs, its intervals and the paired test."""

    scope: str  # overall | type | jsonl
    name: str
    tests: int
    baseline: float
    trained: float
    difference: float
    baseline_ci: Interval
    trained_ci: Interval
    difference_ci: Interval
    p_value: float
    test_method: str
    changed: int
    gained: int
    lost: int

    def csv_record(self) -> dict[str, Any]:
        return {
            "scope": self.scope, "name": self.name, "tests": self.tests,
            "baseline": self.baseline, "baseline_low": self.baseline_ci.low,
            "baseline_high": self.baseline_ci.high, "trained": self.trained,
            "trained_low": self.trained_ci.low, "trained_high": self.trained_ci.high,
            "difference": self.difference, "difference_low": self.difference_ci.low,
            "difference_high": self.difference_ci.high, "p_value": self.p_value,
            "test_method": self.test_method, "changed": self.changed, "gained": self.gained,
            "lost": self.lost,
        }  # fmt: skip


@dataclass(frozen=True)
class Comparison:
    """Everything ``comparison.json`` holds."""

    baseline: dict[str, str]
    trained: dict[str, str]
    settings: dict[str, Any]
    rows: list[ComparisonRow]
    tests: list[dict[str, Any]]
    pages: list[dict[str, Any]]
    guards: dict[str, Any]

    def row(self, scope: str, name: str) -> ComparisonRow:
        """The row of ``scope`` (overall/type/jsonl) and ``name``; KeyError if absent."""
        for r in self.rows:
            if r.scope == scope and r.name == name:
                return r
        raise KeyError(f"no comparison row {scope}/{name}")

    def to_json(self) -> dict[str, Any]:
        rows = []
        for r in self.rows:
            d = asdict(r)
            for key in ("baseline_ci", "trained_ci", "difference_ci"):
                d[key] = getattr(r, key).as_list()
            rows.append(d)
        return {
            "baseline": self.baseline, "trained": self.trained, "settings": self.settings,
            "rows": rows, "tests": self.tests, "pages": self.pages, "guards": self.guards,
        }  # fmt: skip


def load_verdicts(path: str | Path) -> dict[str, TestOutcome]:
    """Aggregate ``verdicts.jsonl`` over repeats into one :class:`TestOutcome` per test id."""
    path = Path(path)
    counts: dict[str, list[Any]] = {}
    seen: set[tuple[str, int | None]] = set()
    for lineno, rec in read_verdicts(path, error=ComparisonError):
        # repeat null: the page had no output at all (olmpipe.bench scores it as one failed run)
        tid, repeat = str(rec["test_id"]), None if rec["repeat"] is None else int(rec["repeat"])
        if (tid, repeat) in seen:
            raise ComparisonError(f"{path}:{lineno}: duplicate verdict for test {tid!r} repeat {repeat}")
        seen.add((tid, repeat))
        ident = (str(rec["type"]), str(rec["jsonl"]), str(rec["pdf"]), int(rec["page"]))
        entry = counts.setdefault(tid, [ident, 0, 0, "", 0])
        if entry[0] != ident:
            raise ComparisonError(
                f"{path}:{lineno}: test {tid!r} has type/jsonl/pdf/page {ident}, earlier lines say {entry[0]}"
            )
        entry[1] += int(rec["passed"])
        entry[2] += 1
        entry[4] += int(bool(rec["passed"]) and bool(rec.get(SHORT_ANSWER_KEY)))
        if not rec["passed"] and not entry[3]:
            entry[3] = str(rec.get("reason") or "")
    if not counts:
        raise ComparisonError(f"{path}: no verdicts")
    return {
        tid: TestOutcome(tid, *ident, passes=p, repeats=n, reason=reason, short_passes=short)
        for tid, (ident, p, n, reason, short) in sorted(counts.items())
    }


def load_generations(path: str | Path) -> list[guards_mod.Generation]:
    """Read ``generations.jsonl`` (pdf, page, repeat, text, front matter, finish reason, failed)."""
    path = Path(path)
    out = []
    for rec in read_generations(path, error=ComparisonError):
        out.append(
            guards_mod.Generation(
                pdf=str(rec["pdf"]),
                page=int(rec["page"]),
                repeat=int(rec["repeat"]),
                text=str(rec["text"] or ""),
                has_front_matter=rec.get("front_matter") is not None and not rec.get("front_matter_error"),
                finish_reason=str(rec.get("finish_reason") or ""),
                failed=bool(rec.get("failed")),
            )
        )
    return out


def load_run(folder: str | Path, name: str | None = None) -> RunData:
    """Load a baseline/evaluate run folder (``verdicts.jsonl`` + ``generations.jsonl``)."""
    folder = Path(folder)
    summary = read_summary(folder) if (folder / SUMMARY_NAME).is_file() else None
    try:
        flagged = frozenset((str(p["pdf"]), int(p["page"])) for p in (summary or {}).get("trained_pages") or ())
    except (TypeError, KeyError, ValueError):
        raise ComparisonError(f"{folder / SUMMARY_NAME}: trained_pages is not a list of {{pdf, page}}") from None
    return RunData(
        name=name or folder.name,
        folder=str(folder),
        tests=load_verdicts(folder / VERDICTS_NAME),
        generations=load_generations(folder / GENERATIONS_NAME),
        trained_pages=flagged,
    )


def _check_same_tests(base: RunData, trained: RunData) -> list[str]:
    only_b = sorted(set(base.tests) - set(trained.tests))
    only_t = sorted(set(trained.tests) - set(base.tests))
    if only_b or only_t:
        raise ComparisonError(
            f"the runs were scored on different tests: {len(only_b)} only in {base.folder} "
            f"(e.g. {only_b[:3]}), {len(only_t)} only in {trained.folder} (e.g. {only_t[:3]}); "
            "score both with the same validated test set"
        )
    for tid in base.tests:
        b, t = base.tests[tid], trained.tests[tid]
        if (b.type, b.jsonl, b.pdf, b.page) != (t.type, t.jsonl, t.pdf, t.page):
            raise ComparisonError(f"test {tid!r} differs between {base.folder} and {trained.folder}")
    return sorted(base.tests)


def _row(
    scope: str,
    name: str,
    b: np.ndarray,
    t: np.ndarray,
    strata: list[np.ndarray],
    settings: CompareSettings,
    majority: tuple[np.ndarray, np.ndarray] | None = None,
) -> ComparisonRow:
    """Scores, intervals and paired test of per-test scores ``b``/``t`` grouped into ``strata``.

    ``gained``/``lost`` count tests whose majority outcome went fail -> pass / pass -> fail
    (``majority``: the 0/1 outcomes, when ``b``/``t`` are pass rates); ``changed`` counts the
    non-zero differences the paired test flips.
    """
    mb, mt = majority if majority is not None else (b, t)
    weights = np.zeros(len(b))
    for idx in strata:
        weights[idx] = 1.0 / (len(strata) * len(idx))
    boot = paired_bootstrap(b, t, strata, settings.bootstrap_samples, settings.ci_level, settings.seed)
    test = sign_flip_test(t - b, weights, settings.exact_max, settings.permutations, settings.seed)
    base_score, trained_score = stratified_score(b, strata), stratified_score(t, strata)
    return ComparisonRow(
        scope=scope,
        name=name,
        tests=len(b),
        baseline=base_score,
        trained=trained_score,
        difference=trained_score - base_score,
        baseline_ci=boot.baseline,
        trained_ci=boot.trained,
        difference_ci=boot.difference,
        p_value=test.p_value,
        test_method=test.method,
        changed=test.changed,
        gained=int(np.sum(mt > mb)),
        lost=int(np.sum(mt < mb)),
    )


def compare_runs(base: RunData, trained: RunData, settings: CompareSettings) -> Comparison:
    """Compare two scored runs on the same tests (see the module docstring for the statistics)."""
    ids = _check_same_tests(base, trained)
    b = np.array([float(base.tests[i].passed) for i in ids])
    t = np.array([float(trained.tests[i].passed) for i in ids])
    b_rate = np.array([base.tests[i].rate for i in ids])
    t_rate = np.array([trained.tests[i].rate for i in ids])
    outcomes = [base.tests[i] for i in ids]

    def groups(key: str) -> dict[str, np.ndarray]:
        names = sorted({getattr(o, key) for o in outcomes})
        return {n: np.array([k for k, o in enumerate(outcomes) if getattr(o, key) == n]) for n in names}

    by_jsonl, by_type = groups("jsonl"), groups("type")
    rows = [_row("overall", "overall", b, t, list(by_jsonl.values()), settings)]
    guarded = [np.array([float(run.tests[i].guarded_passed) for i in ids]) for run in (base, trained)]
    rows.append(_row("guarded", "overall", *guarded, list(by_jsonl.values()), settings))
    for name, idx in by_type.items():
        rows.append(
            _row("type", name, b_rate[idx], t_rate[idx], [np.arange(len(idx))], settings, (b[idx], t[idx]))
        )
    for name, idx in by_jsonl.items():
        rows.append(_row("jsonl", name, b[idx], t[idx], [np.arange(len(idx))], settings))

    tests = [
        {
            "test_id": o.test_id,
            "type": o.type,
            "jsonl": o.jsonl,
            "pdf": o.pdf,
            "page": o.page,
            "baseline_passes": o.passes,
            "baseline_repeats": o.repeats,
            "baseline_rate": o.rate,
            "baseline_passed": o.passed,
            "baseline_reason": o.reason,
            "trained_passes": trained.tests[o.test_id].passes,
            "trained_repeats": trained.tests[o.test_id].repeats,
            "trained_rate": trained.tests[o.test_id].rate,
            "trained_passed": trained.tests[o.test_id].passed,
            "trained_reason": trained.tests[o.test_id].reason,
            "change": int(t[k] - b[k]),
        }
        for k, o in enumerate(outcomes)
    ]
    try:
        guard_report = guards_mod.check_guards(tests, base.generations, trained.generations, settings.guards,
                                               trained_on={"baseline": base.trained_pages,
                                                           "trained": trained.trained_pages})
    except ValueError as exc:
        raise ComparisonError(f"{base.folder} vs {trained.folder}: {exc}") from None
    for warning in guard_report["warnings"]:
        log.warning("guard: %s", warning)
    return Comparison(
        baseline={"name": base.name, "dir": base.folder},
        trained={"name": trained.name, "dir": trained.folder},
        settings={
            "bootstrap_samples": settings.bootstrap_samples,
            "ci_level": settings.ci_level,
            "permutations": settings.permutations,
            "exact_max": settings.exact_max,
            "seed": settings.seed,
            "guards": asdict(settings.guards),
        },
        rows=rows,
        tests=tests,
        pages=guard_report.pop("pages"),
        guards=guard_report,
    )


def write_comparison(comparison: Comparison, json_path: str | Path, csv_path: str | Path) -> None:
    """Write ``comparison.json`` (everything) and ``comparison.csv`` (one line per score row)."""
    records.write_comparison(comparison.to_json(), [r.csv_record() for r in comparison.rows], json_path, csv_path)


def read_comparison(path: str | Path) -> dict[str, Any]:
    """Read a ``comparison.json`` written by :func:`write_comparison`; :class:`ComparisonError` if unreadable."""
    return records.read_comparison(path, error=ComparisonError)


def format_table(comparison: Mapping[str, Any]) -> str:
    """Short console table: overall and per type, baseline -> trained, difference, interval, p.

    Takes the JSON form (``Comparison.to_json()`` or :func:`read_comparison`).
    """
    level = round(100 * comparison["settings"]["ci_level"])
    ci_head = f"{level}% CI of diff"
    head = f"{'score':<16} {'baseline':>8} -> {'trained':<8} {'diff':>7}  {ci_head:<17} {'p':>6}  tests"
    names = comparison["baseline"]["name"], comparison["trained"]["name"]
    lines = [
        f"olmOCR-Bench: {names[0]} (baseline) vs {names[1]} (trained)",
        head,
        "-" * len(head),
    ]
    for r in comparison["rows"]:
        if r["scope"] == "jsonl":
            continue
        label = {"overall": "overall", "guarded": "guarded overall"}.get(r["scope"], f"  {r['name']}")
        lo, hi = r["difference_ci"]
        base, trained = f"{100 * r['baseline']:.1f}%", f"{100 * r['trained']:.1f}%"
        lines.append(
            f"{label:<16} {base:>8} -> {trained:<8} {100 * r['difference']:>+6.1f}  "
            f"[{100 * lo:+6.1f}, {100 * hi:+6.1f}]  {r['p_value']:>6.3f}  {r['tests']}"
        )
    for warning in comparison["guards"]["warnings"]:
        lines.append(f"WARNING: {warning}")
    return "\n".join(lines)
