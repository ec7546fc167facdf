"""The scripts :class:`olmpipe.synth.render.HtmlRenderer` runs in the tab that prints a synthetic page.

Steps 1, 3, 4 and 6 of :mod:`olmpipe.synth.visible` (its docstring says what each is for):
:data:`PREPARE_JS` keeps the parsed document and its text nodes, :data:`MEASURE_JS` measures every
word's boxes and whether it is hidden, :data:`HIDE_TEXT_JS` makes every glyph transparent for the
second print, and :data:`VISIBLE_HTML_JS` removes the hidden words from the kept copy. They are
JavaScript, kept apart from the Python that reads their answers.
"""

__all__ = ["HIDE_TEXT_JS", "MEASURE_JS", "PREPARE_JS", "VISIBLE_HTML_JS"]

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
