"""What one call of a unit-test reward logs: ``bench/*`` metrics and each completion's verdicts.

:class:`BenchStats` counts passed tests by test type and by JSONL file, plus the completions that
timed out or could not be scored, and names them as the trainer logs them (``bench/pass_rate``,
``bench/pass_rate/type/<type>``, ``bench/pass_rate/jsonl/<file>``, ``bench/timeouts``,
``bench/errors``, ``bench/completions``). :func:`verdicts_json` is the ``bench_verdicts`` column of
the completions table.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

#: Longest failure reason kept in the per-completion verdict log.
MAX_REASON_CHARS = 300


class BenchStats:
    """Pass counts of one reward call by test type and by JSONL file, plus timeouts and errors.

    ``errors`` counts scored completions with a test error; ``lookup_errors`` the rows whose tests
    cannot be found and ``no_text`` the completions without text. All three are ``bench/errors``.
    """

    def __init__(self) -> None:
        self.by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.by_jsonl: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.passed = self.total = self.completions = self.timeouts = self.errors = 0
        self.lookup_errors = self.no_text = 0

    def add(self, tests: Sequence[Any], result: Any) -> None:
        """Count one scored completion: its verdicts on ``tests`` (a :class:`~olmpipe.bench.BatchResult`)."""
        self.completions += 1
        self.timeouts += int(bool(result.timed_out))
        self.errors += int(bool(result.errors))
        for test, verdict in zip(tests, result.verdicts, strict=True):
            ok = int(bool(verdict.passed))
            for bucket in (self.by_type[test.type], self.by_jsonl[test.source or "unknown"]):
                bucket[0] += ok
                bucket[1] += 1
            self.passed += ok
            self.total += 1

    def metrics(self) -> dict[str, float]:
        """The metrics of the call by logged name."""
        out = {
            # completions (not tests) that hit the time bound / had a test error or no text
            "bench/timeouts": float(self.timeouts),
            "bench/errors": float(self.errors + self.no_text + self.lookup_errors),
            "bench/completions": float(self.completions),
        }
        if self.total:
            out["bench/pass_rate"] = self.passed / self.total
        for kind, table in (("type", self.by_type), ("jsonl", self.by_jsonl)):
            for key, (ok, total) in sorted(table.items()):
                out[f"bench/pass_rate/{kind}/{key}"] = ok / total
        return out


def verdicts_json(tests: Sequence[Any], result: Any) -> str:
    """One completion's verdicts as a JSON list (reasons cut at :data:`MAX_REASON_CHARS`)."""
    return json.dumps(
        [
            {"id": t.id, "type": t.type, "passed": bool(v.passed), "reason": (v.reason or "")[:MAX_REASON_CHARS]}
            for t, v in zip(tests, result.verdicts, strict=True)
        ]
        + ([{"timed_out": True}] if result.timed_out else []),
        ensure_ascii=False,
    )


def error_json(message: str) -> str:
    """The ``bench_verdicts`` entry of a completion that was not scored, saying why."""
    return json.dumps({"error": message[:MAX_REASON_CHARS]}, ensure_ascii=False)
