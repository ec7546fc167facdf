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
(:func:`olmpipe.launch.slurm.node_command`) and then replaces itself by the node's launcher.

What the job's GPUs become (training ranks, a vLLM server's GPUs, a strategy) is decided and
checked by :mod:`olmpipe.config.processes`, below this package, which the config check and the memory
plan use too. One module per job here, each importing only those listed before it (and, below
them, :mod:`olmpipe.config.processes`, :mod:`olmpipe.procs` and :mod:`olmpipe.train`'s packages check
and vLLM server devices):

- :mod:`.commands`: the argv of a job (:func:`~.commands.launch_command`) and the train rule's
  ``params.launch`` (:func:`~.commands.launch_prefix`);
- :mod:`.devices`: the GPUs of a one-node job, split inside the job (``--exec``: the vLLM server's
  and the trainer's, or a single process's one);
- :mod:`.slurm`: a multi-node job from SLURM's environment (``--node``: node list, machine rank,
  port) and the SLURM executor plugin's resources of such a job;
- :mod:`.supervise`: a multi-process launcher under a supervisor that stops every rank with a
  checkpoint on SIGTERM (``--supervise``);
- :mod:`.cli`: ``python -m olmpipe.launch`` (prints a command, or runs the job's part of it here).
"""
