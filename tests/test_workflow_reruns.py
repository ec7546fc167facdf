"""Snakemake's rerun behaviour, run for real on a small config (3 PDFs at 48 px, no math rendering).

Each test builds a fresh working directory with its own bench and config, runs the workflow up to
``validate``, changes one thing and checks which jobs Snakemake runs next.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from benchdata import REPO, SAMPLE, make_corrupt_pdf, make_small_bench, sample_records, write_jsonl
from support.workflow import job_counts, snakemake

pytestmark = pytest.mark.slow

CONFIG = """\
bench:
  dir: bench
rasterize:
  longest_side: {longest_side}
  on_error: {on_error}
validate:
  check_math: false
"""




def write_config(workdir: Path, longest_side: int = 48, on_error: str = "error") -> None:
    (workdir / "config").mkdir(exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(CONFIG.format(longest_side=longest_side, on_error=on_error))


@pytest.fixture
def workdir(tmp_path):
    """A working directory whose workflow has run once up to validate."""
    make_small_bench(tmp_path / "bench")
    write_config(tmp_path)
    first = snakemake(tmp_path, "validate")
    assert job_counts(first) == {"rasterize": 1, "validate": 1}
    return tmp_path


def test_nothing_changed_nothing_to_do(workdir):
    proc = snakemake(workdir, "validate")
    assert "Nothing to be done" in proc.stdout + proc.stderr


def test_rasterize_setting_reruns_everything_from_rasterize(workdir):
    write_config(workdir, longest_side=40)
    assert job_counts(snakemake(workdir, "validate")) == {"rasterize": 1, "validate": 1}
    assert '"width": 40' in (workdir / "results/rasterize/manifest.jsonl").read_text()


def test_edited_jsonl_reruns_validate_only(workdir):
    image = workdir / "results/rasterize/pages/mattsnotes/pg1.png"
    before = image.stat().st_mtime_ns
    records = sample_records()
    write_jsonl(workdir / "bench" / "dataset.jsonl", [*records, {**records[0], "id": "one-more"}])
    assert job_counts(snakemake(workdir, "validate")) == {"validate": 1}
    assert image.stat().st_mtime_ns == before
    assert "one-more" in (workdir / "results/validate/pages.jsonl").read_text()


def test_audit_reruns_on_a_reward_change_and_validate_does_not(workdir):
    """validate_audit reads the validated pages and the rewards: a reward setting (the guard) or its
    own warn share reruns it alone; its records and log table are written."""
    assert job_counts(snakemake(workdir, "validate_audit")) == {"validate_audit": 1}
    first = json.loads((workdir / "results/validate/audit.json").read_text())
    assert first["settings"]["short_answer_guard"] is True and first["pages"] == 5
    assert "Trivial-answer audit: 5 pages" in (workdir / "logs/validate_audit/validate_audit.log").read_text()
    with (workdir / "config" / "config.yaml").open("a") as fh:
        fh.write("  audit:\n    warn_share: 0.9\nrewards:\n  bench:\n    short_answer_guard: false\n")
    assert job_counts(snakemake(workdir, "validate_audit")) == {"validate_audit": 1}
    again = json.loads((workdir / "results/validate/audit.json").read_text())
    assert again["settings"]["short_answer_guard"] is False and again["settings"]["warn_share"] == 0.9
    assert again["pages_best"] == first["pages_best"]  # both guard settings are audited either way


def test_added_pdf_rasterizes_only_that_pdf(workdir):
    pages = workdir / "results/rasterize/pages"
    before = {png: png.stat().st_mtime_ns for png in pages.rglob("*.png")}
    shutil.copy2(SAMPLE / "pdfs" / "lincoln_letter.pdf", workdir / "bench" / "pdfs" / "lincoln_letter.pdf")
    records = sample_records((*{r["pdf"] for r in sample_records()}, "lincoln_letter.pdf"))
    write_jsonl(workdir / "bench" / "dataset.jsonl", records)
    dry = snakemake(workdir, "validate", "--dry-run")
    # rasterize's input is the content stamp of the PDFs (olmpipe.records.stamps), which now names it
    assert job_counts(dry) == {"rasterize": 1, "validate": 1}
    assert "bench/pdfs/lincoln_letter.pdf" in (workdir / "results/rasterize/inputs/pages-pdfs.json").read_text()
    assert job_counts(snakemake(workdir, "validate")) == {"rasterize": 1, "validate": 1}
    # the one rasterize job rendered the new PDF and left every other page untouched
    assert {png: png.stat().st_mtime_ns for png in before} == before
    assert (pages / "lincoln_letter" / "pg1.png").is_file()
    assert "1 rendered, 3 reused" in (workdir / "logs/rasterize/rasterize.log").read_text()


def test_corrupt_pdf_fails_naming_the_file_or_is_skipped(tmp_path):
    make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    make_corrupt_pdf(tmp_path / "bench" / "pdfs" / "sub" / "broken.pdf")
    write_config(tmp_path)
    proc = snakemake(tmp_path, "validate", check=False)
    assert proc.returncode != 0
    assert "bench/pdfs/sub/broken.pdf: corrupt or unreadable PDF" in proc.stdout + proc.stderr
    write_config(tmp_path, on_error="skip")
    snakemake(tmp_path, "validate")
    manifest = (tmp_path / "results/rasterize/manifest.jsonl").read_text()
    assert '"status": "skipped"' in manifest and '"pdf": "sub/broken.pdf"' in manifest


def test_lint_is_clean():
    proc = subprocess.run([sys.executable, "-m", "snakemake", "--lint", "-s", str(REPO / "Snakefile"),
                           "-d", str(REPO)], capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "Congratulations" in proc.stdout + proc.stderr


def test_separate_eval_bench_gets_its_own_pages(tmp_path):
    make_small_bench(tmp_path / "bench", pdfs=("lincoln_letter.pdf",))
    make_small_bench(tmp_path / "evalbench", pdfs=("earnings.pdf", "mattsnotes.pdf"))
    write_config(tmp_path)
    text = (tmp_path / "config" / "config.yaml").read_text().replace("  dir: bench\n", "  dir: bench\n  eval_dir: evalbench\n")
    (tmp_path / "config" / "config.yaml").write_text(text)
    assert job_counts(snakemake(tmp_path, "validate")) == {"rasterize": 1, "validate": 1}
    assert (tmp_path / "results/rasterize/eval-pages/mattsnotes/pg3.png").is_file()
    pages = (tmp_path / "results/validate/pages.jsonl").read_text().splitlines()
    assert sum('"split": "eval"' in line for line in pages) == 4
    assert sum('"split": "train"' in line for line in pages) == 1


def test_invalid_tests_fail_validate_with_their_messages(tmp_path):
    make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    write_jsonl(tmp_path / "bench" / "bad.jsonl", [
        {"pdf": "/abs.pdf", "page": 1, "id": "a", "type": "present", "text": "x"},
        {"pdf": "earnings.pdf", "page": 1, "id": "b", "type": "nonsense", "text": "x"},
    ])
    write_config(tmp_path)
    proc = snakemake(tmp_path, "validate", check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "bench/bad.jsonl:1: test 'a': pdf path '/abs.pdf' is absolute" in text
    assert "bench/bad.jsonl:2: test 'b': unknown test type 'nonsense'" in text
    report = json.loads((tmp_path / "logs/validate/validate.report.json").read_text())
    assert [p["test_id"] for p in report["problems"]] == ["a", "b"]
