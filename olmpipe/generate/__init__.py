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


def model_identity(model_path: str | Path) -> str:
    """A short hash naming the model behind ``model_path`` without reading its weights.

    For a local folder: its ``config.json`` and the names, sizes and modification times of its
    weight files (a rebuilt or retrained model gets a new identity); for anything else (a hub id,
    a server-side model) the string itself.
    """
    folder = Path(model_path)
    if not folder.is_dir():
        return str(model_path)
    digest = hashlib.sha256()
    config = folder / "config.json"
    if config.exists():
        digest.update(config.read_bytes())
    for weights in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        stat = weights.stat()
        digest.update(f"{weights.name}:{stat.st_size}:{stat.st_mtime_ns}".encode())
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
