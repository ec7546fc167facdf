"""The models: what a model folder is, how it loads, where it comes from.

- :mod:`~olmpipe.models.architectures`: what a folder's ``config.json`` is (Qwen2-VL, Qwen2.5-VL,
  Qwen3-VL, Qwen3-VL-MoE) and implies: classes, image tokens of a page, module prefixes, weight names;
- :mod:`~olmpipe.models.folder`: whether a folder is a complete model (weights, tokenizer, processor)
  and its weights' fingerprint;
- :mod:`~olmpipe.models.load`: loads a folder of any supported architecture and its processor;
- :mod:`~olmpipe.models.known`: the shapes of hub models the memory plan knows without a download;
- :mod:`~olmpipe.models.hub`: a hub model downloaded once into a folder the jobs read offline
  (rule ``download_model``);
- :mod:`~olmpipe.models.tiny`: the embedded tiny model (rule ``build_model``).
"""
