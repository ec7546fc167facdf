"""The ``math`` test: is the test's LaTeX equation among the page's equations, up to rendering?

Semantics of olmocr 0.4.27 (``olmocr/bench/tests.py::MathTest.run``):

1. The page's equations are the contents of ``\\(...\\)``, then ``\\[...\\]``, then (unless
   ``ignore_dollar_delimited``) ``$$...$$``, then ``$...$``, each found left to right, shortest
   first, at least one character, across lines; every delimiter kind is removed from the text
   before the next kind is searched; each equation is ``strip()``-ed. The page text is *not*
   normalized (math tests see the raw completion).
2. The test passes at once when an equation equals the test's equation exactly.
3. Otherwise it passes when some equation matches after rendering both with KaTeX
   (:mod:`olmpipe.bench.mathcompare`: MathML containment, then layout neighbours). A test
   equation KaTeX rejects matches any page equation (the reference compares with the error's
   empty layout). ``max_diffs`` plays no part (the reference ignores it for math).

What is faster here: equations are found in one linear scan per delimiter (no regex backtracking
on hostile text), pair verdicts are cached (memory and sqlite), every render a test needs is
requested in one browser round trip, and the page's equations are tried most-similar first.
Nothing raises on bad text: a ``deadline`` (a ``time.monotonic()`` value) bounds the whole check,
and running past it gives the verdict ``(False, "timeout")``.

Reasons: ``""`` on a pass; the reference's ``"No match found for <math> anywhere in content"``;
``"timeout"``; ``"page text is <type>, not str"``.

Where the verdict can differ from the reference, by design, only on pathological input: an
equation whose render alone takes longer than the renderer's ``render_timeout`` counts as one
KaTeX rejects; one with more than ``katex.MAX_SPANS`` rendered symbols gets only the MathML check
(the reference's layout search would run for hours); a browser that crashes is restarted (the
reference's test raises, i.e. fails); the layout search has no recursion limit (the reference's
raises for test equations of about a thousand symbols).

Example::

    from olmpipe.bench.katex import KatexRenderer
    with KatexRenderer() as r:
        check_math("Euler: $e^{i\\\\pi} + 1 = 0$", r"e^{i \\pi}+1=0", renderer=r)  # (True, "")
"""

from __future__ import annotations

import time

from rapidfuzz import fuzz

from olmpipe.bench.katex import KatexRenderer, RenderResult, default_renderer
from olmpipe.bench.mathcompare import CompareTimeout, equations_match

TIMEOUT_REASON = "timeout"

# (opening, closing) delimiters in the reference's search order
_BRACKETED = (("\\(", "\\)"), ("\\[", "\\]"))
_DOLLARS = (("$$", "$$"), ("$", "$"))


def make_renderer(**kwargs) -> KatexRenderer:
    """A new renderer owned by the caller (close it when done), its browser already started.

    For worker processes that score many completions: the browser start-up (about a second)
    happens here, outside any completion's time bound. ``kwargs`` go to :class:`KatexRenderer`.
    """
    return KatexRenderer(**kwargs).start()


def _extract(text: str, opening: str, closing: str) -> tuple[list[str], str]:
    """Contents of ``opening(.+?)closing`` (DOTALL) left to right, and the text with them removed.

    Equivalent to ``re.findall`` / ``re.sub`` with that pattern, in linear time: a match starting
    at an opening ends at the first closing that leaves at least one character inside; when no
    such closing exists, none exists for any later opening either, so the scan stops.
    """
    found: list[str] = []
    kept: list[str] = []
    position = 0
    while True:
        start = text.find(opening, position)
        if start < 0:
            break
        inner_start = start + len(opening)
        end = text.find(closing, inner_start + 1)
        if end < 0:
            break
        found.append(text[inner_start:end])
        kept.append(text[position:start])
        position = end + len(closing)
    if not found:
        return found, text
    kept.append(text[position:])
    return found, "".join(kept)


def equations_in(text: str, ignore_dollar_delimited: bool = False) -> list[str]:
    """The page's equations, in the reference's order (see the module docstring), stripped."""
    equations: list[str] = []
    delimiters = _BRACKETED if ignore_dollar_delimited else _BRACKETED + _DOLLARS
    for opening, closing in delimiters:
        found, text = _extract(text, opening, closing)
        equations.extend(e.strip() for e in found)
    return equations


def check_math(text: str, math: str, *, max_diffs: int = 0, ignore_dollar_delimited: bool = False,
               renderer: KatexRenderer | None = None, deadline: float | None = None) -> tuple[bool, str]:
    """The verdict of one math test on one page text: ``(passed, reason)``; ``reason`` is empty on a pass.

    ``renderer`` defaults to the process's :func:`~olmpipe.bench.katex.default_renderer`.
    ``deadline`` is an absolute ``time.monotonic()`` time; past it the verdict is a failure with
    reason ``"timeout"``. ``max_diffs`` is accepted for a uniform test interface and ignored,
    as in the reference. Raises only when no browser can be started at all
    (:class:`~olmpipe.bench.mathbrowser.BrowserNotFoundError` names how to install one).
    """
    del max_diffs  # the reference's math test has no fuzzy matching
    if not isinstance(text, str):
        return False, f"page text is {type(text).__name__}, not str"
    not_found = (False, f"No match found for {math} anywhere in content")
    equations = equations_in(text, ignore_dollar_delimited)
    if not equations:
        return not_found
    if math in equations:
        return True, ""
    if deadline is not None and time.monotonic() >= deadline:
        return False, TIMEOUT_REASON
    renderer = renderer if renderer is not None else default_renderer()

    # most similar first (the reference's order: it stops at the first match)
    hypotheses = list(dict.fromkeys(equations))
    hypotheses.sort(key=lambda h: -fuzz.ratio(h, math))
    known = renderer.cached_verdicts(math, hypotheses)
    if any(known.values()):
        return True, ""
    todo = [h for h in hypotheses if h not in known]
    if not todo:
        return not_found

    timeout = None if deadline is None else max(0.0, deadline - time.monotonic())
    renders = renderer.render_many([math, *todo], timeout=timeout)
    reference, page_renders = renders[0], renders[1:]
    if reference.transient:
        return False, TIMEOUT_REASON
    verdicts: dict[str, bool] = {}
    timed_out = False
    try:
        for hypothesis in page_renders:
            if hypothesis.transient or (deadline is not None and time.monotonic() >= deadline):
                timed_out = True
                break
            matched = _match(reference, hypothesis, deadline)
            verdicts[hypothesis.latex] = matched
            if matched:
                return True, ""
    except CompareTimeout:
        timed_out = True
    finally:
        renderer.store_verdicts(math, verdicts)
    return (False, TIMEOUT_REASON) if timed_out else not_found


def _match(reference: RenderResult, hypothesis: RenderResult, deadline: float | None) -> bool:
    """One pair, with the reference's two checks; a truncated render gets only the MathML check."""
    if reference.inner in hypothesis.inner:
        return True
    if reference.truncated or hypothesis.truncated:
        return False
    return equations_match(reference.inner, lambda: _layout(reference, deadline), hypothesis.inner,
                           lambda: _layout(hypothesis, deadline), deadline)


def _layout(render: RenderResult, deadline: float | None):
    """The render's layout, memoized on the result unless building it ran out of time."""
    if "layout" in render.__dict__:
        return render.layout
    from olmpipe.bench.mathcompare import Layout

    layout = Layout.from_spans(render.spans, deadline)
    render.__dict__["layout"] = layout  # same slot functools.cached_property uses
    return layout
