"""``python -m olmpipe.launch``: print a training job's command, or run this job's part of it here.

    python -m olmpipe.launch --gpus 8 --vllm-server-gpus 1 --strategy zero2 olmpipe.train --seed 1

prints the job's command (:func:`olmpipe.launch.commands.launch_command`). Inside a job, the
command's own steps: ``--exec`` (a one-node job's devices, :mod:`olmpipe.launch.devices`), ``--node``
(one node of a multi-node job, :mod:`olmpipe.launch.slurm`), ``--supervise`` (a multi-process
launcher under :func:`olmpipe.launch.supervise.supervise`); each first checks that this node has the
packages of the job's strategy (:func:`check_packages`), then replaces itself by (or supervises) the
launcher.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys

from olmpipe.config.processes import ACCELERATE_CONFIG_DIR, LAUNCHERS, STRATEGIES, LaunchError, plan
from olmpipe.launch.commands import launch_command
from olmpipe.launch.devices import server_mode_command
from olmpipe.launch.slurm import node_command
from olmpipe.launch.supervise import supervise

DESCRIPTION = "How a training job starts its processes: one process, one per GPU, or one launcher per node."


def check_packages(strategy: str, processes: int) -> None:
    """Stop before the launcher starts when this node lacks a package of the job's strategy
    (:mod:`olmpipe.job.packages`; installed versions only, nothing imported here).

    accelerate's launcher would otherwise fail first with its own message (``DeepSpeed is not
    installed``, accelerate 1.15 ``commands/launch.py`` 1042-1043). The ranks check everything the
    job needs (vLLM included, before the server starts), with imports, in :mod:`olmpipe.train.cli`.
    Raises :class:`~olmpipe.job.packages.MissingPackageError`.
    """
    from olmpipe.job.packages import check, job_needs

    check(job_needs(strategy=strategy, processes=processes), import_modules=False)


def main(argv: list[str] | None = None) -> int:
    """Print the launch command line for a module and its arguments, or (``--node``) run it here."""
    parser = argparse.ArgumentParser(prog="python -m olmpipe.launch", description=DESCRIPTION)
    parser.add_argument("--gpus", type=int, default=None, help="GPUs granted to the job (all nodes); required "
                                                                "except with --supervise")
    parser.add_argument("--launcher", choices=LAUNCHERS, default="accelerate")
    parser.add_argument("--vllm-server-gpus", type=int, default=0, help="GPUs left to a vLLM server")
    parser.add_argument("--strategy", choices=STRATEGIES, default="ddp", help="resources.train.strategy")
    parser.add_argument("--nodes", type=int, default=1, help="machines of the job (resources.train.nodes)")
    parser.add_argument("--config-dir", default=ACCELERATE_CONFIG_DIR, help="folder of the accelerate configs")
    parser.add_argument("--main-process-port", type=int, default=None, help="rendezvous port")
    parser.add_argument("--node", action="store_true",
                        help="inside srun on one node of a multi-node job: build this node's launcher from "
                             "SLURM's environment and replace this process by it")
    parser.add_argument("--exec", dest="exec_here", action="store_true",
                        help="inside a one-node job: with --vllm-server-gpus give the server the last GPUs and the "
                             "trainer the others, with one training process give it only its GPU; then replace this "
                             "process by the trainer's launcher")
    parser.add_argument("--supervise", action="store_true",
                        help="run MODULE ARGS (a launcher's argv) under supervise(): SIGTERM reaches every rank, "
                             "exit 75 after it")
    parser.add_argument("--stop-grace-s", type=int, default=None,
                        help="seconds the ranks get after SIGTERM to checkpoint (resources.train.stop_grace_s)")
    parser.add_argument("--print", dest="print_only", action="store_true",
                        help="with --node/--exec: print (environment changes, then the command), do not run")
    parser.add_argument("module", help="module to run, e.g. olmpipe.train")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments of the module (after --)")
    ns = parser.parse_args(argv)
    args = ns.args[1:] if ns.args[:1] == ["--"] else ns.args
    from olmpipe.job.packages import MissingPackageError

    if ns.supervise:
        try:
            check_packages(ns.strategy, processes=2)  # supervised launchers start several ranks
        except MissingPackageError as exc:
            sys.stderr.write(f"olmpipe.launch: {exc}\n")
            return 2
        return supervise([ns.module, *args], os.environ, ns.stop_grace_s if ns.stop_grace_s is not None else 30)
    if ns.gpus is None:
        parser.error("the following arguments are required: --gpus")
    changes: dict[str, str] = {}
    try:
        if ns.exec_here:
            cmd, changes = server_mode_command(ns.module, args, gpus=ns.gpus, vllm_server_gpus=ns.vllm_server_gpus,
                                               env=os.environ, launcher=ns.launcher, strategy=ns.strategy,
                                               config_dir=ns.config_dir, main_process_port=ns.main_process_port)
        elif ns.node:
            cmd = node_command(ns.module, args, gpus=ns.gpus, nodes=ns.nodes, env=os.environ,
                               launcher=ns.launcher, strategy=ns.strategy, config_dir=ns.config_dir,
                               main_process_port=ns.main_process_port)
        else:
            cmd = launch_command(ns.module, args, ns.gpus, ns.launcher, ns.vllm_server_gpus,
                                 main_process_port=ns.main_process_port, strategy=ns.strategy, nodes=ns.nodes,
                                 config_dir=ns.config_dir)
    except LaunchError as exc:
        parser.error(str(exc))
    if (ns.node or ns.exec_here) and not ns.print_only:
        p = plan(ns.gpus, ns.launcher, ns.vllm_server_gpus, ns.strategy, ns.nodes)
        try:
            check_packages(p.strategy, p.train_processes)
        except MissingPackageError as exc:
            sys.stderr.write(f"olmpipe.launch: {exc}\n")
            return 2
        sys.stdout.flush()
        if ns.stop_grace_s is not None and len(cmd) > 3 and cmd[1:3] != ["-m", ns.module]:
            return supervise(cmd, {**os.environ, **changes}, ns.stop_grace_s)
        os.execvpe(cmd[0], cmd, {**os.environ, **changes})
    sys.stdout.write("".join(f"{k}={shlex.quote(v)} " for k, v in changes.items()) + shlex.join(cmd) + "\n")
    return 0
