"""The test side of the step gate (``tests/support/stepgate/sitecustomize.py``).

A trainer started with :meth:`StepGate.env` in its environment stops at the end of step ``step``
until the test calls :meth:`StepGate.release`; the test sends its signal in between, so what it
observes does not depend on how fast the machine trains::

    gate = StepGate(tmp_path / "gate")
    proc = subprocess.Popen(cmd, env={**os.environ, **gate.env()})
    gate.wait_reached("seed0", proc)        # step 1 done, trainer waiting
    proc.send_signal(signal.SIGTERM)
    gate.wait_signalled("seed0", proc)      # the run's SIGTERM handler ran
    gate.release("seed0")                   # it checkpoints step 1 and exits 75
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

SITE_DIR = Path(__file__).resolve().parent / "stepgate"


class StepGate:
    """Marker files of gated trainers in ``folder``, keyed by run folder name (``seed1``) and rank."""

    def __init__(self, folder: str | Path, step: int = 1):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.step = step

    def env(self, base: dict[str, str] | None = None) -> dict[str, str]:
        """Environment variables that gate every trainer started with them (merge into the child's)."""
        base = os.environ if base is None else base
        path = os.pathsep.join(p for p in (str(SITE_DIR), base.get("PYTHONPATH", "")) if p)
        return {"PYTHONPATH": path, "OLMPIPE_TEST_GATE": str(self.folder), "OLMPIPE_TEST_GATE_STEP": str(self.step)}

    def _wait(self, marker: Path, what: str, proc: subprocess.Popen | None, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not marker.exists():
            if proc is not None and proc.poll() is not None:
                out, err = proc.communicate()
                raise AssertionError(f"the process ended ({proc.returncode}) while waiting for {what}:\n"
                                     f"{(out or '')[-3000:]}\n{(err or '')[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what} ({marker})")
            time.sleep(0.1)

    def wait_reached(self, run: str, proc: subprocess.Popen | None = None, timeout: float = 300,
                     rank: int = 0) -> None:
        """Until ``run``'s trainer (rank ``rank``) has ended step ``step`` and waits at the gate."""
        self._wait(self.folder / f"{run}.rank{rank}.reached", f"{run} to reach step {self.step}", proc, timeout)

    def wait_signalled(self, run: str, proc: subprocess.Popen | None = None, timeout: float = 120,
                       rank: int = 0) -> None:
        """Until ``run``'s trainer (rank ``rank``) has taken a SIGTERM while gated."""
        self._wait(self.folder / f"{run}.rank{rank}.signalled", f"{run} to take SIGTERM", proc, timeout)

    def release(self, run: str) -> None:
        """Let every rank of ``run`` go on."""
        (self.folder / f"{run}.release").touch()
