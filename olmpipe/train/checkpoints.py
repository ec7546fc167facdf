"""What a complete training checkpoint is: how a save is committed, checked, listed and rotated.

transformers writes a checkpoint folder file by file (``Trainer._save_checkpoint``, transformers
5.24 ``trainer.py:3363-3430``: weights, then optimizer, scheduler and RNG states, then
``trainer_state.json``, then it deletes old checkpoints beyond ``save_total_limit``). A job killed,
or a disk that fills up, in the middle of that leaves a folder with the right name and some of the
files -- e.g. all of them but a 0-byte ``trainer_state.json`` -- and nothing in the folder says the
save did not finish.

olmpipe therefore marks completion last: :func:`commit` runs once every rank is done with the save
(:class:`olmpipe.train.callbacks.RunState`, a ``TrainerCallback.on_save``), flushes the folder's
files to disk and only then writes ``olmpipe_run.json`` (the run's seed, step, wandb id and
settings) atomically. A checkpoint counts as complete exactly when that file is there and every
file it checks reads (:func:`problem`): :func:`complete_checkpoints` lists only those, and names
every other ``checkpoint-<step>`` folder with the reason in a warning, so a resume continues from
the newest complete one. Rotation (``train.grpo.save_total_limit``) happens after the commit too
(:func:`rotate`, in place of transformers' own, which ran before ``olmpipe_run.json`` existed and
could delete the last complete checkpoint in favour of one whose save then failed).

Checkpoints written before this marker existed have ``olmpipe_run.json`` too (it was written in the
same callback, after transformers' files), so they stay resumable.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import struct
import zipfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.records.files import fsync_tree, write_json
from olmpipe.records.train import RUN_STATE_NAME

logger = logging.getLogger(__name__)

#: Written last into every checkpoint folder (:func:`commit`); its presence marks a complete save.
RUN_STATE_FILE = RUN_STATE_NAME
TRAINER_STATE_FILE = "trainer_state.json"  # transformers' TRAINER_STATE_NAME
PREFIX = "checkpoint-"  # transformers' PREFIX_CHECKPOINT_DIR
#: Files saved with ``torch.save`` (zip archives since torch 1.6) that :func:`problem` checks.
_TORCH_SUFFIXES = (".pt", ".pth", ".bin")


def step_of(folder: Path) -> int | None:
    """The step in a ``checkpoint-<step>`` folder name, else None."""
    suffix = folder.name[len(PREFIX):] if folder.name.startswith(PREFIX) else ""
    return int(suffix) if suffix.isdigit() else None


def _safetensors_problem(path: Path) -> str | None:
    """Why a ``.safetensors`` file is cut short or unreadable (its header names every byte it needs)."""
    size = path.stat().st_size
    with open(path, "rb") as fh:
        head = fh.read(8)
        if len(head) < 8:
            return f"{path.name} is {size} bytes long, shorter than a safetensors header"
        (length,) = struct.unpack("<Q", head)
        if length > size - 8:
            return f"{path.name} is cut short ({size} bytes; its header alone needs {length + 8})"
        try:
            header = json.loads(fh.read(length))
        except (ValueError, UnicodeDecodeError) as exc:
            return f"{path.name} has an unreadable header ({exc})"
    end = max((int(t["data_offsets"][1]) for k, t in header.items() if k != "__metadata__"), default=0)
    if 8 + length + end > size:
        return f"{path.name} is cut short ({size} bytes of {8 + length + end})"
    return None


def problem(folder: str | Path, *, require_marker: bool = True) -> str | None:
    """Why training cannot continue from ``folder`` (None when it is complete and reads).

    Checked: ``olmpipe_run.json`` is there (unless ``require_marker``: a folder the user names
    explicitly may come from a plain TRL run) and parses; ``trainer_state.json`` parses and holds the
    folder's step; every ``*.safetensors`` file holds the bytes its header lists; every
    ``torch.save`` file (``optimizer.pt``, ``rng_state.pth``...) is a whole zip archive. Cheap: no
    tensor is read.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    marker = folder / RUN_STATE_FILE
    if require_marker and not marker.is_file():
        return f"no {RUN_STATE_FILE}: its save did not finish (olmpipe writes that file last)"
    try:
        for name in ([RUN_STATE_FILE] if marker.is_file() else []) + [TRAINER_STATE_FILE]:
            try:
                data = json.loads((folder / name).read_text(encoding="utf-8"))
            except FileNotFoundError:
                return f"no {name}"
            except (ValueError, UnicodeDecodeError) as exc:
                return f"{name} is unreadable ({type(exc).__name__}: {exc})"
            if not isinstance(data, dict):
                return f"{name} is not a JSON object"
            if name == TRAINER_STATE_FILE:
                step = data.get("global_step")
                if not isinstance(step, int) or (step_of(folder) is not None and step != step_of(folder)):
                    return f"{name} says global_step {step!r}, the folder name {step_of(folder)}"
        for path in sorted(folder.iterdir()):
            if path.suffix == ".safetensors":
                reason = _safetensors_problem(path)
            elif path.suffix in _TORCH_SUFFIXES and path.is_file():
                reason = None if zipfile.is_zipfile(path) else f"{path.name} is not a whole torch.save archive"
            else:
                continue
            if reason is not None:
                return reason
    except OSError as exc:
        return f"cannot be read ({exc})"
    return None


def complete_checkpoints(run_dir: str | Path, *, warn: bool = True) -> list[Path]:
    """The complete checkpoint folders of ``run_dir`` (see :func:`problem`), oldest step first.

    Every other ``checkpoint-<step>`` folder is left where it is and, with ``warn``, named in a
    warning with the reason (a resume then continues from the one before it; when the run reaches
    that step again, transformers writes the folder anew).
    """
    found = []
    for path in Path(run_dir).glob(f"{PREFIX}*"):
        step = step_of(path)
        if step is None or not path.is_dir():
            continue
        reason = problem(path)
        if reason is None:
            found.append((step, path))
        elif warn:
            logger.warning("skipping checkpoint %s: %s; a resume continues from the complete checkpoint "
                           "before it", path, reason)
    return [p for _, p in sorted(found)]


def checkpoint_step(checkpoint: str | Path) -> int:
    """The ``global_step`` of a checkpoint (its ``trainer_state.json``)."""
    return int(json.loads((Path(checkpoint) / TRAINER_STATE_FILE).read_text(encoding="utf-8"))["global_step"])


def commit(folder: str | Path, run_state: Mapping[str, Any]) -> None:
    """Mark a finished save complete: flush its files to disk, then write ``olmpipe_run.json`` last.

    Called on the main process once every rank has finished writing the folder. The marker goes
    through a temporary file and a rename, and is flushed with the folder entry, so a crash at any
    point leaves either no marker or a whole one.
    """
    folder = Path(folder)
    fsync_tree(folder)
    write_json(folder / RUN_STATE_FILE, dict(run_state))
    fsync_tree(folder / RUN_STATE_FILE)


def rotate(run_dir: str | Path, limit: int | None, *, keep: str | Path, protect: str | Path | None = None) -> list[Path]:
    """Delete the oldest complete checkpoints beyond ``limit`` (``save_total_limit``; None keeps all).

    Like transformers' ``rotate_checkpoints`` (``trainer_utils.py:342-384``, called with
    ``use_mtime=True``) checkpoints are ordered by when they were written -- here the time of their
    marker, then their step -- so after a resume from an older checkpoint the abandoned later ones
    go first; ``keep`` (the checkpoint just committed) and ``protect`` (the best model checkpoint)
    are never deleted. Incomplete folders are not counted and not deleted. Returns what was deleted.
    """
    if limit is None or limit <= 0:
        return []
    keep_path, protected = Path(keep).resolve(), {Path(keep).resolve()}
    if protect is not None:
        protected.add(Path(protect).resolve())
    complete = complete_checkpoints(run_dir, warn=False)

    def written(path: Path) -> tuple[float, int]:
        return (os.stat(path / RUN_STATE_FILE).st_mtime, step_of(path) or 0)

    ordered = sorted(complete, key=lambda p: (p.resolve() == keep_path, *written(p)))
    deleted = []
    excess = len(ordered) - max(limit, len(protected & {p.resolve() for p in ordered}))
    for path in ordered:
        if excess <= 0:
            break
        if path.resolve() in protected:
            continue
        logger.info("deleting checkpoint %s (train.grpo.save_total_limit: %d)", path, limit)
        shutil.rmtree(path, ignore_errors=True)
        deleted.append(path)
        excess -= 1
    return deleted
