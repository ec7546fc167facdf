"""olmpipe.bench.run / checks / tables / repeat / normalize: verdicts of each test type."""

import sys
import time
import types

import pytest

from olmpipe.bench import PageText, Verdict, load_tests, micro_macro, normalize_text, run_tests
from olmpipe.bench.repeat import ngram_repeats
from olmpipe.bench.tables import parse_html_tables, parse_markdown_tables


def make(**fields):
    base = {"pdf": "a.pdf", "page": 1, "id": "t", "type": "present"}
    base.update(fields)
    return load_tests([base])[0]


def verdict(page, /, **fields) -> Verdict:
    return run_tests(page, [make(**fields)])[0]


# ------------------------------------------------------------------------------------ normalize
@pytest.mark.parametrize(
    ("raw", "expected"),
    [
        ("a<br>b<br/>c", "a b c"),
        ("a \n\t b", "a b"),
        ("**bold** and __under__", "bold and under"),
        ("*it* and _it_", "it and it"),
        ("<b>x</b><i>y</i>", "xy"),
        ("\u2018q\u2019 \u201cd\u201d \u2013\u2014\u2212 \u00b5", "'q' \"d\" --- \u03bc"),
        ("e\u0301", "\u00e9"),
        ("snake_case_name", "snakecasename"),  # the reference strips underscores pairwise, too
    ],
)
def test_normalize_text(raw, expected):
    assert normalize_text(raw) == expected


def test_page_text_caches_and_coerces():
    page = PageText(None)
    assert page.raw == "" and page.normalized == ""
    assert PageText(b"\xffok").raw == "\ufffdok"
    assert PageText([{"role": "assistant", "content": "hi"}]).raw == "hi"
    page = PageText("**A** b")
    assert page.normalized is page.normalized and page.normalized_lower == "a b"


def test_normalize_and_tables_do_not_import_each_others_users():
    """normalize imports neither tables nor pagetext, not even lazily, and tables not pagetext: each
    imported alone in a fresh interpreter leaves the modules above it unloaded (PageText imports both)."""
    import subprocess

    code = ("import sys, olmpipe.bench.normalize as n; assert not {'olmpipe.bench.tables', 'olmpipe.bench.pagetext'} "
            "& set(sys.modules), sorted(sys.modules)\n"
            "import olmpipe.bench.tables; assert 'olmpipe.bench.pagetext' not in sys.modules\n"
            "import inspect; assert 'PageText' not in vars(n) and 'bench.tables' not in inspect.getsource(n)\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


# ------------------------------------------------------------------------------- present/absent
def test_present_absent_fuzzy_threshold():
    assert verdict("The quick brown fox.", text="quick brown").passed
    assert not verdict("The quick brwn fox.", text="quick brown").passed
    assert verdict("The quick brwn fox.", text="quick brown", max_diffs=1).passed
    assert verdict("nothing here", type="absent", text="quick brown").passed
    v = verdict("The quick brown fox", type="absent", text="quick brown")
    assert not v.passed and "Expected absence" in v.reason and v.type == "absent"


def test_present_case_and_windows():
    assert not verdict("HELLO world", text="hello").passed
    assert verdict("HELLO world", text="hello", case_sensitive=False).passed
    text = "header line " + "x" * 200 + " footer line"
    assert verdict(text, text="header", first_n=20).passed
    assert not verdict(text, text="footer", first_n=20).passed
    assert verdict(text, text="footer", last_n=20).passed
    assert verdict(text, text="footer", first_n=20, last_n=20).passed


def test_present_matches_through_markdown_and_html_breaks():
    assert verdict("**Total** revenue<br>grew", text="Total revenue grew").passed


# ------------------------------------------------------------------------------------------ order
def test_order():
    text = "Alpha paragraph. Then beta paragraph."
    assert verdict(text, type="order", before="Alpha", after="beta").passed
    v = verdict(text, type="order", before="beta", after="Alpha")
    assert not v.passed and "appears before" in v.reason
    assert not verdict(text, type="order", before="Gamma", after="beta").passed
    # repeated occurrences: some 'before' precedes some 'after'
    assert verdict("B A B", type="order", before="A", after="B").passed
    assert verdict("Alpah paragraph then beta", type="order", before="Alpha par", after="beta", max_diffs=2).passed


# ------------------------------------------------------------------------------------------ table
MD_TABLE = """Intro

| Year | Revenue | Profit |
|------|---------|--------|
| 2020 | 10 | 1 |
| 2021 | 12 | 2 |

after"""

HTML_TABLE = """<table><thead><tr><th>Name</th><th colspan="2">Scores</th></tr></thead>
<tr><td rowspan="2">Ann</td><td>1</td><td>2</td></tr>
<tr><td>3</td><td>4</td></tr></table>"""


def test_markdown_table_relationships():
    assert verdict(MD_TABLE, type="table", cell="12", left="2021", up="10", top_heading="Revenue",
                   left_heading="2021", right="2", down="").passed
    v = verdict(MD_TABLE, type="table", cell="12", top_heading="Profit")
    assert not v.passed and "top heading" in v.reason.lower()
    assert verdict("no tables", type="table", cell="12").reason == "No tables found in the content"
    assert not verdict(MD_TABLE, type="table", cell="12", ignore_markdown_tables=True).passed


def test_html_table_spans():
    (table,) = parse_html_tables(HTML_TABLE)
    assert table.rows == [["Name", "Scores", ""], ["Ann", "1", "2"], ["Ann", "3", "4"]]
    assert verdict(HTML_TABLE, type="table", cell="3", top_heading="Scores").passed
    assert verdict(HTML_TABLE, type="table", cell="4", top_heading="Scores").passed
    assert verdict(HTML_TABLE, type="table", cell="3", up="1", left="Ann").passed


def test_bad_span_fails_every_table_test_of_the_page():
    text = MD_TABLE + '\n<table><tr><td rowspan="x">a</td></tr></table>'
    v = verdict(text, type="table", cell="12", left="2021")
    assert not v.passed and "ValueError" in v.reason


def test_markdown_parser_details():
    assert parse_markdown_tables("a | b") == []  # one line is not a table
    (t,) = parse_markdown_tables("| a | b |\n| --- | :-: |\n| 1 |")
    assert t.rows == [["a", "b"], ["1", ""]] and t.header_rows == {0} and t.header_cols == {0}
    (t,) = parse_markdown_tables("| a\x00 | b |\n| c | d |")
    assert t.rows[0][0] == "a"  # NumPy-style trailing-NUL drop


def test_hostile_spans_are_bounded():
    text = '<table><tr><th colspan="999999999">h</th></tr><tr><td rowspan="999999999">x</td></tr></table>'
    (t,) = parse_html_tables(text)
    assert t.n_rows == 2


# --------------------------------------------------------------------------------------- baseline
def test_baseline():
    assert verdict("Some text.", type="baseline").passed
    assert verdict("", type="baseline").reason == "The text contains no alpha numeric characters"
    assert not verdict("   \n ..", type="baseline").passed
    v = verdict("Intro. " + "la " * 100, type="baseline")
    assert not v.passed and "repeating" in v.reason
    assert not verdict("Text \u4e2d\u6587", type="baseline").passed
    assert not verdict("Text \U0001f600", type="baseline").passed
    assert verdict("Text \u4e2d", type="baseline", check_disallowed_characters=False).passed
    assert verdict("", type="baseline", max_length=10).passed
    assert verdict("abc", type="baseline", max_length=10).passed
    assert not verdict("a" * 11, type="baseline", max_length=10).passed
    img = "![a very long alt text describing the figure](figure.png)"
    assert not verdict(img, type="baseline", max_length=10).passed
    assert verdict(img, type="baseline", max_length=10, max_length_skips_image_alt_tags=True).passed


@pytest.mark.parametrize(
    ("text", "n", "expected"),
    [("a", 3, [1, 0, 0]), ("abab", 3, [1, 2, 1]), ("aabaabaa", 3, [2, 1, 2]), ("", 3, [0, 0, 0]),
     ("a" * 10000, 5, [10000, 5000, 3333, 2500, 2000]), ("abcabcabcabc", 5, [1, 1, 4, 1, 1]),
     ("@@##@@##", 4, [2, 1, 1, 2]), ("ababababab", 4, [1, 5, 1, 2]), ("ab  \n ab ab", 3, [1, 1, 2])],
)
def test_ngram_repeats_match_reference_cases(text, n, expected):
    assert ngram_repeats(text, n) == expected


# ------------------------------------------------------------------------------- format/footnote
def test_format():
    text = "# Main Title\n\nSome **bold words** and *slanted* text. <em>emph</em>"
    assert verdict(text, type="format", text="Main Title", format="heading").passed
    assert verdict(text, type="format", text="bold words", format="bold").passed
    assert verdict(text, type="format", text="slanted", format="italic").passed
    assert verdict(text, type="format", text="emph", format="italic").passed
    v = verdict(text, type="format", text="slanted", format="bold")
    assert not v.passed and "bold" in v.reason


def test_footnote():
    text = "The result holds[^3] in general.\n\n[^3]: See the appendix."
    assert verdict(text, type="footnote", marker="3").passed
    assert verdict(text, type="footnote", marker="3", appears_before_marker="result holds").passed
    assert verdict(text, type="footnote", marker="3", appears_after_marker="in general").passed
    assert not verdict(text, type="footnote", marker="3", appears_after_marker="appendix").passed
    assert verdict("value\u00b2 here", type="footnote", marker="2").passed
    assert verdict("x<sup>7</sup> y", type="footnote", marker="7").passed
    assert not verdict("no marker", type="footnote", marker="1").passed


# -------------------------------------------------------------------------------------- run_tests
def test_run_tests_order_types_and_micro_macro():
    tests = load_tests([
        {"pdf": "a.pdf", "page": 1, "id": "p1", "type": "present", "text": "alpha"},
        {"pdf": "a.pdf", "page": 1, "id": "p2", "type": "present", "text": "gamma"},
        {"pdf": "a.pdf", "page": 1, "id": "b", "type": "baseline"},
    ])
    verdicts = run_tests("alpha beta", tests)
    assert [(v.test_id, v.passed, v.type) for v in verdicts] == [("p1", True, "present"), ("p2", False, "present"),
                                                                   ("b", True, "baseline")]
    assert micro_macro(verdicts) == (2 / 3, (0.5 + 1.0) / 2)
    assert micro_macro([]) == (0.0, 0.0)
    assert tests[0].run("alpha").passed


def test_run_tests_normalizes_once(monkeypatch):
    import olmpipe.bench.pagetext as norm  # where PageText normalizes the page

    calls = []
    real = norm.normalize_text
    monkeypatch.setattr(norm, "normalize_text", lambda s: calls.append(len(s or "")) or real(s))
    tests = load_tests([{"pdf": "a.pdf", "page": 1, "id": f"p{i}", "type": "present", "text": f"w{i}"}
                        for i in range(10)])
    run_tests("a long page " * 50, tests)
    assert len(calls) == 1


def test_deadline_fails_pending_tests_with_timeout():
    tests = load_tests([{"pdf": "a.pdf", "page": 1, "id": "p", "type": "present", "text": "x"}])
    (v,) = run_tests("x", tests, deadline=time.monotonic() - 1)
    assert not v.passed and v.reason == "timeout"


def test_math_goes_to_mathtest_module(monkeypatch):
    seen = {}

    def check_math(text, math, *, max_diffs=0, ignore_dollar_delimited=False, renderer=None, deadline=None):
        seen.update(text=text, math=math, ignore=ignore_dollar_delimited, renderer=renderer)
        return (math in text, "" if math in text else "no match")

    monkeypatch.setitem(sys.modules, "olmpipe.bench.mathtest", types.SimpleNamespace(check_math=check_math))
    tests = load_tests([{"pdf": "a.pdf", "page": 1, "id": "m", "type": "math", "math": "x^2",
                         "ignore_dollar_delimited": True}])
    (v,) = run_tests("$x^2$", tests, renderer="R")
    assert v.passed and seen == {"text": "$x^2$", "math": "x^2", "ignore": True, "renderer": "R"}


def test_raising_check_is_a_failed_verdict(monkeypatch):
    def boom(*args, **kwargs):
        raise RuntimeError("renderer exploded")

    monkeypatch.setitem(sys.modules, "olmpipe.bench.mathtest", types.SimpleNamespace(check_math=boom))
    tests = load_tests([{"pdf": "a.pdf", "page": 1, "id": "m", "type": "math", "math": "x"}])
    (v,) = run_tests("$x$", tests)
    assert not v.passed and v.reason.startswith("error: RuntimeError: renderer exploded")
