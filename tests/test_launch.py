"""olmpipe.launch: the training command line from the job's GPU count."""

from __future__ import annotations

import subprocess
import sys

import pytest

from olmpipe.launch import launch_command, launch_prefix, main, plan


@pytest.mark.parametrize("gpus", [0, 1])
def test_zero_or_one_gpu_runs_the_module_directly(gpus: int) -> None:
    assert launch_command("olmpipe.train", ["--seed", "3"], gpus=gpus, python="py") == [
        "py", "-m", "olmpipe.train", "--seed", "3"]


def test_accelerate_gets_one_process_per_gpu() -> None:
    cmd = launch_command("olmpipe.train", ["--seed", "3"], gpus=4, python="py", main_process_port=29511)
    assert cmd[:3] == ["py", "-m", "accelerate.commands.launch"]
    assert cmd[cmd.index("--num_processes") + 1] == "4"
    assert cmd[cmd.index("--main_process_port") + 1] == "29511"
    assert "--multi_gpu" in cmd
    assert cmd[-4:] == ["-m", "olmpipe.train", "--seed", "3"]


def test_torchrun_standalone() -> None:
    cmd = launch_command("olmpipe.train", [], gpus=2, launcher="torchrun", python="py")
    assert cmd[:3] == ["py", "-m", "torch.distributed.run"]
    assert cmd[cmd.index("--nproc_per_node") + 1] == "2"
    assert "--standalone" in cmd and cmd[-2:] == ["-m", "olmpipe.train"]


def test_vllm_server_gpus_are_not_training_ranks() -> None:
    assert plan(4, vllm_server_gpus=1).train_processes == 3
    # two GPUs, one for the server: a single training process, no launcher needed
    assert launch_command("m", [], gpus=2, vllm_server_gpus=1, python="py") == ["py", "-m", "m"]


@pytest.mark.parametrize(("gpus", "server", "launcher", "message"), [
    (1, 1, "accelerate", "more GPUs than the server"),
    (2, 2, "accelerate", "more GPUs than the server"),
    (-1, 0, "accelerate", ">= 0"),
    (2, 0, "deepspeed", "launcher must be one of"),
])
def test_bad_plans_say_what_to_change(gpus: int, server: int, launcher: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        plan(gpus, launcher, server)


def test_prefix_is_a_shell_string_that_round_trips() -> None:
    import shlex

    prefix = launch_prefix(2, "accelerate")
    assert shlex.split(prefix) == launch_command("olmpipe.train", [], 2, "accelerate")


def test_cli_prints_the_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--gpus", "2", "--launcher", "torchrun", "olmpipe.train", "--", "--seed", "1"]) == 0
    out = capsys.readouterr().out.split()
    assert out[-4:] == ["-m", "olmpipe.train", "--seed", "1"]
    assert "--nproc_per_node" in out


def test_accelerate_command_is_accepted_by_accelerate() -> None:
    # accelerate parses the flags we build (``--help`` after them would be swallowed by the module,
    # so ask accelerate's own parser directly)
    from accelerate.commands.launch import launch_command_parser

    cmd = launch_command("olmpipe.train", ["--seed", "1"], gpus=2, python=sys.executable)
    args = launch_command_parser().parse_args(cmd[3:])
    assert args.num_processes == 2 and args.module and args.training_script == "olmpipe.train"
    assert args.training_script_args == ["--seed", "1"]


def test_torchrun_command_is_accepted_by_torchrun() -> None:
    from torch.distributed.run import get_args_parser

    cmd = launch_command("olmpipe.train", ["--seed", "1"], gpus=2, launcher="torchrun", python=sys.executable)
    args = get_args_parser().parse_args(cmd[3:])
    assert args.nproc_per_node == "2" and args.module and args.training_script == "olmpipe.train"


def test_module_entry_point() -> None:
    proc = subprocess.run([sys.executable, "-m", "olmpipe.launch", "--gpus", "1", "olmpipe.train"],
                          capture_output=True, text=True, check=True)
    assert proc.stdout.split()[1:] == ["-m", "olmpipe.train"]
