"""Tests of olmpipe.evaluate.compare: every number of a comparison of two hand-made runs, checked by hand.

The fixture is a bench of two categories (a.jsonl: 4 tests, b.jsonl: 2 tests) on three one-page
PDFs, and two candidate folders of three repeats per page whose pass patterns are known:

    test  type     page  baseline repeats -> majority   trained repeats -> majority
    a1    present  doc1  1 1 0 -> pass                  1 1 1 -> pass
    a2    present  doc1  0 0 1 -> fail                  1 1 1 -> pass   (gain)
    a3    present  doc2  0 0 0 -> fail                  1 1 1 -> pass   (gain)
    a4    absent   doc2  0 0 0 -> fail                  1 1 1 -> pass   (gain)
    b1    present  doc3  0 0 0 -> fail                  1 0 0 -> fail
    b2    absent   doc3  0 0 0 -> fail                  0 1 1 -> pass   (gain)

Scores (olmOCR-Bench aggregation): a.jsonl and b.jsonl score the share of tests whose majority
passes: baseline a = 1/4, b = 0, overall = 1/8; trained a = 1, b = 1/2, overall = 3/4. Test types
average the per-test pass rates over repeats: baseline present (2/3 + 1/3 + 0 + 0) / 4 = 1/4,
absent 0; trained present (1 + 1 + 1 + 1/3) / 4 = 5/6, absent (1 + 2/3) / 2 = 5/6.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import pytest
from support.runs import BASELINE_TEXTS, TRAINED_TEXTS, make_run

from olmpipe.evaluate import compare
from olmpipe.evaluate.compare import CompareSettings, ComparisonError, compare_runs, format_table, load_run
from olmpipe.evaluate.guards import GuardSettings

SETTINGS = CompareSettings(bootstrap_samples=5, ci_level=0.95, permutations=1000, exact_max=16, seed=0)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> tuple[compare.RunData, compare.RunData]:
    root = tmp_path_factory.mktemp("runs")
    base = make_run(root, "baseline", BASELINE_TEXTS)
    trained = make_run(root, "trained", TRAINED_TEXTS, lose_front_matter={("doc1.pdf", 1, 1)},
                       finish_length={("doc3.pdf", 1, 3)})  # fmt: skip
    return load_run(base, "base-model"), load_run(trained, "souped")


@pytest.fixture(scope="module")
def comparison(runs):
    return compare_runs(*runs, SETTINGS)


def test_per_test_majority_matches_the_hand_made_pattern(runs):
    base, trained = runs
    assert {t: (o.passes, o.repeats, o.passed) for t, o in base.tests.items()} == {
        "a1": (2, 3, True), "a2": (1, 3, False), "a3": (0, 3, False),
        "a4": (0, 3, False), "b1": (0, 3, False), "b2": (0, 3, False),
    }  # fmt: skip
    assert {t: (o.passes, o.passed) for t, o in trained.tests.items()} == {
        "a1": (3, True), "a2": (3, True), "a3": (3, True),
        "a4": (3, True), "b1": (1, False), "b2": (2, True),
    }  # fmt: skip


def test_scores_and_counts(comparison):
    expected = {  # (scope, name): (tests, baseline, trained, gained, lost, changed)
        ("overall", "overall"): (6, 1 / 8, 3 / 4, 4, 0, 4),
        ("guarded", "overall"): (6, 1 / 8, 3 / 4, 4, 0, 4),  # no answer is too short for its tests
        ("type", "absent"): (2, 0.0, 5 / 6, 2, 0, 2),
        ("type", "present"): (4, 1 / 4, 5 / 6, 2, 0, 4),  # b1's pass rate rose 0 -> 1/3 too
        ("jsonl", "a.jsonl"): (4, 1 / 4, 1.0, 3, 0, 3),
        ("jsonl", "b.jsonl"): (2, 0.0, 1 / 2, 1, 0, 1),
    }
    assert [(r.scope, r.name) for r in comparison.rows] == list(expected)
    for (scope, name), (n, b, t, gained, lost, changed) in expected.items():
        row = comparison.row(scope, name)
        assert (row.tests, row.gained, row.lost, row.changed) == (n, gained, lost, changed)
        assert row.baseline == pytest.approx(b)
        assert row.trained == pytest.approx(t)
        assert row.difference == pytest.approx(t - b)


def test_paired_sign_flip_p_values_by_hand(comparison):
    # overall: changed tests a2, a3, a4 weigh 1/(2*4) and b2 1/(2*2); the observed sum 5/8 is
    # reached (in absolute value) only by the 2 of 16 sign assignments with all signs equal.
    # present (pass rates): differences 1/3, 2/3, 1, 1/3 (a1, a2, a3, b1) weigh 1/4, i.e. 1, 2, 3, 1
    #   twelfths: only the two all-equal sign assignments reach |7|: 2 of 16.
    # absent (pass rates): 1 and 2/3 weigh 1/2: sums +-5/6 and +-1/6: 2 of 4.
    # a.jsonl: 3 changed of equal weight: 2 of 8. b.jsonl: one changed test: p = 1.
    expected = {"overall": 2 / 16, "present": 2 / 16, "absent": 2 / 4, "a.jsonl": 2 / 8, "b.jsonl": 1.0}
    for row in comparison.rows:
        assert row.test_method == "exact"
        assert row.p_value == pytest.approx(expected[row.name]), row.name


def test_bootstrap_intervals_by_hand(comparison):
    # seed 0, 5 resamples. The draws are rng.integers(0, n, size=(5, n)) per stratum in order:
    rng = np.random.default_rng(0)
    assert rng.integers(0, 4, size=(5, 4)).tolist() == [
        [3, 2, 2, 1],
        [1, 0, 0, 0],
        [0, 3, 2, 3],
        [2, 2, 3, 2],
        [2, 2, 2, 3],
    ]
    assert rng.integers(0, 2, size=(5, 2)).tolist() == [[0, 1], [1, 0], [0, 1], [1, 0], [1, 1]]
    # overall, baseline a = [1,0,0,0] -> resampled means 0, 3/4, 1/4, 0, 0; b = [0,0] -> 0:
    #   replicates (a+b)/2 = 0, .375, .125, 0, 0 -> sorted 0, 0, 0, .125, .375.
    #   2.5th percentile at position 0.1 -> 0; 97.5th at 3.9 -> .125 + .9 * .25 = .35
    # trained a = 1 always; b = [0,1] -> 1/2, 1/2, 1/2, 1/2, 1 -> replicates .75 x4, 1.0:
    #   2.5th -> .75; 97.5th -> .75 + .9 * .25 = .975
    # difference replicates .75, .375, .625, .75, 1.0 -> sorted .375, .625, .75, .75, 1:
    #   2.5th -> .375 + .1 * .25 = .4; 97.5th -> .75 + .9 * .25 = .975
    overall = comparison.row("overall", "overall")
    assert overall.baseline_ci.as_list() == pytest.approx([0.0, 0.35])
    assert overall.trained_ci.as_list() == pytest.approx([0.75, 0.975])
    assert overall.difference_ci.as_list() == pytest.approx([0.4, 0.975])
    # b.jsonl alone (a fresh rng, seed 0): draws [[1,1],[1,0],[0,0],[0,0],[0,1]] on trained [0,1]
    #   -> means 1, .5, 0, 0, .5 -> sorted 0, 0, .5, .5, 1 -> [0, .5 + .9 * .5] = [0, .95]
    assert np.random.default_rng(0).integers(0, 2, size=(5, 2)).tolist() == [
        [1, 1],
        [1, 0],
        [0, 0],
        [0, 0],
        [0, 1],
    ]
    b = comparison.row("jsonl", "b.jsonl")
    assert b.baseline_ci.as_list() == [0.0, 0.0]
    assert b.trained_ci.as_list() == pytest.approx([0.0, 0.95])
    assert b.difference_ci.as_list() == pytest.approx([0.0, 0.95])
    # absent (pass rates, baseline all 0): the same draws on trained [1, 2/3] give means
    #   2/3, 5/6, 1, 1, 5/6 -> sorted 2/3, 5/6, 5/6, 1, 1 -> [2/3 + .1 * 1/6, 1]
    absent = comparison.row("type", "absent")
    assert absent.baseline_ci.as_list() == [0.0, 0.0]
    assert absent.trained_ci.as_list() == pytest.approx([2 / 3 + 0.1 / 6, 1.0])
    assert absent.difference_ci.as_list() == pytest.approx([2 / 3 + 0.1 / 6, 1.0])


def test_a_jsonl_interval_matches_a_plain_loop(comparison):
    """The a.jsonl intervals equal a straightforward re-run of the documented resampling."""
    b = np.array([1, 0, 0, 0.0])
    draws = np.random.default_rng(0).integers(0, 4, size=(5, 4))
    b_reps = sorted(sum(b[i] for i in row) / 4 for row in draws)  # 0, 0, 0, .25, .75
    assert b_reps == [0, 0, 0, 0.25, 0.75]
    row = comparison.row("jsonl", "a.jsonl")
    assert row.baseline_ci.as_list() == pytest.approx([0.0, 0.25 + 0.9 * 0.5])
    assert row.trained_ci.as_list() == [1.0, 1.0]
    assert row.difference_ci.as_list() == pytest.approx([1 - (0.25 + 0.9 * 0.5), 1.0])


def test_guards_by_hand(comparison):
    g = comparison.guards
    assert g["gains"] == {
        "gained": 4, "lost": 0, "gained_by_type": {"absent": 2, "present": 2}, "lost_by_type": {},
        "absent_share_of_gains": 0.5,
    }  # fmt: skip
    assert g["became_empty"] == [{"pdf": "doc3.pdf", "page": 1, "repeats": [3]}]
    assert g["lost_front_matter"] == [{"pdf": "doc1.pdf", "page": 1, "repeats": [1]}]
    assert g["eos"] == {"baseline_rate": 1.0, "trained_rate": 8 / 9, "baseline_failed": 0,
                        "trained_failed": 0, "generations": 9}  # fmt: skip
    base_lengths = [len(t) for page in BASELINE_TEXTS.values() for t in page]
    trained_lengths = [len(t) for page in TRAINED_TEXTS.values() for t in page]
    assert g["length"]["baseline_mean_chars"] == pytest.approx(np.mean(base_lengths))
    assert g["length"]["trained_mean_chars"] == pytest.approx(np.mean(trained_lengths))
    # doc2: baseline "junk text" x3 (9 chars) -> trained "gamma" x3 (5 chars): ratio 5/9
    pages = {p["pdf"]: p for p in comparison.pages}
    assert pages["doc2.pdf"]["length_ratio"] == pytest.approx(5 / 9)
    assert pages["doc2.pdf"]["change"] == pytest.approx(1.0)
    assert pages["doc1.pdf"]["change"] == pytest.approx(0.5)
    assert pages["doc3.pdf"]["change"] == pytest.approx(0.5)
    assert (pages["doc1.pdf"]["baseline_passed"], pages["doc1.pdf"]["trained_passed"]) == (1, 2)
    # doc3: "noise" x3 (5) -> "delta", "noise", "" (10/3): ratio 2/3, inside [1/2, 2]
    assert pages["doc3.pdf"]["length_ratio"] == pytest.approx(2 / 3)
    assert g["length"]["pages_outside_limit"] == []
    assert g["length"]["median_page_ratio"] == pytest.approx(2 / 3)
    warnings = "\n".join(g["warnings"])
    assert "2 of 4 gained tests are `absent`" in warnings
    assert "became empty on 1 page" in warnings
    assert "front matter lost on 1 page" in warnings
    assert "EOS rate fell from 100% to 89%" in warnings
    assert len(g["warnings"]) == 4


def test_length_guard_flags_pages_outside_the_limit(runs):
    strict = CompareSettings(bootstrap_samples=5, guards=GuardSettings(length_ratio_limit=1.6))
    g = compare_runs(*runs, strict).guards
    assert [p["pdf"] for p in g["length"]["pages_outside_limit"]] == ["doc2.pdf"]
    assert any("more than 1.6x on 1 of 3 page(s)" in w for w in g["warnings"])


def test_written_files_and_table(comparison, tmp_path):
    compare.write_comparison(comparison, tmp_path / "c.json", tmp_path / "c.csv")
    data = compare.read_comparison(tmp_path / "c.json")
    assert data["rows"][0]["difference_ci"] == pytest.approx([0.4, 0.975])
    assert data["baseline"]["name"] == "base-model" and data["trained"]["name"] == "souped"
    assert len(data["tests"]) == 6 and len(data["pages"]) == 3
    with open(tmp_path / "c.csv", newline="") as fh:
        rows = list(csv.DictReader(fh))
    assert [(r["scope"], r["name"]) for r in rows] == [
        ("overall", "overall"), ("guarded", "overall"), ("type", "absent"), ("type", "present"),
        ("jsonl", "a.jsonl"), ("jsonl", "b.jsonl")]
    assert float(rows[0]["p_value"]) == pytest.approx(0.125)
    assert float(rows[0]["difference_high"]) == pytest.approx(0.975)
    table = format_table(data)
    lines = table.splitlines()
    assert "overall" in lines[3] and "12.5% -> 75.0%" in lines[3] and "+62.5" in lines[3]
    assert "[ +40.0,  +97.5]" in lines[3] and "0.125" in lines[3]
    assert lines[4].startswith("guarded overall") and "12.5% -> 75.0%" in lines[4]
    assert not any("a.jsonl" in line for line in lines)
    assert table.count("WARNING") == 4


def test_monte_carlo_when_many_tests_changed(runs):
    mc = compare_runs(*runs, CompareSettings(bootstrap_samples=5, exact_max=1, permutations=999, seed=3))
    row = mc.row("overall", "overall")
    assert row.test_method == "monte-carlo"
    # exact p is 1/8; the Monte Carlo estimate (1 + hits) / 1000 must be close
    assert row.p_value == pytest.approx(0.125, abs=0.04)
    assert mc.row("jsonl", "b.jsonl").test_method == "exact"  # one changed test <= exact_max


def test_different_test_sets_are_rejected(runs, tmp_path):
    base, trained = runs
    fewer = compare.RunData(
        "x", "x", {k: v for k, v in trained.tests.items() if k != "b2"}, trained.generations
    )
    with pytest.raises(ComparisonError, match="different tests: 1 only in"):
        compare_runs(base, fewer, SETTINGS)
    missing = compare.RunData("x", "x", trained.tests, trained.generations[:-1])
    with pytest.raises(ComparisonError, match="different pages/repeats"):
        compare_runs(base, missing, SETTINGS)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("not json", "verdicts.jsonl:2: not valid JSON"),
        ('{"test_id": "a1"}', "verdicts.jsonl:2: verdict lacks key(s) type, jsonl"),
        (('{"test_id": "a1", "type": "present", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1, '
          '"repeat": 1, "passed": true}'), "verdicts.jsonl:2: duplicate verdict for test 'a1' repeat 1"),
        (('{"test_id": "a1", "type": "absent", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1, '
          '"repeat": 2, "passed": true}'), "verdicts.jsonl:2: test 'a1' has type/jsonl/pdf/page"),
        (('{"test_id": "a1", "type": "present", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1, '
          '"repeat": 2, "passed": "yes"}'), "verdicts.jsonl:2: 'passed' must be true or false"),
    ],
)  # fmt: skip
def test_bad_verdict_files_name_file_and_line(tmp_path, line, message):
    good = {"test_id": "a1", "type": "present", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1,
            "repeat": 1, "passed": True, "reason": ""}  # fmt: skip
    path = tmp_path / "verdicts.jsonl"
    path.write_text(json.dumps(good) + "\n" + line + "\n")
    with pytest.raises(ComparisonError, match=message.replace("(", r"\(").replace(")", r"\)")):
        compare.load_verdicts(path)


def test_missing_files_are_named(tmp_path):
    with pytest.raises(ComparisonError, match=r"verdicts.jsonl: file not found"):
        load_run(tmp_path)
    with pytest.raises(ComparisonError, match="run the evaluate stage first"):
        compare.read_comparison(tmp_path / "comparison.json")
    (tmp_path / "verdicts.jsonl").write_text("\n")
    with pytest.raises(ComparisonError, match="no verdicts"):
        compare.load_verdicts(tmp_path / "verdicts.jsonl")


def test_settings_from_config():
    from olmpipe.config import load_config

    cfg = load_config(overrides={"evaluate": {"seed": 7, "guards": {"eos_drop_warn": 0.2}}})
    s = CompareSettings.from_config(cfg)
    assert (s.seed, s.bootstrap_samples, s.guards.eos_drop_warn) == (7, 1000, 0.2)


def test_scores_equal_the_bench_engines_scores_json(runs, comparison):
    """The comparison aggregates like olmpipe.bench (olmOCR-Bench): same numbers as scores.json."""
    for run, attr in ((runs[0], "baseline"), (runs[1], "trained")):
        scores = json.loads((Path(run.folder) / "scores.json").read_text())
        assert getattr(comparison.row("overall", "overall"), attr) == pytest.approx(scores["overall"])
        guarded = scores["short_answer_guard"]["overall"]
        assert getattr(comparison.row("guarded", "overall"), attr) == pytest.approx(guarded)
        for name, value in scores["by_type"].items():
            assert getattr(comparison.row("type", name), attr) == pytest.approx(value)
        for name, value in scores["by_jsonl"].items():
            assert getattr(comparison.row("jsonl", name), attr) == pytest.approx(value)


def test_guarded_outcome_fails_the_passes_of_too_short_answers(tmp_path):
    """A verdict line marked short_answer (a pass the short-answer guard rejects) still counts for
    olmOCR-Bench's outcome, not for the guarded one; lines without the key (older files) are not short."""
    base = {"test_id": "a1", "type": "present", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1,
            "reason": ""}  # fmt: skip
    lines = [{**base, "repeat": 1, "passed": True, "short_answer": True},
             {**base, "repeat": 2, "passed": True, "short_answer": True},
             {**base, "repeat": 3, "passed": True}]
    (tmp_path / "verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in lines))
    (outcome,) = compare.load_verdicts(tmp_path / "verdicts.jsonl").values()
    assert (outcome.passes, outcome.short_passes, outcome.passed, outcome.guarded_passed) == (3, 2, True, False)


def test_a_page_without_output_counts_as_one_failed_run(tmp_path):
    rec = {"test_id": "a1", "type": "present", "jsonl": "a.jsonl", "pdf": "doc1.pdf", "page": 1,
           "repeat": None, "passed": False, "reason": "Missing MD files"}  # fmt: skip
    (tmp_path / "verdicts.jsonl").write_text(json.dumps(rec) + "\n")
    (outcome,) = compare.load_verdicts(tmp_path / "verdicts.jsonl").values()
    assert (outcome.passes, outcome.repeats, outcome.passed, outcome.rate) == (0, 1, False, 0.0)
    assert outcome.reason == "Missing MD files"
