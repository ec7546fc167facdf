"""olmpipe.bench.model: loading and validating olmOCR-Bench test files."""

import json
import pickle
from pathlib import Path

import pytest

from olmpipe.bench import (
    BaselineTest,
    MathTest,
    PresenceTest,
    TableTest,
    TestLoadError,
    baseline_tests_for,
    load_tests,
)

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = ROOT / "data" / "bench" / "olmocr-sample"
PARITY = ROOT.parent / "shared" / "bench" / "parity-dev"


def rec(**fields):
    base = {"pdf": "a.pdf", "page": 1, "id": "t1", "type": "present", "text": "hello world"}
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not ...})


def load_one(**fields):
    return load_tests([rec(**fields)], source="f.jsonl")[0]


def error_of(line: str) -> TestLoadError:
    with pytest.raises(TestLoadError) as info:
        load_tests(["", line], source="f.jsonl")
    return info.value


def test_sample_loads_with_types_and_sources():
    tests = load_tests(SAMPLE / "dataset.jsonl")
    assert len(tests) == 99
    counts = {}
    for t in tests:
        counts[t.type] = counts.get(t.type, 0) + 1
        assert t.source == "dataset.jsonl" and t.line >= 1
    assert counts == {"present": 30, "absent": 24, "table": 20, "order": 13, "math": 12}
    assert all(isinstance(t, MathTest) for t in tests if t.type == "math")
    assert all(isinstance(t, TableTest) for t in tests if t.type == "table")
    # line numbers count the blank separator lines of the file
    lines = (SAMPLE / "dataset.jsonl").read_text().split("\n")
    assert all(json.loads(lines[t.line - 1])["id"] == t.id for t in tests)


def test_blanks_file_without_final_newline():
    (test,) = load_tests(SAMPLE / "blanks.jsonl")
    assert isinstance(test, BaselineTest) and test.max_length == 10 and test.checked == "verified"


def test_common_fields_and_record_round_trip():
    t = load_one(max_diffs=2, checked="rejected", url="http://x", case_sensitive=False)
    assert (t.id, t.pdf, t.page, t.type, t.max_diffs, t.checked, t.url) == ("t1", "a.pdf", 1, "present", 2,
                                                                            "rejected", "http://x")
    again = load_tests([json.dumps(t.to_record())], source="g.jsonl")[0]
    assert again.to_record() == t.to_record()


def test_tests_are_picklable_and_immutable():
    t = load_one()
    clone = pickle.loads(pickle.dumps(t))
    assert clone.to_record() == t.to_record() and clone.source == "f.jsonl"
    with pytest.raises(AttributeError):
        t.text = "other"


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ("{not json", "malformed JSON"),
        ("[1, 2]", "must be a JSON object"),
        (rec(type="sideways"), "unknown test type 'sideways'"),
        (rec(type=None), "unknown test type None"),
        (rec(text=...), "missing field(s) 'text'"),
        (rec(pdf=...), "missing field(s) 'pdf'"),
        (rec(colour="red"), "unknown field(s) 'colour'"),
        (rec(text="   "), "'text' is empty"),
        (rec(text="** **"), "'text' is empty"),
        (rec(text="abc", max_diffs=3), "max_diffs 3 is too large"),
        (rec(max_diffs=-1), "'max_diffs' must be >= 0"),
        (rec(max_diffs=1.5), "'max_diffs' must be an integer"),
        (rec(max_diffs=True), "'max_diffs' must be an integer"),
        (rec(page=0), "'page' must be >= 1"),
        (rec(page="1"), "'page' must be an integer"),
        (rec(pdf=""), "'pdf' is empty"),
        (rec(id=""), "'id' is empty"),
        (rec(text=5), "'text' must be a string"),
        (rec(case_sensitive="no"), "'case_sensitive' must be true or false"),
        (rec(checked="maybe"), "'checked' must be one of"),
        (rec(type="order", text=..., before="abcd", after="efghij", max_diffs=3), "max_diffs 3 is too large"),
        (rec(type="order", text=..., before="", after="x"), "'before' is empty"),
        (rec(type="table", text=..., cell=""), "'cell' is empty"),
        (rec(type="math", text=..., math="  "), "'math' is empty"),
        (rec(type="baseline", text=..., max_length=-2), "'max_length' must be >= 0"),
        (rec(type="format", format="underline"), "'format' must be one of"),
        (rec(type="footnote", text=..., marker="a b"), "cannot contain spaces"),
    ],
)
def test_bad_records_name_file_line_id_and_reason(line, reason):
    err = error_of(line)
    assert err.file == "f.jsonl" and err.line == 2
    assert reason in err.reason
    assert str(err).startswith("f.jsonl:2:")
    if '"id": "t1"' in line:
        assert err.test_id == "t1" and "'t1'" in str(err)


def test_duplicate_ids_and_collect_mode():
    lines = [rec(), "{oops", rec(id="t2", type="nope"), rec(), rec(id="t3")]
    with pytest.raises(TestLoadError, match="malformed JSON"):
        load_tests(lines)
    tests, errors = load_tests(lines, collect_errors=True, source="x.jsonl")
    assert [t.id for t in tests] == ["t1", "t3"]
    assert [(e.line, e.test_id) for e in errors] == [(2, None), (3, "t2"), (4, "t1")]
    assert "duplicate test id (first seen on line 1)" in errors[2].reason
    assert errors[0].to_dict() == {"file": "x.jsonl", "line": 2, "test_id": None, "reason": errors[0].reason}
    assert pickle.loads(pickle.dumps(errors[1])).reason == errors[1].reason


def test_file_errors(tmp_path):
    with pytest.raises(TestLoadError, match="cannot read test file"):
        load_tests(tmp_path / "missing.jsonl")
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(rec().encode() + b"\n" + b'{"pdf": "\xff"}\n')
    tests, errors = load_tests(bad, collect_errors=True)
    assert len(tests) == 1 and errors[0].line == 2 and "not valid UTF-8" in errors[0].reason
    assert errors[0].file == "bad.jsonl"


def test_dicts_are_accepted_and_table_none_neighbours():
    (t,) = load_tests([{"pdf": "a.pdf", "page": 1, "id": "t", "type": "table", "cell": "x", "up": None}])
    assert t.up == "" and t.source == "<lines>"


def test_presence_query_is_normalized():
    t = load_one(text="**Bold**\n\u201cquote\u201d", case_sensitive=False)
    assert isinstance(t, PresenceTest) and t._query == 'bold "quote"'


def test_baseline_tests_for_matches_reference_auto_baselines():
    tests = load_tests(SAMPLE / "dataset.jsonl") + load_tests(SAMPLE / "blanks.jsonl")
    pdfs = sorted(p.relative_to(SAMPLE / "pdfs").as_posix() for p in (SAMPLE / "pdfs").rglob("*.pdf"))
    auto = baseline_tests_for(pdfs, tests)
    assert all(t.source == "baseline" and t.page == 1 and t.type == "baseline" for t in auto)
    assert "blank_book_pg1.pdf_baseline" not in {t.id for t in auto}
    if PARITY.is_dir():
        expected = {t.id: t.to_record() for t in load_tests(PARITY / "baseline_auto.jsonl")}
        assert {t.id: t.to_record() for t in auto} == expected
    assert len(auto) == 20
    # tests alone also work (their PDFs), and PDFs that already have a baseline get none
    assert {t.pdf for t in baseline_tests_for(tests)} == {t.pdf for t in tests} - {"blank_book_pg1.pdf"}


@pytest.mark.parametrize(
    ("fields", "largest_ok", "reason"),
    [
        # table: the longest compared text ("right" here, 9 chars after normalization) bounds max_diffs
        ({"type": "table", "text": ..., "cell": "Total", "right": "1,234,567"}, 9,
         "larger than the longest text this table test compares (9 characters"),
        ({"type": "math", "text": ..., "math": " x^2 + y "}, 7, "larger than the equation (7 characters)"),
        # footnote: a given text must keep a positive fuzzy threshold (max_diffs < its length)
        ({"type": "footnote", "text": ..., "marker": "1", "appears_after_marker": "See page"}, 7,
         "too large for 'appears_after_marker' of 8 characters"),
        ({"type": "footnote", "text": ..., "marker": "12"}, 2, "larger than the marker (2 characters)"),
    ],
    ids=["table", "math", "footnote-text", "footnote-marker-only"],
)
def test_max_diffs_beyond_the_compared_text_is_an_error(fields, largest_ok, reason):
    assert load_one(**fields, max_diffs=largest_ok).max_diffs == largest_ok
    for too_large in (largest_ok + 1, 10**12, 10**30):
        err = error_of(rec(**fields, max_diffs=too_large))
        assert err.line == 2 and err.test_id == "t1" and reason in err.reason
        assert f"max_diffs {too_large} " in err.reason


def test_max_diffs_bounds_reject_no_test_of_the_real_bench():
    files = sorted(SAMPLE.glob("*.jsonl"))
    if (PARITY / "baseline_auto.jsonl").is_file():
        files.append(PARITY / "baseline_auto.jsonl")
    for path in files:
        tests, errors = load_tests(path, collect_errors=True)
        assert errors == [] and tests
