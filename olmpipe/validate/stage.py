"""Stage 2: validate a bench's tests, write the validated set and the page index that later stages read.

Every test file (``*.jsonl``) of the bench is loaded with :func:`olmpipe.bench.load_tests`
(schema: known type, known and typed fields, non-empty texts, ``max_diffs`` bounds, malformed
JSON, duplicate ids within a file). This stage adds the checks that need the whole bench:

- duplicate ids across files: every copy is dropped and the stage fails even with
  ``on_invalid: drop`` (a *fatal* problem), because which copy is the real test cannot be told and
  a new file must not silently replace a test of another (olmOCR-Bench keys verdicts by id);
- a bench folder that does not exist (fatal as well);
- ``pdf`` is a relative path that stays inside ``pdfs/`` (no ``..``, not absolute) and exists;
- ``page`` exists in the PDF (page counts come from the rasterize manifest);
- a math test's equation renders with KaTeX (``check_math``);
- every page of every rendered PDF has at least one valid test (``require_page_coverage``).

Tests whose texts are far longer than olmOCR-Bench's own (:data:`LONG_TEXT_CHARS`) are kept but
listed as warnings (``report.json`` ``warnings``, and the log): fuzzy matching costs grow with the
text's length times the page's, and every completion of every training step pays it.

All problems go into one report, each with file, line, test id and reason. With
``on_invalid: error`` any problem fails the stage (:class:`ValidationFailed`); with ``drop`` the
outputs hold only the good tests (fatal problems fail it either way). Outputs (see
docs/architecture.md): ``tests/<file>.jsonl`` (the original lines of the good tests; an eval bench's
files under ``tests/eval/``), ``report.json`` and ``pages.jsonl`` (one line per page with at least
one good test). They are written into a temporary folder beside them and then moved into place,
so a stage that cannot write (read-only folder, full disk) leaves the previous outputs as they were.

Run without Snakemake (after ``python -m olmpipe.rasterize``)::

    python -m olmpipe.validate --manifest results/rasterize/manifest.jsonl --out results/validate

The command then runs the trivial-answer audit of the validated bench (what answers that never read
the page earn with the configured rewards, :mod:`olmpipe.validate.audit`; the workflow's rule
``validate_audit``), writes ``audit.jsonl`` and ``audit.json`` beside the outputs and prints its table.
"""

from __future__ import annotations

import argparse
import logging
import sys
import unicodedata
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from olmpipe.bench.folders import Bench, bench_test_files, benches, clean_dir
from olmpipe.layout import (
    BENCH_TESTS_GLOB,
    MANIFEST,
    VALIDATE_DIR,
    VALIDATE_REPORT,
    audit_outputs,
    stage_config,
    validate_outputs,
)
from olmpipe.records.manifest import PdfManifest, read_merged_manifest
from olmpipe.records.pages import PageEntry
from olmpipe.validate.outputs import OutputError, write_outputs
from olmpipe.validate.result import Problem, ValidationFailed, ValidationResult, problem_key
from olmpipe.validate.split import split_pdfs

logger = logging.getLogger(__name__)

OnInvalid = Literal["error", "drop"]
# equations -> {equation: None if it renders, else the reason}
MathChecker = Callable[[Sequence[str]], Mapping[str, str | None]]


#: Test texts longer than this are reported as warnings. olmOCR-Bench's own sample data (v0.4.27
#: ``olmocr/bench/sample_data``, bundled in data/bench/olmocr-sample) has none longer than 245
#: characters (a ``present`` text; ``order`` 176, math 127, table cells 28), and its miners take
#: sentences or "a few sentences" (``olmocr/bench/miners/mine_long_tiny_text.py:104``). Measured
#: against a 12,000-character answer, a ``present`` test of 1,000 characters takes ~6 ms; of
#: 10,000 characters 3.7 s (the scorer's ``rewards.bench.timeout_s`` bounds it).
LONG_TEXT_CHARS = 1000
#: The fields whose text is fuzzily searched in the answer.
_SEARCHED_FIELDS = ("text", "before", "after", "cell", "appears_before_marker", "appears_after_marker")


def long_text_warnings(file_path: str, test: Any) -> list[Problem]:
    """A warning for each searched text of ``test`` longer than :data:`LONG_TEXT_CHARS`."""
    found = []
    for name in _SEARCHED_FIELDS:
        value = getattr(test, name, None)
        if isinstance(value, str) and len(value) > LONG_TEXT_CHARS:
            found.append(Problem(file_path, test.line, test.id, (
                f"{name} is {len(value):,} characters long; olmOCR-Bench's longest test texts are a few hundred "
                f"(warning above {LONG_TEXT_CHARS:,}): every completion's check costs time in proportion to it "
                "(a 10,000-character present test takes seconds per completion, bounded by rewards.bench.timeout_s)")))
    return found


def check_pdf_field(pdf: str) -> str | None:
    """Why a test's ``pdf`` value is not a safe path inside ``pdfs/``, or None when it is.

    >>> check_pdf_field("../secret.pdf")
    "pdf path '../secret.pdf' leaves pdfs/ ('..' is not allowed)"
    >>> check_pdf_field("headers_footers/x.pdf") is None
    True
    """
    if "\\" in pdf:
        return f"pdf path {pdf!r} contains a backslash; use '/' relative to pdfs/"
    path = PurePosixPath(pdf)
    if path.is_absolute() or (len(pdf) > 1 and pdf[1] == ":"):
        return f"pdf path {pdf!r} is absolute; give it relative to the bench's pdfs/ folder"
    if ".." in path.parts:
        return f"pdf path {pdf!r} leaves pdfs/ ('..' is not allowed)"
    if path.as_posix() != pdf:
        return f"pdf path {pdf!r} is not normalized (write it as {path.as_posix()!r})"
    if path.suffix.lower() != ".pdf":
        return f"pdf path {pdf!r} does not end in .pdf"
    return None


def default_math_checker(equations: Sequence[str]) -> dict[str, str | None]:
    """Render each equation with KaTeX in headless Chromium (:mod:`olmpipe.bench.katex`)."""
    from olmpipe.bench.katex import render_problems

    return dict(render_problems(list(equations)))


@dataclass(frozen=True)
class _Good:
    """A test that passed every check so far, with where it came from and its original line."""

    bench: Bench
    out_name: str  # output file under tests/: "dataset.jsonl" or "eval/dataset.jsonl"
    file_path: str
    test: Any
    raw: str


@dataclass
class _Seen:
    """First occurrence of a test id across all files: (file, line); the ids found more than once
    and the problems that fail the stage whatever ``on_invalid`` says."""

    ids: dict[str, tuple[str, int | None]] = field(default_factory=dict)
    duplicated: set[str] = field(default_factory=set)
    fatal: list[Problem] = field(default_factory=list)


def _read_lines(path: Path) -> list[str]:
    return path.read_bytes().decode("utf-8", errors="replace").split("\n")


_DUPLICATE_HINT = ("ids must be unique across the bench's test files; neither copy is used and the stage "
                   "fails even with validate.on_invalid: drop, since it cannot tell which copy is the real test")


def _unicode_form(name: str) -> str:
    """Which Unicode normalization ``name`` is in (NFC, NFD, both: plain ASCII, or neither)."""
    forms = [form for form in ("NFC", "NFD") if unicodedata.normalize(form, name) == name]
    return " and ".join(forms) or "neither NFC nor NFD"


def _near_name(pdf: str, manifests: Mapping[str, PdfManifest]) -> str:
    """What a missing PDF's name is near among the bench's files: the same name in another Unicode
    normalization (a bench copied from macOS, whose file names are NFD, with NFC tests: the two print
    alike and differ in bytes; PDFs are matched by exact name everywhere) or in another case."""
    folded = unicodedata.normalize("NFC", pdf)
    same = [name for name in manifests if unicodedata.normalize("NFC", name) == folded]
    if same:
        return (f" (the PDF's file name is the same in another Unicode normalization: the test writes {pdf!a} "
                f"({_unicode_form(pdf)}), the file is {same[0]!a} ({_unicode_form(same[0])}); PDFs are matched "
                "by their exact name, so rename the file or write the test's pdf as the file is named, e.g. "
                "`convmv -r -f utf8 -t utf8 --nfc --notest pdfs/` makes every file name NFC)")
    same = [name for name in manifests if name.casefold() == pdf.casefold()]
    return f" (the PDF is named {same[0]!r}; the name must match exactly)" if same else ""


def _test_problems(test, file_path: str, bench_dir: str, manifests: Mapping[str, PdfManifest],
                   seen: _Seen) -> list[Problem]:
    """Cross-file checks of one test that passed the loader (pdf path, page, duplicate id)."""
    found: list[Problem] = []

    def add(reason: str) -> None:
        found.append(Problem(file_path, test.line, test.id, reason))

    first = seen.ids.get(test.id)
    if first is not None:
        seen.duplicated.add(test.id)
        add(f"duplicate test id (also defined in {first[0]} line {first[1]}); {_DUPLICATE_HINT}")
        found.append(Problem(first[0], first[1], test.id,
                             f"duplicate test id (also defined in {file_path} line {test.line}); {_DUPLICATE_HINT}"))
        seen.fatal += found[-2:]
    else:
        seen.ids[test.id] = (file_path, test.line)
    reason = check_pdf_field(test.pdf)
    if reason is not None:
        add(reason)
        return found
    pdf_root = Path(bench_dir) / "pdfs"
    manifest = manifests.get(test.pdf)
    if manifest is None:
        add(f"PDF {test.pdf!r} does not exist in {pdf_root}{_near_name(test.pdf, manifests)}")
    elif not (pdf_root / test.pdf).resolve().is_relative_to(pdf_root.resolve()):
        add(f"PDF {test.pdf!r} resolves outside {pdf_root} (symbolic link)")
    elif manifest.status != "ok":
        add(f"PDF {test.pdf!r} could not be rasterized: {manifest.error}")
    elif not 1 <= test.page <= len(manifest.pages):
        add(f"page {test.page} does not exist in {test.pdf!r} ({len(manifest.pages)} page(s))")
    return found


def validate_benches(
    bench_list: Sequence[Bench],
    manifests: Iterable[PdfManifest],
    *,
    check_math: bool,
    require_page_coverage: bool,
    eval_fraction: float,
    seed: int,
    math_checker: MathChecker | None = None,
) -> ValidationResult:
    """Check every test file of ``bench_list`` against the rendered PDFs and build the page index.

    ``manifests`` are the per-PDF rasterize manifests (``bench_dir`` tells which bench each is
    from). Pure function of its inputs: writing files is :func:`write_outputs`'s job.
    """
    from olmpipe.bench import load_tests

    by_bench: dict[str, dict[str, PdfManifest]] = {b.dir: {} for b in bench_list}
    for m in manifests:
        by_bench.setdefault(clean_dir(m.bench_dir or "."), {})[m.pdf] = m
    problems: list[Problem] = []
    seen = _Seen()
    good: list[_Good] = []
    read = 0
    for bench in bench_list:
        if not Path(bench.dir).is_dir():
            missing = Problem(bench.dir, None, None, "bench folder does not exist (a relative path is read "
                              f"from the working directory, {Path.cwd()})")
            problems.append(missing)
            seen.fatal.append(missing)
            continue
        files = bench_test_files(bench.dir)
        if not files:
            problems.append(Problem(bench.dir, None, None, f"no {BENCH_TESTS_GLOB} test files in the bench folder"))
        for file_path in files:
            name = Path(file_path).name
            out_name = name if bench.role == "main" else f"eval/{name}"
            raw_lines = _read_lines(Path(file_path))
            tests, errors = load_tests(file_path, collect_errors=True)
            read += len(tests) + len(errors)
            problems += [Problem(file_path, e.line, e.test_id, e.reason) for e in errors]
            for test in tests:
                found = _test_problems(test, file_path, bench.dir, by_bench.get(bench.dir, {}), seen)
                if found:
                    problems += found
                else:
                    good.append(_Good(bench, out_name, file_path, test, raw_lines[test.line - 1].strip()))
    if seen.duplicated:
        good = [g for g in good if g.test.id not in seen.duplicated]
    if check_math:
        good = _check_math(good, problems, math_checker or default_math_checker)
    pages = _page_index(bench_list, by_bench, good, problems, require_page_coverage=require_page_coverage,
                        eval_fraction=eval_fraction, seed=seed)
    kept: dict[str, list[str]] = {}
    for bench in bench_list:  # every source file gets an output file, even if all its tests were dropped
        for file_path in bench_test_files(bench.dir):
            kept[Path(file_path).name if bench.role == "main" else f"eval/{Path(file_path).name}"] = []
    for item in good:
        kept[item.out_name].append(item.raw)
    counts = {
        "tests_read": read,
        "tests_valid": len(good),
        "tests_dropped": read - len(good),
        "problems": len(problems),
        "pages": len(pages),
        "pages_train": sum(p.split == "train" for p in pages),
        "pages_eval": sum(p.split == "eval" for p in pages),
    }
    problems = sorted(problems, key=problem_key)
    fatal = sorted(seen.fatal, key=problem_key)
    counts["fatal_problems"] = len(fatal)
    warnings = sorted((w for item in good for w in long_text_warnings(item.file_path, item.test)), key=problem_key)
    counts["warnings"] = len(warnings)
    return ValidationResult(problems=problems, kept=kept, pages=pages, counts=counts, fatal=fatal, warnings=warnings)


def _check_math(good: list[_Good], problems: list[Problem], checker: MathChecker) -> list[_Good]:
    equations = sorted({g.test.math for g in good if g.test.type == "math"})
    if not equations:
        return good
    logger.info("rendering %d math equation(s) with KaTeX", len(equations))
    verdicts = checker(equations)
    kept = []
    for item in good:
        test = item.test
        reason = verdicts.get(test.math) if test.type == "math" else None
        if reason:
            problems.append(Problem(item.file_path, test.line, test.id, f"math does not render with KaTeX: {reason}"))
        else:
            kept.append(item)
    return kept


def _page_index(bench_list, by_bench, good, problems, *, require_page_coverage, eval_fraction, seed):
    tests_on: dict[tuple[str, str, int], list] = {}
    for item in good:
        tests_on.setdefault((item.bench.dir, item.test.pdf, item.test.page), []).append((item.out_name, item.test))
    split_of: dict[tuple[str, str], str] = {}
    for bench in bench_list:
        ok_pdfs = [pdf for pdf, m in by_bench.get(bench.dir, {}).items() if m.status == "ok"]
        if bench.role == "eval":
            split_of.update({(bench.dir, pdf): "eval" for pdf in ok_pdfs})
        elif len(bench_list) > 1:
            split_of.update({(bench.dir, pdf): "train" for pdf in ok_pdfs})
        else:
            split = split_pdfs(ok_pdfs, eval_fraction=eval_fraction, seed=seed)
            split_of.update({(bench.dir, pdf): side for pdf, side in split.items()})
    pages: list[PageEntry] = []
    for bench in bench_list:
        for pdf, manifest in sorted(by_bench.get(bench.dir, {}).items()):
            if manifest.status != "ok":
                continue
            for page in manifest.pages:
                on_page = tests_on.get((bench.dir, pdf, page.page), [])
                if not on_page:
                    if require_page_coverage:
                        problems.append(Problem(f"{bench.dir}/pdfs/{pdf}", None, None,
                                                f"page {page.page} has no valid test (every page must be tested)"))
                    continue
                pages.append(PageEntry(
                    pdf=pdf, page=page.page, image=page.image, split=split_of[(bench.dir, pdf)],
                    bench_dir=bench.dir, test_ids=[t.id for _, t in on_page],
                    jsonl_files={t.id: name for name, t in on_page}, types={t.id: t.type for _, t in on_page},
                ))
    return pages


def summary(result: ValidationResult, *, limit: int | None = None) -> str:
    """Readable summary for the log: counts, then one line per problem (``file:line: test 'id': reason``)."""
    c = result.counts
    lines = [
        (
            f"{c['tests_read']} tests read, {c['tests_valid']} valid, {c['tests_dropped']} dropped; "
            f"{c['problems']} problem(s); {c['pages']} pages in the index "
            f"({c['pages_train']} train, {c['pages_eval']} eval)"
        )
    ]
    shown = result.problems if limit is None else result.problems[:limit]
    lines += [f"  {p}" for p in shown]
    if len(shown) < len(result.problems):
        lines.append(f"  ... and {len(result.problems) - len(shown)} more (see {VALIDATE_REPORT.name})")
    return "\n".join(lines)


def run_validate(
    cfg: Mapping[str, Any],
    *,
    manifest_path: str | Path,
    tests_dir: str | Path,
    report_path: str | Path,
    pages_path: str | Path,
    math_checker: MathChecker | None = None,
) -> ValidationResult:
    """The whole stage from a validated config: check, write outputs, then fail if asked to."""
    vcfg, split_cfg = cfg["validate"], cfg["bench"]["split"]
    result = validate_benches(
        benches(cfg), read_merged_manifest(manifest_path), check_math=vcfg["check_math"],
        require_page_coverage=vcfg["require_page_coverage"], eval_fraction=split_cfg["eval_fraction"],
        seed=split_cfg["seed"], math_checker=math_checker,
    )
    # validate.audit is the audit's (rule validate_audit), not this stage's: the report records the rest,
    # as the workflow's validate rule gets it
    settings = {"bench": cfg["bench"], "validate": {k: v for k, v in vcfg.items() if k != "audit"}}
    write_outputs(result, tests_dir=tests_dir, report_path=report_path, pages_path=pages_path,
                  settings=settings)
    text = summary(result)
    if result.fatal:
        logger.error("validation failed: %s", text)
        raise ValidationFailed(
            f"{len(result.fatal)} problem(s) that no setting lets through (see {VALIDATE_REPORT.name} for all "
            f"{len(result.problems)}):\n" + "\n".join(f"  {p}" for p in result.fatal[:20])
        )
    if result.problems and vcfg["on_invalid"] == "error":
        logger.error("validation failed: %s", text)
        raise ValidationFailed(
            f"{len(result.problems)} problem(s) in the bench tests (validate.on_invalid is 'error'; "
            f"set it to 'drop' to continue without the bad tests):\n{summary(result, limit=20)}"
        )
    (logger.warning if result.problems else logger.info)("validation: %s", text)
    for warning in result.warnings[:20]:
        logger.warning("%s", warning)
    if len(result.warnings) > 20:
        logger.warning("... and %d more warnings (see %s)", len(result.warnings) - 20, report_path)
    return result


def main(argv: list[str] | None = None) -> int:
    """Command line: validate the bench(es) of a config against a rasterize manifest."""
    from olmpipe.config import ConfigError, load_config

    parser = argparse.ArgumentParser(prog="olmpipe validate", description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", help="config YAML (default config/config.yaml)")
    parser.add_argument("--manifest", default=str(MANIFEST), help="default: %(default)s")
    parser.add_argument("--out", default=str(VALIDATE_DIR), help="output folder (default: %(default)s)")
    parser.add_argument("--on-invalid", choices=["error", "drop"], help="overrides validate.on_invalid")
    parser.add_argument("--no-check-math", action="store_true", help="skip the KaTeX render check")
    parser.add_argument("--no-audit", action="store_true", help="skip the trivial-answer audit")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    overrides: dict[str, Any] = {"validate": {}}
    if args.on_invalid:
        overrides["validate"]["on_invalid"] = args.on_invalid
    if args.no_check_math:
        overrides["validate"]["check_math"] = False
    try:
        # the benches the workflow reads (synth.enabled trains on the synthetic bench)
        cfg = stage_config(load_config(args.config, overrides))
    except ConfigError as exc:
        logger.error("%s", exc)
        return 2
    if not Path(args.manifest).is_file():
        logger.error("%s: no rasterize manifest; run `olmpipe rasterize` first (or give --manifest)", args.manifest)
        return 1
    try:
        outputs = validate_outputs(args.out)
        run_validate(cfg, manifest_path=args.manifest, tests_dir=outputs["tests"], report_path=outputs["report"],
                     pages_path=outputs["pages"])
    except (ValidationFailed, OutputError) as exc:
        logger.error("%s", exc)
        return 1
    if not args.no_audit:
        from olmpipe.validate.audit import AuditError, format_audit, run_audit

        audit = audit_outputs(args.out)
        try:
            summary = run_audit(cfg, pages_path=outputs["pages"], tests_dir=outputs["tests"],
                                records_path=audit["records"], summary_path=audit["summary"])
        except AuditError as exc:
            logger.error("trivial-answer audit: %s", exc)
            return 1
        sys.stdout.write(format_audit(summary) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
