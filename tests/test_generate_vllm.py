"""olmpipe.generate.vllm_backend at its boundary with a fake engine, and for real with vLLM's CPU build.

The stand-ins below use vLLM's own names and fields (``RequestOutput.prompt_token_ids``,
``RequestOutput.outputs``, ``CompletionOutput.text/token_ids/finish_reason``, ``SamplingParams``
keyword arguments), so the backend code path is the one that runs against the real engine.

The tests marked ``vllm`` run the baseline stage (``python -m olmpipe.evaluate.baseline``, as the workflow's
``shell:`` rule does) with the real engine on the embedded tiny model and pages of the bundled
bench; they are skipped where vllm is not importable (the main environment). Run them in the
environment of ``scripts/setup.sh --vllm`` (docs/vllm.md)::

    .venv-vllm/bin/python -m pytest tests/test_generate_vllm.py -m vllm
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

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
                (
                    "---\nprimary_language: en\nis_rotation_valid: True\n"
                    "rotation_correction: 0\nis_table: False\nis_diagram: False\n"
                    "---\nHello"
                ),
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
    expected = {
        "model": str(tiny_model_dir),
        "gpu_memory_utilization": 0.5,
        "max_model_len": 4096,
        "tensor_parallel_size": 1,
        "dtype": "auto",
        "seed": 0,
        "limit_mm_per_prompt": {"image": 1, "video": 0},
    }
    assert {k: engine.init_kwargs[k] for k in expected} == expected


def test_cpu_engine_is_eager_with_a_bounded_kv_cache():
    """Without a GPU, vLLM's CPU build would reserve 90% of the machine's memory and compile."""
    from olmpipe.config import load_config

    gen = load_config(overrides={"generation": {"vllm": {"cpu_kv_cache_gb": 0.5}}})["generation"]
    cpu = engine_kwargs("m", gen, cuda=False)
    assert cpu["enforce_eager"] is True and cpu["kv_cache_memory_bytes"] == 2**29
    gpu = engine_kwargs("m", gen, cuda=True)
    assert gpu["enforce_eager"] is False and "kv_cache_memory_bytes" not in gpu
    gen["vllm"]["enforce_eager"] = False
    assert engine_kwargs("m", gen, cuda=False)["enforce_eager"] is False


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


def test_workflow_settings_reach_the_stage_entry_points(tmp_path):
    """The generation rules pass their config sections as ``--settings`` JSON (shell:, not script:)."""
    from olmpipe.config import ConfigError, config_from_settings
    from olmpipe.evaluate.baseline import main as baseline_main

    cfg = config_from_settings(json.dumps({"generation": {"backend": "vllm", "repeats": 3}}), {"eval_run": {}})
    assert cfg["generation"]["backend"] == "vllm" and cfg["generation"]["repeats"] == 3
    assert cfg["generation"]["vllm"]["cpu_kv_cache_gb"] == 1  # schema defaults fill the rest
    with pytest.raises(ConfigError, match="not valid JSON"):
        config_from_settings("{generation")
    with pytest.raises(ConfigError, match="JSON object"):
        config_from_settings("[1]")
    assert baseline_main(["--settings", '{"generation": {"repeats": 0}}', "--out", str(tmp_path / "o")]) == 2


# ---------------------------------------------------------------- the real engine (vLLM's CPU build)

SAMPLE = Path(__file__).resolve().parents[1] / "data" / "bench" / "olmocr-sample"
LADDER = [0.1, 0.5, 0.9]
REAL_GENERATION = {
    "max_new_tokens": 12,
    "temperatures": LADDER,
    "repeats": 2,
    "batch_size": 8,
    "max_error_fraction": 0.5,  # the unreadable page's two generations fail in the backend
    "vllm": {"dtype": "float32", "max_model_len": 4096, "cpu_kv_cache_gb": 0.5},
    "transformers": {"dtype": "float32", "device": "cpu"},
}
needs_vllm = pytest.mark.skipif(importlib.util.find_spec("vllm") is None, reason="vllm is not installed")


@pytest.fixture(scope="module")
def bench_stage(tmp_path_factory):
    """Three rendered pages of the bundled bench with their tests, plus one unreadable page image."""
    import pypdfium2 as pdfium

    from olmpipe.rasterize import render_page

    root = tmp_path_factory.mktemp("vllm-stage")
    rows = [json.loads(x) for x in (SAMPLE / "dataset.jsonl").read_text(encoding="utf-8").splitlines() if x]
    keys = sorted({(r["pdf"], r["page"]) for r in rows if r["type"] != "math"})[:4]
    entries = []
    for i, (pdf, page) in enumerate(keys):
        image = root / "pages" / f"p{i}.png"
        image.parent.mkdir(parents=True, exist_ok=True)
        if i == len(keys) - 1:
            image.write_bytes(b"not a png")  # a page that fails in the backend: recorded, not dropped
        else:
            doc = pdfium.PdfDocument(SAMPLE / "pdfs" / pdf)
            render_page(doc[page - 1], 512).save(image)
            doc.close()
        entries.append({"pdf": pdf, "page": page, "image": str(image), "split": "eval", "bench_dir": str(SAMPLE)})
    (root / "pages.jsonl").write_text("".join(json.dumps(e) + "\n" for e in entries), encoding="utf-8")
    tests = root / "tests"
    tests.mkdir()
    kept = [r for r in rows if (r["pdf"], r["page"]) in set(keys)]
    (tests / "dataset.jsonl").write_text("".join(json.dumps(r) + "\n" for r in kept), encoding="utf-8")
    return root, keys


def run_stage(stage, model, backend, out, seed=0):
    """``python -m olmpipe.evaluate.baseline`` in a fresh process, as the workflow's shell: rule runs it."""
    root, _ = stage
    settings = {
        "generation": {**REAL_GENERATION, "backend": backend, "seed": seed},
        "eval_run": {"resume": False, "progress": False},
    }
    cmd = [sys.executable, "-m", "olmpipe.evaluate.baseline", "--settings", json.dumps(settings), "--model", str(model),
           "--pages", str(root / "pages.jsonl"), "--tests", str(root / "tests"), "--out", str(out),
           "--threads", "1"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return [json.loads(x) for x in (out / "generations.jsonl").read_text(encoding="utf-8").splitlines()]


def files(folder):
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl"])
def test_baseline_stage_through_vllm_matches_transformers_layout(arch, bench_stage, tiny_models, tmp_path):
    """Same files and record fields as the transformers backend; ladder, repeats, seeds, failures; on
    the tiny Qwen2.5-VL and the tiny Qwen3-VL."""
    tiny_model_dir = tiny_models(arch)
    reference = run_stage(bench_stage, tiny_model_dir, "transformers", tmp_path / "hf")
    first = run_stage(bench_stage, tiny_model_dir, "vllm", tmp_path / "vllm")
    assert files(tmp_path / "vllm") == files(tmp_path / "hf")
    assert [set(r) for r in first] == [set(r) for r in reference]

    def key(r):
        return r["pdf"], r["page"], r["repeat"]

    assert [key(r) for r in first] == [key(r) for r in reference]
    assert {r["backend"] for r in first} == {"vllm"} and {r["repeat"] for r in first} == {1, 2}

    _, keys = bench_stage
    broken = [r for r in first if (r["pdf"], r["page"]) == keys[-1]]
    assert len(broken) == 2 and all(r["failed"] and r["failure"] == "error" for r in broken)
    assert "p3.png" in broken[0]["attempts"][-1]["error"]
    generated = [r for r in first if r not in broken]
    assert len(generated) == 6 and all(r["completion_tokens"] >= 1 for r in generated)
    for r in generated:  # each attempt at the next rung; only an answer without EOS is retried
        temps = [a["temperature"] for a in r["attempts"]]
        assert temps == LADDER[: len(temps)]
        assert all(a["finish_reason"] == "length" for a in r["attempts"][:-1])
        assert r["failed"] == (r["attempts"][-1]["finish_reason"] != "stop")
    assert any(len(r["attempts"]) == len(LADDER) for r in generated)  # the random model rarely stops

    again = run_stage(bench_stage, tiny_model_dir, "vllm", tmp_path / "vllm-again")

    def answers(records):
        return [(r["raw"], [(a["seed"], a["completion_tokens"]) for a in r["attempts"]]) for r in records]

    assert answers(again) == answers(first)  # per-request seeds: the same text on a new engine
    by_repeat = {key(r): r["raw"] for r in generated}
    assert any(by_repeat[(p, g, 1)] != by_repeat[(p, g, 2)] for p, g in keys[:-1])  # repeats differ

    from olmpipe.bench import read_candidate

    candidate = read_candidate(tmp_path / "vllm" / "candidate", [p for p, _ in keys])
    assert len(candidate) == 8
    scores = json.loads((tmp_path / "vllm" / "scores.json").read_text())
    assert 0.0 <= scores["overall"] <= 1.0


SYNC_SCRIPT = '''
import json, os, sys
import torch

def top5(pairs):
    return {int(k): round(float(v), 3) for k, v in pairs}

def main(tiny, fixed):
    os.environ.update(RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                      MASTER_PORT=sys.argv[3])
    from olmpipe.compat.vllm import drop_stale_caches, keep_cpu_expert_weights, keep_cpu_linear_weights
    if fixed:
        keep_cpu_linear_weights()
        keep_cpu_expert_weights()
    from PIL import Image
    from vllm import LLM, SamplingParams
    from olmpipe.models.load import load_model_and_processor
    # TRL 1.16's colocate engine (generation/vllm_generation.py), in one process
    llm = LLM(model=tiny, dtype="float32", enforce_eager=True, limit_mm_per_prompt={"image": 1, "video": 0},
              kv_cache_memory_bytes=2**29, max_model_len=4096, seed=0,
              distributed_executor_backend="external_launcher")
    hf, proc = load_model_and_processor(tiny)
    text = proc.apply_chat_template([{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Read."}]}],
                                    tokenize=False, add_generation_prompt=True)
    image = Image.new("RGB", (400, 500), (200, 220, 240))
    def engine():
        out = llm.generate([{"prompt": text, "multi_modal_data": {"image": image}}],
                           sampling_params=SamplingParams(temperature=0.0, max_tokens=1, logprobs=5), use_tqdm=False)
        lp = out[0].outputs[0].logprobs[0]
        return top5(sorted(((k, v.logprob) for k, v in lp.items()), key=lambda kv: -kv[1])[:5])
    def reference():
        with torch.no_grad():
            logits = hf(**proc(text=[text], images=[image], return_tensors="pt")).logits[0, -1]
        top = torch.topk(torch.log_softmax(logits.float(), -1), 5)
        return top5(zip(top.indices.tolist(), top.values.tolist()))
    result = {"before": [engine(), reference()]}
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():  # a training step's worth of change, vision tower included
        for p in hf.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.5 * (p.std() if p.numel() > 1 else 1))
    failed = []
    model = llm.llm_engine.model_executor.driver_worker.model_runner.model
    params = ((name, param.data) for name, param in hf.named_parameters())  # as TRL's sync_weights does
    if fixed:  # ResumableGRPOTrainer: Qwen3-VL-MoE experts in the layout vLLM loads
        from olmpipe.models.architectures import published_layout
        params = published_layout(params)
    for name, tensor in params:
        try:
            model.load_weights([(name, tensor)])
        except (AttributeError, AssertionError, RuntimeError) as exc:
            failed.append(f"{name}: {exc}")
    if fixed:
        drop_stale_caches(llm)
    else:
        llm.reset_prefix_cache()  # all TRL 1.16 does
    result.update(after=[engine(), reference()], failed=failed)
    print("RESULT " + json.dumps(result))

if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2] == "fixed")
'''


def same_top5(a, b, tol=2e-3):
    """The same five most likely next tokens with log-probabilities within ``tol`` (printed rounded)."""
    return a.keys() == b.keys() and all(abs(a[k] - b[k]) <= tol for k in a)


def run_sync(tmp_path, tiny, mode):
    import socket

    with socket.socket() as sock:  # a free port for the engine's one-process torch.distributed group
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    script = tmp_path / "sync_check.py"
    script.write_text(SYNC_SCRIPT, encoding="utf-8")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
    proc = subprocess.run([sys.executable, str(script), str(tiny), mode, str(port)], capture_output=True,
                          text=True, timeout=600, env=env, check=False)
    assert proc.returncode == 0, proc.stderr[-4000:]
    line = next(x for x in proc.stdout.splitlines() if x.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
def test_colocated_weight_sync_reaches_generation_on_cpu(tiny_model_dir, tmp_path):
    """TRL's colocate sync on vLLM's CPU build: stale without the fix, exact with it (docs/vllm.md)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the repacking this guards against is in vLLM's CPU build")
    stock = run_sync(tmp_path, tiny_model_dir, "stock")
    engine, reference = stock["before"]
    assert same_top5(engine, reference)  # the same model before any sync
    assert any("visual" in f for f in stock["failed"])  # the failure TRL meets
    assert not same_top5(*stock["after"])  # ... and the engine no longer matches the model

    fixed = run_sync(tmp_path, tiny_model_dir, "fixed")
    engine, reference = fixed["after"]
    assert fixed["failed"] == [] and same_top5(engine, reference)  # every weight, vision tower included
    assert not same_top5(engine, fixed["before"][0])


@pytest.mark.vllm
@pytest.mark.slow
@needs_vllm
@pytest.mark.parametrize("arch", ["qwen3_vl", "qwen3_vl_moe"])
def test_qwen3_vl_runs_in_vllm_and_follows_the_weight_sync(arch, tiny_models, tmp_path):
    """vLLM's CPU build runs the tiny Qwen3-VL and Qwen3-VL-MoE: the engine's next-token log-probs
    equal transformers' on the same page before and after a TRL-style weight sync (experts included:
    their layout is what vLLM reads, olmpipe.models.architectures.published_layout)."""
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        pytest.skip("the repacking the fixed sync avoids is in vLLM's CPU build")
    fixed = run_sync(tmp_path, tiny_models(arch), "fixed")
    engine, reference = fixed["before"]
    assert same_top5(engine, reference)  # vLLM reads the folder as transformers does
    engine, reference = fixed["after"]
    assert fixed["failed"] == [] and same_top5(engine, reference)
    assert not same_top5(engine, fixed["before"][0])
