"""Tests of olmpipe.codeversion: the source hash that reruns a rule, and the rule -> modules table."""

from __future__ import annotations

import re
import sys

import pytest
from benchdata import REPO

from olmpipe.codeversion import RULE_CODE, code_version, module_files, rule_code_version


def test_code_version_follows_the_source(tmp_path, monkeypatch):
    package = tmp_path / "fakepkg"
    (package / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("")
    (package / "stage.py").write_text("X = 1\n")
    (package / "sub" / "__init__.py").write_text("")
    monkeypatch.syspath_prepend(str(tmp_path))
    first = code_version("fakepkg.stage")
    assert first == code_version("fakepkg.stage") and len(first) == 16
    whole = code_version("fakepkg")
    (package / "sub" / "helper.py").write_text("Y = 2\n")  # another module: the stage's hash stays
    assert code_version("fakepkg.stage") == first and code_version("fakepkg") != whole
    (package / "stage.py").write_text("X = 2\n")
    assert code_version("fakepkg.stage") != first
    assert "fakepkg.stage" not in sys.modules  # found, not imported
    with pytest.raises(ModuleNotFoundError, match="no module named 'fakepkg.nope'"):
        code_version("fakepkg.nope")


def test_every_listed_module_exists_and_lists_differ():
    for name, modules in RULE_CODE.items():
        for module in modules:
            assert module_files(module)[1], f"{name}: {module} has no source files"
    versions = {rule_code_version(name) for name in RULE_CODE}
    assert len(versions) == len(RULE_CODE)
    assert rule_code_version("rasterize") == code_version(*RULE_CODE["rasterize"])


def test_the_table_is_read_only_and_an_unknown_rule_says_what_to_do():
    with pytest.raises(TypeError):
        RULE_CODE["rasterize"] = ()  # type: ignore[index]
    with pytest.raises(KeyError, match="no code list for 'rasterise'; add it to RULE_CODE"):
        rule_code_version("rasterise")


def test_the_rules_use_every_entry_of_the_table():
    """Each `rule_code_version("...")` of the workflow names an entry, no entry is left unused, and
    no code list exists outside the table: the package's one other user is the generation journal
    (entry `generations`, olmpipe.generate.journal and the difficulty stage)."""
    text = "\n".join(p.read_text() for p in [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))])
    used = set(re.findall(r'rule_code_version\("(\w+)"\)', text))
    package = {str(p.relative_to(REPO)): p.read_text() for p in sorted((REPO / "olmpipe").rglob("*.py"))
               if p.name != "codeversion.py"}
    journal = {name for name, source in package.items() if 'rule_code_version("generations")' in source}
    assert journal == {"olmpipe/generate/journal.py", "olmpipe/difficulty/sample.py"}
    assert used | {"generations"} == set(RULE_CODE) and "generations" not in used
    for source in [text, *package.values()]:
        assert "code_version(" not in re.sub(r"rule_code_version\(", "", source)  # no list outside the table


def test_stage_lists_leave_out_what_they_must_not_rerun_for():
    """validate and train_seed do not hash the scorer / the bench engine; the comparison and report do
    not hash the generation code (editing a guard must not regenerate the trained model's pages)."""
    assert "olmpipe.bench" not in RULE_CODE["validate"] and "olmpipe.bench" not in RULE_CODE["train_seed"]
    # olmpipe.records (the file formats between stages) is the one package both sides list
    assert set(RULE_CODE["generate"]) & set(RULE_CODE["evaluate_compare"] + RULE_CODE["report"]) == {"olmpipe.records"}
    assert all("olmpipe.records" in mods or "olmpipe.records.files" in mods for name, mods in RULE_CODE.items()
               if not any(m.startswith("olmpipe.synth") for m in mods)
               and name not in ("build_model", "generations"))
    # the journal's code is the generation code, which the generation rules rerun for too
    assert set(RULE_CODE["generations"]) <= set(RULE_CODE["generate"])
