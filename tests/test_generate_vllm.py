"""olmpipe.generate.vllm_backend at its boundary: a fake engine stands in for vllm.LLM (no GPU, no vllm).

The stand-ins below use vLLM's own names and fields (``RequestOutput.prompt_token_ids``,
``RequestOutput.outputs``, ``CompletionOutput.text/token_ids/finish_reason``, ``SamplingParams``
keyword arguments), so the backend code path is the one that runs against the real engine.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, field

import pytest

from olmpipe.generate import DecodingSettings, decode_batch, make_requests
from olmpipe.generate.base import PageRequest, Sampling
from olmpipe.generate.vllm_backend import VLLMBackend, engine_kwargs
from olmpipe.prompts import PROMPT_V4_YAML


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: list[int]
    cumulative_logprob: float | None
    logprobs: None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


@dataclass
class RequestOutput:
    request_id: str
    prompt: str | None
    prompt_token_ids: list[int] | None
    prompt_logprobs: None
    outputs: list[CompletionOutput]
    finished: bool = True


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_tokens: int | None = 16
    seed: int | None = None


@dataclass
class FakeLLM:
    """Records every call; answers from ``replies`` (text, finish_reason), cycling."""

    init_kwargs: dict
    replies: list = field(
        default_factory=lambda: [
            (
                "---\nprimary_language: en\nis_rotation_valid: True\n"
                "rotation_correction: 0\nis_table: False\nis_diagram: False\n"
                "---\nHello",
                "stop",
            )
        ]
    )
    calls: list = field(default_factory=list)

    def generate(self, prompts, sampling_params=None, use_tqdm=True):
        self.calls.append({"prompts": prompts, "sampling_params": sampling_params, "use_tqdm": use_tqdm})
        out = []
        for i, _ in enumerate(prompts):
            text, reason = self.replies[(len(self.calls) - 1 + i) % len(self.replies)]
            out.append(
                RequestOutput(
                    str(i),
                    None,
                    list(range(100)),
                    None,
                    [CompletionOutput(0, text, list(range(7)), None, None, reason)],
                )
            )
        return out


@pytest.fixture()
def page(tmp_path):
    from PIL import Image

    path = tmp_path / "pg1.png"
    Image.new("RGB", (120, 160), "white").save(path)
    return str(path)


@pytest.fixture()
def backend(tiny_model_dir):
    from olmpipe.config import load_config

    cfg = load_config(
        overrides={
            "generation": {"backend": "vllm", "vllm": {"gpu_memory_utilization": 0.5, "max_model_len": 4096}}
        }
    )
    engines = []

    def factory(**kwargs):
        engines.append(FakeLLM(kwargs))
        return engines[-1]

    b = VLLMBackend.from_config(
        tiny_model_dir, cfg["generation"], engine_factory=factory, sampling_params_cls=SamplingParams
    )
    return b, engines[0]


def test_engine_built_from_config(backend, tiny_model_dir):
    _, engine = backend
    assert engine.init_kwargs == {
        "model": str(tiny_model_dir),
        "gpu_memory_utilization": 0.5,
        "max_model_len": 4096,
        "tensor_parallel_size": 1,
        "dtype": "auto",
        "seed": 0,
        "limit_mm_per_prompt": {"image": 1},
    }


def test_requests_carry_chat_prompt_image_and_sampling(backend, page):
    b, engine = backend
    completions = b.generate(
        [PageRequest("a.pdf", 1, 1, page), PageRequest("a.pdf", 1, 2, page)],
        [Sampling(50, 0.1, 0.9, 11), Sampling(50, 0.1, 0.9, 12)],
    )
    call = engine.calls[0]
    assert call["use_tqdm"] is False and len(call["prompts"]) == 2
    prompt = call["prompts"][0]
    assert prompt["prompt"].index(PROMPT_V4_YAML) < prompt["prompt"].index("<|vision_start|><|image_pad|>")
    assert prompt["prompt"].endswith("<|im_start|>assistant\n")
    assert prompt["multi_modal_data"]["image"].size == (120, 160)
    assert call["sampling_params"] == [
        SamplingParams(1, 0.1, 0.9, 50, 11),
        SamplingParams(1, 0.1, 0.9, 50, 12),
    ]
    assert [c.finish_reason for c in completions] == ["stop", "stop"]
    assert completions[0].prompt_tokens == 100 and completions[0].completion_tokens == 7
    assert completions[0].text.endswith("Hello")


def test_finish_reasons_map_and_ladder_runs_through_engine(backend, page):
    b, engine = backend
    engine.replies = [("loop loop", "length"), ("aborted", "abort")]
    settings = DecodingSettings(
        max_new_tokens=32, temperatures=(0.1, 0.5), top_p=1.0, seed=0, repeats=1, batch_size=8
    )
    records = decode_batch(
        b,
        make_requests([{"pdf": "a.pdf", "page": 1, "image": page}], 1),
        settings,
        image_hashes={},
        model="m",
        fingerprint="fp",
    )
    assert len(engine.calls) == 2
    assert [p.temperature for c in engine.calls for p in c["sampling_params"]] == [0.1, 0.5]
    rec = records[0]
    assert rec.backend == "vllm"
    assert [a["finish_reason"] for a in rec.attempts] == ["length", "error"]
    assert rec.failed and rec.failure == "no_eos" and rec.text == "loop loop"
    assert "abort" in rec.attempts[1]["error"]


def test_empty_outputs_and_unreadable_image(backend, page, tmp_path):
    b, engine = backend
    engine.generate = lambda prompts, sampling_params=None, use_tqdm=True: [
        RequestOutput("0", None, [1, 2], None, [])
    ]
    bad = tmp_path / "bad.png"
    bad.write_text("nope")
    out = b.generate(
        [PageRequest("x.pdf", 1, 1, str(bad)), PageRequest("a.pdf", 1, 1, page)],
        [Sampling(5, 0.1, 1.0, 0)] * 2,
    )
    assert out[0].finish_reason == "error" and "bad.png" in out[0].error
    assert out[1].finish_reason == "error" and "no output" in out[1].error


def test_without_vllm_the_default_engine_says_how_to_install(tiny_model_dir):
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed")
    from olmpipe.config import load_config

    cfg = load_config(overrides={"generation": {"backend": "vllm"}})
    with pytest.raises(ImportError, match="olmpipe\\[vllm\\]"):
        VLLMBackend.from_config(tiny_model_dir, cfg["generation"], sampling_params_cls=SamplingParams)


def test_engine_kwargs_follow_config():
    from olmpipe.config import load_config

    cfg = load_config(
        overrides={"generation": {"seed": 3, "vllm": {"tensor_parallel_size": 2, "dtype": "bfloat16"}}}
    )
    kwargs = engine_kwargs("m", cfg["generation"])
    assert kwargs["tensor_parallel_size"] == 2 and kwargs["dtype"] == "bfloat16" and kwargs["seed"] == 3


@pytest.mark.vllm
@pytest.mark.gpu
def test_real_vllm_engine_on_tiny_model(tiny_model_dir, page):
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from olmpipe.config import load_config

    cfg = load_config(
        overrides={
            "generation": {"backend": "vllm", "vllm": {"gpu_memory_utilization": 0.3, "max_model_len": 2048}}
        }
    )
    b = VLLMBackend.from_config(tiny_model_dir, cfg["generation"])
    out = b.generate([PageRequest("a.pdf", 1, 1, page)], [Sampling(16, 0.1, 1.0, 0)])
    assert out[0].finish_reason in {"stop", "length"}
