"""Property tests: normalization, table parsing and whole test runs never raise on any text."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olmpipe.bench import PageText, load_tests, normalize_text, run_tests
from olmpipe.bench.repeat import ngram_repeats
from olmpipe.bench.tables import parse_markdown_tables

# any code point (lone surrogates and NUL included), biased towards the characters the parsers read
MARKUP = st.sampled_from(["|", "-", ":", "\n", " ", "*", "_", "<br>", "**", "$", "\\(", "\\)", "#",
                          "<table>", "</table>", "<tr>", "</tr>", "<td>", "</td>", "<th>", "</th>",
                          '<td rowspan="2">', '<th colspan="3">', '<td colspan="0">', "<thead>", "</thead>",
                          "\x00", "\ud800", "\u2014", "\u00b5", "e\u0301", "[^1]", "<sup>1</sup>"])
TEXT = st.lists(st.one_of(st.text(max_size=8), MARKUP), max_size=60).map("".join)
SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

TESTS = load_tests([
    {"pdf": "a.pdf", "page": 1, "id": "p", "type": "present", "text": "a b", "case_sensitive": False},
    {"pdf": "a.pdf", "page": 1, "id": "o", "type": "order", "before": "ab", "after": "cd"},
    {"pdf": "a.pdf", "page": 1, "id": "o2", "type": "order", "before": "abcd", "after": "efgh", "max_diffs": 1},
    {"pdf": "a.pdf", "page": 1, "id": "t", "type": "table", "cell": "a", "up": "b", "left": "c",
     "top_heading": "d", "left_heading": "e"},
    {"pdf": "a.pdf", "page": 1, "id": "b", "type": "baseline"},
    {"pdf": "a.pdf", "page": 1, "id": "f", "type": "format", "text": "a", "format": "italic"},
    {"pdf": "a.pdf", "page": 1, "id": "n", "type": "footnote", "marker": "1", "appears_after_marker": "x"},
])


@SETTINGS
@given(TEXT)
def test_normalize_never_raises_and_is_whitespace_clean(text):
    out = normalize_text(text)
    assert isinstance(out, str)
    assert "\n" not in out and "\t" not in out


@SETTINGS
@given(TEXT)
def test_table_parsing_never_raises(text):
    for table in parse_markdown_tables(text):
        assert all(len(row) == table.n_cols for row in table.rows)
    tables = PageText(text).html_tables
    if isinstance(tables, Exception):  # a non-integer span: the reference raises too, and every
        assert isinstance(tables, ValueError)  # table test of the page fails with this reason
        return
    for table in tables:
        assert all(len(row) == table.n_cols for row in table.rows)


@SETTINGS
@given(TEXT)
def test_run_tests_never_raises(text):
    verdicts = run_tests(PageText(text), TESTS)
    assert [v.test_id for v in verdicts] == [t.id for t in TESTS]
    assert all(isinstance(v.passed, bool) and isinstance(v.reason, str) for v in verdicts)


@SETTINGS
@given(st.text(alphabet="ab \n", max_size=60), st.integers(1, 6))
def test_ngram_repeats_equal_the_reference_walk(text, n):
    import re

    norm = re.sub(r"\s+", " ", text)
    expected = []
    for size in range(1, n + 1):
        if not text or len(norm) < size:
            expected.append(0)
            continue
        count, pos = 0, len(norm) - size
        while pos >= 0 and norm[pos:pos + size] == norm[-size:]:
            count, pos = count + 1, pos - size
        expected.append(count)
    assert ngram_repeats(text, n) == expected


def _reference_normalize(text):
    """olmocr 0.4.27's normalize_text, step by step (the plain formula the fast one must equal)."""
    import re
    import unicodedata

    text = re.sub(r"<br/?>", " ", text)
    text = re.sub(r"\s+", " ", text)
    text = re.sub(r"\*\*(.*?)\*\*", r"\1", text)
    text = re.sub(r"__(.*?)__", r"\1", text)
    text = re.sub(r"</?b>", "", text)
    text = re.sub(r"</?i>", "", text)
    text = re.sub(r"\*(.*?)\*", r"\1", text)
    text = re.sub(r"_(.*?)_", r"\1", text)
    text = unicodedata.normalize("NFC", text)
    for a, b in {"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"',
                 "\uff3f": "_", "\u2013": "-", "\u2014": "-", "\u2011": "-", "\u2012": "-", "\u2212": "-",
                 "\u00b5": "\u03bc"}.items():
        text = text.replace(a, b)
    return text


WS_AND_FANCY = st.sampled_from(["\u00a0", "\u2003", "\u3000", "\x1c", "\x85", "\u2028", "\r\n", "\t",
                                "\u2018", "\u201d", "\u2014", "\u2212", "\u00b5", "\uff3f", "<b>", "</i>"])


@SETTINGS
@given(st.lists(st.one_of(TEXT, WS_AND_FANCY), max_size=8).map("".join))
def test_fast_normalize_equals_the_reference_formula(text):
    assert normalize_text(text) == _reference_normalize(text)


def _reference_order(before, after, content, max_diffs):
    from fuzzysearch import find_near_matches

    b = find_near_matches(before, content, max_l_dist=max_diffs)
    a = find_near_matches(after, content, max_l_dist=max_diffs)
    return any(x.start < y.start for x in b for y in a)


WORDS = st.sampled_from(["alpha", "beta", "gamma", "alpah", "bet", "gama", "delta", "ab", "ba", " ", "-"])
PHRASE = st.lists(WORDS, min_size=2, max_size=5).map(" ".join)


@SETTINGS
@given(st.lists(st.one_of(WORDS, PHRASE), max_size=30).map(" ".join), PHRASE, PHRASE, st.integers(0, 2))
def test_order_verdict_equals_fuzzysearch_formula(content, before, after, max_diffs):
    from olmpipe.bench.normalize import normalize_text as norm

    before, after = norm(before).strip() or "alpha", norm(after).strip() or "beta"
    max_diffs = min(max_diffs, len(before) // 2, len(after) // 2)
    (test,) = load_tests([{"pdf": "a.pdf", "page": 1, "id": "o", "type": "order", "before": before,
                           "after": after, "max_diffs": max_diffs}])
    (verdict,) = run_tests(content, [test])
    assert verdict.passed == _reference_order(test._before, test._after, norm(content), max_diffs)
