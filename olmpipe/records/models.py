"""The olmpipe file in each model folder the workflow writes, beside the Hugging Face files.

- ``olmpipe_train.json``: a seed's final model (rule ``train_seed``): seed, base model, steps,
  rewards, dataset; :mod:`olmpipe.train.run` writes it, the soup leaves it out of its own folder;
- ``olmpipe_soup.json``: the soup (rule ``soup``): the seed models averaged, dtype, method;
- ``olmpipe_tiny.json``: the embedded tiny model (rule ``build_model``): its shape, whose presence
  also selects the tiny model's processor (:mod:`olmpipe.models.load`);
- ``olmpipe_model.json``: a model downloaded from the hub (rule ``download_model``): repository,
  revision, commit and files (:mod:`olmpipe.models.hub`).

Also the weights' index of a model folder as transformers writes it (``model.safetensors``, or
``model.safetensors.index.json`` and its shards): :func:`weight_map`, read by the soup, the
checkpoint loader and the expert layout rewrite.

A module of its own so that the rules writing model folders (``build_model``, ``soup``,
``download_model``) list only
these names in their code versions (:mod:`olmpipe.codeversion`).
"""

from __future__ import annotations

import json
from pathlib import Path

TRAIN_INFO_NAME = "olmpipe_train.json"
SOUP_INFO_NAME = "olmpipe_soup.json"
TINY_SPEC_NAME = "olmpipe_tiny.json"
HUB_MODEL_INFO_NAME = "olmpipe_model.json"

#: transformers' weights of a model folder: one file, or an index naming the shards.
SINGLE_WEIGHTS = "model.safetensors"
WEIGHTS_INDEX = "model.safetensors.index.json"


class NotAWeightsFolder(ValueError):
    """A folder without transformers' safetensors weights (no ``model.safetensors`` or index)."""


def weight_map(model_dir: str | Path) -> dict[str, str]:
    """Tensor name -> safetensors file (relative to ``model_dir``) of a HF model folder; raises
    :class:`NotAWeightsFolder` for a folder without safetensors weights."""
    model_dir = Path(model_dir)
    if (model_dir / WEIGHTS_INDEX).exists():
        return dict(json.loads((model_dir / WEIGHTS_INDEX).read_text(encoding="utf-8"))["weight_map"])
    if (model_dir / SINGLE_WEIGHTS).exists():
        from safetensors import safe_open

        with safe_open(str(model_dir / SINGLE_WEIGHTS), framework="pt") as fh:
            return {name: SINGLE_WEIGHTS for name in fh.keys()}  # noqa: SIM118 - safe_open is not a dict
    raise NotAWeightsFolder(f"{model_dir}: no {SINGLE_WEIGHTS} or {WEIGHTS_INDEX} (not a safetensors model folder)")
