"""The report's sections, each an HTML fragment from one record: the headline, the base -> SFT -> GRPO
chain, the score table, the guards (with the short-answer signal of training), the generation
settings of both runs and the difficulty filter. :mod:`olmpipe.report.page` puts them on the page.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from html import escape
from pathlib import Path
from typing import Any

from olmpipe.evaluate.compare import ComparisonError
from olmpipe.layout import DIFFICULTY_DROPPED, SFT_MODEL_DIR
from olmpipe.records.metrics import read_metrics
from olmpipe.records.scores import read_pipeline_counts
from olmpipe.rewards.bench_metrics import SHORT_HIGH_REWARD, SHORT_PASSES

__all__ = [
    "chain_section",
    "difficulty_section",
    "generation_section",
    "guards_section",
    "headline",
    "pct",
    "scores_table",
    "short_answer_rows",
]


def pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float], signed: bool = False) -> str:
    return f"[{pct(ci[0], signed)}, {pct(ci[1], signed)}]"


def headline(comparison: Mapping[str, Any]) -> str:
    """One sentence: the overall difference, its interval, the paired test and what they say."""
    r = next(r for r in comparison["rows"] if r["scope"] == "overall")
    level = round(100 * comparison["settings"]["ci_level"])
    alpha = 1 - comparison["settings"]["ci_level"]
    real = r["p_value"] < alpha and not (r["difference_ci"][0] <= 0 <= r["difference_ci"][1])
    if r["changed"] == 0:
        verdict = "No test changed its verdict: both models pass exactly the same tests."
    elif real:
        verdict = f"The difference is unlikely to be chance (p &lt; {alpha:.2g} and the interval excludes 0)."
    else:
        verdict = (
            "The difference could be chance at this sample size (the interval includes 0 or p is large)."
        )
    method = f", {r['test_method']}" if r["test_method"] != "none" else ""
    g = next((g for g in comparison["rows"] if g["scope"] == "guarded"), None)
    guarded = (f" With the short-answer guard (a pass through a fuzzy match inside a too-short answer fails): "
               f"{pct(g['baseline'])} &rarr; {pct(g['trained'])} ({pct(g['difference'], True)} points)."
               if g else "")
    return (
        f"Overall olmOCR-Bench score {pct(r['baseline'])} &rarr; <b>{pct(r['trained'])}</b> "
        f"({pct(r['difference'], True)} points, {level}% CI {_ci(r['difference_ci'], True)}, "
        f"paired sign-flip p = {r['p_value']:.3g}{method}; {r['tests']} tests). {verdict}{guarded}"
    )


def _score_cell(row: Mapping[str, Any], side: str) -> str:
    return f"{pct(row[side])} <small>{_ci(row[side + '_ci'])}</small>"


def _diff_cells(row: Mapping[str, Any]) -> str:
    cls = "pos" if row["difference_ci"][0] > 0 else "neg" if row["difference_ci"][1] < 0 else ""
    return (f"<td class='{cls}'>{pct(row['difference'], True)} <small>{_ci(row['difference_ci'], True)}</small></td>"
            f"<td>{row['p_value']:.3g}</td>")


def chain_section(sft_comparison: Mapping[str, Any] | None, comparison: Mapping[str, Any]) -> str:
    """Base -> SFT -> GRPO side by side (with an SFT stage): each score of the three models with its
    interval, and each stage's difference with its interval and paired p, from ``sft_comparison``
    (base vs the SFT model) and ``comparison`` (the SFT model vs GRPO, which started from it)."""
    if sft_comparison is None:
        return ""
    grpo = {(r["scope"], r["name"]): r for r in comparison["rows"]}
    level = round(100 * comparison["settings"]["ci_level"])
    names = (sft_comparison["baseline"]["name"], sft_comparison["trained"]["name"], comparison["trained"]["name"])
    head = (f"<tr><th>scope</th><th>name</th><th>tests</th><th>base: {escape(names[0])}</th>"
            f"<th>SFT: {escape(names[1])}</th><th>GRPO: {escape(names[2])}</th>"
            f"<th>SFT &minus; base ({level}% CI)</th><th>p</th><th>GRPO &minus; SFT ({level}% CI)</th><th>p</th></tr>")
    body = []
    for r in sft_comparison["rows"]:
        g = grpo.get((r["scope"], r["name"]))
        if g is None or r["scope"] == "jsonl":
            continue
        body.append(f"<tr class='{escape(r['scope'])}'><td>{escape(r['scope'])}</td><td>{escape(r['name'])}</td>"
                    f"<td>{r['tests']}</td><td>{_score_cell(r, 'baseline')}</td><td>{_score_cell(r, 'trained')}</td>"
                    f"<td>{_score_cell(g, 'trained')}</td>{_diff_cells(r)}{_diff_cells(g)}</tr>")
    sft_line = headline(sft_comparison).replace("Overall olmOCR-Bench score", "SFT: overall olmOCR-Bench score", 1)
    return (f"<h2>Base &rarr; SFT &rarr; GRPO</h2><p class='muted'>The chain on the held-out eval pages: the "
            f"base model, the SFT model ({SFT_MODEL_DIR}), and GRPO started from it. Each difference is "
            f"paired on the same tests (bootstrap interval, sign-flip p); the GRPO line above is GRPO against "
            f"the SFT model it started from.</p><p>{sft_line}</p><table>{head}{''.join(body)}</table>")


def scores_table(comparison: Mapping[str, Any]) -> str:
    level = round(100 * comparison["settings"]["ci_level"])
    head = ("<tr><th>scope</th><th>name</th><th>tests</th><th>baseline</th><th>trained</th>"
            f"<th>difference (points)</th><th>{level}% CI of difference</th><th>p (paired)</th>"
            "<th>gained</th><th>lost</th></tr>")  # fmt: skip
    body = []
    for r in comparison["rows"]:
        cls = "pos" if r["difference_ci"][0] > 0 else "neg" if r["difference_ci"][1] < 0 else ""
        body.append(
            f"<tr class='{r['scope']}'><td>{escape(r['scope'])}</td><td>{escape(r['name'])}</td>"
            f"<td>{r['tests']}</td>"
            f"<td>{pct(r['baseline'])} <small>{_ci(r['baseline_ci'])}</small></td>"
            f"<td>{pct(r['trained'])} <small>{_ci(r['trained_ci'])}</small></td>"
            f"<td class='{cls}'>{pct(r['difference'], True)}</td><td>{_ci(r['difference_ci'], True)}</td>"
            f"<td>{r['p_value']:.3g} <small>{escape(r['test_method'])}</small></td>"
            f"<td>{r['gained']}</td><td>{r['lost']}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def guards_section(guards: Mapping[str, Any]) -> str:
    g, length, eos = guards["gains"], guards["length"], guards["eos"]
    share = g["absent_share_of_gains"]

    def pages(items: Sequence[Mapping[str, Any]]) -> str:
        if not items:
            return "none"
        return ", ".join(f"{escape(i['pdf'])} p{i['page']} (repeats {i['repeats']})" for i in items)

    ratio = length["median_page_ratio"]
    outside = [f"{escape(p['pdf'])} p{p['page']} ({p['ratio']:.2f}x)" for p in length["pages_outside_limit"]]
    rows = [
        ("mean output length (characters)",
         f"{length['baseline_mean_chars']:.0f} &rarr; {length['trained_mean_chars']:.0f}"
         + (f"; median page ratio {ratio:.2f}" if ratio is not None else "")),
        ("pages with length change beyond the limit",
         ", ".join(outside) or "none"),
        ("tests gained / lost", f"{g['gained']} / {g['lost']}"),
        ("gained by type", escape(json.dumps(g["gained_by_type"])) or "-"),
        ("lost by type", escape(json.dumps(g["lost_by_type"])) or "-"),
        ("share of gains from <code>absent</code> tests", pct(share)),
        ("pages whose output became empty", pages(guards["became_empty"])),
        ("pages that lost their front matter", pages(guards["lost_front_matter"])),
        ("EOS rate (ended on EOS, not the length limit)",
         f"{pct(eos['baseline_rate'])} &rarr; {pct(eos['trained_rate'])}"),
        ("failed generations",
         f"{eos['baseline_failed']} &rarr; {eos['trained_failed']} of {eos['generations']}"),
    ]  # fmt: skip
    for run, seen in (guards.get("trained_pages") or {}).items():  # eval_run.on_trained_pages: flag
        rows.append((f"eval pages the {escape(run)} model was trained on (scored, flagged)",
                     ", ".join(f"{escape(p['pdf'])} p{p['page']}" for p in seen)))
    return "<table class='kv'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def short_answer_rows(metrics: Mapping[str, str | Path] | None) -> str:
    """Per seed, the training signal of answers that game the fuzzy matches (olmocr #461):
    ``bench/short_high_reward`` (completions much shorter than their page with a high unit-test
    reward) and ``bench/short_passes`` (tests passed through a too-short match), per logged step."""
    rows = []
    for label, path in sorted((metrics or {}).items()):
        records = read_metrics(path, error=ComparisonError)
        high = [(r.get("step"), r[SHORT_HIGH_REWARD]) for r in records
                if isinstance(r.get(SHORT_HIGH_REWARD), (int, float))]
        passes = [r[SHORT_PASSES] for r in records if isinstance(r.get(SHORT_PASSES), (int, float))]
        if not high:
            rows.append(f"<tr><td>{escape(label)}</td><td colspan='4' class='muted'>not logged</td></tr>")
            continue
        flagged = [step for step, value in high if value > 0]
        cls = " class='warn'" if flagged else ""
        first = f" (first: step {flagged[0]})" if flagged else ""
        most_passes = f"{max(passes):g}" if passes else "-"
        rows.append(f"<tr><td>{escape(label)}</td><td{cls}>{len(flagged)} of {len(high)}{first}</td>"
                    f"<td>{max(v for _, v in high):g}</td><td>{high[-1][1]:g}</td><td>{most_passes}</td></tr>")
    if not rows:
        return ""
    head = (f"<tr><th>seed</th><th>steps with <code>{SHORT_HIGH_REWARD}</code> &gt; 0</th><th>max</th>"
            f"<th>last step</th><th>max <code>{SHORT_PASSES}</code></th></tr>")
    return ("<h3>Training: short answers with a high reward</h3><p class='muted'>Completions much shorter "
            "than their page that still earned a high unit-test reward (per reward call), and tests passed "
            "only through a fuzzy match inside a too-short answer (counted as failed with "
            "<code>rewards.bench.short_answer_guard</code>): a run that starts to write less for more shows "
            f"here.</p><table>{head}{''.join(rows)}</table>")


def generation_section(baseline_dir: str | Path | None, trained_dir: str | Path | None) -> str:
    """How olmOCR's pipeline-compatible mode treated the pages of each run (``summary.json`` counts).

    One row per run: generations, accepted answers, generations retried on a rotated page image,
    kept answers made from a rotated image (by angle), last valid answers kept although their
    rotation flag stayed false, and fallback pages (scored with the fallback text).
    """
    runs = [("baseline", baseline_dir), ("trained", trained_dir)]
    counts = [(name, read_pipeline_counts(d) if d else None) for name, d in runs]
    if not any(c for _, c in counts):
        return "<p class='muted'>olmOCR pipeline-compatible mode off: one answer per page on the plain temperature ladder.</p>"
    head = ("<tr><th>run</th><th>generations</th><th>accepted</th><th>rotated and retried</th>"
            "<th>kept a rotation</th><th>kept last valid answer</th><th>fell back</th></tr>")  # fmt: skip
    rows = []
    for name, c in counts:
        if not c:
            rows.append(f"<tr><td>{name}</td><td colspan='6' class='muted'>mode off</td></tr>")
            continue
        angles = ", ".join(f"{n}&times;{escape(a)}&deg;" for a, n in c["rotated_by_angle"].items())
        errors = f" <small>({c['fallback_errors']} without text)</small>" if c["fallback_errors"] else ""
        rows.append(
            f"<tr><td>{name}</td><td>{c['generations']}</td><td>{c['accepted']}</td>"
            f"<td>{c['rotation_retried']}</td><td>{c['rotated']}{f' <small>({angles})</small>' if angles else ''}</td>"
            f"<td>{c['last_valid']}</td><td>{c['fallback']}{errors}</td></tr>"
        )
    return f"<table>{head}{''.join(rows)}</table>"


def _zero_spread_rows(metrics: Mapping[str, str | Path] | None) -> str:
    """Per seed: the share of training groups without reward spread (TRL's ``frac_reward_zero_std``)."""
    rows = []
    for label, path in sorted((metrics or {}).items()):
        values = [r["frac_reward_zero_std"] for r in read_metrics(path, error=ComparisonError)
                  if isinstance(r.get("frac_reward_zero_std"), (int, float))]
        if not values:
            rows.append(f"<tr><td>{escape(label)}</td><td colspan='4' class='muted'>not logged</td></tr>")
            continue
        rows.append(f"<tr><td>{escape(label)}</td><td>{len(values)}</td><td>{pct(sum(values) / len(values))}</td>"
                    f"<td>{pct(values[0])}</td><td>{pct(values[-1])}</td></tr>")
    if not rows:
        return "<p class='muted'>no training metrics</p>"
    head = ("<tr><th>seed</th><th>logged steps</th><th>zero-spread groups (mean)</th><th>first step</th>"
            "<th>last step</th></tr>")  # fmt: skip
    return f"<table>{head}{''.join(rows)}</table>"


def difficulty_section(difficulty: Mapping[str, Any] | None, metrics: Mapping[str, str | Path] | None) -> str:
    """The filter's counts (``filter.json``: kept, dropped per reason, JSONL file and test type) and
    the zero-spread share of the training groups of each seed."""
    training = "<h3>Training: share of groups without reward spread</h3>" + _zero_spread_rows(metrics)
    if difficulty is None:
        return ("<p>Off (<code>train.difficulty.enabled: false</code>): training read every train page. "
                "<code>snakemake difficulty</code> shows which pages would be dropped.</p>" + training)
    d = difficulty
    reasons = ", ".join(f"{n} {escape(r.replace('_', ' '))}" for r, n in d["dropped_by_reason"].items() if n) or "none"
    settings = d["settings"]
    window = (f"; pass-rate window [{settings['min_pass_rate']}, {settings['max_pass_rate']}]"
              if settings["min_pass_rate"] is not None or settings["max_pass_rate"] is not None else "")
    sampled = f"{d['sampled']} of {d['train_pages']} (k completions each, {d['difficulty_rollouts']} generations)"
    kept = (f"<b>{d['kept']}</b> / <b>{d['dropped']}</b> ({reasons}; {d['dropped_all_pass']} all pass, "
            f"{d['dropped_all_fail']} all fail)")
    zero = f"{pct(d['zero_spread_share'])} &rarr; {pct(d['zero_spread_share_kept'])} of the kept pages"
    rollouts = (f"{d['rollouts_per_epoch']} &rarr; {d['rollouts_per_epoch_kept']} "
                f"({d['rollouts_saved_per_epoch']} saved, {d['num_generations']} per page)")
    rows = [
        ("train pages sampled", sampled),
        ("kept / dropped", kept),
        ("filter", f"spread above {settings['min_spread']}{window}"),
        ("zero-spread share of sampled pages", zero),
        ("rollouts per epoch", rollouts),
    ]  # fmt: skip
    table = "<table class='kv'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"

    def by(key: str, title: str) -> str:
        body = "".join(
            f"<tr><td>{escape(name)}</td><td>{c['sampled']}</td><td>{c['dropped']}</td>"
            f"<td>{pct(c['dropped'] / c['sampled'] if c['sampled'] else None)}</td></tr>"
            for name, c in d[key].items()
        )
        return (f"<table><tr><th>{title}</th><th>pages sampled</th><th>dropped</th><th>share dropped</th></tr>"
                f"{body}</table>")

    return (table + "<h3>Dropped per JSONL file and test type</h3><p class='muted'>A page counts under every "
            f"JSONL file and test type it has tests of; the pages are listed with their reason in "
            f"{DIFFICULTY_DROPPED}.</p>" + by("by_jsonl", "JSONL file") + by("by_type", "test type")
            + training)
