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
    # painted on the page, uncovered, in the text layer, and unreadable in the 1288 px raster
    # (olmpipe.synth.legible; the probe's F8: a 25 px grey smudge that still got tests)
    ("squashed to a sliver", '<p style="transform:scaleX(0.04); transform-origin:left">{}</p>'),
    ("squashed by the scale property", '<p style="scale:0.15 1; transform-origin:left">{}</p>'),
    ("squashed by a parent", '<div style="transform:scaleX(0.2); transform-origin:left"><p>{}</p></div>'),
    ("squashed by a matrix", '<p style="transform:matrix(0.06, 0, 0, 1, 0, 0); transform-origin:left">{}</p>'),
    ("squashed inline", '<p><span style="display:inline-block; transform:scaleX(0.05)">{}</span></p>'),
    ("condensed then squashed", ('<p style="font-stretch:ultra-condensed; letter-spacing:-0.1em; '
                                 'transform:scaleX(0.3); transform-origin:left">{}</p>')),
    ("flattened", '<p style="transform:scaleY(0.15)">{}</p>'),
    ("letters pulled onto each other", '<p style="letter-spacing:-0.4em">{}</p>'),
    ("sheared flat", '<p style="transform:skewX(75deg)">{}</p>'),
    ("turned edge on", '<p style="transform:rotateY(82deg)">{}</p>'),
    ("blurred", '<p style="filter:blur(3px)">{}</p>'),
    ("blurred parent", '<div style="filter:blur(2.5px) grayscale(1)"><p>{}</p></div>'),
    ("very low contrast", '<p style="color:#ececec">{}</p>'),
    ("three pixel font", '<p style="font-size:3px">{}</p>'),
]

#: Text drawn unusually that still reads in the 1288 px raster: it must keep its tests.
READABLE = [
    ("upside down", '<p style="transform:rotate(180deg)">Visible turned sentence reads upside down.</p>'),
    ("slanted", '<p style="transform:skewX(30deg)">Visible slanted sentence leans but reads.</p>'),
    ("condensed", ('<p style="transform:scaleX(0.5); transform-origin:left">'
                   'Visible condensed sentence is narrow but clear.</p>')),
    ("tight", '<p style="letter-spacing:-0.08em">Visible tight sentence has letters close together.</p>'),
    ("soft", '<p style="filter:blur(0.4px)">Visible soft sentence is only slightly blurred.</p>'),
    ("filtered", '<p style="filter:grayscale(1) sepia(0.3)">Visible filtered sentence is drawn as an image.</p>'),
    ("grey", '<p style="color:#aaaaaa">Visible grey sentence keeps enough contrast.</p>'),
    ("small", '<p style="font-size:5px">Visible small sentence is tiny yet legible.</p>'),
]


def token(n: int) -> str:
    return f"zq{chr(97 + n // 26)}{chr(97 + n % 26)}"  # unique, never part of a visible word


def hiding_page() -> str:
    parts = []
    for n, (way, element) in enumerate(HIDDEN):
        parts.append(element.format(f"Hidden {token(n)} sentence hidden by {way}."))
    return ("<!DOCTYPE html><html lang='en'><head><title>Hidden title words</title><style>"
            "body { font-family: serif; font-size: 13px; margin: 36px; } p { margin: 4px 0; } .gone { display: none; } "
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
            + "".join(element for _, element in READABLE)
            + "<p>Visible closing sentence ends the page. Visible final words of the page stay.</p>"
            "</body></html>")


@pytest.fixture(scope="module")
def renderer():
    with HtmlRenderer(timeout_s=120) as r:
        yield r


def mine(root, renderer, html: str, longest_side: int = 1288) -> tuple[dict, list[dict]]:
    """The synth stages on one page (rasterized at 1288 px unless told, as the embedded default
    trains): the report and the mined tests."""
    (root / "in").mkdir()
    (root / "in/hiding.html").write_text(html)
    cfg = load_config(overrides={"synth": {"html_dir": str(root / "in"), "rotate_share": 0.0,
                                           "tests": {"present": 100, "order": 100}}})["synth"]
    collect_html(cfg, root / "html")
    render_pages(root / "html", root / "render", cfg, longest_side=longest_side, renderer=renderer)
    report = build_bench(root / "html", root / "render", root / "bench", root / "report.json", cfg)
    return report, [json.loads(line) for line in (root / "bench/synth.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def hiding_bench(tmp_path_factory, renderer):
    root = tmp_path_factory.mktemp("hiding")
    report, tests = mine(root, renderer, hiding_page())
    return root, report, tests


def test_the_probes_squashed_sentence_gets_no_test(tmp_path, renderer):
    """The probe's page (F8): a sentence squashed by scaleX(0.04) into a 25 px grey smudge got
    `present` and `order` tests; its plain sentences keep theirs."""
    html = ("<html><body style='font-family:serif;font-size:16px'>"
            "<p>Visible sentence number one is printed here plainly for every reader to see.</p>"
            "<p style='transform: scaleX(0.04); transform-origin:left'>Flattened sentence delta is squashed "
            "horizontally into a thin sliver.</p>"
            "<p>Visible sentence number two closes the page with some more plain words.</p></body></html>")
    report, tests = mine(tmp_path, renderer, html)
    texts = json.dumps(tests)
    assert "Flattened" not in texts and "horizontally" not in texts and "sliver" not in texts
    assert "Visible sentence number one is printed here plainly for every reader to see." in texts
    assert report["hidden_text"][0]["hidden_words"] == 10
    assert report["hidden_text"][0]["unreadable"] == {"too narrow": 8}  # "is" and "a" leave too little ink


def test_lines_printed_over_each_other_get_no_test(tmp_path, renderer):
    """Probe2 G4: `line-height: 1px` prints every line of a paragraph on top of the others (a black
    smear) and the sentence got present and order tests; lines set solid (`line-height: 1`) still read."""
    html = ("<html><body style='font: 15px serif; margin: 60px'><h1>Harvest notes</h1>"
            "<p>Visible sentence number one is printed here plainly for every reader to see.</p>"
            "<p style='line-height:1px; width:180px'>Overprinted sentence foxtrot wraps onto many lines that "
            "are drawn on top of each other in one row.</p>"
            "<p style='line-height:1; width:200px'>Visible solid sentence wraps onto lines set without any "
            "leading between them.</p>"
            "<p>Visible sentence number two closes the page with some more plain words.</p></body></html>")
    report, tests = mine(tmp_path, renderer, html)
    texts = json.dumps(tests)
    assert "Overprinted" not in texts and "foxtrot" not in texts and "drawn on top" not in texts
    assert "Visible solid sentence wraps onto lines set without any leading between them." in texts
    assert report["hidden_text"][0]["unreadable"].get("overprinted", 0) >= 15


def test_a_page_unreadable_at_the_training_resolution_says_so(tmp_path, renderer):
    """At rasterize.longest_side 48 no 13 px text is readable: the page gives no test, and the reason
    says its print showed none of its words, all too small in the page image, not "is there text"."""
    html = "<html><body style='font: 13px serif'><p>Plain words of a page rasterized far too small.</p></body></html>"
    with pytest.raises(ValueError, match=r"shows none of its 9 words \(9 too small in the page image at "
                                         r"rasterize.longest_side"):
        mine(tmp_path, renderer, html, longest_side=48)


def test_no_mined_test_and_no_reference_names_hidden_text(hiding_bench):
    root, report, tests = hiding_bench
    # a way leaks when a test names its token, or the rest of its sentence (its own words hidden one by one)
    leaked = {way for n, (way, _) in enumerate(HIDDEN) for t in tests
              if token(n) in json.dumps(t) or f"by {way}" in json.dumps(t)}
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
    unread = [way for way, element in READABLE if element.split(">", 1)[1].split("<")[0] not in present]
    assert unread == [], f"readable text lost its tests: {unread}"
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
            "covered by text", "behind its parent", "too small to read", "squashed to a sliver",
            "sheared flat", "turned edge on", "three pixel font", "squashed by a matrix", "squashed inline",
            "condensed then squashed"} <= in_layer


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
    page = renderer.render_page(html, width_pt=612, height_pt=792, longest_side=1288)
    assert page.hidden_words == [] and "Visible second cell text" in page.visible_html
    monkeypatch.setattr(render, "print_shrink", lambda measure: 1.0)
    with pytest.raises(RenderRefused, match=r"not laid out as measured: .* \(the content is \d+ px wide, laid out "
                                            r"for a 816 px page\)"):
        renderer.render_page(html, width_pt=612, height_pt=792, longest_side=1288)



def test_a_page_with_much_filtered_text_is_judged_by_what_it_shows(renderer):
    """Chromium prints filtered text as an image (it is not in the PDF's text layer). A page where
    more than 10% of the words are under a filter is neither refused as "not laid out as measured"
    (the probe's F8: "the content is 816 px wide, laid out for a 816 px page") nor stripped of its
    readable filtered text: a strong blur hides its words, a light one keeps them."""
    plain = "".join(f"<p>Visible plain sentence number {i} of the page.</p>" for i in range(5))
    html = ("<html><body style='margin:40px; font: 13px serif'>" + plain
            + "<p style='filter:blur(6px)'>Blurred zqblur words are smeared beyond any reading here at all.</p>"
            + "<p style='filter:blur(0.4px)'>Softened words stay readable in the page image.</p></body></html>")
    page = renderer.render_page(html, width_pt=612, height_pt=792, longest_side=1288)
    hidden = " ".join(page.hidden_words)
    assert "zqblur" in hidden and "smeared" in hidden
    assert "Softened" not in hidden and "Visible" not in hidden
    assert "Softened words stay readable" in page.visible_html and "zqblur" not in page.visible_html


def test_a_layout_mismatch_names_what_is_off(renderer, monkeypatch):
    """When the text layer does not have the measured words at their place and the page is not wider
    than the paper, the reason says so and names words, instead of a width that is not the problem."""
    from olmpipe.synth import visible

    seen = {}
    real = render.visible_words

    def spy(measure, printed, blank, **kwargs):
        seen.update(measure=measure, printed=printed, blank=blank, kwargs=kwargs)
        return real(measure, printed, blank, **kwargs)

    monkeypatch.setattr(render, "visible_words", spy)
    html = "<html><body style='margin:40px'>" + "".join(
        f"<p>Visible sentence {i} with words.</p>" for i in range(6)) + "</body></html>"
    renderer.render_page(html, width_pt=612, height_pt=792, longest_side=1288)
    measure = seen["measure"]
    moved = {**measure, "words": [[*w[:3], ("qx" * len(w[3]))[:len(w[3])], *w[4:]] for w in measure["words"]]}
    with pytest.raises(visible.LayoutMismatch, match=r"painted words are not in the PDF's text layer where they "
                                                     r"were measured \(the content fits the paper's width, so the "
                                                     r"print did not shrink it\); e.g. 'qxqxqxq'"):
        visible.visible_words(moved, seen["printed"], seen["blank"], **seen["kwargs"])


def test_tests_are_mined_from_what_is_drawn_in_drawn_order(tmp_path, renderer):
    """Issue 31 item 9: tests the page image contradicts. `unicode-bidi: bidi-override; direction: rtl`
    prints a sentence reversed (the test had it forward); `::first-letter {color: transparent}` on
    inline-block word spans drew each word without its first letter and with gaps between the spans
    (the test kept the hidden letters and dropped the visible spaces); U+200B inside words draws
    nothing (it stayed in the test text); `flex-direction: column-reverse` prints the last block first
    (the order test said the opposite). Each is mined from what is drawn, in drawn order."""
    html = ("<html><head><style>.w { display: inline-block; margin-right: 0.3em } "
            ".w::first-letter { color: transparent }</style></head>"
            "<body style='font: 16px serif; margin: 40px'>"
            "<p>Plain opening sentence of the page is here.</p>"
            "<p style='unicode-bidi: bidi-override; direction: rtl'>Reversed sentence alpha prints backwards.</p>"
            "<p><span class=w>Hidden</span><span class=w>initials</span><span class=w>sentence</span>"
            "<span class=w>bravo</span><span class=w>here.</span></p>"
            "<p>Zero\u200bwidth sen\u200btence charlie is written here.</p>"
            "<div style='display: flex; flex-direction: column-reverse'>"
            "<p>First in the source delta sentence here.</p><p>Second in the source echo sentence here.</p>"
            "<p>Third in the source foxtrot sentence here.</p></div>"
            "<div style='display: flex'><p style='order: 2'>Placed last golf sentence of the row.</p>"
            "<p style='order: 1'>Placed first hotel sentence of the row.</p></div>"
            "<p>Plain closing sentence of the page is here.</p></body></html>")
    report, tests = mine(tmp_path, renderer, html)
    texts = json.dumps(tests, ensure_ascii=False)
    reference = (tmp_path / "bench/reference/hiding_pg1_repeat1.md").read_text()
    # printed reversed: neither a test nor the reference writes it forward
    assert "Reversed" not in texts and "alpha" not in texts and "Reversed" not in reference
    assert report["hidden_text"][0]["unreadable"].get("drawn reordered", 0) == 5
    # the hidden first letters are not written, the gaps between the spans are
    assert "idden nitials entence ravo ere." in reference and "Hidden" not in texts and "Hiddeninitials" not in texts
    # nothing for a zero-width space
    assert "\u200b" not in texts and "\u200b" not in reference
    assert "Zerowidth sentence charlie is written here." in reference
    # drawn order: column-reverse prints the third first, `order` the hotel sentence before golf
    drawn = ["Third in the source foxtrot", "Second in the source echo", "First in the source delta",
             "Placed first hotel", "Placed last golf"]
    assert [reference.index(s) for s in drawn] == sorted(reference.index(s) for s in drawn), reference
    for test in (t for t in tests if t["type"] == "order"):
        rank = {s: i for i, s in enumerate(drawn)}
        before = next((i for s, i in rank.items() if test["before"].startswith(s)), None)
        after = next((i for s, i in rank.items() if test["after"].startswith(s)), None)
        if before is not None and after is not None:
            assert before < after, test
