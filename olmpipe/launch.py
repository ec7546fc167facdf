"""How a training job starts its processes: one process, or one per GPU with accelerate/torchrun.

    python -m olmpipe.launch --gpus 4 --launcher accelerate -- olmpipe.train --config cfg.yaml
    # prints: <python> -m accelerate.commands.launch --multi_gpu --num_processes 4 ... -m olmpipe.train ...

The train rule's GPU count is a Snakemake resource (``resources.train.gpu`` in the config, shown to
SLURM as ``--gpus``), so the launcher is built from that same number and the job never starts more
processes than the GPUs SLURM granted. With ``gpus <= 1`` the module runs as a plain
``python -m``: no launcher process sits between SLURM and the trainer, so SIGTERM at preemption or
walltime reaches the trainer directly. With TRL's vLLM ``server`` mode, ``vllm_server_gpus`` of the
job's GPUs are left to the ``trl vllm-serve`` process and training uses the rest; ``colocate`` mode
shares every GPU between training and generation.

Multi-node (not built here; see docs/slurm.md): one SLURM job with ``--nodes=N``, ``srun`` starting
one launcher per node with ``--num_machines N --machine_rank $SLURM_NODEID`` and the first node of
``$SLURM_JOB_NODELIST`` as ``--main_process_ip``.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from collections.abc import Sequence
from dataclasses import dataclass

LAUNCHERS = ("accelerate", "torchrun")


@dataclass(frozen=True)
class LaunchPlan:
    """The processes of one training job.

    ``gpus``: GPUs granted to the job; ``train_processes``: ranks that train (one per training GPU,
    1 on CPU); ``vllm_server_gpus``: GPUs left to a vLLM server (TRL ``vllm_mode: server``).
    """

    gpus: int
    train_processes: int
    vllm_server_gpus: int
    launcher: str

    @property
    def distributed(self) -> bool:
        """True when more than one training process is started (needs a launcher)."""
        return self.train_processes > 1


def plan(gpus: int, launcher: str = "accelerate", vllm_server_gpus: int = 0) -> LaunchPlan:
    """Split the job's GPUs between training ranks and a vLLM server; validate the launcher.

    >>> plan(4, vllm_server_gpus=1).train_processes
    3
    """
    if launcher not in LAUNCHERS:
        raise ValueError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if gpus < 0 or vllm_server_gpus < 0:
        raise ValueError(f"GPU counts must be >= 0, got gpus={gpus}, vllm_server_gpus={vllm_server_gpus}")
    if vllm_server_gpus and vllm_server_gpus >= gpus:
        raise ValueError(
            f"vLLM server mode needs more GPUs than the server takes: the job has {gpus} GPU(s) and the "
            f"server {vllm_server_gpus}; raise resources.train.gpu or use vllm colocate mode"
        )
    train_gpus = gpus - vllm_server_gpus
    return LaunchPlan(gpus=gpus, train_processes=max(1, train_gpus), vllm_server_gpus=vllm_server_gpus,
                      launcher=launcher)


def launch_command(
    module: str,
    args: Sequence[str] = (),
    gpus: int = 0,
    launcher: str = "accelerate",
    vllm_server_gpus: int = 0,
    python: str | None = None,
    main_process_port: int | None = None,
) -> list[str]:
    """The argv that runs ``python -m <module> <args>`` on the job's training GPUs.

    ``main_process_port``: the rendezvous port of a multi-GPU job (launcher default when None);
    pass distinct ports when two multi-GPU jobs may share a node.

    >>> launch_command("olmpipe.train", ["--seed", "1"], gpus=1, python="py")
    ['py', '-m', 'olmpipe.train', '--seed', '1']
    >>> launch_command("olmpipe.train", [], gpus=2, python="py")[:6]
    ['py', '-m', 'accelerate.commands.launch', '--multi_gpu', '--num_processes', '2']
    """
    p = plan(gpus, launcher, vllm_server_gpus)
    python = python or sys.executable
    if not p.distributed:
        return [python, "-m", module, *args]
    port = [] if main_process_port is None else [str(main_process_port)]
    if p.launcher == "accelerate":
        cmd = [python, "-m", "accelerate.commands.launch", "--multi_gpu",
               "--num_processes", str(p.train_processes), "--num_machines", "1", "--dynamo_backend", "no"]
        if port:
            cmd += ["--main_process_port", *port]
        return [*cmd, "-m", module, *args]
    cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
           "--nproc_per_node", str(p.train_processes)]
    if port:
        cmd += ["--master_port", *port]
    return [*cmd, "-m", module, *args]


def launch_prefix(gpus: int, launcher: str = "accelerate", vllm_server_gpus: int = 0,
                  module: str = "olmpipe.train") -> str:
    """:func:`launch_command` as a shell string, for a rule's ``shell:`` (arguments appended after it).

    In a rule: ``params: launch=lambda wildcards, resources: launch_prefix(resources.gpu, ...)``.
    """
    return shlex.join(launch_command(module, (), gpus, launcher, vllm_server_gpus))


def main(argv: list[str] | None = None) -> int:
    """Print the launch command line for a module and its arguments (after ``--``)."""
    parser = argparse.ArgumentParser(prog="python -m olmpipe.launch", description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, required=True, help="GPUs granted to the job")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="accelerate")
    parser.add_argument("--vllm-server-gpus", type=int, default=0, help="GPUs left to a vLLM server")
    parser.add_argument("module", help="module to run, e.g. olmpipe.train")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the module (after --)")
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    try:
        cmd = launch_command(ns.module, args, ns.gpus, ns.launcher, ns.vllm_server_gpus)
    except ValueError as exc:
        parser.error(str(exc))
    sys.stdout.write(shlex.join(cmd) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
