"""One line per unit test saying what it checks, for people reading a report.

Kept beside the test model (:mod:`olmpipe.bench.model`) so that each test type's fields are
interpreted in one package: the report shows these lines next to a page's verdicts.
"""

from __future__ import annotations

import logging
from pathlib import Path

from olmpipe.bench.folders import bench_test_files
from olmpipe.bench.model import Test, TestLoadError, load_tests

logger = logging.getLogger(__name__)

#: Longest description; longer ones end with "...".
MAX_CHARS = 160
_TABLE_NEIGHBOURS = ("up", "down", "left", "right", "top_heading", "left_heading")


def describe_test(test: Test) -> str:
    """What ``test`` checks, in one line of at most :data:`MAX_CHARS` characters."""
    if test.type == "order":
        text = f"{test.before!r} before {test.after!r}"
    elif test.type == "table":
        extra = [f"{k}={getattr(test, k)!r}" for k in _TABLE_NEIGHBOURS if getattr(test, k, None)]
        text = " ".join([f"cell {test.cell!r}", *extra])
    elif test.type == "baseline":
        text = f"plain text, max_length={test.max_length}"
    elif test.type == "math":
        text = repr(test.math)
    elif test.type == "footnote":
        parts = [f"footnote {test.marker!r}"]
        if test.appears_before_marker:
            parts.append(f"after {test.appears_before_marker!r}")
        if test.appears_after_marker:
            parts.append(f"before {test.appears_after_marker!r}")
        text = " ".join(parts)
    else:  # present, absent, format
        text = repr(getattr(test, "text", ""))
    return text if len(text) <= MAX_CHARS else text[: MAX_CHARS - 3] + "..."


def describe_tests(tests_dir: str | Path | None) -> dict[str, str]:
    """Test id -> :func:`describe_test` for every test of the validated files in ``tests_dir``.

    Empty when there is no such folder; a file that does not load (validated files do) is skipped
    with a warning: it only loses its descriptions.
    """
    out: dict[str, str] = {}
    if tests_dir is None or not Path(tests_dir).is_dir():
        return out
    for path in map(Path, bench_test_files(tests_dir)):
        try:
            tests = load_tests(path)
        except TestLoadError as exc:
            logger.warning("no test descriptions from %s: %s", path, exc)
            continue
        out.update((test.id, describe_test(test)) for test in tests)
    return out
