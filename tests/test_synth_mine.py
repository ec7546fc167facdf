"""olmpipe.synth.mine: tests and reference answers mined from HTML, on the embedded pages and on
hand-made adversarial pages (no browser needed)."""

from __future__ import annotations

from pathlib import Path

from olmpipe.prompts import parse_page_output
from olmpipe.synth.mine import MineLimits, mine_page

REPO = Path(__file__).resolve().parents[1]
PAGES = REPO / "data" / "synth"


def mined(name: str, seed: int = 0):
    return mine_page((PAGES / f"{name}.html").read_text(), f"{name}.pdf", seed=seed)


def by_type(tests, kind):
    return [t for t in tests if t["type"] == kind]


def test_each_embedded_page_gives_its_kind_of_test():
    table = by_type(mined("table_harvest").tests, "table")
    assert table and all(t.get("top_heading", "").startswith("Season") for t in table)
    assert all(t.get("left_heading") for t in table)
    math = {t["math"] for t in by_type(mined("math_notes").tests, "math")}
    assert r"\ddot{x} + 2\gamma \dot{x} + \omega_0^2 x = 0" in math and r"e^{\lambda t}" in math
    absent = {t["text"]: t["max_diffs"] for t in by_type(mined("header_footer_minutes").tests, "absent")}
    assert absent["Page 3 of 7"] == 0 and "Harbour Rowing Club" in absent
    assert "Approved by the committee on 14 April" in absent
    for name in ("text_report", "two_columns_newsletter"):
        tests = mined(name).tests
        assert len(by_type(tests, "present")) == 6 and by_type(tests, "order")
        assert [t["id"] for t in by_type(tests, "baseline")] == [f"{name}_baseline"]


def test_reference_answer_leaves_out_running_heads_and_keeps_math_and_tables():
    minutes = mined("header_footer_minutes")
    parsed = parse_page_output(minutes.reference)
    assert parsed.front_matter is not None and parsed.front_matter.primary_language == "en"
    assert "Harbour Rowing Club" not in parsed.text and "Page 3 of 7" not in parsed.text
    assert "Harbour Rowing Club" in minutes.full_text
    assert r"\[\ddot{x}" in mined("math_notes").body
    assert "<td>31.4</td>" in mined("table_harvest").body


def test_order_tests_follow_the_reading_order_of_two_columns():
    page = mined("two_columns_newsletter")
    body = page.body
    for test in by_type(page.tests, "order"):
        assert body.index(test["before"]) < body.index(test["after"]), test


def test_same_seed_same_tests_other_seed_other_sample():
    html = (PAGES / "text_report.html").read_text()
    first, again = mine_page(html, "a.pdf", seed=3).tests, mine_page(html, "a.pdf", seed=3).tests
    assert first == again
    assert first != mine_page(html, "a.pdf", seed=4).tests


def test_front_matter_language_and_table_flag():
    html = ('<html lang="pt-BR"><body><table><tr><th>Ano</th><th>Valor</th></tr>'
            + "".join(f"<tr><td>{2000 + i}</td><td>{i * 37.5:.1f} reais</td></tr>" for i in range(20))
            + "</table><p>Fonte: arquivo.</p></body></html>")
    page = mine_page(html, "t.pdf", seed=0)
    assert page.front_matter.primary_language == "pt"
    assert page.front_matter.is_table and not page.front_matter.is_diagram


def test_fields_with_latex_or_super_subscripts_are_not_text_tests():
    html = ("<html><body><p>Water is H<sub>2</sub>O and boils at one hundred degrees here.</p>"
            r"<p>The area of the unit disc is \(\pi r^2\) for every radius we pick.</p></body></html>")
    page = mine_page(html, "x.pdf", seed=0)
    for test in page.tests:
        for field in ("text", "before", "after"):
            assert "\\(" not in test.get(field, "") and "₂" not in test.get(field, "")
    assert [t["math"] for t in by_type(page.tests, "math")] == [r"\pi r^2"]


def test_scripts_styles_and_broken_markup_do_not_leak_into_tests():
    html = ("<html><head><style>p { color: red }</style></head><body><script>var secret = 1;</script>"
            "<p>An unclosed paragraph that keeps going for a while<div>and a stray block inside it."
            "<table><tr><td>orphan cell")
    page = mine_page(html, "b.pdf", seed=0)
    assert "secret" not in page.reference and "color" not in page.reference
    assert "An unclosed paragraph" in page.body


def test_a_huge_table_is_sampled_from_its_first_rows_only():
    rows = "".join(f"<tr><td>row {i}</td><td>value {i * 7}</td><td>note {i}</td></tr>" for i in range(2000))
    html = f"<html><body><table><tr><th>Row</th><th>Value</th><th>Note</th></tr>{rows}</table></body></html>"
    page = mine_page(html, "big.pdf", seed=0, limits=MineLimits(table_rows_scanned=50))
    cells = [t["cell"] for t in by_type(page.tests, "table")]
    assert cells and all(int(c.split()[-1]) < 50 * 7 for c in cells)
