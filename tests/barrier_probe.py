"""Join the job's process group as the trainer does, then wait at a barrier rank 1 never reaches.

    accelerate launch --config_file workflow/accelerate/ddp.yaml --num_processes 2 tests/barrier_probe.py \\
        TIMEOUT_S OUT_DIR

Every rank writes ``rank<R>.json``: the default group's timeout after :func:`olmpipe.job.distributed.init_distributed`
and again after transformers' ``TrainingArguments`` set up its devices (which builds its own
``PartialState(timeout=ddp_timeout)``); rank 0 then records how its barrier ended (``done.json``)
while rank 1 waits for that file, alive, so that only the timeout can end the barrier.
"""

import json
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist

from olmpipe.job.distributed import init_distributed


def group_timeout_s() -> float:
    """The default group's timeout, read from its gloo backend's options (test-only private API)."""
    backend = dist.distributed_c10d._get_default_group()._get_backend(torch.device("cpu"))
    return backend.options._timeout.total_seconds()


def main() -> None:
    timeout_s, out = float(sys.argv[1]), Path(sys.argv[2])
    torch.set_num_threads(1)
    init_distributed(timeout_s)
    first = group_timeout_s()
    from trl import GRPOConfig

    args = GRPOConfig(output_dir=str(out / "args"), ddp_timeout=int(timeout_s) + 1000, use_cpu=True, report_to=[],
                      bf16=False)
    _ = args.device  # transformers sets up its PartialState here
    rank = dist.get_rank()
    (out / f"rank{rank}.json").write_text(json.dumps({"timeout_s": first, "after_trainer_args_s": group_timeout_s()}))
    if rank == 0:
        try:
            dist.barrier()
            ended = "passed"
        except Exception as exc:  # noqa: BLE001 - the probe records whatever ends the barrier
            ended = f"{type(exc).__name__}: {str(exc)[:300]}"
        (out / "done.json").write_text(json.dumps({"barrier": ended}))
    else:
        deadline = time.monotonic() + 300
        while not (out / "done.json").exists() and time.monotonic() < deadline:
            time.sleep(0.2)


if __name__ == "__main__":
    main()
