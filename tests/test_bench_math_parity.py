"""Math verdicts against the reference's on every math pair of ``parity-dev`` (olmocr 0.4.27).

``shared/bench/parity-dev/results.jsonl`` holds the reference verdict of each (completion, test)
pair; the math tests are in ``shared/bench/olmocr-sample/dataset.jsonl``. Every disagreement is
printed (test id, completion file, expected verdict, our reason). Skipped when the shared folder or
Chromium is missing.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.browser import NEEDS_CHROMIUM

from olmpipe.bench.katex import KatexRenderer
from olmpipe.bench.mathtest import check_math

SHARED = Path(__file__).resolve().parents[1].parent / "shared" / "bench"
PARITY = SHARED / "parity-dev"



pytestmark = [
    *NEEDS_CHROMIUM,
    pytest.mark.skipif(not (PARITY / "results.jsonl").is_file(), reason="shared/bench/parity-dev not present"),
]


def _math_tests() -> dict[str, dict]:
    tests = {}
    for path in sorted((SHARED / "olmocr-sample").glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                test = json.loads(line)
                if test["type"] == "math":
                    tests[test["id"]] = test
    return tests


def test_math_verdicts_match_reference(tmp_path):
    tests = _math_tests()
    rows = [json.loads(line) for line in (PARITY / "results.jsonl").read_text(encoding="utf-8").splitlines()]
    rows = [row for row in rows if row["type"] == "math"]
    assert len(rows) == 312
    disagreements = []
    with KatexRenderer(tmp_path) as renderer:
        for row in rows:
            # UTF-8 without newline translation, as the reference read them
            text = (PARITY / row["variant_file"]).read_bytes().decode("utf-8")
            test = tests[row["test_id"]]
            passed, reason = check_math(text, test["math"], max_diffs=test.get("max_diffs", 0),
                                        ignore_dollar_delimited=test.get("ignore_dollar_delimited", False),
                                        renderer=renderer)
            if passed != row["passed"]:
                disagreements.append(f"{row['test_id']} on {row['variant_file']}: reference "
                                     f"{'pass' if row['passed'] else 'fail'}, ours: {reason or 'pass'}")
    agreement = 1 - len(disagreements) / len(rows)
    print(f"math parity: {len(rows) - len(disagreements)}/{len(rows)} ({agreement:.2%})")
    for line in disagreements:
        print("  " + line)
    assert agreement >= 0.99, "\n".join(disagreements)
