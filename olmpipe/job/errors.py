"""Errors a training job stops with, shared by the modules that raise them and the command line that
turns them into one line and exit code 2 (:mod:`olmpipe.train.cli`).

They live apart from those modules so that the low ones (precision, peft) raise them without
importing the high ones (trainer, preflight).
"""

from __future__ import annotations


class JobSetupError(ValueError):
    """Settings the training job cannot run with; the message names each key and what to change."""


class CheckpointLoadError(RuntimeError):
    """A checkpoint's weights could not be restored into the model (a resume must not go on)."""
