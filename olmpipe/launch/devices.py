"""The GPUs of a one-node training job, decided inside the job (``python -m olmpipe.launch --exec``).

The devices a job was granted are known only once it runs (SLURM sets ``CUDA_VISIBLE_DEVICES``):
:func:`server_mode_command` gives TRL's vLLM server the last of them and the training processes the
others, or (:func:`single_gpu_environment`) a one-process job only its own GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from olmpipe.config.processes import ACCELERATE_CONFIG_DIR, LaunchError, plan
from olmpipe.launch.commands import job_argv

#: Environment variable that carries the server's devices from the launcher to the trainer's rank 0
#: (:func:`olmpipe.train.vllm_server.server_devices` reads it).
SERVER_DEVICES_ENV = "OLMPIPE_VLLM_SERVER_DEVICES"


def split_devices(visible: Sequence[str], server_gpus: int) -> tuple[list[str], list[str]]:
    """Split a job's devices into the vLLM server's (the last ``server_gpus``) and the trainer's.

    The server takes the last devices, as olmOCR's launcher did (``vllm_gpu = num_gpus - 1``).

    >>> split_devices(["0", "1", "2", "3"], 1)
    (['3'], ['0', '1', '2'])
    >>> split_devices(["0", "1"], 0)
    ([], ['0', '1'])
    """
    visible = [str(d) for d in visible]
    if server_gpus < 0:
        raise ValueError(f"resources.train.vllm_server_gpus must be >= 0, got {server_gpus}")
    if server_gpus and server_gpus >= len(visible):
        raise ValueError(
            f"the job sees {len(visible)} GPU(s) ({','.join(visible) or 'none'}) but the vLLM server needs "
            f"{server_gpus} and training at least 1: raise resources.train.gpu or lower "
            "resources.train.vllm_server_gpus"
        )
    cut = len(visible) - server_gpus
    return visible[cut:], visible[:cut]


def visible_devices(environ: Mapping[str, str], gpus: int) -> list[str]:
    """The job's ``gpus`` devices: the first ``gpus`` of ``CUDA_VISIBLE_DEVICES`` when it is set (SLURM
    sets it to exactly the granted GPUs; a workstation may export more than the job asked for), else
    ``0..gpus-1``. Fewer listed than ``gpus`` are returned as they are (the callers say what is missing).

    >>> visible_devices({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 2)
    ['4', '5']
    """
    value = environ.get("CUDA_VISIBLE_DEVICES", "").strip()
    if value:
        return [d.strip() for d in value.split(",") if d.strip()][:gpus]
    return [str(i) for i in range(gpus)]


def trainer_environment(environ: Mapping[str, str], gpus: int, server_gpus: int) -> dict[str, str]:
    """Variables the launcher sets for the training processes in server mode.

    ``CUDA_VISIBLE_DEVICES`` becomes the trainer's devices and :data:`SERVER_DEVICES_ENV` names the
    server's, which rank 0 reads back with :func:`server_devices`. Empty without a server.

    >>> trainer_environment({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4, 1)
    {'CUDA_VISIBLE_DEVICES': '4,5,6', 'OLMPIPE_VLLM_SERVER_DEVICES': '7'}
    """
    if server_gpus == 0:
        return {}
    server, trainer = split_devices(visible_devices(environ, gpus), server_gpus)
    return {"CUDA_VISIBLE_DEVICES": ",".join(trainer), SERVER_DEVICES_ENV: ",".join(server)}


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
    ``OLMPIPE_VLLM_SERVER_DEVICES`` (:func:`trainer_environment`; rank 0 starts the server there,
    :mod:`olmpipe.train.vllm_server`). Without, a single process sees only its GPU (:func:`single_gpu_environment`).
    """
    p = plan(gpus, launcher, vllm_server_gpus, strategy, 1)
    try:
        if vllm_server_gpus:
            changes = trainer_environment(env, gpus, vllm_server_gpus)
        else:
            changes = {} if p.distributed else single_gpu_environment(env, gpus)
    except ValueError as exc:
        raise LaunchError(str(exc)) from exc
    return job_argv(p, module, args, python or sys.executable, main_process_port, config_dir), changes
