"""Scoring a page's k completions with the trainer's rewards, and the page's statistics.

The rewards are called as TRL 1.16's ``GRPOTrainer._calculate_rewards`` calls them
(trl/trainer/grpo_trainer.py:1579-1630): keyword arguments ``prompts``, ``completions`` (the
conversational form ``[{"role": "assistant", "content": text}]``, text decoded with
``skip_special_tokens=True``, grpo_trainer.py:2244-2245), ``completion_ids``, every dataset column
but the prompt and the images (:func:`olmpipe.job.data.reward_columns`), ``trainer_state``,
``log_extra`` and ``log_metric``. A reward's None becomes NaN; the total of a completion is the
weighted ``nansum`` over the reward functions, NaN when every function returned None
(grpo_trainer.py:2756-2763); the group's spread is TRL's ``nanstd`` (Bessel's correction,
trl/trainer/utils.py:1021-1046), computed in float32 with torch as the trainer does. A group
without signal is one whose totals are all equal (:func:`group_spread`; TRL's ``isclose(std, 0)``,
grpo_trainer.py:2788, misses some of them).

``completion_ids`` are rebuilt from the text: its tokens, plus an end token when the backend says
the completion stopped on one (what TRL's ids hold: the tokens up to and including the first EOS).
Of the registry's rewards only ``eos`` reads them, and only their last token
(:mod:`olmpipe.rewards.answer`).
"""

from __future__ import annotations

import json
import logging
import math
from collections import defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from olmpipe.generate.base import FAILURE_ERROR, FINISH_STOP
from olmpipe.job.data import PageExample, reward_columns
from olmpipe.records.difficulty import PageDifficulty
from olmpipe.records.generations import GenerationRecord

logger = logging.getLogger(__name__)

RewardFunc = Callable[..., list[float | None]]
#: Totals this close (relative to their size, at least 1) count as equal: float32 rounding of equal rewards.
EQUAL_RTOL = 1e-6


def _nanstd_rows(values: Any) -> Any:
    """TRL 1.16's ``nanstd(tensor, dim=1)`` (trl/trainer/utils.py:1021-1046), row by row."""
    import torch

    mean = torch.nanmean(values, dim=1, keepdim=True)
    variance = torch.nanmean((values - mean) ** 2, dim=1, keepdim=True)
    count = torch.sum(~torch.isnan(values), dim=1, keepdim=True)
    correction = count / (count - 1)
    correction = torch.where(count > 1, correction, torch.full_like(correction, float("nan")))
    return torch.sqrt(variance * correction).squeeze(1)


def group_spread(totals: Sequence[float | None]) -> tuple[float | None, float | None, bool]:
    """Mean, spread and zero-spread flag of one group's total rewards.

    Mean and spread are TRL's float32 ``nanmean`` and ``nanstd`` (Bessel's correction) over the
    numbers (None = NaN); the spread is None, and the flag False, with fewer than two numbers. The
    group has *zero spread* when its numbers are all equal (up to float32 rounding) or TRL's own
    test ``isclose(std, 0)`` says so. The first half matters: TRL's test misses constant groups
    whose mean float32 cannot hold exactly (eight totals of 2.6 have a float32 std of 2.5e-7, so
    ``frac_reward_zero_std`` does not count them; their advantages are a few thousandths, noise).

    >>> group_spread([1.0, 1.0, 1.0])
    (1.0, 0.0, True)
    >>> round(group_spread([0.0, 1.0])[1], 6), group_spread([0.0, 1.0])[2]
    (0.707107, False)
    """
    import torch

    numbers = [float(t) for t in totals if t is not None and not math.isnan(t)]
    if not numbers:
        return None, None, False
    values = torch.tensor([[math.nan if t is None else t for t in totals]], dtype=torch.float32)
    mean = float(torch.nanmean(values, dim=1)[0])
    if len(numbers) < 2:
        return mean, None, False
    std = _nanstd_rows(values)[0]
    equal = max(numbers) - min(numbers) <= EQUAL_RTOL * max(1.0, max(abs(n) for n in numbers))
    return mean, float(std), equal or bool(torch.isclose(std, torch.zeros_like(std)))


def weighted_totals(per_func: Sequence[Sequence[float | None]], weights: Sequence[float]) -> list[float | None]:
    """Each completion's total reward as TRL sums it: float32 ``nansum`` of weight x reward over the
    reward functions (grpo_trainer.py:2763), None when every function returned None."""
    import torch

    if not per_func:
        return []
    matrix = torch.tensor([[math.nan if v is None else v for v in column] for column in per_func],
                          dtype=torch.float32).T
    totals = (matrix * torch.tensor(weights, dtype=torch.float32).unsqueeze(0)).nansum(dim=1)
    unscorable = torch.isnan(matrix).all(dim=1)
    return [None if bad else float(total) for total, bad in zip(totals.tolist(), unscorable.tolist(), strict=True)]


class CompletionIds:
    """Token ids of a completion as TRL hands them to rewards, rebuilt from its text and finish reason."""

    def __init__(self, tokenizer: Any, eos_id: int | None):
        self.tokenizer = getattr(tokenizer, "tokenizer", tokenizer)
        self.eos_id = eos_id

    def __call__(self, record: GenerationRecord) -> list[int]:
        ids = list(self.tokenizer(record.raw, add_special_tokens=False)["input_ids"]) if record.raw else []
        if record.finish_reason == FINISH_STOP and self.eos_id is not None:
            ids.append(int(self.eos_id))
        return ids


def _verdict_lists(details: Sequence[Any]) -> list[list[dict[str, Any]] | None]:
    """The ``bench_verdicts`` column (one JSON string per completion) as lists of test verdicts."""
    out: list[list[dict[str, Any]] | None] = []
    for item in details:
        try:
            parsed = json.loads(item) if isinstance(item, str) else None
        except json.JSONDecodeError:
            parsed = None
        out.append([v for v in parsed if "id" in v] if isinstance(parsed, list) else None)
    return out


class SampleScorer:
    """Scores groups of completions with reward functions and turns each group into a :class:`PageDifficulty`.

    ``funcs`` and ``weights`` are the trainer's (``build_rewards(...).funcs``/``.weights``);
    ``completion_ids`` rebuilds token ids (:class:`CompletionIds`). :meth:`metrics` averages what
    the rewards log through ``log_metric`` (``bench/timeouts``, ``bench/pass_rate``, ...) over the
    calls, as TRL does between two logging steps.
    """

    def __init__(self, funcs: Sequence[RewardFunc], weights: Sequence[float],
                 completion_ids: Callable[[GenerationRecord], list[int]]):
        if len(funcs) != len(weights):
            raise ValueError(f"{len(funcs)} reward functions but {len(weights)} weights")
        self.funcs = list(funcs)
        self.weights = [float(w) for w in weights]
        self.names = [getattr(f, "__name__", type(f).__name__) for f in self.funcs]
        self.completion_ids = completion_ids
        self._logged: dict[str, list[float]] = defaultdict(list)

    def score(self, groups: Sequence[tuple[PageExample, Sequence[GenerationRecord]]]) -> list[PageDifficulty]:
        """One :class:`PageDifficulty` per ``(page, its k records)``; the rewards see all groups in one call.

        Records that failed in the backend are not scored (TRL never sees such a completion): their
        total is None and they count in ``errors``.
        """
        from olmpipe.prompts import build_messages

        rows: list[tuple[int, GenerationRecord]] = []
        for g, (_, records) in enumerate(groups):
            rows += [(g, r) for r in records if r.failure != FAILURE_ERROR]
        per_func: list[list[float | None]] = [[None] * len(rows) for _ in self.funcs]
        verdicts: list[list[dict[str, Any]] | None] = [None] * len(rows)
        if rows:
            columns: dict[str, list[Any]] = defaultdict(list)
            for g, _ in rows:
                for name, value in reward_columns(groups[g][0]).items():
                    columns[name].append(value)
            prompt = build_messages()
            extra: dict[str, list[Any]] = {}
            kwargs = {
                "prompts": [prompt] * len(rows),
                "completions": [[{"role": "assistant", "content": r.raw}] for _, r in rows],
                "completion_ids": [self.completion_ids(r) for _, r in rows],
                **columns,
                "trainer_state": None,
                "log_extra": lambda name, values: extra.__setitem__(name, list(values)),
                "log_metric": self._log_metric,
            }
            for i, func in enumerate(self.funcs):
                values = list(func(**kwargs))
                if len(values) != len(rows):
                    raise ValueError(f"reward {self.names[i]} returned {len(values)} rewards for {len(rows)} completions")
                per_func[i] = [None if v is None or math.isnan(float(v)) else float(v) for v in values]
            if "bench_verdicts" in extra:
                verdicts = _verdict_lists(extra["bench_verdicts"])
        totals = weighted_totals(per_func, self.weights) if rows else []
        out = []
        for g, (example, records) in enumerate(groups):
            idx = [i for i, (gg, _) in enumerate(rows) if gg == g]
            out.append(self._page(example, records, idx, totals, per_func, verdicts))
        return out

    def _log_metric(self, name: str, value: float) -> None:
        self._logged[name].append(float(value))

    def metrics(self) -> dict[str, float]:
        """Each metric the rewards logged, averaged over the reward calls (sorted by name)."""
        return {name: sum(values) / len(values) for name, values in sorted(self._logged.items())}

    def _page(self, example: PageExample, records: Sequence[GenerationRecord], idx: list[int],
              totals: list[float | None], per_func: list[list[float | None]],
              verdicts: list[list[dict[str, Any]] | None]) -> PageDifficulty:
        scored_rewards = iter(totals[i] for i in idx)  # rows hold the scored records in record order
        rewards = [None if r.failure == FAILURE_ERROR else next(scored_rewards) for r in records]
        mean, spread, zero = group_spread(rewards)
        by_reward = {}
        for name, column in zip(self.names, per_func, strict=True):
            values = [column[i] for i in idx if column[i] is not None]
            by_reward[name] = sum(values) / len(values) if values else None
        page_verdicts = [verdicts[i] for i in idx if verdicts[i]]
        tests: dict[str, float] = {}
        pass_rate = None
        all_pass = all_fail = False
        if page_verdicts:
            passed: dict[str, int] = defaultdict(int)
            seen: dict[str, int] = defaultdict(int)
            shares = []
            for verdict in page_verdicts:
                for v in verdict:
                    seen[v["id"]] += 1
                    passed[v["id"]] += int(bool(v["passed"]))
                shares.append(sum(bool(v["passed"]) for v in verdict) / len(verdict))
            tests = {test_id: passed[test_id] / seen[test_id] for test_id in sorted(seen)}
            pass_rate = sum(shares) / len(shares)
            all_pass = all(share == 1.0 for share in shares)
            all_fail = all(share == 0.0 for share in shares)
        return PageDifficulty(
            pdf=example.pdf,
            page=example.page,
            samples=len(records),
            scored=sum(r is not None for r in rewards),
            rewards=rewards,
            mean=mean,
            spread=spread,
            zero_spread=zero,
            by_reward=by_reward,
            pass_rate=pass_rate,
            tests=tests,
            all_pass=all_pass,
            all_fail=all_fail,
            jsonl_files=sorted({Path(f).name for f in example.test_files}),
            types=sorted(set(example.test_types)),
            no_eos=sum(r.finish_reason != FINISH_STOP for r in records),
            errors=sum(r.failure == FAILURE_ERROR for r in records),
        )
