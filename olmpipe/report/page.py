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
import json
import logging
import platform
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from html import escape
from importlib import metadata
from pathlib import Path
from typing import Any

import yaml

from olmpipe.bench.describe import describe_tests
from olmpipe.evaluate.compare import ComparisonError, read_comparison
from olmpipe.report.samples import embed_png, page_samples
from olmpipe.report.sections import (
    chain_section,
    difficulty_section,
    generation_section,
    guards_section,
    headline,
    scores_table,
    short_answer_rows,
)
from olmpipe.report.template import CSS, PAGE_TEMPLATE

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
        scores=scores_table(comparison),
        figures=figures or "<p class='muted'>no plots</p>",
        guards=guards_section(comparison["guards"]) + short_answer_rows(metrics),
        generation=generation_section(baseline_dir, trained_dir),
        difficulty=difficulty_section(difficulty, metrics),
        samples=page_samples(
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
