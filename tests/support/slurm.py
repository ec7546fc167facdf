"""A throw-away single-node SLURM cluster on this machine, for testing the SLURM profile for real.

    python tests/support/slurm.py up      # start munged (if needed), slurmctld, slurmd; wait idle
    python tests/support/slurm.py down    # stop what `up` started (by pid), remove its config

In tests, use the context manager (it skips nothing itself: call ``unavailable_reason()`` first):

    with LocalSlurmCluster(ClusterSpec(gpus=2)) as cluster:
        subprocess.run(["sbatch", "--wrap", "true"], check=True)
        cluster.wait_for_jobs()
        records = cluster.job_records()

Why it looks like this (facts found on Debian 12 / slurm-wlm 22.05, no systemd, no cgroups):
- the config must be the real ``/etc/slurm/slurm.conf``: job steps drop ``SLURM_CONF``;
- ``proctrack/linuxproc`` + ``task/none`` + no accounting work without cgroups and slurmdbd;
- ``jobcomp/filetxt`` keeps one line per finished job (SLURM's own job record) long after
  ``squeue`` forgets it, so tests can prove that every workflow job went through ``sbatch``;
- ``SlurmdParameters=config_overrides`` lets the node advertise more CPUs/memory than the machine has,
  so the project's real resource requests are accepted and visible in ``scontrol show job``;
- fake GPUs are GRES ``gpu`` backed by character devices made with ``mknod`` (no driver needed):
  SLURM allocates them, sets ``CUDA_VISIBLE_DEVICES``, and shows them in the job record.

Only one such cluster can run per machine (fixed ports, fixed config path); a lock file serialises
users, and the cluster refuses to start over a ``slurm.conf`` or a controller it did not create.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Self

logger = logging.getLogger(__name__)

SLURM_CONF = Path("/etc/slurm/slurm.conf")
GRES_CONF = Path("/etc/slurm/gres.conf")
LOCK_PATH = Path("/run/lock/olmpipe-slurm-cluster.lock")
STATE_FILE = Path("/run/olmpipe-slurm-cluster.json")
MARKER = "# Written by olmpipe's tests/support/slurm.py: a throw-away local test cluster; removed on stop."
REQUIRED_BINARIES = ("slurmctld", "slurmd", "munged", "munge", "sbatch", "squeue", "scontrol", "scancel")
CTLD_PORT = 6817
SLURMD_PORT = 6818
MUNGE_SOCKET = Path("/run/munge/munge.socket.2")


@dataclass(frozen=True)
class ClusterSpec:
    """Shape of the local cluster: one node ``localhost`` in every partition.

    ``cpus``/``memory_mb`` are what the node *advertises* (``config_overrides``); jobs are not confined,
    so advertising more than the machine has only lets bigger requests be scheduled (one at a time).
    ``partitions``: the first is the default; the project's SLURM profile names ``cpu`` and ``gpu``.
    ``min_job_age`` keeps finished jobs visible to ``squeue``/``scontrol`` for that many seconds; the
    executor plugin's squeue status checks need it >= 3x ``slurm-init-seconds-before-status-checks``.
    ``kill_wait``: seconds between SIGTERM and SIGKILL when a job is cancelled, requeued or timed out.
    """

    cpus: int = 16
    memory_mb: int = 64000
    gpus: int = 4
    gpu_type: str = "fake"
    partitions: tuple[str, ...] = ("cpu", "gpu")
    min_job_age: int = 300
    kill_wait: int = 30
    cluster_name: str = "olmpipe-test"


def unavailable_reason() -> str | None:
    """Why a local cluster cannot be started here (None when it can): root, binaries, free ports."""
    if os.geteuid() != 0:
        return "needs root (writes /etc/slurm/slurm.conf, runs slurmd)"
    missing = [b for b in REQUIRED_BINARIES if shutil.which(b) is None]
    if missing:
        return f"slurm-wlm/munge binaries missing: {', '.join(missing)} (apt-get install slurm-wlm munge)"
    if SLURM_CONF.exists() and MARKER not in SLURM_CONF.read_text(errors="replace"):
        return f"{SLURM_CONF} exists and was not written by olmpipe: refusing to replace a real cluster's config"
    return None


def _port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def _run(cmd: list[str], timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=check)


def _munge_works() -> bool:
    """True when a munged answers on the default socket (encode + decode a credential)."""
    if not MUNGE_SOCKET.exists():
        return False
    try:
        cred = _run(["munge", "-n"], timeout=10).stdout
        return subprocess.run(["unmunge"], input=cred, capture_output=True, text=True, timeout=10,
                              check=False).returncode == 0
    except (subprocess.SubprocessError, OSError):
        return False


def parse_key_values(text: str) -> dict[str, str]:
    """``Key=Value Key2=Value 2`` (scontrol -o / jobcomp lines) to a dict; values may hold spaces."""
    out: dict[str, str] = {}
    key = None
    for token in text.strip().split(" "):
        name, eq, value = token.partition("=")
        if eq and name and name.replace("/", "").replace(":", "").isalnum():
            key = name
            out[key] = value
        elif key is not None:
            out[key] += " " + token
    return {k: v.strip() for k, v in out.items()}


@dataclass
class LocalSlurmCluster:
    """Start/stop a single-node cluster; stops exactly the daemons it started (by pid)."""

    spec: ClusterSpec = field(default_factory=ClusterSpec)
    state_dir: Path | None = None
    started_pids: dict[str, int] = field(default_factory=dict)
    _procs: dict[str, subprocess.Popen] = field(default_factory=dict, repr=False)
    _lock_fd: int | None = field(default=None, repr=False)
    _own_state_dir: bool = field(default=False, repr=False)

    # ------------------------------------------------------------------ config
    def slurm_conf(self) -> str:
        """The text of /etc/slurm/slurm.conf for this spec and state directory."""
        s, d = self.spec, self.state_dir
        gres = f" Gres=gpu:{s.gpu_type}:{s.gpus}" if s.gpus else ""
        lines = [
            MARKER,
            f"ClusterName={s.cluster_name}",
            f"SlurmctldHost={socket.gethostname()}(127.0.0.1)",
            "SlurmUser=root",
            "SlurmdUser=root",
            f"SlurmctldPort={CTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"StateSaveLocation={d}/ctld",
            f"SlurmdSpoolDir={d}/slurmd",
            f"SlurmctldPidFile={d}/slurmctld.pid",
            f"SlurmdPidFile={d}/slurmd.pid",
            f"SlurmctldLogFile={d}/slurmctld.log",
            f"SlurmdLogFile={d}/slurmd.log",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            # no cgroups, no systemd in containers/CI
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            # SLURM's own record of every finished job, kept after squeue forgets it
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={d}/jobcomp.txt",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core_Memory",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "JobRequeue=1",
            f"MinJobAge={s.min_job_age}",
            f"KillWait={s.kill_wait}",
            "InactiveLimit=0",
            "MpiDefault=none",
            "DefMemPerCPU=500",
        ]
        if s.gpus:
            lines.append("GresTypes=gpu")
        lines.append(
            f"NodeName=localhost NodeAddr=127.0.0.1 CPUs={s.cpus} RealMemory={s.memory_mb}{gres} State=UNKNOWN"
        )
        for i, name in enumerate(s.partitions):
            default = "YES" if i == 0 else "NO"
            lines.append(
                f"PartitionName={name} Nodes=localhost Default={default} MaxTime=INFINITE State=UP OverSubscribe=NO"
            )
        return "\n".join(lines) + "\n"

    def gres_conf(self) -> str:
        """gres.conf declaring the fake GPUs as device files under the state directory."""
        s = self.spec
        files = ",".join(str(self.state_dir / "dev" / f"nvidia{i}") for i in range(s.gpus))
        return f"{MARKER}\nAutoDetect=off\nNodeName=localhost Name=gpu Type={s.gpu_type} File={files}\n"

    def _make_fake_gpus(self) -> None:
        dev = self.state_dir / "dev"
        dev.mkdir(parents=True, exist_ok=True)
        for i in range(self.spec.gpus):
            path = dev / f"nvidia{i}"
            if not path.exists():
                # character device with the NVIDIA major number; nothing ever opens it
                made = _run(["mknod", str(path), "c", "195", str(i)], check=False)
                if made.returncode != 0:
                    raise RuntimeError(f"cannot make fake GPU device {path} (mknod): {made.stderr.strip()}; "
                                       "use ClusterSpec(gpus=0) where device files cannot be made")

    # --------------------------------------------------------------- lifecycle
    def start(self, lock_timeout: float = 600, ready_timeout: float = 60) -> Self:
        """Write the config, start the daemons and wait until the node is idle.

        Raises RuntimeError (with the daemon logs' tail) when the cluster does not come up.
        """
        reason = unavailable_reason()
        if reason:
            raise RuntimeError(f"cannot start a local SLURM cluster: {reason}")
        self._acquire_lock(lock_timeout)
        try:
            if _port_in_use(CTLD_PORT) or _port_in_use(SLURMD_PORT):
                raise RuntimeError(
                    f"ports {CTLD_PORT}/{SLURMD_PORT} are in use: another slurmctld/slurmd runs here"
                )
            if self.state_dir is None:
                self.state_dir = Path(tempfile.mkdtemp(prefix="olmpipe-slurm-"))
                self._own_state_dir = True
            for sub in ("ctld", "slurmd"):
                (self.state_dir / sub).mkdir(parents=True, exist_ok=True)
            if self.spec.gpus:
                self._make_fake_gpus()
            SLURM_CONF.parent.mkdir(parents=True, exist_ok=True)
            SLURM_CONF.write_text(self.slurm_conf())
            if self.spec.gpus:
                GRES_CONF.write_text(self.gres_conf())
            elif GRES_CONF.exists() and MARKER in GRES_CONF.read_text(errors="replace"):
                GRES_CONF.unlink()
            self._start_munge()
            self._spawn("slurmctld", ["slurmctld", "-D", "-c", "-i"])
            self._wait(lambda: _run(["scontrol", "ping"], check=False).returncode == 0, 30, "slurmctld")
            self._spawn("slurmd", ["slurmd", "-D", "-N", "localhost"])
            self._wait(self._node_idle, ready_timeout, "node localhost to become idle")
            self._write_state()
            logger.info("local SLURM cluster up (state in %s)", self.state_dir)
            return self
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Cancel all jobs, stop the daemons this object started, remove the config it wrote."""
        if "slurmctld" in self.started_pids:
            try:
                ids = _run(["squeue", "-h", "-o", "%i"], check=False).stdout.split()
                if ids:
                    _run(["scancel", *ids], check=False)
                    self._wait(lambda: not _run(["squeue", "-h", "-o", "%i"], check=False).stdout.split(),
                               self.spec.kill_wait + 15, "jobs to end", fail=False)
            except (subprocess.SubprocessError, OSError) as exc:
                logger.warning("could not cancel jobs: %s", exc)
        for name in ("slurmd", "slurmctld", "munged"):
            pid = self.started_pids.pop(name, None)
            if pid is not None:
                self._terminate(name, pid)
        for path in (SLURM_CONF, GRES_CONF):
            if path.exists() and MARKER in path.read_text(errors="replace"):
                path.unlink()
        if STATE_FILE.exists():
            STATE_FILE.unlink()
        self._release_lock()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ queries
    def job_records(self) -> list[dict[str, str]]:
        """SLURM's completion records (jobcomp/filetxt), one dict per finished job, oldest first."""
        path = self.state_dir / "jobcomp.txt"
        if not path.exists():
            return []
        return [parse_key_values(line) for line in path.read_text().splitlines() if line.strip()]

    @staticmethod
    def show_job(job_id: str | int) -> dict[str, str]:
        """``scontrol show job -o <id>`` as a dict (SLURM's view of the request: TRES, time, memory)."""
        out = _run(["scontrol", "show", "job", "-d", "-o", str(job_id)]).stdout
        return parse_key_values(out.splitlines()[0])

    @staticmethod
    def queued_jobs() -> list[dict[str, str]]:
        """All jobs slurmctld still knows (pending, running, and finished within MinJobAge)."""
        out = _run(["scontrol", "show", "job", "-d", "-o"], check=False).stdout
        return [parse_key_values(line) for line in out.splitlines() if line.startswith("JobId=")]

    def wait_for_jobs(self, timeout: float = 120) -> None:
        """Wait until no job is pending or running."""
        self._wait(lambda: not _run(["squeue", "-h", "-o", "%i"], check=False).stdout.split(), timeout,
                   "jobs to finish")

    def log_tail(self, lines: int = 30) -> str:
        """Last lines of the daemon logs, for error messages."""
        parts = []
        for name in ("slurmctld.log", "slurmd.log", "slurmctld.out", "slurmd.out", "munged.out"):
            path = (self.state_dir or Path("/nonexistent")) / name
            if path.exists():
                text = path.read_text(errors="replace").splitlines()[-lines:]
                parts.append(f"--- {name}\n" + "\n".join(text))
        return "\n".join(parts)

    # ----------------------------------------------------------------- helpers
    def _spawn(self, name: str, cmd: list[str], user: str | None = None) -> None:
        log = open(self.state_dir / f"{name}.out", "ab")  # noqa: SIM115 - handed to the child
        if user:
            cmd = ["runuser", "-u", user, "--", *cmd]
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True)
        log.close()
        self._procs[name] = proc
        self.started_pids[name] = proc.pid

    def _start_munge(self) -> None:
        if _munge_works():
            logger.info("reusing the running munged")
            return
        run_dir = MUNGE_SOCKET.parent
        run_dir.mkdir(parents=True, exist_ok=True)
        shutil.chown(run_dir, "munge", "munge")
        key = Path("/etc/munge/munge.key")
        if not key.exists():
            _run(["mungekey", "--create", "--keyfile", str(key)])
            shutil.chown(key, "munge", "munge")
            key.chmod(0o400)
        for d in (Path("/var/lib/munge"), Path("/var/log/munge")):
            d.mkdir(parents=True, exist_ok=True)
            shutil.chown(d, "munge", "munge")
        self._spawn("munged", ["munged", "-F", "--force"], user="munge")
        self._wait(_munge_works, 20, "munged")

    def _node_idle(self) -> bool:
        out = _run(["scontrol", "show", "node", "localhost", "-o"], check=False).stdout
        state = parse_key_values(out).get("State", "") if out.startswith("NodeName=") else ""
        return state.split("+")[0] == "IDLE"

    def _wait(self, predicate, timeout: float, what: str, fail: bool = True) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for name, proc in self._procs.items():
                if proc.poll() is not None and name in self.started_pids and fail:
                    raise RuntimeError(f"{name} exited with {proc.returncode}\n{self.log_tail()}")
            if predicate():
                return True
            time.sleep(0.5)
        if fail:
            raise RuntimeError(f"timed out after {timeout:.0f}s waiting for {what}\n{self.log_tail()}")
        return False

    def _terminate(self, name: str, pid: int) -> None:
        proc = self._procs.pop(name, None)
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if proc is not None:
                if proc.poll() is not None:
                    return
            elif not Path(f"/proc/{pid}").exists():
                return
            time.sleep(0.2)
        logger.warning("%s (pid %d) ignored SIGTERM; killing it", name, pid)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return
        if proc is not None:
            proc.wait(timeout=10)

    def _acquire_lock(self, timeout: float) -> None:
        if self._lock_fd is not None:
            return
        LOCK_PATH.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(LOCK_PATH, os.O_RDWR | os.O_CREAT, 0o644)
        deadline = time.monotonic() + timeout
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    os.close(fd)
                    raise RuntimeError(f"another local SLURM cluster holds {LOCK_PATH} for > {timeout:.0f}s")
                time.sleep(1)
        self._lock_fd = fd

    def _release_lock(self) -> None:
        if self._lock_fd is not None:
            fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = None

    def _write_state(self) -> None:
        STATE_FILE.write_text(json.dumps({"state_dir": str(self.state_dir), "pids": self.started_pids}))


def main(argv: list[str] | None = None) -> int:
    """``up``: start a cluster and leave it running (pids in /run); ``down``: stop it."""
    parser = argparse.ArgumentParser(prog="python tests/support/slurm.py", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=["up", "down", "check"])
    parser.add_argument("--gpus", type=int, default=ClusterSpec.gpus, help="fake GPUs on the node")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(message)s")
    if args.action == "check":
        reason = unavailable_reason()
        sys.stdout.write(f"{reason or 'a local SLURM cluster can be started here'}\n")
        return 1 if reason else 0
    if args.action == "up":
        cluster = LocalSlurmCluster(ClusterSpec(gpus=args.gpus)).start()
        # the lock is released with this process; the state file lets `down` find the daemons
        sys.stdout.write(f"up: state in {cluster.state_dir}; pids {cluster.started_pids}\n")
        return 0
    if not STATE_FILE.exists():
        sys.stderr.write("no cluster started by `up` is recorded\n")
        return 1
    state = json.loads(STATE_FILE.read_text())
    cluster = LocalSlurmCluster(state_dir=Path(state["state_dir"]), started_pids=dict(state["pids"]))
    cluster.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
