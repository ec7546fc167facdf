"""Tests of olmpipe.bench.folders and olmpipe.layout: bench discovery and result paths (and the bench
layout errors in Snakemake)."""

from __future__ import annotations

import json
import shutil

import pytest
from benchdata import REPO, SAMPLE, make_blank_pdf

from olmpipe.bench.folders import (
    BenchLayoutError,
    bench_test_files,
    benches,
    discover_pdfs,
    page_dirs,
    pdf_files,
    pdf_path_for,
)
from olmpipe.config import validate_config
from olmpipe.layout import (
    COMPARISON_JSON,
    MANIFEST,
    PAGE_INDEX,
    REPORT_HTML,
    SOUP_MODEL_DIR,
    TINY_MODEL_DIR,
    VALIDATE_REPORT,
    SynthLayout,
    baseline_run_dir,
    bench_section,
    eval_run_files,
    evaluate_run_dir,
    final_metrics,
    final_model_dir,
    in_results,
    model_dir,
    model_input,
    plot_path,
    seed_of,
    stage_config,
    train_run_dir,
    validate_outputs,
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


def test_model_input_is_a_file_path_never_a_hub_id(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # the embedded model is an input before it exists: build_model makes it
    assert model_input(validate_config({})) == ["results/model/tiny"]
    # a hub id is its download folder (download_model makes it; tests/test_hubmodel.py)
    assert model_input(validate_config({"model": {"path": "allenai/olmOCR-7B-0825", "revision": "main"}})) == [
        "results/model/hub/allenai--olmOCR-7B-0825/main"]
    (tmp_path / "models" / "qwen").mkdir(parents=True)
    assert model_input(validate_config({"model": {"path": "models/qwen"}})) == ["models/qwen"]


def test_run_folders_of_the_two_generation_stages():
    cfg = validate_config({"model": {"name": "qwen"}})
    assert (baseline_run_dir(cfg), evaluate_run_dir(cfg)) == ("results/baseline/qwen", "results/evaluate/qwen")
    assert str(SOUP_MODEL_DIR) == "results/train/soup/model"
    # the soup rule writes where the evaluate CLI reads by default: both take it from olmpipe.layout
    assert "model=directory(str(SOUP_MODEL_DIR))" in (REPO / "workflow" / "rules" / "train.smk").read_text()


def test_result_paths_of_every_stage():
    assert str(MANIFEST) == "results/rasterize/manifest.jsonl"
    assert validate_outputs() == {"tests": "results/validate/tests", "report": str(VALIDATE_REPORT),
                                  "pages": str(PAGE_INDEX)}
    assert validate_outputs("out/v")["pages"] == "out/v/pages.jsonl"
    run = train_run_dir(3)
    assert (run, final_model_dir(run), final_metrics(run)) == (
        "results/train/seed3", "results/train/seed3/model", "results/train/seed3/model.metrics.jsonl")
    assert (seed_of(run), seed_of("results/train/soup"), seed_of("results/train/seed3.old-1")) == (3, None, None)
    assert eval_run_files("results/baseline/m") == {
        "candidate": "results/baseline/m/candidate", "generations": "results/baseline/m/generations.jsonl",
        "verdicts": "results/baseline/m/verdicts.jsonl", "scores": "results/baseline/m/scores.json",
        "scores_csv": "results/baseline/m/scores.csv", "summary": "results/baseline/m/summary.json"}
    assert in_results(COMPARISON_JSON) == "evaluate/comparison.json"
    assert plot_path("rewards") == "results/report/plots/rewards.png" and str(REPORT_HTML).endswith("index.html")
    synth = SynthLayout("elsewhere")
    assert (synth.html, synth.html_journal, synth.bench, synth.report) == (
        "elsewhere/html", "elsewhere/html-journal.jsonl", "elsewhere/bench", "elsewhere/report.json")


def test_bench_section_is_the_same_applied_once_or_twice():
    cfg = validate_config({"bench": {"dir": "real"}, "synth": {"enabled": True}})
    once = stage_config(cfg)
    assert (once["bench"]["dir"], once["bench"]["eval_dir"]) == (SynthLayout().bench, "real")
    assert bench_section(once) == once["bench"] and cfg["bench"]["dir"] == "real"


def test_the_rules_write_the_paths_of_olmpipe_layout(tmp_path):
    """A dry run of `train` lists the outputs olmpipe.layout names (the CLIs' defaults)."""
    from benchdata import make_small_bench
    from test_workflow_reruns import snakemake, write_config

    write_config(tmp_path)
    make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    out = snakemake(tmp_path, "-n", "train", "--printshellcmds")
    text = out.stdout + out.stderr
    outputs = {path.strip().rstrip(",") for line in text.splitlines() if line.strip().startswith("output:")
               for path in line.split(":", 1)[1].split(",")}
    cfg = validate_config({})
    expected = {str(MANIFEST), *validate_outputs().values(), str(TINY_MODEL_DIR), str(SOUP_MODEL_DIR),
                str(COMPARISON_JSON), str(REPORT_HTML), plot_path("rewards"),
                *eval_run_files(baseline_run_dir(cfg)).values(), *eval_run_files(evaluate_run_dir(cfg)).values(),
                final_model_dir(train_run_dir(0)), final_metrics(train_run_dir(0))}
    assert expected <= outputs, sorted(expected - outputs)


def test_missing_bench_folder_says_so(tmp_path):
    with pytest.raises(FileNotFoundError, match=r"bench folder .*nowhere does not exist"):
        discover_pdfs(tmp_path / "nowhere")


def test_pdf_ids_keep_the_exact_name(tmp_path):
    make_blank_pdf(tmp_path / "pdfs" / "UPPER.PDF")
    make_blank_pdf(tmp_path / "pdfs" / "a" / "Mixed.Pdf")
    make_blank_pdf(tmp_path / "pdfs" / "lower.pdf")
    assert pdf_files(tmp_path) == {"UPPER": "UPPER.PDF", "a/Mixed": "a/Mixed.Pdf", "lower": "lower.pdf"}
    assert pdf_path_for(tmp_path, "UPPER", "UPPER.PDF") == f"{tmp_path}/pdfs/UPPER.PDF"


@pytest.mark.parametrize(
    ("pdfs", "named"),
    [
        (("sub.pdf", "sub/x.pdf"), ("pdfs/sub.pdf", "pdfs/sub/x.pdf")),
        (("a/sub.pdf", "a/sub/deep/x.pdf"), ("pdfs/a/sub.pdf", "pdfs/a/sub/deep/x.pdf")),
        (("x.pdf", "x.PDF"), ("pdfs/x.PDF", "pdfs/x.pdf")),
    ],
    ids=["pdf-beside-folder", "nested", "case-twins"],
)
def test_pdfs_that_would_share_a_rasterize_folder_are_an_error(tmp_path, pdfs, named):
    for pdf in pdfs:
        make_blank_pdf(tmp_path / "pdfs" / pdf)
    with pytest.raises(BenchLayoutError) as info:
        pdf_files(tmp_path)
    for path in named:
        assert str(tmp_path / path) in str(info.value)


# Real Snakemake (helpers of test_workflow_reruns): the bench layout problems of issue 10 §3.
def test_snakemake_renders_and_validates_an_upper_case_pdf_under_its_exact_name(tmp_path):
    from benchdata import make_small_bench, sample_records, write_jsonl
    from test_workflow_reruns import job_counts, snakemake, write_config

    bench = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    shutil.copy2(SAMPLE / "pdfs" / "mattsnotes.pdf", bench / "pdfs" / "NOTES.PDF")
    records = sample_records(("earnings.pdf", "mattsnotes.pdf"))
    write_jsonl(bench / "dataset.jsonl",
                [{**r, "pdf": "NOTES.PDF"} if r["pdf"] == "mattsnotes.pdf" else r for r in records])
    write_config(tmp_path)
    proc = snakemake(tmp_path, "validate")
    assert job_counts(proc) == {"rasterize": 1, "validate": 1}
    pages = [json.loads(line) for line in (tmp_path / "results/validate/pages.jsonl").read_text().splitlines()]
    assert sorted((p["pdf"], p["page"], p["image"]) for p in pages if p["pdf"] != "earnings.pdf") == [
        ("NOTES.PDF", n, f"results/rasterize/pages/NOTES/pg{n}.png") for n in (1, 2, 3)]
    assert json.loads((tmp_path / "results/validate/report.json").read_text())["problems"] == []


@pytest.mark.parametrize("layout", ["missing-bench", "pdf-beside-folder"])
def test_snakemake_bench_layout_errors_are_one_clear_line(tmp_path, layout):
    from benchdata import make_small_bench
    from test_workflow_reruns import snakemake, write_config

    write_config(tmp_path)
    if layout == "missing-bench":
        expected = f"bench.dir: bench folder bench does not exist (a relative path is read from the working directory, {tmp_path})"
    else:
        bench = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
        make_blank_pdf(bench / "pdfs" / "sub.pdf")
        make_blank_pdf(bench / "pdfs" / "sub" / "x.pdf")
        expected = "bench.dir: bench/pdfs/sub.pdf and bench/pdfs/sub/x.pdf: the pages of sub.pdf go to the folder sub/"
    proc = snakemake(tmp_path, "validate", "--dry-run", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0 and expected in text, text
    assert "Traceback" not in text and len(text.strip().splitlines()) <= 4, text


@pytest.mark.parametrize(("path", "expected"), [
    ("/nonexistent/model", ("model.path: '/nonexistent/model' does not exist (a relative path is read from the "
                            "working directory, {workdir}) and is not a hub id (org/name)")),
    ("./models/qwen", "model.path: './models/qwen' does not exist"),
    ("notamodel", "model.path: 'notamodel' is not a Hugging Face model folder (it has no config.json)"),
    ("allenai/olmOCR-7B-0825", None),  # a hub id: downloaded by the model stage (model.revision set)
    ("embedded", None),
], ids=["absolute", "relative", "folder-without-config", "hub-id", "embedded"])
def test_a_model_path_that_names_no_model_stops_the_config_check(tmp_path, path, expected):
    """Issue 20 item 10: a nonexistent model.path failed only in the baseline job, with a Hugging Face
    "Repo id must be ..." traceback that did not name model.path. The config check now names it."""
    from benchdata import make_small_bench
    from test_workflow_reruns import snakemake, write_config

    make_small_bench(tmp_path / "bench")
    write_config(tmp_path)
    (tmp_path / "notamodel").mkdir()
    with open(tmp_path / "config" / "config.yaml", "a", encoding="utf-8") as fh:
        fh.write(f"model:\n  path: {path}\n  revision: main\n")
    proc = snakemake(tmp_path, "baseline", "--dry-run", check=False)
    text = proc.stdout + proc.stderr
    if expected is None:
        assert proc.returncode == 0, text
    else:
        assert proc.returncode != 0 and expected.format(workdir=tmp_path) in text, text
        assert "Repo id" not in text and len(text.strip().splitlines()) <= 8, text
