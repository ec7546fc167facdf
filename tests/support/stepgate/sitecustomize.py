"""Test-only step gate for trainers started in other processes (a SLURM job, a subprocess).

Python imports ``sitecustomize`` at start-up from ``sys.path``; a test that puts this folder on the
child's ``PYTHONPATH`` and sets ``OLMPIPE_TEST_GATE`` to a folder gets a trainer that, at the end of
step ``OLMPIPE_TEST_GATE_STEP`` (default 1), writes ``<folder>/<run>.rank<R>.reached`` and waits until
``<folder>/<run>.release`` exists, before :class:`olmpipe.job.callbacks.StopOnSignal` looks for a
signal. ``<run>`` is the run folder's name (``seed1``). A SIGTERM that the run's handler takes
writes ``<folder>/<run>.rank<R>.signalled``. So a test can send its signal while the trainer is
known to be mid-run, see that the trainer took it, then let it go on: no race against training
speed. Without ``OLMPIPE_TEST_GATE`` nothing happens. The test side is ``tests/support/gate.py``.
"""

from __future__ import annotations

import importlib.abc
import os
import sys
import time
from pathlib import Path

TARGET = "olmpipe.job.callbacks"
#: How long a gated trainer waits for its release before failing (a test that never releases).
WAIT_S = 900.0


def _marker(args, suffix: str) -> Path:
    rank = os.environ.get("RANK", "0")
    return Path(os.environ["OLMPIPE_TEST_GATE"]) / f"{Path(args.output_dir).name}.rank{rank}.{suffix}"


def _install(module) -> None:
    """Wrap StopOnSignal.on_step_end (the gate) and SignalFlag._handle (the signalled marker)."""
    step = int(os.environ.get("OLMPIPE_TEST_GATE_STEP", "1"))
    on_step_end, handle = module.StopOnSignal.on_step_end, module.SignalFlag._handle
    gated_args: list = []

    def gated_on_step_end(self, args, state, control, **kwargs):
        if state.global_step == step:
            gated_args[:] = [args]
            _marker(args, "reached").touch()
            release = Path(os.environ["OLMPIPE_TEST_GATE"]) / f"{Path(args.output_dir).name}.release"
            deadline = time.monotonic() + WAIT_S
            while not release.exists():
                if time.monotonic() > deadline:
                    raise RuntimeError(f"test step gate: {release} did not appear within {WAIT_S:.0f} s")
                time.sleep(0.05)
        return on_step_end(self, args, state, control, **kwargs)

    def signalled_handle(self, signum, frame):
        handle(self, signum, frame)
        if gated_args:
            _marker(gated_args[0], "signalled").touch()

    module.StopOnSignal.on_step_end = gated_on_step_end
    module.SignalFlag._handle = signalled_handle


class _PatchAfterImport(importlib.abc.MetaPathFinder):
    """Finds TARGET with the other finders and patches the module once it has executed."""

    def find_spec(self, name, path, target=None):
        if name != TARGET:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                break
        else:
            return None
        exec_module = spec.loader.exec_module

        def exec_and_patch(module):
            exec_module(module)
            _install(module)

        spec.loader.exec_module = exec_and_patch
        return spec


if os.environ.get("OLMPIPE_TEST_GATE"):
    sys.meta_path.insert(0, _PatchAfterImport())
