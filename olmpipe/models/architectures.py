"""What architecture a model folder holds, and what that implies for every stage that uses it.

A model folder's ``config.json`` names its architecture (``model_type``, ``architectures``); this
module maps it to one :class:`Architecture`, the single place that knows, per supported family:

- the transformers model and processor classes the folder loads with (:mod:`olmpipe.models.load`);
- the image processor's patch size, merge size and pixel limits, hence how many image tokens a
  rendered page becomes (:class:`ImageBudget`: the prompt length that ``olmpipe plan`` and the
  vLLM context checks use);
- the module-name prefixes of the language model and of the vision tower (where LoRA targets
  are looked for: :attr:`Architecture.language_prefix`, :attr:`Architecture.vision_prefix`), and
  whether the MLP is a mixture of fused experts (:attr:`Architecture.moe`: no ``nn.Linear`` there);
- how the names and layouts of saved weights relate to the live model's (the soup averages saved
  tensors by name, the checkpoint loader maps them back, vLLM reads the saved layout).

Supported: Qwen2-VL, Qwen2.5-VL, Qwen3-VL and Qwen3-VL-MoE. Anything else stops at config check time
with :class:`UnsupportedArchitectureError`, which names the folder's architecture and these.

    >>> arch = architecture_of({"model_type": "qwen3_vl"}, "config.json")
    >>> arch.label, arch.image_budget.tokens(1288, 996)
    ('Qwen3-VL', 1240)

Facts this module relies on (transformers 5.24.0, checked by tests/test_architectures.py against the
installed classes): Qwen2-VL and Qwen2.5-VL checkpoints store the language model under ``model.``
and the vision tower under ``visual.`` while the live model names them ``model.language_model.`` and
``model.visual.`` (``conversion_mapping.py``, ``Qwen2VLForConditionalGeneration`` renamings;
``save_pretrained`` writes the stored names back); Qwen3-VL(-MoE) checkpoints use the live names.
Qwen3-VL-MoE's experts are fused 3-D parameters (``mlp.experts.gate_up_proj`` ``[E, 2I, H]``,
``mlp.experts.down_proj`` ``[E, H, I]`` in ``modeling_qwen3_vl_moe.py`` ``Qwen3VLMoeTextExperts``),
not ``nn.Linear`` modules; published checkpoints store them transposed (``[E, H, 2I]``, ``[E, I, H]``)
and transformers transposes on load only where the shapes differ (``Transpose(1, 2,
check_dims=True)``, ``conversion_mapping.py`` "qwen3_vl_moe"), so its ``save_pretrained`` writes
the live layout back unchanged, which vLLM 0.31 (``qwen3_vl_moe.py``: ``is_fused_checkpoint_transposed=True``)
would read transposed: :func:`expert_tensor_to_hub` gives the published layout.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Any

logger = logging.getLogger(__name__)

CONFIG_FILE = "config.json"
#: Where an image processor's settings live in a model folder: the hub's file, and the processor
#: file transformers 5 writes (image settings under its ``image_processor`` key).
PREPROCESSOR_FILE = "preprocessor_config.json"
PROCESSOR_FILE = "processor_config.json"

#: Chat tokens the Qwen VL families share (the image placeholder the processor expands).
IMAGE_PAD = "<|image_pad|>"
VIDEO_PAD = "<|video_pad|>"


class UnsupportedArchitectureError(ValueError):
    """A model folder whose architecture olmpipe does not support (the message names it)."""


class ModelConfigError(ValueError):
    """A model folder's ``config.json`` that cannot be read (the message names the file)."""


@dataclass(frozen=True)
class ImageBudget:
    """How a Qwen VL image processor sizes an image: patches of ``patch_size`` px, merged
    ``merge_size`` x ``merge_size`` into one language-model token, the image resized so that its
    area lies within ``[min_pixels, max_pixels]`` (``size.shortest_edge`` / ``size.longest_edge`` of
    ``preprocessor_config.json``).

    >>> ImageBudget(14, 2, 3136, 12845056).tokens(1288, 996)   # Qwen2.5-VL, a 1288 px letter page
    1656
    """

    patch_size: int
    merge_size: int
    min_pixels: int
    max_pixels: int

    @property
    def factor(self) -> int:
        """Pixels per side of one language-model token (28 for Qwen2/2.5-VL, 32 for Qwen3-VL)."""
        return self.patch_size * self.merge_size

    def resized(self, height: int, width: int) -> tuple[int, int]:
        """The (height, width) the processor resizes an image to.

        transformers' ``smart_resize`` (5.24.0, ``models/qwen2_vl/image_processing_pil_qwen2_vl.py:58-84``,
        the same in ``image_processing_qwen2_vl.py:63-89``), which the Qwen2-VL, Qwen2.5-VL and
        Qwen3-VL processors all use: each side rounded to a multiple of :attr:`factor`, then scaled
        down or up into the pixel limits.
        """
        factor = self.factor
        if min(height, width) <= 0 or max(height, width) / min(height, width) > 200:
            raise ValueError(f"image of {height}x{width} px: sides must be positive with an aspect ratio below 200")
        h_bar = round(height / factor) * factor
        w_bar = round(width / factor) * factor
        if h_bar * w_bar > self.max_pixels:
            beta = math.sqrt((height * width) / self.max_pixels)
            h_bar = max(factor, math.floor(height / beta / factor) * factor)
            w_bar = max(factor, math.floor(width / beta / factor) * factor)
        elif h_bar * w_bar < self.min_pixels:
            beta = math.sqrt(self.min_pixels / (height * width))
            h_bar = math.ceil(height * beta / factor) * factor
            w_bar = math.ceil(width * beta / factor) * factor
        return h_bar, w_bar

    def patches(self, height: int, width: int) -> int:
        """Vision-tower patches of one image (``image_grid_thw.prod()`` for a still image)."""
        h, w = self.resized(height, width)
        return (h // self.patch_size) * (w // self.patch_size)

    def tokens(self, height: int, width: int) -> int:
        """Image tokens the image occupies in the prompt (the processor's ``<|image_pad|>`` count)."""
        return self.patches(height, width) // self.merge_size**2

    @classmethod
    def from_processor_config(cls, data: Mapping[str, Any], default: ImageBudget) -> ImageBudget:
        """The budget an image processor's saved settings give (``default`` for missing fields)."""
        size = data.get("size") if isinstance(data.get("size"), Mapping) else {}
        return cls(
            patch_size=int(data.get("patch_size") or default.patch_size),
            merge_size=int(data.get("merge_size") or default.merge_size),
            min_pixels=int(data.get("min_pixels") or size.get("shortest_edge") or default.min_pixels),
            max_pixels=int(data.get("max_pixels") or size.get("longest_edge") or default.max_pixels),
        )


@dataclass(frozen=True)
class Architecture:
    """One supported model family and what it implies (see the module docstring)."""

    #: ``config.json``'s ``model_type``; also the value of ``model.tiny.architecture``.
    key: str
    #: Its name in messages ("Qwen3-VL").
    label: str
    #: transformers classes (attribute names of the ``transformers`` package).
    model_class: str
    processor_class: str
    video_processor_class: str
    #: The published checkpoints' image processor (``preprocessor_config.json``).
    image_budget: ImageBudget
    image_mean: tuple[float, float, float]
    image_std: tuple[float, float, float]
    #: Saved-name prefix -> live-name prefix, first match wins (empty: saved names are live names).
    saved_prefixes: tuple[tuple[str, str], ...] = ()
    #: Mixture of experts with fused expert parameters (Qwen3-VL-MoE).
    moe: bool = False
    #: Live-model module prefixes of the language model and the vision tower (transformers 5).
    language_prefix: str = "model.language_model."
    vision_prefix: str = "model.visual."
    #: Names of the linear layers of a vision block's MLP (its attention has ``qkv`` and ``proj``).
    vision_mlp: tuple[str, ...] = ("gate_proj", "up_proj", "down_proj")

    @property
    def language_linear_names(self) -> tuple[str, ...]:
        """Last name parts of a decoder layer's ``nn.Linear`` modules: attention, and the MLP of a
        dense model (Qwen3-VL-MoE's experts and router are parameters, not ``nn.Linear``)."""
        attention = ("q_proj", "k_proj", "v_proj", "o_proj")
        return attention if self.moe else (*attention, "gate_proj", "up_proj", "down_proj")

    @property
    def vision_linear_names(self) -> tuple[str, ...]:
        """Last name parts of a vision block's ``nn.Linear`` modules (under ``vision_prefix + "blocks."``)."""
        return ("qkv", "proj", *self.vision_mlp)

    def live_name(self, saved: str) -> str:
        """The live model's name of a tensor stored as ``saved`` (what ``from_pretrained`` renames)."""
        if any(saved.startswith(live) for _, live in self.saved_prefixes):
            return saved
        for stored, live in self.saved_prefixes:
            if saved.startswith(stored):
                return live + saved[len(stored):]
        return saved

    def saved_name(self, live: str) -> str:
        """The name ``save_pretrained`` stores the live tensor ``live`` under."""
        for stored, prefix in self.saved_prefixes:
            if live.startswith(prefix):
                return stored + live[len(prefix):]
        return live


_QWEN2_MEAN = (0.48145466, 0.4578275, 0.40821073)
_QWEN2_STD = (0.26862954, 0.26130258, 0.27577711)
#: Qwen2-VL / Qwen2.5-VL-7B-Instruct's preprocessor_config.json: min_pixels 3136, max_pixels 12845056.
_QWEN2_BUDGET = ImageBudget(patch_size=14, merge_size=2, min_pixels=3136, max_pixels=12845056)
#: Qwen3-VL-8B-Instruct's preprocessor_config.json: size {shortest_edge 65536, longest_edge 16777216},
#: patch_size 16, merge_size 2, image_mean/std 0.5 (image_processor_type Qwen2VLImageProcessorFast).
_QWEN3_BUDGET = ImageBudget(patch_size=16, merge_size=2, min_pixels=65536, max_pixels=16777216)
#: Qwen2/2.5-VL checkpoints store the language model as ``model.*`` and the vision tower as ``visual.*``.
_QWEN2_SAVED = (("visual.", "model.visual."), ("model.", "model.language_model."))

ARCHITECTURES: Mapping[str, Architecture] = MappingProxyType({
    arch.key: arch
    for arch in (
        Architecture("qwen2_vl", "Qwen2-VL", "Qwen2VLForConditionalGeneration", "Qwen2VLProcessor",
                     "Qwen2VLVideoProcessor", _QWEN2_BUDGET, _QWEN2_MEAN, _QWEN2_STD, _QWEN2_SAVED,
                     vision_mlp=("fc1", "fc2")),
        Architecture("qwen2_5_vl", "Qwen2.5-VL", "Qwen2_5_VLForConditionalGeneration", "Qwen2_5_VLProcessor",
                     "Qwen2VLVideoProcessor", _QWEN2_BUDGET, _QWEN2_MEAN, _QWEN2_STD, _QWEN2_SAVED),
        Architecture("qwen3_vl", "Qwen3-VL", "Qwen3VLForConditionalGeneration", "Qwen3VLProcessor",
                     "Qwen3VLVideoProcessor", _QWEN3_BUDGET, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5),
                     vision_mlp=("linear_fc1", "linear_fc2")),
        Architecture("qwen3_vl_moe", "Qwen3-VL-MoE", "Qwen3VLMoeForConditionalGeneration", "Qwen3VLProcessor",
                     "Qwen3VLVideoProcessor", _QWEN3_BUDGET, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5), moe=True,
                     vision_mlp=("linear_fc1", "linear_fc2")),
    )
})
_BY_CLASS = MappingProxyType({a.model_class: a for a in ARCHITECTURES.values()})

#: Fused expert parameters of Qwen3-VL-MoE (live layout ``[E, 2I, H]`` and ``[E, H, I]``).
FUSED_EXPERTS = ("mlp.experts.gate_up_proj", "mlp.experts.down_proj")


def supported() -> str:
    """The supported architectures, for messages: "Qwen2-VL (qwen2_vl), ..."."""
    return ", ".join(f"{a.label} ({a.key})" for a in ARCHITECTURES.values())


def architecture_of(config: Mapping[str, Any], source: str) -> Architecture:
    """The :class:`Architecture` of a ``config.json`` (by ``model_type``, else ``architectures``).

    Raises :class:`UnsupportedArchitectureError` naming ``source``, the folder's architecture and
    the supported ones.
    """
    model_type = config.get("model_type")
    if isinstance(model_type, str) and model_type in ARCHITECTURES:
        return ARCHITECTURES[model_type]
    classes = config.get("architectures") if isinstance(config.get("architectures"), list) else []
    for name in classes:
        if name in _BY_CLASS:
            return _BY_CLASS[name]
    named = ", ".join(str(c) for c in classes) or "no architectures entry"
    raise UnsupportedArchitectureError(
        f"{source}: unsupported model architecture {named} (model_type {model_type!r}); olmpipe supports "
        f"{supported()}"
    )


def read_model_config(path: str | Path) -> dict[str, Any]:
    """A model folder's ``config.json`` as a dict; :class:`ModelConfigError` names a bad file."""
    config_file = Path(path) / CONFIG_FILE
    try:
        data = json.loads(config_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ModelConfigError(f"{config_file}: unreadable model config: {exc}") from exc
    if not isinstance(data, dict):
        raise ModelConfigError(f"{config_file}: the top level must be a JSON object")
    return data


def cached_config_file(model: str) -> Path | None:
    """``config.json`` of a hub id in the local Hugging Face cache, if it is there (no network)."""
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:  # pragma: no cover - huggingface_hub ships with transformers
        return None
    try:
        found = try_to_load_from_cache(model, CONFIG_FILE)
    except ValueError:  # not a valid repo id (e.g. a relative folder that does not exist)
        return None
    return Path(found) if isinstance(found, str) else None


def model_config(model: str | Path) -> tuple[dict[str, Any], str] | None:
    """``(config.json, its path)`` of a local folder or of a hub id in the local cache; None when
    neither has one."""
    folder = Path(model)
    if (folder / CONFIG_FILE).is_file():
        return read_model_config(folder), str(folder / CONFIG_FILE)
    cached = cached_config_file(str(model))
    return (read_model_config(cached.parent), str(cached)) if cached is not None else None


def architecture_of_model(model: str | Path) -> Architecture:
    """The architecture of a model folder (or of a hub id in the local cache).

    Raises :class:`ModelConfigError` when there is no readable ``config.json`` and
    :class:`UnsupportedArchitectureError` for an architecture olmpipe does not support.
    """
    found = model_config(model)
    if found is None:
        raise ModelConfigError(f"{model}: no {CONFIG_FILE} (not a model folder, and not a hub id in the local "
                               "Hugging Face cache)")
    return architecture_of(*found)


def model_problems(model: str | Path) -> list[str]:
    """Why ``model`` (``model.path``) cannot be used, when its ``config.json`` is on disk: an
    unreadable config or an unsupported architecture. A hub id not in the local cache is not
    checked here (its loader downloads the config, and fails clearly without a network)."""
    try:
        found = model_config(model)
        if found is not None:
            architecture_of(*found)
    except (ModelConfigError, UnsupportedArchitectureError) as exc:
        return [f"model.path: {exc}"]
    return []


def image_budget_of(model: str | Path, arch: Architecture) -> ImageBudget:
    """The image budget of a model folder's processor: its saved settings, else ``arch``'s published one."""
    folder = Path(model)
    for name, key in ((PREPROCESSOR_FILE, None), (PROCESSOR_FILE, "image_processor")):
        path = folder / name
        if not path.is_file():
            continue
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ModelConfigError(f"{path}: unreadable processor config: {exc}") from exc
        section = data.get(key) if key else data
        if isinstance(section, Mapping):
            return ImageBudget.from_processor_config(section, arch.image_budget)
    return arch.image_budget


def is_fused_expert(name: str) -> bool:
    """True for a Qwen3-VL-MoE fused expert tensor (``...mlp.experts.gate_up_proj`` / ``down_proj``)."""
    return name.endswith(FUSED_EXPERTS)


def expert_tensor_to_hub(name: str, tensor: Any, live_shape: tuple[int, ...]) -> Any:
    """A fused expert tensor in the published (hub) layout, ``[E, H, 2I]`` / ``[E, I, H]``.

    ``live_shape`` is the live parameter's shape; a tensor of that shape (what transformers 5.24's
    ``save_pretrained`` writes) is transposed, one already in the hub layout is returned as is. The
    two layouts cannot be told apart when the matrix is square (2I == H, or I == H): that raises
    ``ValueError`` rather than guessing.
    """
    shape = tuple(tensor.shape)
    if len(shape) != 3 or shape[1] == shape[2]:
        raise ValueError(f"{name}: cannot tell the layout of fused expert tensor of shape {shape}")
    if shape == tuple(live_shape):
        return tensor.transpose(1, 2).contiguous()
    if shape == (live_shape[0], live_shape[2], live_shape[1]):
        return tensor
    raise ValueError(f"{name}: shape {shape} is neither the live {tuple(live_shape)} nor its transpose")


def published_layout(named_tensors: Iterable[tuple[str, Any]]) -> Iterator[tuple[str, Any]]:
    """``(name, tensor)`` pairs of a live model with fused expert tensors in the published layout
    (``[E, H, 2I]``, ``[E, I, H]``: transposed, contiguous); other tensors pass through unchanged.

    What vLLM's Qwen3-VL-MoE loader must receive, from a checkpoint or from a trainer's weight sync.
    """
    for name, tensor in named_tensors:
        yield name, (tensor.transpose(1, 2).contiguous() if is_fused_expert(name) else tensor)


def num_experts(text_config: Mapping[str, Any]) -> int:
    """Experts per MoE layer of a text config: ``num_experts`` in the published config.json,
    ``num_local_experts`` in what transformers 5.24 saves (0 for a dense model)."""
    return int(text_config.get("num_experts") or text_config.get("num_local_experts") or 0)


def live_expert_shapes(config: Mapping[str, Any]) -> dict[str, tuple[int, int, int]]:
    """Live shapes of a Qwen3-VL-MoE config's fused experts, by parameter-name suffix."""
    text = config.get("text_config") or config
    experts, hidden, inner = num_experts(text), int(text["hidden_size"]), int(text["moe_intermediate_size"])
    return {FUSED_EXPERTS[0]: (experts, 2 * inner, hidden), FUSED_EXPERTS[1]: (experts, hidden, inner)}


def publish_expert_layout(folder: str | Path) -> int:
    """Rewrite a saved Qwen3-VL-MoE folder's fused experts in the published layout; return how many.

    A no-op (0) for dense architectures and for experts already in that layout. transformers 5.24
    saves the live layout (see the module docstring); the published one is what vLLM 0.31 loads
    and what transformers itself reads back (it transposes by shape). Each safetensors file is
    rewritten atomically, one file in memory at a time.
    """
    from safetensors import safe_open
    from safetensors.torch import save_file

    from olmpipe.records.files import atomic_path
    from olmpipe.records.models import weight_map

    folder = Path(folder)
    config = read_model_config(folder)
    if not architecture_of(config, str(folder / CONFIG_FILE)).moe:
        return 0
    live = live_expert_shapes(config)
    changed = 0
    for file in sorted(set(weight_map(folder).values())):
        path = folder / file
        with safe_open(str(path), framework="pt") as fh:
            names = list(fh.keys())
            experts = [n for n in names if is_fused_expert(n)]
            if not any(tuple(fh.get_slice(n).get_shape()) == live[_suffix(n)] for n in experts):
                continue
            metadata = fh.metadata()
            tensors = {n: fh.get_tensor(n) for n in names}
        for name in experts:
            converted = expert_tensor_to_hub(name, tensors[name], live[_suffix(name)])
            changed += converted is not tensors[name]
            tensors[name] = converted
        with atomic_path(path) as tmp:
            save_file(tensors, str(tmp), metadata=metadata or {"format": "pt"})
    return changed


def _suffix(name: str) -> str:
    return next(s for s in FUSED_EXPERTS if name.endswith(s))


@dataclass(frozen=True)
class PageTokens:
    """Prompt tokens of one page: the image's tokens and the vision tower's patches."""

    image_tokens: int
    patches: int
    height: int
    width: int


#: Aspect ratio (short / long side) assumed for pages when only the longest side is known: US letter.
PAGE_ASPECT = 8.5 / 11


def page_size(longest_side: int, aspect: float = PAGE_ASPECT) -> tuple[int, int]:
    """(height, width) in pixels of a portrait page rendered at ``longest_side`` (olmpipe.rasterize:
    the long side exact, the short side ``ceil``-ed as pdfium sizes bitmaps): 1288 -> (1288, 996)."""
    return longest_side, max(1, math.ceil(longest_side * aspect - 1e-9))


def page_tokens(budget: ImageBudget, longest_side: int, aspect: float = PAGE_ASPECT) -> PageTokens:
    """Image tokens and patches of a portrait page rendered at ``longest_side`` pixels."""
    height, width = page_size(longest_side, aspect)
    return PageTokens(budget.tokens(height, width), budget.patches(height, width), height, width)
