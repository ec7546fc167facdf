"""Load a model folder (a real checkpoint or the embedded tiny one) and its processor, by architecture.

Every stage that runs a model loads it here: the transformers generation backend, the trainer, the
vLLM backend's processor; :mod:`olmpipe.models.tiny` only builds the tiny model (and saves the
processor class defined here). The folder's ``config.json`` decides the model and processor classes
(:mod:`olmpipe.models.architectures`: Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE); anything else raises
:class:`~olmpipe.models.architectures.UnsupportedArchitectureError`.

    model, processor = load_model_and_processor("results/model/tiny", dtype="bfloat16")

Facts this module works around (transformers 5.24 on a CPU-only torch without torchvision): the
stock Qwen2-VL, Qwen2.5-VL and Qwen3-VL processors require a video processor, which needs
torchvision (building one without fails in ``ProcessorMixin.__init__`` on the video processor
mapping); the image-only subclass of :func:`image_only_processor_class` takes none and uses the PIL
image processor. It saves itself as the stock processor (``processor_class: Qwen2_5_VLProcessor``
or ``Qwen3VLProcessor``, with a video processor section), so that vLLM, whose Qwen VL code loads the
full processor through ``AutoProcessor``, can load the folder where torchvision is installed
(docs/vllm.md).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from olmpipe.models.architectures import (
    ARCHITECTURES,
    IMAGE_PAD,
    VIDEO_PAD,
    Architecture,
    ModelConfigError,
    architecture_of,
    architecture_of_model,
)
from olmpipe.models.folder import check_model_folder
from olmpipe.records.models import TINY_SPEC_NAME

logger = logging.getLogger(__name__)

# A Qwen2-VL style chat template: string or list content, images as vision placeholders. The tiny
# model's tokenizer carries it; the loader falls back to it for a folder whose tokenizer has none.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "<|im_start|>{{ message['role'] }}\n"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for part in message['content'] %}"
    "{% if part['type'] == 'image' or 'image' in part or 'image_url' in part %}"
    "<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif part['type'] == 'text' %}{{ part['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "<|im_end|>\n"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)

# The video section of the saved processor: transformers' video processor defaults of the published
# checkpoints (Qwen2.5-VL-7B-Instruct's and Qwen3-VL-8B-Instruct's video_preprocessor_config.json).
# The image-only processor never sees videos, but the stock processor, which vLLM loads, cannot be
# built without one.
VIDEO_PROCESSOR = {
    "video_processor_type": "Qwen2VLVideoProcessor",
    "do_convert_rgb": True,
    "do_normalize": True,
    "do_rescale": True,
    "do_resize": True,
    "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_std": [0.26862954, 0.26130258, 0.27577711],
    "merge_size": 2,
    "patch_size": 14,
    "temporal_patch_size": 2,
    "rescale_factor": 0.00392156862745098,
    "size": {"longest_edge": 12845056, "shortest_edge": 3136},
    "resample": 3,
}
VIDEO_PROCESSOR_QWEN3 = {
    **VIDEO_PROCESSOR,
    "video_processor_type": "Qwen3VLVideoProcessor",
    "image_mean": [0.5, 0.5, 0.5],
    "image_std": [0.5, 0.5, 0.5],
    "patch_size": 16,
    "size": {"longest_edge": 25165824, "shortest_edge": 4096},
}
#: Chat tokens every Qwen VL processor resolves to ids (attribute name -> token).
_PROCESSOR_TOKENS = {
    "image_token": IMAGE_PAD,
    "video_token": VIDEO_PAD,
    "vision_start_token": "<|vision_start|>",
    "vision_end_token": "<|vision_end|>",
}


def video_processor_section(arch: Architecture) -> dict[str, Any]:
    """The video processor section the stock processor of ``arch`` needs in ``processor_config.json``."""
    return dict(VIDEO_PROCESSOR_QWEN3 if arch.video_processor_class == "Qwen3VLVideoProcessor" else VIDEO_PROCESSOR)


def image_only_processor_class(arch: Architecture | None = None):
    """The processor class used when the stock one cannot be built (no torchvision).

    A subclass of ``arch``'s stock processor (default Qwen2.5-VL) that takes no video processor and
    saves itself as the stock one.
    """
    import transformers
    from transformers import ProcessorMixin

    arch = arch or ARCHITECTURES["qwen2_5_vl"]
    stock = getattr(transformers, arch.processor_class)
    video = video_processor_section(arch)

    class ImageOnlyProcessor(stock):
        """The stock processor without a video processor (so no torchvision is needed)."""

        def __init__(self, image_processor=None, tokenizer=None, chat_template=None, **kwargs):
            for attr, token in _PROCESSOR_TOKENS.items():
                setattr(self, attr, token)
                setattr(self, f"{attr}_id", tokenizer.convert_tokens_to_ids(token))
            ProcessorMixin.__init__(self, image_processor, tokenizer, chat_template=chat_template)

        def to_dict(self):
            """Saved as the stock processor (with a video section) so stock loaders (vLLM) read it."""
            out = super().to_dict()
            out["processor_class"] = stock.__name__
            out.setdefault("video_processor", dict(video))
            return out

        def save_pretrained(self, save_directory, *args, **kwargs):
            """Save as the stock processor would, tokenizer config included."""
            saved = super().save_pretrained(save_directory, *args, **kwargs)
            tok_config = Path(save_directory) / "tokenizer_config.json"
            if tok_config.exists():
                data = json.loads(tok_config.read_text(encoding="utf-8"))
                if data.get("processor_class") == type(self).__name__:
                    data["processor_class"] = stock.__name__
                    tok_config.write_text(json.dumps(data, indent=2, ensure_ascii=False) + "\n",
                                          encoding="utf-8")
            return saved

    ImageOnlyProcessor.__name__ = ImageOnlyProcessor.__qualname__ = f"ImageOnly{stock.__name__}"
    ImageOnlyProcessor.__module__ = __name__
    return ImageOnlyProcessor


def model_architecture(path: str | Path) -> Architecture:
    """The architecture of a model folder, a hub id in the local cache, or (online) any hub id."""
    try:
        return architecture_of_model(path)
    except ModelConfigError:
        if Path(path).exists():
            raise
    from transformers import AutoConfig

    return architecture_of(AutoConfig.from_pretrained(str(path)).to_dict(), str(path))


def load_processor(path: str | Path, arch: Architecture | None = None):
    """Load the processor of a model folder or hub id.

    Tries the stock ``AutoProcessor`` first (real checkpoints on a machine with torchvision), then
    the image-only processor of the folder's architecture, which needs no torchvision. A folder
    without the processor's files raises :class:`olmpipe.models.folder.ModelFolderError` naming them.
    """
    from transformers import AutoProcessor, AutoTokenizer
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    check_model_folder(path, weights=False)
    arch = arch or model_architecture(path)
    path = str(path)
    if not (Path(path) / TINY_SPEC_NAME).exists():
        try:
            return AutoProcessor.from_pretrained(path)
        except (ImportError, ValueError, TypeError, OSError, AttributeError) as exc:
            logger.info("stock processor unavailable for %s (%s); using the image-only processor", path, exc)
    tokenizer = AutoTokenizer.from_pretrained(path)
    image_processor = Qwen2VLImageProcessorPil.from_pretrained(path)
    chat_template = getattr(tokenizer, "chat_template", None) or CHAT_TEMPLATE
    template_file = Path(path) / "chat_template.jinja"
    if template_file.exists():
        chat_template = template_file.read_text(encoding="utf-8")
    return image_only_processor_class(arch)(image_processor=image_processor, tokenizer=tokenizer,
                                            chat_template=chat_template)


def load_model(path: str | Path, *, dtype: Any = None, device: Any = None, quantization_config: Any = None):
    """Load a model folder (the embedded tiny one or a real checkpoint) in eval mode.

    The model class follows the folder's architecture (:func:`model_architecture`). ``dtype`` is a
    torch dtype or its name (``"bfloat16"``); default float32 on CPU, bfloat16 on GPU.
    ``quantization_config`` (a ``BitsAndBytesConfig``, QLoRA) loads the weights quantized straight
    onto ``device`` (bitsandbytes models cannot be moved afterwards). Under DeepSpeed ZeRO-3 (a TRL
    config made first) the weights load partitioned, each rank's part on its own device, and
    ``device`` is not used (:mod:`olmpipe.job.load`). A folder that cannot be loaded
    (no weights, a missing shard, tokenizer or chat template) raises
    :class:`olmpipe.models.folder.ModelFolderError` naming the folder and what it lacks.
    """
    import torch
    import transformers

    arch = model_architecture(path)
    check_model_folder(path)  # a folder without weights or tokenizer: one message, not transformers' OSError
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype is None:
        dtype = torch.bfloat16 if str(device).startswith("cuda") else torch.float32
    elif isinstance(dtype, str):
        dtype = getattr(torch, dtype)
    model_class = getattr(transformers, arch.model_class)
    if quantization_config is not None:
        model = model_class.from_pretrained(
            str(path), dtype=dtype, quantization_config=quantization_config, device_map={"": device})
    else:
        model = model_class.from_pretrained(str(path), dtype=dtype)
        if _zero3_partitioned(model):
            from olmpipe.compat.transformers import keep_used_weight_conversions

            keep_used_weight_conversions(model)  # else its checkpoints save renamed keys
        else:
            model = model.to(device)
    model.eval()
    return model


def _zero3_partitioned(model: Any) -> bool:
    """Whether ``from_pretrained`` built ``model`` under DeepSpeed's ``zero.Init`` (ZeRO-3 with the
    trainer's config in place: transformers 5.24 ``modeling_utils.py`` 3820-3833). Its parameters are
    then partitions already on the rank's device (DeepSpeed 0.19 ``partition_parameters.py`` 1168),
    marked with ``ds_id``, and must not be moved as a whole."""
    return any(hasattr(p, "ds_id") for p in model.parameters())


def load_model_and_processor(path: str | Path, *, dtype: Any = None, device: Any = None,
                             quantization_config: Any = None):
    """:func:`load_model` and :func:`load_processor` of one folder."""
    model = load_model(path, dtype=dtype, device=device, quantization_config=quantization_config)
    return model, load_processor(path, model_architecture(path))


def model_eos_ids(model_path: str | Path) -> list[int]:
    """The end tokens of the model's generation config (``model.generation_config.eos_token_id`` of
    the loaded model, which the trainer adds to the EOS reward), without loading the weights."""
    from transformers import AutoConfig, GenerationConfig

    try:
        config = GenerationConfig.from_pretrained(str(model_path))
    except (OSError, ValueError):  # no generation_config.json: the one from_pretrained derives
        config = GenerationConfig.from_model_config(AutoConfig.from_pretrained(str(model_path)))
    eos = config.eos_token_id
    return [eos] if isinstance(eos, int) else [int(e) for e in (eos or [])]
