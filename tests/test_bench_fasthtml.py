"""olmpipe.bench.fasthtml: the fast tree gives the same tables as BeautifulSoup, or defers to it."""

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from olmpipe.bench import fasthtml
from olmpipe.bench.tables import parse_html_tables

START = st.sampled_from(["table", "thead", "tbody", "tr", "tr", "td", "td", "th", "b", "span", "p", "caption"])
ATTR = st.sampled_from(["", "", "", ' rowspan="2"', " colspan='3'", " rowspan=2", ' colspan="0"', ' rowspan="x"',
                        " ROWSPAN=\"2\"", ' class="c"', " nowrap", ' colspan="2" colspan="1"', ' style="a:b"'])
TEXT = st.sampled_from(["a", "Total", " ", "\n", "  \n ", "1.5", "x y", "&amp;", "&lt;", "&nbsp;", "&foo;",
                        "A & B", "<", "a<b", "3 < 4", "\u00e9", "\t"])


@st.composite
def markup(draw):
    parts = []
    for _ in range(draw(st.integers(1, 40))):
        kind = draw(st.integers(0, 9))
        if kind <= 3:
            parts.append(f"<{draw(START)}{draw(ATTR)}>")
        elif kind <= 5:
            parts.append(f"</{draw(START)}>")
        elif kind == 6:
            parts.append(draw(st.sampled_from(["<br>", "<br/>", "<br />", "</br>", "<td/>", "<TD>", "<!-- c -->"])))
        else:
            parts.append(draw(TEXT))
    return "<table>" + "".join(parts)


@st.composite
def wellformed(draw):
    """Well-nested tables as models write them: the fast path must take these."""
    rows = []
    for _ in range(draw(st.integers(1, 5))):
        cells = []
        for _ in range(draw(st.integers(1, 4))):
            tag = draw(st.sampled_from(["td", "td", "th"]))
            span = draw(st.sampled_from(["", "", ' rowspan="2"', ' colspan="2"']))
            body = draw(st.sampled_from(["a", "b", "1", "", " x <br> y ", "<b>t</b>", "&amp;"]))
            cells.append(f"<{tag}{span}>{body}</{tag}>")
        rows.append("<tr>" + "".join(cells) + "</tr>")
    head = draw(st.booleans())
    body = ("<thead>" + rows[0] + "</thead>" + "".join(rows[1:])) if head else "".join(rows)
    return "Intro\n\n<table>\n" + body + "\n</table>\n"


def _tree(draw, depth):
    out = []
    for _ in range(draw(st.integers(0, 4 if depth < 3 else 1))):
        if depth < 4 and draw(st.booleans()):
            tag, attr = draw(START), draw(ATTR.filter(lambda a: "class" not in a))
            closed = draw(st.integers(0, 9)) > 0  # sometimes left open (only at the end is that safe)
            out.append(f"<{tag}{attr}>" + _tree(draw, depth + 1) + (f"</{tag}>" if closed else ""))
            if not closed:
                break
        else:
            out.append(draw(st.sampled_from(["a", " ", "\n ", "7", "<br>", "<br/>", "&amp;", "x\ty", "<td/>"])))
    return "".join(out)


@st.composite
def nested(draw):
    """Arbitrary nesting of the tag set (tables in cells, cells in cells, spans, open ends)."""
    return "<table>" + _tree(draw, 0)


def tables(text, fast):
    try:
        return [(t.rows, t.n_cols, t.header_rows, t.header_cols, t.col_headers, t.row_headers)
                for t in parse_html_tables(text, fast=fast)]
    except Exception as exc:  # noqa: BLE001 - compared between the two paths
        return type(exc).__name__


SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(markup())
def test_fast_tree_equals_beautifulsoup(text):
    assert tables(text, fast=True) == tables(text, fast=False)


@SETTINGS
@given(nested())
def test_nested_markup_equals_beautifulsoup(text):
    assert tables(text, fast=True) == tables(text, fast=False)


@SETTINGS
@given(wellformed())
def test_wellformed_tables_take_the_fast_path(text):
    assert fasthtml.parse(text) is not None
    assert tables(text, fast=True) == tables(text, fast=False)


def test_fast_path_defers_outside_its_subset():
    for text in ["<table><tr><td>a&copy;</td></tr></table>", "<table><tr><td><img src=x></td></tr></table>",
                 "<table><tr><td class='c'>a</td></tr></table>", "<table><tr><td>a</b></td></tr></table>",
                 "<table><!-- x --><tr><td>a</td></tr></table>", "x<y z</table>"]:
        assert fasthtml.parse(text) is None, text
    root = fasthtml.parse("<p>R&D</p><table><tr><td> a &amp; b </td></tr></table>")
    assert root is not None and root.find("td").get_text() == " a & b "


# ------------------------------------------------------------- one table at a time (split_tables)
FILLER = st.sampled_from(["Intro\n\n", "R&D <b>x</b> ", "", "<p>open ", "</p>", "a < b ", "&copy; ", "<!-- c -->",
                          "| a | b |\n|---|---|\n| 1 | 2 |\n", "<TABLE>", "</table>", "<span>", "</span>", "x&amp;y"])
VARIANT = st.sampled_from([("<table>", "</table>"), ("<TABLE border=1>", "</TABLE >"), ("<table>", "</table>")])


@st.composite
def documents(draw):
    """Several tables, some nested in a cell, between text and stray markup."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        parts.append(draw(FILLER))
        table = draw(wellformed()).replace("Intro\n\n", "")
        open_tag, close_tag = draw(VARIANT)
        table = table.replace("<table>", open_tag).replace("</table>", close_tag)
        if draw(st.booleans()) and "<td>" in table:
            inner = draw(wellformed()).replace("Intro\n\n", "")
            table = table.replace("<td>", "<td>" + inner, 1)
        parts.append(table)
    parts.append(draw(FILLER))
    return "".join(parts)


@SETTINGS
@given(documents())
def test_table_at_a_time_equals_the_whole_tree_and_beautifulsoup(text):
    from olmpipe.bench.tables import _fast_html_tables, _tables_of

    whole = fasthtml.parse(text)
    split = _fast_html_tables(text)
    assert (split is None) == (whole is None)
    if whole is not None:
        key = [(t.rows, t.header_rows, t.header_cols, t.col_headers, t.row_headers) for t in _tables_of(whole)]
        assert key == [(t.rows, t.header_rows, t.header_cols, t.col_headers, t.row_headers) for t in split]
    assert tables(text, fast=True) == tables(text, fast=False)


def test_split_tables_pairs_table_tags():
    outline, markups = fasthtml.split_tables("a<table><tr><td><TABLE></table></td></tr></table >b<table></table>")
    assert outline == f"a{fasthtml.PLACEHOLDER}b{fasthtml.PLACEHOLDER}"
    assert markups == ["<table><tr><td><TABLE></table></td></tr></table >", "<table></table>"]
    for text in ["<table>", "</table><table>", "<table></table x>", "<table></table></table>"]:
        assert fasthtml.split_tables(text) is None, text


def test_tables_over_the_cache_limit_parse_the_same(monkeypatch):
    from olmpipe.bench import tables as tables_module

    text = "x\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\n<table><tr><th>h</th></tr><tr><td>v</td></tr></table>"
    cached = tables(text, fast=True), tables_module.parse_markdown_tables(text)[0].rows
    monkeypatch.setattr(tables_module, "MAX_CACHED_MARKUP", 4)
    monkeypatch.setattr(tables_module, "MAX_CACHED_CELL", 0)
    assert (tables(text, fast=True), tables_module.parse_markdown_tables(text)[0].rows) == cached
