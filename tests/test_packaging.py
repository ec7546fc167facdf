"""The package installs and works outside the repository (issue 14, item 5).

A non-editable ``pip install`` of a copy of the package source into a fresh virtual environment
(``--no-deps``; the dependencies come from the test environment's site-packages through a ``.pth``
line, so nothing is downloaded), then, from a folder outside the repository: ``olmpipe validate
--help`` runs, a config is validated against the schema shipped as package data, and the test
helpers of ``tests/support`` are not part of the installed package.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sysconfig
import venv
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

CHECK = """
import json, sys
import olmpipe, olmpipe.config as c
from olmpipe.config import ConfigError, load_config
cfg = load_config(sys.argv[1])
try:
    load_config(sys.argv[2])
    error = None
except ConfigError as exc:
    error = str(exc)
try:
    import olmpipe.testing
    testing = True
except ImportError:
    testing = False
print(json.dumps({"package": olmpipe.__file__, "schema": str(c.SCHEMA_PATH), "longest_side":
                  cfg["rasterize"]["longest_side"], "error": error, "testing": testing}))
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh venv with olmpipe installed from a source copy (not editable); returns its bin folder."""
    root = tmp_path_factory.mktemp("install")
    source = root / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, source / name)
    # keep the schema symlink as a symlink: the wheel must get the file it points to
    shutil.copytree(REPO / "olmpipe", source / "olmpipe", symlinks=True,
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "workflow" / "schemas", source / "workflow" / "schemas")
    env = root / "venv"
    venv.EnvBuilder(with_pip=False).create(env)
    bin_dir = env / "bin"
    site = Path(subprocess.run([bin_dir / "python", "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "test-deps.pth").write_text(sysconfig.get_path("purelib") + "\n")
    proc = subprocess.run([bin_dir / "python", "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                           "--no-index", "--quiet", str(source)], capture_output=True, text=True, cwd=root,
                          timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return bin_dir


def test_installed_package_validates_a_config_outside_the_repository(installed, tmp_path):
    proc = subprocess.run([installed / "olmpipe", "validate", "--help"], capture_output=True, text=True,
                          cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0 and "--manifest" in proc.stdout, proc.stdout + proc.stderr
    good, bad = tmp_path / "good.yaml", tmp_path / "bad.yaml"
    good.write_text("rasterize:\n  longest_side: 640\n")
    bad.write_text("rasterize:\n  longest_sid: 640\n")
    proc = subprocess.run([installed / "python", "-c", CHECK, str(good), str(bad)], capture_output=True,
                          text=True, cwd=tmp_path, timeout=120, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = json.loads(proc.stdout)
    package = Path(result["package"])
    assert not package.is_relative_to(REPO) and package.is_relative_to(installed.parent)
    schema = Path(result["schema"])
    assert schema.is_file() and not schema.is_symlink()  # a real copy in the installed package
    assert result["longest_side"] == 640
    assert "unknown key(s) 'longest_sid' under rasterize" in result["error"]
    assert result["testing"] is False  # test helpers live in tests/support, not in the package


def test_repository_schema_is_the_one_snakemake_validates_with():
    """In the repository the package's schema is the workflow's file (``check_workflow_config`` in the
    Snakefile and the docs name it), not a copy that can drift."""
    from olmpipe.config import SCHEMA_PATH

    assert SCHEMA_PATH.resolve() == (REPO / "workflow" / "schemas" / "config.schema.yaml").resolve()


#: Hosts of the package registries' defaults: pip, apt and npm know them, so no project file names one
#: (spelled in parts here so that this file names none either).
REGISTRY_HOSTS = tuple(".".join(parts) for parts in (("pypi", "org"), ("pythonhosted", "org"),
                                                     ("registry", "npmjs", "org"), ("deb", "debian", "org"),
                                                     ("archive", "ubuntu", "com")))


def test_project_files_name_no_package_registry_host():
    """Set-up scripts, docs and code rely on the installers' own default indexes (issue 23, item 7)."""
    files = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, text=True, check=True)
    found = []
    for name in filter(None, files.stdout.split("\0")):
        path = REPO / name
        if not path.is_file() or path.stat().st_size > 2_000_000:
            continue
        text = path.read_bytes().decode("utf-8", "replace")
        found += [f"{name}: {host}" for host in REGISTRY_HOSTS if host in text]
    assert not found, found
