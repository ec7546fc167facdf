"""olmpipe.evaluate.engine (the baseline and evaluate engine): the stage's files, resume without regenerating, failures, and the real tiny model."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from olmpipe.codeversion import rule_code_version
from olmpipe.config import load_config
from olmpipe.evaluate.baseline import main
from olmpipe.evaluate.engine import (
    EvalRunError,
    load_eval_tests,
    run_generation_and_scoring,
)
from olmpipe.generate.base import Completion, GenerationBackend
from olmpipe.records.candidates import candidate_name
from olmpipe.records.pages import read_page_index
from olmpipe.records.scores import read_pipeline_counts

ANSWER = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
    "is_diagram: False\n---\n{text}"
)
PAGE_TEXT = {
    ("doc.pdf", 1): "Alpha beta gamma.",
    ("doc.pdf", 2): "Delta epsilon.",
    ("sub/other.pdf", 1): "Zeta eta theta.",
}


class Interrupted(Exception):
    """Stands for a run killed midway (Ctrl-C, SIGTERM, a node failure)."""


class EchoBackend(GenerationBackend):
    """Answers each page with its known text; counts requests; can fail on chosen keys or after N calls."""

    name = "echo"

    def __init__(self, *, fail_keys=(), interrupt_after=None, no_eos_keys=()):
        super().__init__()
        self.seen = []
        self.fail_keys = set(fail_keys)
        self.no_eos_keys = set(no_eos_keys)
        self.interrupt_after = interrupt_after
        self.closed = False

    def generate(self, requests, sampling):
        if self.interrupt_after is not None and len(self.seen) >= self.interrupt_after:
            raise Interrupted
        out = []
        for r in requests:
            self.seen.append(r.key)
            if r.key in self.fail_keys:
                out.append(Completion("", "error", error="boom"))
            elif r.key in self.no_eos_keys:
                out.append(Completion("la la la la", "length", 5, 8, 0.01))
            else:
                out.append(Completion(ANSWER.format(text=PAGE_TEXT[(r.pdf, r.page)]), "stop", 5, 7, 0.01))
        return out

    def close(self):
        self.closed = True


@pytest.fixture()
def stage(tmp_path, monkeypatch):
    """A validated-stage layout in tmp_path: page images, pages.jsonl (3 eval + 1 train page), tests."""
    from PIL import Image

    monkeypatch.chdir(tmp_path)
    entries = []
    for (pdf, page), split in [
        (("doc.pdf", 1), "eval"),
        (("doc.pdf", 2), "eval"),
        (("sub/other.pdf", 1), "eval"),
        (("train.pdf", 1), "train"),
    ]:
        image = Path("results/rasterize/pages") / pdf[:-4] / f"pg{page}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        Image.new("RGB", (30 + page, 40), "white").save(image)
        entries.append({"pdf": pdf, "page": page, "image": str(image), "split": split, "bench_dir": "b"})
    index = Path("results/validate/pages.jsonl")
    index.parent.mkdir(parents=True)
    index.write_text("".join(json.dumps(e) + "\n" for e in entries))
    tests = Path("results/validate/tests")
    tests.mkdir()
    rows = [
        {"pdf": "doc.pdf", "page": 1, "id": "t1", "type": "present", "text": "Alpha beta"},
        {"pdf": "doc.pdf", "page": 2, "id": "t2", "type": "present", "text": "Delta"},
        {"pdf": "doc.pdf", "page": 2, "id": "t3", "type": "absent", "text": "Omega"},
        {"pdf": "sub/other.pdf", "page": 1, "id": "t4", "type": "present", "text": "Zeta eta"},
        {"pdf": "train.pdf", "page": 1, "id": "t5", "type": "present", "text": "never scored"},
    ]
    (tests / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tests / "other.jsonl").write_text(
        json.dumps(
            {
                "pdf": "sub/other.pdf",
                "page": 1,
                "id": "o1",
                "type": "order",
                "before": "Zeta",
                "after": "theta",
            }
        )
        + "\n"
    )
    cfg = load_config(
        overrides={"generation": {"batch_size": 2, "repeats": 2}, "eval_run": {"progress": False}}
    )
    return cfg, index, tests, Path("results/baseline/m")


def run(stage, backend, **cfg_overrides):
    cfg, index, tests, out = stage
    for section, values in cfg_overrides.items():
        cfg = {**cfg, section: {**cfg[section], **values}}
    return run_generation_and_scoring(cfg, "no-model", index, tests, out, backend=backend, model_name="m")


def test_writes_all_stage_files(stage):
    backend = EchoBackend()
    summary = run(stage, backend)
    out = stage[3]
    assert summary.pages == 3 and summary.generations == 6 and summary.generated == 6 and summary.reused == 0
    assert summary.eos_share == 1.0 and summary.front_matter_valid_share == 1.0 and summary.overall == 1.0
    assert not backend.closed  # an injected backend belongs to the caller

    md = out / "candidate" / "sub" / "other_pg1_repeat2.md"
    assert md.read_text() == "Zeta eta theta."
    assert sorted(p.relative_to(out / "candidate").as_posix() for p in (out / "candidate").rglob("*.md")) == [
        "doc_pg1_repeat1.md",
        "doc_pg1_repeat2.md",
        "doc_pg2_repeat1.md",
        "doc_pg2_repeat2.md",
        "sub/other_pg1_repeat1.md",
        "sub/other_pg1_repeat2.md",
    ]

    gens = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert [(g["pdf"], g["page"], g["repeat"]) for g in gens] == [
        ("doc.pdf", 1, 1),
        ("doc.pdf", 1, 2),
        ("doc.pdf", 2, 1),
        ("doc.pdf", 2, 2),
        ("sub/other.pdf", 1, 1),
        ("sub/other.pdf", 1, 2),
    ]
    g = gens[0]
    assert (
        g["text"] == "Alpha beta gamma."
        and g["raw"].startswith("---\n")
        and g["front_matter"]["is_table"] is False
    )
    assert g["finish_reason"] == "stop" and g["completion_tokens"] == 7 and g["prompt_tokens"] == 5
    assert g["attempts"][0]["temperature"] == 0.1 and g["failed"] is False and len(g["image_sha256"]) == 16

    scores = json.loads((out / "scores.json").read_text())
    assert scores["overall"] == 1.0 and set(scores["by_jsonl"]) == {
        "baseline",
        "dataset.jsonl",
        "other.jsonl",
    }
    assert set(scores["by_type"]) == {"present", "absent", "order", "baseline"}
    rows = list(csv.DictReader((out / "scores.csv").open()))
    assert rows[0]["scope"] == "overall" and float(rows[0]["score"]) == 1.0
    assert {(r["scope"], r["name"]) for r in rows} >= {("type", "present"), ("jsonl", "other.jsonl")}

    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert {v["test_id"] for v in verdicts} == {
        "t1",
        "t2",
        "t3",
        "t4",
        "o1",
        "doc.pdf_baseline",
        "sub/other.pdf_baseline",
    }
    assert len(verdicts) == 7 * 2 and all(v["passed"] for v in verdicts)
    assert set(verdicts[0]) >= {"test_id", "type", "jsonl", "pdf", "page", "repeat", "passed", "reason"}
    summary_json = json.loads((out / "summary.json").read_text())
    assert summary_json["generations"] == 6 and summary_json["failed_no_eos"] == 0


def test_olmocr_bench_can_read_the_candidate_folder(stage):
    """The candidate folder follows olmOCR-Bench's naming: the bench's own reader finds every file."""
    from olmpipe.bench import read_candidate

    run(stage, EchoBackend())
    texts = read_candidate(stage[3] / "candidate", ["doc.pdf", "sub/other.pdf"])
    assert len(texts) == 6 and texts[("doc.pdf", 2, 1)] == "Delta epsilon."


def test_restarted_run_skips_finished_pages(stage):
    interrupted = EchoBackend(interrupt_after=2)  # the second batch raises, like a Ctrl-C or SIGTERM
    with pytest.raises(Interrupted):
        run(stage, interrupted)
    journal = stage[3] / "generations.journal.jsonl"
    assert len(journal.read_text().splitlines()) == 2
    assert not (stage[3] / "scores.json").exists() and not (stage[3] / "generations.jsonl").exists()

    resumed = EchoBackend()
    summary = run(stage, resumed)
    assert resumed.seen == [
        ("doc.pdf", 2, 1),
        ("doc.pdf", 2, 2),
        ("sub/other.pdf", 1, 1),
        ("sub/other.pdf", 1, 2),
    ]
    assert summary.reused == 2 and summary.generated == 4 and summary.overall == 1.0

    again = EchoBackend()
    summary = run(stage, again)
    assert again.seen == [] and summary.reused == 6 and summary.generated == 0
    assert len(journal.read_text().splitlines()) == 6
    assert len((stage[3] / "generations.jsonl").read_text().splitlines()) == 6

    # Snakemake deletes a job's declared outputs before rerunning it (e.g. after a scoring code
    # change); the journal is not one of them, so nothing is generated again.
    import shutil

    shutil.rmtree(stage[3] / "candidate")
    for name in ("generations.jsonl", "scores.json", "scores.csv", "verdicts.jsonl", "summary.json"):
        (stage[3] / name).unlink()
    after_cleanup = EchoBackend()
    summary = run(stage, after_cleanup)
    assert after_cleanup.seen == [] and summary.reused == 6
    assert len(list((stage[3] / "candidate").rglob("*.md"))) == 6


def test_complete_rerun_does_not_build_a_backend(stage, monkeypatch):
    cfg, index, tests, out = stage
    run(stage, EchoBackend())
    from olmpipe.generate import journal as baseline

    def refuse(*args, **kwargs):
        raise AssertionError("no backend should be built when everything is finished")

    monkeypatch.setattr(baseline, "make_backend", refuse)
    summary = run_generation_and_scoring(cfg, "no-model", index, tests, out, model_name="m")
    assert summary.generated == 0


def test_a_second_job_on_the_run_folder_stops_at_once_naming_the_first(stage):
    """Issue 31 item 8 for the generation jobs: the journal has one writer; a second job (a
    --rerun-incomplete while the first runs) stops before reading or writing anything, naming the
    first job's pid, host and start time."""
    import os

    from olmpipe.procs import HolderLock
    from olmpipe.records.generations import JOURNAL_LOCK_NAME

    out = stage[3]
    out.mkdir(parents=True, exist_ok=True)
    with HolderLock(out / JOURNAL_LOCK_NAME), pytest.raises(EvalRunError, match=(
            rf"generations.journal.jsonl is being written by another job \(pid {os.getpid()} on .*, started ")):
        run(stage, EchoBackend())
    assert sorted(p.name for p in out.iterdir()) == [JOURNAL_LOCK_NAME]  # nothing read or written
    run(stage, EchoBackend())  # free again once the first is done


def test_truncated_journal_line_is_ignored(stage):
    with pytest.raises(Interrupted):
        run(stage, EchoBackend(interrupt_after=2))
    journal = stage[3] / "generations.journal.jsonl"
    with journal.open("a") as fh:
        fh.write('{"pdf": "doc.pdf", "page": 2, "rep')  # killed mid-write
    resumed = EchoBackend()
    run(stage, resumed)
    assert len(resumed.seen) == 4


def test_changed_settings_or_image_regenerate(stage):
    run(stage, EchoBackend())
    hotter = EchoBackend()
    run(stage, hotter, generation={"temperatures": [0.2, 0.8]})
    assert len(hotter.seen) == 6
    from PIL import Image

    Image.new("RGB", (50, 50), "black").save("results/rasterize/pages/doc/pg2.png")
    changed = EchoBackend()
    run(stage, changed, generation={"temperatures": [0.2, 0.8]})
    assert changed.seen == [("doc.pdf", 2, 1), ("doc.pdf", 2, 2)]
    fresh = EchoBackend()
    run(stage, fresh, generation={"temperatures": [0.2, 0.8]}, eval_run={"resume": False, "progress": False})
    assert len(fresh.seen) == 6


def test_more_repeats_generate_only_new_repeats(stage):
    run(stage, EchoBackend())
    more = EchoBackend()
    summary = run(stage, more, generation={"repeats": 3})
    assert sorted(more.seen) == [("doc.pdf", 1, 3), ("doc.pdf", 2, 3), ("sub/other.pdf", 1, 3)]
    assert summary.generations == 9


def test_pages_without_eos_are_failed_not_dropped(stage):
    summary = run(stage, EchoBackend(no_eos_keys={("doc.pdf", 1, 1), ("doc.pdf", 1, 2)}))
    assert summary.failed_no_eos == 2 and summary.generations == 6
    out = stage[3]
    assert (out / "candidate" / "doc_pg1_repeat1.md").read_text() == "la la la la"
    gens = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    failed = [g for g in gens if g["failed"]]
    assert len(failed) == 2 and all(g["failure"] == "no_eos" and len(g["attempts"]) == 2 for g in failed)
    assert failed[0]["front_matter"] is None and failed[0]["front_matter_error"]
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert not any(v["passed"] for v in verdicts if v["test_id"] == "t1")
    # a later run keeps them: they are finished, just bad
    again = EchoBackend()
    run(stage, again)
    assert again.seen == []


def test_backend_errors_fail_the_stage_and_are_retried_next_time(stage):
    bad = {("sub/other.pdf", 1, 1)}
    with pytest.raises(
        EvalRunError, match="1 of 6 generations failed in the echo|1 of 6 generations failed"
    ):
        run(stage, EchoBackend(fail_keys=bad))
    retry = EchoBackend()
    summary = run(stage, retry)
    assert retry.seen == [("sub/other.pdf", 1, 1)] and summary.failed_error == 0


def test_tolerated_backend_errors_are_recorded(stage):
    bad = {("sub/other.pdf", 1, 1)}
    summary = run(stage, EchoBackend(fail_keys=bad), generation={"max_error_fraction": 0.5})
    assert summary.failed_error == 1
    gens = [json.loads(line) for line in (stage[3] / "generations.jsonl").read_text().splitlines()]
    err = next(g for g in gens if g["failure"] == "error")
    assert err["error"] == "boom" and err["text"] == "" and err["finish_reason"] == "error"


def test_max_pages_limits_pages_and_tests(stage):
    summary = run(stage, EchoBackend(), eval_run={"max_pages": 1, "progress": False})
    assert summary.pages == 1
    verdicts = [json.loads(line) for line in (stage[3] / "verdicts.jsonl").read_text().splitlines()]
    assert {v["test_id"] for v in verdicts} == {"t1", "doc.pdf_baseline"}


def test_page_index_errors_name_file_and_line(stage, tmp_path):
    cfg, _, tests, out = stage
    bad = tmp_path / "bad.jsonl"

    def run_on(index):
        return run_generation_and_scoring(cfg, "no-model", index, tests, out, backend=EchoBackend(), model_name="m")

    bad.write_text('{"pdf": "a.pdf", "page": 1, "image": "x.png", "split": "eval"}\nnot json\n')
    with pytest.raises(EvalRunError, match=r"bad.jsonl:2: not valid JSON"):
        run_on(bad)
    bad.write_text('{"pdf": "a.pdf", "page": 0, "image": "x.png", "split": "eval"}\n')
    with pytest.raises(EvalRunError, match=r"bad.jsonl:1: page must be a positive integer"):
        run_on(bad)
    bad.write_text('{"pdf": "a.pdf", "page": 1, "split": "eval"}\n')
    with pytest.raises(EvalRunError, match=r"bad.jsonl:1: page entry misses image"):
        run_on(bad)
    with pytest.raises(EvalRunError, match="cannot read the page index"):
        run_on(tmp_path / "missing.jsonl")


def test_missing_inputs_are_clear_errors(stage):
    _, index, _, out = stage
    with pytest.raises(EvalRunError, match="no \\*.jsonl test files"):
        load_eval_tests(out / "nowhere", read_page_index(index, split="eval"))
    Path("results/rasterize/pages/doc/pg1.png").unlink()
    with pytest.raises(EvalRunError, match="pg1.png .*does not exist"):
        run(stage, EchoBackend())


def test_tests_follow_the_page_index_file_map(stage):
    """Entries with test_ids/jsonl_files (the validate contract) select files and ids, eval/ included."""
    _, index, tests, _ = stage
    (tests / "eval").mkdir()
    (tests / "eval" / "dataset.jsonl").write_text(
        json.dumps({"pdf": "doc.pdf", "page": 1, "id": "e1", "type": "present", "text": "Alpha"}) + "\n"
    )
    pages = sorted(read_page_index(index, split="eval"), key=lambda r: (r["pdf"], r["page"]))
    pages[0] = {**pages[0], "test_ids": ["e1"], "jsonl_files": {"e1": "eval/dataset.jsonl"}}
    pages[1] = {**pages[1], "test_ids": ["t2"], "jsonl_files": {"t2": "dataset.jsonl"}}
    pages = pages[:2]
    selected = load_eval_tests(tests, pages)
    assert [(t.id, t.source) for t in selected] == [
        ("t2", "dataset.jsonl"),
        ("e1", "dataset.jsonl"),
        ("doc.pdf_baseline", "baseline"),
    ]
    pages[0] = {**pages[0], "jsonl_files": {"e1": "eval/missing.jsonl"}}
    with pytest.raises(EvalRunError, match="eval/missing.jsonl"):
        load_eval_tests(tests, pages)


def test_candidate_name():
    assert candidate_name("headers_footers/x_pg1.pdf", 1, 2) == "headers_footers/x_pg1_pg1_repeat2.md"


def test_tiny_model_end_to_end_through_main(stage, tiny_model_dir, tmp_path):
    """The real transformers backend on the tiny random model: garbage text, well-formed files."""
    config = tmp_path / "config.yaml"
    config.write_text("generation:\n  max_new_tokens: 8\n  repeats: 1\n")
    code = main(
        [
            "--config",
            str(config),
            "--model",
            str(tiny_model_dir),
            "--out",
            "results/baseline/tiny",
            "--no-progress",
            "--threads",
            "1",
        ]
    )
    assert code == 0
    out = Path("results/baseline/tiny")
    gens = [json.loads(line) for line in (out / "generations.jsonl").read_text().splitlines()]
    assert len(gens) == 3 and all(g["backend"] == "transformers" for g in gens)
    assert all(1 <= g["completion_tokens"] <= 8 and g["finish_reason"] in {"stop", "length"} for g in gens)
    assert all(g["failed"] == (g["finish_reason"] != "stop") for g in gens)
    scores = json.loads((out / "scores.json").read_text())
    assert 0.0 <= scores["overall"] <= 1.0
    assert len(list((out / "candidate").rglob("*.md"))) == 3
    summary = json.loads((out / "summary.json").read_text())
    assert summary["model_seconds"] > 0 and summary["generated"] == 3


def test_main_reports_bad_inputs_with_exit_code(stage, tmp_path):
    assert (
        main(["--pages", str(tmp_path / "missing.jsonl"), "--out", str(tmp_path / "o"), "--no-progress"]) == 1
    )


# ---------------------------------------------------------------- pipeline-compatible mode

PIPELINE_ON = {"pipeline": {"enabled": True, "max_page_retries": 3, "rotation_retry": True,
                            "fallback": "empty", "max_context_tokens": 16384}}  # fmt: skip


TURNED = ANSWER.replace("is_rotation_valid: True", "is_rotation_valid: False").replace(
    "rotation_correction: 0", "rotation_correction: 90"
)


class TurnedPageBackend(EchoBackend):
    """Echo, except that a landscape page image is a turned portrait page: it asks for rotation 90."""

    def generate(self, requests, sampling):
        from PIL import Image

        out = super().generate(requests, sampling)
        for i, r in enumerate(requests):
            with Image.open(r.image) as img:
                if img.width > img.height:
                    out[i] = Completion(TURNED.format(text="sideways"), "stop", 5, 7)
        return out


def turn_page(path, angle=270):
    from PIL import Image

    with Image.open(path) as img:
        img.transpose({90: Image.Transpose.ROTATE_90, 270: Image.Transpose.ROTATE_270}[angle]).save(path)


def test_pipeline_mode_retries_rotated_pages_and_counts_them(stage):
    turn_page("results/rasterize/pages/doc/pg2.png")  # portrait 32x40 -> landscape 40x32
    backend = TurnedPageBackend(no_eos_keys={("sub/other.pdf", 1, 2)})
    summary = run(stage, backend, generation=PIPELINE_ON)
    out = stage[3]
    gens = {
        (g["pdf"], g["page"], g["repeat"]): g for g in map(json.loads, (out / "generations.jsonl").open())
    }
    turned = gens[("doc.pdf", 2, 1)]
    assert turned["pipeline"]["rotation"] == 90 and turned["pipeline"]["outcome"] == "accepted"
    assert [a["rotation"] for a in turned["attempts"]] == [0, 90] and turned["text"] == "Delta epsilon."
    assert (out / "rotated" / "doc" / "pg2_rot90.png").is_file()
    lost = gens[("sub/other.pdf", 1, 2)]
    assert lost["pipeline"]["fallback"] is True and lost["text"] == "" and len(lost["attempts"]) == 3
    assert gens[("doc.pdf", 1, 1)]["pipeline"]["fallback"] is False
    assert (out / "candidate" / "sub" / "other_pg1_repeat2.md").read_text() == ""
    counts = json.loads((out / "summary.json").read_text())["pipeline"]
    assert counts["rotation_retried"] == 2 and counts["rotated_by_angle"] == {"90": 2}
    assert counts["fallback"] == 1 and counts["accepted"] == 5 and summary.pipeline == counts
    assert read_pipeline_counts(out) == counts
    again = TurnedPageBackend()
    run(stage, again, generation=PIPELINE_ON)  # finished pipeline pages are reused, fallbacks included
    assert again.seen == []


def test_pipeline_mode_off_keeps_records_summary_and_fingerprint(stage):
    from olmpipe.generate import journal as baseline

    run(stage, EchoBackend())
    out = stage[3]
    assert "pipeline" not in json.loads((out / "summary.json").read_text())
    assert all("pipeline" not in json.loads(line) for line in (out / "generations.jsonl").open())
    assert not (out / "rotated").exists() and read_pipeline_counts(out) is None
    cfg = stage[0]["generation"]
    off = baseline.generation_fingerprint(cfg, "m")
    assert off == baseline.decoding_fingerprint(
        baseline.DecodingSettings.from_config(cfg), baseline.backend_identity(cfg, "m"),
        {"code": rule_code_version("generations")},
    )  # fmt: skip
    assert baseline.generation_fingerprint({**cfg, **PIPELINE_ON}, "m") != off
    switched = EchoBackend()
    run(stage, switched, generation=PIPELINE_ON)  # turning the mode on regenerates everything
    assert len(switched.seen) == 6


def test_pipeline_mode_with_the_tiny_model_on_a_rotated_sample_page(stage, tiny_model_dir):
    """The transformers backend on a sample page rendered turned by 90 degrees with pypdfium2.

    The tiny model's answers are noise, so a wrapper reads the orientation of the image the real
    backend was given and puts a rotation answer in front of the real completion (token counts,
    timings and the image path are the backend's own). The page is retried on the re-rendered
    image; the other pages never get a valid answer and fall back to the PDF's text layer (page 2
    of a one-page PDF: an empty text and the reason).
    """
    import pypdfium2 as pdfium
    from PIL import Image

    from olmpipe.generate.transformers_backend import TransformersBackend
    from olmpipe.models.load import load_model_and_processor

    out = stage[3]
    sample = Path(__file__).resolve().parents[1] / "data/bench/olmocr-sample/pdfs/olmo2-pg4.pdf"
    (Path("b/pdfs/sub")).mkdir(parents=True)
    shutil_copy = __import__("shutil").copy
    shutil_copy(sample, "b/pdfs/doc.pdf")
    shutil_copy(sample, "b/pdfs/sub/other.pdf")
    doc = pdfium.PdfDocument("b/pdfs/doc.pdf")
    doc[0].render(scale=56 / 792, rotation=90).to_pil().save("results/rasterize/pages/doc/pg1.png")
    doc.close()
    model, processor = load_model_and_processor(tiny_model_dir, device="cpu")
    real = TransformersBackend(model, processor, batch_size=2)

    class Orienting(GenerationBackend):
        name = "transformers"

        def __init__(self):
            super().__init__()
            self.images = []

        def generate(self, requests, sampling):
            completions = real.generate(requests, sampling)
            out = []
            for r, c in zip(requests, completions, strict=True):
                with Image.open(r.image) as img:
                    landscape = img.width > img.height
                self.images.append((r.key, r.image, landscape))
                if (r.pdf, r.page) == ("doc.pdf", 1):
                    fm = ANSWER.format(text="Table 1 Composition").replace("rotation_correction: 0",
                                                                           "rotation_correction: 90")  # fmt: skip
                    text = (
                        fm.replace("is_rotation_valid: True", "is_rotation_valid: False") if landscape else fm
                    )
                    c = Completion(text, "stop", c.prompt_tokens, c.completion_tokens, c.seconds)
                out.append(c)
            return out

    backend = Orienting()
    pipeline = {**PIPELINE_ON["pipeline"], "max_page_retries": 2, "fallback": "pdfium"}
    summary = run(stage, backend, generation={"max_new_tokens": 4, "repeats": 1, "pipeline": pipeline},
                  eval_run={"progress": False})  # fmt: skip
    gens = [json.loads(line) for line in (out / "generations.jsonl").open()]
    turned = gens[0]
    assert [a["rotation"] for a in turned["attempts"]] == [0, 90] and turned["pipeline"]["rotation"] == 90
    seen = [(image, landscape) for key, image, landscape in backend.images if key == ("doc.pdf", 1, 1)]
    assert seen[0] == ("results/rasterize/pages/doc/pg1.png", True)
    assert seen[1][0] == str(out / "rotated" / "doc" / "pg1_rot90.png") and seen[1][1] is False
    with Image.open(seen[1][0]) as img:
        assert img.height > img.width  # the backend encoded the page turned upright
    assert turned["prompt_tokens"] > 0 and turned["text"] == "Table 1 Composition"
    assert "has no page 2" in gens[1]["pipeline"]["fallback_error"] and gens[1]["text"] == ""
    noise = gens[2]  # the tiny model's own answers: never a valid front matter
    assert len(noise["attempts"]) == 2 and noise["pipeline"]["fallback"] is True
    assert "3.71T" in noise["text"] and noise["pipeline"]["fallback_source"] == "pdfium"
    assert summary.pipeline["rotation_retried"] == 1 and summary.pipeline["fallback"] == 2


class OneLetterBackend(EchoBackend):
    """Answers every page with the front matter and the letter "a"."""

    def generate(self, requests, sampling):
        self.seen += [r.key for r in requests]
        return [Completion(ANSWER.format(text="a"), "stop", 5, 7, 0.01) for _ in requests]


def test_scores_report_the_short_answer_guard_beside_olmocr_bench(stage):
    """An answer of one letter passes every present test whose text holds it (olmocr #461): the
    olmOCR-Bench score counts those passes, the guarded score beside it in scores.json, scores.csv,
    summary.json and each verdict line does not."""
    out = stage[3]
    summary = run(stage, OneLetterBackend())
    scores = json.loads((out / "scores.json").read_text())
    guarded = scores["short_answer_guard"]
    assert scores["by_type"]["present"] == 1.0 and guarded["by_type"]["present"] == 0.0
    assert guarded["overall"] < scores["overall"] == summary.overall
    assert summary.overall_guarded == guarded["overall"]
    assert json.loads((out / "summary.json").read_text())["overall_guarded"] == guarded["overall"]
    rows = {(r["scope"], r["name"]): r for r in csv.DictReader((out / "scores.csv").open())}
    assert float(rows[("overall", "overall")]["guarded_score"]) == pytest.approx(guarded["overall"])
    assert float(rows[("type", "present")]["score"]) == 1.0 and float(rows[("type", "present")]["guarded_score"]) == 0.0
    verdicts = [json.loads(line) for line in (out / "verdicts.jsonl").read_text().splitlines()]
    assert {v["short_answer"] for v in verdicts if v["type"] == "present"} == {True}
    assert not any(v["short_answer"] for v in verdicts if v["type"] != "present")
