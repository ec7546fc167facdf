"""A model from the Hugging Face hub, fetched once on the submitting machine for offline jobs.

Compute nodes often have no internet. When ``model.path`` is a hub id (``org/name``) the
``download_model`` rule (a Snakemake ``localrule``: it runs where Snakemake runs, never on a
compute node) downloads ``model.revision`` once into
``results/model/hub/<org>--<name>/<revision>/`` (:func:`olmpipe.layout.hub_model_dir`); every later
job -- baseline and evaluate generation, each training rank, TRL's reference model and the managed
vLLM server -- gets that folder as its model and runs with :data:`OFFLINE_ENV`, so that nothing in
it can reach for the hub.

    olmpipe download-model --repo allenai/olmOCR-7B-0825 --revision main \\
        --out results/model/hub/allenai--olmOCR-7B-0825/main

The download goes through ``huggingface_hub.snapshot_download`` into the Hugging Face cache
(``HF_HUB_CACHE``, default ``~/.cache/huggingface/hub``; set ``HF_HOME`` to a large disk): an
interrupted download resumes from its partial files, a model already in the cache is not fetched
again, and with the hub unreachable or ``HF_HUB_OFFLINE=1`` it is read from the cache alone (the
cache layout: ``models--org--name/blobs/``, ``refs/<branch>`` holding a commit,
``snapshots/<commit>/<file>`` linking to a blob). The snapshot's files are then hard-linked (copied
across file systems) into a staging folder that is renamed to the model folder when complete, so
jobs read real files, never links into a cache their node may not mount. ``olmpipe_model.json``
beside them records the repository, the requested revision, the commit and the files.
"""

from __future__ import annotations

import argparse
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from olmpipe.layout import HUB_MODEL_DIR
from olmpipe.records.files import publish_dir, staging_dir, write_json
from olmpipe.records.models import HUB_MODEL_INFO_NAME

logger = logging.getLogger(__name__)

#: The environment of every job that loads the model: no hub look-up from transformers,
#: huggingface_hub or datasets (TRL's reference model and vLLM load through them).
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
#: What the download writes beside the model files (repository, revision, commit, files).
MANIFEST_NAME = HUB_MODEL_INFO_NAME
COMMIT = re.compile(r"[0-9a-f]{40}")


class ModelDownloadError(RuntimeError):
    """The model could not be fetched (or read from the cache); the message says what to do."""


def offline_prefix() -> str:
    """:data:`OFFLINE_ENV` as an ``env`` prefix for a rule's shell command."""
    return "env " + " ".join(f"{k}={v}" for k, v in OFFLINE_ENV.items())


def _snapshot(repo_id: str, revision: str) -> Path:
    """The cached snapshot folder of ``repo_id`` at ``revision``, downloading what is missing."""
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    try:
        return Path(snapshot_download(repo_id, revision=revision, library_name="olmpipe-download-model"))
    except LocalEntryNotFoundError as exc:
        from huggingface_hub import constants

        raise ModelDownloadError(
            f"{repo_id} at revision {revision!r} is not (completely) in the Hugging Face cache "
            f"{constants.HF_HUB_CACHE} and the hub cannot be reached ({exc}); run the download_model rule on a "
            "machine with network (HF_HUB_OFFLINE unset), or set model.path to a local model folder"
        ) from exc


def _link_or_copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:  # another file system, or links not allowed there
        shutil.copy2(source, target)


def _missing_files(folder: Path, files: dict[str, int]) -> list[str]:
    """Files a loadable model folder must have but ``folder`` lacks: ``config.json`` and every weight
    file its safetensors index names (a snapshot read from the cache offline may be partial)."""
    import json

    missing = [] if "config.json" in files else ["config.json"]
    for index in (name for name in files if name.endswith(".safetensors.index.json")):
        weight_map = json.loads((folder / index).read_text(encoding="utf-8")).get("weight_map", {})
        missing += sorted({f for f in weight_map.values() if f not in files})
    return missing


def download(repo_id: str, revision: str, out_dir: str | Path) -> dict[str, Any]:
    """Fetch ``repo_id`` at ``revision`` and publish its files in ``out_dir``; returns the manifest.

    Nothing is done when ``out_dir`` already holds this repository and revision (the rule runs once).
    """
    out_dir = Path(out_dir)
    manifest_path = out_dir / MANIFEST_NAME
    if manifest_path.exists():
        import json

        done = json.loads(manifest_path.read_text(encoding="utf-8"))
        if (done.get("repo_id"), done.get("revision")) == (repo_id, revision):
            logger.info("%s at %s is already in %s (commit %s)", repo_id, revision, out_dir, done.get("commit"))
            return done
    snapshot = _snapshot(repo_id, revision)
    commit = snapshot.name
    files: dict[str, int] = {}
    tmp = staging_dir(out_dir)
    for path in sorted(snapshot.rglob("*")):
        if path.is_dir():
            continue
        rel = path.relative_to(snapshot)
        if rel.parts[0] == ".cache" or rel.name == MANIFEST_NAME:
            continue
        blob = path.resolve(strict=True)
        _link_or_copy(blob, tmp / rel)
        files[rel.as_posix()] = blob.stat().st_size
    missing = _missing_files(tmp, files)
    if missing:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelDownloadError(
            f"{repo_id} at {revision!r}: the snapshot {snapshot} lacks {', '.join(missing[:3])}"
            f"{' ...' if len(missing) > 3 else ''} (an interrupted download read from the cache offline?); run "
            "the download_model rule again with network to complete it")
    manifest = {"repo_id": repo_id, "revision": revision, "commit": commit, "files": files}
    write_json(tmp / MANIFEST_NAME, manifest)
    publish_dir(tmp, out_dir)
    logger.info("%s at %s (commit %s): %d files, %.1f GB in %s", repo_id, revision, commit, len(files),
                sum(files.values()) / 1e9, out_dir)
    if not COMMIT.fullmatch(revision):
        logger.warning("model.revision %r is a branch or tag: it was resolved to commit %s now and this folder "
                       "keeps it; set model.revision: %s to get the same model on every machine",
                       revision, commit, commit)
    return manifest


def main(argv: list[str] | None = None) -> int:
    """Download a hub model into a folder (the ``download_model`` rule's command)."""
    parser = argparse.ArgumentParser(prog="olmpipe download-model", description=__doc__.splitlines()[0])
    parser.add_argument("--repo", required=True, help="hub id, org/name (model.path)")
    parser.add_argument("--revision", required=True, help="commit hash, branch or tag (model.revision)")
    parser.add_argument("--out", required=True, help=f"model folder ({HUB_MODEL_DIR}/<org>--<name>/<revision>)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        download(args.repo, args.revision, args.out)
    except ModelDownloadError as exc:
        sys.stderr.write(f"olmpipe download-model: {exc}\n")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
