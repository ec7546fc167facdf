"""The filter half of the difficulty stage: the training page index without the pages GRPO cannot learn from.

A GRPO group whose completions all get the same total reward has zero advantages: its generation
and backward pass teach nothing (TRL counts such groups as ``frac_reward_zero_std``). With
``train.difficulty.enabled`` training reads ``results/difficulty/train_pages.jsonl``: the page index
of the validate stage without the sampled train pages whose spread is not above
``train.difficulty.min_spread`` (zero-spread pages always go, as TRL's ``isclose(std, 0)`` judges
them) or whose pass rate lies outside ``[min_pass_rate, max_pass_rate]``. Nothing disappears
silently: every page left out is a line of ``dropped.jsonl`` with its reason, and ``filter.json``
counts them per reason, JSONL file and test type (the report shows it). Eval pages and pages whose
spread is unknown (fewer than two completions scored) are kept. The statistics are held to the
sampling run's ``summary.json`` (the pages it sampled): a sampled page without its line is an
error, and a train page the run did not sample (no tests after the reward filters, which the
trainer skips too) leaves the index as ``not_sampled``.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from olmpipe.difficulty.settings import DifficultyError, FilterSettings
from olmpipe.records.difficulty import (
    REASON_LOW_SPREAD,
    REASON_NOT_SAMPLED,
    REASON_PASS_RATE_HIGH,
    REASON_PASS_RATE_LOW,
    REASON_ZERO_SPREAD,
    REASONS,
    SAMPLED_PAGES_KEY,
    SUMMARY_NAME,
    DroppedPage,
    PageDifficulty,
    read_stats,
    read_summary,
    write_dropped,
    write_summary,
)
from olmpipe.records.pages import read_page_index, write_page_index_rows

logger = logging.getLogger(__name__)


def drop_reason(page: PageDifficulty, settings: FilterSettings) -> str | None:
    """Why ``page`` leaves the training set (one of :data:`~olmpipe.records.difficulty.REASONS`), or None.

    >>> from olmpipe.records.difficulty import PageDifficulty
    >>> p = PageDifficulty("a.pdf", 1, 4, 4, [1.0] * 4, 1.0, 0.0, True, {}, 1.0, {}, True, False)
    >>> drop_reason(p, FilterSettings())
    'zero_spread'
    """
    if page.spread is None:
        return None  # fewer than two scored completions: no evidence, the page stays
    if page.zero_spread:
        return REASON_ZERO_SPREAD
    if page.spread <= settings.min_spread:
        return REASON_LOW_SPREAD
    if page.pass_rate is not None:
        if settings.min_pass_rate is not None and page.pass_rate < settings.min_pass_rate:
            return REASON_PASS_RATE_LOW
        if settings.max_pass_rate is not None and page.pass_rate > settings.max_pass_rate:
            return REASON_PASS_RATE_HIGH
    return None


def filter_page_index(
    stats_path: str | Path,
    pages_index: str | Path,
    out_index: str | Path,
    dropped_path: str | Path,
    summary_path: str | Path,
    settings: FilterSettings,
    *,
    num_generations: int,
    batch_pages: int = 1,
    sampled: str | Path | None = None,
) -> dict[str, Any]:
    """Write the filtered page index, ``dropped.jsonl`` and ``filter.json``; returns the summary.

    ``num_generations`` (the GRPO group size) turns pages into rollouts in the summary; ``sampled``
    is the sampling run's ``summary.json`` (default: beside ``stats_path``). Raises
    :class:`DifficultyError` when the statistics name a page that is not a train page of the index
    (they belong to another index: run the difficulty stage again), when they lack a page the
    sampling run sampled (:func:`sampled_pages`), when a pass-rate window is set
    but no page has a pass rate (no bench reward selected), when every sampled page would be
    dropped (training would have nothing to learn from), and when fewer train pages than
    ``batch_pages`` would remain (:func:`olmpipe.difficulty.settings.training_batch_pages`: one
    generation batch of training; the trainer would stop before its first step). Nothing is
    written then; the message counts the drops per reason and names what can help.
    """
    stats = read_stats(stats_path, error=DifficultyError)
    index = read_page_index(pages_index, error=DifficultyError)
    train_keys = {(str(r["pdf"]), int(r["page"])) for r in index if r.get("split") == "train"}
    for page in stats:
        if page.key not in train_keys:
            raise DifficultyError(
                f"{stats_path}: {page.pdf} page {page.page} is not a train page of {pages_index}; "
                "the statistics belong to another page index: run the difficulty stage again"
            )
    sampled_keys = sampled_pages(stats_path, stats, Path(stats_path).with_name(SUMMARY_NAME) if sampled is None
                                 else sampled)
    if settings.uses_pass_rate and stats and all(p.pass_rate is None for p in stats):
        raise DifficultyError(
            "train.difficulty.min_pass_rate/max_pass_rate need the pages' pass rates, which come from a "
            "unit-test reward: select rewards.weights.bench or bench_macro, or unset the pass-rate window"
        )
    dropped: list[DroppedPage] = []
    for page in stats:
        reason = drop_reason(page, settings)
        if reason is not None:
            dropped.append(DroppedPage(
                pdf=page.pdf, page=page.page, reason=reason, spread=page.spread, mean=page.mean,
                pass_rate=page.pass_rate, all_pass=page.all_pass, all_fail=page.all_fail,
                jsonl_files=page.jsonl_files, types=page.types,
            ))
    counts = Counter(d.reason for d in dropped)
    if stats and len(dropped) == len(stats):
        raise DifficultyError(
            f"train.difficulty would drop all {len(stats)} sampled train pages ({_counts_text(counts)}): GRPO would "
            f"have nothing to learn from. {_advice(counts, settings)}"
        )
    for row in index:  # train pages the run did not sample: no tests after the reward filters
        key = (str(row["pdf"]), int(row["page"]))
        if row.get("split") == "train" and key not in sampled_keys:
            types = row.get("types") or {}
            dropped.append(DroppedPage(
                pdf=key[0], page=key[1], reason=REASON_NOT_SAMPLED, spread=None, mean=None, pass_rate=None,
                all_pass=False, all_fail=False, jsonl_files=sorted(set((row.get("jsonl_files") or {}).values())),
                types=sorted(set(types.values())),
            ))
    counts = Counter(d.reason for d in dropped)
    kept = len(train_keys) - len(dropped)
    if kept < batch_pages:
        raise DifficultyError(
            f"train.difficulty would keep {kept} of {len(train_keys)} train pages (dropped: {_counts_text(counts)}), "
            f"fewer than one generation batch of training takes ({batch_pages} pages: per_device_train_batch_size x "
            "training processes x steps_per_generation / num_generations), so training could not take a step. "
            f"{_advice(counts, settings)}; or add train pages or lower that batch. Nothing was written."
        )
    gone = {(d.pdf, d.page) for d in dropped}
    write_page_index_rows(out_index, (r for r in index if (str(r["pdf"]), int(r["page"])) not in gone))
    write_dropped(dropped_path, dropped)
    summary = summarize_filter(stats, dropped, settings, num_generations=num_generations,
                               train_pages=len(train_keys))
    write_summary(summary_path, summary)
    logger.info("difficulty filter: kept %d of %d sampled train pages, dropped %d (%s)", summary["kept"],
                summary["sampled"], summary["dropped"], _counts_text(Counter(summary["dropped_by_reason"])))
    return summary


def sampled_pages(stats_path: str | Path, stats: Sequence[PageDifficulty], summary_path: str | Path) -> set[tuple[str, int]]:
    """The pages the sampling run sampled (its ``summary.json``), which must be those of ``stats``.

    Raises :class:`DifficultyError` naming a sampled page without its line of ``stats.jsonl`` (a
    line deleted, the file cut short or taken from another run) or a line of a page the run did not
    sample; a summary of a release before the page list is held to its page count.
    """
    if not Path(summary_path).is_file():
        raise DifficultyError(f"no {SUMMARY_NAME} beside {stats_path} ({summary_path}): the statistics are not a "
                              "finished sampling run's; run the difficulty stage (difficulty_sample) again")
    summary = read_summary(summary_path, error=DifficultyError)
    have = {p.key for p in stats}
    again = ("; run the sampling again (snakemake -R difficulty_sample: it reuses every generation of its journal "
             "and scores again)")
    listed = summary.get(SAMPLED_PAGES_KEY)
    if listed is None:
        if summary.get("pages") != len(stats):
            raise DifficultyError(f"{stats_path} has {len(stats)} lines, but the sampling run scored "
                                  f"{summary.get('pages')} pages ({summary_path}): the statistics were cut short or "
                                  f"edited{again}")
        return have
    try:
        want = {(str(p["pdf"]), int(p["page"])) for p in listed}
    except (TypeError, KeyError, ValueError):
        raise DifficultyError(f"{summary_path}: {SAMPLED_PAGES_KEY} is not a list of {{pdf, page}}{again}") from None
    for pdf, page in sorted(want - have):
        raise DifficultyError(f"{stats_path} has no line for {pdf} page {page}, a page the sampling run sampled "
                              f"({summary_path} lists it): the statistics were cut short or edited{again}")
    for pdf, page in sorted(have - want):
        raise DifficultyError(f"{stats_path} has a line for {pdf} page {page}, which the sampling run did not sample "
                              f"({summary_path}): the statistics come from another run{again}")
    return want


def _advice(counts: Mapping[str, int], settings: FilterSettings) -> str:
    """What can keep more pages, given why they were dropped (only what would help)."""
    ways = []
    if counts.get(REASON_ZERO_SPREAD):
        ways.append("give the completions of a page different rewards: check rewards.weights and the sampling "
                    "(train.grpo.temperature, max_completion_length); a small weight of a graded reward such as "
                    "rewards.weights.medoid: 0.1 spreads every page (the embedded tiny model scores nearly every "
                    "completion alike: docs/difficulty.md)")
    if counts.get(REASON_LOW_SPREAD) and settings.min_spread > 0:
        ways.append(f"lower train.difficulty.min_spread (now {settings.min_spread})")
    if counts.get(REASON_PASS_RATE_LOW):
        ways.append(f"lower or unset train.difficulty.min_pass_rate (now {settings.min_pass_rate})")
    if counts.get(REASON_PASS_RATE_HIGH):
        ways.append(f"raise or unset train.difficulty.max_pass_rate (now {settings.max_pass_rate})")
    ways.append("disable train.difficulty")
    return "To keep more: " + "; ".join(ways)


def _counts_text(counts: Mapping[str, int]) -> str:
    return ", ".join(f"{n} {reason}" for reason, n in counts.items() if n) or "none"


def summarize_filter(stats: Sequence[PageDifficulty], dropped: Sequence[DroppedPage], settings: FilterSettings,
                     *, num_generations: int, train_pages: int) -> dict[str, Any]:
    """The ``filter.json`` object: what was kept and dropped, per reason, JSONL file and test type.

    ``kept`` is the filtered index's train pages; ``not_sampled`` the train pages the sampling run
    did not sample (dropped as such). Per JSONL file and per test type a sampled page counts once
    under each file and type it has tests of.
    ``zero_spread_share`` is the share of scored sampled pages whose k completions had no spread:
    the share of GRPO groups that would carry no signal without the filter, as the model stood
    before training; the filter leaves none of them in the index. Rollouts are per epoch:
    pages x ``num_generations``.
    """
    scored = [p for p in stats if p.spread is not None]
    zero = sum(p.zero_spread for p in scored)
    by_reason = {reason: 0 for reason in REASONS}
    by_reason.update(Counter(d.reason for d in dropped))
    unsampled = [d for d in dropped if d.reason == REASON_NOT_SAMPLED]
    dropped_sampled = [d for d in dropped if d.reason != REASON_NOT_SAMPLED]
    dropped_jsonl: Counter[str] = Counter(f for d in dropped_sampled for f in d.jsonl_files)
    dropped_type: Counter[str] = Counter(t for d in dropped_sampled for t in d.types)
    sampled_jsonl: Counter[str] = Counter(f for p in stats for f in p.jsonl_files)
    sampled_type: Counter[str] = Counter(t for p in stats for t in p.types)
    kept = train_pages - len(dropped)  # the train pages of the filtered index
    gone = {(d.pdf, d.page) for d in dropped}
    zero_kept = sum(p.zero_spread for p in scored if p.key not in gone)
    return {
        "settings": settings.to_json(),
        "train_pages": train_pages,
        "sampled": len(stats),
        "not_sampled": len(unsampled),
        "unscored_kept": len(stats) - len(scored),
        "kept": kept,
        "dropped": len(dropped),
        "dropped_by_reason": by_reason,
        "dropped_all_pass": sum(d.all_pass for d in dropped),
        "dropped_all_fail": sum(d.all_fail for d in dropped),
        "by_jsonl": {f: {"sampled": n, "dropped": dropped_jsonl.get(f, 0)} for f, n in sorted(sampled_jsonl.items())},
        "by_type": {t: {"sampled": n, "dropped": dropped_type.get(t, 0)} for t, n in sorted(sampled_type.items())},
        "zero_spread_share": round(zero / len(scored), 6) if scored else None,
        "zero_spread_share_kept": round(zero_kept / kept, 6) if kept else None,
        "num_generations": num_generations,
        "rollouts_per_epoch": len(stats) * num_generations,
        "rollouts_per_epoch_kept": kept * num_generations,
        "rollouts_saved_per_epoch": len(dropped_sampled) * num_generations,
        "difficulty_rollouts": sum(p.samples for p in stats),
    }
