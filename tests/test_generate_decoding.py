"""olmpipe.generate.decoding: temperature ladder, repeats, seeds and failed pages, on a scripted backend."""

from __future__ import annotations

import json

import pytest

from olmpipe.generate import DecodingSettings, GenerationRecord, decode_batch, iter_generate, make_requests
from olmpipe.generate.base import Completion, GenerationBackend, PageRequest
from olmpipe.generate.decoding import decoding_fingerprint, request_seed

GOOD = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
    "is_diagram: False\n---\nHello"
)


class ScriptedBackend(GenerationBackend):
    """Answers from a script: ``script[(pdf, page, repeat)]`` is the list of outcomes per attempt."""

    name = "scripted"

    def __init__(self, script):
        super().__init__()
        self.script = script
        self.calls = []

    def generate(self, requests, sampling):
        self.calls.append([(r.key, s) for r, s in zip(requests, sampling, strict=True)])
        out = []
        for r in requests:
            attempt = sum(r.key == k for call in self.calls for k, _ in call) - 1
            outcome = self.script.get(r.key, ["stop"])[
                min(attempt, len(self.script.get(r.key, ["stop"])) - 1)
            ]
            if outcome == "stop":
                out.append(Completion(GOOD, "stop", 10, 5, 0.01))
            elif outcome == "length":
                out.append(Completion(f"loop loop {attempt}", "length", 10, 64, 0.01))
            else:
                out.append(Completion("", "error", error="server said no"))
        return out


def settings(**kw):
    base = {
        "max_new_tokens": 64,
        "temperatures": (0.1, 0.5, 0.8),
        "top_p": 1.0,
        "seed": 0,
        "repeats": 2,
        "batch_size": 3,
    }
    base.update(kw)
    return DecodingSettings(**base)


def requests():
    return make_requests(
        [{"pdf": "a.pdf", "page": 1, "image": "a1.png"}, {"pdf": "b/c.pdf", "page": 2, "image": "c2.png"}], 2
    )


def run(backend, reqs, s):
    return decode_batch(backend, reqs, s, image_hashes={"a1.png": "h1"}, model="m", fingerprint="fp")


def test_make_requests_page_major_repeats_from_one():
    keys = [r.key for r in requests()]
    assert keys == [("a.pdf", 1, 1), ("a.pdf", 1, 2), ("b/c.pdf", 2, 1), ("b/c.pdf", 2, 2)]


def test_all_stop_first_attempt():
    backend = ScriptedBackend({})
    records = run(backend, requests(), settings())
    assert len(backend.calls) == 1
    assert all(not r.failed and r.finish_reason == "stop" and len(r.attempts) == 1 for r in records)
    assert records[0].text == "Hello" and records[0].front_matter["primary_language"] == "en"
    assert records[0].image_sha256 == "h1" and records[2].image_sha256 == ""
    assert all(s.temperature == 0.1 for _, s in backend.calls[0])


def test_ladder_retries_only_unfinished_at_higher_temperature():
    key = ("a.pdf", 1, 2)
    backend = ScriptedBackend({key: ["length", "length", "stop"]})
    records = run(backend, requests(), settings())
    assert [len(c) for c in backend.calls] == [4, 1, 1]
    assert [c[0][1].temperature for c in backend.calls] == [0.1, 0.5, 0.8]
    assert all(k == key for c in backend.calls[1:] for k, _ in c)
    rec = records[1]
    assert rec.key == key and not rec.failed and rec.finish_reason == "stop"
    assert [a["temperature"] for a in rec.attempts] == [0.1, 0.5, 0.8]
    assert [a["finish_reason"] for a in rec.attempts] == ["length", "length", "stop"]
    assert len({a["seed"] for a in rec.attempts}) == 3


def test_page_without_eos_is_failed_but_kept_with_last_text():
    key = ("b/c.pdf", 2, 1)
    records = run(ScriptedBackend({key: ["length"]}), requests(), settings())
    rec = records[2]
    assert rec.failed and rec.failure == "no_eos" and rec.finish_reason == "length"
    assert rec.text == "loop loop 2" and rec.front_matter is None
    assert "does not start with ---" in rec.front_matter_error
    assert len(rec.attempts) == 3 and rec.error is None


def test_backend_errors_become_failed_error_records():
    key = ("a.pdf", 1, 1)
    records = run(ScriptedBackend({key: ["error"]}), requests(), settings())
    rec = records[0]
    assert rec.failed and rec.failure == "error" and rec.error == "server said no" and rec.text == ""
    assert [a["error"] for a in rec.attempts] == ["server said no"] * 3


def test_error_then_length_keeps_text_as_no_eos():
    key = ("a.pdf", 1, 1)
    rec = run(ScriptedBackend({key: ["length", "error", "error"]}), requests(), settings())[0]
    assert rec.failure == "no_eos" and rec.text == "loop loop 0"


def test_iter_generate_batches_and_records_roundtrip_json():
    backend = ScriptedBackend({})
    batches = list(
        iter_generate(
            backend, requests(), settings(batch_size=3), image_hashes={}, model="m", fingerprint="fp"
        )
    )
    assert [len(b) for b in batches] == [3, 1]
    rec = batches[0][0]
    again = GenerationRecord.from_json(json.loads(json.dumps(rec.to_json())))
    assert again == rec


def test_record_from_json_names_missing_fields():
    with pytest.raises(ValueError, match="misses"):
        GenerationRecord.from_json({"pdf": "a.pdf"})


def test_seeds_stable_and_distinct():
    assert request_seed(0, ("a.pdf", 1, 1), 1) == request_seed(0, ("a.pdf", 1, 1), 1)
    seeds = {request_seed(0, ("a.pdf", 1, r), a) for r in (1, 2) for a in (1, 2)}
    assert len(seeds) == 4
    assert request_seed(1, ("a.pdf", 1, 1), 1) != request_seed(0, ("a.pdf", 1, 1), 1)


def test_fingerprint_ignores_throughput_knobs():
    a = decoding_fingerprint(settings(batch_size=1, repeats=1), {"backend": "x"}, {})
    assert a == decoding_fingerprint(settings(batch_size=64, repeats=5), {"backend": "x"}, {})
    assert a != decoding_fingerprint(settings(max_new_tokens=65), {"backend": "x"}, {})
    assert a != decoding_fingerprint(settings(), {"backend": "y"}, {})


def test_settings_validation():
    with pytest.raises(ValueError, match="at least one temperature"):
        settings(temperatures=())
    with pytest.raises(ValueError, match="negative"):
        settings(temperatures=(0.1, -1.0))


def test_completion_rejects_unknown_finish_reason():
    with pytest.raises(ValueError, match="finish_reason"):
        Completion("x", "eos")


def test_from_config_reads_generation_section():
    from olmpipe.config import load_config

    cfg = load_config(
        overrides={"generation": {"temperatures": [0.1, 0.1, 0.2, 0.3, 0.5, 0.8], "repeats": 3}}
    )
    s = DecodingSettings.from_config(cfg["generation"])
    assert s.temperatures == (0.1, 0.1, 0.2, 0.3, 0.5, 0.8) and s.repeats == 3


def test_backend_count_mismatch_is_an_error():
    class Short(ScriptedBackend):
        def generate(self, requests, sampling):
            return super().generate(requests, sampling)[:-1]

    from olmpipe.generate import GenerationError

    with pytest.raises(GenerationError, match="returned 3 completions for 4"):
        run(Short({}), requests(), settings(batch_size=4))


def test_page_request_key():
    assert PageRequest("x.pdf", 3, 2, "i.png").key == ("x.pdf", 3, 2)
