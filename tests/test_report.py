"""Tests of olmpipe.report.page: the self-contained HTML page from hand-made runs."""

from __future__ import annotations

import json
import re

import pytest
from support.runs import BASELINE_TEXTS, TRAINED_TEXTS, make_page_images, make_run

from olmpipe.config import load_config
from olmpipe.evaluate.compare import CompareSettings, compare_runs, load_run, write_comparison
from olmpipe.report import page as report
from olmpipe.report import samples, sections
from olmpipe.report.plots import write_plots


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    base = make_run(root, "baseline", BASELINE_TEXTS)
    trained = make_run(root, "trained", TRAINED_TEXTS, lose_front_matter={("doc1.pdf", 1, 1)},
                       finish_length={("doc3.pdf", 1, 3)})  # fmt: skip
    comparison = compare_runs(load_run(base, "base"), load_run(trained, "base+grpo"),
                              CompareSettings(bootstrap_samples=5)).to_json()  # fmt: skip
    pages = make_page_images(root, BASELINE_TEXTS.keys())
    metrics = root / "seed0" / "metrics.jsonl"
    metrics.parent.mkdir()
    metrics.write_text("".join(json.dumps({"step": s, "reward": s / 10}) + "\n" for s in range(1, 4)))
    plots = write_plots(comparison, {"seed0": metrics}, root / "plots")
    return root, comparison, pages, plots


@pytest.fixture(scope="module")
def html(setup):
    root, comparison, pages, plots = setup
    out = report.write_report(
        root / "index.html", comparison=comparison, plots=plots, settings=report.ReportSettings(),
        config=load_config(), pages_index=pages, tests_dir=root / "bench",
    )  # fmt: skip
    return out.read_text()


def test_headline_and_score_table(html):
    assert "Overall olmOCR-Bench score 12.5% &rarr; <b>75.0%</b>" in html
    assert "+62.5 points, 95% CI [+40.0, +97.5]" in html
    assert "paired sign-flip p = 0.125, exact; 6 tests" in html
    assert "could be chance" in html  # p = 0.125 > 0.05
    for name in ("overall", "absent", "present", "a.jsonl", "b.jsonl"):
        assert f"<td>{name}</td>" in html
    assert "<td>guarded</td><td>overall</td>" in html  # the short-answer guard's score beside
    assert "With the short-answer guard" in html and "12.5% &rarr; 75.0% (+62.5 points)." in html


def test_guards_are_shown(html):
    assert "Reward-hacking guards:" in html
    assert "2 of 4 gained tests are `absent` tests" in html
    assert "doc3.pdf p1 (repeats [3])" in html  # became empty
    assert "doc1.pdf p1 (repeats [1])" in html  # lost front matter
    assert "100.0% &rarr; 88.9%" in html  # EOS rate


def test_page_samples_show_image_outputs_and_verdicts(html):
    assert html.count("<section class='page'>") == 3
    # three plots + three page images, all embedded
    assert len(re.findall(r"src='data:image/png;base64,", html)) == 6
    assert "doc2.pdf page 1: 0/2 &rarr; 2/2 tests passed (+100.0 points)" in html
    assert "<pre>junk text</pre>" in html and "<pre>gamma</pre>" in html
    assert "<td>a4</td><td>absent</td><td>&#x27;junk&#x27;</td>" in html
    assert "<span class='bad'>fail 0/3</span></td><td><span class='ok'>pass 3/3</span>" in html
    assert "trained: Expected &#x27;delta" in html  # b1 still fails after training
    assert "output became empty (repeats [3])" in html  # page flag (the first repeat shown is not empty)
    assert "empty output" in samples.text_block("", 3, 100)


def test_self_contained_with_config_and_versions(html):
    assert not re.search(r"""(src|href)=["'](?!data:)""", html)  # nothing loaded from elsewhere
    assert "bootstrap_samples: 1000" in html  # the run configuration
    assert "<th>transformers</th>" in html and "<th>python</th>" in html


def test_select_pages_takes_gains_then_losses_then_rest():
    pages = [
        {"pdf": f"p{i}.pdf", "page": 1, "change": c} for i, c in enumerate([0.5, -0.2, 0, 1.0, -0.7, 0.1])
    ]
    names = [p["pdf"] for p in samples.select_pages(pages, 4)]
    assert names == ["p3.pdf", "p0.pdf", "p4.pdf", "p1.pdf"]
    assert [p["pdf"] for p in samples.select_pages(pages, 1)] == ["p3.pdf"]
    assert len(samples.select_pages(pages, 10)) == 6
    only_gains = [{"pdf": "a.pdf", "page": 1, "change": 0.5}, {"pdf": "b.pdf", "page": 1, "change": 0.0}]
    assert [p["pdf"] for p in samples.select_pages(only_gains, 2)] == ["a.pdf", "b.pdf"]


def test_missing_page_image_is_reported_not_fatal(setup, tmp_path):
    _, comparison, _, plots = setup
    index = tmp_path / "pages.jsonl"
    index.write_text(
        json.dumps({"pdf": "doc2.pdf", "page": 1, "image": "nowhere.png", "split": "eval"}) + "\n"
    )
    html = report.build_report(comparison, plots, report.ReportSettings(sample_pages=1), pages_index=index)
    assert "page image not found: nowhere.png" in html


def test_long_outputs_are_cut(setup):
    _, comparison, pages, _ = setup
    html = report.build_report(comparison, {}, report.ReportSettings(max_chars=100), pages_index=pages)
    assert "no plots" in html and not re.search(r"\(first \d+ of \d+ characters\)", html)  # short texts
    assert "(first 100 of 250 characters)" in samples.text_block("x" * 250, 3, 100)


def test_main_writes_plots_and_report(setup, tmp_path):
    root, comparison, pages, _ = setup
    json_path = tmp_path / "comparison.json"
    json_path.write_text(json.dumps(comparison))
    out = tmp_path / "r" / "index.html"
    code = report.main(["--comparison", str(json_path), "--metrics", str(root / "seed0" / "metrics.jsonl"),
                        "--plots", str(tmp_path / "plots"), "--pages", str(pages), "--tests",
                        str(root / "bench"), "--out", str(out)])  # fmt: skip
    assert code == 0 and out.is_file()
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == [
        "page_change.png",
        "rewards.png",
        "type_rates.png",
    ]
    assert report.main(["--comparison", str(tmp_path / "none.json"), "--out", str(out)]) == 1


def test_write_comparison_roundtrip_feeds_the_report(setup, tmp_path):
    root, _, _, plots = setup
    base, trained = load_run(root / "baseline"), load_run(root / "trained")
    comp = compare_runs(base, trained, CompareSettings(bootstrap_samples=5))
    write_comparison(comp, tmp_path / "c.json", tmp_path / "c.csv")
    html = report.build_report(json.loads((tmp_path / "c.json").read_text()), plots, report.ReportSettings())
    assert "Overall olmOCR-Bench score 12.5%" in html


@pytest.mark.slow
def test_workflow_rules_and_snakemake_report(tmp_path):
    """The report rules run for real in Snakemake on hand-made upstream results, and
    ``snakemake --report`` collects the comparison table, the plots and the HTML page."""
    import shutil
    import subprocess

    import yaml
    from support.runs import make_upstream_results

    from olmpipe.config import REPO_ROOT

    cfg = yaml.safe_load((REPO_ROOT / "config" / "config.yaml").read_text())
    cfg["bench"]["dir"] = str(REPO_ROOT / cfg["bench"]["dir"])
    cfg.setdefault("train", {})["seeds"] = [0, 1]
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(cfg))
    make_upstream_results(tmp_path, cfg["model"]["name"], seeds=[0, 1])
    snakemake = shutil.which("snakemake")
    assert snakemake is not None
    # only the rules of this module may run; the upstream results above stand for the others
    base = [snakemake, "-s", str(REPO_ROOT / "Snakefile"), "-d", str(tmp_path), "--rerun-triggers", "mtime",
            "--configfile", str(tmp_path / "config.yaml"),
            "--allowed-rules", "evaluate_compare", "report_plots", "report_html", "report"]  # fmt: skip
    run = subprocess.run(
        [*base, "--cores", "1", "--", "report"], capture_output=True, text=True, timeout=600, check=False
    )
    assert run.returncode == 0, run.stderr[-3000:]
    for name in ("results/evaluate/comparison.json", "results/evaluate/comparison.csv",
                 "results/report/index.html", "results/report/plots/rewards.png",
                 "results/report/plots/type_rates.png", "results/report/plots/page_change.png"):  # fmt: skip
        assert (tmp_path / name).is_file(), name
    assert "12.5% -> 75.0%" in run.stdout  # the console table of the last job
    html = (tmp_path / "results/report/index.html").read_text()
    assert "Overall olmOCR-Bench score 12.5% &rarr; <b>75.0%</b>" in html
    # the difficulty section (the filter is off by default) with a row per seed's training metrics
    assert "Off (<code>train.difficulty.enabled: false</code>)" in html
    assert "<tr><td>seed1</td><td colspan='4' class='muted'>not logged</td></tr>" in html

    smk_report = tmp_path / "snakemake_report.html"
    run = subprocess.run(
        [*base, "--report", str(smk_report), "--", "report"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    log = run.stdout + run.stderr
    for name in ("comparison.csv", "rewards.png", "type_rates.png", "page_change.png", "index.html"):
        assert f"Adding {name}" in log, name
    text = smk_report.read_text()
    assert "1000 resamples" in text  # the comparison caption, rendered with the config


def test_headline_when_nothing_changed(setup):
    _, comparison, _, _ = setup
    same = json.loads(json.dumps(comparison))
    row = same["rows"][0]
    row.update(trained=row["baseline"], difference=0.0, difference_ci=[0.0, 0.0], p_value=1.0,
               test_method="none", changed=0, gained=0, lost=0)  # fmt: skip
    text = sections.headline(same)
    assert "+0.0 points" in text and "p = 1;" in text and "No test changed its verdict" in text
    row.update(
        trained=0.9, difference=0.775, difference_ci=[0.5, 0.9], p_value=0.001, test_method="exact", changed=9
    )
    assert "unlikely to be chance" in sections.headline(same)


def test_generation_section_counts_rotation_retries_and_fallbacks(setup, tmp_path):
    """Pipeline-mode counts of each run's summary.json become one row per run; mode off says so."""
    comparison = setup[1]
    counts = {"generations": 9, "accepted": 6, "rotation_retried": 3, "rotated": 2,
              "rotated_by_angle": {"90": 1, "270": 1}, "last_valid": 1, "fallback": 2,
              "fallback_errors": 1, "finished_on_attempt": {"1": 4, "2": 2}}  # fmt: skip
    base, trained = tmp_path / "base", tmp_path / "trained"
    for folder, summary in ((base, {"generations": 9}), (trained, {"generations": 9, "pipeline": counts})):
        folder.mkdir()
        (folder / "summary.json").write_text(json.dumps(summary))
    html = report.build_report(comparison=comparison, plots={}, settings=report.ReportSettings(),
                               baseline_dir=base, trained_dir=trained)  # fmt: skip
    assert "<h2>Generation: rotation retries and fallback pages</h2>" in html
    assert "<tr><td>baseline</td><td colspan='6' class='muted'>mode off</td></tr>" in html
    assert (
        "<tr><td>trained</td><td>9</td><td>6</td><td>3</td><td>2 <small>(1&times;90&deg;, "
        "1&times;270&deg;)</small></td><td>1</td><td>2 <small>(1 without text)</small></td></tr>"
    ) in html
    (trained / "summary.json").write_text("{}")
    off = report.build_report(comparison=comparison, plots={}, settings=report.ReportSettings(),
                              baseline_dir=base, trained_dir=tmp_path / "missing")  # fmt: skip
    assert "pipeline-compatible mode off" in off


def test_difficulty_section_off_and_on(setup, tmp_path):
    """Off: says so; on: kept and dropped pages with reasons, per JSONL file and test type; both show
    each seed's share of training groups without reward spread (TRL's frac_reward_zero_std)."""
    from olmpipe.difficulty import FilterSettings
    from olmpipe.difficulty.filter import summarize_filter
    from olmpipe.records.difficulty import DroppedPage, PageDifficulty

    comparison = setup[1]
    metrics = tmp_path / "seed0.jsonl"
    metrics.write_text("".join(json.dumps({"step": s, "frac_reward_zero_std": z}) + "\n"
                               for s, z in ((1, 0.5), (2, 0.25), (3, 0.0))))
    off = report.build_report(comparison=comparison, plots={}, settings=report.ReportSettings(),
                              metrics={"seed0": metrics, "seed1": tmp_path / "missing.jsonl"})
    assert "<h2>Difficulty filter and zero-spread groups</h2>" in off
    assert "Off (<code>train.difficulty.enabled: false</code>)" in off
    assert "<tr><td>seed0</td><td>3</td><td>25.0%</td><td>50.0%</td><td>0.0%</td></tr>" in off
    assert "<tr><td>seed1</td><td colspan='4' class='muted'>not logged</td></tr>" in off

    def page(pdf, spread, jsonl, types):
        return PageDifficulty(pdf, 1, 4, 4, [1.0] * 4, 1.0, spread, spread == 0.0, {}, 1.0, {}, spread == 0.0,
                              False, [jsonl], types)

    stats = [page("a.pdf", 0.0, "arxiv.jsonl", ["math"]), page("b.pdf", 0.4, "arxiv.jsonl", ["math", "table"]),
             page("c.pdf", 0.3, "scans.jsonl", ["present"])]
    dropped = [DroppedPage("a.pdf", 1, "zero_spread", 0.0, 1.0, 1.0, True, False, ["arxiv.jsonl"], ["math"])]
    summary = summarize_filter(stats, dropped, FilterSettings(), num_generations=28, train_pages=3)
    on = report.build_report(comparison=comparison, plots={}, settings=report.ReportSettings(),
                             difficulty=summary, metrics={"seed0": metrics})
    assert "<b>2</b> / <b>1</b> (1 zero spread; 1 all pass, 0 all fail)" in on
    assert "<tr><td>arxiv.jsonl</td><td>2</td><td>1</td><td>50.0%</td></tr>" in on
    assert "<tr><td>scans.jsonl</td><td>1</td><td>0</td><td>0.0%</td></tr>" in on
    assert "<tr><td>math</td><td>2</td><td>1</td><td>50.0%</td></tr>" in on
    assert "84 &rarr; 56 (28 saved, 28 per page)" in on
    assert "33.3% &rarr; 0.0% of the kept pages" in on


def test_guards_section_names_the_short_answer_training_signal(setup, tmp_path):
    """Each seed's steps with short high-reward completions (bench/short_high_reward > 0), the first
    of them, the largest and last values, and the most tests passed through a too-short match."""
    comparison = setup[1]
    hacking, clean = tmp_path / "seed0.jsonl", tmp_path / "seed1.jsonl"
    hacking.write_text("".join(json.dumps({"step": s, "bench/short_high_reward": h, "bench/short_passes": p}) + "\n"
                               for s, h, p in ((1, 0.0, 0.0), (2, 3.0, 12.0), (3, 7.0, 30.0))))
    clean.write_text("".join(json.dumps({"step": s, "bench/short_high_reward": 0.0, "bench/short_passes": 0.0})
                             + "\n" for s in (1, 2)))
    html = report.build_report(comparison=comparison, plots={}, settings=report.ReportSettings(),
                               metrics={"seed0": hacking, "seed1": clean, "seed2": tmp_path / "none.jsonl"})
    section = html[html.index("<h2>Reward-hacking guards</h2>"):]
    assert "<code>bench/short_high_reward</code>" in section
    assert "<tr><td>seed0</td><td class='warn'>2 of 3 (first: step 2)</td><td>7</td><td>7</td><td>30</td></tr>" in section
    assert "<tr><td>seed1</td><td>0 of 2</td><td>0</td><td>0</td><td>0</td></tr>" in section
    assert "<tr><td>seed2</td><td colspan='4' class='muted'>not logged</td></tr>" in section


def test_main_reads_each_configured_seeds_final_metrics_as_the_workflow_does(setup, tmp_path, monkeypatch):
    """Without --metrics, `olmpipe report` plots results/train/seed<n>/model.metrics.jsonl of the
    config's seeds, the file rule report_plots declares; not the live metrics.jsonl beside the
    checkpoints (a run going on, preempted or restarted) nor seed folders the config does not name."""
    from olmpipe.layout import final_metrics, train_run_dir
    from olmpipe.report import plots as plots_mod

    root, comparison, pages, _ = setup
    monkeypatch.chdir(tmp_path)
    for seed in (0, 7):
        run = tmp_path / train_run_dir(seed)
        run.mkdir(parents=True)
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "reward": 0.1}) + "\n")
    (tmp_path / final_metrics(train_run_dir(0))).write_text(json.dumps({"step": 1, "reward": 0.1}) + "\n")
    (tmp_path / "c.json").write_text(json.dumps(comparison))
    (tmp_path / "config.yaml").write_text("train:\n  seeds: [0, 1]\n")
    seen = {}

    def recording_write_plots(comparison, metrics, out_dir, sft_metrics=None):
        seen.update(metrics)
        return {}

    monkeypatch.setattr(plots_mod, "write_plots", recording_write_plots)
    assert report.main(["--config", "config.yaml", "--comparison", "c.json", "--pages", str(pages),
                        "--tests", str(root / "bench")]) == 0
    assert seen == {"seed0": final_metrics(train_run_dir(0)), "seed1": final_metrics(train_run_dir(1))}
