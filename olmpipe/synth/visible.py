"""What the page image shows: which words of a synthetic page are printed where a reader can see them.

The model sees only the page image, so a test about text the image does not show rewards writing
what is not there. Text can be in the HTML and not on the page in many ways: never laid out
(``display: none``, the ``hidden`` attribute, closed ``<details>``, ``content-visibility``, comments,
``<template>``), laid out but not painted (``visibility: hidden``, ``opacity: 0``, transparent text
fill, ``filter: opacity(0)``, ``clip``/``clip-path``, clipped by an ancestor's ``overflow``,
``transform: scale(0)``), painted where nobody sees it (off the printed page, under an opaque box,
in the colour of its background) or too small to read. A rule per CSS feature would miss the next
one, so :class:`olmpipe.synth.render.HtmlRenderer` asks the page itself, in the tab that prints it:

1. :data:`PREPARE_JS`, after the content is set (with print media emulated, as ``printToPDF`` lays
   it out): keeps a copy of the document as parsed and the list of its text nodes, stops animations
   and transitions (both prints must show the same state) and makes every element hit-testable;
2. the page is printed (the PDF kept);
3. :data:`MEASURE_JS`: every word of every text node (a run of non-space characters; a typeset
   formula counts as one word) with its layout boxes (``Range.getClientRects``) and whether it is
   hidden at its centre (``document.elementsFromPoint``): its own element must be hit there (not
   only its ancestors: clipped away), with nothing opaque above it (an element with an opaque
   background or image, or a replaced element);
4. :data:`HIDE_TEXT_JS`, then a second print: the same page with every glyph transparent;
5. :func:`visible_words`: both PDFs are rasterized; a word is visible when its box lies on the page,
   is at least :data:`MIN_TEXT_PX` tall, is not covered, and at least :data:`MIN_INK_PIXELS` pixels
   inside it differ between the two rasters by more than :data:`INK_LEVEL` (its glyphs changed what
   the page shows: this covers every way of painting text invisibly, since the only difference
   between the prints is the text itself), and, for plain text, when the PDF's text layer has the
   word's characters at that place (the print laid the page out as measured);
6. :data:`VISIBLE_HTML_JS`: the copy of step 1 with every hidden word and every comment removed.
   The miner reads that HTML, so neither tests nor the reference answer name hidden text.

A page whose print does not match its measured layout (Chromium shrinks content wider than the page
to fit it on the paper, which moves every word) is refused with that reason rather than mined from
boxes that are elsewhere on the printed page.
"""

from __future__ import annotations

import unicodedata
from collections import Counter
from dataclasses import dataclass, field

import numpy as np
import pypdfium2 as pdfium

#: Raster resolution of the comparison, in pixels per CSS pixel, and the most pixels one raster may
#: have (a 200 x 200 inch page is compared at a lower resolution instead of taking gigabytes).
RASTER_SCALE = 2.0
MAX_RASTER_PIXELS = 16_000_000
#: A pixel shows ink when the two prints differ there by more than this (of 255, in grey).
INK_LEVEL = 40
#: A word is visible when at least this many of its pixels show ink.
MIN_INK_PIXELS = 3
#: Text boxes lower than this (CSS px, about a 3 pt font) are too small to read on the page image.
MIN_TEXT_PX = 4.0
#: A painted word is where it was measured when this share of its characters is printed there.
MIN_CHARS_FOUND = 0.5
#: More than this share of the painted words missing from the PDF's text layer at their place means
#: the print was laid out differently from the measured page.
MAX_UNMATCHED = 0.1
#: Chromium prints content wider than the paper laid out on a page up to this much wider, scaled
#: down to the paper (Blink ``CalculateOverflowShrinkForPrinting``, ``layout/pagination_utils.cc``;
#: the factor is the page's overflow to the right over its width, at most the maximum shrink,
#: measured 1.5 with Debian's Chromium).
MAX_PRINT_SHRINK = 1.5

PREPARE_JS = r"""
(() => {
  const body = document.body;
  const clone = document.documentElement.cloneNode(true);
  const collect = (root) => {
    const nodes = [];
    if (!root) return nodes;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) nodes.push(walker.currentNode);
    return nodes;
  };
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; '
    + 'pointer-events: auto !important; }';
  document.documentElement.appendChild(style);
  window.__olm = {nodes: collect(body), clone, cloneNodes: collect(clone.querySelector('body')), pieces: new Map()};
  return window.__olm.nodes.length;
})()
"""

MEASURE_JS = r"""
(() => {
  const olm = window.__olm;
  const W = window.innerWidth, H = window.innerHeight;
  const styles = new Map();
  const cs = (el) => { let s = styles.get(el); if (!s) { s = getComputedStyle(el); styles.set(el, s); } return s; };
  const alpha = (color) => {
    if (!color || color === 'transparent') return 0;
    let m = color.match(/\/\s*([\d.]+)(%?)\s*\)\s*$/);
    if (m) return parseFloat(m[1]) / (m[2] ? 100 : 1);
    m = color.match(/^rgba\(\s*[^,]+,[^,]+,[^,]+,\s*([\d.]+)\s*\)$/);
    return m ? parseFloat(m[1]) : 1;
  };
  const opacity = (el) => { let o = 1; for (let e = el; e; e = e.parentElement) o *= parseFloat(cs(e).opacity); return o; };
  const REPLACED = new Set(['img', 'svg', 'canvas', 'video', 'input', 'textarea', 'select', 'iframe', 'object',
                            'embed', 'button', 'meter', 'progress']);
  const opaque = (el) => {
    const s = cs(el);
    const solid = REPLACED.has(el.localName) || s.backgroundImage !== 'none' ? 1 : alpha(s.backgroundColor);
    return solid * opacity(el) >= 0.5;
  };
  // Whether the word whose largest box is ``rect`` is hidden at its centre: off the page, clipped
  // away (its element is not hit there, only elements around it), or under something opaque (an
  // element hit above it with an opaque background or image, or a replaced element). ``owner`` is
  // the element holding the text (for a formula, the span holding KaTeX's output, whose own
  // elements do not count); an owner without a box (display: contents) stands for its parent.
  const covered = (owner, rect, math) => {
    const x = rect.left + rect.width / 2, y = rect.top + rect.height / 2;
    if (x < 0 || y < 0 || x >= W || y >= H) return true;
    let box = owner;
    while (box.parentElement && cs(box).display === 'contents') box = box.parentElement;
    for (const el of document.elementsFromPoint(x, y)) {
      if (el === box || (math && box.contains(el))) return false;
      if (el.contains(box)) return true;  // an ancestor is hit where the word should be: clipped
      if (opaque(el)) return true;
    }
    return true;
  };
  const boxes = (list) => Array.from(list).filter(r => r.width > 0 && r.height > 0);
  const largest = (rects) => rects.reduce((a, r) => (r.width * r.height > a.width * a.height ? r : a));
  const words = [];
  const range = document.createRange();
  const measureText = (index, node, base) => {
    const text = node.nodeValue, owner = node.parentElement;
    const re = /\S+/g;
    let m;
    while ((m = re.exec(text))) {
      range.setStart(node, m.index);
      range.setEnd(node, m.index + m[0].length);
      const rects = owner ? boxes(range.getClientRects()) : [];
      const hidden = !rects.length || covered(owner, largest(rects), false);
      words.push([index, base + m.index, base + m.index + m[0].length, m[0], 0, hidden ? 1 : 0,
                  rects.map(r => [r.left, r.top, r.width, r.height])]);
    }
  };
  olm.nodes.forEach((node, index) => {
    const pieces = olm.pieces.get(index);
    if (!pieces) {
      if (node.isConnected) measureText(index, node, 0);
      else words.push([index, 0, node.nodeValue.length, node.nodeValue, 0, 1, []]);
      return;
    }
    for (const [start, end, piece, math] of pieces) {
      if (!math) { measureText(index, piece, start); continue; }
      const visual = piece.querySelector('.katex-html') || piece;
      const rects = boxes(visual.getClientRects());
      const hidden = !rects.length || covered(piece, largest(rects), true);
      words.push([index, start, end, '', 1, hidden ? 1 : 0, rects.map(r => [r.left, r.top, r.width, r.height])]);
    }
  });
  return {width: W, height: H, scrollWidth: document.documentElement.scrollWidth, words};
})()
"""

HIDE_TEXT_JS = r"""
(() => {
  const rules = [['-webkit-text-fill-color', 'transparent'], ['text-shadow', 'none'],
                 ['-webkit-text-stroke-width', '0'], ['-webkit-text-emphasis-color', 'transparent'],
                 ['background-clip', 'border-box'], ['-webkit-background-clip', 'border-box']];
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after, *::marker, *::first-letter, *::first-line { '
    + rules.map(([k, v]) => `${k}: ${v} !important;`).join(' ') + ' } '
    + 'svg text, svg tspan, svg textPath { fill: transparent !important; stroke: transparent !important; }';
  document.documentElement.appendChild(style);
  for (const el of document.querySelectorAll('*')) {  // beats an author's inline !important too
    if (!el.style) continue;
    for (const [k, v] of rules) el.style.setProperty(k, v, 'important');
  }
  return true;
})()
"""

VISIBLE_HTML_JS = r"""
((hidden) => {
  const olm = window.__olm;
  for (const [index, spans] of Object.entries(hidden)) {
    const node = olm.cloneNodes[Number(index)];
    if (!node) continue;
    let text = node.nodeValue;
    spans.sort((a, b) => b[0] - a[0]);
    for (const [start, end] of spans) text = text.slice(0, start) + text.slice(end);
    node.nodeValue = text;
  }
  const walker = document.createTreeWalker(olm.clone, NodeFilter.SHOW_COMMENT);
  const comments = [];
  while (walker.nextNode()) comments.push(walker.currentNode);
  comments.forEach(c => c.remove());
  return '<!DOCTYPE html>\n' + olm.clone.outerHTML;
})
"""


class LayoutMismatch(ValueError):
    """The printed page is not laid out as the page was measured; the message says how far off."""


@dataclass
class Visibility:
    """The outcome for one page: which character ranges of which text node are hidden."""

    words: int = 0  # words measured
    hidden: dict[int, list[tuple[int, int]]] = field(default_factory=dict)  # text node -> [start, end)
    hidden_words: list[str] = field(default_factory=list)  # their text (formulas: "<math>")


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


def visible_words(measure: dict, printed: bytes, blank: bytes) -> Visibility:
    """Decide which measured words the printed page shows (see the module docstring).

    ``measure`` is :data:`MEASURE_JS`'s answer, ``printed`` the page's PDF and ``blank`` the PDF
    printed after :data:`HIDE_TEXT_JS`. Raises :class:`LayoutMismatch` when more than
    :data:`MAX_UNMATCHED` of the painted words are not in the text layer where they were measured.
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

    out = Visibility(words=len(measure["words"]))
    painted = unmatched = 0
    for index, start, end, text, math, covered, rects in measure["words"]:
        rects = [[v / shrink for v in r] for r in rects]
        on_page = [r for r in rects if 0 <= r[0] + r[2] / 2 < width and 0 <= r[1] + r[3] / 2 < height]
        shown = (not covered and bool(on_page) and max(r[3] for r in on_page) >= MIN_TEXT_PX
                 and sum(inked(r) for r in on_page) >= MIN_INK_PIXELS)
        if shown and not math:
            painted += 1
            if not _in_text_layer(text, printed_text(on_page)):
                unmatched += 1
                shown = False
        if not shown:
            out.hidden.setdefault(index, []).append((start, end))
            out.hidden_words.append(text if not math else "<math>")
    if painted and unmatched > max(2, MAX_UNMATCHED * painted):
        raise LayoutMismatch(f"{unmatched} of {painted} painted words are not where they were measured "
                             f"(the content is {measure['scrollWidth']} px wide, laid out for a "
                             f"{measure['width']} px page)")
    return out
