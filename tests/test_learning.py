"""A regression test of learning: a smaller run of ``config/learn.yaml`` (README "A run that learns")
through Snakemake, base -> SFT -> GRPO on generated word pages, each model scored on held-out pages,
with the difficulty stage on. It asserts the outcomes the README claims: SFT lifts the held-out score
above the random base, the difficulty stage keeps pages with reward spread and GRPO trains on them,
and GRPO lifts the held-out score above the SFT model it started from, by a 95% paired bootstrap
interval whose lower bound is above 0 (``results/evaluate/comparison.json``, whose baseline is the
SFT model).

It fails when learning is broken (README "A run that learns" lists what was run): a learning rate of
0, bfloat16 weights without float32 masters at the recipe's rate, the rewards' sign flipped, or zero
advantages (every reward weight 0). ``OLMPIPE_LEARNING_CONFIG`` names a YAML file given to
Snakemake after the test's own, so that each can be run by hand, e.g.::

    printf 'train:\\n  grpo:\\n    learning_rate: 0.0\\n' > /tmp/lr0.yaml
    OLMPIPE_LEARNING_CONFIG=/tmp/lr0.yaml python -m pytest tests/test_learning.py   # fails
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from support.browser import chromium_available
from support.workflow import REPO, snakemake

LEARN = REPO / "config" / "learn.yaml"

#: The smaller run: fewer pages, shorter SFT and GRPO (learn.yaml's values otherwise).
SMALL = """\
synth:
  words:
    pages: {pages}
sft:
  args:
    max_steps: {sft_steps}
    save_steps: {sft_steps}
train:
  difficulty:
    enabled: true
  grpo:
    max_steps: {grpo_steps}
    save_steps: {grpo_steps}
"""
SIZE = {"pages": 400, "sft_steps": 300, "grpo_steps": 24}


def _overall(path: Path) -> dict:
    return next(r for r in json.loads(path.read_text())["rows"] if r["scope"] == "overall")


@pytest.mark.slow
@pytest.mark.browser
def test_sft_then_grpo_lift_the_held_out_score(tmp_path):
    if not chromium_available():
        pytest.skip("the synth stage needs Debian's chromium")
    small = tmp_path / "small.yaml"
    small.write_text(SMALL.format(**SIZE))
    configs = [str(LEARN), str(small)]
    if os.environ.get("OLMPIPE_LEARNING_CONFIG"):
        configs.append(os.environ["OLMPIPE_LEARNING_CONFIG"])
    snakemake(tmp_path, "--configfile", *configs, "train", cores=2, timeout=1200)
    results = tmp_path / "results"

    sft = _overall(results / "evaluate" / "sft_comparison.json")
    assert sft["difference_ci"][0] > 0, f"SFT did not lift the held-out score: {sft}"

    filtered = json.loads((results / "difficulty" / "filter.json").read_text())
    kept = [json.loads(line) for line in (results / "difficulty" / "train_pages.jsonl").read_text().splitlines()]
    assert any(page["split"] == "train" for page in kept), f"the difficulty stage kept no page: {filtered}"

    comparison = json.loads((results / "evaluate" / "comparison.json").read_text())
    assert comparison["baseline"]["name"].endswith("+sft"), comparison["baseline"]
    grpo = _overall(results / "evaluate" / "comparison.json")
    assert grpo["difference_ci"][0] > 0, f"GRPO did not lift the held-out score above the SFT model: {grpo}"
