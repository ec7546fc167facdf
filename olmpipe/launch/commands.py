"""The command line of a training job, as the train rule runs it (``params.launch``).

:func:`launch_command` builds the argv for a job's GPUs, strategy and nodes (through
:func:`~olmpipe.config.processes.plan`): plain ``python -m`` for one process, accelerate's or
torchrun's launcher for several, ``python -m olmpipe.launch --exec``/``--node``/``--supervise`` where
the job's own part must run inside the job. :func:`launch_prefix` is the same as a shell string.

    >>> launch_command("olmpipe.train", ["--seed", "1"], gpus=0, python="py")
    ['py', '-m', 'olmpipe.train', '--seed', '1']
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Sequence
from pathlib import Path

from olmpipe.config.processes import ACCELERATE_CONFIG_DIR, LaunchPlan, plan

#: First rendezvous port of multi-node jobs; the job id spreads jobs sharing a node over 10000 ports.
BASE_PORT = 29500


def launcher_argv(p: LaunchPlan, python: str, machine_rank: int | None, main_ip: str | None,
                   port: int | None, config_dir: str | Path) -> list[str]:
    """The accelerate/torchrun argv (without the module) for one machine of plan ``p``."""
    if p.launcher == "accelerate":
        cmd = [python, "-m", "accelerate.commands.launch", "--config_file", p.config_file(config_dir),
               "--num_processes", str(p.train_processes), "--num_machines", str(p.nodes)]
        if p.nodes > 1:
            cmd += ["--machine_rank", str(machine_rank), "--main_process_ip", str(main_ip)]
        if port is not None:
            cmd += ["--main_process_port", str(port)]
        return cmd
    if p.nodes == 1:
        cmd = [python, "-m", "torch.distributed.run", "--standalone", "--nnodes", "1",
               "--nproc_per_node", str(p.train_processes)]
        return cmd + (["--master_port", str(port)] if port is not None else [])
    return [python, "-m", "torch.distributed.run", "--nnodes", str(p.nodes), "--node_rank", str(machine_rank),
            "--master_addr", str(main_ip), "--master_port", str(port if port is not None else BASE_PORT),
            "--nproc_per_node", str(p.processes_per_node)]


def job_argv(p: LaunchPlan, module: str, args: Sequence[str], python: str, port: int | None,
              config_dir: str | Path) -> list[str]:
    """The one-node command of plan ``p``: plain ``python -m`` for one process, else the launcher."""
    if not p.distributed:
        return [python, "-m", module, *args]
    return [*launcher_argv(p, python, None, None, port, config_dir), "-m", module, *args]


def launch_command(
    module: str,
    args: Sequence[str] = (),
    gpus: int = 0,
    launcher: str = "accelerate",
    vllm_server_gpus: int = 0,
    python: str | None = None,
    main_process_port: int | None = None,
    strategy: str = "ddp",
    nodes: int = 1,
    config_dir: str | Path = ACCELERATE_CONFIG_DIR,
    stop_grace_s: int | None = None,
) -> list[str]:
    """The argv that runs ``python -m <module> <args>`` on the job's training GPUs.

    ``stop_grace_s``: with several processes, run the launcher under
    :func:`~olmpipe.launch.supervise.supervise` (``python -m
    olmpipe.launch --supervise``): a SIGTERM to the job reaches every rank at once, the ranks get
    that long to finish the step and write the checkpoint, and the job exits 75.

    ``main_process_port``: the rendezvous port of a multi-GPU job (launcher default when None, or
    derived from ``$SLURM_JOB_ID`` on several nodes); pass distinct ports when two multi-GPU jobs
    may share a node. With ``nodes > 1`` the argv is ``srun`` starting ``python -m olmpipe.launch
    --node`` once per node (see :func:`olmpipe.launch.slurm.node_command`).

    One process on a GPU runs through ``python -m olmpipe.launch --exec``, which limits
    ``CUDA_VISIBLE_DEVICES`` to the job's GPU inside the job and replaces itself by the trainer
    (:func:`olmpipe.launch.devices.single_gpu_environment`); without GPUs the module runs plainly.

    >>> launch_command("olmpipe.train", ["--seed", "1"], gpus=0, python="py")
    ['py', '-m', 'olmpipe.train', '--seed', '1']
    >>> launch_command("olmpipe.train", ["--seed", "1"], gpus=1, python="py")[:6]
    ['py', '-m', 'olmpipe.launch', '--exec', '--gpus', '1']
    >>> launch_command("olmpipe.train", [], gpus=2, python="py")[:5]
    ['py', '-m', 'accelerate.commands.launch', '--config_file', 'workflow/accelerate/ddp.yaml']
    """
    p = plan(gpus, launcher, vllm_server_gpus, strategy, nodes)
    python = python or sys.executable
    if p.vllm_server_gpus or (gpus > 0 and not p.distributed and p.nodes == 1):
        # The devices are known only inside the job: olmpipe.launch --exec splits them there (between
        # the trainer and the vLLM server), or gives a single process only its GPU.
        cmd = [python, "-m", "olmpipe.launch", "--exec", "--gpus", str(gpus), "--vllm-server-gpus",
               str(vllm_server_gpus), "--launcher", launcher, "--strategy", strategy, "--config-dir", str(config_dir)]
        if main_process_port is not None:
            cmd += ["--main-process-port", str(main_process_port)]
        if stop_grace_s is not None:
            cmd += ["--stop-grace-s", str(stop_grace_s)]
        return [*cmd, module, *args]
    if p.nodes > 1:
        node = [python, "-m", "olmpipe.launch", "--node", "--gpus", str(gpus), "--nodes", str(nodes),
                "--launcher", launcher, "--strategy", strategy, "--config-dir", str(config_dir)]
        if main_process_port is not None:
            node += ["--main-process-port", str(main_process_port)]
        if stop_grace_s is not None:
            node += ["--stop-grace-s", str(stop_grace_s)]
        srun = ["srun", f"--ntasks={nodes}", "--ntasks-per-node=1", "--kill-on-bad-exit=1"]
        return [*srun, *node, module, *args]
    cmd = job_argv(p, module, args, python, main_process_port, config_dir)
    if p.distributed and stop_grace_s is not None:
        return [python, "-m", "olmpipe.launch", "--supervise", "--stop-grace-s", str(stop_grace_s), "--strategy",
                strategy, "--", *cmd]
    return cmd


def launch_prefix(gpus: int, launcher: str = "accelerate", vllm_server_gpus: int = 0,
                  module: str = "olmpipe.train", strategy: str = "ddp", nodes: int = 1,
                  stop_grace_s: int | None = None) -> str:
    """:func:`launch_command` as a shell string, for a rule's ``shell:`` (arguments appended after it).

    In a rule: ``params: launch=lambda wildcards, resources: launch_prefix(resources.gpu, ...)``.
    """
    return shlex.join(launch_command(module, (), gpus, launcher, vllm_server_gpus, strategy=strategy,
                                     nodes=nodes, stop_grace_s=stop_grace_s))
