"""The SLURM side of a multi-node training job: node list, this node's launcher, the executor's resources.

The job-level command of ``resources.train.nodes: M > 1`` is ``srun`` starting one task per node
(:func:`olmpipe.launch.commands.launch_command`), each running ``python -m olmpipe.launch --node``,
which reads SLURM's environment (:func:`node_command`): machine rank ``$SLURM_PROCID`` (one task per
node), main process address the first host of ``$SLURM_STEP_NODELIST``/``$SLURM_JOB_NODELIST``
(:func:`first_host`, ``scontrol show hostnames``), port ``29500 + $SLURM_JOB_ID % 10000`` unless
given, and then replaces itself by the node's launcher. :func:`slurm_node_resources` are the train
rule's extra resources for snakemake-executor-plugin-slurm.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from olmpipe.config.processes import ACCELERATE_CONFIG_DIR, LaunchError, plan
from olmpipe.launch.commands import BASE_PORT, launcher_argv


def first_host(nodelist: str, run: Callable[..., subprocess.CompletedProcess] = subprocess.run) -> str:
    """The first host of a SLURM node list (``node[01-04]`` forms expanded by ``scontrol``).

    >>> first_host("gpu-a,gpu-b")
    'gpu-a'
    """
    if "[" not in nodelist:
        return nodelist.split(",")[0]
    try:
        proc = run(["scontrol", "show", "hostnames", nodelist], capture_output=True, text=True, check=True,
                   timeout=60)
    except (OSError, subprocess.SubprocessError) as exc:
        raise LaunchError(f"cannot expand the SLURM node list {nodelist!r} with scontrol: {exc}") from exc
    hosts = proc.stdout.split()
    if not hosts:
        raise LaunchError(f"scontrol show hostnames {nodelist!r} printed no host")
    return hosts[0]


def node_command(
    module: str,
    args: Sequence[str],
    *,
    gpus: int,
    nodes: int,
    env: Mapping[str, str],
    launcher: str = "accelerate",
    strategy: str = "ddp",
    python: str | None = None,
    main_process_port: int | None = None,
    config_dir: str | Path = ACCELERATE_CONFIG_DIR,
    resolve_host: Callable[[str], str] = first_host,
) -> list[str]:
    """The launcher argv of this machine of a multi-node job, from SLURM's environment ``env``.

    Machine rank: ``SLURM_PROCID`` (the job-level ``srun`` starts one task per node, so it is the
    node's index in the step); address: the first host of the step's node list (task 0 runs there);
    port: ``main_process_port`` or ``BASE_PORT + SLURM_JOB_ID % 10000`` (the same on every node).
    """
    p = plan(gpus, launcher, 0, strategy, nodes)
    missing = [k for k in ("SLURM_PROCID", "SLURM_JOB_ID") if k not in env]
    nodelist = env.get("SLURM_STEP_NODELIST") or env.get("SLURM_JOB_NODELIST")
    if missing or not nodelist:
        raise LaunchError(
            f"olmpipe.launch --node runs inside `srun` of a SLURM job; missing {missing or ['SLURM_JOB_NODELIST']} "
            "in the environment"
        )
    rank = int(env["SLURM_PROCID"])
    if not 0 <= rank < nodes:
        raise LaunchError(f"SLURM_PROCID={rank} but the job has {nodes} nodes: start one task per node "
                          f"(srun --ntasks={nodes} --ntasks-per-node=1)")
    port = main_process_port if main_process_port is not None else BASE_PORT + int(env["SLURM_JOB_ID"]) % 10000
    argv = launcher_argv(p, python or sys.executable, rank, resolve_host(nodelist), port, config_dir)
    return [*argv, "-m", module, *args]


def slurm_node_resources(nodes: int) -> dict[str, int | str]:
    """Extra rule resources of a multi-node train job for snakemake-executor-plugin-slurm.

    ``nodes`` -> ``sbatch --nodes``; ``mpi`` + ``tasks`` -> ``--ntasks=M`` and no ``srun -n1`` wrapper
    around the job (the rule's own ``srun`` starts one launcher per node); ``tasks_per_gpu: 0`` stops
    the plugin from turning ``tasks`` into ``--ntasks-per-gpu``. Empty for one node.
    """
    if nodes <= 1:
        return {}
    return {"nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun"}
