"""A Hugging Face hub cache made on disk, in the layout huggingface_hub documents and reads offline.

    <cache>/models--<org>--<name>/
        blobs/<sha256 of the file>            the file's bytes, once per content
        refs/<branch>                         the commit the branch points at (no newline)
        snapshots/<commit>/<path in the repo> a relative symlink to ../../blobs/<sha256>

(huggingface_hub's "Understand caching" guide; ``huggingface_hub.file_download`` writes it.) Tests
use it to give the ``download_model`` stage a model "on the hub" without a network;
:func:`shard_weights` lays a model folder out as the hub's larger models are (shards and an index).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path


def add_to_cache(cache: str | Path, repo_id: str, folder: str | Path, *, commit: str | None = None,
                 branch: str | None = "main", skip: tuple[str, ...] = ()) -> str:
    """Put every file of ``folder`` into ``cache`` as ``repo_id`` at ``commit`` (default: a hash of the
    files); ``branch`` (if any) points at it; files named in ``skip`` are left out (a partial
    snapshot). Returns the commit."""
    folder = Path(folder)
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if commit is None:
        digest = hashlib.sha1()
        for path in files:
            digest.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
        commit = digest.hexdigest()
    repo = Path(cache) / ("models--" + repo_id.replace("/", "--"))
    for sub in ("blobs", "refs", f"snapshots/{commit}"):
        (repo / sub).mkdir(parents=True, exist_ok=True)
    for path in files:
        rel = path.relative_to(folder)
        if rel.as_posix() in skip:
            continue
        data = path.read_bytes()
        blob = repo / "blobs" / hashlib.sha256(data).hexdigest()
        blob.write_bytes(data)
        link = repo / "snapshots" / commit / rel
        link.parent.mkdir(parents=True, exist_ok=True)
        if not link.is_symlink():  # adding to a snapshot completes it, as a resumed download does
            link.symlink_to(os.path.relpath(blob, link.parent))
    if branch is not None:
        (repo / "refs" / branch).write_text(commit)
    return commit


def shard_weights(folder: str | Path) -> list[str]:
    """Rewrite ``folder``'s model.safetensors as two shards plus model.safetensors.index.json, as
    transformers saves a model larger than its shard size; returns the shard names."""
    from safetensors.torch import load_file, save_file

    folder = Path(folder)
    tensors = load_file(str(folder / "model.safetensors"))
    names = sorted(tensors)
    files = ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    halves = [names[: len(names) // 2], names[len(names) // 2:]]
    for file, part in zip(files, halves, strict=True):
        save_file({n: tensors[n] for n in part}, str(folder / file), metadata={"format": "pt"})
    weight_map = {n: file for file, part in zip(files, halves, strict=True) for n in part}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    (folder / "model.safetensors").unlink()
    return files
