"""Tests of olmpipe.rasterize: page sizes, manifests, bad PDFs (error and skip), merge, CLI."""

from __future__ import annotations

import json
import math

import pytest
from benchdata import (
    SAMPLE,
    make_blank_pdf,
    make_corrupt_pdf,
    make_encrypted_pdf,
    make_small_bench,
    make_zero_page_pdf,
)
from hypothesis import given
from hypothesis import strategies as st
from PIL import Image

from olmpipe.rasterize import (
    PdfJob,
    RasterizeError,
    main,
    merge_manifests,
    rasterize_pdf,
    rasterize_pdfs,
    scale_for,
)
from olmpipe.records.manifest import PDF_MANIFEST_NAME as MANIFEST_NAME
from olmpipe.records.manifest import read_manifest, read_merged_manifest


def test_renders_every_page_at_the_longest_side(tmp_path):
    out = tmp_path / "mattsnotes"
    manifest = rasterize_pdf(SAMPLE / "pdfs" / "mattsnotes.pdf", out, pdf_id="mattsnotes.pdf", longest_side=97)
    assert manifest.status == "ok" and manifest.error is None
    assert [p.page for p in manifest.pages] == [1, 2, 3]
    for page in manifest.pages:
        with Image.open(page.image) as image:
            assert image.mode == "RGB"
            assert image.size == (page.width, page.height)
        assert max(page.width, page.height) == 97
        assert page.width_pt == pytest.approx(612.0) and page.rotation == 0
    assert manifest.sha256 and len(manifest.sha256) == 64
    assert read_manifest(out) == manifest  # manifest.json round-trips


def test_landscape_and_portrait_pages_keep_their_aspect(tmp_path):
    pdf = make_blank_pdf(tmp_path / "wide.pdf", pages=1, size=(400, 100))
    manifest = rasterize_pdf(pdf, tmp_path / "wide", pdf_id="wide.pdf", longest_side=200)
    page = manifest.pages[0]
    assert (page.width, page.height) == (200, 50)
    assert (page.width_pt, page.height_pt) == (400.0, 100.0)


@given(
    width=st.floats(min_value=50, max_value=5000),
    height=st.floats(min_value=50, max_value=5000),
    longest=st.integers(min_value=16, max_value=4000),
)
def test_scale_gives_exactly_the_longest_side(width, height, longest):
    scale = scale_for(width, height, longest)
    assert math.ceil(max(width, height) * scale) == longest


@pytest.mark.parametrize(
    ("maker", "reason"),
    [
        (make_corrupt_pdf, "corrupt or unreadable PDF"),
        (make_encrypted_pdf, "encrypted PDF (needs a password"),
        (make_zero_page_pdf, "zero pages"),
    ],
)
def test_bad_pdf_raises_naming_the_file(tmp_path, maker, reason):
    pdf = maker(tmp_path / "bad.pdf")
    with pytest.raises(RasterizeError) as info:
        rasterize_pdf(pdf, tmp_path / "out", pdf_id="bad.pdf", longest_side=64)
    assert str(pdf) in str(info.value) and reason in str(info.value)


def test_missing_pdf_raises_naming_the_file(tmp_path):
    with pytest.raises(RasterizeError, match="no such PDF file"):
        rasterize_pdf(tmp_path / "nope.pdf", tmp_path / "out", pdf_id="nope.pdf", longest_side=64)


def test_bad_pdf_is_skipped_and_recorded_when_asked(tmp_path):
    pdf = make_encrypted_pdf(tmp_path / "locked.pdf")
    out = tmp_path / "locked"
    manifest = rasterize_pdf(pdf, out, pdf_id="locked.pdf", longest_side=64, on_error="skip")
    assert manifest.status == "skipped" and "encrypted" in manifest.error and manifest.pages == []
    assert sorted(p.name for p in out.iterdir()) == [MANIFEST_NAME]
    assert json.loads((out / MANIFEST_NAME).read_text())["status"] == "skipped"


def test_merge_keeps_good_pdfs_next_to_skipped_ones(tmp_path):
    good = rasterize_pdf(make_blank_pdf(tmp_path / "a.pdf", pages=2), tmp_path / "p" / "a", pdf_id="a.pdf",
                         longest_side=32)
    rasterize_pdf(make_corrupt_pdf(tmp_path / "b.pdf"), tmp_path / "p" / "b", pdf_id="b.pdf", longest_side=32,
                  on_error="skip")
    merged = merge_manifests([tmp_path / "p" / "b", tmp_path / "p" / "a"], tmp_path / "manifest.jsonl")
    assert [m.pdf for m in merged] == ["a.pdf", "b.pdf"]
    assert [m.status for m in read_merged_manifest(tmp_path / "manifest.jsonl")] == ["ok", "skipped"]
    assert merged[0] == good


def test_unknown_on_error_value_is_refused(tmp_path):
    with pytest.raises(ValueError, match="on_error"):
        rasterize_pdf(SAMPLE / "pdfs" / "earnings.pdf", tmp_path, pdf_id="earnings.pdf", longest_side=32,
                      on_error="ignore")


def test_cli_renders_a_bench_with_subfolders(tmp_path):
    bench = make_small_bench(tmp_path / "bench")
    out = tmp_path / "out"
    assert main([str(bench), "--out", str(out), "--longest-side", "48"]) == 0
    merged = read_merged_manifest(out / "manifest.jsonl")
    assert sum(len(m.pages) for m in merged) == 5
    nested = out / "pages" / "headers_footers" / "ff1fc6a205ad039139ce566851b6b260c929_pg1" / "pg1.png"
    assert nested.is_file()
    assert {m.bench_dir for m in merged} == {str(bench)}


def test_cli_fails_with_exit_code_1_on_a_bad_pdf(tmp_path, caplog):
    bench = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_corrupt_pdf(bench / "pdfs" / "broken.pdf")
    assert main([str(bench), "--out", str(tmp_path / "out"), "--longest-side", "32"]) == 1
    assert "broken.pdf" in caplog.text
    assert main([str(bench), "--out", str(tmp_path / "out"), "--longest-side", "32", "--on-error", "skip"]) == 0


def test_zero_byte_pdf_is_reported_as_empty_not_corrupt(tmp_path):
    pdf = tmp_path / "empty.pdf"
    pdf.write_bytes(b"")
    with pytest.raises(RasterizeError) as info:
        rasterize_pdf(pdf, tmp_path / "out", pdf_id="empty.pdf", longest_side=64)
    assert str(info.value) == f"{pdf}: the file is empty (0 bytes); an interrupted copy or download?"
    manifest = rasterize_pdf(pdf, tmp_path / "out", pdf_id="empty.pdf", longest_side=64, on_error="skip")
    assert manifest.status == "skipped" and "empty (0 bytes)" in manifest.error and "corrupt" not in manifest.error


def test_cli_keeps_an_upper_case_pdf_name_as_its_id(tmp_path):
    bench = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_blank_pdf(bench / "pdfs" / "scans" / "UPPER.PDF", pages=2)
    out = tmp_path / "out"
    assert main([str(bench), "--out", str(out), "--longest-side", "32"]) == 0
    by_pdf = {m.pdf: m for m in read_merged_manifest(out / "manifest.jsonl")}
    assert sorted(by_pdf) == ["earnings.pdf", "scans/UPPER.PDF"]
    upper = by_pdf["scans/UPPER.PDF"]
    assert upper.status == "ok" and [p.image for p in upper.pages] == [
        str(out / "pages" / "scans" / "UPPER" / f"pg{n}.png") for n in (1, 2)]


@pytest.mark.parametrize("layout", ["missing", "collision"])
def test_cli_bench_layout_errors_exit_1_with_the_reason(tmp_path, caplog, layout):
    bench = tmp_path / "bench"
    if layout == "collision":
        make_small_bench(bench, pdfs=("earnings.pdf",))
        make_blank_pdf(bench / "pdfs" / "sub.pdf")
        make_blank_pdf(bench / "pdfs" / "sub" / "x.pdf")
    assert main([str(bench), "--out", str(tmp_path / "out"), "--longest-side", "32"]) == 1
    expected = "does not exist" if layout == "missing" else "sub/x.pdf"
    assert expected in caplog.text and "Traceback" not in caplog.text


def _pngs(root):
    """{PNG path: (mtime, bytes)} of every page under ``root``."""
    return {png: (png.stat().st_mtime_ns, png.read_bytes()) for png in sorted(root.rglob("*.png"))}


def test_rasterize_pdfs_renders_only_what_changed(tmp_path):
    """A rerun reuses unchanged folders; a changed PDF, longest side or code version re-renders."""
    make_blank_pdf(tmp_path / "a.pdf", pages=3)
    jobs = [PdfJob(str(tmp_path / "a.pdf"), "a.pdf", str(tmp_path / "p" / "a"), "bench"),
            PdfJob(str(SAMPLE / "pdfs" / "earnings.pdf"), "earnings.pdf", str(tmp_path / "p" / "earnings"), "bench")]
    first = rasterize_pdfs(jobs, longest_side=40, code="v1")
    before = _pngs(tmp_path / "p")
    assert rasterize_pdfs(jobs, longest_side=40, code="v1") == first
    assert _pngs(tmp_path / "p") == before  # nothing rewritten
    make_blank_pdf(tmp_path / "a.pdf", pages=2, size=(300, 200))  # the PDF changed: 2 landscape pages
    again = rasterize_pdfs(jobs, longest_side=40, code="v1")
    assert [(p.width, p.height) for p in again[0].pages] == [(40, 27), (40, 27)]
    assert not (tmp_path / "p" / "a" / "pg3.png").exists()  # the page the PDF lost is gone
    after = _pngs(tmp_path / "p")
    assert {k: v for k, v in after.items() if "earnings" in str(k)} == {
        k: v for k, v in before.items() if "earnings" in str(k)}
    for changed in ({"longest_side": 41, "code": "v1"}, {"longest_side": 41, "code": "v2"}):
        rasterize_pdfs(jobs, **changed)
        assert all(after[png][0] != png.stat().st_mtime_ns for png in after if png.exists()), changed
        after = _pngs(tmp_path / "p")


def test_rasterize_pdfs_pool_gives_the_same_pages_as_one_process(tmp_path):
    pdfs = ("earnings.pdf", "mattsnotes.pdf", "lincoln_letter.pdf")
    results = {}
    for workers in (1, 2):
        root = tmp_path / f"w{workers}"
        jobs = [PdfJob(str(SAMPLE / "pdfs" / pdf), pdf, str(root / pdf[:-4])) for pdf in pdfs]
        manifests = rasterize_pdfs(jobs, longest_side=64, workers=workers)
        assert [m.pdf for m in manifests] == list(pdfs)
        results[workers] = ([[(p.page, p.width, p.height) for p in m.pages] for m in manifests],
                            [png.read_bytes() for png in sorted(root.rglob("*.png"))])
    assert results[1] == results[2]


def test_rasterize_pdfs_tries_every_pdf_and_names_each_bad_one(tmp_path):
    jobs = [PdfJob(str(make_corrupt_pdf(tmp_path / "bad1.pdf")), "bad1.pdf", str(tmp_path / "p" / "bad1")),
            PdfJob(str(make_blank_pdf(tmp_path / "good.pdf")), "good.pdf", str(tmp_path / "p" / "good")),
            PdfJob(str(tmp_path / "gone.pdf"), "gone.pdf", str(tmp_path / "p" / "gone"))]
    with pytest.raises(RasterizeError) as info:
        rasterize_pdfs(jobs, longest_side=32)
    message = str(info.value)
    assert message.startswith("2 PDFs cannot be rendered")
    assert f"{tmp_path / 'bad1.pdf'}: corrupt or unreadable PDF" in message
    assert f"{tmp_path / 'gone.pdf'}: no such PDF file" in message
    assert read_manifest(tmp_path / "p" / "good").status == "ok"  # the good one is complete
    skipped = rasterize_pdfs(jobs, longest_side=32, on_error="skip")
    assert [m.status for m in skipped] == ["skipped", "ok", "skipped"]
