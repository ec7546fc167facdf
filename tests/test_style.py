"""The linters the project enforces, run over the repository: ``ruff check`` and ``snakefmt --check``.

Both are pinned in the ``dev`` extra (their defaults change between releases). A failure prints the
linter's own report; ``ruff check --fix`` and ``snakefmt Snakefile workflow`` fix most of it.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def tool(name: str) -> str:
    """The linter's executable beside this Python (the test environment's), else on PATH; else skip."""
    path = Path(sys.executable).with_name(name)
    found = str(path) if path.exists() else shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (pip install -e '.[dev]')")
    return found


def run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, cwd=REPO, capture_output=True, text=True, timeout=300, check=False)


def test_ruff_check_is_clean():
    proc = run(tool("ruff"), "check", "--output-format", "concise", ".")
    assert proc.returncode == 0, f"ruff check found problems:\n{proc.stdout}{proc.stderr}"


def test_snakefmt_check_is_clean():
    proc = run(tool("snakefmt"), "--check", "Snakefile", "workflow")
    assert proc.returncode == 0, f"snakefmt would reformat:\n{proc.stdout}{proc.stderr}"
