"""The olmpipe file in each model folder the workflow writes, beside the Hugging Face files.

- ``olmpipe_train.json``: a seed's final model (rule ``train_seed``): seed, base model, steps,
  rewards, dataset; :mod:`olmpipe.train.run` writes it, the soup leaves it out of its own folder;
- ``olmpipe_soup.json``: the soup (rule ``soup``): the seed models averaged, dtype, method;
- ``olmpipe_tiny.json``: the embedded tiny model (rule ``build_model``): its shape, whose presence
  also selects the tiny model's processor (:mod:`olmpipe.modelload`);
- ``olmpipe_model.json``: a model downloaded from the hub (rule ``download_model``): repository,
  revision, commit and files (:mod:`olmpipe.hubmodel`).

A module of its own so that the rules writing model folders (``build_model``, ``soup``,
``download_model``) list only
these names in their code versions (:mod:`olmpipe.codeversion`).
"""

from __future__ import annotations

TRAIN_INFO_NAME = "olmpipe_train.json"
SOUP_INFO_NAME = "olmpipe_soup.json"
TINY_SPEC_NAME = "olmpipe_tiny.json"
HUB_MODEL_INFO_NAME = "olmpipe_model.json"
