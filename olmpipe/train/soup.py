"""Model souping: the float32 average of several seeds' final weights, saved as one HF model folder.

olmOCR 2 averaged ("souped") the weights of six GRPO runs with different seeds and importance
sampling levels; the soup scored higher on olmOCR-Bench than any single run. Averaging streams one
tensor at a time (accumulated in float32 over the seeds, then cast to the output dtype), so souping
six 7B checkpoints needs memory for one shard, not six models. Files other than weights (config,
tokenizer, processor, chat template) come from the first seed, the record of trained pages is the
union of the seeds' (``olmpipe_trained_pages.jsonl``); every seed must have the same tensors with the
same shapes.

    python -m olmpipe.train.soup results/train/soup/model results/train/seed1/model results/train/seed2/model

With one seed the soup is that model (its files hard-linked, or copied across file systems).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path

from olmpipe.records.files import publish_dir, staging_dir, write_json
from olmpipe.records.models import (
    SINGLE_WEIGHTS,
    SOUP_INFO_NAME,
    TRAIN_INFO_NAME,
    WEIGHTS_INDEX,
    NotAWeightsFolder,
)
from olmpipe.records.models import weight_map as records_weight_map
from olmpipe.records.train import (
    TRAINED_PAGES_NAME,
    trained_pages_of,
    unite_trained_pages,
    write_trained_pages,
)

logger = logging.getLogger(__name__)

SINGLE = SINGLE_WEIGHTS
INDEX = WEIGHTS_INDEX
DTYPES = ("source", "float32", "bfloat16")


class SoupError(ValueError):
    """Seeds whose weights cannot be averaged; the message names the seed folder and tensor."""


def weight_map(model_dir: Path) -> dict[str, str]:
    """Tensor name -> safetensors file of a seed's model folder (:func:`olmpipe.records.models.weight_map`);
    raises :class:`SoupError` for a folder without safetensors weights."""
    try:
        return records_weight_map(model_dir)
    except NotAWeightsFolder as exc:
        raise SoupError(str(exc)) from None


def _link_or_copy(src: Path, dst: Path) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _copy_tree(src: Path, dst: Path, *, skip: set[str] = frozenset()) -> None:
    for path in src.rglob("*"):
        rel = path.relative_to(src)
        if path.is_dir() or rel.as_posix() in skip:
            continue
        (dst / rel).parent.mkdir(parents=True, exist_ok=True)
        _link_or_copy(path, dst / rel)


def _check_same_tensors(dirs: Sequence[Path], maps: Sequence[dict[str, str]]) -> None:
    from safetensors import safe_open

    names = set(maps[0])
    for model_dir, wmap in zip(dirs[1:], maps[1:], strict=True):
        if set(wmap) != names:
            diff = sorted(names ^ set(wmap))[:5]
            raise SoupError(f"{model_dir}: its tensors differ from {dirs[0]}'s (e.g. {diff}); seeds of one soup "
                            "must be trained from the same base model")
    shapes: dict[str, tuple] = {}
    for model_dir, wmap in zip(dirs, maps, strict=True):
        for file in sorted(set(wmap.values())):
            with safe_open(str(model_dir / file), framework="pt") as fh:
                for name in fh.keys():  # noqa: SIM118 - safe_open is not a dict
                    shape = tuple(fh.get_slice(name).get_shape())
                    if shapes.setdefault(name, shape) != shape:
                        raise SoupError(f"{model_dir}: tensor {name} has shape {shape}, {dirs[0]} has {shapes[name]}")


def soup(model_dirs: Sequence[str | Path], out_dir: str | Path, *, dtype: str = "source") -> Path:
    """Average the weights of ``model_dirs`` into ``out_dir`` (written atomically); returns ``out_dir``."""
    import torch
    from safetensors import safe_open
    from safetensors.torch import save_file

    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {dtype!r}")
    dirs = [Path(d) for d in model_dirs]
    if not dirs:
        raise SoupError("soup needs at least one model folder")
    out_dir = Path(out_dir)
    tmp = staging_dir(out_dir)
    maps = [weight_map(d) for d in dirs]
    if len(dirs) == 1 and dtype == "source":
        _copy_tree(dirs[0], tmp)
    else:
        _check_same_tensors(dirs, maps)
        weight_files = set(maps[0].values()) | ({INDEX} if (dirs[0] / INDEX).exists() else set())
        # not the first seed's own records (olmpipe.train.run: its summary and its metrics copy)
        _copy_tree(dirs[0], tmp, skip=weight_files | {TRAIN_INFO_NAME})
        handles = {}
        try:
            for file in sorted(set(maps[0].values())):
                out: dict[str, torch.Tensor] = {}
                names = sorted(n for n, f in maps[0].items() if f == file)
                for name in names:
                    tensors = []
                    for model_dir, wmap in zip(dirs, maps, strict=True):
                        key = (model_dir, wmap[name])
                        if key not in handles:
                            handles[key] = safe_open(str(model_dir / wmap[name]), framework="pt")
                        tensors.append(handles[key].get_tensor(name))
                    first = tensors[0]
                    target = first.dtype if dtype == "source" else getattr(torch, dtype)
                    if not first.is_floating_point():
                        out[name] = first.clone()
                        continue
                    total = torch.zeros(first.shape, dtype=torch.float32)
                    for tensor in tensors:
                        total += tensor.to(torch.float32)
                    out[name] = (total / len(tensors)).to(target)
                save_file(out, str(tmp / file), metadata={"format": "pt"})
                logger.info("souped %s (%d tensors) over %d seeds", file, len(out), len(dirs))
        finally:
            handles.clear()
        if (dirs[0] / INDEX).exists():
            _write_index(tmp, dirs[0])
    write_json(tmp / SOUP_INFO_NAME, {"inputs": [str(d) for d in dirs], "dtype": dtype, "method": "float32 mean"})
    # the soup's weights hold what every seed trained on: the union of their records (olmpipe.job.trained)
    trained = unite_trained_pages(*(trained_pages_of(d, error=SoupError) for d in dirs))
    (tmp / TRAINED_PAGES_NAME).unlink(missing_ok=True)
    if trained:
        write_trained_pages(tmp / TRAINED_PAGES_NAME, trained)
    publish_dir(tmp, out_dir)
    return out_dir


def _write_index(tmp: Path, first: Path) -> None:
    """The shard index with total_size recomputed (the output dtype may differ from the seeds')."""
    index = json.loads((first / INDEX).read_text(encoding="utf-8"))
    index.setdefault("metadata", {})["total_size"] = sum(
        (tmp / f).stat().st_size for f in set(index["weight_map"].values())
    )
    (tmp / INDEX).write_text(json.dumps(index, indent=2) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="olmpipe soup", description=__doc__.split("\n\n")[0])
    parser.add_argument("out_dir", help="folder for the averaged model")
    parser.add_argument("model_dirs", nargs="+", help="final model folders of the seeds")
    parser.add_argument("--dtype", choices=DTYPES, default="source", help="saved dtype (default: %(default)s)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        soup(args.model_dirs, args.out_dir, dtype=args.dtype)
    except SoupError as exc:
        logger.error("%s", exc)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
