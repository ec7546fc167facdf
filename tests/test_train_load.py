"""Where and in which dtype a training job loads its policy (olmpipe/job/load.py; issue 31, item 11).

No rank holds the whole float32 model on its GPU where sharding was asked for: ZeRO-3 loads
partitioned (``zero.Init``; nothing moved afterwards), ZeRO-2 loads DeepSpeed's bf16 module instead
of float32 masters it would cast anyway, FSDP loads on the CPU and shards unit by unit (its reference
model too), and a run finished from its checkpoint loads on the CPU. The GPU side is proven by the
upstream lines cited in olmpipe/job/load.py; here the decisions, and (tests/test_train_deepspeed.py)
what the engine receives over gloo.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from olmpipe.config import load_config
from olmpipe.job.kinds import GRPO
from olmpipe.job.precision import resolve_precision
from olmpipe.job.setup import JobRequest, JobSetup

#: accelerate's launcher variables of each strategy (accelerate 1.15 utils/launch.py 305, 566-568).
LAUNCH_ENV = {
    "ddp": {},
    "zero2": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "2"},
    "zero3": {"ACCELERATE_USE_DEEPSPEED": "true", "ACCELERATE_DEEPSPEED_ZERO_STAGE": "3"},
    "fsdp": {"ACCELERATE_USE_FSDP": "true"},
}


def _setup(tmp_path: Path, device: str = "cuda", **train) -> JobSetup:
    cfg = load_config(overrides={"train": {"dtype": "bfloat16", **train}})
    request = JobRequest(cfg, 0, "m", "pages.jsonl", "tests", tmp_path / "run", tmp_path / "run" / "model")
    precision = resolve_precision(cfg["train"], device)
    return JobSetup(request, GRPO, device, precision, GRPO.knobs(cfg["train"], 0))


class _Loaded:
    """What olmpipe.models.load.load_model returns, as far as olmpipe.job.load reads it."""

    config = SimpleNamespace(model_type="qwen2_5_vl", tie_word_embeddings=False,
                             get_text_config=lambda: SimpleNamespace(tie_word_embeddings=False))

    def train(self):
        return self


def _loads(monkeypatch, setup: JobSetup, **kwargs) -> dict:
    """(dtype, device) olmpipe.job.load.load_model asks the model loader for."""
    import olmpipe.models.load as loads
    from olmpipe.job.load import load_model

    asked = {}

    def load(path, *, dtype=None, device=None, quantization_config=None):
        asked.update(dtype=dtype, device=device, quantized=quantization_config is not None)
        return _Loaded()

    monkeypatch.setattr(loads, "load_model", load)
    monkeypatch.setattr("olmpipe.job.load.local_rank", lambda: 3)
    monkeypatch.setattr("olmpipe.job.peft.check_model", lambda *a: None)
    monkeypatch.setattr("olmpipe.job.peft.lora_config", lambda *a: "lora")
    load_model(setup, processor=None, **kwargs)
    return asked


@pytest.mark.parametrize(("strategy", "dtype", "device"), [
    ("ddp", "float32", "cuda:3"),      # float32 masters under autocast, whole on the rank's GPU
    ("zero2", "bfloat16", "cuda:3"),   # DeepSpeed's bf16 module, not float32 masters it would cast
    ("zero3", "bfloat16", "cuda:3"),   # zero.Init partitions it in DeepSpeed's dtype
    ("fsdp", "float32", "cpu"),        # fully_shard moves it unit by unit
])
def test_the_policy_loads_as_the_strategy_takes_it(tmp_path, monkeypatch, strategy, dtype, device):
    for name in ("ACCELERATE_USE_DEEPSPEED", "ACCELERATE_DEEPSPEED_ZERO_STAGE", "ACCELERATE_USE_FSDP"):
        monkeypatch.delenv(name, raising=False)
    for name, value in LAUNCH_ENV[strategy].items():
        monkeypatch.setenv(name, value)
    asked = _loads(monkeypatch, _setup(tmp_path))
    assert (asked["dtype"], asked["device"]) == (dtype, device), strategy
    # LoRA: the frozen base in the compute dtype; under FSDP on the CPU too
    lora = _loads(monkeypatch, _setup(tmp_path, peft={"enabled": True}))
    assert (lora["dtype"], lora["device"]) == ("bfloat16", "cpu" if strategy == "fsdp" else "cuda:3")
    # a run finished from its checkpoint is only written: on the CPU, float32 masters, under any strategy
    published = _loads(monkeypatch, _setup(tmp_path), publish_only=True)
    assert (published["dtype"], published["device"]) == ("float32", "cpu")


def test_qlora_loads_onto_its_gpu_under_fsdp(tmp_path, monkeypatch):
    """bitsandbytes quantizes while it loads onto the GPU; such a model cannot be moved afterwards."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    monkeypatch.setattr("olmpipe.job.peft.quantization_config", lambda *a: object())
    asked = _loads(monkeypatch, _setup(tmp_path, peft={"enabled": True, "quantization": "4bit"}))
    assert asked["quantized"] and asked["device"] == "cuda:3"


def test_a_cpu_job_loads_on_the_cpu_whatever_the_strategy(tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_DEEPSPEED", "true")
    monkeypatch.setenv("ACCELERATE_DEEPSPEED_ZERO_STAGE", "2")
    setup = _setup(tmp_path, device="cpu", dtype="float32")
    asked = _loads(monkeypatch, setup)
    assert (asked["dtype"], asked["device"]) == ("float32", "cpu")


def test_a_zero3_partitioned_model_is_not_moved(monkeypatch, tmp_path, tiny_model_dir):
    """Under zero.Init the parameters are partitions on the rank's device already (marked ``ds_id``);
    models.load.load_model leaves them where DeepSpeed put them."""
    import torch

    import olmpipe.models.load as loads

    class Partitioned(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = torch.nn.Parameter(torch.zeros(0))
            self.w.ds_id = 7

        def to(self, *args, **kwargs):
            raise AssertionError("a ZeRO-3 partitioned model was moved")

    class ModelClass:
        @staticmethod
        def from_pretrained(path, dtype=None):
            return Partitioned()

    import transformers

    monkeypatch.setattr(transformers, "Qwen2_5_VLForConditionalGeneration", ModelClass, raising=False)
    model = loads.load_model(tiny_model_dir, dtype="float32", device="cuda:1")
    assert isinstance(model, Partitioned)


def test_fsdp_loads_the_reference_model_on_the_cpu(tmp_path, monkeypatch):
    """TRL 1.16 loads the reference with device_map="auto" outside DDP/DeepSpeed, spreading every
    rank's copy over all GPUs; under FSDP olmpipe asks for the CPU (prepare_fsdp shards it)."""
    import contextlib

    from olmpipe.job.steps import Prepared, TrainingSet
    from olmpipe.train.run import GRPOSteps

    setup = _setup(tmp_path, device="cpu", dtype="float32", grpo={"beta": 0.01})
    data = TrainingSet(dataset=list(range(8)), eval_dataset=None, summary={}, identity={})
    prepared = Prepared({}, {"weights": [1.0]})
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with contextlib.ExitStack() as stack:
        args = GRPOSteps().trainer_args(setup, prepared, data, [], stack)
    assert args.model_init_kwargs["device_map"] == "cpu" and args.model_init_kwargs["dtype"] == "float32"
    monkeypatch.delenv("ACCELERATE_USE_FSDP")
    with contextlib.ExitStack() as stack:
        args = GRPOSteps().trainer_args(setup, prepared, data, [], stack)
    assert "device_map" not in args.model_init_kwargs  # TRL's own choice elsewhere
