"""Run the repository's Snakefile in a test's folder and read Snakemake's job table."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def snakemake(workdir: Path, *args: str, cores: int = 1, timeout: int = 900, check: bool = True,
              env: Mapping[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m snakemake`` (the tests' Python) on ``workdir``; with ``check``, a failure is an
    AssertionError carrying the end of both streams."""
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
           "--cores", str(cores), "--nolock", *args]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False,
                          env=dict(env) if env is not None else None)
    if check and proc.returncode != 0:
        raise AssertionError(f"snakemake failed ({proc.returncode}):\n{proc.stdout[-5000:]}\n{proc.stderr[-5000:]}")
    return proc


def job_counts(proc: subprocess.CompletedProcess, targets: Iterable[str] = ()) -> dict[str, int]:
    """Rule -> jobs of the "Job stats" table Snakemake prints before running, without the total and
    the target rules named in ``targets``; empty when there was nothing to do."""
    text = proc.stdout + proc.stderr
    if "Nothing to be done" in text:
        return {}
    counts = {}
    for line in text.split("Job stats:", 1)[1].splitlines()[3:]:
        match = re.match(r"^(\S+)\s+(\d+)$", line.strip())
        if not match:
            break
        counts[match[1]] = int(match[2])
    for target in ("total", *targets):
        counts.pop(target, None)
    return counts
