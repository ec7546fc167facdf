"""Tests of the config schema, config/config.yaml and olmpipe.config (the schema owns all defaults)."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys

import pytest
import yaml
from benchdata import REPO

from olmpipe.config import DEFAULT_CONFIG_PATH, ConfigError, load_config, load_schema, validate_config


def _walk(schema: dict, path: str = ""):
    """Yield (dotted path, subschema) of every property in the schema."""
    for key, sub in schema.get("properties", {}).items():
        yield f"{path}{key}", sub
        yield from _walk(sub, f"{path}{key}.")


def test_every_key_is_typed_described_and_defaulted():
    schema = load_schema()
    assert schema["additionalProperties"] is False
    for path, sub in _walk(schema):
        assert "type" in sub, f"{path}: no type"
        assert sub.get("description"), f"{path}: no description"
        assert "default" in sub, f"{path}: no default"
        if sub["type"] == "object" and path not in ("train.grpo", "sft.args"):
            assert sub.get("additionalProperties") is False, f"{path}: must reject unknown keys"
    # train.grpo is open to every GRPOConfig field and sft.args to every SFTConfig field;
    # olmpipe.config.grpo_fields / sft_fields check names and types
    assert load_schema()["properties"]["train"]["properties"]["grpo"]["additionalProperties"] is True
    assert load_schema()["properties"]["sft"]["properties"]["args"]["additionalProperties"] is True


def test_schema_defaults_are_valid():
    cfg = validate_config({})
    assert cfg["rasterize"]["longest_side"] == 1288
    assert cfg["validate"]["on_invalid"] == "error"
    assert cfg["bench"]["split"]["seed"] == 0


def test_default_config_loads():
    cfg = load_config()
    assert cfg["bench"]["dir"] == "data/bench/olmocr-sample"
    assert (REPO / cfg["bench"]["dir"] / "pdfs").is_dir()


def test_every_key_of_config_yaml_has_a_comment_above_it():
    lines = DEFAULT_CONFIG_PATH.read_text(encoding="utf-8").splitlines()
    for number, line in enumerate(lines):
        stripped = line.strip()
        if not stripped or stripped.startswith(("#", "-")) or ":" not in stripped:
            continue
        previous = lines[number - 1].strip() if number else ""
        assert previous.startswith("#"), f"config/config.yaml line {number + 1} ({stripped!r}) has no comment above it"


def test_misspelled_key_is_rejected_with_its_name(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("rasterize:\n  longest_sid: 512\n")
    with pytest.raises(ConfigError) as info:
        load_config(path)
    message = str(info.value)
    assert "unknown key(s) 'longest_sid' under rasterize" in message
    assert "longest_side" in message  # the allowed keys are listed


def test_wrong_type_names_the_key():
    with pytest.raises(ConfigError, match="rasterize/longest_side"):
        validate_config({"rasterize": {"longest_side": "big"}})
    with pytest.raises(ConfigError, match="validate/on_invalid"):
        validate_config({"validate": {"on_invalid": "ignore"}})


def test_overrides_merge_into_sections():
    cfg = load_config(overrides={"rasterize": {"longest_side": 512}})
    assert cfg["rasterize"]["longest_side"] == 512
    assert cfg["rasterize"]["on_error"] == "error"


def test_not_a_mapping_and_bad_yaml(tmp_path):
    (tmp_path / "a.yaml").write_text("- 1\n- 2\n")
    with pytest.raises(ConfigError, match="must be a mapping"):
        load_config(tmp_path / "a.yaml")
    (tmp_path / "b.yaml").write_text("rasterize: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_config(tmp_path / "b.yaml")


@pytest.mark.slow
def test_snakemake_rejects_a_misspelled_key(tmp_path):
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "config.yaml").write_text(yaml.safe_dump({"validate": {"on_invalidd": "drop"}}))
    proc = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path)],
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode != 0
    text = proc.stdout + proc.stderr
    # snakemake.utils.validate's wording, or olmpipe.config.check_workflow_config's once the Snakefile uses it
    assert ("Additional properties are not allowed ('on_invalidd' was unexpected)" in text
            or "unknown key(s) 'on_invalidd' under validate" in text)


def test_check_workflow_config_fills_defaults_like_snakemake(tmp_path):
    from snakemake.utils import validate as snakemake_validate

    from olmpipe.config import SCHEMA_PATH, check_workflow_config

    raw = yaml.safe_load(DEFAULT_CONFIG_PATH.read_text(encoding="utf-8"))
    raw["rasterize"] = {"longest_side": 512}
    ours, theirs = yaml.safe_load(yaml.safe_dump(raw)), yaml.safe_load(yaml.safe_dump(raw))
    check_workflow_config(ours)
    snakemake_validate(theirs, str(SCHEMA_PATH))
    assert ours == theirs and ours["rasterize"] == {"longest_side": 512, "on_error": "error"}


def test_config_error_in_snakemake_is_a_few_lines_naming_the_key(tmp_path):
    # The Snakefile's check, in a one-rule workflow: the problem lines, no jsonschema schema dump.
    (tmp_path / "Snakefile").write_text(
        "from olmpipe.config import check_workflow_config\n"
        "configfile: 'config.yaml'\n"
        "check_workflow_config(config)\n"
        "rule all:\n    output: 'x'\n    shell: 'touch x'\n"
    )
    (tmp_path / "config.yaml").write_text("bench:\n  dri: x\nrasterize:\n  longest_side: -3\n")
    proc = subprocess.run([sys.executable, "-m", "snakemake", "-n", "-d", str(tmp_path), "-s", str(tmp_path / "Snakefile")],
                          capture_output=True, text=True, timeout=120, check=False)
    text = proc.stdout + proc.stderr
    assert proc.returncode != 0
    assert "unknown key(s) 'dri' under bench; allowed keys: " in text
    assert "config key rasterize/longest_side: -3 is less than the minimum of 16" in text
    assert "Failed validating" not in text and "'description'" not in text
    assert len(text.strip().splitlines()) <= 10, text


def test_the_old_baseline_section_is_read_as_eval_run(caplog):
    """`baseline:` was renamed `eval_run:` (it steers both generation runs); old configs still load."""
    from olmpipe.config import validate_config

    cfg = validate_config({"baseline": {"max_pages": 3}, "eval_run": {"progress": False}})
    assert "baseline" not in cfg and cfg["eval_run"] == {"max_pages": 3, "progress": False, "resume": True,
                                                         "on_trained_pages": "refuse"}
    assert "config section 'baseline' is now called 'eval_run'" in caplog.text
    with pytest.raises(ConfigError, match="eval_run.max_pages"):
        validate_config({"baseline": {"max_pages": 0}})


def _number_keys(schema: dict, path: tuple = ()):
    """Every key path whose schema type admits a number."""
    for key, sub in schema.get("properties", {}).items():
        kinds = sub.get("type")
        kinds = kinds if isinstance(kinds, list) else [kinds]
        if "number" in kinds:
            yield (*path, key)
        yield from _number_keys(sub, (*path, key))


def _nested(path: tuple, value) -> dict:
    out = value
    for key in reversed(path):
        out = {key: out}
    return out


def test_non_finite_and_impossible_values_are_refused_by_the_config_check():
    """Issue 20 item 8: `learning_rate: .inf` trained a model of NaN weights, `temperature: .nan`
    failed inside TRL, `num_generations: 3` failed at train time. Every float key refuses .inf and
    .nan (schema keys and GRPOConfig fields passed through train.grpo), and TRL's batch arithmetic
    is checked with the config (tests/test_train.py holds it equal to TRL's)."""
    schema = load_schema()
    keys = list(_number_keys(schema))
    assert ("train", "grpo", "learning_rate") in keys and ("rewards", "bench", "memory_mb") in keys
    keys += [("train", "grpo", "max_grad_norm"), ("train", "grpo", "epsilon_high")]  # GRPOConfig fields
    for path in keys:
        for bad in (float("inf"), float("-inf"), float("nan")):
            # the schema's bounds catch some (`inf is greater than the maximum of 1`), the rest is caught here
            with pytest.raises(ConfigError, match=f"config key {'/'.join(path)}: {bad} is (not a finite number|.*imum)"):
                validate_config(_nested(path, bad), schema)
    with pytest.raises(ConfigError, match=r"train/grpo.num_generations \(3\): each generation batch"):
        validate_config({"train": {"grpo": {"num_generations": 3}}})
    # olmOCR 2's recipe: 8 GPUs, one for the vLLM server -> 7 training processes x 1 x 28 completions
    olmocr = load_config("config/olmocr2.yaml")
    assert olmocr["train"]["grpo"]["num_generations"] == 28
    with pytest.raises(ConfigError, match=r"per_device_train_batch_size x training processes x "
                                          r"gradient_accumulation_steps = 1 x 7 x 27 = 189 completions"):
        load_config("config/olmocr2.yaml", {"train": {"grpo": {"gradient_accumulation_steps": 27}}})


def test_scorer_memory_below_a_working_minimum_is_refused_with_the_reason():
    """Issue 20 item 7: `rewards.bench.memory_mb: 10` made every scoring worker fail and trained on
    zero reward. 0 (no limit) and >= 128 pass; below, the message gives the measured reason."""
    assert validate_config({"rewards": {"bench": {"memory_mb": 0}}})["rewards"]["bench"]["memory_mb"] == 0
    assert validate_config({"rewards": {"bench": {"memory_mb": 128}}})["rewards"]["bench"]["memory_mb"] == 128
    for bad in (10, 127.5):
        with pytest.raises(ConfigError, match=r"config key rewards/bench/memory_mb: .* is not valid \(0 was expected "
                                              r"or .* is less than the minimum of 128\): .*idle worker already maps 45 MB"):
            validate_config({"rewards": {"bench": {"memory_mb": bad}}})


def _dry_run(workdir, *args: str) -> subprocess.CompletedProcess:
    (workdir / "config").mkdir(exist_ok=True)
    (workdir / "config" / "config.yaml").write_text(
        f"bench:\n  dir: {REPO / 'data/bench/olmocr-sample'}\nvalidate:\n  check_math: false\n"
        f"synth:\n  html_dir: {REPO / 'data/synth'}\n")
    return subprocess.run([sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(workdir),
                           "--cores", "1", "--nolock", "-n", "-p", *args],
                          capture_output=True, text=True, timeout=300, check=False)


def test_nested_command_line_values_take_the_types_of_the_schema(tmp_path):
    """Issue 20 item 9: Snakemake 9 passes nested --config values as strings, so
    `--config train='{grpo: {max_steps: 3}}'` stopped with `'3' is not of type 'integer'` and
    docs/synth.md's `--config synth='{enabled: true}'` the same way. They are read by the schema's
    types now (GRPOConfig's for train.grpo keys the schema does not list), through real Snakemake."""
    proc = _dry_run(tmp_path, "train_seeds", "--config",
                    "train={grpo: {max_steps: 3, learning_rate: 1e-5, use_bias_correction_kl: true}, seeds: [0, 1], "
                    "max_pages: null, seed_overrides: [{seed: 1, grpo: {beta: 0.5}}]}",
                    "rewards={bench: {memory_mb: 0, jsonl_regex: null}}")
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    jobs = [json.loads(shlex.split(line.split("--config-json", 1)[1])[0])
            for line in proc.stdout.splitlines() if "--config-json" in line]
    assert len(jobs) == 2, proc.stdout[-3000:]
    for job in jobs:
        grpo = job["train"]["grpo"]
        assert (grpo["max_steps"], grpo["learning_rate"], grpo["use_bias_correction_kl"]) == (3, 1e-5, True)
        assert job["train"]["max_pages"] is None and job["rewards"]["bench"]["memory_mb"] == 0
        assert job["rewards"]["bench"]["jsonl_regex"] is None
    assert [o["grpo"]["beta"] for job in jobs for o in job["train"]["seed_overrides"]] == [0.5]
    synth = _dry_run(tmp_path, "train", "--config", "synth={enabled: true}")  # docs/synth.md's command
    assert synth.returncode == 0, synth.stdout[-2000:] + synth.stderr[-2000:]
    assert "synth_html" in synth.stdout.split("Job stats:", 1)[1]
    wrong = _dry_run(tmp_path, "train_seeds", "--config", "train={grpo: {max_steps: three}}")
    assert wrong.returncode != 0
    assert "config key train/grpo/max_steps: 'three' is not of type 'integer'" in wrong.stdout + wrong.stderr


def test_sft_args_are_checked_against_sftconfig():
    with pytest.raises(ConfigError, match=r"sft/args\.learnig_rate: not a field of TRL's SFTConfig; did you mean learning_rate"):
        load_config(overrides={"sft": {"args": {"learnig_rate": 1e-4}}})
    with pytest.raises(ConfigError, match=r"sft/args\.output_dir: set by olmpipe"):
        load_config(overrides={"sft": {"args": {"output_dir": "x"}}})
    with pytest.raises(ConfigError, match=r"sft/seed_overrides/0/args\.max_steps: 0 is not a step count"):
        load_config(overrides={"sft": {"seed_overrides": [{"seed": 0, "args": {"max_steps": 0}}]}})
    assert load_config(overrides={"sft": {"args": {"optim": "adamw_torch"}}})["sft"]["args"]["optim"] == "adamw_torch"
