"""What one call of a unit-test reward logs: ``bench/*`` metrics and each completion's verdicts.

:class:`BenchStats` counts passed tests by test type and by JSONL file, plus the completions that
timed out or could not be scored, and names them as the trainer logs them (``bench/pass_rate``,
``bench/pass_rate/type/<type>``, ``bench/pass_rate/jsonl/<file>``, ``bench/timeouts``,
``bench/errors``, ``bench/completions``). :func:`verdicts_json` is the ``bench_verdicts`` column of
the completions table.

Two counts show a run that starts to game the fuzzy matches with near-empty answers while it
trains (olmocr #461; :mod:`olmpipe.bench.shortguard`), whether the short-answer guard is on or not:

- ``bench/short_passes`` (:data:`SHORT_PASSES`): tests of the call that olmOCR-Bench passes only
  through a match inside an answer too short to hold the test's text (with the guard on they are
  counted as failed: the policy tried, and got nothing for it);
- ``bench/short_high_reward`` (:data:`SHORT_HIGH_REWARD`): completions much shorter than their page
  (their page text below ``rewards.bench.short_signal.length_share`` of the reference answer's page
  text, or, without a reference, of the texts the page's tests look for,
  :func:`olmpipe.bench.shortguard.expected_chars`) that still earn a reward of at least
  ``short_signal.min_reward``.

The pass rates count the verdicts the reward counted (with the guard on: short passes failed).
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from typing import Any

#: Longest failure reason kept in the per-completion verdict log.
MAX_REASON_CHARS = 300
#: Metric names of the training signal of answers that game the fuzzy matches (module docstring).
SHORT_PASSES = "bench/short_passes"
SHORT_HIGH_REWARD = "bench/short_high_reward"


class BenchStats:
    """Pass counts of one reward call by test type and by JSONL file, plus timeouts and errors.

    ``errors`` counts scored completions with a test error; ``lookup_errors`` the rows whose tests
    cannot be found and ``no_text`` the completions without text. All three are ``bench/errors``.
    """

    def __init__(self, *, guard: bool = False) -> None:
        self.guard = guard
        self.by_type: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.by_jsonl: dict[str, list[int]] = defaultdict(lambda: [0, 0])
        self.passed = self.total = self.completions = self.timeouts = self.errors = 0
        self.lookup_errors = self.no_text = 0
        self.short_passes = self.short_high_reward = 0

    def add(self, tests: Sequence[Any], result: Any) -> None:
        """Count one scored completion: its verdicts on ``tests`` (a :class:`~olmpipe.bench.BatchResult`),
        a short pass failed when the guard is on."""
        self.completions += 1
        self.timeouts += int(bool(result.timed_out))
        self.errors += int(bool(result.errors))
        for test, verdict in zip(tests, result.verdicts, strict=True):
            self.short_passes += int(bool(verdict.short))
            ok = int(bool(verdict.passed) and not (self.guard and verdict.short))
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
            SHORT_PASSES: float(self.short_passes),
            SHORT_HIGH_REWARD: float(self.short_high_reward),
        }
        if self.total:
            out["bench/pass_rate"] = self.passed / self.total
        for kind, table in (("type", self.by_type), ("jsonl", self.by_jsonl)):
            for key, (ok, total) in sorted(table.items()):
                out[f"bench/pass_rate/{kind}/{key}"] = ok / total
        return out


def verdicts_json(tests: Sequence[Any], result: Any, *, guard: bool = False) -> str:
    """One completion's verdicts as a JSON list (reasons cut at :data:`MAX_REASON_CHARS`): ``passed``
    is what the reward counted (with ``guard``, a short pass is failed with the guard's reason) and
    ``"short": true`` marks a pass through a too-short match either way."""
    verdicts = [v.guarded() if guard else v for v in result.verdicts]
    return json.dumps(
        [
            {"id": t.id, "type": t.type, "passed": bool(v.passed), "reason": (v.reason or "")[:MAX_REASON_CHARS],
             **({"short": True} if v.short else {})}
            for t, v in zip(tests, verdicts, strict=True)
        ]
        + ([{"timed_out": True}] if result.timed_out else []),
        ensure_ascii=False,
    )


def error_json(message: str) -> str:
    """The ``bench_verdicts`` entry of a completion that was not scored, saying why."""
    return json.dumps({"error": message[:MAX_REASON_CHARS]}, ensure_ascii=False)
