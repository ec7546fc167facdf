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
    MANIFEST_NAME,
    RasterizeError,
    main,
    merge_manifests,
    rasterize_pdf,
    read_manifest,
    read_merged_manifest,
    scale_for,
)


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
