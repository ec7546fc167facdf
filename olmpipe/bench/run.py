"""Run a page's tests on one completion: :func:`run_tests` and the :class:`Verdict` it returns.

The text is wrapped in a :class:`~olmpipe.bench.pagetext.PageText` once per call, so the
normalized text and parsed tables are shared by all tests of the page. A check that raises counts
as a failed test (as in the reference benchmark and GRPO reward) with the exception in the reason;
tests still pending when ``deadline`` (a ``time.monotonic()`` value) has passed fail with reason
``"timeout"``.

Each verdict is the reference's, plus :attr:`Verdict.short`: the test passed only through a fuzzy
match inside a string too short to hold its text, which the short-answer guard counts as failed
(:mod:`olmpipe.bench.shortguard`; :meth:`Verdict.guarded`, ``micro_macro(..., guard=True)``). One
run gives both semantics, so the training reward and the guarded evaluation score cost nothing extra.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from olmpipe.bench.checks import check_baseline, check_footnote, check_format, check_order, check_presence
from olmpipe.bench.pagetext import PageText
from olmpipe.bench.shortguard import SHORT_REASON
from olmpipe.bench.tablecheck import check_table

log = logging.getLogger(__name__)

TIMEOUT_REASON = "timeout"


@dataclass(frozen=True, slots=True)
class Verdict:
    """The outcome of one test on one text; ``reason`` is empty when it passed.

    ``passed`` is olmOCR-Bench's verdict; ``short`` marks a pass the short-answer guard rejects
    (:mod:`olmpipe.bench.shortguard`), so it is only ever True together with ``passed``.
    """

    test_id: str
    passed: bool
    reason: str = ""
    type: str = ""
    short: bool = False

    def to_dict(self) -> dict:
        return {"test_id": self.test_id, "type": self.type, "passed": self.passed, "reason": self.reason,
                "short": self.short}

    def guarded(self) -> Verdict:
        """The verdict under the short-answer guard: a ``short`` pass fails with :data:`SHORT_REASON`.

        >>> Verdict("t", True, "", "present", short=True).guarded().passed
        False
        """
        return Verdict(self.test_id, False, SHORT_REASON, self.type, True) if self.short else self


def _check_math(test, page: PageText, renderer, deadline: float | None) -> tuple[bool, str]:
    try:
        from olmpipe.bench.mathtest import check_math
    except ImportError as exc:  # the KaTeX checker is a separate module; say so instead of crashing
        return False, f"math checker unavailable: {exc}"
    return check_math(page.raw, test.math, max_diffs=test.max_diffs,
                      ignore_dollar_delimited=test.ignore_dollar_delimited,
                      renderer=renderer, deadline=deadline)


_CHECKS = {
    "order": check_order,
    "table": check_table,
    "baseline": check_baseline,
}
#: Checks that also say whether a pass came from a too-short match: ``(passed, reason, short)``.
_GUARDED_CHECKS = {
    "present": check_presence,
    "absent": check_presence,
    "format": check_format,
    "footnote": check_footnote,
}


def run_test(test, page: PageText, *, renderer=None, deadline: float | None = None) -> Verdict:
    """One test on an already wrapped page; never raises."""
    if deadline is not None and time.monotonic() > deadline:
        return Verdict(test.id, False, TIMEOUT_REASON, test.type)
    short = False
    try:
        if test.type == "math":
            passed, reason = _check_math(test, page, renderer, deadline)
        elif test.type in _GUARDED_CHECKS:
            passed, reason, short = _GUARDED_CHECKS[test.type](test, page)
        else:
            passed, reason = _CHECKS[test.type](test, page)
    except Exception as exc:  # noqa: BLE001 - the reference counts a raising test as failed
        log.warning("test %s raised %s: %s", test.id, type(exc).__name__, exc)
        return Verdict(test.id, False, f"error: {type(exc).__name__}: {exc}"[:500], test.type)
    return Verdict(test.id, bool(passed), reason or "", test.type, bool(passed) and bool(short))


def run_tests(text, tests: Iterable, *, renderer=None, deadline: float | None = None) -> list[Verdict]:
    """Verdicts of ``tests`` on ``text`` (a ``str``, None, or a :class:`PageText`), in test order.

    ``renderer`` is the KaTeX renderer handed to math tests (None: the math module's default);
    ``deadline`` is a ``time.monotonic()`` bound after which remaining tests fail with "timeout".
    """
    page = text if isinstance(text, PageText) else PageText(text)
    return [run_test(t, page, renderer=renderer, deadline=deadline) for t in tests]


def micro_macro(verdicts: Sequence[Verdict], *, guard: bool = False) -> tuple[float, float]:
    """(passed / total, mean over test types of the per-type pass rate); (0, 0) without verdicts.

    The micro value is olmocr's GRPO ``olmocr_bench_reward``; the macro value the
    ``macro_average=True`` variant of olmocr main. ``guard``: count ``short`` passes as failed
    (the short-answer guard, :mod:`olmpipe.bench.shortguard`).
    """
    if not verdicts:
        return 0.0, 0.0
    by_type: dict[str, list[bool]] = {}
    passes = [v.passed and not (guard and v.short) for v in verdicts]
    for v, ok in zip(verdicts, passes, strict=True):
        by_type.setdefault(v.type, []).append(ok)
    micro = sum(passes) / len(verdicts)
    macro = sum(sum(p) / len(p) for p in by_type.values()) / len(by_type)
    return micro, macro
