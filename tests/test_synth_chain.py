"""olmpipe.synth.chain and workflow/rules/synth.smk: with synth enabled the workflow plans
synth -> rasterize -> validate -> train -> evaluate, trains on the synthetic bench and evaluates on
the real one; the `synth` target builds the embedded bench for real (slow)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from support.browser import chromium_available
from support.leftovers import run_marked
from support.workflow import snakemake

from olmpipe.cli import COMMANDS
from olmpipe.layout import SYNTH_BENCH_DIR, bench_section
from olmpipe.synth.chain import stage_params

REPO = Path(__file__).resolve().parents[1]
SAMPLE = REPO / "data/bench/olmocr-sample"



def write_config(workdir: Path, enabled: bool, html_dir: Path = REPO / "data/synth", longest_side: int = 48) -> None:
    (workdir / "config").mkdir(parents=True, exist_ok=True)
    (workdir / "config/config.yaml").write_text(
        f"bench:\n  dir: {SAMPLE}\nrasterize:\n  longest_side: {longest_side}\nvalidate:\n  check_math: false\n"
        f"synth:\n  enabled: {str(enabled).lower()}\n  html_dir: {html_dir}\n")


def test_bench_section_swaps_in_the_synthetic_bench_only_when_enabled():
    cfg = {"bench": {"dir": "real", "eval_dir": None, "split": {"seed": 1}},
           "synth": {"enabled": False, "eval": "real"}}
    assert bench_section(cfg) == cfg["bench"]
    cfg["synth"]["enabled"] = True
    assert bench_section(cfg) == {"dir": SYNTH_BENCH_DIR, "eval_dir": "real", "split": {"seed": 1}}
    cfg["bench"]["eval_dir"] = "held-out"
    assert bench_section(cfg)["eval_dir"] == "held-out"
    assert cfg["bench"]["dir"] == "real"  # the config itself is not changed
    # synth.eval held_out: no eval bench; bench.split splits the synthetic pages (the learning run)
    cfg["synth"]["eval"] = "held_out"
    assert bench_section(cfg) == {"dir": SYNTH_BENCH_DIR, "eval_dir": None, "split": {"seed": 1}}
    assert bench_section({**cfg, "bench": bench_section(cfg)}) == bench_section(cfg)
    assert "enabled" not in stage_params({"enabled": True, "seed": 0})


def test_synth_command_is_registered():
    assert COMMANDS["synth"][0] == "olmpipe.synth.cli"


def test_dry_run_with_synth_enabled_plans_synth_then_training_and_evaluation(tmp_path):
    write_config(tmp_path, enabled=True)
    out = snakemake(tmp_path, "-n", "train").stdout
    jobs = set(out.split("Job stats:", 1)[1].split("Reasons:", 1)[0].split())
    assert {"synth_html", "synth_render", "synth_tests", "rasterize", "validate", "train_seed",
            "evaluate_compare"} <= jobs
    write_config(tmp_path, enabled=False)
    out = snakemake(tmp_path, "-n", "train").stdout
    assert "synth_html" not in out.split("Job stats:", 1)[1]


@pytest.mark.slow
@pytest.mark.browser
def test_synth_target_then_validate_trains_on_synthetic_and_evaluates_on_real_pages(tmp_path):
    if not chromium_available():
        pytest.skip("headless Chromium not installed")
    # the synthetic pages are mined for the raster the model reads (olmpipe.synth.legible): at the
    # embedded default's 1288 px, not at a toy size where no text is readable
    write_config(tmp_path, enabled=True, longest_side=1288)
    snakemake(tmp_path, "validate")
    report = json.loads((tmp_path / "results/synth/report.json").read_text())
    assert report["pages"]["html"] == 5 and report["dropped"]["count"] == 0
    pages = [json.loads(line) for line in (tmp_path / "results/validate/pages.jsonl").read_text().splitlines()]
    train = {p["bench_dir"] for p in pages if p["split"] == "train"}
    evaluate = {p["bench_dir"] for p in pages if p["split"] == "eval"}
    assert train == {SYNTH_BENCH_DIR} and evaluate == {str(SAMPLE)}
    assert sum(p["split"] == "train" for p in pages) == report["pages"]["in_bench"]
    # Nothing of synth or rasterize reruns. validate reruns once: its `tests` input lists the bench's
    # *.jsonl when the workflow is parsed, and the synthetic one exists only from the second parse on.
    again = snakemake(tmp_path, "validate")
    text = again.stdout + again.stderr
    assert "rule synth_" not in text and "rule rasterize" not in text
    third = snakemake(tmp_path, "validate")
    assert "Job stats" not in third.stdout + third.stderr


#: Safety net only: a hung stage used to run until killed; a failing one now ends in about 10-25 s.
HANG_LIMIT_S = 240


@pytest.mark.slow
@pytest.mark.parametrize("failure", ["html", "render", "tests"])
def test_a_failing_synth_stage_fails_the_workflow_and_leaves_no_process(tmp_path, failure):
    """A failure in each stage under `snakemake --cores 2 synth`: the workflow exits 1 with the stage's
    reason (the install hint when Chromium is missing) and no process of the run survives it. On
    1d966ff each of these hung: the stage raised SystemExit inside the nested `--target-jobs` job."""
    env = dict(os.environ)
    pages = tmp_path / "pages"
    if failure == "html":  # synth_html: html_dir is not a folder
        expected = "synth_html: synth.html_dir"
    elif failure == "render":  # synth_render: Chromium is missing
        pages.mkdir()
        (pages / "a.html").write_text("<p>Some text that would make a test.</p>")
        env["OLMPIPE_CHROMIUM"] = str(tmp_path / "no-such-chromium")
        expected = "apt-get install chromium"
    else:  # synth_tests: no page yields a test (an empty folder: no browser is started)
        pages.mkdir()
        expected = "synth_tests: no page of"
    write_config(tmp_path, enabled=False, html_dir=pages)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path),
           "--cores", "2", "synth"]
    run = run_marked(cmd, timeout=HANG_LIMIT_S, env=env)
    assert run.returncode is not None, f"snakemake did not end within {HANG_LIMIT_S} s:\n{run.output[-3000:]}"
    assert run.returncode == 1, run.output[-3000:]
    assert expected in run.output, run.output[-3000:]
    assert "Exception in worker" not in run.output
    assert run.survivors == []
