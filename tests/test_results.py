"""Tests of olmpipe.results: a results folder as DataFrames, and the README's notebook example."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest
from support.runs import make_upstream_results

from olmpipe.config import load_config
from olmpipe.evaluate.compare import CompareSettings, compare_runs, load_run, write_comparison
from olmpipe.results import load_results, read_completions, read_verdicts

REPO = Path(__file__).resolve().parents[1]


def readme_example() -> str:
    """The Python block of the README's "Results in a notebook" section."""
    section = (REPO / "README.md").read_text().split("## Results in a notebook", 1)[1].split("\n## ", 1)[0]
    return re.search(r"```python\n(.*?)```", section, re.DOTALL)[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A results folder made without a model: two scored runs, two seeds' metrics, completions, comparison."""
    make_upstream_results(tmp_path, "m")
    results = tmp_path / "results"
    comparison = compare_runs(load_run(results / "baseline" / "m"), load_run(results / "evaluate" / "m"),
                              CompareSettings.from_config(load_config(REPO / "config" / "config.yaml")))
    write_comparison(comparison, results / "evaluate" / "comparison.json", results / "evaluate" / "comparison.csv")
    completions = results / "train" / "seed0" / "completions"
    completions.mkdir()
    rows = [{"step": step, "page": "doc1.pdf#1", "completion": f"text {step}", "advantage": 0.5,
             "rewards": {"bench_reward": 0.25 * step, "eos_reward": 1.0},
             "verdicts": [{"id": "a1", "type": "present", "passed": True, "reason": ""}]} for step in (1, 2)]
    for row in rows:
        (completions / f"step{row['step']:06d}.jsonl").write_text(json.dumps(row) + "\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_readme_example_gives_pass_rates_per_type_and_stage(workdir):
    lines = readme_example().strip().splitlines()
    namespace: dict = {}
    exec("\n".join(lines[:-1]), namespace)  # noqa: S102 - running the README example is the test
    table = eval(lines[-1], namespace)
    # the same rates, counted by hand from the verdict files
    expected: dict[tuple[str, str], list[bool]] = {}
    for stage in ("baseline", "evaluate"):
        for line in (workdir / "results" / stage / "m" / "verdicts.jsonl").read_text().splitlines():
            verdict = json.loads(line)
            expected.setdefault((verdict["type"], stage), []).append(verdict["passed"])
    assert sorted(table.columns) == ["baseline", "evaluate"]
    assert {(t, s): table.loc[t, s] for t in table.index for s in table.columns} == pytest.approx(
        {key: sum(v) / len(v) for key, v in expected.items()})
    assert table.loc["absent", "baseline"] != table.loc["absent", "evaluate"]  # the runs differ


def test_every_table_of_a_results_folder(workdir):
    results = load_results("results")
    assert len(results.verdicts) == 2 * 6 * 3 and results.verdicts["passed"].dtype == bool
    assert set(results.generations["stage"]) == {"baseline", "evaluate"}
    assert set(zip(results.generations["pdf"], results.generations["page"])) == {
        ("doc1.pdf", 1), ("doc2.pdf", 1), ("doc3.pdf", 1)}
    assert results.metrics.groupby("seed")["step"].max().to_dict() == {0: 8, 1: 8}
    assert list(results.completions["rewards/bench_reward"]) == [0.25, 0.5]
    assert list(results.completions["seed"]) == [0, 0]
    overall = results.comparison.set_index(["scope", "name"]).loc[("overall", "overall")]
    saved = pd.read_csv(workdir / "results" / "evaluate" / "comparison.csv")
    assert overall["trained"] == pytest.approx(saved.loc[saved["scope"] == "overall", "trained"].item())


def test_stages_that_have_not_run_give_empty_tables(tmp_path):
    (tmp_path / "results" / "validate").mkdir(parents=True)
    results = load_results(tmp_path / "results")
    for name in ("verdicts", "generations", "metrics", "completions", "comparison", "difficulty"):
        assert getattr(results, name).empty, name
    assert read_completions(tmp_path).empty
    with pytest.raises(FileNotFoundError, match="no such results folder"):
        load_results(tmp_path / "nope")


def test_a_bad_line_names_the_file_and_line(tmp_path):
    good = '{"test_id": "a", "type": "present", "jsonl": "x.jsonl", "pdf": "a.pdf", "page": 1, "repeat": 0, "passed": true}'
    (tmp_path / "verdicts.jsonl").write_text(good + '\n{not json\n')
    with pytest.raises(ValueError, match=r"verdicts.jsonl:2: not valid JSON"):
        read_verdicts(tmp_path)
    (tmp_path / "verdicts.jsonl").write_text(good + '\n{"test_id": "b", "passed": true}\n')
    with pytest.raises(ValueError, match=r"verdicts.jsonl:2: verdict lacks key\(s\) type, jsonl, pdf, page, repeat"):
        read_verdicts(tmp_path)


def test_difficulty_statistics_with_the_filters_reasons(tmp_path):
    from olmpipe.records.difficulty import DroppedPage, PageDifficulty, write_dropped, write_stats

    folder = tmp_path / "results" / "difficulty"
    pages = [PageDifficulty(pdf, 1, 2, 2, [r, r2], (r + r2) / 2, abs(r - r2), r == r2, {}, 0.5, {"t": 0.5},
                            False, False, ["a.jsonl"], ["present"]) for pdf, r, r2 in (("a.pdf", 1.0, 1.0),
                                                                                      ("b.pdf", 0.0, 1.0))]
    write_stats(folder / "stats.jsonl", pages)
    results = load_results(tmp_path / "results")
    assert results.difficulty["dropped"].isna().all()  # the filter has not run
    write_dropped(folder / "dropped.jsonl", [DroppedPage("a.pdf", 1, "zero_spread", 0.0, 1.0, 0.5, False, False,
                                                         ["a.jsonl"], ["present"])])
    frame = load_results(tmp_path / "results").difficulty
    assert frame["dropped"][0] == "zero_spread" and pd.isna(frame["dropped"][1])
    assert list(frame["zero_spread"]) == [True, False]
    assert frame.loc[1, "rewards"] == [0.0, 1.0]
