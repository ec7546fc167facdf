"""A ``trl vllm-serve`` process owned by the training job (GRPO with ``vllm_mode: server``).

TRL's server mode expects a vLLM server to be running already; olmOCR's launcher started one by
hand (allenai/olmocr v0.4.27 ``scripts/train/grpotrainer-beaker-multi-gpu-augusta.sh``, lines
131-134 and 334-350: the last GPU for ``trl vllm-serve --gpu-memory-utilization 0.5``, a fixed port
8000, ``curl`` polling of ``/health`` that carries on even when the server never comes up, and a
plain ``kill`` of the server's pid in an ``EXIT`` trap). :class:`ManagedVLLMServer` does the same
job so that nothing is left behind:

- the command comes from the config (``train.grpo.vllm_*``, ``train.vllm_server``; ``--dtype
  bfloat16`` for every ``train.dtype``); a null ``vllm_max_model_length`` is refused (vLLM would size
  its cache for the model's whole 128k context);
- TRL's weight-sync group gets a free port of the node (``vllm_group_port``), as the server's HTTP
  port is free: two server-mode jobs on one node would otherwise both use TRL's 51216;
- the server runs in its own process group with ``CUDA_VISIBLE_DEVICES`` set to its GPUs, without
  the trainer's ``torch.distributed`` variables, on 127.0.0.1 and a free port, writing to
  ``<run_dir>/vllm_server.log`` (appended, so a resumed run keeps the earlier logs);
- start-up waits for ``GET /health`` to answer 200 (what TRL 1.16's client polls,
  ``trl/generation/vllm_client.py`` line 278) within ``startup_timeout_s``; a server that exits or
  stays silent fails with :class:`VLLMServerError` quoting the log's last lines, after being stopped;
- while the block runs, the server's address is in ``NO_PROXY``/``no_proxy`` of the trainer's
  process: TRL 1.16's client talks to it with ``requests`` (``trl/generation/vllm_client.py:218``
  a ``Session``, ``:283`` ``requests.get``), which routes 127.0.0.1 through ``http_proxy`` unless
  ``no_proxy`` names it; a cluster's proxy would make the trainer's own server unreachable. The
  previous values come back when the block ends;
- it is stopped when the ``with`` block ends, normally or by an exception, and on SIGTERM to a
  process that had no SIGTERM handler of its own (the block is left with ``SystemExit(143)``). A
  process that handles SIGTERM itself (:class:`olmpipe.job.callbacks.StopOnSignal`) keeps the
  server until it leaves the block, so the step in flight can still generate. Stopping sends
  SIGTERM to the whole group, then SIGKILL after ``stop_grace_s``;
- if the trainer dies without running its ``finally`` blocks (``kill -9``, out-of-memory killer),
  the kernel sends SIGTERM to the server (``PR_SET_PDEATHSIG``) and a small watchdog in the
  server's process group stops the rest of the group (vLLM's engine and worker processes).

How a job uses it (rank 0 only: TRL 1.16 connects to the server from the main process only,
``trl/generation/vllm_generation.py`` lines 300-308)::

    server_gpus = server_devices(os.environ)             # set by the launcher, see trainer_environment
    with ManagedVLLMServer(cfg, model_path, run_dir, gpus=server_gpus, knobs=knobs) as server:
        train_cfg["grpo"].update(server.grpo_overrides())  # vllm_server_host/port for GRPOConfig
        ...  # build the GRPOTrainer and train

Start it from the main thread: the kernel's parent-death signal follows the thread that started the
server.
"""

from __future__ import annotations

import ctypes
import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Self

from olmpipe.config.checks import wants_server
from olmpipe.launch.devices import SERVER_DEVICES_ENV
from olmpipe.procs import group_members

__all__ = ["ManagedVLLMServer", "VLLMServerError", "build_command", "server_devices", "wants_server"]

logger = logging.getLogger(__name__)

#: The server's address: the trainer runs on the same node.
HOST = "127.0.0.1"
#: TRL 1.16's health check path (trl/generation/vllm_client.py, line 278).
HEALTH_PATH = "/health"
#: Name of the server's log in the run folder.
LOG_NAME = "vllm_server.log"
#: The server's ``--dtype``: bf16, as vLLM's ``auto`` serves Qwen VL checkpoints (and downcasts a
#: float32 folder, vLLM 0.31 ``config/model.py`` 2372-2374), for every ``train.dtype``.
SERVER_DTYPE = "bfloat16"
#: TRL 1.16's default ``vllm_group_port`` (``trl/trainer/grpo_config.py`` 647-648): the port of the
#: weight-sync process group the trainer opens to the server.
TRL_GROUP_PORT = 51216
#: Seconds between health polls.
POLL_S = 0.25
#: Seconds to wait for SIGKILLed processes to disappear.
KILL_WAIT_S = 5.0
#: Variables of the trainer's process group (torchrun/accelerate) that must not reach vLLM, which
#: would otherwise try to join the trainer's ``torch.distributed`` world.
DISTRIBUTED_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                   "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT",
                   "TORCHELASTIC_RUN_ID", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS")
#: The proxy-exclusion variables (requests reads ``no_proxy`` first, then ``NO_PROXY``; other tools
#: one or the other): both get the server's host.
NO_PROXY_ENV = ("no_proxy", "NO_PROXY")
#: Linux ``prctl`` option: signal to receive when the parent (thread) dies.
_PR_SET_PDEATHSIG = 1
#: Watchdog run as ``python -I -c`` in the server's process group (ignoring the group's SIGTERM):
#: when the trainer (its parent) is gone, SIGTERM the group, wait ``grace`` seconds for it to
#: empty, then SIGKILL it (itself included).
_WATCHDOG = """
import os, signal, sys, time
parent, grace = int(sys.argv[1]), float(sys.argv[2])
signal.signal(signal.SIGTERM, signal.SIG_IGN)  # the group's SIGTERM is for the server
def others(pgid):
    out = []
    for name in os.listdir('/proc'):
        if name.isdigit() and int(name) != os.getpid():
            try:
                stat = open('/proc/%s/stat' % name).read()
            except OSError:
                continue
            fields = stat[stat.rindex(')') + 2:].split()
            if fields[0] != 'Z' and int(fields[2]) == pgid:
                out.append(int(name))
    return out
while os.getppid() == parent:
    time.sleep(0.2)
pgid = os.getpgrp()
os.killpg(pgid, signal.SIGTERM)
deadline = time.monotonic() + grace
while others(pgid) and time.monotonic() < deadline:
    time.sleep(0.1)
os.killpg(pgid, signal.SIGKILL)
"""


class VLLMServerError(RuntimeError):
    """The managed vLLM server could not be started (message: why, and the tail of its log)."""


def server_devices(environ: Mapping[str, str]) -> list[str]:
    """The server's devices as set by :func:`olmpipe.launch.devices.trainer_environment`; a clear error
    when missing."""
    value = environ.get(SERVER_DEVICES_ENV, "").strip()
    if not value:
        raise VLLMServerError(
            f"vllm_mode: server but {SERVER_DEVICES_ENV} is not set: the job has no GPUs left for the vLLM "
            "server; set resources.train.vllm_server_gpus (>= 1) and start training through olmpipe.launch"
        )
    return [d.strip() for d in value.split(",") if d.strip()]


def default_program() -> list[str]:
    """``trl vllm-serve`` run with this interpreter (the console script runs the same module)."""
    return [sys.executable, "-m", "trl.scripts.vllm_serve"]


def build_command(cfg: Mapping[str, Any], model_path: str | os.PathLike, gpus: Sequence[str], port: int,
                  *, knobs: Mapping[str, Any] | None = None) -> list[str]:
    """The server's command line (TRL 1.16 ``trl/scripts/vllm_serve.py`` ``ScriptArguments`` flags).

    ``knobs``: the job's GRPO knobs (:func:`olmpipe.train.args.grpo_knobs`, its seed's overrides
    applied; default ``train.grpo``). Raises ``ValueError`` naming the config key for a null
    ``vllm_max_model_length``, one shorter than ``max_completion_length``, or a GPU count other
    than the tensor parallel size.
    """
    train = cfg["train"]
    grpo = dict(knobs if knobs is not None else train["grpo"])
    max_len = grpo["vllm_max_model_length"]
    if max_len is None:
        raise ValueError(
            "train.grpo.vllm_max_model_length is null: set it (prompt + completion tokens, e.g. 16384) for "
            "vllm_mode: server; vLLM would otherwise size its cache for the model's whole context (128k)"
        )
    if max_len <= grpo["max_completion_length"]:
        raise ValueError(
            f"train.grpo.vllm_max_model_length ({max_len}) must exceed max_completion_length "
            f"({grpo['max_completion_length']}): it holds the prompt (page image tokens) and the completion"
        )
    tp = grpo["vllm_tensor_parallel_size"]
    if len(gpus) != tp:
        # data parallel serving (GPUs = tp x dp) errors out for dense models such as Qwen2.5-VL (TRL 1.16
        # trl/scripts/vllm_serve.py, ScriptArguments.data_parallel_size, lines 96-102): fail now, not
        # after minutes of model loading
        raise ValueError(
            f"the vLLM server has {len(gpus)} GPU(s) ({','.join(gpus) or 'none'}) but "
            f"train.grpo.vllm_tensor_parallel_size is {tp}: they must be equal (TRL's server does not run "
            "dense models data parallel); set resources.train.vllm_server_gpus to the tensor parallel size"
        )
    server = train["vllm_server"]
    program = list(server["program"]) if server["program"] else default_program()
    return program + [
        "--model", str(model_path),
        "--tensor_parallel_size", str(tp),
        "--data_parallel_size", "1",
        "--host", HOST,
        "--port", str(port),
        "--gpu_memory_utilization", str(grpo["vllm_gpu_memory_utilization"]),
        "--max_model_len", str(max_len),
        # bf16 whatever train.dtype is: float32 masters are copied into vLLM's bf16 weights at every sync
        # (olmpipe.job.precision), and the plan counts the server's weights and KV cache at 2 bytes
        # (olmpipe.plan.memory.VLLM_BYTES); --kv-cache-dtype auto follows this dtype
        # (trl/scripts/vllm_serve.py 150-155, 242-245)
        "--dtype", SERVER_DTYPE,
        # unknown to trl vllm-serve: passed on to `vllm serve` after TRL's own --logprobs-mode, so it wins
        "--logprobs-mode", server["logprobs_mode"],
    ] + [str(a) for a in server["extra_args"]]


def pick_port(configured: int | None) -> int:
    """A free TCP port on :data:`HOST` (bind port 0), or ``configured`` after checking it is free.

    The port is released before the server binds it, so another program could take it meanwhile;
    the server then fails at start and the error shows its log.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((HOST, configured or 0))
        except OSError as exc:
            raise VLLMServerError(
                f"train.vllm_server.port {configured} on {HOST} is in use ({exc.strerror}); free it or set "
                "train.vllm_server.port: null to pick a free port"
            ) from None
        return sock.getsockname()[1]


def pick_group_port(configured: int | None) -> int:
    """A free TCP port for TRL's weight-sync group, or ``configured`` after checking it is free.

    TRL's client opens the group with ``master_address: get_ip(), master_port: group_port``
    (``trl/generation/vllm_client.py`` 744-747), and the trainer is rank 0 of vLLM's
    ``StatelessProcessGroup``, which binds that port on the node's address (vLLM 0.31
    ``distributed/utils.py`` 493-497): so the port is checked on every interface, not only on
    :data:`HOST`. TRL's fixed default (:data:`TRL_GROUP_PORT`) would make a second server-mode job on
    the node fail to bind, or its server join the first job's group, so none set means a free one.
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("", configured or 0))
        except OSError as exc:
            raise VLLMServerError(
                f"train.grpo.vllm_group_port {configured} is in use on this node ({exc.strerror}); free it or leave "
                "train.grpo.vllm_group_port unset to pick a free port"
            ) from None
        return sock.getsockname()[1]


def log_tail(path: Path, start: int, lines: int, max_bytes: int = 256_000) -> str:
    """The last ``lines`` lines written to ``path`` after byte ``start`` (reads at most ``max_bytes``)."""
    try:
        with open(path, "rb") as fh:
            size = fh.seek(0, os.SEEK_END)
            fh.seek(max(start, size - max_bytes))
            data = fh.read()
    except OSError as exc:
        return f"(log {path} unreadable: {exc})"
    text = data.decode("utf-8", "replace").splitlines()[-lines:]
    return "\n".join(text) if text else "(the log is empty)"


def _parent_death_signal(sig: int):
    """A ``preexec_fn`` asking the kernel for ``sig`` when the parent dies (libc loaded beforehand:
    nothing may take a lock between fork and exec in a threaded trainer)."""
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def preexec() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGKILL)

    return preexec


class ManagedVLLMServer:
    """Context manager running a vLLM server for one training run (see the module docstring).

    ``cfg``: the job's config (``train`` section read); ``model_path``: what the server loads (the
    run's starting weights: TRL pushes the trainer's weights to it after each step); ``run_dir``:
    the seed's folder (log goes there); ``gpus``: the server's devices; ``knobs``: the job's GRPO
    knobs (its seed's ``train.seed_overrides`` applied; default ``train.grpo``).
    """

    def __init__(self, cfg: Mapping[str, Any], model_path: str | os.PathLike, run_dir: str | os.PathLike,
                 gpus: Sequence[str], *, knobs: Mapping[str, Any] | None = None) -> None:
        self._settings = dict(cfg["train"]["vllm_server"])
        self.port = pick_port(self._settings["port"])
        group_port = dict(knobs if knobs is not None else cfg["train"]["grpo"]).get("vllm_group_port")
        self.group_port = pick_group_port(None if group_port in (None, TRL_GROUP_PORT) else group_port)
        self.host = HOST
        self.gpus = [str(g) for g in gpus]
        self.command = build_command(cfg, model_path, self.gpus, self.port, knobs=knobs)
        self.log_path = Path(run_dir) / LOG_NAME
        self.process: subprocess.Popen | None = None
        self._watchdog: subprocess.Popen | None = None
        self._log_start = 0
        self._previous_handler: Any = None
        self._saved_no_proxy: dict[str, str | None] | None = None
        self._stopping = False
        # no proxy: a cluster's http_proxy must not route 127.0.0.1 (urllib honours it otherwise)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))

    @property
    def url(self) -> str:
        """Base URL of the server (``http://127.0.0.1:<port>``)."""
        return f"http://{self.host}:{self.port}"

    def grpo_overrides(self) -> dict[str, Any]:
        """GRPOConfig knobs that point TRL at this server (they replace the config's address keys),
        with a free port for the weight-sync group (:func:`pick_group_port`)."""
        return {"vllm_server_base_url": None, "vllm_server_host": self.host, "vllm_server_port": self.port,
                "vllm_group_port": self.group_port}

    def environment(self) -> dict[str, str]:
        """The server's environment: the trainer's, with its GPUs and without ``torch.distributed``."""
        env = {k: v for k, v in os.environ.items() if k not in DISTRIBUTED_ENV}
        env["CUDA_VISIBLE_DEVICES"] = ",".join(self.gpus)
        env["PYTHONUNBUFFERED"] = "1"
        return env

    def __enter__(self) -> Self:
        self._install_sigterm()
        try:
            self.start()
            self.wait_healthy()
        except BaseException:
            try:
                self.stop()
            finally:
                self._restore_sigterm()
            raise
        self._bypass_proxies()
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.stop()
        finally:
            self._restore_proxies()
            self._restore_sigterm()

    def _bypass_proxies(self) -> None:
        """Add the server's host to ``NO_PROXY`` and ``no_proxy`` of this process (the entries of
        both, merged, so that neither spelling loses what the other had)."""
        self._saved_no_proxy = {name: os.environ.get(name) for name in NO_PROXY_ENV}
        hosts: list[str] = []
        for value in self._saved_no_proxy.values():
            hosts += [h.strip() for h in (value or "").split(",") if h.strip() and h.strip() not in hosts]
        if self.host not in hosts:
            hosts.append(self.host)
        for name in NO_PROXY_ENV:
            os.environ[name] = ",".join(hosts)

    def _restore_proxies(self) -> None:
        saved, self._saved_no_proxy = self._saved_no_proxy, None
        for name, value in (saved or {}).items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value

    def start(self) -> None:
        """Start the server (own process group, log appended) and its watchdog."""
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._log_start = log.tell()
            log.write(f"--- olmpipe: starting {' '.join(self.command)} (GPUs {','.join(self.gpus)}) at "
                      f"{time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode())
            log.flush()
            # preexec_fn only calls prctl, prepared beforehand (see _parent_death_signal)
            self.process = subprocess.Popen(
                self.command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                env=self.environment(), process_group=0,
                preexec_fn=_parent_death_signal(signal.SIGTERM),  # noqa: PLW1509
            )
        logger.info("vLLM server started (pid %d, GPUs %s, port %d), log %s", self.process.pid,
                    ",".join(self.gpus), self.port, self.log_path)
        self._watchdog = subprocess.Popen(
            [sys.executable, "-I", "-c", _WATCHDOG, str(os.getpid()), str(self._settings["stop_grace_s"])],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            process_group=self.process.pid,
        )

    def wait_healthy(self) -> None:
        """Poll ``GET /health`` until it answers 200; raise :class:`VLLMServerError` when the server
        exits first or ``startup_timeout_s`` passes."""
        assert self.process is not None, "start() first"
        limit = float(self._settings["startup_timeout_s"])
        started = time.monotonic()
        while True:
            code = self.process.poll()
            if code is not None:
                raise self._failure(f"exited with code {code} after {time.monotonic() - started:.1f} s, "
                                    f"before {self.url}{HEALTH_PATH} answered")
            if self._healthy(timeout=max(0.1, min(2.0, limit - (time.monotonic() - started)))):
                if self.process.poll() is None:
                    logger.info("vLLM server healthy at %s after %.1f s", self.url, time.monotonic() - started)
                    return
                continue  # answered, then died: report the exit on the next pass
            if time.monotonic() - started >= limit:
                raise self._failure(f"did not answer {self.url}{HEALTH_PATH} within "
                                    f"train.vllm_server.startup_timeout_s = {limit:g} s")
            time.sleep(POLL_S)

    def _healthy(self, timeout: float) -> bool:
        try:
            with self._opener.open(self.url + HEALTH_PATH, timeout=timeout) as response:
                return response.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def _failure(self, what: str) -> VLLMServerError:
        lines = self._settings["log_tail_lines"]
        return VLLMServerError(
            f"vLLM server ({' '.join(self.command)}) {what}; last {lines} lines of {self.log_path}:\n"
            + log_tail(self.log_path, self._log_start, lines)
        )

    def stop(self) -> None:
        """SIGTERM the server's process group, SIGKILL what is left after ``stop_grace_s``. Idempotent.

        The watchdog (which ignores SIGTERM) stays until the end, so that a trainer killed while
        stopping still leaves nothing behind; a second SIGTERM meanwhile is ignored.
        """
        self._stopping = True
        proc, self.process = self.process, None
        watchdog, self._watchdog = self._watchdog, None
        if proc is None:
            return
        pgid = proc.pid
        spare = {watchdog.pid} if watchdog is not None else set()

        def left() -> list[int]:
            return [pid for pid in group_members(pgid) if pid not in spare]

        grace = float(self._settings["stop_grace_s"])
        _signal_group(pgid, signal.SIGTERM)
        deadline = time.monotonic() + grace
        try:
            proc.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            pass
        while left() and time.monotonic() < deadline:
            time.sleep(0.05)
        if left():
            logger.warning("vLLM server group %d still running %.0f s after SIGTERM: SIGKILL", pgid, grace)
        _signal_group(pgid, signal.SIGKILL)  # what is left, and the watchdog
        for child in (proc, watchdog):
            if child is not None:
                _kill_and_reap(child)
        deadline = time.monotonic() + KILL_WAIT_S
        while group_members(pgid) and time.monotonic() < deadline:  # SIGKILL takes effect asynchronously
            time.sleep(0.02)
        if group_members(pgid):
            logger.error("vLLM server group %d: processes %s survive SIGKILL (uninterruptible sleep?)",
                         pgid, group_members(pgid))
        logger.info("vLLM server stopped (exit code %s)", proc.returncode)

    def _install_sigterm(self) -> None:
        """Turn SIGTERM into ``SystemExit(143)`` while the server runs, unless the process already
        handles SIGTERM (then its handler decides when the ``with`` block ends)."""
        if threading.current_thread() is not threading.main_thread():
            return
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            self._previous_handler = signal.signal(signal.SIGTERM, self._on_sigterm)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        if self._stopping:
            logger.warning("signal %d while stopping the vLLM server: ignored", signum)
            return
        raise SystemExit(128 + signum)

    def _restore_sigterm(self) -> None:
        if self._previous_handler is not None:
            signal.signal(signal.SIGTERM, self._previous_handler)
            self._previous_handler = None


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _kill_and_reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            proc.kill()
        except ProcessLookupError:
            pass
    proc.wait()
