"""The embedded tiny Qwen2.5-VL: builds offline, loads back with the real loading code, generates."""

import json

import pytest

torch = pytest.importorskip("torch")


def test_builds_a_loadable_hf_folder(tiny_model_dir):
    names = {p.name for p in tiny_model_dir.iterdir()}
    assert {"config.json", "model.safetensors", "tokenizer.json", "processor_config.json"} <= names
    spec = json.loads((tiny_model_dir / "olmpipe_tiny.json").read_text())
    assert spec["hidden_size"] == 64


def test_token_ids_agree_between_config_and_tokenizer(tiny_model_dir):
    from olmpipe.modelload import load_model_and_processor

    model, processor = load_model_and_processor(tiny_model_dir)
    tok = processor.tokenizer
    cfg = model.config
    assert cfg.image_token_id == tok.convert_tokens_to_ids("<|image_pad|>")
    assert cfg.video_token_id == tok.convert_tokens_to_ids("<|video_pad|>")
    assert cfg.vision_start_token_id == tok.convert_tokens_to_ids("<|vision_start|>")
    assert cfg.text_config.eos_token_id == tok.eos_token_id == tok.convert_tokens_to_ids("<|im_end|>")
    assert sum(cfg.text_config.rope_parameters["mrope_section"]) * 2 == (
        cfg.text_config.hidden_size // cfg.text_config.num_attention_heads
    )


def test_generates_from_an_image_prompt(tiny_model_dir):
    from PIL import Image

    from olmpipe.modelload import load_model_and_processor

    torch.set_num_threads(1)
    model, processor = load_model_and_processor(tiny_model_dir)
    messages = [{"role": "user", "content": [{"type": "text", "text": "Read."}, {"type": "image"}]}]
    prompt = processor.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert prompt.endswith("<|im_start|>assistant\n")
    page = Image.new("RGB", (996, 1288), "white")
    inputs = processor(text=[prompt], images=[page], return_tensors="pt")
    assert inputs["image_grid_thw"].prod().item() // 4 <= 256  # the tiny image budget holds
    out = model.generate(**inputs, max_new_tokens=8, do_sample=False)
    assert out.shape[1] > inputs["input_ids"].shape[1]


def test_same_seed_same_weights(tmp_path):
    from olmpipe.tinymodel import build_tiny_model

    a = build_tiny_model(tmp_path / "a", seed=3)
    b = build_tiny_model(tmp_path / "b", seed=3)
    assert (a / "model.safetensors").read_bytes() == (b / "model.safetensors").read_bytes()


def test_rejects_a_bad_shape(tmp_path):
    from olmpipe.tinymodel import build_tiny_model

    with pytest.raises(ValueError, match="hidden_size"):
        build_tiny_model(tmp_path / "bad", hidden_size=50)


def test_folder_is_loadable_by_vllm(tiny_model_dir):
    """What vLLM's CPU build needs (docs/vllm.md): text heads of 64 and the stock processor, video included."""
    config = json.loads((tiny_model_dir / "config.json").read_text())["text_config"]
    assert config["hidden_size"] // config["num_attention_heads"] == 64  # vLLM's CPU attention rejects 16
    assert sum(config["rope_parameters"]["mrope_section"]) == 32
    saved = json.loads((tiny_model_dir / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2_5_VLProcessor" and "video_processor" in saved
    tok = json.loads((tiny_model_dir / "tokenizer_config.json").read_text())
    assert tok.get("processor_class", "Qwen2_5_VLProcessor") == "Qwen2_5_VLProcessor"
    try:
        import torchvision  # noqa: F401  (the stock processor's video part needs it)
    except ImportError:
        return
    from transformers import AutoProcessor

    processor = AutoProcessor.from_pretrained(tiny_model_dir)
    assert type(processor).__name__ == "Qwen2_5_VLProcessor" and processor.video_processor is not None
