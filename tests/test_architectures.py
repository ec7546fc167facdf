"""olmpipe.models.architectures: which architecture a model folder is, and what it implies, checked against
the installed transformers classes (image processor, saved names, fused experts) on tiny models."""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path

import pytest
from support.pages import letter_page, processor_image_tokens

from olmpipe.models.architectures import (
    ARCHITECTURES,
    FUSED_EXPERTS,
    ImageBudget,
    UnsupportedArchitectureError,
    architecture_of,
    architecture_of_model,
    expert_tensor_to_hub,
    image_budget_of,
    model_problems,
    page_tokens,
    publish_expert_layout,
)

REPO = Path(__file__).resolve().parents[1]
ALL = sorted(ARCHITECTURES)


def test_architecture_by_model_type_or_class_name():
    assert architecture_of({"model_type": "qwen3_vl"}, "x").model_class == "Qwen3VLForConditionalGeneration"
    assert architecture_of({"architectures": ["Qwen3VLMoeForConditionalGeneration"]}, "x").moe
    assert architecture_of({"model_type": "qwen2_vl"}, "x").label == "Qwen2-VL"
    for key, arch in ARCHITECTURES.items():
        assert architecture_of({"model_type": key}, "x") is arch


@pytest.mark.parametrize("config", [
    {"model_type": "llava", "architectures": ["LlavaForConditionalGeneration"]},
    {"model_type": "qwen3_5", "architectures": ["Qwen3_5ForConditionalGeneration"]},
    {},
])
def test_unsupported_architecture_names_itself_and_the_supported_ones(config):
    with pytest.raises(UnsupportedArchitectureError) as info:
        architecture_of(config, "/models/x/config.json")
    message = str(info.value)
    assert message.startswith("/models/x/config.json: unsupported model architecture")
    assert str(config.get("model_type")) in message
    for arch in ARCHITECTURES.values():
        assert f"{arch.label} ({arch.key})" in message


def test_smart_resize_matches_transformers():
    """ImageBudget.resized is transformers' smart_resize, on random sizes and every budget."""
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import smart_resize

    rng = random.Random(0)
    budgets = [a.image_budget for a in ARCHITECTURES.values()] + [ImageBudget(16, 2, 16 * 1024, 64 * 1024)]
    for budget in budgets:
        for _ in range(300):
            h, w = rng.randint(20, 6000), rng.randint(20, 6000)
            if max(h, w) / min(h, w) > 200:
                continue
            assert budget.resized(h, w) == smart_resize(h, w, budget.factor, budget.min_pixels, budget.max_pixels)


@pytest.mark.parametrize(("arch_key", "expected"), [("qwen2_5_vl", 1656), ("qwen3_vl", 1240)])
def test_page_tokens_match_the_real_processor_on_a_1288_px_page(arch_key, expected):
    """A 1288 px letter page: 46 x 36 tokens of 28 px on Qwen2.5-VL, 40 x 31 of 32 px on Qwen3-VL
    (the published preprocessor settings), as the real processor expands the image placeholder."""
    page = letter_page(1288)
    assert page.size == (996, 1288)
    budget = ARCHITECTURES[arch_key].image_budget
    assert page_tokens(budget, 1288).image_tokens == expected
    assert processor_image_tokens(arch_key, budget, page) == expected


def test_a_folder_s_processor_settings_decide_its_budget(tiny_models):
    """The tiny Qwen3-VL's processor keeps 32 px tokens but at most 64 of them; its saved settings say so."""
    folder = tiny_models("qwen3_vl")
    budget = image_budget_of(folder, architecture_of_model(folder))
    assert (budget.patch_size, budget.merge_size, budget.max_pixels) == (16, 2, 64 * 32 * 32)
    page = letter_page(1288)
    assert processor_image_tokens("qwen3_vl", budget, page) == page_tokens(budget, 1288).image_tokens <= 64
    (folder.parent / "hub").mkdir(exist_ok=True)  # a hub-style preprocessor_config.json wins over defaults
    hub = folder.parent / "hub"
    (hub / "preprocessor_config.json").write_text(json.dumps(
        {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "merge_size": 2}))
    assert image_budget_of(hub, ARCHITECTURES["qwen3_vl"]) == ARCHITECTURES["qwen3_vl"].image_budget


@pytest.mark.parametrize("arch_key", ALL)
def test_saved_names_are_what_transformers_writes(arch_key, tiny_models, tmp_path):
    """save_pretrained stores every live tensor under Architecture.saved_name, and live_name maps it
    back (Qwen2/2.5-VL rename model.language_model/model.visual; Qwen3-VL keeps the live names)."""
    from safetensors import safe_open

    from olmpipe.models.load import load_model_and_processor

    folder = tiny_models(arch_key)
    arch = architecture_of_model(folder)
    model, _ = load_model_and_processor(folder)
    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        saved = set(fh.keys())
    live = set(model.state_dict()) - {"lm_head.weight"}  # tied to the embeddings, not saved
    assert {arch.saved_name(name) for name in live} == saved
    assert {arch.live_name(name) for name in saved} == live
    assert (saved == live) == (not arch.saved_prefixes)


@pytest.mark.parametrize("arch_key", ALL)
def test_module_prefixes_locate_language_model_and_vision_tower(arch_key, tiny_models):
    """LoRA targets: the language model's linear layers sit under language_prefix, the vision tower's
    under vision_prefix; Qwen3-VL-MoE's experts and router are parameters, not nn.Linear."""
    import torch

    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(tiny_models(arch_key))
    arch = ARCHITECTURES[arch_key]
    linears = {n for n, m in model.named_modules() if isinstance(m, torch.nn.Linear)}
    language = {n for n in linears if n.startswith(arch.language_prefix)}
    vision = {n for n in linears if n.startswith(arch.vision_prefix)}
    assert linears == language | vision | {"lm_head"}
    lm_names = {n.rsplit(".", 1)[1] for n in language}
    assert {"q_proj", "k_proj", "v_proj", "o_proj"} <= lm_names
    assert ({"gate_proj", "up_proj", "down_proj"} <= lm_names) == (not arch.moe)
    if arch.moe:
        params = dict(model.named_parameters())
        experts = [n for n in params if n.endswith(FUSED_EXPERTS)]
        assert experts and all(params[n].dim() == 3 and n.startswith(arch.language_prefix) for n in experts)
        assert not any(".experts." in n or n.endswith(".mlp.gate") for n in linears)


def test_moe_experts_are_saved_in_the_published_layout_and_read_back(tiny_models, tmp_path):
    """The tiny MoE stores its experts as published checkpoints do ([E, H, 2I], [E, I, H]); transformers
    reads them back exactly; what save_pretrained writes (the live layout) is converted once."""
    import torch
    from safetensors import safe_open

    from olmpipe.models.load import load_model_and_processor

    folder = tiny_models("qwen3_vl_moe")
    model, _ = load_model_and_processor(folder)
    live = dict(model.state_dict())
    with safe_open(str(folder / "model.safetensors"), framework="pt") as fh:
        stored = {n: fh.get_tensor(n) for n in fh.keys() if n.endswith(FUSED_EXPERTS)}  # noqa: SIM118
    assert stored
    for name, tensor in stored.items():
        assert torch.equal(tensor.transpose(1, 2), live[name])  # published = transposed live
    assert publish_expert_layout(folder) == 0  # already published: nothing to do

    model.save_pretrained(tmp_path / "saved")  # transformers 5.24 writes the live layout back
    assert publish_expert_layout(tmp_path / "saved") == len(stored)
    with safe_open(str(tmp_path / "saved" / "model.safetensors"), framework="pt") as fh:
        assert all(torch.equal(fh.get_tensor(n), t) for n, t in stored.items())
    assert publish_expert_layout(tiny_models("qwen3_vl")) == 0  # dense: nothing to convert

    square = torch.zeros(2, 4, 4)
    with pytest.raises(ValueError, match="cannot tell the layout"):
        expert_tensor_to_hub("x.mlp.experts.down_proj", square, (2, 4, 4))


def test_model_problems_name_an_unsupported_folder(tmp_path, tiny_models):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava",
                                                      "architectures": ["LlavaForConditionalGeneration"]}))
    [problem] = model_problems(tmp_path)
    assert problem.startswith(f"model.path: {tmp_path / 'config.json'}: unsupported model architecture "
                              "LlavaForConditionalGeneration (model_type 'llava')")
    assert model_problems(tiny_models("qwen3_vl")) == []
    assert model_problems("someone/not-downloaded") == []  # a hub id not in the cache: checked on load
    (tmp_path / "config.json").write_text("{oops")
    assert "unreadable model config" in model_problems(tmp_path)[0]


def test_load_config_stops_on_an_unsupported_model_folder(tmp_path):
    from olmpipe.config import ConfigError, load_config

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "idefics3"}))
    with pytest.raises(ConfigError, match=r"model.path: .*unsupported model architecture .*model_type 'idefics3'"
                                          r".*Qwen3-VL \(qwen3_vl\), Qwen3-VL-MoE \(qwen3_vl_moe\)"):
        load_config(overrides={"model": {"path": str(tmp_path)}})


def test_the_loader_refuses_an_unsupported_folder(tmp_path):
    from olmpipe.models.load import load_model_and_processor

    (tmp_path / "config.json").write_text(json.dumps({"model_type": "llava"}))
    with pytest.raises(UnsupportedArchitectureError, match="model_type 'llava'"):
        load_model_and_processor(tmp_path)


@pytest.mark.slow
def test_snakemake_stops_at_config_check_on_an_unsupported_model(tmp_path):
    """Acceptance: `snakemake` with model.path on a folder of another architecture stops before any
    job, with the message naming the architecture and the supported ones."""
    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    model = tmp_path / "llava"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llava",
                                                   "architectures": ["LlavaForConditionalGeneration"]}))
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--nolock",
           "-n", "train", "--config", f"model={{path: {model}, name: llava}}"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out[-3000:]
    assert "unsupported model architecture LlavaForConditionalGeneration (model_type 'llava')" in out, out[-3000:]
    assert "Qwen2.5-VL (qwen2_5_vl)" in out and "Job stats" not in out
