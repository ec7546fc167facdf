"""Two CPU ranks over gloo, started as ``accelerate launch`` starts a training job's ranks.

:func:`launch` runs ``tests/lowid_train.py`` (one seed, the low-token-id reward the tiny model moves)
under ``workflow/accelerate/<strategy>.yaml`` with two processes and no CUDA; its environment takes
the switches of :mod:`support.trainhooks` (FSDP on CPU ranks, a NaN gradient, the load probe).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(strategy: str, model: Path, pages: Path, tests: Path, run_dir: Path, job: Mapping[str, Any], *,
           env: Mapping[str, str] | None = None, seed: int = 0, timeout: int = 900) -> subprocess.CompletedProcess:
    """Train one seed on two gloo ranks; returns the finished process (its output captured)."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO / "tests"),
                   "TOKENIZERS_PARALLELISM": "false", "WANDB_MODE": "disabled", **(env or {})}
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
           str(REPO / "workflow" / "accelerate" / f"{strategy}.yaml"), "--num_processes", "2",
           "--main_process_port", str(free_port()), str(REPO / "tests" / "lowid_train.py"), str(model), str(pages),
           str(tests), str(run_dir), json.dumps(job), str(seed)]
    return subprocess.run(["timeout", "-k", "10", str(timeout), *cmd], cwd=REPO, env=environment, capture_output=True,
                          text=True, check=False)


def probe_events(path: Path, event: str) -> list[dict[str, Any]]:
    """The ``event`` lines a run's ``OLMPIPE_TEST_PROBE`` file holds (support.trainhooks)."""
    if not path.exists():
        return []
    return [e for e in map(json.loads, path.read_text().splitlines()) if e["event"] == event]
