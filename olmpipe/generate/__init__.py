"""Generation backends behind one interface, and the robust decoding on top of them.

    from olmpipe.generate import make_backend, DecodingSettings, iter_generate
    backend = make_backend(cfg["generation"], "results/model/tiny")

``generation.backend`` picks the backend: ``transformers`` (CPU or GPU, the embedded default),
``vllm`` (offline engine; vLLM is imported only then) or ``openai`` (an OpenAI-compatible
server). All three return :class:`~olmpipe.generate.base.Completion` objects, and
:mod:`olmpipe.generate.decoding` turns them into identical ``generations.jsonl`` records
(:mod:`olmpipe.generate.pipeline` in olmOCR's pipeline-compatible mode).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.generate.base import (
    Completion,
    GenerationBackend,
    GenerationError,
    PageRequest,
    Sampling,
)
from olmpipe.generate.decoding import DecodingSettings, decode_batch, iter_generate, make_requests
from olmpipe.generate.pipeline import PipelineMode, PipelineSettings
from olmpipe.records.files import file_sha256
from olmpipe.records.generations import GenerationRecord

BACKENDS = ("transformers", "vllm", "openai")

__all__ = [
    "BACKENDS",
    "Completion",
    "DecodingSettings",
    "GenerationBackend",
    "GenerationError",
    "GenerationRecord",
    "PageRequest",
    "PipelineMode",
    "PipelineSettings",
    "Sampling",
    "backend_identity",
    "decode_batch",
    "iter_generate",
    "make_backend",
    "make_requests",
]


def make_backend(generation: Mapping[str, Any], model_path: str | Path) -> GenerationBackend:
    """Build the backend named by ``generation["backend"]`` for ``model_path``.

    ``model_path`` is ignored by the ``openai`` backend (the server has its model; the request's
    model name is ``generation.openai.model``).
    """
    name = generation["backend"]
    if name == "transformers":
        from olmpipe.generate.transformers_backend import TransformersBackend

        return TransformersBackend.from_config(model_path, generation)
    if name == "vllm":
        from olmpipe.generate.vllm_backend import VLLMBackend

        return VLLMBackend.from_config(model_path, generation)
    if name == "openai":
        from olmpipe.generate.openai_backend import OpenAIBackend

        return OpenAIBackend.from_config(generation)
    raise ValueError(f"generation.backend: unknown backend {name!r}; choose one of {', '.join(BACKENDS)}")


#: Files of a model folder that decide what it generates: weights, config, generation config,
#: processor and tokenizer. Not among them: olmpipe's own records (``olmpipe_*``) and the trainer's
#: pickled arguments (``training_args.bin``, transformers' ``TRAINING_ARGS_NAME``: it holds the
#: logging and checkpoint settings of the run that wrote the folder) and a checkpoint's ``trainer_state.json``.
IDENTITY_SUFFIXES = (".safetensors", ".bin", ".json", ".jinja", ".txt", ".model")
NOT_IDENTITY = ("training_args.bin", "trainer_state.json")
#: Runtime state that transformers writes into a folder's JSON files and that generation sets
#: itself: a model saved during training has ``use_cache: false`` in its config and the training
#: padding in ``tokenizer.json``, the same weights saved again from a checkpoint have neither. The
#: generation backends set the cache and the (left) padding themselves, so these keys are not
#: part of what the folder generates.
RUNTIME_KEYS = {"config.json": ("use_cache",), "tokenizer.json": ("padding", "truncation")}


def _without(value: Any, keys: tuple[str, ...]) -> Any:
    if isinstance(value, dict):
        return {k: _without(v, keys) for k, v in value.items() if k not in keys}
    if isinstance(value, list):
        return [_without(v, keys) for v in value]
    return value


def _file_identity(path: Path) -> str:
    """sha256 of a file's bytes; of its canonical JSON without :data:`RUNTIME_KEYS` for those files."""
    keys = RUNTIME_KEYS.get(path.name)
    if keys:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return file_sha256(path)
        canonical = json.dumps(_without(data, keys), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()
    return file_sha256(path)


def model_identity(model_path: str | Path) -> str:
    """A short hash of what decides the generations of the model behind ``model_path``.

    For a local folder: the sha256 of its weight, config, processor and tokenizer files
    (:data:`IDENTITY_SUFFIXES`, top level, by name; :data:`RUNTIME_KEYS` left out), so that a model
    retrained to the same weights, a copied folder or a touched file keeps its identity -- and its
    finished generations in the journal -- while a changed weight or setting gives a new one.
    Hashing reads the whole folder (about 10 s for a 7B model's 15 GB, against hours of generation
    it saves); modification times are never part of it. For anything else (a hub id, a server-side
    model): the string itself.
    """
    folder = Path(model_path)
    if not folder.is_dir():
        return str(model_path)
    digest = hashlib.sha256()
    for path in sorted(folder.iterdir()):
        if (path.is_file() and path.suffix in IDENTITY_SUFFIXES and not path.name.startswith("olmpipe_")
                and path.name not in NOT_IDENTITY):
            digest.update(f"{path.name}\0{_file_identity(path)}\0".encode())
    return digest.hexdigest()[:16]


def backend_identity(generation: Mapping[str, Any], model_path: str | Path) -> dict[str, Any]:
    """The backend settings that change what is generated, for the resume fingerprint.

    Throughput knobs (batch size, concurrency, timeouts, GPU memory share) are left out: changing
    them must not throw finished work away.
    """
    name = generation["backend"]
    if name == "openai":
        section = generation["openai"]
        return {"backend": name, "base_url": section["base_url"], "model": section["model"]}
    dtype = generation[name]["dtype"]
    return {
        "backend": name,
        "model_path": str(model_path),
        "model": model_identity(model_path),
        "dtype": dtype,
    }
