"""olmpipe.generate.openai_backend against a small chat-completions server on 127.0.0.1.

The server answers from a script of behaviours (a good answer, HTTP 500, a malformed body, a hang
past the client's timeout, ...), records what it received, and runs in a thread of the test.
"""

from __future__ import annotations

import base64
import json
import threading
import time
from pathlib import Path

import pytest
from support.localhttp import LocalHttpServer, QuietHandler

from olmpipe.generate import DecodingSettings, GenerationError, decode_batch, make_backend, make_requests
from olmpipe.generate.base import PageRequest, Sampling
from olmpipe.generate.openai_backend import OpenAIBackend
from olmpipe.prompts import PROMPT_V4_YAML

ANSWER = (
    "---\nprimary_language: en\nis_rotation_valid: True\nrotation_correction: 0\nis_table: False\n"
    "is_diagram: False\n---\nHello from the server"
)


class FakeServer(LocalHttpServer):
    """A chat-completions endpoint; ``script`` is consumed one behaviour per request (last one repeats)."""

    def __init__(self):
        self.script: list[str] = ["ok"]
        self.received: list[dict] = []
        self.lock = threading.Lock()
        owner = self

        class Handler(QuietHandler):
            def do_POST(self):
                body = self.rfile.read(int(self.headers["Content-Length"]))
                with owner.lock:
                    owner.received.append(
                        {"path": self.path, "headers": dict(self.headers), "body": json.loads(body)}
                    )
                    behaviour = owner.script.pop(0) if len(owner.script) > 1 else owner.script[0]
                try:
                    owner.respond(self, behaviour)
                except (BrokenPipeError, ConnectionResetError):
                    pass

        super().__init__(Handler)

    @property
    def url(self) -> str:
        return f"{self.base_url}/v1"

    @staticmethod
    def respond(handler, behaviour):
        def send(status, payload: bytes):
            handler.send_response(status)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", str(len(payload)))
            handler.end_headers()
            handler.wfile.write(payload)

        if behaviour in ("ok", "length"):
            send(
                200,
                json.dumps(
                    {
                        "id": "x",
                        "object": "chat.completion",
                        "choices": [
                            {
                                "index": 0,
                                "message": {"role": "assistant", "content": ANSWER},
                                "finish_reason": "stop" if behaviour == "ok" else "length",
                            }
                        ],
                        "usage": {"prompt_tokens": 321, "completion_tokens": 12, "total_tokens": 333},
                    }
                ).encode(),
            )
        elif behaviour == "500":
            send(500, b'{"error": "internal"}')
        elif behaviour == "400":
            send(400, b'{"error": "bad request"}')
        elif behaviour == "malformed":
            send(200, b"<html>this is not json</html>")
        elif behaviour == "no_choices":
            send(200, b'{"choices": []}')
        elif behaviour == "deep":  # nesting Python's json parser gives up on with RecursionError
            send(200, b'{"choices": ' + b"[" * 200_000 + b"]" * 200_000 + b"}")
        elif behaviour == "hang":
            time.sleep(1.5)
            send(200, b"{}")
        else:
            raise AssertionError(behaviour)


@pytest.fixture()
def server():
    with FakeServer() as s:
        yield s


@pytest.fixture()
def page(tmp_path):
    from PIL import Image

    path = tmp_path / "pg1.png"
    Image.new("RGB", (40, 50), "white").save(path)
    return str(path)


def backend_for(server, **kw):
    sleeps = []
    options = {
        "api_key": "sk-test",
        "concurrency": 2,
        "retries": 2,
        "backoff_s": 0.5,
        "timeout_s": 5.0,
        "sleep": sleeps.append,
    }
    options.update(kw)
    return OpenAIBackend(server.url, "olmocr-test", **options), sleeps


def test_good_answer_and_request_format(server, page):
    backend, sleeps = backend_for(server)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(99, 0.3, 0.9, 7)])
    assert out[0].finish_reason == "stop" and out[0].text == ANSWER
    assert out[0].prompt_tokens == 321 and out[0].completion_tokens == 12 and out[0].seconds > 0
    request = server.received[0]
    assert request["path"] == "/v1/chat/completions"
    assert request["headers"]["Authorization"] == "Bearer sk-test"
    body = request["body"]
    assert body["model"] == "olmocr-test" and body["max_tokens"] == 99
    assert body["temperature"] == 0.3 and body["top_p"] == 0.9 and body["seed"] == 7
    content = body["messages"][0]["content"]
    assert body["messages"][0]["role"] == "user"
    assert content[0] == {"type": "text", "text": PROMPT_V4_YAML}
    url = content[1]["image_url"]["url"]
    assert url.startswith("data:image/png;base64,")
    assert base64.b64decode(url.split(",", 1)[1]) == Path(page).read_bytes()
    assert sleeps == [] and backend.model_seconds > 0


def test_500_is_retried_with_backoff(server, page):
    server.script = ["500", "500", "ok"]
    backend, sleeps = backend_for(server)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "stop"
    assert len(server.received) == 3 and sleeps == [0.5, 1.0]


def test_persistent_500_becomes_error_completion(server, page):
    server.script = ["500"]
    backend, sleeps = backend_for(server)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "error"
    assert "HTTP 500" in out[0].error and "after 3 tries" in out[0].error
    assert len(server.received) == 3 and sleeps == [0.5, 1.0]


@pytest.mark.parametrize("behaviour", ["malformed", "no_choices", "deep"])
def test_malformed_answer_is_retried_then_reported(server, page, behaviour):
    server.script = [behaviour, behaviour, behaviour]
    backend, _ = backend_for(server)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "error" and "malformed answer" in out[0].error
    server.script = [behaviour, "ok"]
    assert backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])[0].text == ANSWER


def test_timeout_is_retried(server, page):
    server.script = ["hang", "ok"]
    backend, sleeps = backend_for(server, timeout_s=0.3)
    t0 = time.perf_counter()
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "stop"
    assert time.perf_counter() - t0 < 1.4  # did not wait for the hanging answer
    assert sleeps == [0.5]


def test_timeout_everywhere_is_reported(server, page):
    server.script = ["hang"]
    backend, _ = backend_for(server, timeout_s=0.2, retries=1)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "error" and "no answer within 0.2s" in out[0].error


def test_client_error_is_not_retried(server, page):
    server.script = ["400"]
    backend, sleeps = backend_for(server)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "error" and "HTTP 400" in out[0].error
    assert len(server.received) == 1 and sleeps == []


def test_connection_refused_is_an_error_completion(page):
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    backend = OpenAIBackend(f"http://127.0.0.1:{port}/v1", "m", retries=1, backoff_s=0, sleep=lambda _: None)
    out = backend.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(10, 0.1, 1.0, 0)])
    assert out[0].finish_reason == "error" and "connection failed" in out[0].error


def test_concurrency_and_order(server, page):
    server.script = ["ok"]
    backend, _ = backend_for(server, concurrency=3)
    requests = [PageRequest("a.pdf", 1, r, page) for r in range(1, 6)]
    sampling = [Sampling(10, 0.1, 1.0, seed) for seed in range(5)]
    out = backend.generate(requests, sampling)
    assert len(out) == 5 and all(c.finish_reason == "stop" for c in out)
    assert sorted(r["body"]["seed"] for r in server.received) == [0, 1, 2, 3, 4]


def test_ladder_on_length_answers_through_server(server, page):
    server.script = ["length", "ok"]
    backend, _ = backend_for(server)
    settings = DecodingSettings(
        max_new_tokens=10, temperatures=(0.1, 0.8), top_p=1.0, seed=0, repeats=1, batch_size=4
    )
    rec = decode_batch(
        backend,
        make_requests([{"pdf": "a.pdf", "page": 1, "image": page}], 1),
        settings,
        image_hashes={},
        model="m",
        fingerprint="fp",
    )[0]
    assert [a["finish_reason"] for a in rec.attempts] == ["length", "stop"]
    assert [r["body"]["temperature"] for r in server.received] == [0.1, 0.8]
    assert (
        rec.text == "Hello from the server"
        and rec.front_matter["is_table"] is False
        and rec.backend == "openai"
    )


def test_from_config_reads_key_from_named_env_var(monkeypatch):
    from olmpipe.config import load_config

    cfg = load_config(
        overrides={
            "generation": {
                "backend": "openai",
                "openai": {"api_key_env": "OLMPIPE_TEST_KEY", "base_url": "http://h:1/v1/"},
            }
        }
    )
    monkeypatch.delenv("OLMPIPE_TEST_KEY", raising=False)
    with pytest.raises(GenerationError, match="OLMPIPE_TEST_KEY"):
        make_backend(cfg["generation"], "ignored")
    monkeypatch.setenv("OLMPIPE_TEST_KEY", "secret")
    backend = make_backend(cfg["generation"], "ignored")
    assert isinstance(backend, OpenAIBackend)
    assert backend.api_key == "secret" and backend.url == "http://h:1/v1/chat/completions"
