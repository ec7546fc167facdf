"""README command 1 in a clone whose path holds a space and an accented letter, with its ``.venv``
inside that path (so the interpreter's own path has them too), runs the embedded default to the
report.

Snakemake's ``script:`` starts the interpreter by its path unquoted (exit 127 here, snakemake
issue #2645); the workflow's rules run their jobs through quoted ``shell:`` commands
(olmpipe/rulejobs.py). The virtual environment is made from the base interpreter and reaches the
installed packages through a ``.pth`` file, so nothing is installed again; the clone's own
``olmpipe`` is imported (the job commands run in the clone, ``PYTHONPATH`` names it).
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from olmpipe.layout import COMPARISON_JSON, REPORT_HTML

REPO = Path(__file__).resolve().parents[1]


def _git(*args: str, cwd: Path) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.mark.slow
def test_clone_at_a_path_with_a_space_and_an_accent_runs_the_default_chain(tmp_path: Path) -> None:
    clone = tmp_path / "olm pipe é" / "repo"
    head = _git("rev-parse", "HEAD", cwd=REPO)
    subprocess.run(["git", "clone", "--quiet", "--no-checkout", str(REPO), str(clone)], check=True)
    _git("checkout", "--quiet", "--detach", head, cwd=clone)

    # README command 1 makes .venv inside the clone; this one borrows the installed packages.
    venv = clone / ".venv"
    subprocess.run([sys._base_executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    Path(site, "olmpipe-test-env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    executable = subprocess.run([str(python), "-c", "import sys; print(sys.executable)"],
                                check=True, capture_output=True, text=True).stdout.strip()
    assert " " in executable and "é" in executable, executable

    # what scripts/setup.sh does before it runs the command: the environment's bin first on PATH
    env = {**os.environ, "VIRTUAL_ENV": str(venv), "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ['PATH']}",
           "PYTHONPATH": str(clone)}
    proc = subprocess.run([str(python), "-m", "snakemake", "--cores", "all", "train"], cwd=clone, env=env,
                          capture_output=True, text=True, timeout=1500, check=False)
    assert proc.returncode == 0, f"snakemake failed ({proc.returncode}):\n{proc.stdout[-4000:]}\n{proc.stderr[-6000:]}"
    assert (clone / REPORT_HTML).is_file()
    assert (clone / COMPARISON_JSON).is_file()
    # the clone's package ran the jobs, not the checkout the tests run from
    assert str(clone / "olmpipe") in subprocess.run(
        [str(python), "-c", "import olmpipe; print(olmpipe.__file__)"], cwd=clone, env=env,
        check=True, capture_output=True, text=True).stdout
