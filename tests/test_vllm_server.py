"""Tests of olmpipe.train.vllm_server with a stand-in server (tests/fake_vllm_serve.py), on CPU.

The outcome checked everywhere: after success, failure, SIGTERM or kill -9 of the process holding
the server, no process of the server's process group is left (leader, its grandchild, watchdog).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import urllib.request
from pathlib import Path

import pytest

from olmpipe.config import load_config
from olmpipe.launch.devices import SERVER_DEVICES_ENV, split_devices, trainer_environment
from olmpipe.procs import group_members
from olmpipe.train.vllm_server import (
    ManagedVLLMServer,
    VLLMServerError,
    build_command,
    log_tail,
    server_devices,
)

FAKE = Path(__file__).with_name("fake_vllm_serve.py")
ROOT = Path(__file__).resolve().parents[1]


def make_cfg(record: Path, *switches: str, grpo: dict | None = None, **server) -> dict:
    settings = {"program": [sys.executable, str(FAKE), "--record", str(record), *switches],
                "startup_timeout_s": 15, "stop_grace_s": 3, **server}
    return load_config(overrides={"train": {"vllm_server": settings,
                                            "grpo": {"vllm_max_model_length": 4096, **(grpo or {})}}})


def events(record: Path) -> list[dict]:
    return [json.loads(line) for line in record.read_text().splitlines()] if record.exists() else []


def alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.05)
    return condition()


def assert_nothing_left(record: Path, timeout: float = 0.0) -> None:
    """No process of any server group the stand-in recorded, nor its grandchild, is running."""
    recorded = events(record)
    assert recorded, "the stand-in never started"
    pids = [e["pid"] for e in recorded if e["event"] in ("start", "child")]
    groups = {e["pgid"] for e in recorded if e["event"] == "start"}
    ok = wait_until(lambda: not any(group_members(g) for g in groups) and not any(map(alive, pids)), timeout)
    assert ok, f"left running: groups {[group_members(g) for g in groups]}, pids {[p for p in pids if alive(p)]}"


def health(url: str) -> int:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url + "/health", timeout=5) as response:
        return response.status


# --- pure helpers ------------------------------------------------------------------------------------


def test_split_devices_gives_the_last_gpus_to_the_server():
    assert split_devices(["0", "1", "2", "3", "4", "5", "6", "7"], 1) == (["7"], [str(i) for i in range(7)])
    assert split_devices(["GPU-a", "GPU-b", "GPU-c"], 2) == (["GPU-b", "GPU-c"], ["GPU-a"])
    assert split_devices(["0", "1"], 0) == ([], ["0", "1"])
    with pytest.raises(ValueError, match="training at least 1"):
        split_devices(["0", "1"], 2)
    with pytest.raises(ValueError, match=">= 0"):
        split_devices(["0", "1"], -1)


def test_trainer_environment_round_trips_the_server_devices():
    env = trainer_environment({"CUDA_VISIBLE_DEVICES": "4,5,6,7"}, 4, 2)
    assert env == {"CUDA_VISIBLE_DEVICES": "4,5", SERVER_DEVICES_ENV: "6,7"}
    assert server_devices(env) == ["6", "7"]
    assert trainer_environment({}, 3, 1) == {"CUDA_VISIBLE_DEVICES": "0,1", SERVER_DEVICES_ENV: "2"}
    assert trainer_environment({}, 3, 0) == {}
    # a workstation exporting more GPUs than the job asked for: the job's 2 are split, not all 4
    # (training on 3 GPUs in one process would fail in TRL; the server would sit on a GPU not granted)
    assert trainer_environment({"CUDA_VISIBLE_DEVICES": "0,1,2,3"}, 2, 1) == {"CUDA_VISIBLE_DEVICES": "0",
                                                                             SERVER_DEVICES_ENV: "1"}
    with pytest.raises(VLLMServerError, match="vllm_server_gpus"):
        server_devices({})


def test_command_carries_the_config_and_refuses_an_unset_model_length(tmp_path):
    cfg = make_cfg(tmp_path / "r", grpo={"vllm_tensor_parallel_size": 2, "vllm_gpu_memory_utilization": 0.5},
                   extra_args=["--enforce_eager", "true"])
    cmd = build_command(cfg, "/models/qwen", ["6", "7"], 8123)
    flags = dict(zip(cmd[cmd.index("--model")::2], cmd[cmd.index("--model") + 1::2]))
    assert flags == {"--model": "/models/qwen", "--tensor_parallel_size": "2", "--data_parallel_size": "1",
                     "--host": "127.0.0.1", "--port": "8123", "--gpu_memory_utilization": "0.5",
                     "--max_model_len": "4096", "--dtype": "bfloat16", "--logprobs-mode": "processed_logprobs",
                     "--enforce_eager": "true"}
    default = load_config(overrides={"train": {"grpo": {"vllm_max_model_length": 4096}}})
    assert build_command(default, "m", ["0"], 1)[:3] == [sys.executable, "-m", "trl.scripts.vllm_serve"]
    with pytest.raises(ValueError, match="vllm_max_model_length is null"):
        build_command(load_config(), "m", ["0"], 8000)
    with pytest.raises(ValueError, match="vllm_tensor_parallel_size is 2: they must be equal"):
        build_command(cfg, "m", ["0", "1", "2", "3"], 8000)
    with pytest.raises(ValueError, match="must exceed max_completion_length"):
        build_command(make_cfg(tmp_path / "r", grpo={"vllm_max_model_length": 32}), "m", ["0"], 8000)


def test_trl_vllm_serve_parses_the_command():
    """The real `trl vllm-serve` (TRL 1.16) reads every flag olmpipe passes, with nothing left over."""
    from trl.scripts.vllm_serve import make_parser

    cfg = load_config(overrides={"train": {"dtype": "float32", "grpo": {
        "vllm_max_model_length": 16384, "vllm_gpu_memory_utilization": 0.5}, "vllm_server": {
        "extra_args": ["--enable_prefix_caching", "true"]}}})
    cmd = build_command(cfg, "/models/qwen", ["7"], 8123)
    args, rest = make_parser().parse_args_and_config(args=cmd[3:], return_remaining_strings=True)
    assert rest == ["--logprobs-mode", "processed_logprobs"]  # for `vllm serve` (train.vllm_server.logprobs_mode)
    assert (args.model, args.host, args.port, args.tensor_parallel_size, args.data_parallel_size) == (
        "/models/qwen", "127.0.0.1", 8123, 1, 1)
    assert (args.gpu_memory_utilization, args.max_model_len, args.dtype, args.enable_prefix_caching) == (
        0.5, 16384, "bfloat16", True)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "auto"])
def test_the_server_serves_bf16_whatever_the_trainer_computes_in(dtype):
    """Issue 31, item 19: the plan counts the server's weights and KV cache at 2 bytes (VLLM_BYTES),
    as precision.py documents; train.dtype: float32 (float32 compute) must not double both
    (--kv-cache-dtype auto follows --dtype, trl/scripts/vllm_serve.py 150-155)."""
    from olmpipe.plan.memory import VLLM_BYTES

    cfg = load_config(overrides={"train": {"dtype": dtype, "grpo": {"vllm_max_model_length": 4096}}})
    cmd = build_command(cfg, "m", ["0"], 8000)
    assert cmd[cmd.index("--dtype") + 1] == "bfloat16" and VLLM_BYTES == 2


def test_raw_logprobs_reach_vllm_after_trls_own_mode():
    """train.vllm_server.logprobs_mode: raw_logprobs (olmOCR 2's untempered server log-probs): TRL 1.16
    forces --logprobs-mode processed_logprobs (trl/scripts/vllm_serve.py:265-276) and appends what it
    does not know after it, so the `vllm serve` command ends with ours (vLLM's parser keeps the last
    one: tests/test_train_vllm.py parses it with vLLM's own)."""
    from trl.scripts.vllm_serve import build_command as trl_command
    from trl.scripts.vllm_serve import make_parser

    cfg = load_config(overrides={"train": {"grpo": {"vllm_max_model_length": 8192},
                                           "vllm_server": {"logprobs_mode": "raw_logprobs"}}})
    args, rest = make_parser().parse_args_and_config(args=build_command(cfg, "m", ["0"], 8000)[3:],
                                                     return_remaining_strings=True)
    serve = trl_command(args, rest)
    modes = [serve[i + 1] for i, a in enumerate(serve) if a == "--logprobs-mode"]
    assert modes == ["processed_logprobs", "raw_logprobs"]


def test_log_tail_reads_only_this_start_and_the_last_lines(tmp_path):
    log = tmp_path / "vllm_server.log"
    log.write_text("old run: crashed\n")
    start = log.stat().st_size
    with open(log, "a") as fh:
        fh.writelines(f"line {i}\n" for i in range(100))
    assert log_tail(log, start, 3) == "line 97\nline 98\nline 99"
    assert log_tail(log, log.stat().st_size, 3) == "(the log is empty)"
    assert "old run" not in log_tail(log, start, 1000)
    assert "unreadable" in log_tail(tmp_path / "missing.log", 0, 3)


# --- the managed server ------------------------------------------------------------------------------


def test_server_answers_then_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("MASTER_PORT", "29500")
    record = tmp_path / "record.jsonl"
    cfg = make_cfg(record, "--child")
    with ManagedVLLMServer(cfg, "model", tmp_path / "run", gpus=["7"]) as server:
        assert health(server.url) == 200
        assert server.grpo_overrides() == {"vllm_server_base_url": None, "vllm_server_host": "127.0.0.1",
                                           "vllm_server_port": server.port, "vllm_group_port": server.group_port}
        start = events(record)[0]
        assert start["pgid"] == start["pid"] != os.getpgrp()  # its own process group
        assert start["env"] == {"CUDA_VISIBLE_DEVICES": "7"}  # its GPU, no torch.distributed variables
        assert "--port" in start["argv"] and str(server.port) in start["argv"]
    assert_nothing_left(record)
    recorded = events(record)
    started = {e["pid"] for e in recorded if e["event"] in ("start", "child")}
    assert {e["pid"] for e in recorded if e["event"] == "sigterm"} == started  # the whole group asked politely
    log = (tmp_path / "run" / "vllm_server.log").read_text()
    assert "fake vLLM: listening" in log and "olmpipe: starting" in log


def test_the_trainer_reaches_its_server_past_a_proxy(tmp_path, monkeypatch):
    """A cluster's http_proxy (here an address nothing listens on) must not route the trainer's
    requests to 127.0.0.1: TRL's client (requests, a Session and requests.get) reaches the server
    while the block runs; NO_PROXY/no_proxy are restored after it."""
    import requests

    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # discard port: nothing answers
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NO_PROXY", "corp.example")
    monkeypatch.delenv("no_proxy", raising=False)
    record = tmp_path / "record.jsonl"
    with ManagedVLLMServer(make_cfg(record), "model", tmp_path / "run", gpus=["0"]) as server:
        assert requests.get(server.url + "/health", timeout=10).status_code == 200
        with requests.Session() as session:
            assert session.get(server.url + "/health", timeout=10).status_code == 200
        assert os.environ["no_proxy"] == os.environ["NO_PROXY"] == "corp.example,127.0.0.1"
    assert os.environ["NO_PROXY"] == "corp.example" and "no_proxy" not in os.environ
    with pytest.raises(requests.exceptions.ProxyError):  # the proxy is really in the way without it
        requests.get(server.url + "/health", timeout=10)
    assert_nothing_left(record)


def test_error_in_the_block_stops_the_server_and_keeps_the_log(tmp_path):
    record = tmp_path / "record.jsonl"
    run = tmp_path / "run"
    run.mkdir()
    (run / "vllm_server.log").write_text("earlier run\n")
    with pytest.raises(KeyError), ManagedVLLMServer(make_cfg(record, "--child"), "m", run, gpus=["0"]):
        raise KeyError("training failed")
    assert_nothing_left(record)
    assert (run / "vllm_server.log").read_text().startswith("earlier run\n")  # appended, not replaced


def test_slow_start_within_the_limit(tmp_path, monkeypatch):
    monkeypatch.setenv("http_proxy", "http://127.0.0.1:9")  # a site proxy must not catch 127.0.0.1
    record = tmp_path / "record.jsonl"
    started = time.monotonic()
    with ManagedVLLMServer(make_cfg(record, "--delay", "1.5"), "m", tmp_path, gpus=["0"]) as server:
        assert time.monotonic() - started >= 1.5
        assert health(server.url) == 200
    assert_nothing_left(record)


def test_start_past_the_limit_fails_with_the_log_tail(tmp_path):
    record = tmp_path / "record.jsonl"
    cfg = make_cfg(record, "--delay", "60", "--child", startup_timeout_s=3.0, log_tail_lines=5)
    with pytest.raises(VLLMServerError) as err:
        ManagedVLLMServer(cfg, "m", tmp_path, gpus=["0"]).__enter__()
    message = str(err.value)
    assert "startup_timeout_s = 3 s" in message and "fake vLLM: loading model for 60.0 s" in message
    assert_nothing_left(record)


def test_crash_at_start_fails_with_the_exit_code_and_the_error(tmp_path):
    record = tmp_path / "record.jsonl"
    with (pytest.raises(VLLMServerError, match=r"exited with code 3(.|\n)*CUDA out of memory"),
          ManagedVLLMServer(make_cfg(record, "--crash"), "m", tmp_path, gpus=["0"])):
        pytest.fail("the block must not run")
    assert_nothing_left(record)


def test_server_ignoring_sigterm_is_killed_after_the_grace(tmp_path):
    record = tmp_path / "record.jsonl"
    with ManagedVLLMServer(make_cfg(record, "--ignore-term", "--child", stop_grace_s=0.5), "m", tmp_path,
                           gpus=["0"]):
        pass
    assert_nothing_left(record)


def _listening(port: int = 0, host: str = ""):
    import socket

    sock = socket.socket()
    sock.bind((host, port))
    sock.listen()
    return sock


def test_each_server_job_gets_a_free_weight_sync_group_port(tmp_path):
    """Issue 31, item 15: TRL's weight-sync group binds vllm_group_port (default 51216,
    trl/trainer/grpo_config.py 647-648) on the node: the job's overrides name a free port of the node
    instead, as they do for the HTTP port, so two server-mode jobs on one node do not clash."""
    from olmpipe.train.vllm_server import TRL_GROUP_PORT

    cfg = make_cfg(tmp_path / "r")
    try:
        held = _listening(TRL_GROUP_PORT)  # another job's group
    except OSError:
        held = None  # taken by something else already: the point stands
    try:
        first = ManagedVLLMServer(cfg, "m", tmp_path, gpus=["0"]).grpo_overrides()["vllm_group_port"]
        assert first != TRL_GROUP_PORT
        with _listening(first):  # the first job's group is up: the second job gets another port
            second = ManagedVLLMServer(cfg, "m", tmp_path, gpus=["0"]).grpo_overrides()["vllm_group_port"]
        assert second not in (first, TRL_GROUP_PORT)
    finally:
        if held is not None:
            held.close()
    # one the config names is checked on every interface (the group binds the node's address)
    with _listening() as busy:
        port = busy.getsockname()[1]
        knobs = {**cfg["train"]["grpo"], "vllm_group_port": port}
        with pytest.raises(VLLMServerError, match=f"train.grpo.vllm_group_port {port} is in use"):
            ManagedVLLMServer(cfg, "m", tmp_path, gpus=["0"], knobs=knobs)
    free = _listening()
    port = free.getsockname()[1]
    free.close()
    knobs = {**cfg["train"]["grpo"], "vllm_group_port": port}
    assert ManagedVLLMServer(cfg, "m", tmp_path, gpus=["0"], knobs=knobs).grpo_overrides()["vllm_group_port"] == port


def test_configured_port_in_use_is_refused(tmp_path):
    import socket

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        with pytest.raises(VLLMServerError, match=f"port {port} on 127.0.0.1 is in use"):
            ManagedVLLMServer(make_cfg(tmp_path / "r", port=port), "m", tmp_path, gpus=["0"])
    assert not (tmp_path / "r").exists()  # nothing started


# --- the process holding the server dies -------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import json, signal, sys, time
    from pathlib import Path
    from olmpipe.train.vllm_server import ManagedVLLMServer
    cfg, run, own_handler = json.loads(sys.argv[1]), Path(sys.argv[2]), sys.argv[3] == "1"
    if own_handler:  # like olmpipe.job.callbacks.StopOnSignal: finish the step, then leave
        stop = []
        signal.signal(signal.SIGTERM, lambda *a: stop.append(1))
    with ManagedVLLMServer(cfg, "m", run, gpus=["0"]) as server:
        (run / "ready.tmp").write_text(server.url)
        (run / "ready.tmp").rename(run / "ready")  # complete when it appears
        while not (own_handler and stop):
            time.sleep(0.05)
        (run / "stopping").write_text("1")
        deadline = time.monotonic() + 30
        while not (run / "checked").exists() and time.monotonic() < deadline:
            time.sleep(0.05)  # the step in flight: the server must still answer
    sys.exit(75)
""")


def start_holder(tmp_path: Path, record: Path, *switches: str, own_handler: bool = False,
                 **server) -> tuple[subprocess.Popen, str]:
    cfg = make_cfg(record, "--child", *switches, **server)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, json.dumps(cfg), str(tmp_path), str(int(own_handler))],
                              env=env)
    assert wait_until(lambda: (tmp_path / "ready").exists(), 30), "the holder did not start the server"
    return holder, (tmp_path / "ready").read_text()


def test_sigterm_to_the_holder_stops_the_server(tmp_path):
    record = tmp_path / "record.jsonl"
    holder, _ = start_holder(tmp_path, record)
    holder.send_signal(signal.SIGTERM)
    assert holder.wait(timeout=15) == 128 + signal.SIGTERM
    assert_nothing_left(record)


def test_second_sigterm_while_stopping_a_hung_server_leaves_nothing(tmp_path):
    record = tmp_path / "record.jsonl"
    holder, _ = start_holder(tmp_path, record, "--ignore-term", stop_grace_s=1.5)
    holder.send_signal(signal.SIGTERM)
    time.sleep(0.5)
    holder.send_signal(signal.SIGTERM)  # e.g. scancel after SLURM's own signal
    assert holder.wait(timeout=15) == 128 + signal.SIGTERM
    assert_nothing_left(record)


def test_holder_with_its_own_sigterm_handler_keeps_the_server_until_it_leaves(tmp_path):
    record = tmp_path / "record.jsonl"
    holder, url = start_holder(tmp_path, record, own_handler=True)
    holder.send_signal(signal.SIGTERM)
    assert wait_until(lambda: (tmp_path / "stopping").exists())
    assert health(url) == 200  # still serving the step in flight
    (tmp_path / "checked").write_text("1")
    assert holder.wait(timeout=15) == 75
    assert_nothing_left(record)


def test_kill_9_of_the_holder_stops_the_server(tmp_path):
    record = tmp_path / "record.jsonl"
    holder, _ = start_holder(tmp_path, record)
    holder.kill()
    holder.wait(timeout=5)
    assert_nothing_left(record, timeout=10)  # parent-death signal + watchdog (grace 3 s)
