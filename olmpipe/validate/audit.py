"""The trivial-answer audit: what answers that never read the page earn with the configured rewards.

A reward a policy can earn without reading the page is a reward GRPO can find. For every page of
the validated bench this scores eight such answers with the run's own rewards and weights
(:func:`olmpipe.rewards.build_rewards` on the ``rewards`` section, called as TRL calls them, with
the dataset columns the trainer builds, :func:`olmpipe.job.data.reward_columns`), once with the
short-answer guard off (olmOCR-Bench's reward) and once on (:mod:`olmpipe.bench.shortguard`):

==================  =========================================================================
``empty``           nothing
``whitespace``      spaces and newlines only
``one_char``        ``e``
``one_word``        ``The``
``front_matter``    the YAML front matter alone (the reference answer's when the page has one,
                    else a plain English page's), what the ``front_matter`` reward pays for
``front_matter_word``  the front matter and ``The``
``prompt``          the prompt, echoed
``repeated_word``   ``The`` repeated ``train.grpo.max_completion_length`` times (cut there: no EOS)
==================  =========================================================================

Every answer but ``repeated_word`` ends on EOS (``eos`` pays 1, a policy stopping at once); the
group of a page's completions is the answer alone, as a policy collapsed on it would have it
(``medoid`` pays 1). Each page's ``ceiling`` is what a full answer can earn with the same weights:
1 per selected reward (0.5 for ``front_matter`` without a reference answer whose front matter
parses: no field bonus), counting only rewards that score the page and positive weights. The
shares of the ceiling show how much of a page's reward is free; pages where a trivial answer earns
at least ``validate.audit.warn_share`` of it (with the guard as configured for training) are warned
about.

Run by the validate stage: rule ``validate_audit`` (``results/validate/audit.jsonl`` and
``audit.json``, :mod:`olmpipe.records.audit`) and ``olmpipe validate``, which prints
:func:`format_audit`::

    olmpipe validate --config config/config.yaml
"""

from __future__ import annotations

import copy
import json
import logging
import math
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.records.audit import AUDIT_SUMMARY_NAME, AuditRecord, write_audit, write_summary

logger = logging.getLogger(__name__)

#: The trivial answers, in the order they are scored and shown (see the module docstring).
ANSWERS = ("empty", "whitespace", "one_char", "one_word", "front_matter", "front_matter_word", "prompt",
           "repeated_word")
ONE_CHAR = "e"
ONE_WORD = "The"
WHITESPACE = " \n\n \t \n"
#: Token ids handed to the ``eos`` reward: an answer that stopped, and one cut at the length limit.
_EOS, _NOT_EOS = 0, 1
#: The guard settings audited, as they are named in the summary.
GUARDS = {"off": False, "on": True}
#: Pages listed by :func:`format_audit` (the highest shares first; all are in ``audit.json``).
SHOWN_PAGES = 30


class AuditError(ValueError):
    """The audit cannot run on its inputs (no pages, unreadable page index); the message says why."""


class _EosTokenizer:
    """What :class:`olmpipe.rewards.EosReward` needs of a tokenizer: the audit's end token id."""

    eos_token_id = _EOS


@dataclass(frozen=True)
class TrivialAnswer:
    """One trivial answer for one page: its name, text and whether it ends on EOS."""

    name: str
    text: str
    eos: bool = True


def trivial_answers(reference: str | None, max_completion_length: int) -> list[TrivialAnswer]:
    """The trivial answers of a page (:data:`ANSWERS` order); the front matter is the reference
    answer's when it has one that parses (every field bonus), else a plain English page's.

    >>> [a.name for a in trivial_answers(None, 4)] == list(ANSWERS)
    True
    >>> trivial_answers(None, 3)[-1].text
    'The The The'
    """
    from olmpipe.prompts import FrontMatter, build_prompt, format_page_output, parse_page_output

    front = parse_page_output(reference).front_matter if isinstance(reference, str) and reference else None
    front = front or FrontMatter("en", True, 0, False, False)
    return [
        TrivialAnswer("empty", ""),
        TrivialAnswer("whitespace", WHITESPACE),
        TrivialAnswer("one_char", ONE_CHAR),
        TrivialAnswer("one_word", ONE_WORD),
        TrivialAnswer("front_matter", format_page_output(front, "") + "\n"),
        TrivialAnswer("front_matter_word", format_page_output(front, ONE_WORD)),
        TrivialAnswer("prompt", build_prompt()),
        TrivialAnswer("repeated_word", " ".join([ONE_WORD] * max_completion_length), eos=False),
    ]


def _ceiling(name: str, reference: str | None) -> float:
    """The most reward ``name`` pays a full answer: 1, but 0.5 for ``front_matter`` without a
    reference whose front matter parses (no field bonus, :mod:`olmpipe.rewards.answer`)."""
    if name == "front_matter_reward":
        from olmpipe.prompts import parse_page_output
        from olmpipe.rewards.answer import FRONT_MATTER_FIELD_BONUS, FRONT_MATTER_PARSE_REWARD

        parsed = parse_page_output(reference).front_matter if isinstance(reference, str) and reference else None
        if parsed is None:
            return FRONT_MATTER_PARSE_REWARD
        from olmpipe.prompts import FRONT_MATTER_FIELDS

        return FRONT_MATTER_PARSE_REWARD + FRONT_MATTER_FIELD_BONUS * len(FRONT_MATTER_FIELDS)
    return 1.0


def _passed_ids(verdicts: Any) -> list[str] | None:
    """The passed test ids of one ``bench_verdicts`` entry (None: not scored)."""
    try:
        parsed = json.loads(verdicts) if isinstance(verdicts, str) else None
    except json.JSONDecodeError:
        return None
    if not isinstance(parsed, list):
        return None
    return [v["id"] for v in parsed if isinstance(v, dict) and "id" in v and v.get("passed")]


def _clean(value: Any) -> float | None:
    if value is None:
        return None
    value = float(value)
    return None if math.isnan(value) else value


def _score(funcs: Sequence[Any], examples: Sequence[Any], answers: Sequence[TrivialAnswer]
           ) -> tuple[list[list[float | None]], list[list[str] | None]]:
    """Each reward's values for one answer per example, called as TRL calls a reward (one call,
    every page), and the passed test ids the unit-test reward logged."""
    from olmpipe.job.data import reward_columns
    from olmpipe.prompts import build_messages

    columns: dict[str, list[Any]] = defaultdict(list)
    for example in examples:
        for name, value in reward_columns(example).items():
            columns[name].append(value)
    extra: dict[str, list[Any]] = {}
    kwargs = {
        "prompts": [build_messages() for _ in examples],
        "completions": [[{"role": "assistant", "content": a.text}] for a in answers],
        "completion_ids": [[_EOS] if a.eos else [_NOT_EOS] for a in answers],
        **columns,
        "trainer_state": None,
        "log_extra": lambda name, values: extra.__setitem__(name, list(values)),
        "log_metric": lambda name, value: None,
    }
    per_func = []
    for func in funcs:
        values = list(func(**kwargs))
        if len(values) != len(examples):
            raise AuditError(f"reward {func.__name__} returned {len(values)} values for {len(examples)} pages")
        per_func.append([_clean(v) for v in values])
    verdicts = extra.get("bench_verdicts")
    passed = [_passed_ids(v) for v in verdicts] if verdicts is not None else [None] * len(examples)
    return per_func, passed


def audit_examples(examples: Sequence[Any], rewards_cfg: Mapping[str, Any], *, max_completion_length: int,
                   splits: Sequence[str] | None = None) -> list[AuditRecord]:
    """One :class:`~olmpipe.records.audit.AuditRecord` per example (a
    :class:`olmpipe.job.data.PageExample`), trivial answer and guard setting (off, then on).

    ``splits`` gives each example's split (default ``"train"``).
    """
    from olmpipe.rewards.registry import build_rewards

    splits = list(splits) if splits is not None else ["train"] * len(examples)
    records: list[AuditRecord] = []
    if not examples:
        return records
    per_page = [trivial_answers(ex.reference, max_completion_length) for ex in examples]
    for guard in GUARDS.values():
        cfg = copy.deepcopy(dict(rewards_cfg))
        cfg["bench"] = {**cfg["bench"], "short_answer_guard": guard}
        rewards = build_rewards(cfg, tokenizer=_EosTokenizer())
        try:
            for k, answer_name in enumerate(ANSWERS):
                per_func, passed = _score(rewards.funcs, examples, [answers[k] for answers in per_page])
                for i, example in enumerate(examples):
                    values = {name: column[i] for name, column in zip(rewards.names, per_func, strict=True)}
                    scored = [(w, v) for w, v in zip(rewards.weights, values.values(), strict=True) if v is not None]
                    total = sum(w * v for w, v in scored) if scored else None
                    ceiling = sum(max(w, 0.0) * _ceiling(name, example.reference)
                                  for name, w, v in zip(rewards.names, rewards.weights, values.values(), strict=True)
                                  if v is not None)
                    records.append(AuditRecord(
                        pdf=example.pdf, page=example.page, split=splits[i], answer=answer_name, guard=guard,
                        total=total, ceiling=ceiling,
                        share=(total / ceiling) if total is not None and ceiling > 0 else None,
                        rewards=values, passed=passed[i], tests=len(example.test_ids),
                        types=dict(zip(example.test_ids, example.test_types, strict=True)),
                        jsonl_files={t: Path(f).name for t, f in zip(example.test_ids, example.test_files, strict=True)},
                    ))
        finally:
            rewards.close()
    return records


def _unit_test_reward(record: AuditRecord) -> float | None:
    """The record's unit-test reward (``bench``, else ``bench_macro``; None when neither is selected)."""
    for name in ("bench_reward", "bench_macro_reward"):
        if record.rewards.get(name) is not None:
            return record.rewards[name]
    return None


def _guard_name(guard: bool) -> str:
    return "on" if guard else "off"


def summarize(records: Sequence[AuditRecord], *, warn_share: float, guard: bool,
              settings: Mapping[str, Any]) -> dict[str, Any]:
    """The ``audit.json`` object of ``records``: per answer and guard setting, the best trivial
    answer per page, the tests a trivial answer passes per test type and JSONL file, and warnings
    for the pages where one earns at least ``warn_share`` of the ceiling with ``guard`` (training's)."""
    pages: dict[tuple[str, int], dict[str, list[AuditRecord]]] = defaultdict(lambda: {"off": [], "on": []})
    for r in records:
        pages[(r.pdf, r.page)][_guard_name(r.guard)].append(r)
    first = {key: sides["off"][0] for key, sides in pages.items() if sides["off"]}
    tests = {t: (kind, r.jsonl_files[t]) for r in first.values() for t, kind in r.types.items()}

    answers: dict[str, dict[str, Any]] = {}
    for name in ANSWERS:
        answers[name] = {}
        for side in GUARDS:
            rows = [r for sides in pages.values() for r in sides[side] if r.answer == name]
            totals = [r.total for r in rows if r.total is not None]
            shares = [r.share for r in rows if r.share is not None]
            answers[name][side] = {
                "mean_reward": sum(totals) / len(totals) if totals else None,
                "mean_share": sum(shares) / len(shares) if shares else None,
                "tests_passed": sum(len(r.passed or []) for r in rows),
                "pages_passing_a_test": sum(bool(r.passed) for r in rows),
            }

    best_pages = []
    for (pdf, page), sides in sorted(pages.items()):
        entry: dict[str, Any] = {"pdf": pdf, "page": page, "split": first[(pdf, page)].split,
                                 "tests": first[(pdf, page)].tests, "ceiling": first[(pdf, page)].ceiling}
        for side in GUARDS:
            scored = [r for r in sides[side] if r.total is not None]
            best = max(scored, key=lambda r: r.total, default=None)  # ties: the first in ANSWERS order
            units = [v for r in sides[side] if (v := _unit_test_reward(r)) is not None]
            entry[side] = None if best is None else {
                "answer": best.answer, "reward": best.total, "share": best.share, "passed": len(best.passed or []),
                # the highest unit-test reward any trivial answer earns on the page (None: no bench reward)
                "unit_test_reward": max(units, default=None)}
        best_pages.append(entry)

    def best_stats(side: str) -> dict[str, Any]:
        bests = [p[side] for p in best_pages if p[side] is not None]
        shares = [b["share"] for b in bests if b["share"] is not None]
        counts: dict[str, int] = defaultdict(int)
        for b in bests:
            counts[b["answer"]] += 1
        units = [b["unit_test_reward"] for b in bests if b["unit_test_reward"] is not None]
        return {
            "mean_reward": sum(b["reward"] for b in bests) / len(bests) if bests else None,
            "mean_unit_test_reward": sum(units) / len(units) if units else None,
            "mean_share": sum(shares) / len(shares) if shares else None,
            "max_share": max(shares, default=None),
            "pages_at_warn_share": sum(s >= warn_share for s in shares),
            "pages_passing_a_test": sum(b["passed"] > 0 for b in bests),
            "best_answer_pages": {name: counts[name] for name in ANSWERS if counts[name]},
        }

    def passed_by(key: int) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in sorted({v[key] for v in tests.values()}):
            ids = {t for t, v in tests.items() if v[key] == name}
            out[name] = {"tests": len(ids)}
            for side in GUARDS:
                rows = [r for sides in pages.values() for r in sides[side]]
                per_answer = {a: len(ids & {t for r in rows if r.answer == a for t in r.passed or []}) for a in ANSWERS}
                out[name][side] = {"any": len(ids & {t for r in rows for t in r.passed or []}), **per_answer}
        return out

    side = _guard_name(guard)
    flagged = sorted((p for p in best_pages if p[side] and p[side]["share"] is not None
                      and p[side]["share"] >= warn_share), key=lambda p: (-p[side]["share"], p["pdf"], p["page"]))
    warnings = []
    if flagged:
        shown = ", ".join(f"{p['pdf']} p{p['page']} ({p[side]['answer']}: {100 * p[side]['share']:.0f}%)"
                          for p in flagged[:10])
        more = f" and {len(flagged) - 10} more" if len(flagged) > 10 else ""
        warnings.append(f"on {len(flagged)} of {len(best_pages)} page(s) a trivial answer earns at least "
                        f"{100 * warn_share:.0f}% of a full answer's reward with the rewards as trained "
                        f"(short-answer guard {side}): {shown}{more}")
    return {
        "settings": dict(settings),
        "pages": len(best_pages),
        "tests": len(tests),
        "answers": answers,
        "best": {s: best_stats(s) for s in GUARDS},
        "by_type": passed_by(0),
        "by_jsonl": passed_by(1),
        "pages_best": best_pages,
        "warnings": warnings,
    }


def _num(value: float | None, pct: bool = False) -> str:
    if value is None:
        return "-"
    return f"{100 * value:.0f}%" if pct else f"{value:.2f}"


def _best_cell(best: Mapping[str, Any] | None) -> str:
    if best is None:
        return "-"
    unit = f", tests {_num(best['unit_test_reward'])}" if best["unit_test_reward"] is not None else ""
    return f"{best['answer']} {_num(best['reward'])} ({_num(best['share'], True)}{unit})"


def format_audit(summary: Mapping[str, Any], *, pages: int = SHOWN_PAGES) -> str:
    """The audit as a console table: per answer, the best per page, tests passed per type and JSONL
    file, the pages (highest share first, at most ``pages``) and the warnings; guard off -> on."""
    s = summary["settings"]
    weights = " + ".join(f"{name} {w:g}" for name, w in s["weights"].items() if w is not None)
    lines = [
        (f"Trivial-answer audit: {summary['pages']} pages, {summary['tests']} tests; rewards {weights} "
         f"(training: short-answer guard {'on' if s['short_answer_guard'] else 'off'}); each cell: guard off -> on"),
        f"{'answer':<20} {'reward':>14}  {'share of full':>15}  {'tests passed':>14}  {'pages passing':>14}",
    ]
    lines.append("-" * len(lines[-1]))

    def cell(a: Mapping[str, Any], key: str, pct: bool = False, width: int = 14) -> str:
        fmt = (lambda v: _num(v, pct)) if key.startswith("mean_") else str
        return f"{fmt(a['off'][key]) + ' -> ' + fmt(a['on'][key]):>{width}}"

    for name in ANSWERS:
        a = summary["answers"][name]
        lines.append(f"{name:<20} {cell(a, 'mean_reward')}  {cell(a, 'mean_share', True, 15)}  "
                     f"{cell(a, 'tests_passed')}  {cell(a, 'pages_passing_a_test')}")
    best = summary["best"]
    lines.append(f"{'best per page':<20} {cell(best, 'mean_reward')}  {cell(best, 'mean_share', True, 15)}  "
                 f"{'':>14}  {cell(best, 'pages_passing_a_test')}")
    if best["off"]["mean_unit_test_reward"] is not None:
        lines.append(f"{'  unit tests alone':<20} {cell(best, 'mean_unit_test_reward')}")
    for title, key in (("test type", "by_type"), ("JSONL file", "by_jsonl")):
        lines.append(f"Tests a trivial answer passes, per {title} (guard off -> on):")
        for name, row in summary[key].items():
            lines.append(f"  {name:<28} {row['off']['any']:>4} -> {row['on']['any']:<4} of {row['tests']}")
    rows = sorted(summary["pages_best"], key=lambda p: (-((p["off"] or {}).get("share") or 0.0), p["pdf"], p["page"]))
    lines.append("Best trivial answer per page: answer, reward (share of a full answer's, highest unit-test reward "
                 "of any trivial answer); guard off -> on:")
    for p in rows[:pages]:
        lines.append(f"  {p['pdf'] + ' p' + str(p['page']):<40} [{p['split']:<5}] full {_num(p['ceiling']):>5}: "
                     f"{_best_cell(p['off'])} -> {_best_cell(p['on'])}")
    if len(rows) > pages:
        lines.append(f"  ... and {len(rows) - pages} more pages ({AUDIT_SUMMARY_NAME}, pages_best)")
    lines += [f"WARNING: {w}" for w in summary["warnings"]]
    return "\n".join(lines)


def run_audit(cfg: Mapping[str, Any], *, pages_path: str | Path, tests_dir: str | Path,
              records_path: str | Path, summary_path: str | Path) -> dict[str, Any]:
    """The audit of the validated bench with the config's ``rewards``, ``train.grpo.max_completion_length``
    and ``validate.audit``: every page of both splits (with the reward filters training applies,
    :func:`olmpipe.job.data.build_examples`); writes ``audit.jsonl`` and ``audit.json`` and
    returns the summary (warnings are logged)."""
    from olmpipe.job.data import PageIndexError, build_examples

    rewards_cfg = cfg["rewards"]
    max_len = int(cfg["train"]["grpo"]["max_completion_length"])
    warn_share = float(cfg["validate"]["audit"]["warn_share"])
    examples, splits = [], []
    for split in ("train", "eval"):
        try:
            found, _ = build_examples(pages_path, tests_dir, split=split, types=rewards_cfg["bench"]["types"],
                                      jsonl_regex=rewards_cfg["bench"]["jsonl_regex"],
                                      reference_candidate=rewards_cfg["reference_candidate"])
        except PageIndexError as exc:
            raise AuditError(str(exc)) from None
        examples += found
        splits += [split] * len(found)
    logger.info("trivial-answer audit: %d pages, %d answers, guard off and on", len(examples), len(ANSWERS))
    records = audit_examples(examples, rewards_cfg, max_completion_length=max_len, splits=splits)
    settings = {"weights": dict(rewards_cfg["weights"]), "score_text": rewards_cfg["score_text"],
                "short_answer_guard": rewards_cfg["bench"]["short_answer_guard"], "warn_share": warn_share,
                "max_completion_length": max_len,
                "answers": {a.name: a.text[:80] for a in trivial_answers(None, max_len)}}
    summary = summarize(records, warn_share=warn_share, guard=rewards_cfg["bench"]["short_answer_guard"],
                        settings=settings)
    write_audit(records_path, records)
    write_summary(summary_path, summary)
    for warning in summary["warnings"]:
        logger.warning("audit: %s", warning)
    return summary
