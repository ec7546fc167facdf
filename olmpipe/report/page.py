"""The self-contained HTML report of a training run: did it get better, where, and is it real?

One page (``results/report/index.html``, no external files: plots and page images are embedded
as base64) with the headline difference and its interval, the reward-hacking warnings, the score
table (overall, per test type, per JSONL category), the plots, the guards, the difficulty filter
(pages dropped per JSONL file and test type) with the zero-spread share of the training groups, a sample of pages
(page image next to both outputs, with each test's verdict), the run configuration and the
software versions.

    olmpipe report                      # the workflow's files (olmpipe.layout), seeds of the config
    python -m olmpipe.report.page --comparison results/evaluate/comparison.json \\
        --plots results/report/plots --pages results/validate/pages.jsonl \\
        --tests results/validate/tests --out results/report/index.html

The reward plot reads each seed's ``results/train/seed<n>/model.metrics.jsonl``, from the workflow
(rule ``report_plots``) and from this command alike: the copy of the run's metrics written with its
final model, so the curves end at the weights that went into the soup. The live ``metrics.jsonl``
beside the checkpoints may belong to a run that is still going, was preempted or was restarted.
"""

from __future__ import annotations

import argparse
import base64
import io
import json
import logging
import math
import platform
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from olmpipe.bench.describe import describe_tests
from olmpipe.evaluate.compare import ComparisonError, read_comparison
from olmpipe.layout import DIFFICULTY_DROPPED, SFT_MODEL_DIR
from olmpipe.records.generations import GENERATIONS_NAME, read_generations
from olmpipe.records.metrics import read_metrics
from olmpipe.records.pages import read_page_index
from olmpipe.records.scores import read_pipeline_counts
from olmpipe.report.template import CSS, PAGE_TEMPLATE
from olmpipe.rewards.bench_metrics import SHORT_HIGH_REWARD, SHORT_PASSES

log = logging.getLogger(__name__)

SOFTWARE = ("olmpipe", "torch", "transformers", "trl", "accelerate", "snakemake", "vllm", "pypdfium2",
            "numpy", "matplotlib", "rapidfuzz")  # fmt: skip
PLOT_CAPTIONS = {
    "rewards": "Mean GRPO reward per training step for each seed (solid: total of all reward functions; "
    "dashed: the unit-test reward alone, the share of tests passed); circles mark the last step of each "
    "seed (the weights averaged into the soup); dash-dot: the soup's overall eval score, dotted: the "
    "baseline's.",
    "type_rates": "Share of tests passed per test type and overall, baseline vs trained, with bootstrap "
    "intervals.",
    "page_change": "Per eval page: change in the share of its tests passed (top) and change in output "
    "length (bottom; red marks pages flagged by a guard).",
    "sft_loss": "SFT, the stage before GRPO: loss on the answer tokens per step for each SFT seed (solid) and "
    "the share of answer tokens predicted right (dashed, right axis).",
}


@dataclass(frozen=True)
class ReportSettings:
    """Config section ``report``."""

    sample_pages: int = 6
    image_width: int = 480
    max_chars: int = 4000

    @classmethod
    def from_config(cls, cfg: Mapping[str, Any]) -> ReportSettings:
        r = cfg["report"]
        return cls(sample_pages=r["sample_pages"], image_width=r["image_width"], max_chars=r["max_chars"])


def software_versions() -> dict[str, str]:
    """Installed versions of the packages that shape the results (``not installed`` if absent)."""
    out = {"python": platform.python_version()}
    for name in SOFTWARE:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = "not installed"
    return out


def select_pages(pages: Sequence[Mapping[str, Any]], n: int) -> list[Mapping[str, Any]]:
    """Up to ``n`` pages: half the largest gains, half the largest losses, then the rest by |change|."""

    def name(p: Mapping[str, Any]) -> tuple[str, int]:
        return (p["pdf"], p["page"])

    gains = sorted((p for p in pages if p["change"] > 0), key=lambda p: (-p["change"], name(p)))
    losses = sorted((p for p in pages if p["change"] < 0), key=lambda p: (p["change"], name(p)))
    chosen = gains[: math.ceil(n / 2)] + losses[: n // 2]
    rest = sorted((p for p in pages if p not in chosen), key=lambda p: (-abs(p["change"]), name(p)))
    return chosen + rest[: max(0, n - len(chosen))]


def embed_png(path: str | Path, width: int | None = None) -> str:
    """A ``data:`` URI of the PNG at ``path``, downscaled to ``width`` pixels when wider."""
    data = Path(path).read_bytes()
    if width is not None:
        from PIL import Image

        with Image.open(io.BytesIO(data)) as img:
            if img.width > width:
                img = img.resize((width, max(1, round(img.height * width / img.width))))
                buf = io.BytesIO()
                img.save(buf, format="PNG", optimize=True)
                data = buf.getvalue()
    return "data:image/png;base64," + base64.b64encode(data).decode("ascii")


def _pct(x: float | None, signed: bool = False) -> str:
    if x is None:
        return "-"
    return f"{100 * x:+.1f}" if signed else f"{100 * x:.1f}%"


def _ci(ci: Sequence[float], signed: bool = False) -> str:
    return f"[{_pct(ci[0], signed)}, {_pct(ci[1], signed)}]"


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
               f"{_pct(g['baseline'])} &rarr; {_pct(g['trained'])} ({_pct(g['difference'], True)} points)."
               if g else "")
    return (
        f"Overall olmOCR-Bench score {_pct(r['baseline'])} &rarr; <b>{_pct(r['trained'])}</b> "
        f"({_pct(r['difference'], True)} points, {level}% CI {_ci(r['difference_ci'], True)}, "
        f"paired sign-flip p = {r['p_value']:.3g}{method}; {r['tests']} tests). {verdict}{guarded}"
    )


def _score_cell(row: Mapping[str, Any], side: str) -> str:
    return f"{_pct(row[side])} <small>{_ci(row[side + '_ci'])}</small>"


def _diff_cells(row: Mapping[str, Any]) -> str:
    cls = "pos" if row["difference_ci"][0] > 0 else "neg" if row["difference_ci"][1] < 0 else ""
    return (f"<td class='{cls}'>{_pct(row['difference'], True)} <small>{_ci(row['difference_ci'], True)}</small></td>"
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


def _scores_table(comparison: Mapping[str, Any]) -> str:
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
            f"<td>{_pct(r['baseline'])} <small>{_ci(r['baseline_ci'])}</small></td>"
            f"<td>{_pct(r['trained'])} <small>{_ci(r['trained_ci'])}</small></td>"
            f"<td class='{cls}'>{_pct(r['difference'], True)}</td><td>{_ci(r['difference_ci'], True)}</td>"
            f"<td>{r['p_value']:.3g} <small>{escape(r['test_method'])}</small></td>"
            f"<td>{r['gained']}</td><td>{r['lost']}</td></tr>"
        )
    return f"<table>{head}{''.join(body)}</table>"


def _guards_section(guards: Mapping[str, Any]) -> str:
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
        ("share of gains from <code>absent</code> tests", _pct(share)),
        ("pages whose output became empty", pages(guards["became_empty"])),
        ("pages that lost their front matter", pages(guards["lost_front_matter"])),
        ("EOS rate (ended on EOS, not the length limit)",
         f"{_pct(eos['baseline_rate'])} &rarr; {_pct(eos['trained_rate'])}"),
        ("failed generations",
         f"{eos['baseline_failed']} &rarr; {eos['trained_failed']} of {eos['generations']}"),
    ]  # fmt: skip
    for run, seen in (guards.get("trained_pages") or {}).items():  # eval_run.on_trained_pages: flag
        rows.append((f"eval pages the {escape(run)} model was trained on (scored, flagged)",
                     ", ".join(f"{escape(p['pdf'])} p{p['page']}" for p in seen)))
    return "<table class='kv'>" + "".join(f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in rows) + "</table>"


def _short_answer_rows(metrics: Mapping[str, str | Path] | None) -> str:
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


def _generation_section(baseline_dir: str | Path | None, trained_dir: str | Path | None) -> str:
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
        rows.append(f"<tr><td>{escape(label)}</td><td>{len(values)}</td><td>{_pct(sum(values) / len(values))}</td>"
                    f"<td>{_pct(values[0])}</td><td>{_pct(values[-1])}</td></tr>")
    if not rows:
        return "<p class='muted'>no training metrics</p>"
    head = ("<tr><th>seed</th><th>logged steps</th><th>zero-spread groups (mean)</th><th>first step</th>"
            "<th>last step</th></tr>")  # fmt: skip
    return f"<table>{head}{''.join(rows)}</table>"


def _difficulty_section(difficulty: Mapping[str, Any] | None, metrics: Mapping[str, str | Path] | None) -> str:
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
    zero = f"{_pct(d['zero_spread_share'])} &rarr; {_pct(d['zero_spread_share_kept'])} of the kept pages"
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
            f"<td>{_pct(c['dropped'] / c['sampled'] if c['sampled'] else None)}</td></tr>"
            for name, c in d[key].items()
        )
        return (f"<table><tr><th>{title}</th><th>pages sampled</th><th>dropped</th><th>share dropped</th></tr>"
                f"{body}</table>")

    return (table + "<h3>Dropped per JSONL file and test type</h3><p class='muted'>A page counts under every "
            f"JSONL file and test type it has tests of; the pages are listed with their reason in "
            f"{DIFFICULTY_DROPPED}.</p>" + by("by_jsonl", "JSONL file") + by("by_type", "test type")
            + training)


def _first_texts(run_dir: str | Path | None) -> dict[tuple[str, int], tuple[str, int]]:
    """(pdf, page) -> (text of the lowest repeat, number of repeats) of a run's generations."""
    if run_dir is None or not (Path(run_dir) / GENERATIONS_NAME).is_file():
        return {}
    out: dict[tuple[str, int], tuple[int, str, int]] = {}
    for g in read_generations(Path(run_dir) / GENERATIONS_NAME, error=ComparisonError):
        key, g_repeat, g_text = (str(g["pdf"]), int(g["page"])), int(g["repeat"]), str(g["text"] or "")
        repeat, text, n = out.get(key, (g_repeat, g_text, 0))
        out[key] = (repeat, text, n + 1) if repeat <= g_repeat else (g_repeat, g_text, n + 1)
    return {k: (text, n) for k, (_, text, n) in out.items()}


def _page_images(pages_index: str | Path | None) -> dict[tuple[str, int], str]:
    if pages_index is None or not Path(pages_index).is_file():
        return {}
    records = read_page_index(pages_index, required=("pdf", "page", "image"), error=ComparisonError)
    return {(str(rec["pdf"]), int(rec["page"])): str(rec["image"]) for rec in records}


def _text_block(text: str | None, repeats: int, max_chars: int) -> str:
    if text is None:
        return "<p class='muted'>no generation found</p>"
    shown = text if len(text) <= max_chars else text[:max_chars]
    note = f" (first {max_chars} of {len(text)} characters)" if len(text) > max_chars else ""
    empty = "<p class='warn'>empty output</p>" if not text.strip() else ""
    return f"<p class='muted'>repeat shown: first of {repeats}{note}</p>{empty}<pre>{escape(shown)}</pre>"


def _verdict(passes: int, repeats: int, passed: bool) -> str:
    return (
        f"<span class='{'ok' if passed else 'bad'}'>{'pass' if passed else 'fail'} {passes}/{repeats}</span>"
    )


def _page_samples(comparison, settings, pages_index, baseline_dir, trained_dir, descriptions) -> str:
    chosen = select_pages(comparison["pages"], settings.sample_pages)
    if not chosen:
        return "<p class='muted'>no pages sampled</p>"
    images = _page_images(pages_index)
    base_texts, trained_texts = _first_texts(baseline_dir), _first_texts(trained_dir)
    blocks = []
    for p in chosen:
        key = (p["pdf"], p["page"])
        image = images.get(key)
        if image and Path(image).is_file():
            img_html = f"<img src='{embed_png(image, settings.image_width)}' alt='page image'>"
        else:
            img_html = f"<p class='muted'>page image not found{': ' + escape(image) if image else ''}</p>"
        flags = []
        if p["became_empty_repeats"]:
            flags.append(f"output became empty (repeats {p['became_empty_repeats']})")
        if p["lost_front_matter_repeats"]:
            flags.append(f"front matter lost (repeats {p['lost_front_matter_repeats']})")
        if p["length_outside_limit"]:
            flags.append(f"length ratio {p['length_ratio']:.2f}")
        rows = []
        for t in (t for t in comparison["tests"] if (t["pdf"], t["page"]) == key):
            reason = (f"trained: {t['trained_reason']}" if t["trained_reason"] and not t["trained_passed"]
                      else f"baseline: {t['baseline_reason']}" if t["baseline_reason"]
                      else f"trained: {t['trained_reason']}" if t["trained_reason"] else "")  # fmt: skip
            rows.append(
                f"<tr><td>{escape(t['test_id'])}</td><td>{escape(t['type'])}</td>"
                f"<td>{escape(descriptions.get(t['test_id'], ''))}</td>"
                f"<td>{_verdict(t['baseline_passes'], t['baseline_repeats'], t['baseline_passed'])}</td>"
                f"<td>{_verdict(t['trained_passes'], t['trained_repeats'], t['trained_passed'])}</td>"
                f"<td><small>{escape(reason[:200])}</small></td></tr>"
            )
        b_text, b_n = base_texts.get(key, (None, 0))
        t_text, t_n = trained_texts.get(key, (None, 0))
        blocks.append(
            f"<section class='page'><h3>{escape(p['pdf'])} page {p['page']}: "
            f"{p['baseline_passed']}/{p['tests']} &rarr; {p['trained_passed']}/{p['tests']} tests passed "
            f"({_pct(p['change'], True)} points)</h3>"
            + (f"<p class='warn'>{escape('; '.join(flags))}</p>" if flags else "")
            + "<div class='cols'>"
            f"<div><h4>page</h4>{img_html}</div>"
            f"<div><h4>baseline: {escape(comparison['baseline']['name'])}</h4>"
            f"{_text_block(b_text, b_n, settings.max_chars)}</div>"
            f"<div><h4>trained: {escape(comparison['trained']['name'])}</h4>"
            f"{_text_block(t_text, t_n, settings.max_chars)}</div>"
            "</div><table class='tests'><tr><th>test</th><th>type</th><th>checks</th><th>baseline</th>"
            "<th>trained</th><th>reason (first failing repeat of the run named)</th></tr>"
            f"{''.join(rows)}</table></section>"
        )
    return "".join(blocks)


def build_report(
    comparison: Mapping[str, Any],
    plots: Mapping[str, str | Path],
    settings: ReportSettings,
    config: Mapping[str, Any] | None = None,
    pages_index: str | Path | None = None,
    tests_dir: str | Path | None = None,
    baseline_dir: str | Path | None = None,
    trained_dir: str | Path | None = None,
    difficulty: Mapping[str, Any] | None = None,
    metrics: Mapping[str, str | Path] | None = None,
    sft_comparison: Mapping[str, Any] | None = None,
) -> str:
    """The report as one HTML string (see the module docstring for its sections).

    Run folders default to the ``dir`` recorded in the comparison. ``difficulty`` is the difficulty
    filter's ``filter.json`` (None: the filter was off) and ``metrics`` maps each seed to its
    training metrics (for the share of groups without reward spread); ``sft_comparison`` (base vs
    the SFT model, with an SFT stage) adds the base -> SFT -> GRPO section.
    """
    baseline_dir = baseline_dir or comparison["baseline"]["dir"]
    trained_dir = trained_dir or comparison["trained"]["dir"]
    warnings = comparison["guards"]["warnings"]
    warn_html = (
        "<div class='warnbox'><b>Reward-hacking guards:</b><ul>"
        + "".join(f"<li>{escape(w)}</li>" for w in warnings) + "</ul></div>"
        if warnings else "<p class='ok'>No reward-hacking guard fired.</p>"
    )  # fmt: skip
    figures = "".join(
        f"<figure><img src='{embed_png(path)}' alt='{escape(name)}'>"
        f"<figcaption>{escape(PLOT_CAPTIONS.get(name, name))}</figcaption></figure>"
        for name, path in plots.items()
    )
    versions = software_versions()
    settings_json = escape(json.dumps(comparison["settings"], indent=1))
    return PAGE_TEMPLATE.format(
        css=CSS,
        title=escape(f"{comparison['trained']['name']} vs {comparison['baseline']['name']}"),
        generated=datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        headline=headline(comparison),
        warnings=warn_html,
        chain=chain_section(sft_comparison, comparison),
        scores=_scores_table(comparison),
        figures=figures or "<p class='muted'>no plots</p>",
        guards=_guards_section(comparison["guards"]) + _short_answer_rows(metrics),
        generation=_generation_section(baseline_dir, trained_dir),
        difficulty=_difficulty_section(difficulty, metrics),
        samples=_page_samples(
            comparison, settings, pages_index, baseline_dir, trained_dir, describe_tests(tests_dir)
        ),
        runs=escape(f"baseline: {baseline_dir}\ntrained:  {trained_dir}"),
        stats=settings_json,
        config=escape(yaml.safe_dump(dict(config), sort_keys=False)) if config else "(not recorded)",
        versions="".join(f"<tr><th>{escape(k)}</th><td>{escape(v)}</td></tr>" for k, v in versions.items()),
    )


def write_report(out: str | Path, **kwargs: Any) -> Path:
    """Build the report (:func:`build_report` arguments) and write it to ``out``."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(build_report(**kwargs), encoding="utf-8")
    log.info("report written to %s (%.0f kB)", out, out.stat().st_size / 1024)
    return out


def main(argv: list[str] | None = None) -> int:
    """``python -m olmpipe.report.page``: plots + HTML report from an existing comparison."""
    from olmpipe.config import load_config
    from olmpipe.layout import (
        COMPARISON_JSON,
        DIFFICULTY_FILTER,
        PAGE_INDEX,
        PLOTS_DIR,
        REPORT_HTML,
        SFT_COMPARISON_JSON,
        VALIDATED_TESTS,
        final_metrics,
        sft_run_dir,
        train_run_dir,
    )
    from olmpipe.records.difficulty import read_summary
    from olmpipe.report.plots import write_plots

    parser = argparse.ArgumentParser(prog="olmpipe report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default=None, help="config YAML (default config/config.yaml)")
    parser.add_argument("--comparison", default=str(COMPARISON_JSON), help="default: %(default)s")
    parser.add_argument(
        "--metrics",
        nargs="*",
        default=None,
        help=f"training metrics files (default: {final_metrics(train_run_dir('<seed>'))} of each of the "
        "config's train.seeds, as the workflow reads them)",
    )
    parser.add_argument("--plots", default=str(PLOTS_DIR), help="folder the PNGs are written to (default: %(default)s)")
    parser.add_argument("--pages", default=str(PAGE_INDEX), help="page index (page images; default: %(default)s)")
    parser.add_argument("--tests", default=str(VALIDATED_TESTS), help="validated test files (default: %(default)s)")
    parser.add_argument("--difficulty", default=None,
                        help=f"the difficulty filter's counts (default: {DIFFICULTY_FILTER} "
                             "with train.difficulty.enabled)")
    parser.add_argument("--out", default=str(REPORT_HTML), help="default: %(default)s")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        cfg = load_config(args.config)
        comparison = read_comparison(args.comparison)
        metrics = args.metrics
        if metrics is None:
            metrics = [final_metrics(train_run_dir(seed)) for seed in cfg["train"]["seeds"]]
        labelled = {Path(m).parent.name: m for m in metrics}
        sft = cfg["sft"]["enabled"]
        sft_metrics = {f"sft {Path(m).parent.name}": m for m in
                       (final_metrics(sft_run_dir(seed)) for seed in cfg["sft"]["seeds"])} if sft else None
        plots = write_plots(comparison, labelled, args.plots, sft_metrics)
        difficulty = args.difficulty or (str(DIFFICULTY_FILTER) if cfg["train"]["difficulty"]["enabled"] else None)
        write_report(args.out, comparison=comparison, plots=plots, settings=ReportSettings.from_config(cfg),
                     config=cfg, pages_index=args.pages, tests_dir=args.tests, metrics=labelled,
                     difficulty=read_summary(difficulty, error=ComparisonError) if difficulty else None,
                     sft_comparison=read_comparison(SFT_COMPARISON_JSON) if sft else None)  # fmt: skip
    except (ComparisonError, OSError, ValueError) as exc:
        log.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
