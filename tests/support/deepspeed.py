"""Marks for the tests that need DeepSpeed (the ``deepspeed`` extra; ZeRO on CPU through gloo).

They carry the ``deepspeed`` marker, so CI runs them in a pass of its own after installing the
extra (``.ci/run``), while the default run, where DeepSpeed is missing, skips them and runs the
tests of a job that lacks it (tests/test_train_packages.py).
"""

from __future__ import annotations

import importlib.util

import pytest

#: ``pytest.param("zero2", marks=NEEDS_DEEPSPEED)``, or each of them as a decorator.
NEEDS_DEEPSPEED = [pytest.mark.deepspeed, pytest.mark.skipif(importlib.util.find_spec("deepspeed") is None,
                                                             reason="needs the deepspeed extra")]


def needs_deepspeed(test):
    """Decorator: :data:`NEEDS_DEEPSPEED` on one test function."""
    for mark in NEEDS_DEEPSPEED:
        test = mark(test)
    return test
