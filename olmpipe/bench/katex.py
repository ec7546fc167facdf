"""A long-lived KaTeX renderer: one headless Chromium page, a persistent cache, a time bound per render.

The reference (olmocr 0.4.27, ``olmocr/bench/katex/render.py``) opens a new browser context and
page for every equation, loads KaTeX into it, renders, reads the leaf spans' boxes and the
MathML, and closes it again (about 0.1-0.5 s per equation). Here one page is set up once, exactly
as the reference's (800x400 viewport, the same HTML and styles, KaTeX's CSS inline), and all the
equations of a call are rendered in one JavaScript call: each into the same container, measured,
then replaced by the next. The boxes are those of a fresh page because nothing else in the page
changes. KaTeX's fonts are not loaded, like the reference's (its CSS is injected into an
``about:blank`` page, so the relative font URLs never resolve): the layout uses the system's
fallback serif font, and the layout check depends on it.

Renders and errors are cached in sqlite (:mod:`olmpipe.bench.mathcache`) and in memory. A call
has an overall ``timeout``; a single equation that keeps the browser busy for more than
``render_timeout`` seconds on its own is recorded as an error ("render timed out"); a browser that
stops answering is killed and started again on the next call.

Example::

    with KatexRenderer() as renderer:
        ok, error = renderer.render_ok(r"\\frac{a}{b}")
        results = renderer.render_many([r"x^2", r"\\badmacro"], timeout=10.0)
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass
from functools import cached_property
from importlib import resources
from pathlib import Path
from typing import Self

from olmpipe.bench.mathbrowser import BrowserError, BrowserNotFoundError, BrowserPipe, BrowserTimeout
from olmpipe.bench.mathcache import MathCache, cache_key, default_cache_dir
from olmpipe.bench.mathcompare import Layout, mathml_inner

log = logging.getLogger(__name__)

#: The KaTeX release shipped in ``katex_assets`` (from npm, ``katex@0.16.21``): olmocr 0.4.27's.
KATEX_VERSION = "0.16.21"
#: Bump when what is stored per render changes (the cache file name and keys include it).
RENDER_FORMAT = "3"
#: Leaf spans kept per equation; beyond this the layout check is not attempted (see RenderResult).
MAX_SPANS = 20_000
#: Characters of equations sent to the browser in one JavaScript call.
BATCH_CHARS = 200_000
TIMEOUT_ERROR = "render timed out"

__all__ = ["KATEX_VERSION", "BrowserNotFoundError", "KatexRenderer", "RenderResult", "default_renderer",
           "render_problems"]

# The reference's page: a flex box centring the container in an 800x400 viewport, 24 px font.
_PAGE_HTML = """<!DOCTYPE html>
<html>
<head>
<style>
body { display: flex; justify-content: center; align-items: center; height: 100vh; margin: 0;
       background-color: white; color: black; }
#equation-container { padding: 0; font-size: 24px; }
</style>
</head>
<body><div id="equation-container"></div></body>
</html>"""

# Renders each equation into the container, then records the leaf spans that hold non-space text
# (trimmed text and client rect, as the reference) and the <math> element's markup. Progress is
# kept in window.__olmState so that a call stopped by the time limit still returns its results.
_RENDER_JS = """
window.__olmRender = function (list, maxSpans) {
  const state = {out: [], current: -1, started: 0};
  window.__olmState = state;
  const container = document.getElementById('equation-container');
  for (let k = 0; k < list.length; k++) {
    state.current = k;
    state.started = performance.now();
    let error = null;
    try {
      katex.render(list[k], container, {displayMode: true, throwOnError: true});
    } catch (e) {
      error = (e && typeof e.message === 'string') ? e.message : String(e);
    }
    if (error !== null) {
      container.textContent = '';
      state.out.push({e: error});
      continue;
    }
    const spans = [];
    let truncated = false;
    for (const span of document.querySelectorAll('span')) {
      if (span.children.length === 0 && /\\S/.test(span.textContent)) {
        if (spans.length >= maxSpans) { truncated = true; break; }
        const r = span.getBoundingClientRect();
        spans.push([span.textContent.trim(), r.x, r.y, r.width, r.height]);
      }
    }
    const math = document.querySelector('.katex-mathml math');
    state.out.push({m: math ? math.outerHTML : '', s: spans, t: truncated});
    container.textContent = '';
  }
  state.current = list.length;
  return state.out;
};
window.__olmPartial = function () {
  const s = window.__olmState || {out: [], current: 0, started: 0};
  return {out: s.out, current: s.current, elapsed: performance.now() - s.started};
};
true;
"""


@dataclass(frozen=True)
class RenderResult:
    """One equation as KaTeX renders it in the reference's page.

    ``mathml`` is KaTeX's ``<math>`` markup, or the error message when KaTeX rejected the equation
    (``error`` set, no spans), exactly what the reference compares. ``spans`` are ``(text, x, y, width,
    height)`` of the leaf spans. ``truncated`` marks a render with more than ``MAX_SPANS`` spans
    (only the MathML check is done for it). ``transient`` marks a result that is not an answer
    about the equation (the call ran out of time, the browser died): it is never cached.
    """

    latex: str
    mathml: str
    spans: tuple[tuple[str, float, float, float, float], ...]
    error: str | None = None
    truncated: bool = False
    transient: bool = False

    @property
    def ok(self) -> bool:
        return self.error is None

    @cached_property
    def inner(self) -> str:
        """The normalized MathML of :func:`olmpipe.bench.mathcompare.mathml_inner` (parsed on first use:
        it costs about a millisecond, and most pairs are decided from the cache without it)."""
        return mathml_inner(self.mathml)

    @cached_property
    def layout(self) -> Layout:
        """Per-character boxes and neighbours, built on first use (see mathcompare)."""
        return Layout.from_spans(self.spans)

    def to_json(self) -> str:
        return json.dumps({"m": self.mathml, "s": self.spans, "e": self.error,
                           "t": self.truncated}, ensure_ascii=True)

    @classmethod
    def from_json(cls, latex: str, payload: str) -> RenderResult:
        d = json.loads(payload)
        return cls(latex, d["m"], tuple(tuple(s) for s in d["s"]), d["e"], d["t"])

    @classmethod
    def failed(cls, latex: str, error: str, *, transient: bool) -> RenderResult:
        return cls(latex, error, (), error, False, transient)


class KatexRenderer:
    """KaTeX in one headless Chromium page, with a persistent render cache.

    ``cache_dir``: folder of the sqlite cache (default :func:`default_cache_dir`); ``False``
    keeps the cache in memory only. ``render_timeout`` bounds one equation's render;
    ``memory_renders`` / ``memory_verdicts`` bound the in-memory caches (a render with its layout
    takes a few kB, a verdict a few hundred bytes). The browser starts on the first render that
    misses the cache, so a fully cached workload never starts one. Thread-safe (one lock
    serializes the calls); a forked child starts a browser of its own.
    """

    def __init__(self, cache_dir: str | os.PathLike | None | bool = None, *, executable: str | None = None,
                 render_timeout: float = 10.0, start_timeout: float = 60.0, memory_renders: int = 5_000,
                 memory_verdicts: int = 200_000) -> None:
        if cache_dir is False:
            path = None
        else:
            folder = default_cache_dir() if cache_dir in (None, True) else Path(cache_dir)
            path = folder / "math" / f"katex-{KATEX_VERSION}-v{RENDER_FORMAT}.sqlite3"
        self.cache = MathCache(path)
        self.executable = executable
        self.render_timeout = render_timeout
        self.start_timeout = start_timeout
        self._memory: OrderedDict[str, RenderResult] = OrderedDict()
        self._verdicts: OrderedDict[str, bool] = OrderedDict()
        self._memory_renders = memory_renders
        self._memory_verdicts = memory_verdicts
        self._browser: BrowserPipe | None = None
        self._session: str | None = None
        self._lock = threading.RLock()
        self.stats = {"renders": 0, "memory_hits": 0, "disk_hits": 0, "browser_starts": 0, "browser_kills": 0}

    # ------------------------------------------------------------------ browser lifecycle
    def start(self) -> Self:
        """Start the browser now (else it starts on the first render the cache cannot answer)."""
        with self._lock:
            self._page()
        return self

    def _page(self) -> tuple[BrowserPipe, str]:
        if self._browser is not None and self._browser.alive:
            return self._browser, self._session
        if self._browser is not None:
            self._browser.kill()  # dead, or inherited through fork
        browser = BrowserPipe.launch(self.executable, timeout=self.start_timeout)
        try:
            session = browser.open_page(width=800, height=400, timeout=self.start_timeout)
            assets = resources.files("olmpipe.bench.katex_assets")
            css = assets.joinpath("katex.min.css").read_text(encoding="utf-8")
            script = assets.joinpath("katex.min.js").read_text(encoding="utf-8")
            setup = (f"document.open(); document.write({json.dumps(_PAGE_HTML)}); document.close();"
                     f"const style = document.createElement('style'); style.textContent = {json.dumps(css)};"
                     "document.head.appendChild(style); true;")
            browser.evaluate(session, setup, timeout=self.start_timeout)
            browser.evaluate(session, script + "\n;true;", timeout=self.start_timeout)
            browser.evaluate(session, _RENDER_JS, timeout=self.start_timeout)
            if browser.evaluate(session, "typeof katex !== 'undefined' && katex.version",
                                timeout=self.start_timeout) != KATEX_VERSION:
                raise BrowserError("KaTeX did not load in the page")
        except BaseException:
            browser.kill()
            raise
        self._browser, self._session = browser, session
        self.stats["browser_starts"] += 1
        return browser, session

    def close(self) -> None:
        """Quit the browser and close the cache (the renderer can be used again: it restarts)."""
        with self._lock:
            if self._browser is not None:
                self._browser.close()
                self._browser = None
            self.cache.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # ------------------------------------------------------------------ rendering
    @staticmethod
    def render_key(latex: str) -> str:
        return cache_key("render", KATEX_VERSION, RENDER_FORMAT, latex)

    @staticmethod
    def _remember(store: OrderedDict, key: str, value, limit: int) -> None:
        store[key] = value
        store.move_to_end(key)
        while len(store) > limit:
            store.popitem(last=False)

    def render_many(self, latex_list: list[str], timeout: float | None = None) -> list[RenderResult]:
        """Render every equation (cache first, the misses in one browser call); one result each, in order.

        ``timeout`` (seconds) bounds the whole call: equations not rendered in time come back as
        ``transient`` failures with error ``"render timed out"``. Raises
        :class:`BrowserNotFoundError` / :class:`BrowserError` only when no browser can be started.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        with self._lock:
            unique = list(dict.fromkeys(latex_list))
            keys = {latex: self.render_key(latex) for latex in unique}
            found: dict[str, RenderResult] = {}
            for latex in unique:
                hit = self._memory.get(keys[latex])
                if hit is not None:
                    self._memory.move_to_end(keys[latex])
                    found[latex] = hit
                    self.stats["memory_hits"] += 1
            missing = [latex for latex in unique if latex not in found]
            if missing:
                stored = self.cache.get_renders([keys[latex] for latex in missing])
                for latex in missing:
                    payload = stored.get(keys[latex])
                    if payload is not None:
                        found[latex] = RenderResult.from_json(latex, payload)
                        self._remember(self._memory, keys[latex], found[latex], self._memory_renders)
                        self.stats["disk_hits"] += 1
                missing = [latex for latex in missing if latex not in found]
            if missing:
                fresh = self._render_missing(missing, deadline)
                self.cache.put_renders((keys[r.latex], r.to_json()) for r in fresh if not r.transient)
                for result in fresh:
                    found[result.latex] = result
                    if not result.transient:
                        self._remember(self._memory, keys[result.latex], result, self._memory_renders)
            return [found[latex] for latex in latex_list]

    def render(self, latex: str, timeout: float | None = None) -> RenderResult:
        return self.render_many([latex], timeout=timeout)[0]

    def render_ok(self, latex: str, timeout: float | None = None) -> tuple[bool, str | None]:
        """Whether KaTeX accepts ``latex`` (for validating tests); the error message if not."""
        result = self.render(latex, timeout=timeout)
        return result.ok, result.error

    def _render_missing(self, todo: list[str], deadline: float | None) -> list[RenderResult]:
        """Render in batches; isolate an equation that stalls or crashes the browser, record it as an error."""
        results: list[RenderResult] = []
        pending = list(todo)
        alone = False  # after a failed batch, render one at a time until the culprit is found
        crashed_once: set[str] = set()
        while pending:
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0.05:
                results.extend(RenderResult.failed(x, TIMEOUT_ERROR, transient=True) for x in pending)
                break
            batch = pending[:1] if alone else _take_batch(pending)
            if self._browser is None or not self._browser.alive:
                # starting the browser is not the equations' fault: it does not use up their time
                started = time.monotonic()
                self._page()
                if deadline is not None:
                    deadline += time.monotonic() - started
                    remaining = deadline - time.monotonic()
            # 5% of the remaining time is kept for reading back what was done and comparing it
            limit = self.render_timeout if remaining is None else min(self.render_timeout, 0.95 * remaining)
            done, outcome = self._render_batch(batch, limit)
            results.extend(done)
            pending = pending[len(done):]
            if outcome == "ok":
                alone = False
                continue
            culprit = pending[0]
            single = alone or len(batch) == len(done) + 1
            error = None
            if outcome == "slow_alone" or (outcome in ("slow", "hung") and single
                                           and limit >= self.render_timeout):
                error = TIMEOUT_ERROR
            elif outcome == "crashed" and single:
                if culprit in crashed_once:
                    error = "render crashed the browser"
                crashed_once.add(culprit)
            if error is None:
                alone = True
                continue
            log.warning("KaTeX render of a %d-character equation failed: %s", len(culprit), error)
            results.append(RenderResult.failed(culprit, error, transient=False))
            pending = pending[1:]
            alone = False
        return results

    def _render_batch(self, batch: list[str], limit: float) -> tuple[list[RenderResult], str]:
        """One browser call: the results done, and how it ended: ``ok``; ``slow`` / ``slow_alone``
        (JavaScript stopped at the time limit; ``_alone``: the equation it stopped at had been
        running for ``render_timeout`` by itself); ``hung`` (no answer: the browser was killed);
        ``crashed`` (the browser died or failed)."""
        browser, session = self._page()
        expression = f"window.__olmRender({json.dumps(batch, ensure_ascii=True)}, {MAX_SPANS})"
        outcome = "ok"
        try:
            raw = browser.evaluate(session, expression, timeout=limit)
        except BrowserError as exc:
            raw, elapsed = self._partial(browser, session)
            if elapsed is not None:
                outcome = "slow_alone" if elapsed >= 0.99 * self.render_timeout else "slow"
            else:
                outcome = "hung" if isinstance(exc, BrowserTimeout) else "crashed"
                log.warning("browser failed while rendering (%s); restarting it", exc)
        self.stats["renders"] += len(raw)
        return [self._result(latex, item) for latex, item in zip(batch, raw)], outcome

    def _partial(self, browser: BrowserPipe, session: str) -> tuple[list, float | None]:
        """After a call was stopped: what it finished and how long it spent on the next one
        (seconds), or ([], None) when the browser is gone (it is then killed)."""
        if browser.alive:
            try:
                state = browser.evaluate(session, "window.__olmPartial()", timeout=5.0)
                return state["out"], state["elapsed"] / 1000.0
            except BrowserError:
                pass
        self._kill()
        return [], None

    def _kill(self) -> None:
        if self._browser is not None:
            self._browser.kill()
            self._browser = None
            self.stats["browser_kills"] += 1

    @staticmethod
    def _result(latex: str, item: dict) -> RenderResult:
        if "e" in item:
            return RenderResult.failed(latex, item["e"], transient=False)
        spans = tuple((s[0], float(s[1]), float(s[2]), float(s[3]), float(s[4])) for s in item["s"])
        return RenderResult(latex, item["m"], spans, None, bool(item["t"]))

    # ------------------------------------------------------------------ pair verdicts
    def pair_key(self, reference: str, hypothesis: str) -> str:
        from olmpipe.bench.mathcompare import COMPARE_VERSION

        return cache_key("pair", KATEX_VERSION, RENDER_FORMAT, str(COMPARE_VERSION), reference, hypothesis)

    def cached_verdicts(self, reference: str, hypotheses: list[str]) -> dict[str, bool]:
        """Known verdicts of (reference, hypothesis) pairs, from memory then disk."""
        with self._lock:
            keys = {h: self.pair_key(reference, h) for h in hypotheses}
            known = {h: self._verdicts[k] for h, k in keys.items() if k in self._verdicts}
            rest = [h for h in hypotheses if h not in known]
            if rest:
                stored = self.cache.get_verdicts([keys[h] for h in rest])
                for h in rest:
                    if keys[h] in stored:
                        known[h] = stored[keys[h]]
                        self._remember(self._verdicts, keys[h], known[h], self._memory_verdicts)
            return known

    def store_verdicts(self, reference: str, verdicts: dict[str, bool]) -> None:
        """Remember definite pair verdicts (memory and disk)."""
        with self._lock:
            rows = [(self.pair_key(reference, h), v) for h, v in verdicts.items()]
            for key, value in rows:
                self._remember(self._verdicts, key, value, self._memory_verdicts)
            self.cache.put_verdicts(rows)


def _take_batch(pending: list[str]) -> list[str]:
    """The longest prefix of ``pending`` within ``BATCH_CHARS`` characters (at least one equation)."""
    total = 0
    for count, latex in enumerate(pending):
        total += len(latex)
        if count and total > BATCH_CHARS:
            return pending[:count]
    return list(pending)


def render_problems(equations: list[str], renderer: KatexRenderer | None = None,
                    timeout: float | None = None) -> list[tuple[str, str | None]]:
    """``(equation, KaTeX's error or None)`` for each equation: what ``validate`` reports.

    Uses ``renderer`` when given, else a temporary one (with the persistent cache) closed after.
    """
    own = renderer is None
    renderer = KatexRenderer() if own else renderer
    try:
        return [(r.latex, r.error) for r in renderer.render_many(list(equations), timeout=timeout)]
    finally:
        if own:
            renderer.close()


def default_renderer() -> KatexRenderer:
    """The calling process's shared renderer: created on first use, closed at interpreter exit.

    This is the one piece of per-process state of the math tests (a browser is expensive to start,
    so every test in a process should reuse it). A forked child gets a renderer of its own.
    Prefer passing an explicit :class:`KatexRenderer` where the caller can own one.
    """
    pid = os.getpid()
    with _DEFAULT_LOCK:
        renderer = _DEFAULT.get(pid)
        if renderer is None:
            _DEFAULT.clear()  # entries of a parent process
            renderer = _DEFAULT[pid] = KatexRenderer()
            atexit.register(renderer.close)
        return renderer


_DEFAULT: dict[int, KatexRenderer] = {}
_DEFAULT_LOCK = threading.Lock()
