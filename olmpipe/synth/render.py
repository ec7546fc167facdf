"""Render a synthetic HTML page to a one-page PDF in headless Chromium, offline.

olmocr 0.4.27 renders with Playwright (``mine_html_templates.py``, ``render_pdf_with_playwright``,
lines 631-733): a page at the source image's size, KaTeX from a CDN, ``page.pdf`` at that size, and
a check that the result has exactly one page. Here the browser is the one the math engine already
drives (:class:`olmpipe.bench.mathbrowser.BrowserPipe`: Debian's Chromium over the DevTools pipe, in
its own process group, private profile and ``TMPDIR`` removed on close) and nothing leaves the
machine:

- :func:`sanitize` removes scripts, frames, objects, ``<link>``/``<base>``, event handlers and every
  non-``data:`` URL attribute, and puts a Content-Security-Policy (``default-src 'none'``, inline
  styles and ``data:`` images/fonts only) first in ``<head>``;
- the tab is switched to offline network emulation before the content is set;
- math (``\\(...\\)``, ``\\[...\\]``, ``$$...$$``) is typeset with the KaTeX shipped in
  ``olmpipe/bench/katex_assets`` through ``Runtime.evaluate`` (DevTools evaluation is not subject to
  the page's CSP; the page itself runs no script).

A page that prints to more than one PDF page is refused (:class:`RenderRefused`), as in the
reference (lines 717-725). Rotated copies turn the page's ``/Rotate`` like
``rotate_html_templates.py`` (``rotate_pdf``, lines 66-93).
"""

from __future__ import annotations

import base64
import json
import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Self

import pypdfium2 as pdfium
from bs4 import BeautifulSoup

from olmpipe.bench.mathbrowser import BrowserError, BrowserPipe
from olmpipe.records.files import atomic_path
from olmpipe.synth.pagejs import HIDE_TEXT_JS, MEASURE_JS, PREPARE_JS, VISIBLE_HTML_JS
from olmpipe.synth.visible import LayoutMismatch, print_shrink, visible_words

log = logging.getLogger(__name__)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; script-src 'none'"
_URL_ATTRS = ("src", "href", "srcset", "poster", "action", "formaction", "background", "data",
              "xlink:href", "ping", "cite", "longdesc", "manifest", "codebase")
_DROP = ("script", "iframe", "frame", "frameset", "object", "embed", "link", "base", "applet",
         "portal", "noscript", "template")
CSS_PX_PER_PT = 96 / 72
#: Math delimiters (opening, closing), in the order olmocr's miner applies its patterns (``mine_html_templates.py`` lines 1127-1164).
MATH_DELIMITERS = (("$$", "$$"), ("\\(", "\\)"), ("\\[", "\\]"))

# Typesets every \(...\), \[...\] and $$...$$ found inside one text node; returns how many. The
# segments are those of the regex /\\\[([\s\S]+?)\\\]|\\\(([\s\S]+?)\\\)|\$\$([\s\S]+?)\$\$/g, found
# with indexOf in linear time (the regex retries every later opening after one without a closing,
# which takes hours on a page of unclosed "\("); each delimiter's next opening and closing are kept
# until passed, so no stretch of text is scanned twice for the same delimiter.
_KATEX_WALK = r"""
(() => {
  const DELIMS = [['\\[', '\\]', true], ['\\(', '\\)', false], ['$$', '$$', true]];
  function segments(text) {
    const found = [];
    const open = [-2, -2, -2], close = [-2, -2, -2];  // -2: not looked up yet; -1: none left
    let pos = 0;
    for (;;) {
      let best = -1;
      for (let k = 0; k < 3; k++) {
        const [o, c] = DELIMS[k];
        if (open[k] === -1 || close[k] === -1) continue;
        if (open[k] < pos) open[k] = text.indexOf(o, pos);
        if (open[k] < 0) { open[k] = -1; continue; }
        const from = open[k] + o.length + 1;
        if (close[k] < from) close[k] = text.indexOf(c, from);
        if (close[k] < 0) { close[k] = -1; continue; }
        if (best < 0 || open[k] < open[best]) best = k;
      }
      if (best < 0) return found;
      const [o, c, display] = DELIMS[best];
      found.push([open[best], close[best] + c.length, text.slice(open[best] + o.length, close[best]), display]);
      pos = close[best] + c.length;
    }
  }
  // the text nodes olmpipe.synth.pagejs's PREPARE_JS listed, if it ran; each replaced one's pieces
  // ([start, end, node, is math] in the original text) are kept for its measurement
  const olm = window.__olm;
  let nodes = olm ? olm.nodes : null;
  if (!nodes) {
    nodes = [];
    const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
    while (walker.nextNode()) nodes.push(walker.currentNode);
  }
  let count = 0;
  nodes.forEach((node, index) => {
    if (!node.isConnected) return;
    const text = node.nodeValue;
    const found = segments(text);
    if (!found.length) return;
    const span = document.createElement('span');
    const pieces = [];
    let last = 0;
    for (const [start, end, tex, display] of found) {
      const before = document.createTextNode(text.slice(last, start));
      span.appendChild(before);
      pieces.push([last, start, before, false]);
      const holder = document.createElement('span');
      holder.innerHTML = katex.renderToString(tex, {displayMode: display, throwOnError: false});
      span.appendChild(holder);
      pieces.push([start, end, holder, true]);
      last = end;
      count++;
    }
    const after = document.createTextNode(text.slice(last));
    span.appendChild(after);
    pieces.push([last, text.length, after, false]);
    node.replaceWith(span);
    if (olm) olm.pieces.set(index, pieces);
  });
  return count;
})()
"""


def find_delimited(text: str, opening: str, closing: str) -> Iterator[str]:
    """What ``re.findall(re.escape(opening) + "(.+?)" + re.escape(closing), text, re.DOTALL)``
    returns, in linear time: the regex tries every later opening again after one without a closing,
    so a page of 300,000 unclosed ``\\(`` took hours.

    >>> list(find_delimited(r"a \\(x\\) b \\(y\\) \\(z", "\\\\(", "\\\\)"))
    ['x', 'y']
    """
    pos = 0
    while (start := text.find(opening, pos)) >= 0:
        end = text.find(closing, start + len(opening) + 1)  # ``.+?``: at least one character
        if end < 0:
            return  # no closing after this opening, so none after any later one either
        yield text[start + len(opening):end]
        pos = end + len(closing)


@dataclass
class RenderedPage:
    """A printed page: its PDF and, from :meth:`HtmlRenderer.render_page`, the HTML of what it shows."""

    pdf: bytes
    visible_html: str | None = None  # the page as parsed, without the words the print does not show
    words: int = 0  # words measured on the page
    hidden_words: list[str] = field(default_factory=list)  # the words left out, in page order
    unreadable: dict[str, int] = field(default_factory=dict)  # of those, painted but unreadable, by reason


class RenderRefused(ValueError):
    """The page cannot become a one-page PDF (too many pages, nothing printed); the reason says why."""


def neutralise_css(css: str) -> str:
    """``css`` with every ``url(...)`` that is not a ``data:`` URL and every ``@import ...;`` replaced
    by ``none``, in linear time (a regex retrying each later ``url(`` after an unclosed one took
    45 s on 80 kB); an unclosed one runs to the end of the text, as in CSS's own tokenizer.

    >>> neutralise_css("a{background:url( 'http://x/y.png' )} b{background:url(data:image/png;base64,AA)}")
    'a{background:none} b{background:url(data:image/png;base64,AA)}'
    """
    lower = css.lower()
    out: list[str] = []
    pos = 0
    while True:
        url, imp = lower.find("url(", pos), lower.find("@import", pos)
        start = min((i for i in (url, imp) if i >= 0), default=-1)
        if start < 0:
            out.append(css[pos:])
            return "".join(out)
        out.append(css[pos:start])
        if start == url:
            end = lower.find(")", start)
            end = len(css) if end < 0 else end + 1
            target = css[start + 4:end].strip().rstrip(")").strip().strip("'\"").lstrip()
            keep = target.lower().startswith("data:")
        else:
            end = lower.find(";", start)
            end = len(css) if end < 0 else end + 1
            keep = False
        out.append(css[start:end] if keep else "none")
        pos = end


def _katex_asset(name: str) -> str:
    return resources.files("olmpipe.bench.katex_assets").joinpath(name).read_text(encoding="utf-8")


def sanitize(html: str) -> str:
    """The page without anything that could run or fetch, with a CSP first in ``<head>``.

    >>> "evil" in sanitize('<p>x</p><script>evil()</script><img src="http://x/y.png">')
    False
    """
    soup = BeautifulSoup(html, "lxml")
    for tag in soup.find_all(_DROP):
        tag.decompose()
    for tag in soup.find_all("meta"):
        if str(tag.get("http-equiv", "")).lower() in ("refresh", "content-security-policy", "set-cookie"):
            tag.decompose()
    for tag in soup.find_all(True):
        for attr in list(tag.attrs):
            value = tag.attrs[attr]
            text = " ".join(value) if isinstance(value, list) else str(value)
            if attr.lower().startswith("on") or (
                    attr.lower() in _URL_ATTRS and not text.strip().lower().startswith(("data:", "#"))):
                del tag.attrs[attr]
            elif attr.lower() == "style":
                tag.attrs[attr] = neutralise_css(text)
    for style in soup.find_all("style"):
        style.string = neutralise_css(style.get_text())
    if soup.html is None:
        soup.append(soup.new_tag("html"))
    if soup.head is None:
        soup.html.insert(0, soup.new_tag("head"))
    soup.head.insert(0, soup.new_tag("meta", attrs={"http-equiv": "Content-Security-Policy", "content": CSP}))
    soup.head.insert(0, soup.new_tag("meta", charset="utf-8"))
    return "<!DOCTYPE html>\n" + str(soup.html)


def pdf_page_count(data: bytes) -> int:
    doc = pdfium.PdfDocument(data)
    try:
        return len(doc)
    finally:
        doc.close()


def rotate_pdf(src: Path, dst: Path, angle: int) -> None:
    """Copy ``src`` turned ``angle`` degrees counter-clockwise (90, 180 or 270), as olmocr's
    ``rotate_pdf`` does by adding ``(360 - angle) % 360`` clockwise to each page's ``/Rotate``."""
    if angle not in (90, 180, 270):
        raise ValueError(f"rotation must be 90, 180 or 270 degrees, not {angle}")
    doc = pdfium.PdfDocument(str(src))
    try:
        for page in doc:
            page.set_rotation((page.get_rotation() + (360 - angle) % 360) % 360)
        with atomic_path(dst) as tmp:
            doc.save(str(tmp))
    finally:
        doc.close()


class HtmlRenderer:
    """One headless Chromium that prints HTML pages to PDF, one tab per page, offline.

    Example::

        with HtmlRenderer() as r:
            pdf_bytes = r.render("<p>Hello</p>", width_pt=612, height_pt=792)
    """

    def __init__(self, *, executable: str | None = None, timeout_s: float = 60.0) -> None:
        self.executable = executable
        self.timeout_s = timeout_s
        self._browser: BrowserPipe | None = None

    def _get(self) -> BrowserPipe:
        if self._browser is None or not self._browser.alive:
            self._browser = BrowserPipe.launch(self.executable, timeout=self.timeout_s)
        return self._browser

    def render(self, html: str, *, width_pt: float, height_pt: float) -> bytes:
        """PDF bytes of the sanitized page at ``width_pt`` x ``height_pt``; raises RenderRefused when it
        does not fit on one page, BrowserError when the browser fails or exceeds ``timeout_s``."""
        return self._print(html, width_pt, height_pt, visible=False).pdf

    def render_page(self, html: str, *, width_pt: float, height_pt: float, longest_side: int) -> RenderedPage:
        """:meth:`render`, plus what the printed page shows (:mod:`olmpipe.synth.visible`): the page's
        HTML without the words it does not show or that cannot be read when the page is rasterized
        with ``longest_side`` pixels on its longest side (``rasterize.longest_side``), for the miner.
        Also raises RenderRefused when the print is not laid out as the page was measured."""
        return self._print(html, width_pt, height_pt, visible=True, longest_side=longest_side)

    def _print(self, html: str, width_pt: float, height_pt: float, *, visible: bool,
               longest_side: int = 0) -> RenderedPage:
        clean = sanitize(html)
        needs_math = any(next(find_delimited(clean, o, c), None) is not None for o, c in MATH_DELIMITERS)
        browser = self._get()
        deadline = time.monotonic() + self.timeout_s

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                browser.kill()
                raise BrowserError(f"rendering took more than {self.timeout_s:g} s")
            return remaining

        print_params = {"paperWidth": width_pt / 72, "paperHeight": height_pt / 72, "marginTop": 0,
                        "marginBottom": 0, "marginLeft": 0, "marginRight": 0, "printBackground": True,
                        "preferCSSPageSize": False}
        target = browser.call("Target.createTarget", {"url": "about:blank"}, timeout=left())["targetId"]
        try:
            session = browser.call("Target.attachToTarget", {"targetId": target, "flatten": True},
                                   timeout=left())["sessionId"]
            browser.call("Network.enable", session=session, timeout=left())
            browser.call("Network.emulateNetworkConditions",
                         {"offline": True, "latency": 0, "downloadThroughput": -1, "uploadThroughput": -1},
                         session=session, timeout=left())
            browser.call("Emulation.setDeviceMetricsOverride",
                         {"width": round(width_pt * CSS_PX_PER_PT), "height": round(height_pt * CSS_PX_PER_PT),
                          "deviceScaleFactor": 1, "mobile": False}, session=session, timeout=left())
            # measured as printed: @media print rules apply to the layout the words are measured in
            browser.call("Emulation.setEmulatedMedia", {"media": "print"}, session=session, timeout=left())
            browser.call("Page.enable", session=session, timeout=left())
            frame = browser.call("Page.getFrameTree", session=session, timeout=left())["frameTree"]["frame"]["id"]
            browser.call("Page.setDocumentContent", {"frameId": frame, "html": clean}, session=session, timeout=left())
            if visible:
                self._evaluate(browser, session, PREPARE_JS, left())
            if needs_math:
                style = _katex_asset("katex.min.css").replace("\\", "\\\\").replace("`", "\\`").replace("${", "\\${")
                self._evaluate(browser, session, _katex_asset("katex.min.js"), left())
                self._evaluate(browser, session, f"(() => {{ const s = document.createElement('style'); "
                               f"s.textContent = `{style}`; document.head.appendChild(s); }})()", left())
                self._evaluate(browser, session, _KATEX_WALK, left())
            self._evaluate(browser, session, "document.fonts.ready.then(() => true)", left(), wait=True)
            pdf = base64.b64decode(browser.call("Page.printToPDF", print_params, session=session,
                                                timeout=left())["data"])
            pages = pdf_page_count(pdf)
            if pages != 1:
                raise RenderRefused(f"renders to {pages} PDF pages at {width_pt:g}x{height_pt:g} pt, not one "
                                    f"(shorten the page or give a larger page size)")
            if not visible:
                return RenderedPage(pdf)
            measure = self._evaluate(browser, session, MEASURE_JS, left())
            shrink = print_shrink(measure)
            if shrink > 1:  # measure where the print laid the page out: wider, then scaled to the paper
                metrics = {"width": round(width_pt * CSS_PX_PER_PT * shrink),
                           "height": round(height_pt * CSS_PX_PER_PT * shrink), "deviceScaleFactor": 1,
                           "mobile": False}
                browser.call("Emulation.setDeviceMetricsOverride", metrics, session=session, timeout=left())
                measure = self._evaluate(browser, session, MEASURE_JS, left())
            measure["shrink"] = shrink
            self._evaluate(browser, session, HIDE_TEXT_JS, left())
            blank = base64.b64decode(browser.call("Page.printToPDF", print_params, session=session,
                                                  timeout=left())["data"])
            try:
                seen = visible_words(measure, pdf, blank, longest_side=longest_side)
            except LayoutMismatch as exc:
                raise RenderRefused(f"the printed page is not laid out as measured: {exc}") from None
            hidden = {str(i): [list(span) for span in spans] for i, spans in seen.hidden.items()}
            page_html = self._evaluate(browser, session, f"({VISIBLE_HTML_JS})({json.dumps(hidden)})", left())
            return RenderedPage(pdf, page_html, seen.words, seen.hidden_words, dict(sorted(seen.illegible.items())))
        finally:
            if browser.alive:
                try:
                    browser.call("Target.closeTarget", {"targetId": target}, timeout=5.0)
                except BrowserError:
                    browser.kill()

    @staticmethod
    def _evaluate(browser: BrowserPipe, session: str, expression: str, timeout: float, *, wait: bool = False):
        params = {"expression": expression, "returnByValue": True, "awaitPromise": wait,
                  "timeout": max(1, int(timeout * 1000))}
        result = browser.call("Runtime.evaluate", params, session=session, timeout=timeout)
        if "exceptionDetails" in result:
            details = result["exceptionDetails"]
            raise BrowserError("script raised: " + str(details.get("exception", {}).get("description")
                                                       or details.get("text", "error"))[:300])
        return result.get("result", {}).get("value")

    def close(self) -> None:
        if self._browser is not None:
            self._browser.close()
            self._browser = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

