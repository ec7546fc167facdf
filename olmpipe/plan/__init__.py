"""What a training job needs before it runs: GPU memory per rank, checkpoint disk and write time,
and the check the train rule runs before it submits the job.

    olmpipe plan --configfile config/olmocr2.yaml      # the table: "fits", or the term and setting to change

- :mod:`~olmpipe.plan.shape`: a model's shapes (``config.json`` or a known hub id);
- :mod:`~olmpipe.plan.memory`: the per-GPU memory terms (:func:`memory_plan`);
- :mod:`~olmpipe.plan.lora`: what a LoRA/QLoRA adapter adds;
- :mod:`~olmpipe.plan.checkpoint`: checkpoint size, disk per seed, write time against the stop grace;
- :mod:`~olmpipe.plan.check`: :func:`checked_launch_prefix`, the train rule's check and launch prefix;
- :mod:`~olmpipe.plan.cli`: ``olmpipe plan``.

The public names of the former ``olmpipe/plan.py`` are imported from here lazily (so that
``olmpipe.config``, which reads :mod:`olmpipe.config.processes`, never imports the plan).
"""

from __future__ import annotations

import importlib

_EXPORTS = {
    "GIB": "olmpipe.plan.shape",
    "PlanError": "olmpipe.plan.shape",
    "ModelShape": "olmpipe.plan.shape",
    "shape_from_config": "olmpipe.plan.shape",
    "load_shape": "olmpipe.plan.shape",
    "budget_of": "olmpipe.plan.shape",
    "RUNTIME_RESERVE_GIB": "olmpipe.plan.memory",
    "VLLM_BYTES": "olmpipe.plan.memory",
    "Term": "olmpipe.plan.terms",
    "MemoryPlan": "olmpipe.plan.memory",
    "memory_plan": "olmpipe.plan.memory",
    "training_bytes_per_param": "olmpipe.plan.terms",
    "model_for_plan": "olmpipe.plan.check",
    "check_fits": "olmpipe.plan.check",
    "checked_launch_prefix": "olmpipe.plan.check",
    "DEFAULT_PROFILE": "olmpipe.plan.cli",
    "load_configs": "olmpipe.plan.cli",
    "main": "olmpipe.plan.cli",
}

__all__ = sorted(_EXPORTS)  # noqa: PLE0605


def __getattr__(name: str):
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'olmpipe.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
