"""A two-line distributed job for the launch tests: join the process group, all-reduce, write a file.

Run by a launcher (``-m distprobe`` with ``tests/`` on ``PYTHONPATH``), or plainly (no ``RANK``:
only the environment is written); writes
``$PROBE_OUT/rank<RANK>.json`` with the rank, world size, sum of all ranks + 1 and the launcher's
environment, so a test can see that every process joined the same group.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import torch
import torch.distributed as dist


def main() -> None:
    torch.set_num_threads(1)
    keys = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT", "SLURM_PROCID",
            "CUDA_VISIBLE_DEVICES", "OLMPIPE_VLLM_SERVER_DEVICES")
    if "RANK" not in os.environ:  # started plainly (one process): only the environment
        record = {"rank": 0, "world_size": 1, "env": {k: os.environ.get(k) for k in keys}}
        (Path(os.environ["PROBE_OUT"]) / "rank0.json").write_text(json.dumps(record), encoding="utf-8")
        return
    dist.init_process_group("gloo")
    value = torch.tensor([dist.get_rank() + 1.0])
    dist.all_reduce(value)
    record = {"rank": dist.get_rank(), "world_size": dist.get_world_size(), "sum": value.item(),
              "env": {k: os.environ.get(k) for k in keys}}
    out = Path(os.environ["PROBE_OUT"]) / f"rank{dist.get_rank()}.json"
    out.write_text(json.dumps(record), encoding="utf-8")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
