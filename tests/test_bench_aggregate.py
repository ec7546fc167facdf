"""olmpipe.bench.aggregate and the ``olmpipe bench score`` command on the bundled sample."""

import importlib.util
import json
import shutil
from pathlib import Path

import pytest

from olmpipe.bench import BenchScorer, load_tests, score_candidate
from olmpipe.bench.aggregate import MISSING_REASON, bootstrap_ci, load_bench_dir, read_candidate
from olmpipe.bench.cli import main

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "bench" / "olmocr-sample"
MATH_READY = importlib.util.find_spec("olmpipe.bench.mathtest") is not None and shutil.which("chromium") is not None

# olmocr 0.4.27 on the sample (olmocr-sample/README.md): type -> (passing tests, tests)
REFERENCE_BY_TYPE = {"absent": (23, 24), "baseline": (20, 21), "math": (11, 12), "order": (12, 13),
                     "present": (24, 30), "table": (17, 20)}
REFERENCE_BY_JSONL = {"baseline": (19, 20), "blanks.jsonl": (1, 1), "dataset.jsonl": (87, 99)}


def small_tests():
    return load_tests([
        {"pdf": "d.pdf", "page": 1, "id": "p", "type": "present", "text": "alpha"},
        {"pdf": "d.pdf", "page": 2, "id": "q", "type": "present", "text": "beta"},
        {"pdf": "e.pdf", "page": 1, "id": "r", "type": "absent", "text": "gamma"},
    ], source="x.jsonl") + load_tests([{"pdf": "e.pdf", "page": 1, "id": "b", "type": "baseline"}], source="baseline")


def test_repeats_majority_missing_pages_and_files():
    texts = {("d.pdf", 1, 1): "alpha", ("d.pdf", 1, 2): "alpha", ("d.pdf", 1, 3): "nope",  # p: 2/3 -> pass
             ("e.pdf", 1, 1): "gamma here", ("e.pdf", 1, 2): "fine text"}  # r: 1/2 -> fail, b: 2/2
    score = score_candidate(small_tests(), texts)
    assert score.test_scores == {"p": 2 / 3, "q": 0.0, "r": 0.5, "b": 1.0}
    assert score.by_jsonl == {"baseline": 1.0, "x.jsonl": 1 / 3}
    assert score.overall == pytest.approx((1.0 + 1 / 3) / 2)
    assert score.by_type == {"absent": 0.5, "baseline": 1.0, "present": pytest.approx(1 / 3)}
    missing = [v for v in score.verdicts if v.test_id == "q"]
    assert len(missing) == 1 and missing[0].reason == MISSING_REASON and missing[0].repeat is None
    assert len([v for v in score.verdicts if v.test_id == "p"]) == 3
    out = score.to_json()
    assert set(out) == {"overall", "by_type", "by_jsonl", "ci95", "short_answer_guard"} and len(out["ci95"]) == 2
    assert out["short_answer_guard"] == {k: out[k] for k in ("overall", "by_type", "by_jsonl", "ci95")}  # no short pass
    json.dumps(out)


def test_guarded_scores_fail_passes_of_too_short_answers_beside_the_reference():
    """A repeat answering "a" passes present "alpha" in olmOCR-Bench (partial_ratio aligns "a" inside
    it, olmocr #461): the reference score counts it, the guarded score beside it does not, and the
    verdict line says so; a real answer's pass is kept by both."""
    texts = {("d.pdf", 1, 1): "a", ("d.pdf", 1, 2): "a", ("d.pdf", 1, 3): "nope",  # p: 2/3, both short
             ("d.pdf", 2, 1): "beta", ("e.pdf", 1, 1): "fine text"}
    score = score_candidate(small_tests(), texts)
    assert score.test_scores["p"] == 2 / 3 and score.by_type["present"] == pytest.approx((2 / 3 + 1) / 2)
    guarded = score.to_json()["short_answer_guard"]
    assert guarded["by_type"]["present"] == 0.5 and guarded["by_jsonl"]["x.jsonl"] == pytest.approx(2 / 3)
    assert guarded["overall"] < score.overall
    assert [(v.repeat, v.passed, v.short_answer) for v in score.verdicts if v.test_id == "p"] == [
        (1, True, True), (2, True, True), (3, False, False)]
    assert not any(v.short_answer for v in score.verdicts if v.test_id != "p")


def test_bootstrap_ci_is_seeded_and_brackets_the_mean():
    groups = [[1.0] * 19 + [0.0], [1.0], [1.0] * 87 + [0.0] * 12]
    lo, hi = bootstrap_ci(groups)
    assert (lo, hi) == bootstrap_ci(groups)
    assert lo < (0.95 + 1 + 87 / 99) / 3 < hi
    assert bootstrap_ci([]) == (0.0, 0.0) and bootstrap_ci([[1.0, 1.0]]) == (1.0, 1.0)


def test_read_candidate_and_bench_dir():
    bench = load_bench_dir(SAMPLE)
    assert bench.candidates == ["olmocr_pipeline"] and len(bench.pdfs) == 21 and len(bench.tests) == 120
    texts = read_candidate(SAMPLE / "olmocr_pipeline", bench.pdfs)
    assert len(texts) == 23
    assert ("blank_book_pg1.pdf", 1, 1) in texts and texts[("blank_book_pg1.pdf", 1, 1)] == ""
    assert ("mattsnotes.pdf", 3, 1) in texts
    assert any(pdf.startswith("headers_footers/") for pdf, _, _ in texts)


def _check_sample_numbers(cand: dict) -> None:
    types = REFERENCE_BY_TYPE if MATH_READY else {k: v for k, v in REFERENCE_BY_TYPE.items() if k != "math"}
    for t, (passed, total) in types.items():
        assert cand["by_type"][t] == pytest.approx(passed / total, abs=1e-12), t
    if MATH_READY:
        for f, (passed, total) in REFERENCE_BY_JSONL.items():
            assert cand["by_jsonl"][f] == pytest.approx(passed / total, abs=1e-12), f
        assert round(cand["overall"] * 100, 1) == 94.3
        assert cand["ci95"][0] <= cand["overall"] <= cand["ci95"][1]
    else:
        assert cand["by_jsonl"]["baseline"] == 0.95 and cand["by_jsonl"]["blanks.jsonl"] == 1.0


def test_score_candidate_reproduces_the_reference_on_the_sample():
    bench = load_bench_dir(SAMPLE)
    texts = read_candidate(SAMPLE / "olmocr_pipeline", bench.pdfs)
    with BenchScorer(processes=0, timeout_s=60) as scorer:
        _check_sample_numbers(score_candidate(bench.tests, texts, scorer=scorer).to_json())


def test_cli_score_writes_json_and_failed_verdicts(tmp_path, capsys):
    out, failed = tmp_path / "scores.json", tmp_path / "failed.jsonl"
    code = main(["score", str(SAMPLE), "--json", str(out), "--failed-out", str(failed), "--processes", "1",
                 "--no-progress"])
    assert code == 0
    printed = capsys.readouterr().out
    assert "olmocr_pipeline" in printed and "dataset.jsonl" in printed and "absent" in printed
    cand = json.loads(out.read_text())["candidates"]["olmocr_pipeline"]
    _check_sample_numbers(cand)
    rows = [json.loads(line) for line in failed.read_text().splitlines()]
    assert rows and all(not r["passed"] and r["reason"] and r["candidate"] == "olmocr_pipeline" for r in rows)
    assert {"test_id", "type", "jsonl", "pdf", "page", "repeat"} <= set(rows[0])
    if MATH_READY:
        assert len(rows) == 120 - (19 + 1 + 87)


def test_cli_errors(tmp_path, capsys):
    assert main(["score", str(tmp_path / "nowhere")]) == 2
    assert main(["score", str(SAMPLE), "--candidate", "nobody", "--no-progress"]) == 2
    bad = tmp_path / "bench"
    shutil.copytree(SAMPLE / "pdfs", bad / "pdfs")
    (bad / "t.jsonl").write_text('{"pdf": "earnings.pdf", "page": 1, "id": "x", "type": "present"}\n')
    assert main(["score", str(bad), "--no-progress"]) == 2
    assert "t.jsonl:1: test 'x': missing field(s) 'text'" in capsys.readouterr().err
