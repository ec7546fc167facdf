"""Old import paths of modules that moved when the package took the shape of the workflow (0.2).

Until release 0.2 the modules below stood at the package's root (``olmpipe.modelload``,
``olmpipe.eval_run``, ...) or in ``olmpipe.train``. They now live in the package of their stage or
layer (``olmpipe.models.load``, ``olmpipe.evaluate.engine``, ``olmpipe.job.resume``, ...). For one
release the old names keep working: ``import olmpipe.modelload``, ``from olmpipe.eval_run import
run_generation_and_scoring`` and ``python -m olmpipe.baseline`` give the module at its new place
(the same module object, so its state and classes are shared) with a :class:`DeprecationWarning`
naming the new path. They will be removed in 0.3.

This is done by one meta path finder, :class:`MovedModules`, which ``olmpipe/__init__.py``
installs (once; installing it again is a no-op), instead of a file of re-exports per old name at
the package root, which would keep the old layout on show. ``tests/test_moved.py`` imports every
old name and runs the old ``python -m`` entry points.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
import warnings
from collections.abc import Mapping
from types import MappingProxyType, ModuleType
from typing import Any

#: Old dotted name -> new dotted name. Read-only.
MOVED: Mapping[str, str] = MappingProxyType({
    # models
    "olmpipe.architectures": "olmpipe.models.architectures",
    "olmpipe.known_models": "olmpipe.models.known",
    "olmpipe.modelfolder": "olmpipe.models.folder",
    "olmpipe.modelload": "olmpipe.models.load",
    "olmpipe.hubmodel": "olmpipe.models.hub",
    "olmpipe.tinymodel": "olmpipe.models.tiny",
    # plans and what the config means
    "olmpipe.loraplan": "olmpipe.plan.lora",
    "olmpipe.checkpoint_plan": "olmpipe.plan.checkpoint",
    "olmpipe.process_plan": "olmpipe.config.processes",
    "olmpipe.vllm_context": "olmpipe.config.vllm_context",
    "olmpipe.train.grpo_fields": "olmpipe.config.grpo_fields",
    # stages
    "olmpipe.baseline": "olmpipe.evaluate.baseline",
    "olmpipe.eval_run": "olmpipe.evaluate.engine",
    "olmpipe.compare": "olmpipe.evaluate.compare",
    "olmpipe.stats": "olmpipe.evaluate.stats",
    "olmpipe.guards": "olmpipe.evaluate.guards",
    "olmpipe.report_html": "olmpipe.report.template",
    "olmpipe.plots": "olmpipe.report.plots",
    "olmpipe.split": "olmpipe.validate.split",
    "olmpipe.benchdirs": "olmpipe.bench.folders",
    "olmpipe.soup": "olmpipe.train.soup",
    # the training job both trainers run
    "olmpipe.train.signals": "olmpipe.job.signals",
    "olmpipe.train.runlock": "olmpipe.job.runlock",
    "olmpipe.train.checkpoints": "olmpipe.job.checkpoints",
    "olmpipe.train.resume": "olmpipe.job.resume",
    "olmpipe.train.final": "olmpipe.job.final",
    "olmpipe.train.precision": "olmpipe.job.precision",
    "olmpipe.train.peft": "olmpipe.job.peft",
    "olmpipe.train.health": "olmpipe.job.health",
    "olmpipe.train.packages": "olmpipe.job.packages",
    "olmpipe.train.preflight": "olmpipe.job.preflight",
    "olmpipe.train.errors": "olmpipe.job.errors",
    "olmpipe.train.callbacks": "olmpipe.job.callbacks",
    "olmpipe.train.data": "olmpipe.job.data",
    "olmpipe.train.jobconfig": "olmpipe.job.jobconfig",
})

#: The release that removes the old names.
REMOVED_IN = "0.3"


class _Alias(importlib.abc.Loader):
    """Loads an old name as the module at its new place (``python -m`` runs the new module's code)."""

    def __init__(self, old: str, new: str):
        self.old, self.new = old, new

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        warnings.warn(f"{self.old} moved to {self.new}; the old name goes in olmpipe {REMOVED_IN}",
                      DeprecationWarning, stacklevel=2)
        return importlib.import_module(self.new)

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module at the new place is imported already."""

    # runpy (``python -m olmpipe.baseline``) asks the loader of the spec for the code to run as __main__
    def get_code(self, fullname: str) -> Any:
        spec = importlib.util.find_spec(self.new)
        return spec.loader.get_code(self.new) if spec is not None and spec.loader is not None else None

    def is_package(self, fullname: str) -> bool:
        return False


class MovedModules(importlib.abc.MetaPathFinder):
    """Finds the old names of :data:`MOVED` (and nothing else)."""

    def find_spec(self, fullname: str, path: Any = None, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        new = MOVED.get(fullname)
        if new is None:
            return None
        new_spec = importlib.util.find_spec(new)
        origin = new_spec.origin if new_spec is not None else None
        return importlib.machinery.ModuleSpec(fullname, _Alias(fullname, new), origin=origin)


def install() -> None:
    """Put :class:`MovedModules` on ``sys.meta_path`` (after the standard finders), once."""
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
