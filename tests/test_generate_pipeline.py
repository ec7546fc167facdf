"""olmpipe.generate.pipeline: olmOCR's process_page logic on fake backends that look at the page image."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from PIL import Image

from olmpipe.generate import DecodingSettings, GenerationError, GenerationRecord, iter_generate, make_requests
from olmpipe.generate.base import Completion, GenerationBackend
from olmpipe.generate.pipeline import (
    PipelineMode,
    PipelineSettings,
    fallback_text,
    ladder_temperature,
    pipeline_counts,
)

SAMPLE_PDF = Path(__file__).resolve().parents[1] / "data/bench/olmocr-sample/pdfs/olmo2-pg4.pdf"
TRANSPOSE = {90: Image.Transpose.ROTATE_90, 180: Image.Transpose.ROTATE_180, 270: Image.Transpose.ROTATE_270}


def answer(text="Upright text", *, valid=True, correction=0):
    return (
        f"---\nprimary_language: en\nis_rotation_valid: {valid}\nrotation_correction: {correction}\n"
        f"is_table: False\nis_diagram: False\n---\n{text}"
    )


def upright_image() -> Image.Image:
    """An asymmetric page: a black block in the top-left corner of a portrait page."""
    img = Image.new("RGB", (40, 60), "white")
    img.paste((0, 0, 0), (2, 2, 14, 10))
    return img


class OrientationBackend(GenerationBackend):
    """A model that sees how its page is turned: it names the PIL rotation that makes it upright.

    ``step`` is the correction it asks for (default: the exact one); ``finish`` overrides the finish
    reason of every answer. Every request is kept in ``seen`` with the image's pixels.
    """

    name = "orientation"

    def __init__(self, upright: Image.Image, *, step=None, finish="stop", tokens=(5, 7)):
        super().__init__()
        self.upright = upright.tobytes()
        self.step, self.finish, self.tokens = step, finish, tokens
        self.seen = []

    def correction(self, img: Image.Image) -> int | None:
        for angle in (0, 90, 180, 270):
            turned = img if angle == 0 else img.transpose(TRANSPOSE[angle])
            if turned.tobytes() == self.upright:
                return angle
        return None

    def generate(self, requests, sampling):
        out = []
        for r, s in zip(requests, sampling, strict=True):
            with Image.open(r.image) as img:
                needed = self.correction(img.convert("RGB"))
            self.seen.append((r.key, r.image, s.temperature, needed))
            if needed == 0:
                text = answer()
            else:
                text = answer("sideways gibberish", valid=False, correction=self.step or needed or 0)
            out.append(Completion(text, self.finish, *self.tokens, 0.01))
        return out


class Scripted(GenerationBackend):
    """Answers from a list per attempt (the last one repeats)."""

    name = "scripted"

    def __init__(self, answers):
        super().__init__()
        self.answers, self.calls = answers, 0

    def generate(self, requests, sampling):
        completion = self.answers[min(self.calls, len(self.answers) - 1)]
        self.calls += 1
        return [completion for _ in requests]


@pytest.fixture()
def pages(tmp_path):
    """Four page images of one upright page: as is, and turned so that 90, 180, 270 restore it."""
    upright = upright_image()
    out = {}
    for angle in (0, 90, 180, 270):
        # the page as scanned: turned the other way, so that transposing by `angle` restores it
        scanned = upright if angle == 0 else upright.transpose(TRANSPOSE[(360 - angle) % 360])
        path = tmp_path / f"scan{angle}.png"
        scanned.save(path)
        out[angle] = str(path)
    return upright, out


def decode(backend, image, tmp_path, *, temperatures=(0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0), **kw):
    settings = DecodingSettings(max_new_tokens=64, temperatures=temperatures, top_p=1.0, seed=0,
                                repeats=1, batch_size=8)  # fmt: skip
    mode = PipelineMode(PipelineSettings(enabled=True, **kw), tmp_path / "rotated",
                        {"doc.pdf": str(SAMPLE_PDF)})  # fmt: skip
    requests = make_requests([{"pdf": "doc.pdf", "page": 1, "image": image}], 1)
    batches = list(iter_generate(backend, requests, settings, image_hashes={image: "h"}, model="m",
                                 fingerprint="fp", pipeline=mode))  # fmt: skip
    return batches[0][0]


def test_upright_page_is_accepted_on_the_first_attempt(pages, tmp_path):
    upright, images = pages
    backend = OrientationBackend(upright)
    rec = decode(backend, images[0], tmp_path)
    assert len(backend.seen) == 1 and rec.text == "Upright text" and not rec.failed
    assert rec.pipeline == {"outcome": "accepted", "path": "first", "rotation": 0, "rotation_attempts": 0,
                            "fallback": False, "fallback_source": None, "fallback_error": None}  # fmt: skip
    assert rec.attempts[0]["rotation"] == 0 and rec.attempts[0]["temperature"] == 0.1
    assert not (tmp_path / "rotated").exists()


@pytest.mark.parametrize("angle", [90, 180, 270])
def test_rotated_page_is_rerendered_and_retried(pages, tmp_path, angle):
    upright, images = pages
    backend = OrientationBackend(upright)
    rec = decode(backend, images[angle], tmp_path)
    # attempt 1 sees the scan and asks for `angle`; attempt 2 sees the transposed scan: upright
    assert [s[3] for s in backend.seen] == [angle, 0]
    assert backend.seen[1][1] == str(tmp_path / "rotated" / "doc" / f"pg1_rot{angle}.png")
    assert [s[2] for s in backend.seen] == [0.1, 0.1]  # the rotation retry is attempt 1 of the ladder
    assert rec.text == "Upright text" and not rec.failed and rec.failure is None
    assert rec.image == images[angle] and rec.image_sha256 == "h"  # the record names the original page
    assert rec.pipeline["outcome"] == "accepted" and rec.pipeline["path"] == "rotation"
    assert rec.pipeline["rotation"] == angle and rec.pipeline["rotation_attempts"] == 1
    assert [(a["rotation"], a["rotation_correction"], a["is_rotation_valid"]) for a in rec.attempts] == [
        (0, angle, False),
        (angle, 0, True),
    ]


def test_rotation_accumulates_over_retries(pages, tmp_path):
    """A model that always asks for 90 more reaches 270 on the third retry (pipeline.py:320)."""
    upright, images = pages
    backend = OrientationBackend(upright, step=90)
    rec = decode(backend, images[270], tmp_path)
    assert [a["rotation"] for a in rec.attempts] == [0, 90, 180, 270]
    assert [a["temperature"] for a in rec.attempts] == [0.1, 0.1, 0.2, 0.3]
    assert rec.pipeline["rotation"] == 270 and rec.pipeline["rotation_attempts"] == 3
    assert rec.text == "Upright text"


def test_rotation_retry_off_never_rotates_and_keeps_the_last_valid_answer(pages, tmp_path):
    upright, images = pages
    backend = OrientationBackend(upright)
    rec = decode(backend, images[90], tmp_path, max_page_retries=3, rotation_retry=False)
    assert [s[1] for s in backend.seen] == [images[90]] * 3
    assert rec.pipeline["outcome"] == "last_valid" and rec.pipeline["path"] == "retry"
    assert rec.text == "sideways gibberish" and not rec.failed


def test_rotation_never_fixed_keeps_the_last_valid_answer(pages, tmp_path):
    """Every answer says 'rotate by 0' but 'invalid': all attempts run, the last one is kept."""
    _, images = pages
    backend = Scripted([Completion(answer("tilted", valid=False, correction=0), "stop", 5, 7)])
    rec = decode(backend, images[0], tmp_path, max_page_retries=4)
    assert backend.calls == 4 and rec.pipeline["outcome"] == "last_valid" and rec.text == "tilted"
    assert [a["rotation"] for a in rec.attempts] == [0, 0, 0, 0]


def test_ladder_runs_to_its_last_temperature_and_falls_back_empty(pages, tmp_path):
    _, images = pages
    backend = Scripted([Completion(answer("loop loop"), "length", 5, 64)])
    rec = decode(backend, images[0], tmp_path, temperatures=(0.1, 0.5), max_page_retries=4)
    assert [a["temperature"] for a in rec.attempts] == [0.1, 0.5, 0.5, 0.5]
    assert rec.failed and rec.failure == "no_eos" and rec.text == "" and rec.raw.endswith("loop loop")
    assert rec.pipeline["fallback"] is True and rec.pipeline["fallback_source"] == "empty"


def test_fallback_reads_the_pdf_text_layer(pages, tmp_path):
    _, images = pages
    backend = Scripted([Completion("no front matter at all", "stop", 5, 7)])
    rec = decode(backend, images[0], tmp_path, max_page_retries=2, fallback="pdfium")
    assert rec.failed and rec.failure == "invalid" and rec.pipeline["outcome"] == "fallback"
    assert "3.71T" in rec.text and rec.text == fallback_text("pdfium", str(SAMPLE_PDF), 1)[0]
    assert rec.pipeline["fallback_error"] is None


@pytest.mark.skipif(shutil.which("pdftotext") is None, reason="poppler-utils not installed")
def test_fallback_pdftotext_is_the_pipelines_text():
    text, error = fallback_text("pdftotext", str(SAMPLE_PDF), 1)
    assert error is None and "Composition of the pretraining data" in text


def test_fallback_errors_are_recorded_not_raised(tmp_path):
    assert fallback_text("pdfium", str(tmp_path / "missing.pdf"), 1)[1].startswith("pdfium: PDF")
    assert "has no page 5" in fallback_text("pdfium", str(SAMPLE_PDF), 5)[1]
    broken = tmp_path / "broken.pdf"
    broken.write_bytes(b"%PDF-1.4 not really")
    text, error = fallback_text("pdfium", str(broken), 1)
    assert text == "" and error.startswith("pdfium cannot open")
    if shutil.which("pdftotext"):
        assert "pdftotext exited" in fallback_text("pdftotext", str(broken), 1)[1]


def test_backend_errors_everywhere_fall_back_as_error(pages, tmp_path):
    _, images = pages
    rec = decode(Scripted([Completion("", "error", error="boom")]), images[0], tmp_path, max_page_retries=3)
    assert rec.failure == "error" and rec.error == "boom" and rec.pipeline["fallback"]


def test_error_then_rotation_answers_do_not_start_a_rotation(pages, tmp_path):
    """After a first attempt without an answer, retries stay at rotation 0 (pipeline.py:334-336)."""
    _, images = pages
    backend = Scripted([Completion("", "error", error="boom"),
                        Completion(answer("x", valid=False, correction=90), "stop", 5, 7)])  # fmt: skip
    rec = decode(backend, images[0], tmp_path, max_page_retries=3)
    assert [a["rotation"] for a in rec.attempts] == [0, 0, 0] and rec.pipeline["path"] == "retry"
    assert rec.pipeline["outcome"] == "last_valid"


def test_answers_beyond_the_context_limit_are_not_valid(pages, tmp_path):
    _, images = pages
    backend = Scripted([Completion(answer(), "stop", 10, 7)])
    rec = decode(backend, images[0], tmp_path, max_page_retries=2, max_context_tokens=16)
    assert backend.calls == 2 and rec.pipeline["outcome"] == "fallback" and rec.failure == "invalid"
    assert decode(Scripted([Completion(answer(), "stop", 10, 6)]), images[0], tmp_path,
                  max_context_tokens=16).pipeline["outcome"] == "accepted"  # fmt: skip


def test_unreadable_image_for_rotation_is_an_error_attempt(pages, tmp_path):
    upright, images = pages

    class Vanishing(OrientationBackend):
        def generate(self, requests, sampling):
            out = super().generate(requests, sampling)
            Path(images[90]).write_bytes(b"not a png")  # the page disappears after the first answer
            return out

    rec = decode(Vanishing(upright), images[90], tmp_path, max_page_retries=2)
    assert rec.attempts[1]["finish_reason"] == "error" and "cannot rotate" in rec.attempts[1]["error"]
    assert rec.pipeline["outcome"] == "fallback"


def test_count_mismatch_is_a_generation_error(pages, tmp_path):
    class Short(Scripted):
        def generate(self, requests, sampling):
            return []

    with pytest.raises(GenerationError, match="returned 0 completions for 1"):
        decode(Short([]), pages[1][0], tmp_path)


def test_records_roundtrip_and_counts(pages, tmp_path):
    upright, images = pages
    recs = [decode(OrientationBackend(upright), images[a], tmp_path) for a in (0, 90, 180)]
    recs.append(
        decode(Scripted([Completion("junk", "length", 1, 1)]), images[0], tmp_path, max_page_retries=2)
    )
    for rec in recs:
        assert GenerationRecord.from_json(json.loads(json.dumps(rec.to_json()))) == rec
    counts = pipeline_counts(recs)
    assert counts == {"generations": 4, "accepted": 3, "rotation_retried": 2, "rotated": 2,
                      "rotated_by_angle": {"180": 1, "90": 1}, "last_valid": 0, "fallback": 1,
                      "fallback_errors": 0, "finished_on_attempt": {"1": 1, "2": 2}}  # fmt: skip


def test_plain_mode_records_keep_their_keys():
    rec = GenerationRecord(
        "a.pdf", 1, 1, "i.png", "h", "m", "b", "p", "fp", "t", "t", None, None, "stop", 1, 1, 0.1
    )
    assert "pipeline" not in rec.to_json() and pipeline_counts([rec]) is None


def test_settings_from_config_and_validation():
    from olmpipe.config import load_config

    default = PipelineSettings.from_config(load_config()["generation"])
    assert default == PipelineSettings() and not default.enabled and default.max_page_retries == 8
    recipe = load_config(SAMPLE_PDF.parents[4] / "config/olmocr2.yaml")["generation"]
    assert PipelineSettings.from_config(recipe).enabled
    assert list(recipe["temperatures"]) == [0.1, 0.1, 0.2, 0.3, 0.5, 0.8, 0.9, 1.0]
    with pytest.raises(ValueError, match="fallback"):
        PipelineSettings(fallback="ocr")
    assert ladder_temperature((0.1, 0.2), 0) == 0.1 and ladder_temperature((0.1, 0.2), 7) == 0.2
