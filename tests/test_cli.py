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


def _synth_workdir(root, real):
    """A working folder whose config trains on a synthetic bench (synth.enabled) that is already built.

    The synthetic bench (another sample PDF than the real one) and the synth stages' other outputs exist and are newer
    than the synth source page, so Snakemake has nothing of synth to run (no Chromium needed).
    """
    html = root / "synth-source"
    html.mkdir(parents=True)
    (html / "page.html").write_text("<p>A synthetic page.</p>")
    for folder in ("html", "render"):
        (root / "results" / "synth" / folder).mkdir(parents=True)
    make_small_bench(root / "results" / "synth" / "bench", pdfs=("mattsnotes.pdf",))
    (root / "results" / "synth" / "report.json").write_text("{}\n")
    (root / "config").mkdir()
    (root / "config" / "config.yaml").write_text(
        f"bench:\n  dir: {real}\nrasterize:\n  longest_side: 40\nvalidate:\n  check_math: false\n"
        f"synth:\n  enabled: true\n  html_dir: {html}\n")
    return root


@pytest.mark.slow
def test_cli_and_workflow_read_the_same_benches_with_synth_enabled(tmp_path):
    """`olmpipe rasterize` + `olmpipe validate` write what the workflow's rasterize + validate write:
    with synth.enabled both train on the synthetic bench and evaluate on the real one
    (olmpipe.layout.bench_section). On 1d966ff the commands read the real bench alone."""
    real = make_small_bench(tmp_path / "real", pdfs=("earnings.pdf",))
    workflow = _synth_workdir(tmp_path / "workflow", real)
    cli = _synth_workdir(tmp_path / "cli", real)
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "--cores", "1",
                           "validate"], cwd=workflow, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    assert "rule synth_" not in proc.stdout + proc.stderr  # the synthetic bench was read as it is
    for stage in ("rasterize", "validate"):
        done = subprocess.run([sys.executable, "-m", "olmpipe", stage, "--config", "config/config.yaml"], cwd=cli,
                              capture_output=True, text=True, timeout=300, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
    pages = [json.loads(line) for line in (cli / "results/validate/pages.jsonl").read_text().splitlines()]
    assert {p["bench_dir"] for p in pages if p["split"] == "train"} == {"results/synth/bench"}
    assert {p["bench_dir"] for p in pages if p["split"] == "eval"} == {str(real)}
    for name in ("rasterize/manifest.jsonl", "validate/pages.jsonl", "validate/report.json",
                 "validate/tests/dataset.jsonl", "validate/tests/eval/dataset.jsonl"):
        assert (cli / "results" / name).read_bytes() == (workflow / "results" / name).read_bytes(), name
