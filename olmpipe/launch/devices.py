"""The GPUs of a one-node training job, decided inside the job (``python -m olmpipe.launch --exec``).

The devices a job was granted are known only once it runs (SLURM sets ``CUDA_VISIBLE_DEVICES``):
:func:`server_mode_command` gives TRL's vLLM server the last of them and the training processes the
others, or (:func:`single_gpu_environment`) a one-process job only its own GPU.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from olmpipe.launch.commands import job_argv
from olmpipe.process_plan import ACCELERATE_CONFIG_DIR, LaunchError, plan


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
    return job_argv(p, module, args, python or sys.executable, main_process_port, config_dir), changes
