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


class _PlainBackend:
    """A generation backend that answers every page with the same text (what is scored is not the point)."""

    name = "plain"

    def __new__(cls):
        from olmpipe.generate.base import Completion, GenerationBackend

        class Plain(GenerationBackend):
            name = "plain"

            def generate(self, requests, sampling):
                text = ("---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\n"
                        "is_table: False\nis_diagram: False\n---\nSome text")
                return [Completion(text, "stop", 5, 5, 0.01) for _ in requests]

        return Plain()


@pytest.mark.slow
def test_eval_pages_a_model_trained_on_are_refused_or_flagged(tmp_path, tiny_model_dir, caplog):
    """Issue 31 item 0: after a finished run, `bench.split.seed` changed with `train.resume: continue`
    (the advice the refusal of a changed setting gives) trained on and then evaluated a split whose
    eval pages were training pages of the checkpoint it continued; the guards said nothing. The run
    folder records every page it trained on (over its resumes), its final model and the soup carry
    the record, and evaluating on one of those pages is refused naming it -- or, with
    eval_run.on_trained_pages: flag, scored and flagged in summary.json, the comparison's guards and
    the report. A model trained from that model (an SFT model's successor) inherits the record."""
    from trainkit import LowIdReward, make_page_index

    from olmpipe.evaluate.engine import EvalRunError, run_generation_and_scoring
    from olmpipe.records.train import TRAINED_PAGES_NAME, trained_pages_of
    from olmpipe.report.page import ReportSettings, build_report
    from olmpipe.train.run import train_seed
    from olmpipe.train.soup import soup

    pages_a, tests = make_page_index(tmp_path / "a", n_train=4, n_eval=1, extra_empty=False)
    rows = [json.loads(line) for line in pages_a.read_text().splitlines()]
    first_train = (rows[0]["pdf"], rows[0]["page"])
    # the other split: the first train page is now an eval page, the eval page a train page
    swapped = [{**r, "split": "eval" if i == 0 else "train"} for i, r in enumerate(rows)]
    pages_b = tmp_path / "b.jsonl"
    pages_b.write_text("".join(json.dumps(r) + "\n" for r in swapped))
    grpo = {"max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
            "max_completion_length": 8, "save_steps": 1, "logging_steps": 1, "learning_rate": 1e-3}
    base = {"train": {"wandb": {"mode": "disabled"}, "grpo": grpo}, "rewards": {"bench": {"processes": 0}},
            "eval_run": {"progress": False}, "evaluate": {"bootstrap_samples": 5}}
    run = tmp_path / "seed0"
    assert train_seed(load_config(overrides=base), seed=0, model_path=tiny_model_dir, pages=pages_a, tests_dir=tests,
                      run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert set(trained_pages_of(run)) == {(r["pdf"], r["page"]) for r in rows[:4]}
    go_on = load_config(overrides={**base, "train": {**base["train"], "resume": "continue",
                                                      "grpo": {**grpo, "max_steps": 2}}})
    caplog.set_level("WARNING", logger="olmpipe.job.trained")
    assert train_seed(go_on, seed=0, model_path=tiny_model_dir, pages=pages_b, tests_dir=tests, run_dir=run,
                      reward_funcs=[LowIdReward()]) == 0
    assert (f"1 eval page(s) of the page index are pages this model has been trained on ({first_train[0]} page "
            f"{first_train[1]} ({run} (from step 0)))") in caplog.text  # the job says so before training
    recorded = trained_pages_of(run / "model")
    assert set(recorded) == {(r["pdf"], r["page"]) for r in rows}  # both splits' train pages
    assert recorded[first_train] == f"{run} (from step 0)"
    soup_dir = soup([run / "model"], tmp_path / "soup")
    assert (soup_dir / TRAINED_PAGES_NAME).read_bytes() == (run / "model" / TRAINED_PAGES_NAME).read_bytes()

    cfg = load_config(overrides=base)
    with pytest.raises(EvalRunError, match=(rf"1 of the 1 eval pages of {pages_b} are pages {soup_dir} was trained on "
                                            rf".*{first_train[0]} page {first_train[1]} \({run} \(from step 0\)\).*"
                                            r"set eval_run.on_trained_pages: flag")):
        run_generation_and_scoring(cfg, soup_dir, pages_b, tests, tmp_path / "refused", backend=_PlainBackend())
    assert not (tmp_path / "refused" / "generations.jsonl").exists()

    flag = load_config(overrides={**base, "eval_run": {"progress": False, "on_trained_pages": "flag"}})
    run_generation_and_scoring(flag, tiny_model_dir, pages_b, tests, tmp_path / "baseline", backend=_PlainBackend())
    run_generation_and_scoring(flag, soup_dir, pages_b, tests, tmp_path / "trained", backend=_PlainBackend())
    summary = json.loads((tmp_path / "trained" / "summary.json").read_text())
    assert summary["trained_pages"] == [{"pdf": first_train[0], "page": first_train[1], "by": f"{run} (from step 0)"}]
    assert "trained_pages" not in json.loads((tmp_path / "baseline" / "summary.json").read_text())
    comparison = evaluate.compare_folders(flag, tmp_path / "baseline", tmp_path / "trained", tmp_path / "c.json",
                                          tmp_path / "c.csv").to_json()
    assert comparison["guards"]["trained_pages"] == {"trained": [{"pdf": first_train[0], "page": first_train[1]}]}
    assert any("1 eval page(s) are pages the trained model was trained on" in w for w in comparison["guards"]["warnings"])
    assert [p["trained_on"] for p in comparison["pages"] if "trained_on" in p] == [["trained"]]
    html = build_report(comparison, {}, ReportSettings.from_config(flag))
    assert "eval pages the trained model was trained on (scored, flagged)" in html
    assert "1 eval page(s) are pages the trained model was trained on" in html

    # a run on that model inherits its pages: its own evaluation refuses them too
    later = tmp_path / "later"
    assert train_seed(load_config(overrides=base), seed=0, model_path=run / "model", pages=pages_a, tests_dir=tests,
                      run_dir=later, reward_funcs=[LowIdReward()]) == 0
    assert set(trained_pages_of(later / "model")) == set(recorded)
    assert trained_pages_of(later / "model")[(rows[4]["pdf"], rows[4]["page"])] == f"{run} (from step 1)"
