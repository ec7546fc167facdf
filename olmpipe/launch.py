"""How a training job starts its processes: one process, one per GPU, or one launcher per node.

    python -m olmpipe.launch --gpus 8 --vllm-server-gpus 1 --strategy zero2 olmpipe.train --seed 1
    # prints: <python> -m accelerate.commands.launch --config_file workflow/accelerate/zero2.yaml
    #         --num_processes 7 --num_machines 1 -m olmpipe.train --seed 1

The train rule's GPU count is a Snakemake resource (``resources.train.gpu`` in the config, shown to
SLURM as ``--gpus``), so the launcher is built from that same number and the job never starts more
processes than the GPUs SLURM granted. With one training process the module runs as a plain
``python -m`` (on a GPU behind ``python -m olmpipe.launch --exec``, which limits
``CUDA_VISIBLE_DEVICES`` to the job's GPU and then replaces itself by the trainer): no launcher
process sits between SLURM and the trainer, so SIGTERM at preemption or walltime reaches the
trainer directly. With TRL's vLLM ``server`` mode, ``vllm_server_gpus`` of the
job's GPUs are left to the ``trl vllm-serve`` process and training uses the rest; ``colocate`` mode
shares every GPU between training and generation.

Strategies (``resources.train.strategy``) are accelerate config files kept in the repository,
``workflow/accelerate/<strategy>.yaml`` (``ddp``, ``zero2``, ``zero3``, ``fsdp``; ``single`` is one
process). DeepSpeed (``zero2``/``zero3``) is the optional ``deepspeed`` extra, imported only by
accelerate inside a job that chose it.

Multi-node (``resources.train.nodes: M > 1``): the job-level command is ``srun`` starting one task
per node, each running ``python -m olmpipe.launch --node ...``, which reads SLURM's environment
(:func:`node_command`): machine rank ``$SLURM_PROCID`` (one task per node), main process address the
first host of ``$SLURM_STEP_NODELIST``/``$SLURM_JOB_NODELIST`` (``scontrol show hostnames``), port
``29500 + $SLURM_JOB_ID % 10000`` unless given, and then replaces itself by the node's launcher.
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from olmpipe.procs import group_members

LAUNCHERS = ("accelerate", "torchrun")
#: Exit code of a training job stopped by SIGTERM after its checkpoint (EX_TEMPFAIL: run it again to
#: resume); the trainer returns it (olmpipe.train.callbacks) and so does :func:`supervise`.
EXIT_PREEMPTED = 75
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp")
#: Strategies that need DeepSpeed (the ``deepspeed`` extra).
DEEPSPEED_STRATEGIES = ("zero2", "zero3")
#: Folder of the accelerate config files, relative to the repository root (Snakemake's working
#: directory), so that the rule's ``params.launch`` does not change when the checkout moves.
ACCELERATE_CONFIG_DIR = "workflow/accelerate"
#: First rendezvous port of multi-node jobs; the job id spreads jobs sharing a node over 10000 ports.
BASE_PORT = 29500


class LaunchError(ValueError):
    """A launch that cannot work; the message names the setting to change."""


@dataclass(frozen=True)
class LaunchPlan:
    """The processes of one training job.

    ``gpus``: GPUs granted to the job (all nodes together); ``train_processes``: ranks that train
    (one per training GPU, 1 on CPU), over all nodes; ``vllm_server_gpus``: GPUs left to a vLLM
    server (TRL ``vllm_mode: server``); ``strategy``: how the ranks share the model (see module doc);
    ``nodes``: machines, one launcher each.
    """

    gpus: int
    train_processes: int
    vllm_server_gpus: int
    launcher: str
    strategy: str = "ddp"
    nodes: int = 1

    @property
    def distributed(self) -> bool:
        """True when more than one training process is started (needs a launcher)."""
        return self.train_processes > 1

    @property
    def effective_strategy(self) -> str:
        """``single`` for one process (no sharding happens), else the chosen strategy."""
        return self.strategy if self.distributed else "single"

    @property
    def processes_per_node(self) -> int:
        """Training processes on each machine."""
        return self.train_processes // self.nodes

    def config_file(self, root: str | Path = ACCELERATE_CONFIG_DIR) -> str:
        """The accelerate config file of the strategy (path under ``root``)."""
        return str(Path(root) / f"{self.strategy}.yaml")


def plan(gpus: int, launcher: str = "accelerate", vllm_server_gpus: int = 0, strategy: str = "ddp",
         nodes: int = 1) -> LaunchPlan:
    """Split the job's GPUs between training ranks and a vLLM server; check launcher and strategy.

    >>> plan(8, vllm_server_gpus=1, strategy="zero2").train_processes
    7
    >>> plan(16, nodes=2).processes_per_node
    8
    """
    if launcher not in LAUNCHERS:
        raise LaunchError(f"launcher must be one of {', '.join(LAUNCHERS)}, got {launcher!r}")
    if strategy not in STRATEGIES:
        raise LaunchError(f"resources.train.strategy must be one of {', '.join(STRATEGIES)}, got {strategy!r}")
    if gpus < 0 or vllm_server_gpus < 0:
        raise LaunchError(f"GPU counts must be >= 0, got gpus={gpus}, vllm_server_gpus={vllm_server_gpus}")
    if nodes < 1:
        raise LaunchError(f"resources.train.nodes must be >= 1, got {nodes}")
    if vllm_server_gpus and vllm_server_gpus >= gpus:
        raise LaunchError(
            f"vLLM server mode needs more GPUs than the server takes: the job has {gpus} GPU(s) and the "
            f"server {vllm_server_gpus}; raise resources.train.gpu or use vllm colocate mode"
        )
    if nodes > 1:
        if vllm_server_gpus:
            raise LaunchError(
                "resources.train.nodes > 1 with vllm_server_gpus is not supported (the server would sit on "
                "one node only): use train.grpo.vllm_mode: colocate and vllm_server_gpus: 0 on several nodes"
            )
        if gpus < nodes or gpus % nodes:
            raise LaunchError(
                f"resources.train.gpu ({gpus}) is the job's total and must be a multiple of "
                f"resources.train.nodes ({nodes}), at least one GPU per node"
            )
    train_processes = max(1, gpus - vllm_server_gpus)
    if strategy == "single" and (train_processes > 1 or nodes > 1):
        raise LaunchError(
            f"resources.train.strategy: single runs one process, but the job has {train_processes} training "
            f"GPU(s) on {nodes} node(s): choose ddp, zero2, zero3 or fsdp, or set resources.train.gpu to 1"
        )
    if launcher == "torchrun" and strategy not in ("single", "ddp") and train_processes > 1:
        raise LaunchError(
            f"resources.train.strategy: {strategy} is an accelerate config file: set resources.train.launcher: "
            "accelerate (torchrun runs ddp only)"
        )
    return LaunchPlan(gpus=gpus, train_processes=train_processes, vllm_server_gpus=vllm_server_gpus,
                      launcher=launcher, strategy=strategy, nodes=nodes)


def _launcher_argv(p: LaunchPlan, python: str, machine_rank: int | None, main_ip: str | None,
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

    ``stop_grace_s``: with several processes, run the launcher under :func:`supervise` (``python -m
    olmpipe.launch --supervise``): a SIGTERM to the job reaches every rank at once, the ranks get
    that long to finish the step and write the checkpoint, and the job exits 75.

    ``main_process_port``: the rendezvous port of a multi-GPU job (launcher default when None, or
    derived from ``$SLURM_JOB_ID`` on several nodes); pass distinct ports when two multi-GPU jobs
    may share a node. With ``nodes > 1`` the argv is ``srun`` starting ``python -m olmpipe.launch
    --node`` once per node (see :func:`node_command`).

    One process on a GPU runs through ``python -m olmpipe.launch --exec``, which limits
    ``CUDA_VISIBLE_DEVICES`` to the job's GPU inside the job and replaces itself by the trainer
    (:func:`single_gpu_environment`); without GPUs the module runs plainly.

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
    cmd = _job_argv(p, module, args, python, main_process_port, config_dir)
    if p.distributed and stop_grace_s is not None:
        return [python, "-m", "olmpipe.launch", "--supervise", "--stop-grace-s", str(stop_grace_s), "--strategy",
                strategy, "--", *cmd]
    return cmd


def check_packages(strategy: str, processes: int) -> None:
    """Stop before the launcher starts when this node lacks a package of the job's strategy
    (:mod:`olmpipe.train.packages`; installed versions only, nothing imported here).

    accelerate's launcher would otherwise fail first with its own message (``DeepSpeed is not
    installed``, accelerate 1.15 ``commands/launch.py`` 1042-1043). The ranks check everything the
    job needs (vLLM included, before the server starts), with imports, in :mod:`olmpipe.train.cli`.
    Raises :class:`~olmpipe.train.packages.MissingPackageError`.
    """
    from olmpipe.train.packages import check, job_needs

    check(job_needs(strategy=strategy, processes=processes), import_modules=False)


def supervise(cmd: Sequence[str], env: Mapping[str, str], grace_s: float) -> int:
    """Run a multi-process launcher so that a SIGTERM to the job stops every rank with a checkpoint.

    The launcher (accelerate/torchrun's elastic agent) and its ranks run in a process group of
    their own. SIGTERM, SIGINT or SIGHUP to this process -- SLURM's preemption or walltime signal,
    ``scancel --signal=TERM`` -- is sent to that whole group at once, so every rank sets its stop
    flag in the same step and they write one checkpoint together
    (:class:`olmpipe.train.callbacks.StopOnSignal`). The elastic agent would otherwise SIGKILL its
    workers 30 s after its own SIGTERM (torch 2.13 ``LaunchConfig.shutdown_timeout``, default from
    ``TORCH_ELASTIC_SHUTDOWN_TIMEOUT``): it is set to ``grace_s`` here, and anything of the group
    still alive ``grace_s`` after the signal is killed. Returns :data:`EXIT_PREEMPTED` after a
    signal, else the launcher's exit code.
    """
    env = {**env, "TORCH_ELASTIC_SHUTDOWN_TIMEOUT": str(max(1, int(grace_s)))}
    proc = subprocess.Popen(list(cmd), env=env, start_new_session=True)
    state: dict[str, float | int | None] = {"signal": None, "deadline": None}

    def _group(sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def _handle(signum: int, frame: object) -> None:
        if state["signal"] is None:
            state["signal"], state["deadline"] = signum, time.monotonic() + grace_s
            sys.stderr.write(f"olmpipe.launch: signal {signum}: stopping every rank after its checkpoint "
                             f"(at most {grace_s:.0f} s)\n")
            _group(signal.SIGTERM)

    previous = {sig: signal.signal(sig, _handle) for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)}
    try:
        while True:
            try:
                code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                deadline = state["deadline"]
                if deadline is not None and time.monotonic() > deadline:
                    _group(signal.SIGKILL)
        # ranks the agent left behind (it is gone; they are still in the group)
        end = (state["deadline"] or time.monotonic()) + 5
        while group_members(proc.pid) and time.monotonic() < end:
            time.sleep(0.2)
        _group(signal.SIGKILL)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_PREEMPTED if state["signal"] is not None else code


def _job_argv(p: LaunchPlan, module: str, args: Sequence[str], python: str, port: int | None,
              config_dir: str | Path) -> list[str]:
    """The one-node command of plan ``p``: plain ``python -m`` for one process, else the launcher."""
    if not p.distributed:
        return [python, "-m", module, *args]
    return [*_launcher_argv(p, python, None, None, port, config_dir), "-m", module, *args]


def single_gpu_environment(env: Mapping[str, str], gpus: int) -> dict[str, str]:
    """``CUDA_VISIBLE_DEVICES`` of a one-process job on a GPU: that GPU only.

    transformers counts every visible GPU (``TrainingArguments._setup_devices``, transformers 5.24
    ``training_args.py`` ~1950: ``_n_gpu = torch.cuda.device_count()``) and TRL 1.16's GRPOTrainer
    refuses ``n_gpu > 1`` (``trl/trainer/grpo_trainer.py:975-980``), so a workstation with several
    GPUs would fail. The job's GPU is the first of ``CUDA_VISIBLE_DEVICES`` when set (SLURM sets it
    to the granted GPU), else GPU 0. A variable set but empty (GPUs hidden on purpose) is left alone.

    >>> single_gpu_environment({"CUDA_VISIBLE_DEVICES": "2,3"}, 1)
    {'CUDA_VISIBLE_DEVICES': '2'}
    >>> single_gpu_environment({}, 1)
    {'CUDA_VISIBLE_DEVICES': '0'}
    """
    from olmpipe.train.vllm_server import visible_devices

    if gpus < 1 or ("CUDA_VISIBLE_DEVICES" in env and not env["CUDA_VISIBLE_DEVICES"].strip()):
        return {}
    return {"CUDA_VISIBLE_DEVICES": ",".join(visible_devices(env, 1))}


def server_mode_command(module: str, args: Sequence[str], *, gpus: int, vllm_server_gpus: int,
                        env: Mapping[str, str], launcher: str = "accelerate", strategy: str = "ddp",
                        python: str | None = None, main_process_port: int | None = None,
                        config_dir: str | Path = ACCELERATE_CONFIG_DIR) -> tuple[list[str], dict[str, str]]:
    """(argv, environment changes) of a one-node job whose devices are decided inside the job.

    With ``vllm_server_gpus``, the last of the job's GPUs go to the vLLM server: the training
    processes see only theirs (``CUDA_VISIBLE_DEVICES``) and rank 0 finds the server's in
    ``OLMPIPE_VLLM_SERVER_DEVICES`` (:func:`olmpipe.train.vllm_server.trainer_environment`, which
    starts the server there). Without, a single process sees only its GPU (:func:`single_gpu_environment`).
    """
    from olmpipe.train.vllm_server import trainer_environment

    p = plan(gpus, launcher, vllm_server_gpus, strategy, 1)
    try:
        if vllm_server_gpus:
            changes = trainer_environment(env, gpus, vllm_server_gpus)
        else:
            changes = {} if p.distributed else single_gpu_environment(env, gpus)
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc
    return _job_argv(p, module, args, python or sys.executable, main_process_port, config_dir), changes


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
    launcher_argv = _launcher_argv(p, python or sys.executable, rank, resolve_host(nodelist), port, config_dir)
    return [*launcher_argv, "-m", module, *args]


def launch_prefix(gpus: int, launcher: str = "accelerate", vllm_server_gpus: int = 0,
                  module: str = "olmpipe.train", strategy: str = "ddp", nodes: int = 1,
                  stop_grace_s: int | None = None) -> str:
    """:func:`launch_command` as a shell string, for a rule's ``shell:`` (arguments appended after it).

    In a rule: ``params: launch=lambda wildcards, resources: launch_prefix(resources.gpu, ...)``.
    """
    return shlex.join(launch_command(module, (), gpus, launcher, vllm_server_gpus, strategy=strategy,
                                     nodes=nodes, stop_grace_s=stop_grace_s))


def slurm_node_resources(nodes: int) -> dict[str, int | str]:
    """Extra rule resources of a multi-node train job for snakemake-executor-plugin-slurm.

    ``nodes`` -> ``sbatch --nodes``; ``mpi`` + ``tasks`` -> ``--ntasks=M`` and no ``srun -n1`` wrapper
    around the job (the rule's own ``srun`` starts one launcher per node); ``tasks_per_gpu: 0`` stops
    the plugin from turning ``tasks`` into ``--ntasks-per-gpu``. Empty for one node.
    """
    if nodes <= 1:
        return {}
    return {"nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun"}


def main(argv: list[str] | None = None) -> int:
    """Print the launch command line for a module and its arguments, or (``--node``) run it here."""
    parser = argparse.ArgumentParser(prog="python -m olmpipe.launch", description=__doc__.splitlines()[0])
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
    from olmpipe.train.packages import MissingPackageError

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


if __name__ == "__main__":
    sys.exit(main())
