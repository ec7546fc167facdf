"""olmpipe.synth.bench: the embedded pages become a bench whose reference answers score 100% and
empty answers fail every test but ``absent``; hostile pages are skipped with their reasons."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pypdfium2 as pdfium
import pytest
from support.browser import NEEDS_CHROMIUM

from olmpipe.bench.cli import main as bench_main
from olmpipe.config import load_config
from olmpipe.prompts import parse_page_output
from olmpipe.synth.bench import build_bench, render_pages
from olmpipe.synth.pages import check_tests
from olmpipe.synth.source import collect_html

REPO = Path(__file__).resolve().parents[1]



pytestmark = NEEDS_CHROMIUM


def synth_config(**overrides):
    return load_config(overrides={"synth": overrides})["synth"]


#: rasterize.longest_side of the embedded default (config/config.yaml): the raster the pages are read in.
LONGEST_SIDE = load_config()["rasterize"]["longest_side"]


def build(root: Path, html_dir: Path, **overrides) -> dict:
    cfg = synth_config(html_dir=str(html_dir), **overrides)
    collect_html(cfg, root / "html")
    render_pages(root / "html", root / "render", cfg, longest_side=LONGEST_SIDE)
    return build_bench(root / "html", root / "render", root / "bench", root / "report.json", cfg)


@pytest.fixture(scope="module")
def embedded(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    report = build(root, REPO / "data/synth", rotate_share=0.5)
    return root, report


def score(bench: Path, out: Path) -> dict:
    assert bench_main(["score", str(bench), "--json", str(out), "--processes", "0", "--no-progress"]) == 0
    return json.loads(out.read_text())["candidates"]


def test_reference_scores_100_and_an_empty_page_fails_all_but_absent(embedded, tmp_path):
    root, report = embedded
    bench = tmp_path / "bench"
    shutil.copytree(root / "bench", bench)
    (bench / "empty").mkdir()
    for md in (bench / "reference").iterdir():
        (bench / "empty" / md.name).write_text("")
    scores = score(bench, tmp_path / "scores.json")
    assert scores["reference"]["overall"] == 1.0
    empty = scores["empty"]["by_type"]
    assert set(empty) == {"present", "absent", "order", "table", "math", "baseline"}
    assert all(rate == 0.0 for kind, rate in empty.items() if kind != "absent"), empty
    lines = [json.loads(line) for line in (root / "bench/synth.jsonl").read_text().splitlines()]
    assert report["tests"] == len(lines) and report["pages"]["html"] == 5
    assert report["hidden_text"] == []  # every word of the embedded pages is printed where it can be seen
    assert sum(report["tests_by_type"].values()) == len(lines)


def test_rotated_copies_carry_the_rotation_in_their_reference(embedded):
    root, report = embedded
    rotated = sorted((root / "bench/pdfs").glob("*_rot*.pdf"))
    assert rotated and report["pages"]["rotated"] == len(rotated)
    for pdf in rotated:
        angle = int(pdf.stem.rsplit("_rot", 1)[1])
        assert pdfium.PdfDocument(str(pdf))[0].get_rotation() == (360 - angle) % 360
        answer = parse_page_output((root / "bench/reference" / f"{pdf.stem}_pg1_repeat1.md").read_text())
        assert answer.front_matter.is_rotation_valid is False
        assert answer.front_matter.rotation_correction == (360 - angle) % 360


def test_same_inputs_same_bench(embedded, tmp_path):
    root, _ = embedded
    cfg = synth_config(html_dir=str(REPO / "data/synth"), rotate_share=0.5)
    render_pages(root / "html", tmp_path / "render", cfg, longest_side=LONGEST_SIDE)
    build_bench(root / "html", tmp_path / "render", tmp_path / "bench", tmp_path / "report.json", cfg)
    assert (tmp_path / "bench/synth.jsonl").read_bytes() == (root / "bench/synth.jsonl").read_bytes()
    assert sorted(p.name for p in (tmp_path / "bench/pdfs").iterdir()) == sorted(
        p.name for p in (root / "bench/pdfs").iterdir())


def test_hostile_pages_are_skipped_with_their_reasons(tmp_path):
    src = tmp_path / "in"
    src.mkdir()
    shutil.copy(REPO / "data/synth/text_report.html", src / "good.html")
    (src / "broken.html").write_text("<html><body><p>Unclosed <b>bold <table><tr><td>one cell")
    (src / "empty.html").write_text("<html><body><div class='image'></div></body></html>")
    (src / "long.html").write_text("<html><body>" + "<p>A line of text that repeats.</p>" * 150 + "</body></html>")
    (src / "latin1.html").write_bytes("<html><body><p>Fa\u00e7ade r\u00e9novation.</p></body></html>".encode("latin-1"))
    (src / "big.html").write_text("<table>" + "<tr><td>12345</td><td>67890</td></tr>" * 200_000 + "</table>")
    # 1.65 MB, under max_html_bytes: on 1d966ff the stage failed with RecursionError, losing good.pdf
    (src / "deep.html").write_text("<html><body>" + "<div>" * 150_000 + "<p>Deep text.</p>"
                                   + "</div>" * 150_000 + "</body></html>")
    report = build(tmp_path / "out", src, rotate_share=0.0)
    skipped = {s["name"]: (s["stage"], s["reason"]) for s in report["skipped"]}
    assert skipped["deep"][0] == "synth_html" and "nested more than 256 levels deep" in skipped["deep"][1]
    assert skipped["latin1"][0] == "synth_html" and "not UTF-8" in skipped["latin1"][1]
    assert skipped["big"][0] == "synth_html" and "max_html_bytes" in skipped["big"][1]
    assert skipped["long.pdf"][0] == "synth_render" and "PDF pages" in skipped["long.pdf"][1]
    assert skipped["empty.pdf"] == ("synth_tests", "no test survived the checks (is there text on the page?)")
    pdfs = sorted(p.name for p in (tmp_path / "out/bench/pdfs").iterdir())
    assert "good.pdf" in pdfs and not {"long.pdf", "empty.pdf", "latin1.pdf", "big.pdf", "deep.pdf"} & set(pdfs)
    assert any(t["pdf"] == "good.pdf" and t["type"] == "present" for t in map(json.loads, (
        tmp_path / "out/bench/synth.jsonl").read_text().splitlines()))
    assert not list((tmp_path / "out").glob("*.tmp"))


def test_checks_drop_tests_that_are_not_right_by_construction():
    reference = "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\nis_diagram: False\n---\nThe quick brown fox jumps."
    body = "The quick brown fox jumps."
    records = [
        {"pdf": "a.pdf", "page": 1, "id": "ok", "type": "present", "text": "quick brown fox"},
        {"pdf": "a.pdf", "page": 1, "id": "wrong", "type": "present", "text": "lazy dog sleeps"},
        {"pdf": "a.pdf", "page": 1, "id": "in_body", "type": "absent", "text": "brown fox"},
        {"pdf": "a.pdf", "page": 1, "id": "never_on_page", "type": "absent", "text": "nothing like it"},
        {"pdf": "a.pdf", "page": 1, "id": "bad", "type": "present", "text": "fox", "max_diffs": 9},
    ]
    kept, dropped = check_tests(records, reference=reference, body=body, full_text=body)
    assert [r["id"] for r in kept] == ["ok"]
    reasons = {d["id"]: d["reason"] for d in dropped}
    assert reasons["wrong"].startswith("fails on the reference answer")
    assert reasons["in_body"].startswith("fails on the reference answer")
    assert reasons["never_on_page"] == "passes on the page with its headers and footers written out"
    assert reasons["bad"].startswith("invalid: max_diffs 9")
