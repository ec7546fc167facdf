"""Tests of the ``olmpipe`` command: usage, unknown commands, and stage commands reaching their modules."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys

import pytest
from benchdata import REPO, make_small_bench

from olmpipe.cli import COMMANDS, main


def test_usage_lists_every_command(capsys):
    assert main(["--help"]) == 0
    out = capsys.readouterr().out
    for name in COMMANDS:
        assert name in out


def test_unknown_command_exits_2(capsys):
    assert main(["rasterise"]) == 2
    assert "unknown command 'rasterise'" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["rasterize", "validate"])
def test_stage_help(name, capsys):
    with pytest.raises(SystemExit) as info:
        main([name, "--help"])
    assert info.value.code == 0
    assert f"olmpipe {name}" in capsys.readouterr().out


def test_existing_stage_modules_have_main():
    for name, (module, _) in COMMANDS.items():
        try:
            mod = importlib.import_module(module)
        except ModuleNotFoundError as exc:
            if exc.name == module:  # stage not built yet
                continue
            raise
        assert callable(getattr(mod, "main", None)), f"{module} (olmpipe {name}) has no main()"


def test_rasterize_then_validate_from_the_command_line(tmp_path):
    bench = make_small_bench(tmp_path / "bench", pdfs=("earnings.pdf",))
    config = tmp_path / "config.yaml"
    config.write_text(f"bench:\n  dir: {bench}\nrasterize:\n  longest_side: 40\nvalidate:\n  check_math: false\n")
    run = [sys.executable, "-m", "olmpipe"]
    subprocess.run([*run, "rasterize", "--config", str(config), "--out", str(tmp_path / "r")], check=True,
                   capture_output=True, timeout=300)
    subprocess.run([*run, "validate", "--config", str(config), "--manifest", str(tmp_path / "r/manifest.jsonl"),
                    "--out", str(tmp_path / "v")], check=True, capture_output=True, timeout=300)
    report = json.loads((tmp_path / "v" / "report.json").read_text())
    assert report["ok"] and report["counts"]["pages"] == 1


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    ci = (REPO / ".ci" / "run").read_text()
    command = "scripts/setup.sh --dev -- python -m pytest"
    assert f"\n{command}\n" in readme and f"\n{command}\n" in ci
