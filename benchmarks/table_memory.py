"""Time and peak memory of table parsing on hostile span-heavy pages of 1 KB to 2 MB.

Issue 10: a 1.2 MB table with ``rowspan``/``colspan`` grew one scorer worker to 23 GB; 12 KB took
3.5 GB and 29 s. For every pattern of ``tests/test_bench_tables.py`` (``rowcol``: the issue's
table; ``triangle``: rowspans over all rows below; ``headers``: wide distinct headers;
``backwards``: negative colspans; ``markdown``: one wide row above many short ones) and every
size, a fresh process measures (wall seconds, peak RSS):

- ``bench``: the ``table`` test on the page (:func:`olmpipe.bench.run_tests`: parse + check), as a
  scorer worker runs it;
- ``before``: the table parser of git revision ``--before`` (default ``HEAD``, the parser without
  the cell budget) on the same page, under an address-space limit (``--before-limit-mb``) and a
  time limit (``--before-timeout``), only up to ``--before-max-size`` bytes (it grows without bound);
- ``rect``: the ``rect_tables`` and ``element_count`` rewards on the page (they run in the
  training process).

    python benchmarks/table_memory.py                          # 5 patterns x 1K 16K 256K 2M
    python benchmarks/table_memory.py --patterns rowcol --sizes 1000 2000000 --json out.json

Peak RSS includes the interpreter and imports (~30-60 MB).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_helper(name: str):
    """The test module ``tests/<name>.py``, loaded by its path (for its page generator only)."""
    spec = importlib.util.spec_from_file_location(f"_olmpipe_tests_{name}", REPO / "tests" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _module_at(revision: str, path: str, name: str):
    """``path`` as it was at git ``revision``, imported as module ``name``."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{revision}:{path}"], check=True,
                            capture_output=True, text=True).stdout
    folder = Path(tempfile.mkdtemp(prefix="olmpipe-bench-"))
    (folder / f"{name}.py").write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, folder / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def measure_one(kind: str, pattern: str, size: int, revision: str) -> dict:
    """Run one measurement in this (fresh) process; the outcome names what the page gave."""
    tables = test_helper("test_bench_tables")
    page = tables.span_heavy_page(pattern, size)
    if kind == "before":
        old = _module_at(revision, "olmpipe/bench/tables.py", "_tables_before")
    start = time.perf_counter()
    if kind == "bench":
        from olmpipe.bench import run_tests

        (verdict,) = run_tests(page, tables.TABLE_TEST)
        outcome = "passed" if verdict.passed else "failed"
        if "TableTooLarge" in verdict.reason:
            outcome = "failed: over budget"
    elif kind == "before":
        try:
            found = old.parse_markdown_tables(page) + old.parse_html_tables(page)
            outcome = f"{sum(t.n_rows * t.n_cols for t in found):,} cells"
        except MemoryError:
            outcome = "MemoryError"
    else:
        from olmpipe.rewards import element_count_reward, rect_tables_reward

        rect = rect_tables_reward(completions=[page])[0]
        count = element_count_reward(completions=[page], reference=["x"])[0]
        outcome = f"rect {rect:g}, count {count:g}"
    seconds = time.perf_counter() - start
    return {"seconds": seconds, "peak_mb": _peak_kb() / 1024,
            "outcome": outcome}


def run_child(kind: str, pattern: str, size: int, args: argparse.Namespace) -> dict:
    """:func:`measure_one` in a fresh process (``before``: under the address-space and time limits)."""
    limit = args.before_limit_mb * 2**20 if kind == "before" else None

    def limit_memory() -> None:
        if limit is not None:
            resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    cmd = [sys.executable, __file__, "--one", kind, pattern, str(size), "--before", args.before]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    timeout = args.before_timeout if kind == "before" else 600
    try:
        done = subprocess.run(cmd, check=False, capture_output=True, text=True, env=env, timeout=timeout,
                              preexec_fn=limit_memory)
    except subprocess.TimeoutExpired:
        return {"seconds": float(timeout), "peak_mb": float("nan"), "outcome": f"> {timeout:g} s (killed)"}
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["?"])[-1]
        return {"seconds": float("nan"), "peak_mb": float("nan"), "outcome": last[:40]}
    return json.loads(done.stdout.splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--patterns", nargs="+", default=["rowcol", "triangle", "headers", "backwards", "markdown"])
    parser.add_argument("--sizes", nargs="+", type=int, default=[1_000, 16_000, 256_000, 2_000_000])
    parser.add_argument("--before", default="HEAD", help="git revision of the parser to compare with")
    parser.add_argument("--before-max-size", type=int, default=16_000)
    parser.add_argument("--before-limit-mb", type=int, default=3072)
    parser.add_argument("--before-timeout", type=float, default=30.0)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--one", nargs=3, metavar=("KIND", "PATTERN", "SIZE"), help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.one:
        kind, pattern, size = args.one
        sys.stdout.write(json.dumps(measure_one(kind, pattern, int(size), args.before)) + "\n")
        return 0

    rows = []
    header = (f"{'pattern':<10} {'size':>9} | {'bench s':>7} {'MB':>6} {'outcome':<22} | {'before s':>8} {'MB':>6} "
              f"{'outcome':<22} | {'rect s':>6} {'MB':>6}")
    sys.stdout.write(header + "\n" + "-" * len(header) + "\n")
    for pattern in args.patterns:
        for size in args.sizes:
            row = {"pattern": pattern, "size": size}
            for kind in ("bench", "before", "rect"):
                if kind == "before" and size > args.before_max_size:
                    row[kind] = {"seconds": float("nan"), "peak_mb": float("nan"), "outcome": "(not run)"}
                else:
                    row[kind] = run_child(kind, pattern, size, args)
            rows.append(row)
            b, o, r = row["bench"], row["before"], row["rect"]
            sys.stdout.write(f"{pattern:<10} {size:>9,} | {b['seconds']:>7.2f} {b['peak_mb']:>6.0f} {b['outcome']:<22} | "
                             f"{o['seconds']:>8.2f} {o['peak_mb']:>6.0f} {o['outcome']:<22} | "
                             f"{r['seconds']:>6.2f} {r['peak_mb']:>6.0f}\n")
            sys.stdout.flush()
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def _peak_kb() -> int:
    """This process's peak RSS in kB (VmHWM; ru_maxrss of a forked child includes its parent's)."""
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
