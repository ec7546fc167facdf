"""The report's figures (PNG, matplotlib's Agg canvas, no pyplot global state).

- :func:`plot_rewards`: mean training reward per step for every seed, the last step of each seed
  (the checkpoints averaged into the soup) marked, and the soup's eval score as a line beside the
  baseline's, so training reward and held-out result read on one 0-1 axis;
- :func:`plot_type_rates`: pass rate per test type (and overall) before and after, with the
  bootstrap intervals of the comparison;
- :func:`plot_page_change`: per eval page, the change in share of tests passed, and below it the
  change in output length (a reward-hacking guard);
- :func:`plot_sft`: with an SFT stage, each SFT seed's loss (and token accuracy) per step, the
  first stage's curve beside GRPO's reward curve.

Each function writes one PNG and returns its path; all take plain data (the comparison's JSON
form, metric records) so they can be tested with hand-made numbers.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from olmpipe.layout import SFT_PLOT, plot_path
from olmpipe.records.metrics import read_metrics

log = logging.getLogger(__name__)

BASE_COLOR, TRAINED_COLOR = "#8c8c8c", "#1f77b4"
GAIN_COLOR, LOSS_COLOR = "#2ca02c", "#d62728"
# metric names tried in order for the step, the total mean reward (the weighted sum of all reward
# functions, TRL's `reward`) and the unit-test reward alone (share of tests passed, the scale of
# the eval scores) of a metrics.jsonl line
STEP_KEYS = ("step", "global_step")
REWARD_KEYS = ("reward", "train/reward")
BENCH_KEYS = ("rewards/bench_reward/mean", "rewards/bench_macro_reward/mean", "bench/pass_rate")
# the total reward on the eval split during training (``train.grpo.eval_strategy``), when logged
EVAL_KEYS = ("eval_reward", "eval/reward")
# an SFT run's training loss and its share of answer tokens predicted right (TRL's SFTTrainer logs)
LOSS_KEYS = ("loss", "train/loss")
TOKEN_ACCURACY_KEYS = ("mean_token_accuracy", "train/mean_token_accuracy")


class PlotError(ValueError):
    """Input a plot cannot be drawn from; the message names the file and line."""


def read_reward_curve(path: str | Path, keys: Sequence[str] = REWARD_KEYS) -> list[tuple[float, float]]:
    """(step, value) pairs of a training ``metrics.jsonl`` for the first of ``keys`` a line has.

    Lines without such a value (evaluation or end-of-training logs) are skipped.
    """
    if not Path(path).exists():
        raise PlotError(f"{path}: file not found")
    points = []
    for rec in read_metrics(path, error=PlotError):
        step = next((rec[k] for k in STEP_KEYS if isinstance(rec.get(k), (int, float))), None)
        value = next((rec[k] for k in keys if isinstance(rec.get(k), (int, float))), None)
        if step is not None and value is not None and math.isfinite(value):
            points.append((float(step), float(value)))
    return sorted(points)


def _save(fig: Figure, out: str | Path) -> Path:
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    FigureCanvasAgg(fig)
    fig.savefig(out, dpi=100, metadata={"Software": None})
    return out


def plot_rewards(
    curves: Mapping[str, Sequence[tuple[float, float]]],
    out: str | Path,
    soup_score: float | None = None,
    baseline_score: float | None = None,
    bench_curves: Mapping[str, Sequence[tuple[float, float]]] | None = None,
    eval_curves: Mapping[str, Sequence[tuple[float, float]]] | None = None,
) -> Path:
    """Reward per step for each seed (``curves``: label -> points), the soup marked.

    ``bench_curves`` (same labels) are the unit-test reward alone, drawn dashed in the seed's
    colour; ``eval_curves`` the total reward on the eval split during training, drawn as squares
    on a dotted line. The last point of each seed is circled (the weights that go into the soup);
    ``soup_score`` and ``baseline_score`` (eval overall scores) are drawn as horizontal lines.
    """
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    bench_curves = bench_curves or {}
    for label, points in curves.items():
        if not points:
            continue
        xs, ys = zip(*points)
        (line,) = ax.plot(xs, ys, marker=".", linewidth=1.2, label=f"{label}: total reward")
        ax.plot([xs[-1]], [ys[-1]], marker="o", markersize=10, markerfacecolor="none",
                markeredgecolor=line.get_color(), markeredgewidth=2)  # fmt: skip
        if bench_curves.get(label):
            bx, by = zip(*bench_curves[label])
            ax.plot(bx, by, linestyle="--", linewidth=1, color=line.get_color(),
                    label=f"{label}: unit-test reward")  # fmt: skip
        if (eval_curves or {}).get(label):
            ex, ey = zip(*eval_curves[label])
            ax.plot(ex, ey, linestyle=":", marker="s", linewidth=1, color=line.get_color(),
                    label=f"{label}: eval reward")  # fmt: skip
    if soup_score is not None:
        ax.axhline(soup_score, color="black", linestyle="-.", linewidth=1.5,
                   label=f"soup, eval overall {100 * soup_score:.1f}%")  # fmt: skip
    if baseline_score is not None:
        ax.axhline(baseline_score, color=BASE_COLOR, linestyle=":", linewidth=1.5,
                   label=f"baseline, eval overall {100 * baseline_score:.1f}%")  # fmt: skip
    if not any(curves.values()):
        ax.text(0.5, 0.5, "no reward logged", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("training step")
    ax.set_ylabel("mean reward per completion / eval score")
    ax.set_title("GRPO reward per step (circles: checkpoints averaged into the soup)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="best")
    return _save(fig, out)


def plot_sft(losses: Mapping[str, Sequence[tuple[float, float]]], out: str | Path,
             accuracies: Mapping[str, Sequence[tuple[float, float]]] | None = None) -> Path:
    """The SFT runs' loss per step (``losses``: seed label -> points; left axis) and, dashed on the
    right axis, their share of answer tokens predicted right (``accuracies``)."""
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    right = ax.twinx()
    for label, points in losses.items():
        if not points:
            continue
        xs, ys = zip(*points)
        (line,) = ax.plot(xs, ys, marker=".", linewidth=1.2, label=f"{label}: loss")
        if (accuracies or {}).get(label):
            bx, by = zip(*accuracies[label])
            right.plot(bx, by, linestyle="--", linewidth=1, color=line.get_color(), label=f"{label}: token accuracy")
    if not any(losses.values()):
        ax.text(0.5, 0.5, "no loss logged", transform=ax.transAxes, ha="center", va="center")
    ax.set_xlabel("SFT step")
    ax.set_ylabel("loss (answer tokens)")
    right.set_ylabel("token accuracy")
    right.set_ylim(0, 1)
    ax.set_title("SFT loss per step (dashed: share of answer tokens predicted right)")
    ax.grid(alpha=0.3)
    handles = ax.get_legend_handles_labels()
    extra = right.get_legend_handles_labels()
    if handles[0] or extra[0]:
        ax.legend(handles[0] + extra[0], handles[1] + extra[1], fontsize=8, loc="best")
    return _save(fig, out)


def _error(row: Mapping[str, Any], run: str) -> tuple[float, float]:
    lo, hi = row[f"{run}_ci"]
    return max(0.0, row[run] - lo), max(0.0, hi - row[run])


def plot_type_rates(comparison: Mapping[str, Any], out: str | Path) -> Path:
    """Bars of the pass rate per test type (and overall), baseline vs trained, with intervals."""
    rows = [r for r in comparison["rows"] if r["scope"] in ("overall", "type")]
    labels = [f"{r['name']}\n(n={r['tests']})" for r in rows]
    fig = Figure(figsize=(max(7.0, 1.2 * len(rows) + 2), 4), layout="constrained")
    ax = fig.add_subplot()
    width = 0.38
    for k, (run, color) in enumerate((("baseline", BASE_COLOR), ("trained", TRAINED_COLOR))):
        xs = [i + (k - 0.5) * width for i in range(len(rows))]
        errs = [_error(r, run) for r in rows]
        ax.bar(xs, [100 * r[run] for r in rows], width, color=color,
               label=comparison[run]["name"] + f" ({run})",
               yerr=[[100 * e[0] for e in errs], [100 * e[1] for e in errs]], capsize=3)  # fmt: skip
    ax.set_xticks(range(len(rows)), labels, fontsize=8)
    ax.set_ylim(0, 105)
    ax.set_ylabel("tests passed (%)")
    level = round(100 * comparison["settings"]["ci_level"])
    ax.set_title(f"Pass rate per test type, before and after ({level}% bootstrap intervals)", fontsize=10)
    ax.grid(axis="y", alpha=0.3)
    ax.legend(fontsize=8)
    return _save(fig, out)


def _short(pdf: str, width: int = 22) -> str:
    """A PDF id short enough for an axis label: file name without ``.pdf``, middle elided."""
    name = pdf.rsplit("/", 1)[-1].removesuffix(".pdf")
    return name if len(name) <= width else f"{name[: width // 2 - 1]}...{name[-(width // 2 - 2) :]}"


def plot_page_change(comparison: Mapping[str, Any], out: str | Path) -> Path:
    """Per-page change in share of tests passed (top) and output length ratio (bottom)."""
    pages = sorted(comparison["pages"], key=lambda p: (p["change"], p["pdf"], p["page"]))
    n = len(pages)
    fig = Figure(figsize=(max(7.0, 0.25 * n + 2), 7), layout="constrained")
    top, bottom = fig.subplots(2, 1, sharex=True)
    xs = list(range(n))
    colors = [GAIN_COLOR if p["change"] > 0 else LOSS_COLOR if p["change"] < 0 else BASE_COLOR for p in pages]
    top.bar(xs, [100 * p["change"] for p in pages], color=colors)
    top.axhline(0, color="black", linewidth=0.8)
    top.set_ylim(
        min(-10.0, *(100 * p["change"] - 5 for p in pages)),
        max(10.0, *(100 * p["change"] + 5 for p in pages)),
    )
    top.set_ylabel("change in tests passed\n(percentage points)")
    gained = sum(p["change"] > 0 for p in pages)
    lost = sum(p["change"] < 0 for p in pages)
    top.set_title(f"Per-page change: {gained} page(s) better, {lost} worse, {n - gained - lost} unchanged")
    ratios = [p["length_ratio"] for p in pages]
    logs = [math.log2(r) if r else 0.0 for r in ratios]
    flagged = [bool(p["became_empty_repeats"] or p["lost_front_matter_repeats"] or p["length_outside_limit"])
               for p in pages]  # fmt: skip
    bottom.bar(xs, logs, color=[LOSS_COLOR if f else BASE_COLOR for f in flagged])
    bottom.axhline(0, color="black", linewidth=0.8)
    bottom.set_ylabel("log2 output length\ntrained / baseline")
    bottom.set_title("Output length change (red: page flagged by a guard)", fontsize=10)
    names = [f"{_short(p['pdf'])} p{p['page']}" for p in pages]
    bottom.set_xticks(xs, names, rotation=90, fontsize=6 if n > 30 else 8)
    if n == 0:
        top.text(0.5, 0.5, "no pages", transform=top.transAxes, ha="center")
    for ax in (top, bottom):
        ax.grid(axis="y", alpha=0.3)
    return _save(fig, out)


def write_plots(
    comparison: Mapping[str, Any],
    metrics: Mapping[str, str | Path],
    out_dir: str | Path,
    sft_metrics: Mapping[str, str | Path] | None = None,
) -> dict[str, Path]:
    """All figures into ``out_dir``: ``rewards.png``, ``type_rates.png``, ``page_change.png``, and with
    ``sft_metrics`` (SFT seed label -> its ``metrics.jsonl``) ``sft_loss.png``.

    ``metrics`` maps a seed label to its ``metrics.jsonl``; a missing file is logged and skipped
    (the baseline-only report has no training curves).
    """
    out_dir = Path(out_dir)
    curves, bench, evals = {}, {}, {}
    for label, path in metrics.items():
        if Path(path).is_file():
            curves[label] = read_reward_curve(path)
            bench[label] = read_reward_curve(path, BENCH_KEYS)
            evals[label] = read_reward_curve(path, EVAL_KEYS)
        else:
            log.warning("no training metrics at %s; the reward plot leaves %s out", path, label)
    overall = next(r for r in comparison["rows"] if r["scope"] == "overall")
    written = {
        "rewards": plot_rewards(
            curves, Path(plot_path("rewards", out_dir)), overall["trained"], overall["baseline"], bench, evals
        ),
        "type_rates": plot_type_rates(comparison, Path(plot_path("type_rates", out_dir))),
        "page_change": plot_page_change(comparison, Path(plot_path("page_change", out_dir))),
    }
    if sft_metrics is not None:
        readable = {label: path for label, path in sft_metrics.items() if Path(path).is_file()}
        written[SFT_PLOT] = plot_sft({k: read_reward_curve(p, LOSS_KEYS) for k, p in readable.items()},
                                     Path(plot_path(SFT_PLOT, out_dir)),
                                     {k: read_reward_curve(p, TOKEN_ACCURACY_KEYS) for k, p in readable.items()})
    return written
