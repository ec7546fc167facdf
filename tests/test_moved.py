"""Release 0.1's names keep working in 0.2 (olmpipe.moved): every old module path imports as the
module at its new place with a DeprecationWarning, the old ``python -m`` entry points run, the
packages that replaced modules (olmpipe.plan, .evaluate, .report, .validate) still give the old
modules' public names, and every ``olmpipe`` subcommand and stage entry point answers --help."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings

import pytest

from olmpipe.cli import COMMANDS
from olmpipe.moved import MOVED, REMOVED_IN


@pytest.mark.parametrize("old, new", sorted(MOVED.items()))
def test_an_old_module_path_is_the_module_at_its_new_place(old, new):
    sys.modules.pop(old, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        module = importlib.import_module(old)
    assert module is importlib.import_module(new)
    assert any(issubclass(w.category, DeprecationWarning) and new in str(w.message) and REMOVED_IN in str(w.message)
               for w in caught)


def test_from_imports_of_old_paths_give_the_same_objects():
    from olmpipe.eval_run import run_generation_and_scoring
    from olmpipe.modelload import load_model_and_processor
    from olmpipe.train.resume import check_workflow_resume

    from olmpipe.evaluate.engine import run_generation_and_scoring as new
    from olmpipe.job.resume import check_workflow_resume as new_check
    from olmpipe.models.load import load_model_and_processor as new_load

    assert run_generation_and_scoring is new and load_model_and_processor is new_load
    assert check_workflow_resume is new_check


@pytest.mark.parametrize("package, names", [
    ("olmpipe.plan", ["checked_launch_prefix", "memory_plan", "load_shape", "MemoryPlan", "PlanError", "main"]),
    ("olmpipe.evaluate", ["trained_name", "compare_folders", "main"]),
    ("olmpipe.report", ["build_report", "write_report", "main"]),
    ("olmpipe.validate", ["run_validate", "validate_benches", "write_outputs", "Problem", "main"]),
    ("olmpipe.config", ["load_config", "validate_config", "check_workflow_config", "ConfigError", "deep_update"]),
])
def test_packages_that_replaced_modules_keep_their_names(package, names):
    module = importlib.import_module(package)
    for name in names:
        assert getattr(module, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError, match="no attribute"):
        module.no_such_name  # noqa: B018


@pytest.mark.parametrize("module", ["olmpipe.baseline", "olmpipe.soup", "olmpipe.tinymodel", "olmpipe.hubmodel",
                                    "olmpipe.evaluate", "olmpipe.validate", "olmpipe.report", "olmpipe.plan",
                                    "olmpipe.train", "olmpipe.rasterize", "olmpipe.difficulty", "olmpipe.launch",
                                    "olmpipe.evaluate.baseline", "olmpipe.train.soup", "olmpipe.models.tiny"])
def test_python_m_entry_points_answer_help(module):
    proc = subprocess.run([sys.executable, "-m", module, "--help"], check=False, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_subcommand_answers_help(command):
    proc = subprocess.run([sys.executable, "-m", "olmpipe", command, "--help"], check=False, capture_output=True,
                          text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "usage:" in proc.stdout


def test_the_finder_answers_only_old_names():
    from olmpipe.moved import MovedModules

    assert MovedModules().find_spec("olmpipe.models.load") is None
    assert MovedModules().find_spec("json") is None
