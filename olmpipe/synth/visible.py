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
  // the elements of the page and of its copy, pair by pair (the copy is the tree as parsed: same order)
  const elements = (root) => {
    const out = [];
    if (!root) return out;
    const walker = document.createTreeWalker(root, NodeFilter.SHOW_ELEMENT);
    while (walker.nextNode()) out.push(walker.currentNode);
    return out;
  };
  const live = elements(body), copy = elements(clone.querySelector('body'));
  const style = document.createElement('style');
  style.textContent = '*, *::before, *::after { animation: none !important; transition: none !important; '
    + 'pointer-events: auto !important; }';
  document.documentElement.appendChild(style);
  window.__olm = {nodes: collect(body), clone, cloneNodes: collect(clone.querySelector('body')), pieces: new Map(),
                  pairs: live.length === copy.length ? live.map((el, i) => [el, copy[i]]) : [], spaces: []};
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
  // How an element draws its text (one entry of ``drawings``, shared by the words of an owner):
  // [a, b, c, d] the linear part of every CSS transform on it and its ancestors (x' = a x + c y,
  // y' = b x + d y, page px per layout px; the individual rotate and scale properties included), its
  // letter spacing (layout px), the standard deviation of every filter blur above it (page px),
  // whether a filter draws it (Chromium prints filtered content as an image, so it is not in the
  // PDF's text layer) and whether its lines run vertically.
  const mul = (p, q) => [p[0] * q[0] + p[2] * q[1], p[1] * q[0] + p[3] * q[1],
                         p[0] * q[2] + p[2] * q[3], p[1] * q[2] + p[3] * q[3]];
  const num = (t) => parseFloat(t) / (t.endsWith('%') ? 100 : 1);
  const linear = (el) => {
    const s = cs(el), parts = [];
    if (s.rotate && s.rotate !== 'none') {
      const t = s.rotate.trim().split(/\s+/);
      parts.push(t.length === 1 ? `rotate(${t[0]})` : t.length === 2 ? `rotate${t[0].toUpperCase()}(${t[1]})`
                 : `rotate3d(${t.slice(0, 3).join(',')},${t[3]})`);
    }
    if (s.scale && s.scale !== 'none') {
      const t = s.scale.trim().split(/\s+/).map(num);
      parts.push(`scale3d(${t[0]},${t.length > 1 ? t[1] : t[0]},${t.length > 2 ? t[2] : 1})`);
    }
    if (s.transform && s.transform !== 'none') parts.push(s.transform);
    if (!parts.length) return null;
    try {
      const m = new DOMMatrix(parts.join(' '));  // translate, rotate, scale, then transform (CSS Transforms 2)
      return [m.a, m.b, m.c, m.d];
    } catch (e) {
      return null;
    }
  };
  const drawings = [], drawn = new Map();
  const drawing = (owner) => {
    let d = drawn.get(owner);
    if (d) return d;
    const chain = [];
    for (let e = owner; e; e = e.parentElement) chain.push(e);
    let m = [1, 0, 0, 1], blur2 = 0, filtered = 0;
    const transformed = [];
    for (let i = chain.length - 1; i >= 0; i--) {  // from the root down: m maps chain[i]'s space to the page
      const own = linear(chain[i]);
      if (own) { m = mul(m, own); transformed.push(chain[i]); }
      const f = cs(chain[i]).filter;
      if (f && f !== 'none') {  // a filter works in its element's space, before that space is transformed
        filtered = 1;
        const k = Math.sqrt(Math.abs(m[0] * m[3] - m[1] * m[2]));
        for (const b of f.matchAll(/blur\(\s*([\d.]+)px\s*\)/g)) blur2 += (parseFloat(b[1]) * k) ** 2;
      }
    }
    const s = cs(owner);
    const spacing = s.letterSpacing === 'normal' ? 0 : (parseFloat(s.letterSpacing) || 0);
    const vertical = /^(vertical|sideways)/.test(s.writingMode) ? 1 : 0;
    d = {key: drawings.length, transformed, vertical};
    drawings.push([...m, spacing, Math.sqrt(blur2), filtered, vertical]);
    drawn.set(owner, d);
    return d;
  };
  // Text drawn in another order than it is written: an override of the bidirectional algorithm that
  // reverses it (unicode-bidi: bidi-override or isolate-override on its element or on an inline
  // ancestor up to its block container, against the direction of its letters; or the characters
  // U+202D/U+202E in its text). Such a word gets the flag `drawn reordered` (hidden from mining).
  const RTL = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFC]/u, RTL_ALL = /[\u0590-\u08FF\uFB1D-\uFDFF\uFE70-\uFEFC]/gu;
  const directions = new Map();
  const override = (owner) => {
    let dir = directions.get(owner);
    if (dir !== undefined) return dir;
    dir = '';
    for (let e = owner; e; e = e.parentElement) {
      const st = cs(e);
      if (st.unicodeBidi.includes('override')) { dir = st.direction; break; }
      if (st.unicodeBidi !== 'normal' || (!st.display.startsWith('inline') && st.display !== 'contents')) break;
    }
    directions.set(owner, dir);
    return dir;
  };
  const reordered = (word, dir) => (dir === 'rtl' ? /[\p{L}\p{N}]/u.test(word.replace(RTL_ALL, ''))
                                    : dir === 'ltr' && RTL.test(word));
  // ::first-letter drawn otherwise than its word (e.g. transparent): the first letter of such a block
  // container is measured as a word of its own, so that the ink decides it alone.
  const firstLetters = new Map();  // text node -> offset of its first letter
  // (inherited properties only: a pseudo-element's own transform or opacity is its initial value)
  const PAINT = ['color', 'webkitTextFillColor', 'fontSize', 'visibility', 'textShadow', 'fontFamily',
                 'webkitTextStrokeWidth'];
  for (const el of (document.body ? document.body.querySelectorAll('*') : [])) {
    const st = cs(el);
    if (!/^(block|inline-block|list-item|flow-root|table-cell|table-caption)$/.test(st.display)) continue;
    const first = getComputedStyle(el, '::first-letter');
    if (PAINT.every(k => first[k] === st[k])) continue;
    const walker = document.createTreeWalker(el, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) {
      const at = walker.currentNode.nodeValue.search(/\S/);
      if (at >= 0) { if (!firstLetters.has(walker.currentNode)) firstLetters.set(walker.currentNode, at); break; }
    }
  }
  // Words whose text is transformed are measured again with the transforms off (their layout size:
  // transforms do not change layout), for the advance and height the transform then scales.
  const untransform = [];
  const words = [], wordNodes = [];
  const range = document.createRange();
  const measureText = (index, node, base, plain = true) => {
    const text = node.nodeValue, owner = node.parentElement;
    const controlled = /[\u202D\u202E]/.test(text);
    const letterAt = firstLetters.get(node);
    const re = /\S+/g;
    let m;
    while ((m = re.exec(text))) {
      const parts = [[m.index, m.index + m[0].length]];
      if (letterAt === m.index) {
        const letter = m[0].match(/^[\s\S]\p{M}*/u)[0].length;
        if (letter < m[0].length) parts.splice(0, 1, [m.index, m.index + letter], [m.index + letter, m.index + m[0].length]);
      }
      for (const [a, b] of parts) {
        range.setStart(node, a);
        range.setEnd(node, b);
        const rects = owner ? boxes(range.getClientRects()) : [];
        const hidden = !rects.length || covered(owner, largest(rects), false);
        const d = owner ? drawing(owner) : null;
        const word = text.slice(a, b);
        const flag = owner && (controlled || reordered(word, override(owner))) ? 'drawn reordered' : '';
        if (rects.length && d && d.transformed.length) untransform.push([words.length, node, a, b - a, d]);
        words.push([index, base + a, base + b, word, 0, hidden ? 1 : 0,
                    rects.map(r => [r.left, r.top, r.width, r.height]), d ? d.key : -1, null, flag]);
        wordNodes.push(plain ? node : null);
      }
    }
  };
  olm.nodes.forEach((node, index) => {
    const pieces = olm.pieces.get(index);
    if (!pieces) {
      if (node.isConnected) measureText(index, node, 0);
      else words.push([index, 0, node.nodeValue.length, node.nodeValue, 0, 1, [], -1, null]);
      return;
    }
    for (const [start, end, piece, math] of pieces) {
      if (!math) { measureText(index, piece, start, false); continue; }
      const visual = piece.querySelector('.katex-html') || piece;
      const rects = boxes(visual.getClientRects());
      const hidden = !rects.length || covered(piece, largest(rects), true);
      words.push([index, start, end, '', 1, hidden ? 1 : 0, rects.map(r => [r.left, r.top, r.width, r.height]),
                  drawing(piece).key, null, '']);
      wordNodes.push(null);
    }
  });
  // Spaces the page draws but its text lacks: two words of adjacent text nodes with nothing between
  // them in the text (e.g. inline-block spans with a margin, flex items) printed apart on one line
  // get a space in the copy the miner reads (olm.spaces: [text node, offset]).
  olm.spaces = [];
  // the element whose lines hold a text node's words: inline boxes (inline-block too), boxes without
  // a box of their own and flex or grid items lead up to it; a table cell or a block is its own
  const lineOf = (el) => {
    for (let e = el; e; e = e.parentElement) {
      const st = cs(e), parent = e.parentElement ? cs(e.parentElement).display : '';
      if (!(st.display.startsWith('inline') || st.display === 'contents' || /(flex|grid)$/.test(parent))) return e;
    }
    return null;
  };
  for (let k = 1; k < words.length; k++) {
    const [i, , end, , , , r1] = words[k - 1], [j, start, , , , , r2] = words[k];
    const n1 = wordNodes[k - 1], n2 = wordNodes[k];
    if (!n1 || !n2 || i === j || start !== 0 || end !== n1.nodeValue.length || !r1.length || !r2.length) continue;
    if (olm.nodes.slice(i + 1, j).some(n => n.nodeValue.length)) continue;  // text between them: a space or more
    if (!n1.parentElement || !n2.parentElement || lineOf(n1.parentElement) !== lineOf(n2.parentElement)) continue;
    const [x1, y1, w1, h1] = r1[r1.length - 1], [x2, y2, , h2] = r2[0];
    const overlap = Math.min(y1 + h1, y2 + h2) - Math.max(y1, y2);
    const st = cs(n2.parentElement);
    const gap = x2 - (x1 + w1) - Math.max(0, parseFloat(st.letterSpacing) || 0);
    if (overlap > 0.5 * Math.min(h1, h2) && gap > 0.2 * parseFloat(st.fontSize)) olm.spaces.push([j, 0]);
  }
  if (untransform.length) {
    const saved = [], off = new Set(untransform.flatMap(u => u[4].transformed));
    for (const el of off) {
      for (const prop of ['transform', 'rotate', 'scale']) {
        saved.push([el, prop, el.style.getPropertyValue(prop), el.style.getPropertyPriority(prop)]);
        el.style.setProperty(prop, 'none', 'important');
      }
    }
    const r = document.createRange();
    for (const [k, node, start, length, d] of untransform) {
      r.setStart(node, start);
      r.setEnd(node, start + length);
      const rects = boxes(r.getClientRects());
      const along = rects.reduce((a, b) => a + (d.vertical ? b.height : b.width), 0);
      const across = rects.reduce((a, b) => Math.max(a, d.vertical ? b.width : b.height), 0);
      words[k][8] = [along, across];
    }
    for (const [el, prop, value, priority] of saved) {
      if (value) el.style.setProperty(prop, value, priority); else el.style.removeProperty(prop);
    }
  }
  return {width: W, height: H, scrollWidth: document.documentElement.scrollWidth, words, drawings};
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
  // the spaces the page draws between words its text writes together (MEASURE_JS)
  for (const [index] of olm.spaces || []) {
    const node = olm.cloneNodes[index];
    if (node) node.nodeValue = ' ' + node.nodeValue;
  }
  // characters that draw nothing: zero-width space, word joiner, zero-width no-break space, soft hyphen,
  // invisible operators, direction marks
  const INVISIBLE = /[\u00AD\u180E\u200B\u200E\u200F\u2060-\u2064\uFEFF]/g;
  for (const node of olm.cloneNodes) {
    if (node && /[\u00AD\u180E\u200B\u200E\u200F\u2060-\u2064\uFEFF]/.test(node.nodeValue)) {
      node.nodeValue = node.nodeValue.replace(INVISIBLE, '');
    }
  }
  // drawn order of flex and grid items: the `order` property, and flex's *-reverse directions (the
  // copy's children in the order the page draws them, as CSS's order-modified document order)
  const liveOf = new Map((olm.pairs || []).map(([live, copy]) => [copy, live]));
  for (const [live, copy] of olm.pairs || []) {
    const st = getComputedStyle(live);
    const flex = /flex$/.test(st.display), grid = /grid$/.test(st.display);
    if (!flex && !grid) continue;
    const reverse = flex && st.flexDirection.endsWith('-reverse');
    const items = Array.from(copy.childNodes).map((n, i) => [n, liveOf.has(n)
      ? (parseInt(getComputedStyle(liveOf.get(n)).order, 10) || 0) : 0, i]);
    if (!reverse && items.every(item => item[1] === 0)) continue;
    items.sort((a, b) => a[1] - b[1] || a[2] - b[2]);
    if (reverse) items.reverse();
    for (const [n] of items) copy.appendChild(n);
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
