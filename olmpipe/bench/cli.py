"""``olmpipe bench``: score olmOCR-Bench folders and check parity with the reference verdicts.

    olmpipe bench score data/bench/olmocr-sample [--candidate olmocr_pipeline] [--json scores.json]
                        [--failed-out failed.jsonl] [--processes 2] [--timeout-s 30]
    olmpipe bench parity ../shared/bench/parity-dev [--json parity.json] [--skip-math]
    python -m olmpipe.bench.cli score DIR

``score`` prints, per candidate folder, the overall score (mean of the per-JSONL scores) with its
bootstrap 95% CI, the per-type and per-JSONL tables, and writes ``--json`` as
``{"candidates": {NAME: {"overall", "by_type", "by_jsonl", "ci95"}}}`` (fractions in [0, 1]).
``parity`` prints every disagreement (test id, file, expected verdict, our reason) and exits 1
when agreement is below the acceptance bar (99.5% overall, 99% per type) or a reward differs.
"""

from __future__ import annotations

import argparse
import logging
import sys

from olmpipe.bench.aggregate import (
    CandidateScore,
    load_bench_dir,
    read_candidate,
    score_candidate,
)
from olmpipe.bench.model import TestLoadError
from olmpipe.layout import BENCH_TESTS_GLOB
from olmpipe.records.files import write_json, write_jsonl
from olmpipe.records.verdicts import write_verdicts

log = logging.getLogger(__name__)

PARITY_OVERALL = 0.995
PARITY_PER_TYPE = 0.99


def _out(line: str = "") -> None:
    sys.stdout.write(line + "\n")


def _print_candidate(name: str, score: CandidateScore) -> None:
    half = (score.ci95[1] - score.ci95[0]) / 2 * 100
    _out(f"{name:20s} : Average Score: {score.overall * 100:0.1f}% \u00b1 {half:0.1f}% "
         f"(95% CI [{score.ci95[0] * 100:0.1f}%, {score.ci95[1] * 100:0.1f}%]; average of per-JSONL scores)")
    _out(f"    {'type':10s} {'pass rate':>9s} {'tests':>6s}")
    for t, rate in score.by_type.items():
        _out(f"    {t:10s} {rate * 100:8.1f}% {score.type_counts[t]:6d}")
    _out(f"    {'JSONL file':30s} {'score':>7s} {'passed':>10s}")
    for f, rate in score.by_jsonl.items():
        passed, total = score.jsonl_counts[f]
        _out(f"    {f:30s} {rate * 100:6.1f}% {passed:>4d}/{total:<5d}")
    _out()


def _progress(total: int, desc: str, enabled: bool):
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="page", disable=not enabled, file=sys.stderr, leave=False)


def cmd_score(args: argparse.Namespace) -> int:
    try:
        bench = load_bench_dir(args.dir, add_baselines=not args.skip_baseline)
    except (FileNotFoundError, TestLoadError) as exc:
        sys.stderr.write(f"olmpipe bench score: {exc}\n")
        return 2
    names = bench.candidates if args.candidate is None else [args.candidate]
    missing = [n for n in names if n not in bench.candidates]
    if missing or not names:
        sys.stderr.write(f"olmpipe bench score: no candidate folder {missing or ''} in {args.dir} "
                         f"(found: {', '.join(bench.candidates) or 'none'})\n")
        return 2
    from olmpipe.bench.scorer import BenchScorer

    scores: dict[str, CandidateScore] = {}
    with BenchScorer(processes=args.processes, timeout_s=args.timeout_s) as scorer:
        for name in names:
            texts = read_candidate(bench.path / name, bench.pdfs)
            without = sorted({t.pdf for t in bench.tests} - {pdf for pdf, _, _ in texts})
            for pdf in without:
                log.warning("candidate %s has no files for %s: its tests fail", name, pdf)
            n_jobs = sum(1 for pdf, page, _ in texts if any(t.pdf == pdf and t.page == page for t in bench.tests))
            with _progress(n_jobs, name, not args.no_progress) as bar:
                scores[name] = score_candidate(bench.tests, texts, scorer=scorer, progress=bar.update,
                                               n_bootstrap=args.bootstrap_samples, seed=args.seed)
    _out(f"{len(bench.tests)} tests on {len(bench.pdfs)} PDFs in {bench.path}")
    _out()
    for name, score in scores.items():
        _print_candidate(name, score)
    if args.json:
        write_json(args.json, {"candidates": {n: s.to_json() for n, s in scores.items()}})
    if args.failed_out:
        write_jsonl(args.failed_out, ({"candidate": name, **v.to_dict()}
                                      for name, score in scores.items() for v in score.verdicts if not v.passed))
    if args.verdicts_out:
        if len(scores) != 1:
            sys.stderr.write("olmpipe bench score: --verdicts-out needs exactly one candidate\n")
            return 2
        (name, score), = scores.items()
        write_verdicts(args.verdicts_out, score.verdicts)
    return 0


def _math_available() -> bool:
    import importlib.util
    import shutil

    return importlib.util.find_spec("olmpipe.bench.mathtest") is not None and shutil.which("chromium") is not None


def cmd_parity(args: argparse.Namespace) -> int:
    from olmpipe.bench.parity import check_parity

    skip = set()
    if args.skip_math or not _math_available():
        skip.add("math")
        if not args.skip_math:
            log.warning("olmpipe.bench.mathtest or chromium unavailable: math pairs skipped")
    report = check_parity(args.dir, bench_dir=args.bench_dir, skip_types=skip)
    for d in report.disagreements:
        _out(f"DISAGREE {d}")
    for m in report.reward_mismatches:
        _out(f"REWARD   {m}")
    _out(f"{'type':10s} {'agree':>6s} {'pairs':>6s} {'agreement':>10s}")
    for t, (agree, total) in sorted(report.by_type.items()):
        _out(f"{t:10s} {agree:6d} {total:6d} {agree / total * 100:9.2f}%")
    total = sum(n for _, n in report.by_type.values())
    _out(f"{'all':10s} {total - len(report.disagreements):6d} {total:6d} {report.agreement * 100:9.2f}%")
    if skip:
        _out(f"skipped types: {', '.join(sorted(skip))}")
    _out(f"completions with a different micro/macro reward: {len(report.reward_mismatches)}")
    if args.json:
        write_json(args.json, report.to_dict())
    ok = (report.agreement >= PARITY_OVERALL and not report.reward_mismatches
          and all(report.type_agreement(t) >= PARITY_PER_TYPE for t in report.by_type))
    return 0 if ok else 1


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="olmpipe bench", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("score", help="score the candidate folders of an olmOCR-Bench folder")
    p.add_argument("dir", help=f"bench folder: pdfs/, {BENCH_TESTS_GLOB}, one folder per candidate")
    p.add_argument("--candidate", help="score only this candidate folder")
    p.add_argument("--json", help="write {'candidates': {name: {overall, by_type, by_jsonl, ci95}}} here")
    p.add_argument("--failed-out", help="write every failed (test, repeat) verdict with its reason (JSONL)")
    p.add_argument("--verdicts-out", help="write every verdict of the (single) candidate (JSONL)")
    p.add_argument("--processes", type=int, default=1, help="worker processes (0: run in this process)")
    p.add_argument("--timeout-s", type=float, default=60.0, help="time bound per page text in seconds")
    p.add_argument("--skip-baseline", action="store_true", help="do not add the automatic baseline tests")
    p.add_argument("--bootstrap-samples", type=int, default=1000, help="bootstrap resamples of the CI")
    p.add_argument("--seed", type=int, default=0, help="seed of the bootstrap")
    p.add_argument("--no-progress", action="store_true", help="hide the progress bar")
    p.set_defaults(func=cmd_score)
    q = sub.add_parser("parity", help="compare verdicts with a parity-dev folder of reference verdicts")
    q.add_argument("dir", nargs="?", default="../shared/bench/parity-dev", help="parity folder")
    q.add_argument("--bench-dir", help="bench folder holding the tests (default: DIR/../olmocr-sample)")
    q.add_argument("--json", help="write the parity report here")
    q.add_argument("--skip-math", action="store_true", help="skip the math pairs (no KaTeX rendering)")
    q.set_defaults(func=cmd_parity)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    return int(args.func(args))


if __name__ == "__main__":
    sys.exit(main())
