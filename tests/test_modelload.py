"""Tests of olmpipe.modelload: any Qwen2.5-VL folder loads with its processor, with or without torchvision."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


def test_dtype_by_name_and_eval_mode(tiny_model_dir):
    from olmpipe.modelload import load_model_and_processor

    model, processor = load_model_and_processor(tiny_model_dir, dtype="bfloat16", device="cpu")
    assert model.dtype == torch.bfloat16 and not model.training
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == model.config.image_token_id


def test_image_only_processor_saves_itself_as_the_stock_one(tiny_model_dir, tmp_path):
    """The fallback processor (no torchvision needed) writes a folder stock loaders (vLLM) accept."""
    from olmpipe.modelload import image_only_processor_class, load_processor

    processor = load_processor(tiny_model_dir)  # a tiny folder always gets the image-only processor
    cls = image_only_processor_class()
    assert type(processor).__name__ == cls.__name__ == "ImageOnlyQwen25VLProcessor"
    assert cls.__module__ == "olmpipe.modelload"
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    assert saved["processor_class"] == "Qwen2_5_VLProcessor" and "video_processor" in saved
    # no olmpipe_tiny.json: the stock processor where torchvision is installed, else the fallback
    reloaded = load_processor(tmp_path)
    assert reloaded.tokenizer.get_vocab() == processor.tokenizer.get_vocab()
    assert "<|vision_start|><|image_pad|><|vision_end|>" in reloaded.chat_template
