"""Parity with the reference verdicts (olmocr 0.4.27) on ``../shared/bench/parity-dev``.

The parity folder sits beside the repository (CI has ``shared/`` next to the clone); the tests skip
when it is absent. Math pairs need ``olmpipe.bench.mathtest`` and Chromium (marker ``browser``).
"""

import importlib.util
import shutil
from pathlib import Path

import pytest

from olmpipe.bench.parity import check_parity

ROOT = Path(__file__).resolve().parents[1]
PARITY = ROOT.parent / "shared" / "bench" / "parity-dev"

pytestmark = pytest.mark.skipif(not (PARITY / "results.jsonl").is_file(), reason=f"{PARITY} not present")


def _assert_parity(report):
    shown = "\n".join(str(d) for d in report.disagreements[:50])
    assert report.agreement >= 0.995, shown
    for test_type in report.by_type:
        assert report.type_agreement(test_type) >= 0.99, f"{test_type}\n{shown}"
    assert report.reward_mismatches == [], "\n".join(report.reward_mismatches[:20])


def test_parity_without_math():
    report = check_parity(PARITY, skip_types={"math"})
    assert report.n_variants == 600
    assert sum(total for _, total in report.by_type.values()) == 3125 - 312
    _assert_parity(report)


@pytest.mark.browser
@pytest.mark.skipif(importlib.util.find_spec("olmpipe.bench.mathtest") is None or shutil.which("chromium") is None,
                    reason="olmpipe.bench.mathtest or chromium missing")
def test_parity_with_math():
    report = check_parity(PARITY)
    assert report.by_type["math"][1] == 312
    _assert_parity(report)
