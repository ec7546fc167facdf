"""Tests of olmpipe.workflow: bench discovery, paths and the code versions that drive reruns."""

from __future__ import annotations

import sys

import pytest
from benchdata import SAMPLE, make_blank_pdf

from olmpipe.config import validate_config
from olmpipe.workflow import (
    RASTERIZE_CODE,
    VALIDATE_CODE,
    bench_test_files,
    benches,
    code_version,
    discover_pdfs,
    model_dir,
    page_dirs,
    pdf_path_for,
)


def test_discover_pdfs_of_the_sample():
    stems = discover_pdfs(SAMPLE)
    assert len(stems) == 21 and stems == sorted(stems)
    assert "headers_footers/ff1fc6a205ad039139ce566851b6b260c929_pg1" in stems
    assert pdf_path_for(SAMPLE, "mattsnotes") == f"{SAMPLE}/pdfs/mattsnotes.pdf"
    assert [p.rsplit("/", 1)[1] for p in bench_test_files(SAMPLE)] == ["blanks.jsonl", "dataset.jsonl"]


def test_discover_pdfs_needs_a_pdfs_folder_and_accepts_upper_case(tmp_path):
    with pytest.raises(FileNotFoundError, match="no pdfs/ subfolder"):
        discover_pdfs(tmp_path)
    make_blank_pdf(tmp_path / "pdfs" / "deep" / "er" / "A.PDF")
    (tmp_path / "pdfs" / "notes.txt").write_text("not a pdf")
    assert discover_pdfs(tmp_path) == ["deep/er/A"]


def test_benches_and_page_dirs():
    cfg = validate_config({"bench": {"dir": f"{SAMPLE}/", "eval_dir": str(SAMPLE)}})
    main, evalb = benches(cfg)
    assert (main.role, main.dir, main.pages) == ("main", str(SAMPLE), "pages")
    assert (evalb.role, evalb.pages) == ("eval", "eval-pages")
    assert page_dirs(evalb)[0] == "results/rasterize/eval-pages/blank_book_pg1"
    assert len(benches(validate_config({}))) == 1


def test_model_dir():
    assert model_dir(validate_config({})) == "results/model/tiny"
    assert model_dir(validate_config({"model": {"path": "/models/qwen"}})) == "/models/qwen"


def test_code_version_follows_the_source(tmp_path, monkeypatch):
    package = tmp_path / "fakepkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "stage.py").write_text("X = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = code_version("fakepkg.stage")
    assert first == code_version("fakepkg.stage") and len(first) == 16
    whole = code_version("fakepkg")
    (package / "sub" / "helper.py").write_text("Y = 2\n")  # another module: the stage's hash stays
    assert code_version("fakepkg.stage") == first and code_version("fakepkg") != whole
    (package / "stage.py").write_text("X = 2\n")
    assert code_version("fakepkg.stage") != first
    assert "fakepkg.stage" not in sys.modules  # found, not imported
    with pytest.raises(ModuleNotFoundError, match="no module named 'fakepkg.nope'"):
        code_version("fakepkg.nope")


def test_stage_code_lists_resolve():
    assert code_version(*RASTERIZE_CODE) != code_version(*VALIDATE_CODE)
