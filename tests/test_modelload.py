"""Tests of olmpipe.models.load: a folder of each supported architecture loads with its processor, with or
without torchvision."""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")


def test_dtype_by_name_and_eval_mode(tiny_model_dir):
    from olmpipe.models.load import load_model_and_processor

    model, processor = load_model_and_processor(tiny_model_dir, dtype="bfloat16", device="cpu")
    assert model.dtype == torch.bfloat16 and not model.training
    assert processor.tokenizer.convert_tokens_to_ids("<|image_pad|>") == model.config.image_token_id


STOCK = {"qwen2_5_vl": ("Qwen2_5_VLProcessor", "Qwen2VLVideoProcessor", 14),
         "qwen2_vl": ("Qwen2VLProcessor", "Qwen2VLVideoProcessor", 14),
         "qwen3_vl": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor", 16),
         "qwen3_vl_moe": ("Qwen3VLProcessor", "Qwen3VLVideoProcessor", 16)}


@pytest.mark.parametrize("arch_key", sorted(STOCK))
def test_image_only_processor_saves_itself_as_the_stock_one(arch_key, tiny_models, tmp_path):
    """The fallback processor (no torchvision needed) writes a folder stock loaders (vLLM) accept."""
    import shutil

    from olmpipe.models.architectures import ARCHITECTURES
    from olmpipe.models.load import image_only_processor_class, load_processor

    stock, video, patch = STOCK[arch_key]
    folder = tiny_models(arch_key)
    processor = load_processor(folder)  # a tiny folder always gets the image-only processor
    cls = image_only_processor_class(ARCHITECTURES[arch_key])
    assert type(processor).__name__ == cls.__name__ == f"ImageOnly{stock}"
    assert cls.__module__ == "olmpipe.models.load" and issubclass(cls, getattr(__import__("transformers"), stock))
    assert processor.image_processor.patch_size == patch
    processor.save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "processor_config.json").read_text())
    assert saved["processor_class"] == stock and saved["video_processor"]["video_processor_type"] == video
    # a model folder without olmpipe_tiny.json: the stock processor where torchvision is installed,
    # else the fallback of the folder's architecture
    shutil.copy2(folder / "config.json", tmp_path / "config.json")
    reloaded = load_processor(tmp_path)
    assert type(reloaded).__name__ in (stock, f"ImageOnly{stock}")
    assert reloaded.tokenizer.get_vocab() == processor.tokenizer.get_vocab()
    assert reloaded.image_processor.patch_size == patch
    assert "<|vision_start|><|image_pad|><|vision_end|>" in reloaded.chat_template


def test_a_published_style_qwen3_vl_folder_loads_without_torchvision(tiny_models, tmp_path):
    """A folder laid out as Qwen/Qwen3-VL-8B-Instruct is (preprocessor_config.json and
    video_preprocessor_config.json, processor_class Qwen3VLProcessor, no olmpipe_tiny.json) gets the
    Qwen3-VL model class and a processor with its 16 px patches, with or without torchvision."""
    import shutil

    from olmpipe.models.load import load_model_and_processor

    folder = tiny_models("qwen3_vl")
    for name in ("config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json",
                 "chat_template.jinja", "generation_config.json"):
        shutil.copy2(folder / name, tmp_path / name)
    image = {"size": {"shortest_edge": 65536, "longest_edge": 16777216}, "patch_size": 16, "temporal_patch_size": 2,
             "merge_size": 2, "image_mean": [0.5] * 3, "image_std": [0.5] * 3, "processor_class": "Qwen3VLProcessor",
             "image_processor_type": "Qwen2VLImageProcessorFast"}
    (tmp_path / "preprocessor_config.json").write_text(json.dumps(image))
    video = {**image, "size": {"shortest_edge": 4096, "longest_edge": 25165824},
             "video_processor_type": "Qwen3VLVideoProcessor"}
    video.pop("image_processor_type")
    (tmp_path / "video_preprocessor_config.json").write_text(json.dumps(video))
    model, processor = load_model_and_processor(tmp_path)
    assert type(model).__name__ == "Qwen3VLForConditionalGeneration"
    assert type(processor).__name__ in ("Qwen3VLProcessor", "ImageOnlyQwen3VLProcessor")
    assert (processor.image_processor.patch_size, processor.image_processor.merge_size) == (16, 2)
