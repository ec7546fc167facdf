"""Stages 3 and 5: the base model's and the trained model's runs over the eval pages, and whether
training helped, where, and whether the difference is real.

    python -m olmpipe.evaluate.baseline --config config/config.yaml     # stage 3 (rule baseline_generate)
    python -m olmpipe.evaluate --config config/config.yaml              # stage 5 (evaluate_generate + compare)

- :mod:`~olmpipe.evaluate.engine`: the one generate-and-score run of any model over the eval split
  (:func:`~olmpipe.evaluate.engine.run_generation_and_scoring`), the engine of both stages;
- :mod:`~olmpipe.evaluate.baseline`: stage 3's entry point (the base model);
- :mod:`~olmpipe.evaluate.stage`: stage 5's entry point (the soup's run, then the comparison);
- :mod:`~olmpipe.evaluate.compare`: two scored runs -> scores, intervals, paired tests, guards;
- :mod:`~olmpipe.evaluate.stats`: the paired bootstrap and the sign-flip test;
- :mod:`~olmpipe.evaluate.guards`: the reward-hacking guards of a comparison.

The names of the former ``olmpipe/evaluate.py`` are imported from here lazily.
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "trained_name": "olmpipe.evaluate.stage",
    "compare_folders": "olmpipe.evaluate.stage",
    "main": "olmpipe.evaluate.stage",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'olmpipe.evaluate' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
