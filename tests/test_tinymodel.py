"""The embedded tiny model (Qwen2.5-VL by default, or Qwen2-VL, Qwen3-VL, Qwen3-VL-MoE): builds offline,
loads back with the real loading code, generates."""

import json

import pytest

torch = pytest.importorskip("torch")


def test_builds_a_loadable_hf_folder(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= names
    spec = json.loads((tiny_model_dir / "olmpipe_tiny.json").read_text())
    assert spec["hidden_size"] == 64


ARCHS = ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe"]


@pytest.mark.parametrize("arch", ARCHS)
def test_token_ids_agree_between_config_and_tokenizer(arch, tiny_models):
    from olmpipe.models.load import load_model_and_processor

    model, processor = load_model_and_processor(tiny_models(arch))
    tok = processor.tokenizer
    cfg = model.config
    assert cfg.model_type == arch
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.text_config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    head_dim = getattr(cfg.text_config, "head_dim", None) or (
        cfg.text_config.hidden_size // cfg.text_config.num_attention_heads)
    assert sum(cfg.text_config.rope_parameters["mrope_section"]) * 2 == head_dim == 64


@pytest.mark.parametrize("arch", ARCHS)
def test_generates_from_an_image_prompt(arch, tiny_models):
    from PIL import Image

    from olmpipe.models.load import load_model_and_processor

    torch.set_num_threads(1)
    model, processor = load_model_and_processor(tiny_models(arch))
    messages = [{"role": "user", "content": [{"type": "text", "text": "Read."}, {"type": "image"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    page = Image.new("RGB", (996, 1288), "white")
    inputs = processor(text=[prompt], images=[page], return_tensors="pt")
    assert inputs["image_grid_thw"].prod().item() // 4 <= 256  # the tiny image budget holds
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]


def test_same_seed_same_weights(tmp_path):
    from olmpipe.models.tiny import build_tiny_model

    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_image_mean_and_num_heads_are_options_of_the_tiny_model(tmp_path):
    """The options config/learn.yaml may set (model.tiny.image_mean, num_heads); the defaults build the
    same model as before."""
    from olmpipe.models.tiny import build_tiny_model

    plain = build_tiny_model(tmp_path / "plain", seed=1)
    other = build_tiny_model(tmp_path / "other", seed=1, image_mean=1.0, num_heads=4)
    processor = json.loads((other / "processor_config.json").read_text())
    assert processor["image_processor"]["image_mean"] == [1.0, 1.0, 1.0]
    assert json.loads((plain / "processor_config.json").read_text())["image_processor"]["image_mean"] != [1.0] * 3
    spec = json.loads((other / "olmpipe_tiny.json").read_text())
    assert (spec["image_mean"], spec["num_heads"]) == (1.0, 4)
    assert json.loads((other / "config.json").read_text())["text_config"]["num_attention_heads"] == 4
    assert json.loads((plain / "olmpipe_tiny.json").read_text())["num_heads"] == 1
    with pytest.raises(ValueError, match="num_heads"):
        build_tiny_model(tmp_path / "bad", num_heads=3)


def test_rejects_a_bad_shape(tmp_path):
    from olmpipe.models.tiny import build_tiny_model

    with pytest.raises(ValueError, match="hidden_size"):
        build_tiny_model(tmp_path / "bad", hidden_size=50)


@pytest.mark.parametrize(("arch", "stock"), [("qwen2_5_vl", "Qwen2_5_VLProcessor"), ("qwen3_vl", "Qwen3VLProcessor"),
                                           ("qwen3_vl_moe", "Qwen3VLProcessor")])
def test_folder_is_loadable_by_vllm(arch, stock, tiny_models):
    """What vLLM's CPU build needs (docs/vllm.md): text heads of 64 and the stock processor, video
    included; Qwen3-VL-MoE: the published config's norm_topk_prob and the experts' published layout."""
    folder = tiny_models(arch)
    config = json.loads((folder / "config.json").read_text())["text_config"]
    head_dim = config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"]
    assert head_dim == 64  # vLLM's CPU attention rejects 16
    assert sum(config["rope_parameters"]["mrope_section"]) == 32
    assert config.get("norm_topk_prob", True) is True
    saved = json.loads((folder / "processor_config.json").read_text())
    assert saved["processor_class"] == stock and "video_processor" in saved
    tok = json.loads((folder / "tokenizer_config.json").read_text())
    assert tok.get("processor_class", stock) == stock
    try:
        import torchvision  # noqa: F401  (the stock processor's video part needs it)
    except ImportError:
        return
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(folder)
    assert type(processor).__name__ == stock and processor.video_processor is not None
    assert processor.image_processor.patch_size == (16 if arch.startswith("qwen3") else 14)
