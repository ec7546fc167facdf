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
import logging
import re
import time
from importlib import resources
from pathlib import Path
from typing import Self

import pypdfium2 as pdfium
from bs4 import BeautifulSoup

from olmpipe.bench.mathbrowser import BrowserError, BrowserPipe
from olmpipe.records.files import atomic_path

log = logging.getLogger(__name__)

CSP = "default-src 'none'; style-src 'unsafe-inline'; img-src data:; font-src data:; script-src 'none'"
_URL_ATTRS = ("src", "href", "srcset", "poster", "action", "formaction", "background", "data",
              "xlink:href", "ping", "cite", "longdesc", "manifest", "codebase")
_DROP = ("script", "iframe", "frame", "frameset", "object", "embed", "link", "base", "applet",
         "portal", "noscript", "template")
_MATH = re.compile(r"\\\(.+?\\\)|\\\[.+?\\\]|\$\$.+?\$\$", re.DOTALL)
_CSS_URL = re.compile(r"url\(\s*(['\"]?)(?!data:)[^)]*\1\s*\)|@import[^;]*;", re.IGNORECASE)
CSS_PX_PER_PT = 96 / 72

# Typesets every \(...\), \[...\] and $$...$$ found inside one text node; returns how many.
_KATEX_WALK = r"""
(() => {
  const re = /\\\[([\s\S]+?)\\\]|\\\(([\s\S]+?)\\\)|\$\$([\s\S]+?)\$\$/g;
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  const nodes = [];
  while (walker.nextNode()) nodes.push(walker.currentNode);
  let count = 0;
  for (const node of nodes) {
    const text = node.nodeValue;
    re.lastIndex = 0;
    if (!re.test(text)) continue;
    re.lastIndex = 0;
    const span = document.createElement('span');
    let last = 0, m;
    while ((m = re.exec(text))) {
      span.appendChild(document.createTextNode(text.slice(last, m.index)));
      const tex = m[1] ?? m[2] ?? m[3];
      const holder = document.createElement('span');
      holder.innerHTML = katex.renderToString(tex, {displayMode: m[2] === undefined, throwOnError: false});
      span.appendChild(holder);
      last = re.lastIndex;
      count++;
    }
    span.appendChild(document.createTextNode(text.slice(last)));
    node.replaceWith(span);
  }
  return count;
})()
"""


class RenderRefused(ValueError):
    """The page cannot become a one-page PDF (too many pages, nothing printed); the reason says why."""


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
                tag.attrs[attr] = _CSS_URL.sub("none", text)
    for style in soup.find_all("style"):
        style.string = _CSS_URL.sub("none", style.get_text())
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
        clean = sanitize(html)
        needs_math = bool(_MATH.search(clean))
        browser = self._get()
        deadline = time.monotonic() + self.timeout_s

        def left() -> float:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                browser.kill()
                raise BrowserError(f"rendering took more than {self.timeout_s:g} s")
            return remaining

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
            browser.call("Page.enable", session=session, timeout=left())
            frame = browser.call("Page.getFrameTree", session=session, timeout=left())["frameTree"]["frame"]["id"]
            browser.call("Page.setDocumentContent", {"frameId": frame, "html": clean}, session=session, timeout=left())
            if needs_math:
                style = _katex_asset("katex.min.css").replace("\\", "\\\\").replace("`", "\\`").replace("${", "\\${")
                self._evaluate(browser, session, _katex_asset("katex.min.js"), left())
                self._evaluate(browser, session, f"(() => {{ const s = document.createElement('style'); "
                               f"s.textContent = `{style}`; document.head.appendChild(s); }})()", left())
                self._evaluate(browser, session, _KATEX_WALK, left())
            self._evaluate(browser, session, "document.fonts.ready.then(() => true)", left(), wait=True)
            data = browser.call("Page.printToPDF", {
                "paperWidth": width_pt / 72, "paperHeight": height_pt / 72, "marginTop": 0, "marginBottom": 0,
                "marginLeft": 0, "marginRight": 0, "printBackground": True, "preferCSSPageSize": False,
            }, session=session, timeout=left())["data"]
        finally:
            if browser.alive:
                try:
                    browser.call("Target.closeTarget", {"targetId": target}, timeout=5.0)
                except BrowserError:
                    browser.kill()
        pdf = base64.b64decode(data)
        pages = pdf_page_count(pdf)
        if pages != 1:
            raise RenderRefused(f"renders to {pages} PDF pages at {width_pt:g}x{height_pt:g} pt, not one "
                                f"(shorten the page or give a larger page size)")
        return pdf

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

