"""Whether a model folder can be loaded: the files every stage that runs the model needs.

A folder with a ``config.json`` is not yet a model. transformers, TRL's reference model and vLLM
also need its weights, and the processor needs its image settings, its tokenizer and its chat
template; without them a job fails deep inside transformers (``OSError: Error no file named
model.safetensors ...``), or, worse, runs with other settings: without ``tokenizer_config.json`` the
Qwen tokenizer ends sequences at ``<|endoftext|>`` instead of ``<|im_end|>`` and pads on the right;
without a chat template the loader falls back to a generic one (:data:`olmpipe.models.load.CHAT_TEMPLATE`,
without the model's default system prompt). :func:`missing_files` says what a folder lacks, in
words a user can act on; :func:`check_model_folder` refuses such a folder with one message naming
it, and for a hub download (``olmpipe_model.json`` beside the files) the repository, revision and
the command that restores it.

It runs where it is cheap: when the config is checked (``model.path``'s folder, or a hub id's download
folder once it exists), when ``download_model`` publishes a snapshot, and before a job loads a
model. Checking reads file names, small JSON files and the 8-byte header length plus the header of
each safetensors file (a truncated file is caught by its size), never the weights.

What a folder needs (transformers 5.24.0, for every architecture of :mod:`olmpipe.models.architectures`,
whose processors are all the Qwen2-VL image processor plus the Qwen2 tokenizer):

- weights, in transformers' order of preference (``modeling_utils.py:591-619``: the first file
  present is the one loaded): ``model.safetensors``; ``model.safetensors.index.json`` and every
  shard it names; ``pytorch_model.bin``; ``pytorch_model.bin.index.json`` and its shards;
- the image processor's settings: ``preprocessor_config.json`` (the hub's file) or an
  ``image_processor`` section in ``processor_config.json`` (what transformers 5 saves);
- the tokenizer: ``tokenizer.json``, or ``vocab.json`` with ``merges.txt`` (a Qwen2 BPE tokenizer
  can be built from either), and ``tokenizer_config.json`` (special tokens, padding side);
- a chat template: ``chat_template.jinja``, ``chat_template.json``, or a ``chat_template`` entry in
  ``tokenizer_config.json`` or ``processor_config.json``.
"""

from __future__ import annotations

import hashlib
import json
import struct
import zipfile
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from olmpipe.models.architectures import (
    ARCHITECTURES,
    CONFIG_FILE,
    PREPROCESSOR_FILE,
    PROCESSOR_FILE,
    Architecture,
    ModelConfigError,
    UnsupportedArchitectureError,
    architecture_of,
    read_model_config,
)
from olmpipe.records.models import HUB_MODEL_INFO_NAME

#: transformers' weight file names (``transformers.utils``: SAFE_WEIGHTS_NAME, SAFE_WEIGHTS_INDEX_NAME,
#: WEIGHTS_NAME, WEIGHTS_INDEX_NAME), in the order ``from_pretrained`` looks for them.
SAFE_WEIGHTS = "model.safetensors"
SAFE_WEIGHTS_INDEX = "model.safetensors.index.json"
TORCH_WEIGHTS = "pytorch_model.bin"
TORCH_WEIGHTS_INDEX = "pytorch_model.bin.index.json"
WEIGHTS_ORDER = (SAFE_WEIGHTS, SAFE_WEIGHTS_INDEX, TORCH_WEIGHTS, TORCH_WEIGHTS_INDEX)
WEIGHTS_WANTED = (f"the model weights ({SAFE_WEIGHTS}, or {SAFE_WEIGHTS_INDEX} with every shard it names, "
                  f"or {TORCH_WEIGHTS})")
TOKENIZER_CONFIG = "tokenizer_config.json"
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json")


class ModelFolderError(ModelConfigError):
    """A model folder that cannot be loaded; the message names the folder, what it lacks and the fix."""


@dataclass(frozen=True)
class Need:
    """One thing a model folder must hold: ``what`` (for messages) and a test of the folder."""

    what: str
    present: Callable[[Path], bool]


def _json(path: Path) -> Mapping[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return {}
    return data if isinstance(data, Mapping) else {}


def _has_image_processor(folder: Path) -> bool:
    return (folder / PREPROCESSOR_FILE).is_file() or "image_processor" in _json(folder / PROCESSOR_FILE)


def _has_tokenizer(folder: Path) -> bool:
    return (folder / "tokenizer.json").is_file() or all((folder / f).is_file() for f in ("vocab.json", "merges.txt"))


def _has_chat_template(folder: Path) -> bool:
    return (any((folder / f).is_file() for f in CHAT_TEMPLATE_FILES)
            or any(_json(folder / f).get("chat_template") for f in (TOKENIZER_CONFIG, PROCESSOR_FILE)))


#: The processor files of the Qwen VL families (Qwen2-VL, Qwen2.5-VL, Qwen3-VL, Qwen3-VL-MoE): the
#: Qwen2-VL image processor (``preprocessor_config.json``), the Qwen2 BPE tokenizer and a chat template.
QWEN_VL_PROCESSOR = (
    Need(f"the image processor settings ({PREPROCESSOR_FILE}, or {PROCESSOR_FILE} with an image_processor "
         "section)", _has_image_processor),
    Need("the tokenizer (tokenizer.json, or vocab.json and merges.txt)", _has_tokenizer),
    Need(f"the tokenizer settings ({TOKENIZER_CONFIG}: special tokens, padding side)",
         lambda folder: (folder / TOKENIZER_CONFIG).is_file()),
    Need(f"a chat template ({', '.join(CHAT_TEMPLATE_FILES)}, or chat_template in {TOKENIZER_CONFIG})",
         _has_chat_template),
)
#: Processor needs by the architecture's processor class (a new architecture must say what it needs).
PROCESSOR_NEEDS: Mapping[str, tuple[Need, ...]] = {
    "Qwen2VLProcessor": QWEN_VL_PROCESSOR,
    "Qwen2_5_VLProcessor": QWEN_VL_PROCESSOR,
    "Qwen3VLProcessor": QWEN_VL_PROCESSOR,
}


def processor_needs(arch: Architecture) -> tuple[Need, ...]:
    """What the processor of ``arch`` loads from a model folder."""
    return PROCESSOR_NEEDS[arch.processor_class]


def safetensors_problem(path: Path) -> str | None:
    """Why a safetensors file cannot be loaded (missing, truncated, not safetensors), or None.

    Reads the 8-byte header length and the JSON header only: the file must be at least as long
    as the header says its tensors end (the format: a little-endian u64 header size, the header,
    then the data; each tensor's ``data_offsets`` count from the data's start).
    """
    try:
        size = path.stat().st_size
        with path.open("rb") as fh:
            head = fh.read(8)
            if len(head) < 8:
                return f"{path.name} is truncated ({size} bytes)"
            (header_len,) = struct.unpack("<Q", head)
            if header_len > min(size - 8, 100_000_000):
                return f"{path.name} is truncated or not a safetensors file (a header of {header_len} bytes)"
            header = json.loads(fh.read(header_len))
    except FileNotFoundError:
        return f"{path.name}"
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, ValueError) as exc:
        return f"{path.name} is unreadable ({exc})"
    if not isinstance(header, dict):
        return f"{path.name} is not a safetensors file"
    end = max((int(t["data_offsets"][1]) for k, t in header.items()
               if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t), default=0)
    if 8 + header_len + end > size:
        return f"{path.name} is truncated ({size} of {8 + header_len + end} bytes)"
    return None


def _torch_problem(path: Path) -> str | None:
    if not path.is_file():
        return path.name
    # torch.save writes a zip archive; its directory sits at the end, so a cut file is no zip
    return None if zipfile.is_zipfile(path) else f"{path.name} is truncated or not a torch checkpoint"


def weight_problems(folder: Path) -> list[str]:
    """Why ``folder`` has no loadable weights (empty: it has). The first weight file present in
    :data:`WEIGHTS_ORDER` is the one transformers loads, so that one must be complete."""
    first = next((name for name in WEIGHTS_ORDER if (folder / name).is_file()), None)
    if first is None:
        return [WEIGHTS_WANTED]
    if first in (SAFE_WEIGHTS, TORCH_WEIGHTS):
        problem = (safetensors_problem if first == SAFE_WEIGHTS else _torch_problem)(folder / first)
        return [problem] if problem else []
    weight_map = _json(folder / first).get("weight_map")
    if not isinstance(weight_map, Mapping) or not weight_map:
        return [f"{first} has no weight_map (unreadable or empty)"]
    check = safetensors_problem if first == SAFE_WEIGHTS_INDEX else _torch_problem
    problems = []
    for shard in sorted(set(map(str, weight_map.values()))):
        if Path(shard).is_absolute() or ".." in Path(shard).parts:
            problems.append(f"{shard} (named by {first}, outside the folder)")
            continue
        problem = check(folder / shard)
        if problem:
            problems.append(problem if problem != Path(shard).name else f"{shard} (named by {first})")
    return problems


def missing_files(folder: str | Path, *, weights: bool = True) -> list[str]:
    """What ``folder`` lacks to be loaded as a model (see the module docstring); empty when nothing.
    ``weights=False`` asks about the processor's files only (what ``load_processor`` reads).

    An unreadable ``config.json`` or an unsupported architecture is left to
    :func:`olmpipe.models.architectures.model_problems`; the processor files are then those every
    supported architecture needs.
    """
    folder = Path(folder)
    arch = ARCHITECTURES["qwen2_5_vl"]
    lacks = [] if (folder / CONFIG_FILE).is_file() else [CONFIG_FILE]
    if not lacks:
        try:
            arch = architecture_of(read_model_config(folder), str(folder / CONFIG_FILE))
        except (ModelConfigError, UnsupportedArchitectureError):
            pass
    if weights:
        lacks += weight_problems(folder)
    return lacks + [n.what for n in processor_needs(arch) if not n.present(folder)]


#: Bytes read at each end of a weight file by :func:`weights_fingerprint`.
FINGERPRINT_BYTES = 1 << 20


def weights_fingerprint(folder: str | Path) -> str | None:
    """A short hash that tells the weights in ``folder`` from other weights (None: no weight file).

    Covers the weight file transformers loads (every shard its index names, in order): each one's
    name, size and first and last MiB, i.e. a safetensors file's header (every tensor's name, dtype,
    shape) and tensor values at both ends. Another model, or the same shape initialised or trained
    otherwise, differs; reading a few MiB costs nothing at any model size, whereas hashing a 7B
    model's 15 GB at every job start would. A training run records it (:mod:`olmpipe.job.resume`),
    so that a folder replaced under the same path is not taken for the base a checkpoint grew from.
    """
    folder = Path(folder)
    first = next((name for name in WEIGHTS_ORDER if (folder / name).is_file()), None)
    if first is None:
        return None
    names = [first]
    if first in (SAFE_WEIGHTS_INDEX, TORCH_WEIGHTS_INDEX):
        weight_map = _json(folder / first).get("weight_map")
        names += sorted(set(map(str, weight_map.values()))) if isinstance(weight_map, Mapping) else []
    digest = hashlib.sha256()
    for name in names:
        path = folder / name
        size = path.stat().st_size if path.is_file() else -1
        digest.update(f"{name}\0{size}\0".encode())
        if size > 0:
            with path.open("rb") as fh:
                digest.update(fh.read(FINGERPRINT_BYTES))
                if size > FINGERPRINT_BYTES:
                    fh.seek(max(FINGERPRINT_BYTES, size - FINGERPRINT_BYTES))
                    digest.update(fh.read())
    return digest.hexdigest()[:16]


def describe(items: Iterable[str]) -> str:
    """``items`` as one clause: "a, b and c"."""
    items = list(items)
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def download_command(repo_id: str, revision: str, folder: str | Path) -> str:
    """The command that (re)publishes a hub download folder (``olmpipe download-model``)."""
    return f"olmpipe download-model --repo {repo_id} --revision {revision} --out {folder}"


def folder_problem(folder: str | Path, *, weights: bool = True) -> str | None:
    """One message saying why ``folder`` cannot be loaded and how to fix it, or None when it can
    (``weights=False``: its processor).

    A hub download (``olmpipe_model.json`` in the folder) names model.path, model.revision and the
    command that restores the missing files from the Hugging Face cache or the hub.
    """
    folder = Path(folder)
    missing = missing_files(folder, weights=weights)
    if not missing:
        return None
    info = _json(folder / HUB_MODEL_INFO_NAME)
    if info.get("repo_id") and info.get("revision"):
        from huggingface_hub import constants

        return (f"{folder} lacks {describe(missing)}: it is the download of model.path {info['repo_id']} at "
                f"model.revision {info['revision']} (commit {info.get('commit')}) and lost files since. Restore "
                f"them on a machine with network (HF_HUB_OFFLINE unset): `{download_command(info['repo_id'], info['revision'], folder)}` "
                f"(links them from the Hugging Face cache {constants.HF_HUB_CACHE}, fetching what it lacks)")
    return (f"{folder} is no loadable model folder: it lacks {describe(missing)}; point model.path at a complete "
            "model folder (or a hub id with model.revision), or copy the missing files into it")


def check_model_folder(path: str | Path, *, weights: bool = True) -> None:
    """Raise :class:`ModelFolderError` when ``path`` is a folder that cannot be loaded as a model
    (``weights=False``: whose processor cannot be loaded); a path that is no folder (a hub id) is
    left to its loader."""
    if Path(path).is_dir():
        problem = folder_problem(path, weights=weights)
        if problem:
            raise ModelFolderError(problem)
