"""Hostile page texts for the math test: each gives a verdict with a reason, within its deadline.

Huge completions, repetition loops, NUL bytes, lone surrogates, equations KaTeX rejects or needs
seconds for: ``check_math`` must neither raise nor hang (the verdict is a failure with a reason,
``"timeout"`` when the deadline passed).
"""

from __future__ import annotations

import time

import pytest
from support.browser import NEEDS_CHROMIUM

from olmpipe.bench.katex import KatexRenderer
from olmpipe.bench.mathtest import check_math

pytestmark = NEEDS_CHROMIUM

MATH = r"e^{i \pi}+1=0"
BUDGET = 5.0  # seconds per check; generous for a loaded 2-core machine
SLACK = 2.0  # reading back and comparing after the last render may run a little past it

HOSTILE = {
    "1 MB of prose": "word " * 200_000,
    "1 MB equation": "$" + "x+" * 500_000 + "$",
    "10,000-fold repetition": "$e^{i\\pi}+2=0$ and the same again\n" * 10_000,
    "unclosed delimiters": "\\(" * 200_000 + "\\[" * 100_000 + "$",
    "NUL bytes": "$a\x00b$ text\x00 $e^{i\\pi}\x00+1=0$",
    "lone surrogates": "$a\ud800b$ $\udfff$ \ud83d",
    "rejected by KaTeX": "$\\frac{$ $\\badmacro{x}$ $\\begin{foo}$ $}$ $^^$",
    "deep nesting": "$" + "{" * 20_000 + "x" + "}" * 20_000 + "$",
    "macro bomb": "$\\def\\a{xxxxxxxxxx}\\def\\b{\\a\\a\\a\\a\\a\\a\\a\\a\\a\\a}\\def\\c{\\b\\b\\b\\b\\b\\b\\b\\b\\b\\b}\\c\\c\\c$",
    "thousands of equations": " ".join(f"$x_{{{i}}}+y^{{{i}}}$" for i in range(4000)),
}


@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    with KatexRenderer(tmp_path_factory.mktemp("hostile-cache"), render_timeout=4.0) as r:
        r.start()
        yield r


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_text_gives_a_verdict_in_time(renderer, name):
    start = time.monotonic()
    passed, reason = check_math(HOSTILE[name], MATH, renderer=renderer, deadline=start + BUDGET)
    elapsed = time.monotonic() - start
    assert passed is False and reason
    assert elapsed < BUDGET + SLACK, f"{name}: {elapsed:.1f} s"
    assert renderer.render("x^2").ok  # the browser is still usable


def test_hostile_test_equation(renderer):
    """A test equation KaTeX rejects: the reference matches it with any page equation."""
    assert check_math("$x$", "\\frac{", renderer=renderer) == (True, "")
    assert check_math("no equation", "\\frac{", renderer=renderer)[0] is False
    assert check_math("$x$", "a\x00\ud800", renderer=renderer, deadline=time.monotonic() + BUDGET)[1] in ("", "timeout")


def test_match_survives_hostile_neighbours(renderer):
    text = "\x00\ud800 $$\\badmacro$$ " + "$\\frac{$ " * 50 + " $e^{i\\pi} + 1 = 0$"
    assert check_math(text, MATH, renderer=renderer, deadline=time.monotonic() + BUDGET) == (True, "")
