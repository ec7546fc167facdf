"""Tests of olmpipe.report.plots: the three report figures from hand-made runs and metrics."""

from __future__ import annotations

import json

import pytest
from PIL import Image
from support.runs import BASELINE_TEXTS, TRAINED_TEXTS, make_run

from olmpipe.evaluate.compare import CompareSettings, compare_runs, load_run
from olmpipe.report.plots import BENCH_KEYS, PlotError, plot_rewards, read_reward_curve, write_plots


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    root = tmp_path_factory.mktemp("plots")
    base = load_run(make_run(root, "baseline", BASELINE_TEXTS))
    trained = load_run(make_run(root, "trained", TRAINED_TEXTS, lose_front_matter={("doc1.pdf", 1, 1)}))
    return compare_runs(base, trained, CompareSettings(bootstrap_samples=50)).to_json()


def _metrics(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_read_reward_curve_keeps_steps_with_a_reward(tmp_path):
    path = _metrics(tmp_path / "metrics.jsonl", [
        {"step": 2, "reward": 0.5, "loss": 0.1},
        {"step": 1, "reward": 0.25},
        {"step": 3, "loss": 0.2},              # no reward logged at this step
        {"step": 4, "reward": None},           # NaN written as null by the trainer
        {"step": 5, "train_runtime": 12.0},    # end-of-training summary
    ])  # fmt: skip
    assert read_reward_curve(path) == [(1.0, 0.25), (2.0, 0.5)]


def test_read_reward_curve_of_the_unit_test_reward(tmp_path):
    path = _metrics(tmp_path / "metrics.jsonl", [
        {"step": 1, "reward": 1.5, "rewards/bench_reward/mean": 0.5, "rewards/eos_reward/mean": 1.0},
        {"step": 2, "reward": 1.0, "bench/pass_rate": 0.25},
    ])  # fmt: skip
    assert read_reward_curve(path, BENCH_KEYS) == [(1.0, 0.5), (2.0, 0.25)]


def test_read_reward_curve_names_bad_lines(tmp_path):
    """A bad line before the last is an error naming file:line; a torn last line (a write that was
    interrupted) is skipped, see olmpipe.records.files.iter_jsonl."""
    path = tmp_path / "metrics.jsonl"
    path.write_text('{"step": 1, "reward": 0.1}\n{oops\n{"step": 2, "reward": 0.2}\n')
    with pytest.raises(PlotError, match=r"metrics.jsonl:2: not valid JSON"):
        read_reward_curve(path)
    path.write_text('{"step": 1, "reward": 0.1}\n{"step": 2, "rew')
    assert read_reward_curve(path) == [(1.0, 0.1)]


def test_write_plots_writes_three_pngs(comparison, tmp_path):
    rows = [{"step": s, "reward": 0.1 * s, "rewards/bench_reward/mean": 0.05 * s} for s in range(1, 6)]
    m0 = _metrics(tmp_path / "m0.jsonl", rows)
    m1 = _metrics(tmp_path / "m1.jsonl", [{"step": s, "reward": 0.05 * s} for s in range(1, 6)])
    out = write_plots(
        comparison, {"seed0": m0, "seed1": m1, "seed2": tmp_path / "missing.jsonl"}, tmp_path / "p"
    )
    assert sorted(out) == ["page_change", "rewards", "type_rates"]
    for path in out.values():
        with Image.open(path) as img:
            assert img.format == "PNG" and img.width >= 500 and img.height >= 300
            # not a blank canvas: the plot draws in several colours
            assert len(img.convert("RGB").getcolors(maxcolors=1 << 16) or []) > 10


def test_reward_plot_without_curves_still_renders(tmp_path):
    path = plot_rewards({}, tmp_path / "r.png", soup_score=0.5, baseline_score=0.25)
    with Image.open(path) as img:
        assert img.format == "PNG"
