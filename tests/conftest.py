"""Shared pytest fixtures and the thread discipline of the test run.

torch runs 10-25x slower with 2 threads than with 1 on small shared machines, so the test session
pins every math library to one thread before anything imports torch.
"""

import os

for _var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "TOKENIZERS_PARALLELISM"):
    os.environ.setdefault(_var, "1" if _var != "TOKENIZERS_PARALLELISM" else "false")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("WANDB_MODE", "offline")

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """The embedded tiny Qwen2.5-VL, built once per test session (about 4 s, no network)."""
    from olmpipe.tinymodel import build_tiny_model

    return build_tiny_model(tmp_path_factory.mktemp("tiny-model") / "model", seed=0)
