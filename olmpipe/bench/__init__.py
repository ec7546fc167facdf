"""olmOCR-Bench unit-test engine: load tests, run them on page texts, score candidates and batches.

The verdicts match the reference implementation (allenai/olmocr 0.4.27, ``olmocr/bench``) test for
test; ``format`` and ``footnote`` follow olmocr main. Main entry points::

    from olmpipe.bench import load_tests, run_tests, score_batch, score_candidate

    tests = load_tests("data/bench/olmocr-sample/dataset.jsonl")
    verdicts = run_tests(page_text, [t for t in tests if t.pdf == "earnings.pdf"])

    with BenchScorer(processes=2, timeout_s=10) as scorer:      # persistent worker pool (GRPO)
        results = scorer.score([(text, tests_of_page) for text in completions])

Command line: ``olmpipe bench score DIR`` (see :mod:`olmpipe.bench.cli`).

Names are imported lazily so that ``import olmpipe.bench`` stays cheap for stages that only load
tests.
"""

from __future__ import annotations

import importlib

# public name -> module that defines it
_EXPORTS = {
    "Test": "olmpipe.bench.model",
    "PresenceTest": "olmpipe.bench.model",
    "OrderTest": "olmpipe.bench.model",
    "TableTest": "olmpipe.bench.model",
    "MathTest": "olmpipe.bench.model",
    "BaselineTest": "olmpipe.bench.model",
    "FormatTest": "olmpipe.bench.model",
    "FootnoteTest": "olmpipe.bench.model",
    "TestLoadError": "olmpipe.bench.model",
    "TEST_TYPES": "olmpipe.bench.model",
    "load_tests": "olmpipe.bench.model",
    "test_from_record": "olmpipe.bench.model",
    "baseline_tests_for": "olmpipe.bench.model",
    "normalize_text": "olmpipe.bench.normalize",
    "PageText": "olmpipe.bench.pagetext",
    "Verdict": "olmpipe.bench.run",
    "run_tests": "olmpipe.bench.run",
    "micro_macro": "olmpipe.bench.run",
    "BatchResult": "olmpipe.bench.scorer",
    "BenchScorer": "olmpipe.bench.scorer",
    "score_batch": "olmpipe.bench.scorer",
    "CandidateScore": "olmpipe.bench.aggregate",
    "score_candidate": "olmpipe.bench.aggregate",
    "load_bench_dir": "olmpipe.bench.aggregate",
    "read_candidate": "olmpipe.bench.aggregate",
}

__all__ = [  # noqa: RUF022 - the same names as _EXPORTS
    "BaselineTest",
    "BatchResult",
    "BenchScorer",
    "CandidateScore",
    "FootnoteTest",
    "FormatTest",
    "MathTest",
    "OrderTest",
    "PageText",
    "PresenceTest",
    "TEST_TYPES",
    "TableTest",
    "Test",
    "TestLoadError",
    "Verdict",
    "baseline_tests_for",
    "load_bench_dir",
    "load_tests",
    "micro_macro",
    "normalize_text",
    "read_candidate",
    "run_tests",
    "score_batch",
    "score_candidate",
    "test_from_record",
]


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'olmpipe.bench' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
