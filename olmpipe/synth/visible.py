"""What the page image shows: which words of a synthetic page are printed where a reader can see them.

The model sees only the page image, so a test about text the image does not show rewards writing
what is not there. Text can be in the HTML and not on the page in many ways: never laid out
(``display: none``, the ``hidden`` attribute, closed ``<details>``, ``content-visibility``, comments,
``<template>``), laid out but not painted (``visibility: hidden``, ``opacity: 0``, transparent text
fill, ``filter: opacity(0)``, ``clip``/``clip-path``, clipped by an ancestor's ``overflow``,
``transform: scale(0)``), painted where nobody sees it (off the printed page, under an opaque box,
in the colour of its background) or too small to read. A rule per CSS feature would miss the next
one, so :class:`olmpipe.synth.render.HtmlRenderer` asks the page itself, in the tab that prints it:

1. :data:`PREPARE_JS` (these scripts live in :mod:`olmpipe.synth.pagejs`), after the content is set (with print media emulated, as ``printToPDF`` lays
   it out): keeps a copy of the document as parsed and the list of its text nodes, stops animations
   and transitions (both prints must show the same state) and makes every element hit-testable;
2. the page is printed (the PDF kept);
3. :data:`MEASURE_JS`: every word of every text node (a run of non-space characters; a typeset
   formula counts as one word) with its layout boxes (``Range.getClientRects``) and whether it is
   hidden at its centre (``document.elementsFromPoint``): its own element must be hit there (not
   only its ancestors: clipped away), with nothing opaque above it (an element with an opaque
   background or image, or a replaced element); and how its element draws it (``drawings``: the
   transforms, letter spacing and filters above it; a transformed word is measured again with its
   transforms off, for its layout size);
4. :data:`HIDE_TEXT_JS`, then a second print: the same page with every glyph transparent;
5. :func:`visible_words`: both PDFs are rasterized; a word is visible when its box lies on the page,
   is not covered, at least :data:`MIN_INK_PIXELS` pixels inside it differ between the two rasters
   by more than :data:`INK_LEVEL` (its glyphs changed what the page shows: this covers every way of
   painting text invisibly, since the only difference between the prints is the text itself), it
   can be read in the raster the model trains on (:mod:`olmpipe.synth.legible`: its size, advance per
   character, overlap, skew and blur at ``rasterize.longest_side``), its box is not mostly under
   another word's (lines printed over each other: :data:`MAX_WORD_OVERLAP`), and, for plain text outside a
   CSS filter (which Chromium prints as an image), when the PDF's text layer has the word's
   characters at that place (the print laid the page out as measured);
6. :data:`VISIBLE_HTML_JS`: the copy of step 1 with every hidden word and every comment removed.
   The miner reads that HTML, so neither tests nor the reference answer name hidden text.

A page whose print does not match its measured layout (Chromium shrinks content wider than the page
to fit it on the paper, which moves every word) is refused with that reason rather than mined from
boxes that are elsewhere on the printed page.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field, replace

import numpy as np
import pypdfium2 as pdfium

from olmpipe.synth.legible import Drawing, advance_chars, illegible, illegible_formula, local_extent

#: Raster resolution of the comparison, in pixels per CSS pixel, and the most pixels one raster may
#: have (a 200 x 200 inch page is compared at a lower resolution instead of taking gigabytes).
RASTER_SCALE = 2.0
MAX_RASTER_PIXELS = 16_000_000
#: A pixel shows ink when the two prints differ there by more than this (of 255, in grey).
INK_LEVEL = 40
#: A word is visible when at least this many of its pixels show ink.
MIN_INK_PIXELS = 3
#: A painted word is where it was measured when this share of its characters is printed there.
MIN_CHARS_FOUND = 0.5
#: More than this share of the painted words missing from the PDF's text layer at their place means
#: the print was laid out differently from the measured page.
MAX_UNMATCHED = 0.1
#: A word whose box is covered this much by the box of another word (lines printed over each other:
#: ``line-height`` far below the font size, or negative ``word-spacing``) is a smear, not text.
MAX_WORD_OVERLAP = 0.5
#: Word boxes compared per 32 px square of the page (a legible page holds far fewer).
MAX_CELL_BOXES = 256
#: Chromium prints content wider than the paper laid out on a page up to this much wider, scaled
#: down to the paper (Blink ``CalculateOverflowShrinkForPrinting``, ``layout/pagination_utils.cc``;
#: the factor is the page's overflow to the right over its width, at most the maximum shrink,
#: measured 1.5 with Debian's Chromium).
MAX_PRINT_SHRINK = 1.5

class LayoutMismatch(ValueError):
    """The printed page is not laid out as the page was measured; the message says how far off."""


@dataclass
class Visibility:
    """The outcome for one page: which character ranges of which text node are hidden."""

    words: int = 0  # words measured
    hidden: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # text node -> [start, end)
    hidden_words: list[str] = field(default_factory=list)  # their text (formulas: "<math>")
    illegible: Counter = field(default_factory=Counter)  # painted but unreadable words by reason (legible.py)


def _raster(pdf: bytes, width_px: int, height_px: int, scale_css: float) -> np.ndarray:
    """The page in grey at ``scale_css`` pixels per CSS pixel, cut or padded to ``width_px`` x ``height_px``."""
    doc = pdfium.PdfDocument(pdf)
    try:
        page = doc[0]
        scale = scale_css * 96 / 72  # pixels per PDF point
        image = page.render(scale=scale, grayscale=True).to_numpy()
    finally:
        doc.close()
    image = image.reshape(image.shape[0], image.shape[1], -1)[:, :, 0]
    out = np.full((height_px, width_px), 255, dtype=np.uint8)
    h, w = min(height_px, image.shape[0]), min(width_px, image.shape[1])
    out[:h, :w] = image[:h, :w]
    return out


def _text_layer(pdf: bytes, page_height_px: float) -> list[tuple[float, float, str]]:
    """(x, y, character) of every printed character's centre, in CSS pixels from the top left."""
    doc = pdfium.PdfDocument(pdf)
    try:
        page = doc[0]
        height_pt = page.get_height()
        textpage = page.get_textpage()
        chars = []
        for i in range(textpage.count_chars()):
            ch = textpage.get_text_range(i, 1)
            if not ch.strip():
                continue
            left, bottom, right, top = textpage.get_charbox(i)
            px = 96 / 72
            chars.append(((left + right) / 2 * px, (height_pt - (top + bottom) / 2) * px, ch))
        textpage.close()
    finally:
        doc.close()
    return chars


def _normal(text: str) -> str:
    return "".join(unicodedata.normalize("NFKC", text).casefold().split())


def _in_text_layer(word: str, printed: str) -> bool:
    """Whether at least :data:`MIN_CHARS_FOUND` of the word's characters are among those printed at
    its place. Characters, not their order: right-to-left scripts come out of the text layer
    reversed, text-shadows and overlapping text add characters, and complex scripts (Devanagari)
    lose some in the text layer."""
    need, have = Counter(_normal(word)), Counter(_normal(printed))
    total = sum(need.values())
    return not total or sum(min(n, have[ch]) for ch, n in need.items()) >= MIN_CHARS_FOUND * total


def print_shrink(measure: dict) -> float:
    """How much Chromium will shrink the page to fit the paper (1: not at all), from
    :data:`MEASURE_JS`'s ``scrollWidth`` at the paper's width."""
    return min(MAX_PRINT_SHRINK, max(1.0, measure["scrollWidth"] / measure["width"]))


def _overprinted(words: list, drawings: list[Drawing], shrink: float) -> set[int]:
    """``id()`` of the plain words (untransformed, not formulas) whose box another such word's box
    covers by more than :data:`MAX_WORD_OVERLAP` of the smaller one: text printed over other text. Boxes
    of words on one line never overlap, nor those of lines set solid (``line-height: 1``)."""
    grid: dict[tuple[int, int], list[tuple]] = {}
    found: set[int] = set()
    for word in words:
        if word[4] or word[5] or (0 <= word[7] < len(drawings) and drawings[word[7]].transformed):
            continue
        for x, y, w, h in word[6]:
            if w > 0 and h > 0:
                box = (x / shrink, y / shrink, (x + w) / shrink, (y + h) / shrink, word)
                cells = [(cx, cy) for cx in range(int(box[0] // 32), int(box[2] // 32) + 1)
                         for cy in range(int(box[1] // 32), int(box[3] // 32) + 1)]
                for cell in cells[:4096]:  # a box larger than the page (cut off there) adds nothing
                    if len(grid.get(cell, ())) >= MAX_CELL_BOXES:  # bounded work on a pathological page
                        continue
                    for other in grid.get(cell, ()):
                        ix = min(box[2], other[2]) - max(box[0], other[0])
                        iy = min(box[3], other[3]) - max(box[1], other[1])
                        smaller = min((box[2] - box[0]) * (box[3] - box[1]), (other[2] - other[0]) * (other[3] - other[1]))
                        if other[4] is not word and ix > 0 and iy > 0 and ix * iy > MAX_WORD_OVERLAP * smaller:
                            found |= {id(word), id(other[4])}
                    grid.setdefault(cell, []).append(box)
    return found


def visible_words(measure: dict, printed: bytes, blank: bytes, *, longest_side: int) -> Visibility:
    """Decide which measured words the printed page shows (see the module docstring).

    ``measure`` is :data:`MEASURE_JS`'s answer, ``printed`` the page's PDF and ``blank`` the PDF
    printed after :data:`HIDE_TEXT_JS`; ``longest_side`` is the training raster's longest side in
    pixels (``rasterize.longest_side``), which the legibility bounds are in. Raises
    :class:`LayoutMismatch` when more than :data:`MAX_UNMATCHED` of the painted words are not in
    the text layer where they were measured.
    """
    shrink = measure.get("shrink", 1.0)  # the page was measured laid out this much larger than the paper
    width, height = round(measure["width"] / shrink), round(measure["height"] / shrink)
    scale = min(RASTER_SCALE, (MAX_RASTER_PIXELS / max(1, width * height)) ** 0.5)
    w_px, h_px = round(width * scale), round(height * scale)
    ink = np.abs(_raster(printed, w_px, h_px, scale).astype(np.int16) - _raster(blank, w_px, h_px, scale)) > INK_LEVEL
    ink_rows = np.concatenate([np.zeros((1, w_px + 1), dtype=np.int32),
                               np.concatenate([np.zeros((h_px, 1), dtype=np.int32),
                                               ink.astype(np.int32).cumsum(0).cumsum(1)], axis=1)])
    chars = _text_layer(printed, height)
    rows: dict[int, list[tuple[float, float, str]]] = {}
    for x, y, ch in chars:
        rows.setdefault(int(y // 16), []).append((x, y, ch))

    def inked(rect) -> int:
        x, y, w, h = (v * scale for v in rect)
        x0, y0 = max(0, int(x) + 1), max(0, int(y) + 1)
        x1, y1 = min(w_px, int(x + w) - 1), min(h_px, int(y + h) - 1)
        if x1 <= x0 or y1 <= y0:
            return 0
        return int(ink_rows[y1, x1] - ink_rows[y0, x1] - ink_rows[y1, x0] + ink_rows[y0, x0])

    def printed_text(rects) -> str:
        """The text layer's characters centred inside ``rects``, left to right in each."""
        found = []
        for x, y, w, h in rects:
            inside = {(cx, cy, ch) for row in range(int((y - 1) // 16), int((y + h + 1) // 16) + 1)
                      for cx, cy, ch in rows.get(row, ()) if x - 1 <= cx <= x + w + 1 and y - 1 <= cy <= y + h + 1}
            found += [ch for _, _, ch in sorted(inside)]
        return "".join(found)

    image_scale = longest_side / max(width, height)  # training-raster pixels per CSS px of the paper
    drawings = [Drawing.from_row(row) for row in measure.get("drawings", [])]
    plain = Drawing()

    def layout(word) -> tuple[Drawing, float, float]:
        """The word's drawing and its (length, height) in layout px before transforms."""
        drawing = drawings[word[7]] if 0 <= word[7] < len(drawings) else plain
        if word[8] is not None and min(word[8]) > 0:
            return drawing, word[8][0], word[8][1]
        if drawing.transformed:  # not measured untransformed: judge the boxes as drawn
            drawing = replace(drawing, a=1.0, b=0.0, c=0.0, d=1.0)
        return (drawing, *local_extent(word[6], drawing.vertical))

    # Each text node's characters share one font, spacing and transform: their mean advance decides
    # (a word of narrow letters in a readable run stays readable).
    runs: dict[tuple[int, int], list[float]] = {}
    for word in measure["words"]:
        if not word[4] and word[6]:
            _, length, _ = layout(word)
            run = runs.setdefault((word[0], word[7]), [0.0, 0])
            run[0] += length
            run[1] += advance_chars(word[3])

    overprinted = _overprinted(measure["words"], drawings, shrink)
    out = Visibility(words=len(measure["words"]))
    painted = 0
    unmatched: list[str] = []
    for word in measure["words"]:
        index, start, end, text, math, covered, rects = word[:7]
        rects = [[v / shrink for v in r] for r in rects]
        on_page = [r for r in rects if 0 <= r[0] + r[2] / 2 < width and 0 <= r[1] + r[3] / 2 < height]
        shown = not covered and bool(on_page) and sum(inked(r) for r in on_page) >= MIN_INK_PIXELS
        drawing = plain
        if shown:
            if math:  # a formula: its boxes as printed, no advance per character
                drawing = drawings[word[7]] if 0 <= word[7] < len(drawings) else plain
                reason = illegible_formula(drawing, max(r[3] for r in on_page), image_scale=image_scale,
                                           shrink=shrink)
            else:
                drawing, _, across = layout(word)
                length, count = runs.get((index, word[7]), (0.0, 0))
                reason = illegible(drawing, across, length / count if count else 0.0, image_scale=image_scale,
                                   shrink=shrink)
            if reason is None and id(word) in overprinted:
                reason = "overprinted"
            if reason is None and len(word) > 9 and word[9]:  # MEASURE_JS's flag: drawn reordered
                reason = word[9]
            if reason:
                shown = False
                out.illegible[reason] += 1
        if shown and not math and not drawing.filtered:  # a filter prints its text as an image, no text layer
            painted += 1
            if not _in_text_layer(text, printed_text(on_page)):
                unmatched.append(text)
                shown = False
        if not shown:
            out.hidden.setdefault(index, []).append((start, end))
            out.hidden_words.append(text if not math else "<math>")
    if painted and len(unmatched) > max(2, MAX_UNMATCHED * painted):
        if measure["scrollWidth"] > measure["width"]:
            where = f"the content is {measure['scrollWidth']} px wide, laid out for a {measure['width']} px page"
        elif shrink > 1:
            where = f"the page was measured laid out {shrink:.2f} times wider than the paper, as the print shrinks it"
        else:
            where = "the content fits the paper's width, so the print did not shrink it"
        raise LayoutMismatch(f"{len(unmatched)} of {painted} painted words are not in the PDF's text layer where "
                             f"they were measured ({where}); e.g. {', '.join(repr(w) for w in unmatched[:3])}")
    return out
