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
def tiny_models(tmp_path_factory):
    """``tiny_models(architecture)``: the embedded tiny model of that architecture (qwen2_5_vl,
    qwen2_vl, qwen3_vl, qwen3_vl_moe), each built once per test session (about 4 s, no network)."""
    from olmpipe.models.tiny import build_tiny_model

    built = {}

    def build(architecture: str = "qwen2_5_vl"):
        if architecture not in built:
            folder = tmp_path_factory.mktemp(f"tiny-{architecture}") / "model"
            built[architecture] = build_tiny_model(folder, seed=0, architecture=architecture)
        return built[architecture]

    return build


@pytest.fixture(scope="session")
def tiny_model_dir(tiny_models):
    """The embedded tiny Qwen2.5-VL (the default architecture)."""
    return tiny_models("qwen2_5_vl")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory):
    """A running local SLURM cluster (tests/support/slurm.py: 4 fake GPUs, partitions cpu + gpu),
    stopped after the module; skipped where it cannot run (not root, no slurm-wlm, lock held)."""
    from support.slurm import ClusterSpec, LocalSlurmCluster, unavailable_reason

    reason = unavailable_reason()
    if reason:
        pytest.skip(f"no local SLURM cluster: {reason}")
    c = LocalSlurmCluster(ClusterSpec(), state_dir=tmp_path_factory.mktemp("slurm-state"))
    try:
        c.start(lock_timeout=300)
    except RuntimeError as exc:
        if "in use" in str(exc) or "holds" in str(exc):
            pytest.skip(f"no local SLURM cluster: {exc}")
        raise
    yield c
    c.stop()
