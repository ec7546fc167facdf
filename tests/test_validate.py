"""Tests of olmpipe.validate.stage: every bad-input case gives its message; error/drop; coverage; page index."""

from __future__ import annotations

import errno
import json
import os
import shutil
from pathlib import Path

import pytest
from benchdata import make_blank_pdf, make_corrupt_pdf, make_small_bench, sample_records, write_jsonl

from olmpipe.config import validate_config
from olmpipe.rasterize import rasterize_bench
from olmpipe.validate.split import eval_count, split_pdfs
from olmpipe.validate.stage import OutputError, ValidationFailed, check_pdf_field, main, run_validate

GOOD = {"pdf": "earnings.pdf", "page": 1, "type": "present", "text": "Earnings"}


@pytest.fixture
def bench(tmp_path):
    """A small bench (3 PDFs, 5 pages, all tested) rasterized at 32 px."""
    root = make_small_bench(tmp_path / "bench")
    rasterize_bench(root, tmp_path / "rasterize", longest_side=32, on_error="skip")
    return root


def _cfg(bench: Path, eval_dir=None, **validate) -> dict:
    return validate_config({
        "bench": {"dir": str(bench), "eval_dir": str(eval_dir) if eval_dir else None},
        "validate": {"check_math": False, **validate},
    })


def _run(bench: Path, tmp_path: Path, eval_dir=None, math_checker=None, **validate):
    out = tmp_path / "validate"
    result = run_validate(
        _cfg(bench, eval_dir, **validate), manifest_path=tmp_path / "rasterize" / "manifest.jsonl",
        tests_dir=out / "tests", report_path=out / "report.json", pages_path=out / "pages.jsonl",
        math_checker=math_checker,
    )
    return result, out


def _reasons(result) -> list[str]:
    return [str(p) for p in result.problems]


def test_the_small_bench_is_valid(bench, tmp_path):
    result, out = _run(bench, tmp_path)
    assert result.problems == []
    records = sample_records()
    assert result.counts["tests_read"] == result.counts["tests_valid"] == len(records)
    # validated tests keep their original lines (ids preserved, fields not normalized)
    assert (out / "tests" / "dataset.jsonl").read_text() == (bench / "dataset.jsonl").read_text()
    pages = [json.loads(line) for line in (out / "pages.jsonl").read_text().splitlines()]
    assert sorted((p["pdf"], p["page"]) for p in pages) == sorted(
        [("mattsnotes.pdf", 1), ("mattsnotes.pdf", 2), ("mattsnotes.pdf", 3), ("earnings.pdf", 1),
         ("headers_footers/ff1fc6a205ad039139ce566851b6b260c929_pg1.pdf", 1)])
    for page in pages:
        assert Path(page["image"]).is_file() and page["split"] in ("train", "eval")
        assert set(page["test_ids"]) == set(page["jsonl_files"]) == set(page["types"])
        assert page["bench_dir"] == str(bench)
    by_pdf = {}
    for page in pages:
        by_pdf.setdefault(page["pdf"], set()).add(page["split"])
    assert all(len(sides) == 1 for sides in by_pdf.values())  # whole PDFs per side
    assert {s for sides in by_pdf.values() for s in sides} == {"train", "eval"}
    report = json.loads((out / "report.json").read_text())
    assert report["ok"] is True and report["problems"] == []


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({**GOOD, "id": "up", "pdf": "../bench/pdfs/earnings.pdf"}, "leaves pdfs/ ('..' is not allowed)"),
        ({**GOOD, "id": "abs", "pdf": "/etc/passwd.pdf"}, "is absolute"),
        ({**GOOD, "id": "gone", "pdf": "missing.pdf"}, "PDF 'missing.pdf' does not exist in"),
        ({**GOOD, "id": "p9", "page": 9}, "page 9 does not exist in 'earnings.pdf' (1 page(s))"),
        ({**GOOD, "id": "odd", "type": "presence"}, "unknown test type 'presence'"),
        ({**GOOD, "id": "empty", "text": "   "}, "field 'text' is empty"),
        ('{"pdf": "earnings.pdf", "page": 1, "id": "broken", "type": "present", "text": "x"', "malformed JSON"),
    ],
    ids=["dotdot", "absolute", "missing-pdf", "missing-page", "unknown-type", "empty-text", "malformed-json"],
)
def test_bad_test_is_reported_with_file_line_and_reason(bench, tmp_path, record, message):
    write_jsonl(bench / "extra.jsonl", [{**GOOD, "id": "fine"}, record])
    with pytest.raises(ValidationFailed) as info:
        _run(bench, tmp_path)
    assert message in str(info.value)
    report = json.loads((tmp_path / "validate" / "report.json").read_text())
    (problem,) = report["problems"]
    assert problem["file"] == str(bench / "extra.jsonl") and problem["line"] == 2
    assert message in problem["reason"]
    if isinstance(record, dict):
        assert problem["test_id"] == record["id"]


def test_duplicate_ids_across_files_fail_even_with_drop_and_keep_neither(bench, tmp_path):
    # a new file sorting before dataset.jsonl must not replace the real test (the first copy used to win)
    first_id = sample_records()[0]["id"]
    write_jsonl(bench / "aaa.jsonl", [{**GOOD, "id": "new"}, {**GOOD, "id": first_id}])
    with pytest.raises(ValidationFailed) as info:
        _run(bench, tmp_path, on_invalid="drop")
    report = json.loads((tmp_path / "validate" / "report.json").read_text())
    located = {(Path(p["file"]).name, p["line"], p["test_id"]) for p in report["problems"]}
    assert located == {("aaa.jsonl", 2, first_id), ("dataset.jsonl", 1, first_id)}
    assert f"duplicate test id (also defined in {bench / 'aaa.jsonl'} line 2)" in str(info.value)
    assert f"duplicate test id (also defined in {bench / 'dataset.jsonl'} line 1)" in str(info.value)
    assert report["counts"]["fatal_problems"] == 2
    kept = [json.loads(x)["id"] for f in ("aaa.jsonl", "dataset.jsonl")
            for x in (tmp_path / "validate" / "tests" / f).read_text().splitlines()]
    assert "new" in kept and first_id not in kept


def test_duplicate_id_within_a_file(bench, tmp_path):
    write_jsonl(bench / "more.jsonl", [{**GOOD, "id": "twice"}, {**GOOD, "id": "twice"}])
    with pytest.raises(ValidationFailed, match="duplicate test id"):
        _run(bench, tmp_path)


def test_drop_writes_the_set_without_bad_tests(bench, tmp_path):
    write_jsonl(bench / "extra.jsonl", [{**GOOD, "id": "ok1"}, {**GOOD, "id": "bad", "page": 4}, "{nope"])
    result, out = _run(bench, tmp_path, on_invalid="drop")
    assert len(result.problems) == 2
    assert [json.loads(x)["id"] for x in (out / "tests" / "extra.jsonl").read_text().splitlines()] == ["ok1"]
    index_ids = {i for line in (out / "pages.jsonl").read_text().splitlines() for i in json.loads(line)["test_ids"]}
    assert "ok1" in index_ids and "bad" not in index_ids
    assert json.loads((out / "report.json").read_text())["counts"]["tests_dropped"] == 2


def test_uncovered_page_is_reported(bench, tmp_path):
    records = [r for r in sample_records() if not (r["pdf"] == "mattsnotes.pdf" and r["page"] == 2)]
    write_jsonl(bench / "dataset.jsonl", records)
    result, _ = _run(bench, tmp_path, on_invalid="drop")
    assert _reasons(result) == [f"{bench}/pdfs/mattsnotes.pdf: page 2 has no valid test (every page must be tested)"]
    assert result.counts["pages"] == 4
    result, _ = _run(bench, tmp_path, require_page_coverage=False)
    assert result.problems == []


def test_tests_of_a_skipped_pdf_are_reported(tmp_path):
    root = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_corrupt_pdf(root / "pdfs" / "broken.pdf")
    write_jsonl(root / "extra.jsonl", [{**GOOD, "id": "on-broken", "pdf": "broken.pdf"}])
    rasterize_bench(root, tmp_path / "rasterize", longest_side=32, on_error="skip")
    result, _ = _run(root, tmp_path, on_invalid="drop")
    (problem,) = result.problems
    assert problem.test_id == "on-broken" and "could not be rasterized: " in problem.reason
    assert "corrupt or unreadable PDF" in problem.reason


def test_math_that_does_not_render_is_reported(bench, tmp_path):
    math = {"pdf": "earnings.pdf", "page": 1, "type": "math"}
    write_jsonl(bench / "math.jsonl", [{**math, "id": "m-ok", "math": "x^2"}, {**math, "id": "m-bad", "math": "\\frac{"}])
    seen = []

    def checker(equations):
        seen.extend(equations)
        return {eq: ("ParseError: Expected '}'" if eq == "\\frac{" else None) for eq in equations}

    result, out = _run(bench, tmp_path, math_checker=checker, check_math=True, on_invalid="drop")
    assert sorted(seen) == ["\\frac{", "x^2"]
    (problem,) = result.problems
    assert problem.test_id == "m-bad" and problem.line == 2
    assert problem.reason == "math does not render with KaTeX: ParseError: Expected '}'"
    assert [json.loads(x)["id"] for x in (out / "tests" / "math.jsonl").read_text().splitlines()] == ["m-ok"]


def test_separate_eval_bench(tmp_path):
    train = make_small_bench(tmp_path / "train", pdfs=("earnings.pdf", "mattsnotes.pdf"))
    evalb = make_small_bench(tmp_path / "eval", pdfs=("headers_footers/ff1fc6a205ad039139ce566851b6b260c929_pg1.pdf",))
    rasterize_bench(train, tmp_path / "r1", longest_side=32, on_error="error")
    rasterize_bench(evalb, tmp_path / "r2", longest_side=32, on_error="error")
    manifest = tmp_path / "rasterize" / "manifest.jsonl"
    manifest.parent.mkdir()
    manifest.write_text((tmp_path / "r1" / "manifest.jsonl").read_text() + (tmp_path / "r2" / "manifest.jsonl").read_text())
    result, out = _run(train, tmp_path, eval_dir=evalb)
    assert result.problems == []
    splits = {(p.bench_dir, p.split) for p in result.pages}
    assert splits == {(str(train), "train"), (str(evalb), "eval")}
    assert (out / "tests" / "eval" / "dataset.jsonl").is_file()


def test_cli_exit_codes(bench, tmp_path, monkeypatch):
    config = tmp_path / "config.yaml"
    config.write_text(f"bench:\n  dir: {bench}\nvalidate:\n  check_math: false\n")
    args = ["--config", str(config), "--manifest", str(tmp_path / "rasterize" / "manifest.jsonl"),
            "--out", str(tmp_path / "v")]
    assert main(args) == 0
    write_jsonl(bench / "extra.jsonl", [{**GOOD, "id": "x", "page": 7}])
    assert main(args) == 1
    assert main([*args, "--on-invalid", "drop"]) == 0


def test_cli_prints_the_trivial_answer_audit_and_writes_it_beside_the_outputs(bench, tmp_path, capsys):
    """`olmpipe validate` ends with the audit (what empty, one-word, front-matter-only ... answers earn
    with the configured rewards, guard off -> on); --no-audit skips it."""
    config = tmp_path / "config.yaml"
    config.write_text(f"bench:\n  dir: {bench}\nvalidate:\n  check_math: false\n")
    args = ["--config", str(config), "--manifest", str(tmp_path / "rasterize" / "manifest.jsonl"),
            "--out", str(tmp_path / "v")]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert out.startswith("Trivial-answer audit: 5 pages") and "one_word" in out and "guard off -> on" in out
    lines = (tmp_path / "v" / "audit.jsonl").read_text().splitlines()
    assert len(lines) == 5 * 8 * 2 and json.loads((tmp_path / "v" / "audit.json").read_text())["pages"] == 5
    (tmp_path / "v" / "audit.json").unlink()
    assert main([*args, "--no-audit"]) == 0
    assert capsys.readouterr().out == "" and not (tmp_path / "v" / "audit.json").exists()


def test_check_pdf_field():
    assert check_pdf_field("a/b.pdf") is None
    assert "backslash" in check_pdf_field("a\\b.pdf")
    assert "not normalized" in check_pdf_field("a//b.pdf")
    assert "does not end in .pdf" in check_pdf_field("a.png")
    assert "is absolute" in check_pdf_field("C:/x.pdf")


def test_split_is_seeded_and_whole_documents():
    pdfs = [f"doc{i}.pdf" for i in range(20)]
    first = split_pdfs(pdfs, eval_fraction=0.3, seed=1)
    assert first == split_pdfs(list(reversed(pdfs)), eval_fraction=0.3, seed=1)
    assert sum(v == "eval" for v in first.values()) == 6
    assert first != split_pdfs(pdfs, eval_fraction=0.3, seed=2)
    grown = split_pdfs([*pdfs, "doc99.pdf"], eval_fraction=0.3, seed=1)
    assert sum(first[p] != grown[p] for p in pdfs) <= 1  # adding a PDF moves at most one other
    assert eval_count(1, 0.5) == 0 and eval_count(3, 1.0) == 3 and eval_count(3, 0.0) == 0
    with pytest.raises(ValueError):
        eval_count(3, 1.5)


def test_blank_pdf_without_tests_fails_coverage(tmp_path):
    root = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_blank_pdf(root / "pdfs" / "blank.pdf", pages=2)
    rasterize_bench(root, tmp_path / "rasterize", longest_side=32, on_error="error")
    with pytest.raises(ValidationFailed) as info:
        _run(root, tmp_path)
    assert "blank.pdf: page 1 has no valid test" in str(info.value)
    assert "blank.pdf: page 2 has no valid test" in str(info.value)


@pytest.mark.browser
def test_math_check_with_real_katex(bench, tmp_path, monkeypatch):
    if not (shutil.which("chromium") or shutil.which("chromium-browser")):
        pytest.skip("headless Chromium is not installed")
    monkeypatch.setenv("OLMPIPE_CACHE_DIR", str(tmp_path / "cache"))
    math = {"pdf": "earnings.pdf", "page": 1, "type": "math"}
    write_jsonl(bench / "math.jsonl", [{**math, "id": "m-ok", "math": "\\frac{a}{b}"},
                                       {**math, "id": "m-bad", "math": "\\frac{a}{"}])
    result, _ = _run(bench, tmp_path, check_math=True, on_invalid="drop")
    (problem,) = result.problems
    assert problem.test_id == "m-bad" and problem.reason.startswith("math does not render with KaTeX: ")


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_a_failed_write_leaves_the_previous_outputs_untouched(bench, tmp_path, monkeypatch):
    _, out = _run(bench, tmp_path)
    before = _snapshot(out)
    assert set(before) == {"tests/dataset.jsonl", "report.json", "pages.jsonl"}
    write_jsonl(bench / "extra.jsonl", [{**GOOD, "id": "extra"}])  # the next run has new outputs

    def read_only(*args, **kwargs):
        raise PermissionError(errno.EACCES, "Permission denied")

    with monkeypatch.context() as m:  # the output folder cannot take the temporary folder
        m.setattr("olmpipe.validate.outputs.tempfile.mkdtemp", read_only)
        with pytest.raises(OutputError, match=f"cannot write the validate outputs in {out}: Permission denied"):
            _run(bench, tmp_path)
    assert _snapshot(out) == before

    real_rename = Path.rename

    def rename(self, target):  # the last move fails: the two done before it are undone
        if Path(target) == out / "pages.jsonl" and self.name == "pages.jsonl" and self.parent != out:
            raise OSError(errno.EROFS, "Read-only file system")
        return real_rename(self, target)

    with monkeypatch.context() as m:
        m.setattr(Path, "rename", rename)
        with pytest.raises(OutputError, match="Read-only file system"):
            _run(bench, tmp_path)
    assert _snapshot(out) == before
    assert sorted(p.name for p in out.iterdir()) == ["pages.jsonl", "report.json", "tests"]  # no temporary left

    if os.geteuid() != 0:  # a really read-only folder (root writes anyway)
        out.chmod(0o555)
        try:
            with pytest.raises(OutputError):
                _run(bench, tmp_path)
        finally:
            out.chmod(0o755)
        assert _snapshot(out) == before

    _run(bench, tmp_path)
    assert set(_snapshot(out)) == {"tests/dataset.jsonl", "tests/extra.jsonl", "report.json", "pages.jsonl"}


def test_cli_missing_bench_folder_and_manifest(tmp_path, caplog):
    config = tmp_path / "config.yaml"
    config.write_text(f"bench:\n  dir: {tmp_path / 'nowhere'}\nvalidate:\n  check_math: false\n  on_invalid: drop\n")
    manifest = tmp_path / "manifest.jsonl"
    args = ["--config", str(config), "--manifest", str(manifest), "--out", str(tmp_path / "v")]
    assert main(args) == 1
    assert f"{manifest}: no rasterize manifest; run `olmpipe rasterize` first" in caplog.text
    manifest.write_text("")
    caplog.clear()
    assert main(args) == 1  # fails even with on_invalid: drop
    assert f"{tmp_path / 'nowhere'}: bench folder does not exist" in caplog.text
    assert "no *.jsonl test files" not in caplog.text


def test_upper_case_pdf_is_named_exactly(tmp_path):
    root = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_blank_pdf(root / "pdfs" / "scans" / "BLANK.PDF")
    page = {"page": 1, "type": "baseline"}
    write_jsonl(root / "extra.jsonl", [{**page, "id": "exact", "pdf": "scans/BLANK.PDF"},
                                       {**page, "id": "lower", "pdf": "scans/BLANK.pdf"}])
    rasterize_bench(root, tmp_path / "rasterize", longest_side=32, on_error="error")
    result, _ = _run(root, tmp_path, on_invalid="drop")
    expected = (f"{root / 'extra.jsonl'}:2: test 'lower': PDF 'scans/BLANK.pdf' does not exist in {root / 'pdfs'} "
                "(the PDF is named 'scans/BLANK.PDF'; the name must match exactly)")
    assert _reasons(result) == [expected]
    (entry,) = [p for p in result.pages if p.pdf != "earnings.pdf"]
    assert (entry.pdf, entry.test_ids) == ("scans/BLANK.PDF", ["exact"])
    assert entry.image == str(tmp_path / "rasterize" / "pages" / "scans" / "BLANK" / "pg1.png")


def test_a_pdf_named_in_another_unicode_normalization_is_named_as_such(tmp_path):
    """Issue 31 item 10: a PDF whose file name is NFD (as macOS writes it: 'e' + U+0301) while the
    tests name it NFC ('\u00e9') was "missing" although a listing of the folder shows the same name.
    The problem says so, with both spellings escaped, and how to fix it; the test's own form matches."""
    import unicodedata

    root = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    nfc, nfd = unicodedata.normalize("NFC", "scans/café.pdf"), unicodedata.normalize("NFD", "scans/café.pdf")
    assert nfc != nfd
    make_blank_pdf(root / "pdfs" / nfd)
    make_blank_pdf(root / "pdfs" / "scans" / "naïve.pdf")  # NFC on disk, NFD in the test
    page = {"page": 1, "type": "baseline"}
    write_jsonl(root / "extra.jsonl", [{**page, "id": "nfc", "pdf": nfc}, {**page, "id": "exact", "pdf": nfd},
                                       {**page, "id": "nfd", "pdf": unicodedata.normalize("NFD", "scans/naïve.pdf")}])
    rasterize_bench(root, tmp_path / "rasterize", longest_side=32, on_error="error")
    result, _ = _run(root, tmp_path, on_invalid="drop")
    first, second = [r for r in _reasons(result) if r.startswith(str(root / "extra.jsonl"))]
    assert first.startswith(f"{root / 'extra.jsonl'}:1: test 'nfc': PDF {nfc!r} does not exist in {root / 'pdfs'} "
                            f"(the PDF's file name is the same in another Unicode normalization: the test writes "
                            f"{nfc!a} (NFC), the file is {nfd!a} (NFD);"), first
    assert "rename the file or write the test's pdf as the file is named" in first, first
    assert ascii(unicodedata.normalize("NFD", "scans/naïve.pdf")) + " (NFD), the file is " in second, second
    (entry,) = [p for p in result.pages if p.pdf != "earnings.pdf"]
    assert (entry.pdf, entry.test_ids) == (nfd, ["exact"])


def test_texts_far_longer_than_olmocr_benchs_are_kept_with_a_warning(bench, tmp_path, caplog):
    """Issue 20 item 10: a present test of 10,000 characters against a 10,000-character answer took
    31 s per completion. The bench's longest texts (olmOCR-Bench's sample) are 245 characters; past
    LONG_TEXT_CHARS a test is kept but named in the report's warnings and the log."""
    from olmpipe.validate.stage import LONG_TEXT_CHARS

    words = " ".join(f"word{i}" for i in range(3000))
    long_present = {**GOOD, "id": "long", "text": words[:10_000]}
    long_order = {"pdf": "earnings.pdf", "page": 1, "id": "order", "type": "order",
                  "before": words[:LONG_TEXT_CHARS + 1], "after": "x" * 20}
    write_jsonl(bench / "extra.jsonl", [{**GOOD, "id": "fine", "text": words[:LONG_TEXT_CHARS]}, long_present,
                                        long_order])
    result, out = _run(bench, tmp_path)
    assert result.problems == [] and result.counts["warnings"] == 2
    report = json.loads((out / "report.json").read_text())
    assert [(w["test_id"], w["line"]) for w in report["warnings"]] == [("long", 2), ("order", 3)]
    assert report["warnings"][0]["reason"].startswith("text is 10,000 characters long; olmOCR-Bench's longest")
    assert "before is 1,001 characters long" in report["warnings"][1]["reason"]
    assert f"{bench / 'extra.jsonl'}:2: test 'long': text is 10,000 characters long" in caplog.text
    assert "long" in (out / "tests" / "extra.jsonl").read_text()  # kept


def test_the_bundled_sample_has_no_text_near_the_warning_threshold():
    """The threshold's source: the longest searched text of olmOCR-Bench's sample data."""
    from olmpipe.bench import load_tests
    from olmpipe.validate.stage import _SEARCHED_FIELDS, LONG_TEXT_CHARS

    tests = load_tests(str(Path(__file__).resolve().parents[1] / "data/bench/olmocr-sample/dataset.jsonl"))
    longest = max(len(getattr(t, f, None) or "") for t in tests for f in _SEARCHED_FIELDS)
    assert longest == 245 and LONG_TEXT_CHARS >= 4 * longest
