"""The learning run (``config/learn.yaml``, README "A run that learns"), smaller, through Snakemake:
generated word pages split into train and held-out eval pages, base -> SFT -> GRPO with the
difficulty stage on, each model scored on the held-out pages.

What holds today: the eval pages are held out (no eval page is an SFT pair or a GRPO page), the
comparison of GRPO is against the SFT model it started from, named as such, and the difficulty stage
finds reward spread on the SFT model's completions, keeps pages and GRPO trains on them (issue 28
item 3; on the embedded default it drops 14 of 15 pages).

What does not hold yet, and is marked ``xfail(strict=True)`` so that the day it holds the marker
must go: GRPO lifting the held-out score above the SFT model by a 95% paired bootstrap interval
whose lower bound is above 0. The tiny model does not learn to read these pages in the SFT budget
(README "A run that learns": its answers do not depend on the page image), so there is nothing for
GRPO to improve on held-out pages.

``OLMPIPE_LEARNING_CONFIG`` names a YAML file given to Snakemake after the test's own (e.g. a learning
rate of 0 to check that the GRPO assertion fails when learning is broken)::

    printf 'train:\\n  grpo:\\n    learning_rate: 0.0\\n' > /tmp/lr0.yaml
    OLMPIPE_LEARNING_CONFIG=/tmp/lr0.yaml python -m pytest tests/test_learning.py
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from support.browser import chromium_available
from support.workflow import REPO, snakemake

LEARN = REPO / "config" / "learn.yaml"

#: The smaller run: 120 pages (about 60 held out), shorter SFT and GRPO; learn.yaml's values otherwise.
SMALL = """\
synth:
  words:
    pages: 120
sft:
  args:
    max_steps: 100
    save_steps: 100
train:
  max_pages: 16
  difficulty:
    enabled: true
    samples: 4
  grpo:
    max_steps: 8
    save_steps: 8
"""

#: The run's tests need the whole chain (minutes) and Chromium (the synth stage).
learning = [pytest.mark.slow, pytest.mark.browser]


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _overall(path: Path) -> dict:
    return next(r for r in json.loads(path.read_text())["rows"] if r["scope"] == "overall")


@pytest.fixture(scope="module")
def learning_run(tmp_path_factory) -> Path:
    """The results folder of one smaller learning run."""
    if not chromium_available():
        pytest.skip("the synth stage needs Debian's chromium")
    workdir = tmp_path_factory.mktemp("learn")
    small = workdir / "small.yaml"
    small.write_text(SMALL)
    configs = [str(LEARN), str(small)]
    if os.environ.get("OLMPIPE_LEARNING_CONFIG"):
        configs.append(os.environ["OLMPIPE_LEARNING_CONFIG"])
    snakemake(workdir, "train", "--configfile", *configs, cores=2, timeout=1200)
    return workdir / "results"


def test_learn_yaml_plans_base_sft_grpo_on_generated_pages_without_the_real_bench(tmp_path):
    out = snakemake(tmp_path, "-n", "train", "--configfile", str(LEARN)).stdout
    jobs = set(out.split("Job stats:", 1)[1].split("Reasons:", 1)[0].split())
    assert {"synth_html", "synth_render", "synth_tests", "sft_seed", "evaluate_sft_compare", "train_seed",
            "evaluate_compare"} <= jobs
    assert "olmocr-sample" not in out  # the eval pages are held-out synthetic pages, not the real bench


@learning[0]
@learning[1]
def test_models_are_scored_on_held_out_pages_and_grpo_against_the_sft_model(learning_run):
    pages = _lines(learning_run / "validate" / "pages.jsonl")
    eval_pdfs = {p["pdf"] for p in pages if p["split"] == "eval"}
    assert 40 <= len(eval_pdfs) <= 80 and all(p.startswith("words_") for p in eval_pdfs)
    assert not eval_pdfs & {p["pdf"] for p in _lines(learning_run / "sft" / "pairs.jsonl")}
    scored = {r["pdf"] for r in _lines(learning_run / "evaluate" / "tiny-qwen2.5-vl+sft" / "verdicts.jsonl")}
    assert scored == eval_pdfs
    comparison = json.loads((learning_run / "evaluate" / "comparison.json").read_text())
    assert comparison["baseline"]["name"] == "tiny-qwen2.5-vl+sft"
    assert json.loads((learning_run / "evaluate" / "sft_comparison.json").read_text())["baseline"]["name"] == \
        "tiny-qwen2.5-vl"


@learning[0]
@learning[1]
def test_difficulty_keeps_pages_with_reward_spread_and_grpo_trains_on_them(learning_run):
    # the page index training reads: the train pages the filter kept, and the eval pages unchanged
    kept = [p for p in _lines(learning_run / "difficulty" / "train_pages.jsonl") if p["split"] == "train"]
    dropped = _lines(learning_run / "difficulty" / "dropped.jsonl")
    summary = json.loads((learning_run / "difficulty" / "filter.json").read_text())
    assert summary["sampled"] == len(kept) + len(dropped) >= 40
    assert len(kept) >= summary["sampled"] // 2, f"kept {len(kept)}, dropped {summary['dropped_by_reason']}"
    metrics = _lines(learning_run / "train" / "seed0" / "model.metrics.jsonl")
    assert max(m.get("step", 0) for m in metrics) == 8


@learning[0]
@learning[1]
@pytest.mark.xfail(strict=True, raises=AssertionError, reason="the tiny model does not learn to read the word pages yet "
                   "(README 'A run that learns'); GRPO has nothing to improve on held-out pages")
def test_grpo_lifts_the_held_out_score_above_the_sft_model(learning_run):
    grpo = _overall(learning_run / "evaluate" / "comparison.json")
    assert grpo["difference_ci"][0] > 0, f"GRPO did not lift the held-out score above the SFT model: {grpo}"
