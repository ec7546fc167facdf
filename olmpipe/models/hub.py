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

A snapshot is published only when it would load (:mod:`olmpipe.models.folder`: weights, every shard
an index names, the processor's settings, tokenizer and chat template): read offline from an
interrupted download it may hold ``config.json`` and the tokenizer but no weights, and a folder
published so would make every later job fail inside transformers while Snakemake, seeing the
rule's output, never fetched it again. Such a snapshot is refused with what it lacks, the cache,
``model.path``/``model.revision`` and the command to run with network. A published folder that
lost files later is refused when the config is checked and before a job loads it, naming the
command that restores them: run again, this module completes the folder in place from the same
commit.
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

from olmpipe.layout import HUB_MODEL_DIR, revision_problem
from olmpipe.models.folder import describe, download_command, missing_files, safetensors_problem
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


def _snapshot_files(snapshot: Path) -> tuple[dict[str, Path], list[str]]:
    """The snapshot's files (path in the repository -> the blob it links to) and the paths whose
    link points at no blob (a cache someone pruned by hand)."""
    files: dict[str, Path] = {}
    dangling: list[str] = []
    for path in sorted(snapshot.rglob("*")):
        rel = path.relative_to(snapshot)
        if rel.parts[0] == ".cache" or rel.name == MANIFEST_NAME:
            continue
        try:
            blob = path.resolve(strict=True)
        except (FileNotFoundError, RuntimeError):  # a link to a missing blob (or a loop)
            dangling.append(rel.as_posix())
            continue
        if not blob.is_dir():
            files[rel.as_posix()] = blob
    return files, dangling


def _damaged_blobs(files: dict[str, Path]) -> list[Path]:
    """The cache's blobs of weight files that are there but cut short or unreadable."""
    return [blob for rel, blob in files.items()
            if rel.endswith(".safetensors") and blob.is_file() and safetensors_problem(blob) is not None]


def _incomplete(repo_id: str, revision: str, commit: str, snapshot: Path, out_dir: Path, lacks: list[str],
                damaged: list[Path] = ()) -> str:
    """Why a snapshot cannot be published, with the cache, model.path/model.revision and the fix.

    A damaged blob is named: huggingface_hub fetches only the files its cache lacks, never one that is
    there but cut short, so it must be deleted first (a download folder's files are hard links to the
    blobs, so a write into the folder in place damages the cache too)."""
    from huggingface_hub import constants

    text = (f"model.path {repo_id} at model.revision {revision!r} (commit {commit}): the snapshot {snapshot} in the "
            f"Hugging Face cache {constants.HF_HUB_CACHE} lacks {describe(lacks)} (an interrupted download read "
            f"from the cache offline?), so {out_dir} would not load; nothing was published there.")
    if damaged:
        return text + (f" The cache holds a damaged copy ({', '.join(map(str, damaged))}), which a download does not "
                       "fetch again: delete it, then on a machine with network (HF_HUB_OFFLINE unset) run "
                       f"`snakemake download_model` or `{download_command(repo_id, revision, out_dir)}`")
    return text + (" Run the download again on a machine with network (HF_HUB_OFFLINE unset): `snakemake "
                   f"download_model` or `{download_command(repo_id, revision, out_dir)}`; it fetches only the files "
                   "the cache lacks")


def _published(repo_id: str, revision: str, out_dir: Path) -> dict[str, Any] | None:
    """The manifest of ``out_dir`` when it already holds this repository and revision, else None."""
    import json

    try:
        done = json.loads((out_dir / MANIFEST_NAME).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return done if isinstance(done, dict) and (done.get("repo_id"), done.get("revision")) == (repo_id, revision) else None


def _lost(out_dir: Path, manifest: dict[str, Any]) -> list[str]:
    """Files the manifest lists that ``out_dir`` no longer holds at their size."""
    return [rel for rel, size in manifest.get("files", {}).items()
            if not (out_dir / rel).is_file() or (out_dir / rel).stat().st_size != size]


def _restore(repo_id: str, revision: str, out_dir: Path, manifest: dict[str, Any]) -> dict[str, Any]:
    """Put back, in place, the files a published folder lost (or never had), from its commit's snapshot.

    Files still there are left alone (and so is the rule's ``.snakemake_timestamp``): restoring
    a deleted weight file reruns nothing that used the folder. Each file is linked under a
    temporary name and renamed, so a reader never sees half a file.
    """
    commit = str(manifest.get("commit") or revision)
    snapshot = _snapshot(repo_id, commit)
    files, dangling = _snapshot_files(snapshot)
    restored = 0
    for rel, blob in files.items():
        target = out_dir / rel
        if target.is_file() and target.stat().st_size == blob.stat().st_size:
            continue
        tmp = target.with_name(f".{target.name}.restore")
        tmp.unlink(missing_ok=True)
        _link_or_copy(blob, tmp)
        os.replace(tmp, target)
        restored += 1
    lacks = missing_files(out_dir) + [f"{rel} (its link in the cache points at no blob)" for rel in dangling
                                      if not (out_dir / rel).is_file()]
    if lacks:
        raise ModelDownloadError(_incomplete(repo_id, revision, commit, snapshot, out_dir, lacks, _damaged_blobs(files)))
    manifest = {**manifest, "files": {rel: blob.stat().st_size for rel, blob in files.items()}}
    write_json(out_dir / MANIFEST_NAME, manifest)
    logger.warning("%s at %s: restored %d file(s) %s had lost, from the snapshot of commit %s", repo_id,
                   revision, restored, out_dir, commit)
    return manifest


def download(repo_id: str, revision: str, out_dir: str | Path) -> dict[str, Any]:
    """Fetch ``repo_id`` at ``revision`` and publish its files in ``out_dir``; returns the manifest.

    Nothing is done when ``out_dir`` already holds this repository and revision, complete (the rule
    runs once); a folder that lost files since is completed in place from the same commit. A
    snapshot that would not load (:func:`olmpipe.models.folder.missing_files`: no weights, a missing
    shard, no tokenizer, processor settings or chat template) is refused with
    :class:`ModelDownloadError`, and nothing is published.
    """
    problem = revision_problem(revision)
    if problem is not None:
        raise ModelDownloadError(f"--revision {revision!r} is not a git branch, tag or commit: it {problem}")
    out_dir = Path(out_dir)
    done = _published(repo_id, revision, out_dir)
    if done is not None:
        if not _lost(out_dir, done) and not missing_files(out_dir):
            logger.info("%s at %s is already in %s (commit %s)", repo_id, revision, out_dir, done.get("commit"))
            return done
        return _restore(repo_id, revision, out_dir, done)
    snapshot = _snapshot(repo_id, revision)
    commit = snapshot.name
    found, dangling = _snapshot_files(snapshot)
    tmp = staging_dir(out_dir)
    files: dict[str, int] = {}
    for rel, blob in found.items():
        _link_or_copy(blob, tmp / rel)
        files[rel] = blob.stat().st_size
    lacks = missing_files(tmp) + [f"{rel} (its link in the cache points at no blob)" for rel in dangling]
    if lacks:
        shutil.rmtree(tmp, ignore_errors=True)
        raise ModelDownloadError(_incomplete(repo_id, revision, commit, snapshot, out_dir, lacks, _damaged_blobs(found)))
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
