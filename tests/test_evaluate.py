"""Tests of olmpipe.evaluate.stage: the stage entry on hand-made run folders."""

from __future__ import annotations

import csv
import json

import pytest
from support.runs import BASELINE_TEXTS, TRAINED_TEXTS, make_run

from olmpipe.config import load_config
from olmpipe.evaluate import stage as evaluate


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("evaluate")
    return make_run(root, "baseline", BASELINE_TEXTS), make_run(root, "trained", TRAINED_TEXTS)


def test_compare_folders_writes_json_and_csv(runs, tmp_path):
    cfg = load_config(overrides={"evaluate": {"bootstrap_samples": 5}})
    comp = evaluate.compare_folders(cfg, *runs, tmp_path / "c.json", tmp_path / "c.csv")
    data = json.loads((tmp_path / "c.json").read_text())
    assert data["baseline"]["name"] == cfg["model"]["name"]
    assert data["trained"]["name"] == evaluate.trained_name(cfg) == f"{cfg['model']['name']}+grpo"
    assert data["settings"]["bootstrap_samples"] == 5
    assert data["rows"][0]["difference_ci"] == pytest.approx([0.4, 0.975])  # see test_compare
    with open(tmp_path / "c.csv", newline="") as fh:
        assert len(list(csv.DictReader(fh))) == len(comp.rows) == 6  # overall, guarded overall, 2 types, 2 files


def test_main_compare_only_prints_the_table(runs, tmp_path, capsys):
    base, trained = runs
    args = ["--compare-only", "--baseline", str(base), "--out", str(trained),
            "--json", str(tmp_path / "c.json"), "--csv", str(tmp_path / "c.csv")]  # fmt: skip
    assert evaluate.main(args) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[1].startswith("score") and "baseline -> trained" in lines[1]
    assert lines[3].startswith("overall") and "12.5% -> 75.0%" in lines[3] and "+62.5" in lines[3]
    assert lines[4].startswith("guarded overall")  # the short-answer guard's score beside olmOCR-Bench's
    assert [line.split()[0] for line in lines[5:7]] == ["absent", "present"]
    assert evaluate.main(["--table", str(tmp_path / "c.json")]) == 0
    assert capsys.readouterr().out == out


def test_main_reports_missing_inputs(tmp_path, caplog):
    assert (
        evaluate.main(["--compare-only", "--baseline", str(tmp_path / "nope"), "--out", str(tmp_path)]) == 1
    )
    assert "verdicts.jsonl: file not found" in caplog.text
    assert evaluate.main(["--table", str(tmp_path / "none.json")]) == 1


def test_the_trained_model_goes_through_the_baseline_engine(monkeypatch, tmp_path):
    """`--generate-only` runs olmpipe.evaluate.engine's engine with the config's sections and the trained name."""
    import olmpipe.evaluate.engine

    calls = []
    monkeypatch.setattr(olmpipe.evaluate.engine, "run_generation_and_scoring",
                        lambda *a, **k: calls.append((a, k)) or "summary")  # fmt: skip
    cfg = load_config()
    argv = ["--generate-only", "--model", "soup/model", "--pages", "pages.jsonl", "--tests", "tests",
            "--out", str(tmp_path), "--threads", "3"]
    assert evaluate.main(argv) == 0
    ((args, kwargs),) = calls
    assert args == (cfg, "soup/model", "pages.jsonl", "tests", str(tmp_path), 3)
    assert kwargs == {"model_name": evaluate.trained_name(cfg)}

    def fail(*args, **kwargs):
        raise olmpipe.evaluate.engine.EvalRunError("bad page index")

    monkeypatch.setattr(olmpipe.evaluate.engine, "run_generation_and_scoring", fail)
    assert evaluate.main(argv) == 1
