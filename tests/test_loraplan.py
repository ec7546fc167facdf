"""The memory plan of LoRA and QLoRA training (olmpipe/plan/lora.py, olmpipe.plan.memory): sizes checked
against real PEFT models, and the shipped one-GPU config on 80, 48 and 24 GiB GPUs."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from olmpipe.config import load_config
from olmpipe.plan import load_configs, load_shape, main, memory_plan
from olmpipe.plan.lora import adapter_parameters, linear_parameters, saved_module_parameters

REPO = Path(__file__).resolve().parents[1]
LORA_1GPU = REPO / "config" / "olmocr2-lora-1gpu.yaml"
SEVEN_B = "Qwen/Qwen2.5-VL-7B-Instruct"


def _peft(**changes):
    return {**load_config()["train"]["peft"], "enabled": True, **changes}


ARCHS = ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe"]


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("changes", [{}, {"vision": True, "r": 3}, {"dora": True, "target_modules": ["q_proj", "down_proj"]},
                                     {"modules_to_save": ["lm_head"]}, {"modules_to_save": ["merger"]}])
def test_adapter_size_is_what_peft_builds(arch, tiny_models, changes):
    """On every architecture (Qwen3-VL's own head size, MoE layers without MLP projections, each
    vision MLP's names and merger norm)."""
    from peft import get_peft_model

    from olmpipe.job.peft import lora_config
    from olmpipe.models.load import load_model_and_processor

    peft = _peft(**changes)
    model, _ = load_model_and_processor(tiny_models(arch), device="cpu")
    wrapped = get_peft_model(model, lora_config(peft, arch))
    trained = sum(p.numel() for p in wrapped.parameters() if p.requires_grad)
    shape = load_shape(tiny_models(arch))
    adapter, unknown = adapter_parameters(shape, peft)
    saved, unknown_saved = saved_module_parameters(shape, peft)
    assert not unknown and not unknown_saved
    assert adapter + saved == trained


@pytest.mark.parametrize("arch", ARCHS)
def test_quantized_linear_weights_are_every_linear_layer_but_lm_head(arch, tiny_models):
    """bitsandbytes quantizes nn.Linear: not Qwen3-VL-MoE's fused experts, which stay in the compute dtype."""
    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(tiny_models(arch), device="cpu")
    linear = sum(m.weight.numel() for n, m in model.named_modules()
                 if isinstance(m, torch.nn.Linear) and not n.endswith("lm_head"))
    assert linear_parameters(load_shape(tiny_models(arch))) == linear


def test_lora_has_no_reference_model_and_trains_only_the_adapter():
    cfg = load_configs([LORA_1GPU])
    lora = memory_plan(cfg, load_shape(SEVEN_B), 1)
    names = {t.name: t.gib for t in lora.train_terms}
    assert "reference model" not in names and cfg["train"]["grpo"]["beta"] > 0
    assert names["base weights (frozen)"] == pytest.approx(load_shape(SEVEN_B).parameters() * 2 / 2**30)
    assert names["optimizer states"] < 1 and names["vision activations"] == 0
    full = memory_plan(_full(cfg), load_shape(SEVEN_B), 1)
    assert full.train_total > lora.train_total + 60  # full training of the 7B on one GPU: ~16 B/param


def _full(cfg):
    import copy

    out = copy.deepcopy(cfg)
    out["train"]["peft"]["enabled"] = False
    return out


def _write(tmp: Path, text: str) -> str:
    path = tmp / "override.yaml"
    path.write_text(text)
    return str(path)


def test_the_one_gpu_lora_config_fits_80gb_with_the_terms_printed(capsys):
    """Acceptance: `olmpipe plan --configfile config/olmocr2-lora-1gpu.yaml` says fits, terms printed."""
    assert main(["--configfile", str(LORA_1GPU)]) == 0
    out = capsys.readouterr().out
    for term in ("base weights (frozen)", "adapter weights", "gradients", "optimizer states", "vLLM share (colocate)"):
        assert term in out
    assert "reference model" not in out and out.rstrip().endswith("fits")
    cfg = load_configs([LORA_1GPU])
    grpo = cfg["train"]["grpo"]  # the recipe's lengths and group size, one GPU, colocated vLLM
    assert (grpo["max_completion_length"], grpo["num_generations"], cfg["rasterize"]["longest_side"]) == (3000, 28, 1288)
    assert (grpo["vllm_mode"], cfg["resources"]["train"]["gpu"], cfg["train"]["peft"]["enabled"]) == ("colocate", 1, True)


def test_48gb_fits_as_shipped_and_24gb_with_qlora_without_vllm(tmp_path, capsys):
    """The smaller GPUs of docs/lora.md and the config's header: 48 GiB fits as shipped; 24 GiB does
    not (two bf16 copies: the trainer's and vLLM's) until QLoRA rolls out without vLLM."""
    mem48 = _write(tmp_path, "resources: {train: {gpu_memory_gb: 48}}\n")
    assert main(["--configfile", str(LORA_1GPU), mem48]) == 0
    capsys.readouterr()
    mem24 = _write(tmp_path, "resources: {train: {gpu_memory_gb: 24}}\n")
    assert main(["--configfile", str(LORA_1GPU), mem24]) == 1
    out = capsys.readouterr().out
    assert "train.peft.quantization: 4bit" in out and "vllm_gpu_memory_utilization" in out
    fix24 = _write(tmp_path, "resources: {train: {gpu_memory_gb: 24}}\n"
                             "train: {peft: {quantization: 4bit}, grpo: {use_vllm: false}}\n")
    assert main(["--configfile", str(LORA_1GPU), fix24]) == 0
    out = capsys.readouterr().out
    assert "(4bit)" in out and "generation KV cache" in out


def test_unknown_target_names_are_reported_not_silently_sized():
    adapter, unknown = adapter_parameters(load_shape(SEVEN_B), _peft(target_modules=["q_proj", "wqkv"]))
    assert unknown == ["wqkv"] and adapter > 0
