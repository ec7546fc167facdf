"""Run a page's tests on one completion: :func:`run_tests` and the :class:`Verdict` it returns.

The text is wrapped in a :class:`~olmpipe.bench.pagetext.PageText` once per call, so the
normalized text and parsed tables are shared by all tests of the page. A check that raises counts
as a failed test (as in the reference benchmark and GRPO reward) with the exception in the reason;
tests still pending when ``deadline`` (a ``time.monotonic()`` value) has passed fail with reason
``"timeout"``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from olmpipe.bench.checks import check_baseline, check_footnote, check_format, check_order, check_presence
from olmpipe.bench.pagetext import PageText
from olmpipe.bench.tablecheck import check_table

log = logging.getLogger(__name__)

TIMEOUT_REASON = "timeout"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one test on one text; ``reason`` is empty when it passed."""

    test_id: str
    passed: bool
    reason: str = ""
    type: str = ""

    def to_dict(self) -> dict:
        return {"test_id": self.test_id, "type": self.type, "passed": self.passed, "reason": self.reason}


def _check_math(test, page: PageText, renderer, deadline: float | None) -> tuple[bool, str]:
    try:
        from olmpipe.bench.mathtest import check_math
    except ImportError as exc:  # the KaTeX checker is a separate module; say so instead of crashing
        return False, f"math checker unavailable: {exc}"
    return check_math(page.raw, test.math, max_diffs=test.max_diffs,
                      ignore_dollar_delimited=test.ignore_dollar_delimited,
                      renderer=renderer, deadline=deadline)


_CHECKS = {
    "present": check_presence,
    "absent": check_presence,
    "order": check_order,
    "table": check_table,
    "baseline": check_baseline,
    "format": check_format,
    "footnote": check_footnote,
}


def run_test(test, page: PageText, *, renderer=None, deadline: float | None = None) -> Verdict:
    """One test on an already wrapped page; never raises."""
    if deadline is not None and time.monotonic() > deadline:
        return Verdict(test.id, False, TIMEOUT_REASON, test.type)
    try:
        if test.type == "math":
            passed, reason = _check_math(test, page, renderer, deadline)
        else:
            passed, reason = _CHECKS[test.type](test, page)
    except Exception as exc:  # noqa: BLE001 - the reference counts a raising test as failed
        log.warning("test %s raised %s: %s", test.id, type(exc).__name__, exc)
        return Verdict(test.id, False, f"error: {type(exc).__name__}: {exc}"[:500], test.type)
    return Verdict(test.id, bool(passed), reason or "", test.type)


def run_tests(text, tests: Iterable, *, renderer=None, deadline: float | None = None) -> list[Verdict]:
    """Verdicts of ``tests`` on ``text`` (a ``str``, None, or a :class:`PageText`), in test order.

    ``renderer`` is the KaTeX renderer handed to math tests (None: the math module's default);
    ``deadline`` is a ``time.monotonic()`` bound after which remaining tests fail with "timeout".
    """
    page = text if isinstance(text, PageText) else PageText(text)
    return [run_test(t, page, renderer=renderer, deadline=deadline) for t in tests]


def micro_macro(verdicts: Sequence[Verdict]) -> tuple[float, float]:
    """(passed / total, mean over test types of the per-type pass rate); (0, 0) without verdicts.

    The micro value is olmocr's GRPO ``olmocr_bench_reward``; the macro value the
    ``macro_average=True`` variant of olmocr main.
    """
    if not verdicts:
        return 0.0, 0.0
    by_type: dict[str, list[bool]] = {}
    for v in verdicts:
        by_type.setdefault(v.type, []).append(v.passed)
    micro = sum(v.passed for v in verdicts) / len(verdicts)
    macro = sum(sum(p) / len(p) for p in by_type.values()) / len(by_type)
    return micro, macro
