"""What a complete training checkpoint is: how a save is committed, checked, listed and rotated.

transformers writes a checkpoint folder file by file (``Trainer._save_checkpoint``, transformers
5.24 ``trainer.py:3363-3430``: weights, then optimizer, scheduler and RNG states, then
``trainer_state.json``, then it deletes old checkpoints beyond ``save_total_limit``). A job killed,
or a disk that fills up, in the middle of that leaves a folder with the right name and some of the
files -- e.g. all of them but a 0-byte ``trainer_state.json`` -- and nothing in the folder says the
save did not finish.

olmpipe therefore marks completion last: :func:`commit` runs once every rank is done with the save
(:class:`olmpipe.job.callbacks.RunState`, a ``TrainerCallback.on_save``), flushes the folder's
files to disk and only then writes ``olmpipe_run.json`` (the run's seed, step, wandb id and
settings, and the size of every file the save wrote) atomically. A checkpoint counts as complete
exactly when that file is there, every file it lists is there with its size, the weights a resume
loads are there, and every file it checks reads (:func:`problem`): :func:`complete_checkpoints`
lists only those, and names every other ``checkpoint-<step>`` folder with the reason in a warning,
so a resume continues from the newest complete one. A folder that training reaches again is
written anew by transformers; :func:`uncommit` takes its marker away first, so that a rewrite
stopped half-way is never taken for complete (:class:`olmpipe.job.callbacks.RunState`). Rotation (``train.grpo.save_total_limit``) happens after the commit too
(:func:`rotate`, in place of transformers' own, which ran before ``olmpipe_run.json`` existed and
could delete the last complete checkpoint in favour of one whose save then failed).

A complete checkpoint can still hold weights that are not finite (a NaN step saved before the health
check stopped the run, or a file changed since): restored, they fail later, e.g. in generation with
"probability tensor contains inf/nan". When a job decides where to go on,
:func:`complete_checkpoints` with ``values`` reads the weights a resume restores of the newest
checkpoints (:func:`nonfinite`: the adapter, the model's weights, DeepSpeed's float32 masters) and
skips one that is not finite like a damaged one, naming the tensor, until one is.

Checkpoints written before this marker existed have ``olmpipe_run.json`` too (it was written in the
same callback, after transformers' files), so they stay resumable; those written before the file
list (``files``) are checked for their weights and readability only.
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
#: The key of ``olmpipe_run.json`` listing every file of the save: relative path -> bytes.
FILES_KEY = "files"
#: A LoRA run's checkpoint holds the adapter instead of the model (PEFT's ``SAFETENSORS_WEIGHTS_NAME``
#: and ``WEIGHTS_NAME``, peft 0.21 ``utils/constants.py``).
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
#: Model weights ``Trainer.save_model`` writes outside DeepSpeed/FSDP (transformers' SAFE_WEIGHTS_NAME,
#: SAFE_WEIGHTS_INDEX_NAME, WEIGHTS_NAME, WEIGHTS_INDEX_NAME).
MODEL_WEIGHTS = ("model.safetensors", "pytorch_model.bin")
MODEL_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


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


def file_sizes(folder: str | Path) -> dict[str, int]:
    """Relative path (``/``-separated) -> bytes of every file under ``folder`` but the marker."""
    folder = Path(folder)
    return {p.relative_to(folder).as_posix(): p.stat().st_size for p in sorted(folder.rglob("*"))
            if p.is_file() and p.relative_to(folder).as_posix() != RUN_STATE_FILE}


def _files_problem(folder: Path, listed: Any) -> str | None:
    """Why the files the marker lists are not all there with their sizes (None: they are)."""
    if not isinstance(listed, dict):
        return f"{RUN_STATE_FILE}: {FILES_KEY} is not a mapping of file -> bytes"
    for name, size in sorted(listed.items()):
        path = folder / name
        if not path.is_file():
            return f"{name} is missing (the save wrote it: {RUN_STATE_FILE} lists it)"
        if path.stat().st_size != size:
            return f"{name} has {path.stat().st_size} bytes, the save wrote {size}"
    return None


def _weights_problem(folder: Path, marker: dict[str, Any] | None) -> str | None:
    """Why ``folder`` lacks the trained weights a resume loads (None: they are there).

    A LoRA run (its settings say ``train.peft.enabled``, or PEFT's ``adapter_config.json`` is there)
    loads the adapter; a DeepSpeed checkpoint its ``global_step*`` state (the tag the ``latest`` file
    names); an FSDP one its ``pytorch_model_fsdp*`` shards; any other the model's weights file, or
    every shard its index lists.
    """
    settings = (marker or {}).get("settings") or {}
    if settings.get("train.peft.enabled") or (folder / "adapter_config.json").is_file():
        if not any((folder / name).is_file() for name in ADAPTER_WEIGHTS):
            return f"no {ADAPTER_WEIGHTS[0]}: the LoRA adapter a resume loads is missing"
        return None
    if any(p.is_dir() and p.name.startswith("global_step") for p in folder.iterdir()):
        latest = folder / "latest"
        if latest.is_file():
            tag = latest.read_text(encoding="utf-8").strip()
            if not (folder / tag).is_dir() or not any((folder / tag).iterdir()):
                return f"the DeepSpeed state {tag}/ that {latest.name} names is missing or empty"
        return None
    if any(p.name.startswith("pytorch_model_fsdp") for p in folder.iterdir()):
        return None
    for index in MODEL_INDEXES:
        if (folder / index).is_file():
            try:
                shards = set(json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values())
            except (ValueError, KeyError, TypeError, AttributeError) as exc:
                return f"{index} is unreadable ({type(exc).__name__}: {exc})"
            missing = sorted(s for s in shards if not (folder / s).is_file())
            return f"{index} lists {missing[0]}, which is missing" if missing else None
    if not any((folder / name).is_file() for name in MODEL_WEIGHTS):
        return f"no model weights ({MODEL_WEIGHTS[0]}, a sharded index or pytorch_model.bin) to resume from"
    return None


def problem(folder: str | Path, *, require_marker: bool = True) -> str | None:
    """Why training cannot continue from ``folder`` (None when it is complete and reads).

    Checked: ``olmpipe_run.json`` is there (unless ``require_marker``: a folder the user names
    explicitly may come from a plain TRL run) and parses; ``trainer_state.json`` parses and holds the
    folder's step; the trained weights a resume loads are there (:func:`_weights_problem`: the
    adapter of a LoRA run, the DeepSpeed state, the model's weights); every ``*.safetensors`` file
    holds the bytes its header lists; every ``torch.save`` file (``optimizer.pt``, ``rng_state.pth``...)
    is a whole zip archive; every file the marker lists (``files``) is there with the size the save
    wrote (a deleted optimizer or RNG state would make transformers resume without it, silently).
    Cheap: no tensor is read.
    """
    folder = Path(folder)
    if not folder.is_dir():
        return "not a folder"
    marker = folder / RUN_STATE_FILE
    if require_marker and not marker.is_file():
        return f"no {RUN_STATE_FILE}: its save did not finish (olmpipe writes that file last)"
    stored: dict[str, Any] | None = None
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
            if name == RUN_STATE_FILE:
                stored = data
            if name == TRAINER_STATE_FILE:
                step = data.get("global_step")
                if not isinstance(step, int) or (step_of(folder) is not None and step != step_of(folder)):
                    return f"{name} says global_step {step!r}, the folder name {step_of(folder)}"
        reason = _weights_problem(folder, stored)
        if reason is not None:
            return reason
        for path in sorted(folder.iterdir()):
            if path.suffix == ".safetensors":
                reason = _safetensors_problem(path)
            elif path.suffix in _TORCH_SUFFIXES and path.is_file():
                reason = None if zipfile.is_zipfile(path) else f"{path.name} is not a whole torch.save archive"
            else:
                continue
            if reason is not None:
                return reason
        if stored is not None and FILES_KEY in stored:
            return _files_problem(folder, stored[FILES_KEY])
    except OSError as exc:
        return f"cannot be read ({exc})"
    return None


def complete_checkpoints(run_dir: str | Path, *, warn: bool = True, values: bool = False) -> list[Path]:
    """The complete checkpoint folders of ``run_dir`` (see :func:`problem`), oldest step first.

    Every other ``checkpoint-<step>`` folder is left where it is and, with ``warn``, named in a
    warning with the reason (a resume then continues from the one before it; when the run reaches
    that step again, transformers writes the folder anew). With ``values`` the newest ones are also
    read (:func:`nonfinite`), newest first until one holds finite weights, and those that do not are
    left out the same way (with ``warn``, named); the older ones are not read.
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
    complete = [p for _, p in sorted(found)]
    while values and complete:
        reason = nonfinite(complete[-1])
        if reason is None:
            break
        if warn:
            logger.warning("skipping checkpoint %s: %s; a resume continues from the complete checkpoint before it",
                           complete[-1], reason)
        complete.pop()
    return complete


def _tensors(value: Any, where: str = "") -> Any:
    """(dotted path, tensor) of every tensor in a nested dict/list/tuple, as torch.load returns them."""
    import torch

    stack = [(where, value)]
    while stack:
        path, item = stack.pop()
        if isinstance(item, torch.Tensor):
            yield path, item
        elif isinstance(item, Mapping):
            stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(list(item.items())))
        elif isinstance(item, (list, tuple)):
            stack.extend((f"{path}.{i}" if path else str(i), v) for i, v in reversed(list(enumerate(item))))


def _bad_values(name: str, tensor: Any) -> str | None:
    """``NaN``/``inf`` in ``tensor`` (a floating one), as '<what> in <name> (<n> of <total> values)'."""
    import torch

    if not (tensor.is_floating_point() or tensor.is_complex()) or tensor.numel() == 0:
        return None
    finite = torch.isfinite(tensor)
    if bool(finite.all()):
        return None
    bad = int((~finite).sum())
    what = "NaN" if bool(torch.isnan(tensor).any()) else "inf"
    return f"{what} in {name} ({bad} of {tensor.numel()} values)"


def _file_values(path: Path) -> str | None:
    """Why the tensors of one weights file are not all finite (None: they are, or it is no tensor file)."""
    import torch

    if path.suffix == ".safetensors":
        from safetensors import safe_open

        with safe_open(str(path), framework="pt") as fh:
            for name in fh.keys():  # noqa: SIM118 - safe_open is not a dict
                reason = _bad_values(name, fh.get_tensor(name))  # one tensor in memory at a time
                if reason is not None:
                    return reason
        return None
    try:  # DeepSpeed's states hold its own objects (a loss scaler): its resume unpickles them the same way
        state = torch.load(path, map_location="cpu", mmap=True, weights_only=False)
    except Exception as exc:  # noqa: BLE001 - e.g. deepspeed not installed here: the values cannot be read
        logger.info("values of %s not checked: %s: %s", path, type(exc).__name__, exc)
        return None
    for name, tensor in _tensors(state):
        reason = _bad_values(name, tensor)
        if reason is not None:
            return reason
    return None


def _value_files(folder: Path) -> list[Path]:
    """The files of ``folder`` holding the weights a resume restores: a LoRA adapter, the model's weights
    (every shard), a DeepSpeed state's files (the float32 masters, the tag ``latest`` names)."""
    adapter = [folder / name for name in ADAPTER_WEIGHTS if (folder / name).is_file()]
    if adapter:
        return adapter
    files = [folder / name for name in MODEL_WEIGHTS if (folder / name).is_file()]
    for index in MODEL_INDEXES:
        if (folder / index).is_file():
            shards = json.loads((folder / index).read_text(encoding="utf-8"))["weight_map"].values()
            files += [folder / shard for shard in sorted(set(shards))]
    latest = folder / "latest"
    tags = [latest.read_text(encoding="utf-8").strip()] if latest.is_file() else sorted(
        p.name for p in folder.iterdir() if p.is_dir() and p.name.startswith("global_step"))
    for tag in tags:
        if (folder / tag).is_dir():
            files += sorted(p for p in (folder / tag).iterdir() if p.suffix in _TORCH_SUFFIXES and p.is_file())
    return files


def nonfinite(folder: str | Path) -> str | None:
    """Where the weights a resume restores from the checkpoint ``folder`` hold NaN or inf, as
    '<file> holds NaN in <tensor> (<n> of <total> values)'; None when they are all finite.

    Reads the adapter of a LoRA run, else the model's weights (the float32 masters outside DeepSpeed)
    and a DeepSpeed state's files (its float32 masters and moments), one tensor at a time (FSDP's
    distributed shards are not read). Costs a read of those files: called for the checkpoint a job
    goes on from, not when a checkpoint is listed.
    """
    folder = Path(folder)
    try:
        for path in _value_files(folder):
            reason = _file_values(path)
            if reason is not None:
                return f"{path.relative_to(folder).as_posix()} holds {reason}"
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"its weights cannot be read ({type(exc).__name__}: {exc})"
    return None


def checkpoint_step(checkpoint: str | Path) -> int:
    """The ``global_step`` of a checkpoint (its ``trainer_state.json``)."""
    return int(json.loads((Path(checkpoint) / TRAINER_STATE_FILE).read_text(encoding="utf-8"))["global_step"])


def commit(folder: str | Path, run_state: Mapping[str, Any]) -> None:
    """Mark a finished save complete: flush its files to disk, then write ``olmpipe_run.json`` last,
    with ``run_state`` and the size of every file of the folder (``files``, checked by :func:`problem`).

    Called on the main process once every rank has finished writing the folder. The marker goes
    through a temporary file and a rename, and is flushed with the folder entry, so a crash at any
    point leaves either no marker or a whole one.
    """
    folder = Path(folder)
    fsync_tree(folder)
    write_json(folder / RUN_STATE_FILE, {**dict(run_state), FILES_KEY: file_sizes(folder)})
    fsync_tree(folder / RUN_STATE_FILE)


def uncommit(folder: str | Path) -> bool:
    """Take the marker away from a checkpoint folder that is about to be written again (True if it had one).

    transformers writes ``checkpoint-<step>`` into the folder of that name when it exists (a folder
    skipped as incomplete, or a later one after a resume from an earlier checkpoint); with the old
    marker still in it, a save stopped half-way would look complete, its files a mix of two saves.
    The marker is renamed to ``olmpipe_run.json.replaced`` (its content kept for a person to read).
    """
    marker = Path(folder) / RUN_STATE_FILE
    if not marker.is_file():
        return False
    replaced = marker.with_name(marker.name + ".replaced")
    os.replace(marker, replaced)
    fsync_tree(replaced)  # the file and its folder's entries
    logger.warning("%s is written again from this run; its previous marker is now %s.replaced", folder, marker.name)
    return True


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
