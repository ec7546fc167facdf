"""What a training job's GPUs become: training ranks, a vLLM server's GPUs, machines, a strategy.

:func:`plan` checks the combination before anything starts -- the launcher (:mod:`olmpipe.launch`),
the memory plan (:mod:`olmpipe.plan.memory`) and the config check (:mod:`olmpipe.config`) all call it -- and
names the setting to change when it cannot work. It imports nothing of olmpipe, so each of them can.

    >>> plan(8, vllm_server_gpus=1, strategy="zero2").train_processes
    7
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

LAUNCHERS = ("accelerate", "torchrun")
STRATEGIES = ("single", "ddp", "zero2", "zero3", "fsdp")
#: Strategies that need DeepSpeed (the ``deepspeed`` extra).
DEEPSPEED_STRATEGIES = ("zero2", "zero3")
#: Folder of the accelerate config files, relative to the repository root (Snakemake's working
#: directory), so that the rule's ``params.launch`` does not change when the checkout moves.
ACCELERATE_CONFIG_DIR = "workflow/accelerate"


class LaunchError(ValueError):
    """A launch that cannot work; the message names the setting to change."""


@dataclass(frozen=True)
class LaunchPlan:
    """The processes of one training job.

    ``gpus``: GPUs granted to the job (all nodes together); ``train_processes``: ranks that train
    (one per training GPU, 1 on CPU), over all nodes; ``vllm_server_gpus``: GPUs left to a vLLM
    server (TRL ``vllm_mode: server``); ``strategy``: how the ranks share the model
    (:mod:`olmpipe.launch`); ``nodes``: machines, one launcher each.
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
