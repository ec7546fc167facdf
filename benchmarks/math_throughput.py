"""Math reward throughput: ms per completion of the math tests for GRPO-sized batches.

Completions are the ``parity-dev`` variants of the sample's 3 math pages (real olmocr outputs and
their mutations). To look like GRPO samples, every completion is made distinct: about a third of
its equations get a small seeded edit (a space, a dropped, doubled or changed character), so a
batch has many new equations, as a policy sampling at temperature 1 produces. Batches:

- ``1x28``: 28 completions of one page (one GRPO group);
- ``8x28``: one GRPO step, 8 groups (the 3 math pages cycled, each group with its own edits).

Each completion runs all of its page's math tests (``check_math``). Rows, on 1 and 2 processes:

- ``cold``: empty cache folder, browsers already started (start-up is printed apart);
- ``warm``: the same batch again in the same processes (memory cache);
- ``disk``: the same batch in new processes that share the now-filled cache folder (next epoch,
  another GRPO rank).

The baseline, measured in the same run on the first ``--baseline-completions`` completions of the
``1x28`` batch (it needs seconds per completion), is the reference's structure
(olmocr 0.4.27 ``katex/render.py``): Playwright driving the same Chromium, a new browser context
and page per equation with KaTeX loaded into it, only successful renders cached, MathML re-parsed
for every comparison, equations rendered one by one in similarity order until one matches::

    python benchmarks/math_throughput.py                    # all rows + baseline
    python benchmarks/math_throughput.py --no-baseline --json out.json

Targets (issue 2, this 2-core machine): <= 100 ms per completion cold, <= 10 ms warm.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from olmpipe.bench.katex import KatexRenderer
from olmpipe.bench.mathtest import check_math, equations_in

GROUP = 28
PAGES_PER_STEP = 8

# ---------------------------------------------------------------------------------------- data


def _edit(equation: str, rng: random.Random) -> str:
    if not equation:
        return equation
    i = rng.randrange(len(equation))
    kind = rng.randrange(4)
    if kind == 0:
        return equation[:i] + " " + equation[i:]
    if kind == 1:
        return equation[:i] + equation[i + 1:]
    if kind == 2:
        return equation[:i] + equation[i] + equation[i:]
    return equation[:i] + rng.choice("0123456789abcxyz+-=") + equation[i + 1:]


def perturb(text: str, seed: int, share: float = 0.35) -> str:
    """``text`` with about ``share`` of its ``$...$`` / ``\\(...\\)`` equations edited (seeded)."""
    rng = random.Random(seed)
    out = text
    for equation in dict.fromkeys(equations_in(text)):
        if equation and rng.random() < share:
            out = out.replace(equation, _edit(equation, rng), 1)
    return out


def load_pages(parity: Path) -> list[tuple[str, list[str], list[dict]]]:
    """(pdf, variant texts, math tests) of each math page of the parity folder."""
    bench = parity.parent / "olmocr-sample"
    tests = {}
    for path in sorted(bench.glob("*.jsonl")):
        for line in path.read_text(encoding="utf-8").splitlines():
            if line.strip():
                test = json.loads(line)
                tests[test["id"]] = test
    pages: dict[str, tuple[list[str], list[dict]]] = {}
    for line in (parity / "variants.jsonl").read_text(encoding="utf-8").splitlines():
        v = json.loads(line)
        math = [tests[i] for i in v["reward_test_ids"] if tests[i]["type"] == "math"]
        if not math:
            continue
        text = (parity / v["variant_file"]).read_bytes().decode("utf-8")
        pages.setdefault(v["pdf"], ([], math))[0].append(text)
    return [(pdf, texts, math) for pdf, (texts, math) in sorted(pages.items())]


def make_batch(pages, n_pages: int, seed: int) -> list[tuple[str, list[dict]]]:
    """``n_pages`` groups of 28 distinct completions, each with its page's math tests."""
    items = []
    for g in range(n_pages):
        _, texts, tests = pages[g % len(pages)]
        for k in range(GROUP):
            items.append((perturb(texts[k % len(texts)], seed * 100_003 + g * 1009 + k), tests))
    return items


# ---------------------------------------------------------------------------------------- ours


def score_items(items, renderer) -> list[int]:
    """Number of math tests passed per completion."""
    return [sum(check_math(text, t["math"], ignore_dollar_delimited=t.get("ignore_dollar_delimited", False),
                           renderer=renderer)[0] for t in tests) for text, tests in items]


_WORKER: dict = {}


def _worker_init(cache_dir: str) -> None:
    from multiprocessing.util import Finalize

    _WORKER["renderer"] = KatexRenderer(cache_dir).start()
    Finalize(None, _WORKER["renderer"].close, exitpriority=10)  # runs when the pool is closed and joined


def _worker_score(chunk):
    return score_items(chunk, _WORKER["renderer"])


def run_ours(items, processes: int, cache_dir: Path) -> dict:
    """cold / warm / disk ms per completion, start-up seconds, and the verdicts."""
    def timed(fn):
        t0 = time.perf_counter()
        out = fn()
        return (time.perf_counter() - t0) * 1000 / len(items), out

    if processes == 1:
        t0 = time.perf_counter()
        renderer = KatexRenderer(cache_dir).start()
        startup = time.perf_counter() - t0
        cold, verdicts = timed(lambda: score_items(items, renderer))
        warm, again = timed(lambda: score_items(items, renderer))
        renderer.close()
        fresh = KatexRenderer(cache_dir)  # no browser start unless a render misses the disk cache
        disk, third = timed(lambda: score_items(items, fresh))
        fresh.close()
    else:
        ctx = multiprocessing.get_context("spawn")
        chunks = [items[i::processes] for i in range(processes)]

        def pool_run(pool):
            parts = pool.map(_worker_score, chunks, chunksize=1)
            merged = [None] * len(items)
            for i, part in enumerate(parts):
                merged[i::processes] = part
            return merged

        def start_pool():
            pool = ctx.Pool(processes, initializer=_worker_init, initargs=(str(cache_dir),))
            pool.map(_worker_score, [[("$x$", [{"math": "y"}])]] * processes, chunksize=1)  # workers up
            return pool

        def stop_pool(pool):
            pool.close()  # workers exit normally: their renderers close (see _worker_init)
            pool.join()

        t0 = time.perf_counter()
        pool = start_pool()
        startup = time.perf_counter() - t0
        cold, verdicts = timed(lambda: pool_run(pool))
        warm, again = timed(lambda: pool_run(pool))
        stop_pool(pool)
        pool = start_pool()
        disk, third = timed(lambda: pool_run(pool))
        stop_pool(pool)
    assert verdicts == again == third, "verdicts differ between cold, warm and disk runs"
    return {"cold_ms": cold, "warm_ms": warm, "disk_ms": disk, "startup_s": startup, "verdicts": verdicts}


# ---------------------------------------------------------------------------------------- baseline


class ReferenceStyleRenderer:
    """The reference's rendering structure with Playwright: a new context and page per equation."""

    def __init__(self) -> None:
        from playwright.sync_api import sync_playwright

        from olmpipe.bench import katex

        assets = Path(katex.__file__).parent / "katex_assets"
        self.css, self.js = assets / "katex.min.css", assets / "katex.min.js"
        self._pw = sync_playwright().start()
        self.browser = self._pw.chromium.launch(executable_path=shutil.which("chromium"),
                                                args=["--no-sandbox", "--disable-gpu"])
        self.cache: dict[str, tuple] = {}

    def render(self, latex: str):
        if latex in self.cache:
            return self.cache[latex]
        context = self.browser.new_context(viewport={"width": 800, "height": 400})
        page = context.new_page()
        page.set_content('<!DOCTYPE html><html><head><style>body{display:flex;justify-content:center;align-items:center;'
                         'height:100vh;margin:0}#c{padding:0;font-size:24px}</style></head>'
                         '<body><div id="c"></div></body></html>')
        page.add_style_tag(path=str(self.css))
        page.add_script_tag(path=str(self.js))
        page.wait_for_load_state("networkidle")
        result = page.evaluate("""(eq) => {
            const c = document.getElementById('c');
            try { katex.render(eq, c, {displayMode: true, throwOnError: true}); }
            catch (e) { return {e: e.message}; }
            const spans = [];
            for (const s of document.querySelectorAll('span')) {
              if (s.children.length === 0 && /\\S/.test(s.textContent)) {
                const r = s.getBoundingClientRect();
                spans.push([s.textContent.trim(), r.x, r.y, r.width, r.height]);
              }
            }
            const m = document.querySelector('.katex-mathml math');
            return {m: m ? m.outerHTML : '', s: spans};
        }""", latex)
        context.close()
        out = (result.get("m", result.get("e")), [tuple(s) for s in result.get("s", [])], "e" in result)
        if not out[2]:
            self.cache[latex] = out  # the reference caches successful renders only
        return out

    def close(self) -> None:
        self.browser.close()
        self._pw.stop()


def reference_style_check(text: str, math: str, renderer: ReferenceStyleRenderer) -> bool:
    from rapidfuzz import fuzz

    from olmpipe.bench.mathcompare import Layout, equations_match, mathml_inner

    equations = equations_in(text)
    if math in equations:
        return True
    ref_mathml, ref_spans, _ = renderer.render(math)
    for hypothesis in sorted(equations, key=lambda h: -fuzz.ratio(h, math)):
        mathml, spans, _ = renderer.render(hypothesis)
        if equations_match(mathml_inner(ref_mathml), lambda s=ref_spans: Layout.from_spans(s),
                           mathml_inner(mathml), lambda spans=spans: Layout.from_spans(spans)):
            return True
    return False


def run_baseline(items) -> dict:
    renderer = ReferenceStyleRenderer()
    try:
        def timed():
            t0 = time.perf_counter()
            verdicts = [sum(reference_style_check(text, t["math"], renderer) for t in tests) for text, tests in items]
            return (time.perf_counter() - t0) * 1000 / len(items), verdicts
        cold, verdicts = timed()
        warm, again = timed()
    finally:
        renderer.close()
    assert verdicts == again
    return {"cold_ms": cold, "warm_ms": warm, "verdicts": verdicts}


# ---------------------------------------------------------------------------------------- main


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--parity", default=str(REPO.parent / "shared" / "bench" / "parity-dev"))
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--no-baseline", action="store_true", help="skip the reference-style baseline")
    parser.add_argument("--baseline-completions", type=int, default=6,
                        help="completions of the 1x28 batch the baseline scores (each takes seconds)")
    parser.add_argument("--json", help="write the rows here")
    args = parser.parse_args(argv)

    pages = load_pages(Path(args.parity))
    batches = {"1x28": make_batch(pages, 1, args.seed), "8x28": make_batch(pages, PAGES_PER_STEP, args.seed)}
    rows = []
    root = Path(tempfile.mkdtemp(prefix="olmpipe-math-bench-"))
    try:
        n_base = args.baseline_completions
        baseline = None if args.no_baseline else run_baseline(batches["1x28"][:n_base])
        for name, items in batches.items():
            n_eq = len({e for text, _ in items for e in equations_in(text)})
            for processes in args.processes:
                result = run_ours(items, processes, root / f"{name}-{processes}")
                if baseline is not None and name == "1x28":
                    assert result["verdicts"][:n_base] == baseline["verdicts"], "verdicts differ from the baseline"
                rows.append({"batch": name, "completions": len(items), "distinct_equations": n_eq,
                             "processes": processes, **{k: v for k, v in result.items() if k != "verdicts"}})
    finally:
        shutil.rmtree(root, ignore_errors=True)

    head = (f"{'batch':6s} {'n':>4s} {'eqs':>5s} {'proc':>4s} {'cold ms':>8s} {'warm ms':>8s} {'disk ms':>8s} "
            f"{'start s':>7s} {'x cold':>7s} {'x warm':>7s}")
    lines = [head, "-" * len(head)]
    for r in rows:
        ratio_cold = ratio_warm = ""
        if baseline is not None and r["batch"] == "1x28":
            ratio_cold = f"{baseline['cold_ms'] / r['cold_ms']:.0f}x"
            ratio_warm = f"{baseline['warm_ms'] / r['warm_ms']:.0f}x"
        lines.append(f"{r['batch']:6s} {r['completions']:4d} {r['distinct_equations']:5d} {r['processes']:4d} "
                     f"{r['cold_ms']:8.1f} {r['warm_ms']:8.2f} {r['disk_ms']:8.2f} {r['startup_s']:7.2f} "
                     f"{ratio_cold:>7s} {ratio_warm:>7s}")
    if baseline is not None:
        lines.append(f"baseline (reference structure, first {n_base} completions of 1x28, 1 process): "
                     f"cold {baseline['cold_ms']:.0f} ms, warm {baseline['warm_ms']:.0f} ms per completion; "
                     "x = baseline ms / our ms")
    sys.stdout.write("\n".join(lines) + "\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"rows": rows, "baseline": baseline and
                                               {k: v for k, v in baseline.items() if k != "verdicts"}}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
