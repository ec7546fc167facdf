"""olmpipe.rundiff / scripts/compare_runs.py: two runs' records compared modulo timings."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from olmpipe.rundiff import compare_results

ROOT = Path(__file__).resolve().parents[1]


def _run(root: Path, *, passed: bool = True, step_time: float = 1.0, seconds: float = 2.0) -> Path:
    run = root / "baseline" / "m"
    run.mkdir(parents=True)
    verdict = {"test_id": "t", "type": "present", "jsonl": "x.jsonl", "pdf": "a.pdf", "page": 1, "repeat": 0,
               "passed": passed, "reason": ""}
    (run / "verdicts.jsonl").write_text(json.dumps(verdict) + "\n")
    generation = {"pdf": "a.pdf", "page": 1, "repeat": 0, "text": "x", "settings": f"fp{seconds}",
                  "seconds": seconds, "attempts": [{"seconds": seconds, "finish_reason": "stop"}]}
    (run / "generations.jsonl").write_text(json.dumps(generation) + "\n")
    (run / "summary.json").write_text(json.dumps({"overall": 0.5, "generation_seconds": seconds}))
    seed = root / "train" / "seed0"
    seed.mkdir(parents=True)
    (seed / "metrics.jsonl").write_text(json.dumps({"step": 1, "time": seconds, "step_time": step_time,
                                                    "loss": 0.25}) + "\n")
    return root


def test_timings_and_fingerprints_do_not_count(tmp_path):
    compared, differences = compare_results(_run(tmp_path / "a"), _run(tmp_path / "b", step_time=9.0, seconds=7.0))
    assert differences == []
    assert compared == ["baseline/m/generations.jsonl", "baseline/m/verdicts.jsonl", "train/seed0/metrics.jsonl",
                        "baseline/m/summary.json"]


def test_a_changed_verdict_metric_or_missing_file_is_reported(tmp_path):
    a, b = _run(tmp_path / "a"), _run(tmp_path / "b", passed=False)
    (b / "train" / "seed0" / "metrics.jsonl").write_text('{"step": 1, "loss": 0.5}\n')
    (b / "baseline" / "m" / "summary.json").unlink()
    _, differences = compare_results(a, b)
    assert [str(d) for d in differences] == [
        "baseline/m/verdicts.jsonl: [0].passed: True != False",
        "train/seed0/metrics.jsonl: [0].loss: 0.25 != 0.5",
        "baseline/m/summary.json: file: True != False",
    ]


def test_the_script_exits_1_on_a_difference(tmp_path):
    a = _run(tmp_path / "a")
    shutil.copytree(a, tmp_path / "b")
    script = [sys.executable, str(ROOT / "scripts" / "compare_runs.py")]
    same = subprocess.run([*script, str(a), str(tmp_path / "b")], capture_output=True, text=True, check=False)
    assert same.returncode == 0 and "4 files compared, 0 differences" in same.stdout
    (tmp_path / "b" / "baseline" / "m" / "verdicts.jsonl").write_text("")
    changed = subprocess.run([*script, str(a), str(tmp_path / "b")], capture_output=True, text=True, check=False)
    assert changed.returncode == 1 and "DIFFERS baseline/m/verdicts.jsonl: line count: 1 != 0" in changed.stdout
