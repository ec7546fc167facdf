"""olmpipe.synth.visible: tests are mined only from what the printed page shows. One page hides a
sentence in each of many ways (some of them still reach the PDF's text layer); no mined test and no
reference answer names hidden text, and every visible sentence, cell and formula still yields tests."""

from __future__ import annotations

import json

import pypdfium2 as pdfium
import pytest
from support.browser import NEEDS_CHROMIUM

from olmpipe.config import load_config
from olmpipe.synth import render
from olmpipe.synth.bench import build_bench, render_pages
from olmpipe.synth.render import HtmlRenderer, RenderRefused
from olmpipe.synth.source import collect_html

pytestmark = NEEDS_CHROMIUM

#: (way of hiding, the element holding the sentence "Hidden <token> ..."), one token per way.
HIDDEN = [
    ("display none", '<p style="display:none">{}</p>'),
    ("hidden attribute", "<p hidden>{}</p>"),
    ("class rule display none", '<p class="gone">{}</p>'),
    ("left -9999px", '<p style="position:absolute; left:-9999px">{}</p>'),
    ("above the page", '<p style="position:absolute; top:-600px; left:40px">{}</p>'),
    ("visibility hidden", '<p style="visibility:hidden">{}</p>'),
    ("font size zero", '<p style="font-size:0">{}</p>'),
    ("opacity zero", '<p style="opacity:0">{}</p>'),
    ("white on white", '<p style="color:#ffffff">{}</p>'),
    ("colour of its background", '<div style="background:#336699; color:#336699">{}</div>'),
    ("transparent colour", '<p style="color:transparent">{}</p>'),
    ("transparent text fill", '<p style="-webkit-text-fill-color:transparent">{}</p>'),
    ("clip rect", ('<p style="position:absolute; width:1px; height:1px; overflow:hidden; clip:rect(0 0 0 0); '
                  'white-space:nowrap">{}</p>')),
    ("clip path", '<p style="clip-path:inset(50%)">{}</p>'),
    ("overflow hidden", '<div style="height:18px; overflow:hidden">Visible line of the clipped box stays.<br>{}</div>'),
    ("zero size box", '<div style="width:0; height:0; overflow:hidden">{}</div>'),
    ("covered", ('<div style="position:relative"><p>{}</p><div style="position:absolute; left:0; top:0; '
                'width:100%; height:100%; background:#fff"></div></div>')),
    ("covered by text", ('<div style="position:relative"><p>{}</p><div style="position:absolute; left:0; top:0; '
                        'width:100%; height:100%; background:#fff">Visible cover words on top.</div></div>')),
    ("behind its parent", ('<div style="position:relative; background:#fff"><p style="position:relative; '
                          'z-index:-1">{}</p></div>')),
    ("template", "<template><p>{}</p></template>"),
    ("noscript", "<noscript><p>{}</p></noscript>"),
    ("comment", "<p>Visible words before a comment.<!-- {} --></p>"),
    ("text indent", '<p style="text-indent:-9999px">{}</p>'),
    ("print media rule", '<p class="noprint">{}</p>'),
    ("scale zero", '<p style="transform:scale(0)">{}</p>'),
    ("opacity filter", '<p style="filter:opacity(0)">{}</p>'),
    ("closed details", "<details><summary>Visible summary line.</summary><p>{}</p></details>"),
    ("content visibility", '<p style="content-visibility:hidden">{}</p>'),
    ("too small to read", '<p style="font-size:1px">{}</p>'),
    ("hidden header", '<header style="display:none"><span>{}</span></header>'),
    ("hidden formula", '<p style="display:none">Hidden formula \\(x_{{7}} + y_{{7}}\\) here.</p>'),
]


def token(n: int) -> str:
    return f"zq{chr(97 + n // 26)}{chr(97 + n % 26)}"  # unique, never part of a visible word


def hiding_page() -> str:
    parts = []
    for n, (way, element) in enumerate(HIDDEN):
        parts.append(element.format(f"Hidden {token(n)} sentence hidden by {way}."))
    return ("<!DOCTYPE html><html lang='en'><head><title>Hidden title words</title><style>"
            "body { font-family: serif; font-size: 13px; margin: 36px; } .gone { display: none; } "
            "@media print { .noprint { display: none; } }</style></head><body>"
            "<header><span>Visible Running Head 2024</span></header>"
            "<h1>Visible heading of the hiding page</h1>"
            "<p>Visible opening sentence stays on the page. Visible second sentence follows it here.</p>"
            "<p aria-hidden='true'>Visible sentence that is only aria hidden here.</p>"
            "<p>Visible formula \\(a^2 + b^2 = c^2\\) in a sentence.</p>"
            "<table border='1'><tr><th>Item name</th><th>Item value</th></tr>"
            "<tr><td>Alpha row</td><td>Visible cell one</td></tr>"
            "<tr><td>Beta row</td><td style='color:white'>Hidden zqcell two</td></tr>"
            "<tr><td>Gamma row</td><td>Visible cell three</td></tr></table>"
            + "".join(parts)
            + "<p>Visible closing sentence ends the page. Visible final words of the page stay.</p>"
            "</body></html>")


@pytest.fixture(scope="module")
def renderer():
    with HtmlRenderer(timeout_s=120) as r:
        yield r


@pytest.fixture(scope="module")
def hiding_bench(tmp_path_factory, renderer):
    root = tmp_path_factory.mktemp("hiding")
    (root / "in").mkdir()
    (root / "in/hiding.html").write_text(hiding_page())
    cfg = load_config(overrides={"synth": {"html_dir": str(root / "in"), "rotate_share": 0.0,
                                           "tests": {"present": 100, "order": 100}}})["synth"]
    collect_html(cfg, root / "html")
    render_pages(root / "html", root / "render", cfg, renderer=renderer)
    report = build_bench(root / "html", root / "render", root / "bench", root / "report.json", cfg)
    tests = [json.loads(line) for line in (root / "bench/synth.jsonl").read_text().splitlines()]
    return root, report, tests


def test_no_mined_test_and_no_reference_names_hidden_text(hiding_bench):
    root, report, tests = hiding_bench
    leaked = {way for n, (way, _) in enumerate(HIDDEN) for t in tests if token(n) in json.dumps(t)}
    assert leaked == set(), f"tests name text hidden by: {sorted(leaked)}"
    assert not any("zqcell" in json.dumps(t) or "x_{7}" in json.dumps(t) for t in tests)
    reference = (root / "bench/reference/hiding_pg1_repeat1.md").read_text()
    assert "Hidden" not in reference and "zq" not in reference
    assert report["hidden_text"][0]["pdf"] == "hiding.pdf" and report["hidden_text"][0]["hidden_words"] >= 6 * len(HIDDEN)


def test_visible_text_still_yields_tests(hiding_bench):
    _, _, tests = hiding_bench
    present = " ".join(t["text"] for t in tests if t["type"] == "present")
    for sentence in ("Visible opening sentence stays on the page.", "Visible sentence that is only aria hidden here.",
                     "Visible line of the clipped box stays.", "Visible cover words on top.",
                     "Visible words before a comment.", "Visible closing sentence ends the page."):
        assert sentence in present
    assert {t["math"] for t in tests if t["type"] == "math"} == {"a^2 + b^2 = c^2"}
    cells = {t["cell"] for t in tests if t["type"] == "table"}
    assert cells and cells <= {"Alpha row", "Beta row", "Gamma row", "Visible cell one", "Visible cell three"}
    assert any(t["type"] == "absent" and t["text"] == "Visible Running Head 2024" for t in tests)


def test_some_hidden_text_reaches_the_pdf_text_layer(hiding_bench):
    """The text layer alone would not do: hidden text painted invisibly is in it."""
    root, _, _ = hiding_bench
    doc = pdfium.PdfDocument(str(root / "bench/pdfs/hiding.pdf"))
    text = doc[0].get_textpage().get_text_range()
    in_layer = {way for n, (way, _) in enumerate(HIDDEN) if token(n) in text}
    assert {"white on white", "colour of its background", "transparent colour", "transparent text fill", "covered",
            "covered by text", "behind its parent", "too small to read"} <= in_layer


def page_words(data: bytes) -> str:
    return pdfium.PdfDocument(data)[0].get_textpage().get_text_range()


def test_a_page_wider_than_the_paper_is_measured_as_chromium_prints_it(renderer, monkeypatch):
    """Chromium prints content wider than the paper shrunk to fit: every word moves. The words are
    measured at the width the print was laid out at; without that, the page is refused, not mined
    from boxes that are elsewhere on the printed page."""
    html = ("<html><body style='margin:40px'><h1>Wide page heading words</h1>"
            "<table style='width:1300px' border='1'><tr><td>Visible first cell text</td>"
            "<td>Visible second cell text</td></tr></table>"
            + "".join(f"<p>Visible paragraph number {i} after the wide table.</p>" for i in range(8))
            + "</body></html>")
    page = renderer.render_page(html, width_pt=612, height_pt=792)
    assert page.hidden_words == [] and "Visible second cell text" in page.visible_html
    monkeypatch.setattr(render, "print_shrink", lambda measure: 1.0)
    with pytest.raises(RenderRefused, match="not laid out as measured"):
        renderer.render_page(html, width_pt=612, height_pt=792)

