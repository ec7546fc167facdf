"""olmOCR-Bench aggregation: candidate folders in, per-type / per-file scores and a bootstrap CI out.

Follows ``olmocr/bench/benchmark.py`` (0.4.27):

- every PDF without a ``baseline`` test gets one (:func:`~olmpipe.bench.model.baseline_tests_for`),
  counted under the JSONL name ``"baseline"``;
- a test runs on every repeat of its page; its score is the pass rate over the repeats, and it
  *passes* when that rate is > 0.5 (majority); a page without any repeat fails its tests;
- ``by_type`` averages the per-test pass rates of each type; ``by_jsonl`` is the fraction of
  passing tests of each JSONL file; ``overall`` is the mean of the ``by_jsonl`` values;
- the 95% CI bootstraps the pass/fail outcomes within each JSONL file (1000 resamples) and
  averages the per-file means, like the reference (here with a seeded generator, so it is
  reproducible).

Beside these scores, :attr:`CandidateScore.guarded` holds the same scores under the short-answer
guard (:mod:`olmpipe.bench.shortguard`: a pass through a fuzzy match inside an answer too short to
hold the test's text counts as failed), from the same verdicts; each verdict records whether the
guard rejects it (``short_answer``).

Deviations: a candidate missing every file of a PDF is scored with those tests failed (the
reference refuses to score it unless ``--force``); a repeat file's page is read from its
``_pg<N>_repeat<K>.md`` suffix (the reference searches ``_pg<N>_`` anywhere in the name, which
can pick another page's file when the PDF name itself contains ``_pg<N>_``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from olmpipe.bench.folders import bench_test_files
from olmpipe.bench.model import Test, TestLoadError, baseline_tests_for, load_tests
from olmpipe.bench.run import run_tests
from olmpipe.layout import BENCH_TESTS_GLOB
from olmpipe.records.candidates import CANDIDATE_GLOB, parse_candidate_name, pdf_stem
from olmpipe.records.verdicts import CandidateVerdict

BASELINE_JSONL = "baseline"
MISSING_REASON = "Missing MD files"
#: Key of the scores under the short-answer guard in :meth:`CandidateScore.to_json` (``scores.json``).
GUARDED_KEY = "short_answer_guard"

TextKey = tuple[str, int, int]  # (pdf, page, repeat)


@dataclass
class CandidateScore:
    """Scores of one candidate; fractions in [0, 1]. ``to_json()`` is the ``--json`` record."""

    overall: float
    by_type: dict[str, float]
    by_jsonl: dict[str, float]
    ci95: tuple[float, float]
    verdicts: list[CandidateVerdict] = field(default_factory=list)
    test_scores: dict[str, float] = field(default_factory=dict)  # test id -> pass rate over repeats
    type_counts: dict[str, int] = field(default_factory=dict)
    jsonl_counts: dict[str, tuple[int, int]] = field(default_factory=dict)  # file -> (passed, total)
    #: the same scores under the short-answer guard: ``{"overall", "by_type", "by_jsonl", "ci95"}``
    guarded: dict | None = None

    def to_json(self) -> dict:
        out = {"overall": self.overall, "by_type": dict(self.by_type), "by_jsonl": dict(self.by_jsonl),
               "ci95": [float(self.ci95[0]), float(self.ci95[1])]}
        if self.guarded is not None:
            out[GUARDED_KEY] = self.guarded
        return out


def bootstrap_ci(groups: Sequence[Sequence[float]], *, n_bootstrap: int = 1000, level: float = 0.95,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile CI of the mean of per-group means, resampling within each group."""
    groups = [np.asarray(g, dtype=float) for g in groups if len(g) > 0]
    if not groups:
        return (0.0, 0.0)
    rng = np.random.default_rng(seed)
    means = np.zeros(n_bootstrap)
    for g in groups:
        means += g[rng.integers(0, len(g), size=(n_bootstrap, len(g)))].mean(axis=1)
    means /= len(groups)
    alpha = (1.0 - level) / 2.0
    return float(np.percentile(means, alpha * 100)), float(np.percentile(means, (1 - alpha) * 100))


def _jsonl_of(test: Test) -> str:
    return test.source or "unknown"


def score_candidate(tests: Sequence[Test], texts: Mapping[TextKey, str], *, scorer=None,
                    progress: Callable[[int], None] | None = None, n_bootstrap: int = 1000,
                    seed: int = 0) -> CandidateScore:
    """Score one candidate: ``texts`` maps ``(pdf, page, repeat)`` to the page text.

    ``tests`` are all tests of the bench, automatic baselines included (see :func:`load_bench_dir`);
    their ``source`` is their JSONL name. ``scorer`` (a :class:`~olmpipe.bench.BenchScorer`) spreads
    the work over processes with a time bound; without one the tests run in this process.
    ``progress(n)`` is called as texts are scored.
    """
    by_page: dict[tuple[str, int], list[Test]] = {}
    for t in tests:
        by_page.setdefault((t.pdf, t.page), []).append(t)
    repeats: dict[tuple[str, int], list[int]] = {}
    for pdf, page, rep in texts:
        if (pdf, page) in by_page:
            repeats.setdefault((pdf, page), []).append(rep)
    jobs = [((pdf, page, rep), by_page[(pdf, page)]) for (pdf, page), reps in repeats.items()
            for rep in sorted(reps)]

    outcomes: dict[str, list[tuple[int | None, bool, str, bool]]] = {t.id: [] for t in tests}
    step = max(32, len(jobs) // 20)  # batches: progress updates without starving the workers
    for start in range(0, len(jobs), step):
        batch = jobs[start:start + step]
        if scorer is not None:
            results = [r.verdicts for r in scorer.score([(texts[key], page_tests) for key, page_tests in batch])]
        else:
            results = [run_tests(texts[key], page_tests) for key, page_tests in batch]
        for (key, _), verdicts in zip(batch, results, strict=True):
            for v in verdicts:
                outcomes[v.test_id].append((key[2], v.passed, v.reason, v.short))
        if progress is not None:
            progress(len(batch))

    verdicts: list[CandidateVerdict] = []
    for t in tests:
        runs = sorted(outcomes[t.id], key=lambda o: o[0])
        if not runs:
            verdicts.append(CandidateVerdict(t.id, t.type, _jsonl_of(t), t.pdf, t.page, None, False, MISSING_REASON))
        verdicts += [CandidateVerdict(t.id, t.type, _jsonl_of(t), t.pdf, t.page, rep, ok, reason, short)
                     for rep, ok, reason, short in runs]
    score = _aggregate(tests, outcomes, guard=False, n_bootstrap=n_bootstrap, seed=seed)
    score.verdicts = verdicts
    score.guarded = _aggregate(tests, outcomes, guard=True, n_bootstrap=n_bootstrap, seed=seed).to_json()
    return score


def _aggregate(tests: Sequence[Test], outcomes: Mapping[str, Sequence[tuple[int | None, bool, str, bool]]], *,
               guard: bool, n_bootstrap: int, seed: int) -> CandidateScore:
    """The scores of ``outcomes`` (test id -> ``(repeat, passed, reason, short)`` per repeat); with
    ``guard`` a short pass counts as failed (the short-answer guard)."""
    test_scores: dict[str, float] = {}
    type_scores: dict[str, list[float]] = {}
    jsonl_outcomes: dict[str, list[float]] = {}
    for t in tests:
        runs = outcomes[t.id]
        avg = sum(ok and not (guard and short) for _, ok, _, short in runs) / len(runs) if runs else 0.0
        test_scores[t.id] = avg
        type_scores.setdefault(t.type, []).append(avg)
        jsonl_outcomes.setdefault(_jsonl_of(t), []).append(1.0 if avg > 0.5 else 0.0)

    by_jsonl = {name: sum(v) / len(v) for name, v in jsonl_outcomes.items()}
    return CandidateScore(
        overall=sum(by_jsonl.values()) / len(by_jsonl) if by_jsonl else 0.0,
        by_type={k: sum(v) / len(v) for k, v in sorted(type_scores.items())},
        by_jsonl=dict(sorted(by_jsonl.items())),
        ci95=bootstrap_ci(list(jsonl_outcomes.values()), n_bootstrap=n_bootstrap, seed=seed),
        test_scores=test_scores,
        type_counts={k: len(v) for k, v in sorted(type_scores.items())},
        jsonl_counts={k: (int(sum(v)), len(v)) for k, v in sorted(jsonl_outcomes.items())},
    )


# ---------------------------------------------------------------------------------- bench folders
@dataclass
class BenchDir:
    """A folder in olmOCR-Bench layout: its PDFs, tests (with automatic baselines) and candidates."""

    path: Path
    pdfs: list[str]
    tests: list[Test]
    candidates: list[str]


def _pdfs_of(path: Path) -> list[str]:
    root = path / "pdfs"
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*.pdf")) if root.is_dir() else []


def load_bench_dir(path: str | Path, *, add_baselines: bool = True) -> BenchDir:
    """Load ``path/*.jsonl`` (sorted), add the automatic baselines, list the candidate folders.

    Raises :class:`~olmpipe.bench.model.TestLoadError` for a bad test or a test id used in two files.
    """
    path = Path(path)
    if not path.is_dir():
        raise FileNotFoundError(f"bench folder {path} does not exist")
    pdfs = _pdfs_of(path)
    if not pdfs:
        raise FileNotFoundError(f"no PDFs under {path / 'pdfs'}; is {path} an olmOCR-Bench folder?")
    jsonl_files = [Path(f) for f in bench_test_files(path)]
    if not jsonl_files:
        raise FileNotFoundError(f"no {BENCH_TESTS_GLOB} test files in {path}")
    tests: list[Test] = []
    seen: dict[str, str] = {}
    for f in jsonl_files:
        for t in load_tests(f):
            if t.id in seen:
                raise TestLoadError(f"test id also used in {seen[t.id]}", file=f.name, line=t.line, test_id=t.id)
            seen[t.id] = f.name
            tests.append(t)
    if add_baselines:
        tests += baseline_tests_for(pdfs, tests)
    candidates = sorted(p.name for p in path.iterdir()
                        if p.is_dir() and p.name != "pdfs" and not p.name.startswith("."))
    return BenchDir(path, pdfs, tests, candidates)


def read_candidate(folder: str | Path, pdfs: Iterable[str]) -> dict[TextKey, str]:
    """The texts of a candidate folder, keyed by ``(pdf, page, repeat)``, for the PDFs given.

    Files are read as UTF-8 without newline translation; undecodable bytes become U+FFFD.
    """
    folder = Path(folder)
    by_stem = {pdf_stem(pdf): pdf for pdf in pdfs}
    texts: dict[TextKey, str] = {}
    for f in sorted(folder.rglob(CANDIDATE_GLOB)):
        parsed = parse_candidate_name(f.relative_to(folder).as_posix())
        if parsed is None or parsed[0] not in by_stem:
            continue
        stem, page, repeat = parsed
        texts[(by_stem[stem], page, repeat)] = f.read_bytes().decode("utf-8", "replace")
    return texts
