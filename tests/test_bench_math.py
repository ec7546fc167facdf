"""Tests of the math test engine: equation extraction, the comparison rules, the cache, the renderer.

The browser-free tests pin the pieces that must equal the reference exactly (the delimiter
scan against the reference's regular expressions; the neighbour rules against a direct
transcription of the reference's loops). Tests marked ``browser`` drive headless Chromium.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import signal
import time
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.browser import NEEDS_CHROMIUM

from olmpipe.bench import mathcompare
from olmpipe.bench.katex import TIMEOUT_ERROR, KatexRenderer, RenderResult, render_problems
from olmpipe.bench.mathbrowser import BrowserNotFoundError
from olmpipe.bench.mathcache import MathCache, cache_key, default_cache_dir
from olmpipe.bench.mathtest import check_math, equations_in

# ----------------------------------------------------------------------------- equation extraction


def _reference_equations(content: str, ignore_dollar_delimited: bool = False) -> list[str]:
    """The reference's regex loop (olmocr 0.4.27 MathTest.run), as the oracle."""
    patterns = [r"\\\((.+?)\\\)", r"\\\[(.+?)\\\]"]
    if not ignore_dollar_delimited:
        patterns += [r"\$\$(.+?)\$\$", r"\$(.+?)\$"]
    equations = []
    for pattern in patterns:
        equations.extend(e.strip() for e in re.findall(pattern, content, re.DOTALL))
        content = re.sub(pattern, "", content, flags=re.DOTALL)
    return equations


@settings(max_examples=400, deadline=None)
@given(st.text(alphabet="$\\()[]ab \n", max_size=40), st.booleans())
def test_equations_in_equals_reference_regexes(text, ignore_dollars):
    assert equations_in(text, ignore_dollars) == _reference_equations(text, ignore_dollars)


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=60))
def test_equations_in_never_raises(text):
    assert equations_in(text) == _reference_equations(text)


def test_equations_in_order_and_removal():
    text = r"a $x$ and \(y\) then $$z$$ and \[w\] $$ $ lone"
    assert equations_in(text) == ["y", "w", "z", "x", "$"] == _reference_equations(text)
    assert equations_in(text, ignore_dollar_delimited=True) == ["y", "w"]


def test_equations_in_is_linear_on_unclosed_delimiters():
    start = time.monotonic()
    assert equations_in("\\(" * 200_000 + "$" + "\\[" * 200_000) == []
    assert time.monotonic() - start < 5.0  # the regex takes minutes here


# ----------------------------------------------------------------------------- comparison rules
def _reference_neighbours(spans, tol=5):
    """Direct transcription of the reference's compute_neighbors on expanded boxes."""
    boxes = []
    for text, x, y, w, h in spans:
        if text == "\u200b":
            continue
        for i, c in enumerate(text):
            boxes.append((c, x + (w * i) / len(text), y, w / len(text), h))
    out = []
    for i, (_, x, y, w, h) in enumerate(boxes):
        cx, cy = x + w / 2, y + h / 2
        best = [None] * 4
        dist = [None] * 4
        for j, (_, ox, oy, ow, oh) in enumerate(boxes):
            if i == j:
                continue
            ocx, ocy = ox + ow / 2, oy + oh / 2
            for d, cond, dd in ((0, ocy < cy and abs(ocx - cx) <= tol, cy - ocy),
                                (1, ocy > cy and abs(ocx - cx) <= tol, ocy - cy),
                                (2, ocx < cx and abs(ocy - cy) <= tol, cx - ocx),
                                (3, ocx > cx and abs(ocy - cy) <= tol, ocx - cx)):
                if cond and (best[d] is None or dd < dist[d]):
                    best[d], dist[d] = j, dd
        out.append([-1 if b is None else b for b in best])
    return [b[0] for b in boxes], out


def _reference_match(ref_spans, hyp_spans):
    """Direct transcription of the reference's recursive assignment search."""
    ref_chars, ref_nb = _reference_neighbours(ref_spans)
    hyp_chars, hyp_nb = _reference_neighbours(hyp_spans)
    cands = [[j for j, c in enumerate(hyp_chars) if c == rc] for rc in ref_chars]
    if any(not c for c in cands):
        return False
    used = [False] * len(hyp_chars)
    assignment = {}

    def backtrack(i):
        if i == len(ref_chars):
            return True
        for cand in cands[i]:
            if used[cand]:
                continue
            assignment[i] = cand
            used[cand] = True
            ok = True
            for d in range(4):
                hn, rn = ref_nb[i][d], hyp_nb[cand][d]
                if hn < 0:
                    continue
                if rn < 0 or (hn in assignment and assignment[hn] != rn) or (
                        hn not in assignment and hyp_chars[rn] != ref_chars[hn]):
                    ok = False
                    break
            if ok and backtrack(i + 1):
                return True
            used[cand] = False
            del assignment[i]
        return False

    return backtrack(0)


_grid = st.integers(min_value=0, max_value=6).map(lambda v: v * 4.5)
_span = st.tuples(st.sampled_from(["a", "b", "ab", "=", "\u200b", "ba"]), _grid, _grid,
                  st.sampled_from([4.0, 8.0, 9.5]), st.sampled_from([10.0, 12.0]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_span, max_size=6))
def test_neighbours_equal_reference(spans):
    layout = mathcompare.Layout.from_spans(spans)
    chars, neighbours = _reference_neighbours(spans)
    assert list(layout.chars) == chars
    assert layout.neighbours.tolist() == neighbours


@settings(max_examples=300, deadline=None)
@given(st.lists(_span, max_size=4), st.lists(_span, max_size=6))
def test_layout_match_equals_reference(ref, hyp):
    got = mathcompare.layouts_match(mathcompare.Layout.from_spans(ref), mathcompare.Layout.from_spans(hyp))
    assert got == _reference_match(ref, hyp)


def test_mathml_inner_drops_annotation_and_whitespace():
    mathml = ('<math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><mrow><mi>x</mi> <mo>+</mo>'
              '</mrow><annotation encoding="application/x-tex">x +</annotation></semantics></math>')
    assert mathcompare.mathml_inner(mathml) == "<mrow><mi>x</mi><mo>+</mo></mrow>"
    # a render error's "MathML" is its message: the reference's parser turns it into the bare
    # XML declaration, which is contained in every other error's
    assert mathcompare.mathml_inner("KaTeX parse error: x") == '<?xmlversion="1.0"encoding="utf-8"?>'


_PLAIN_CASES = [
    ('<math xmlns="http://www.w3.org/1998/Math/MathML" display="block"><semantics><mrow><mspace width="1em">'
     '</mspace><mtext> </mtext><mo mathvariant="normal" lspace="0em" rspace="0em">x</mo></mrow>tail'
     '<annotation encoding="application/x-tex">x &amp; &lt;</annotation>after</semantics></math>'),
    ('<math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><mrow><mo>&gt;</mo><mtext>a&nbsp;b</mtext>'
     '<mi>&amp;</mi></mrow></semantics></math>'),
    '<math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><mi z="1" a="2">></mi></semantics></math>',
    '<math xmlns="http://www.w3.org/1998/Math/MathML"><mrow><mi>x</mi></mrow></math>',
    '<math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><m:mi xmlns:m="urn:x">x</m:mi></semantics></math>',
    '<math xmlns="http://www.w3.org/1998/Math/MathML"><semantics><!-- c --><mi>x</mi></semantics></math>',
    "KaTeX parse error: Expected '}', got 'EOF' at end of input: \\frac{", "err \x00 \x01", "err \ud800",
    "a < b", "", "<mi>unclosed",
]


@pytest.mark.parametrize("mathml", _PLAIN_CASES)
def test_fast_mathml_inner_equals_beautifulsoup(mathml):
    assert mathcompare.mathml_inner(mathml) == mathcompare._soup_inner(mathml)


def test_layout_search_respects_deadline():
    # isolated a's first, then an "ab" pair the hypothesis lacks: the search tries every
    # assignment of the isolated a's before failing (exponential), unless the deadline stops it
    diagonal = [("a", 100.0 * i, 100.0 * i, 10.0, 10.0) for i in range(40)]
    ref = diagonal[:8] + [("ab", -500.0, -500.0, 20.0, 10.0)]
    hyp = diagonal + [("b", -900.0, 900.0, 10.0, 10.0)]
    with pytest.raises(mathcompare.CompareTimeout):
        mathcompare.layouts_match(mathcompare.Layout.from_spans(ref), mathcompare.Layout.from_spans(hyp),
                                  deadline=time.monotonic() - 1)


# ----------------------------------------------------------------------------- check_math without rendering
class _NoRenderer:
    """Fails the test if check_math asks for a render when it should not need one."""

    def __getattr__(self, name):
        raise AssertionError(f"renderer.{name} used")


def test_exact_match_and_no_equation_need_no_browser():
    assert check_math("see $a^2$ here", "a^2", renderer=_NoRenderer()) == (True, "")
    passed, reason = check_math("no math at all", "a^2", renderer=_NoRenderer())
    assert not passed and reason == "No match found for a^2 anywhere in content"
    assert check_math("$a^2$", "a^2", ignore_dollar_delimited=True, renderer=_NoRenderer())[0] is False
    assert check_math(r"\( a^2 \)", "a^2", ignore_dollar_delimited=True, renderer=_NoRenderer()) == (True, "")


def test_deadline_in_the_past_times_out_without_rendering():
    assert check_math("$b$", "a", renderer=_NoRenderer(), deadline=time.monotonic() - 1) == (False, "timeout")


# ----------------------------------------------------------------------------- cache
def test_cache_location_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv("OLMPIPE_CACHE_DIR", str(tmp_path / "c"))
    assert default_cache_dir() == tmp_path / "c"
    renderer = KatexRenderer()
    assert renderer.cache.path.parent == tmp_path / "c" / "math"
    assert renderer.cache.path.name.startswith("katex-0.16.21")


def test_cache_key_accepts_lone_surrogates_and_nul():
    assert cache_key("a\ud800", "b\x00") != cache_key("a", "b")


def _write_verdicts(path, start):
    cache = MathCache(path)
    for i in range(50):
        cache.put_verdicts([(f"k{(start + i) % 60}", i % 2 == 0)])
    cache.close()


def test_cache_is_shared_by_processes(tmp_path):
    path = tmp_path / "m.sqlite3"
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_verdicts, args=(path, s)) for s in (0, 30)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    assert len(MathCache(path).get_verdicts([f"k{i}" for i in range(60)])) == 60


def test_cache_keeps_newest_rows(tmp_path, monkeypatch):
    monkeypatch.setattr("olmpipe.bench.mathcache._PRUNE_EVERY", 10)
    cache = MathCache(tmp_path / "m.sqlite3", max_renders=5)
    for i in range(30):
        cache.put_renders([(f"k{i}", f'{{"n": {i}}}')])
    kept = cache.get_renders([f"k{i}" for i in range(30)])
    assert "k29" in kept and kept["k29"] == '{"n": 29}' and len(kept) <= 5 + 10


def test_unusable_cache_is_skipped(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    cache = MathCache(blocker / "x.sqlite3")
    cache.put_verdicts([("k", True)])
    assert cache.get_verdicts(["k"]) == {}


def test_missing_browser_is_a_clear_error(tmp_path):
    renderer = KatexRenderer(tmp_path, executable="/nonexistent/chromium")
    with pytest.raises(BrowserNotFoundError, match="apt-get install chromium"):
        renderer.render("x")


@NEEDS_CHROMIUM[0]
@NEEDS_CHROMIUM[1]
@pytest.mark.parametrize("tmpdir_length", ["short", "long"])
def test_browser_starts_leave_nothing_in_the_temporary_folder(tmp_path, monkeypatch, tmpdir_length):
    """Chromium's own org.chromium.Chromium.* folder goes with the profile, on close and on kill;
    a TMPDIR too long for Chromium's socket path (pytest's own) still starts the browser."""
    import shutil
    import tempfile

    from olmpipe.bench.mathbrowser import BrowserPipe

    if tmpdir_length == "short":
        system_tmp = Path(tempfile.mkdtemp(prefix="olmt-", dir="/tmp"))
    else:
        system_tmp = tmp_path / ("x" * 40)
        system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setattr(tempfile, "tempdir", str(system_tmp))
    try:
        with KatexRenderer(tmp_path / "cache") as r:
            assert r.render("x^2").ok
            browser_tmp = r._browser.tmp_dir
            (singleton,) = browser_tmp.iterdir()
            assert singleton.name.startswith("org.chromium.Chromium.")
            assert (browser_tmp.parent == system_tmp) == (tmpdir_length == "short")
        assert not browser_tmp.exists() and list(system_tmp.iterdir()) == []
        browser = BrowserPipe.launch()
        browser.evaluate(browser.open_page(width=100, height=100), "1 + 1", timeout=10.0)
        browser.kill()
        assert not browser.tmp_dir.exists() and list(system_tmp.iterdir()) == []
    finally:
        shutil.rmtree(system_tmp, ignore_errors=True)


# ----------------------------------------------------------------------------- renderer (browser)
@pytest.fixture(scope="module")
def renderer(tmp_path_factory):
    with KatexRenderer(tmp_path_factory.mktemp("katex-cache")) as r:
        yield r


@NEEDS_CHROMIUM[0]
@NEEDS_CHROMIUM[1]
class TestRenderer:
    def test_render_many_in_order_with_errors(self, renderer):
        results = renderer.render_many(["x^2", r"\notacommand", "x^2", r"\frac{a}{b}"])
        assert [r.latex for r in results] == ["x^2", r"\notacommand", "x^2", r"\frac{a}{b}"]
        assert results[0].ok and "<msup>" in results[0].inner
        assert not results[1].ok and "Undefined control sequence" in results[1].error
        assert [s[0] for s in results[0].spans] == ["x", "2"]
        assert renderer.render_ok(r"\frac{a}{b}") == (True, None)
        assert dict(render_problems(["a", r"\frac{"], renderer))[r"\frac{"].startswith("KaTeX parse error")

    def test_errors_and_renders_come_from_disk_cache(self, renderer):
        renderer.render_many(["y_1", r"\badthing"])
        with KatexRenderer(renderer.cache.path.parent.parent) as second:
            again = second.render_many(["y_1", r"\badthing"])
            assert second.stats["disk_hits"] == 2 and second.stats["browser_starts"] == 0
        assert again[0].spans == renderer.render("y_1").spans
        assert again[1].error == renderer.render(r"\badthing").error

    def test_layout_matches_reference_semantics(self, renderer):
        # same symbols, different spelling: MathML differs, layout neighbours agree
        assert check_math(r"$\frac{a}{b}$", r"{a \over b}", renderer=renderer) == (True, "")
        assert check_math("$a^{2}+b^{2}=c^{2}$", "a^2 + b^2 = c^2", renderer=renderer) == (True, "")
        assert check_math("$a^{3}+b^{2}=c^{2}$", "a^2 + b^2 = c^2", renderer=renderer)[0] is False
        # a test equation KaTeX rejects matches any equation (the reference's empty layout)
        assert check_math("$z$", r"\undefinedmacro", renderer=renderer) == (True, "")

    def test_pair_verdicts_are_cached(self, renderer):
        text = r"$\alpha + \beta$ and $\gamma$"
        check_math(text, r"\alpha+\beta", renderer=renderer)
        renders = renderer.stats["renders"]
        assert check_math(text, r"\alpha+\beta", renderer=renderer) == (True, "")
        assert check_math(text, r"\delta", renderer=renderer)[0] is False
        assert check_math(text, r"\delta", renderer=renderer)[0] is False
        assert renderer.stats["renders"] == renders + 1  # only \delta itself was new

    def test_transient_timeout_is_not_cached(self, tmp_path):
        with KatexRenderer(tmp_path) as r:
            r.start()
            assert r.render("q^{9}", timeout=0.0).transient
            assert r.render("q^{9}").ok

    def test_slow_equation_becomes_an_error_and_browser_survives(self, tmp_path):
        with KatexRenderer(tmp_path, render_timeout=0.3) as r:
            slow = "x+" * 150_000
            results = r.render_many(["a", slow, "b"])
            assert results[0].ok and results[2].ok
            assert results[1].error == TIMEOUT_ERROR and not results[1].transient
            assert r.render("c^2").ok

    def test_killed_browser_is_restarted(self, tmp_path):
        with KatexRenderer(tmp_path) as r:
            r.render("k_1")
            os.killpg(r._browser.pid, signal.SIGKILL)
            assert r.render("k_2").ok
            assert r.stats["browser_starts"] == 2

    def test_fast_mathml_inner_on_katex_output(self, renderer):
        """The lxml shortcut equals BeautifulSoup's serialization on real KaTeX output."""
        equations = [r"\text{a b}", "a > b", "a < b", r"a \& b", r"\mathrm{x}\,\;\quad y", r"g'",
                     r"\begin{pmatrix}1&2\\3&4\end{pmatrix}", r"\href{http://x}{y}", r"\operatorname{Ann}",
                     r"\left(\frac{a}{b}\right)", r"x\mathbin{\#}y", "\\text{é}", r"\mathbb{R}^{n}",
                     r"\overbrace{a+b}^{c}", r"\color{red}{x}", r"\phantom{x}", r"\sqrt[3]{x}", r"\not=",
                     r"\cancel{x}", r"\'a", r"\text{<tag>}", r"\verb|&<>|", r"\mathop{x}", r"\badmacro",
                     r"\int_{a}^{b} f(x) d x=F(b)-F(a)", r"\sum_{i=1}^{k}\left[\zeta_{n}^{\psi(g s)}\right]"]
        for result in renderer.render_many(equations):
            assert mathcompare.mathml_inner(result.mathml) == mathcompare._soup_inner(result.mathml), result.latex

    def test_result_round_trips_through_json(self, renderer):
        result = renderer.render(r"\sqrt{x}")
        again = RenderResult.from_json(result.latex, result.to_json())
        assert again.mathml == result.mathml and again.spans == result.spans
