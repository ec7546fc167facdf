"""olmpipe.models.folder: a model folder counts as loadable only with its weights (every shard of an
index, none truncated) and the processor files its architecture needs; a folder that lacks them is
refused with one message naming the folder and what is missing, by the config check and the loader,
before transformers fails on it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from support.hfcache import shard_weights

from olmpipe.config import ConfigError, load_config
from olmpipe.models.architectures import ARCHITECTURES
from olmpipe.models.folder import (
    PROCESSOR_NEEDS,
    ModelFolderError,
    check_model_folder,
    folder_problem,
    missing_files,
)

WEIGHTS = "the model weights"


def copy_model(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def test_every_architecture_says_what_its_processor_needs():
    assert {a.processor_class for a in ARCHITECTURES.values()} <= set(PROCESSOR_NEEDS)


@pytest.mark.parametrize("arch", sorted(ARCHITECTURES))
def test_a_built_model_folder_is_complete(arch, tiny_models):
    assert missing_files(tiny_models(arch)) == []


def test_weights_in_the_order_transformers_loads_them(tmp_path, tiny_model_dir):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    data = (folder / "model.safetensors").read_bytes()
    (folder / "model.safetensors").unlink()
    assert missing_files(folder) == [WEIGHTS + " (model.safetensors, or model.safetensors.index.json with every "
                                     "shard it names, or pytorch_model.bin)"]
    (folder / "model.safetensors").write_bytes(data[: len(data) // 2])  # a cut copy
    [problem] = missing_files(folder)
    assert problem == f"model.safetensors is truncated ({len(data) // 2} of {len(data)} bytes)"
    (folder / "model.safetensors").write_bytes(b"\x00" * 3)
    assert missing_files(folder) == ["model.safetensors is truncated (3 bytes)"]
    (folder / "model.safetensors").write_bytes(b"<html>not a safetensors file</html>")
    assert "not a safetensors file" in missing_files(folder)[0]

    # a sharded folder: every shard the index names, each whole
    (folder / "model.safetensors").write_bytes(data)
    files = shard_weights(folder)
    assert missing_files(folder) == []
    (folder / files[1]).unlink()
    assert missing_files(folder) == [f"{files[1]} (named by model.safetensors.index.json)"]
    # a stale single file next to the index is what transformers loads first: it decides
    (folder / "model.safetensors").write_bytes(data)
    assert missing_files(folder) == []
    (folder / "model.safetensors").unlink()

    # pytorch_model.bin: a whole torch.save zip, not a cut one
    import torch
    from safetensors.torch import load_file

    (folder / "model.safetensors.index.json").unlink()
    torch.save(load_file(str(tiny_model_dir / "model.safetensors")), folder / "pytorch_model.bin")
    assert missing_files(folder) == []
    whole = (folder / "pytorch_model.bin").read_bytes()
    (folder / "pytorch_model.bin").write_bytes(whole[:-100])
    assert missing_files(folder) == ["pytorch_model.bin is truncated or not a torch checkpoint"]


def test_processor_files_are_named(tmp_path, tiny_model_dir):
    folder = copy_model(tiny_model_dir, tmp_path / "m")
    for name in ("processor_config.json", "tokenizer.json", "tokenizer_config.json", "chat_template.jinja"):
        (folder / name).rename(tmp_path / name)
    assert missing_files(folder) == [
        ("the image processor settings (preprocessor_config.json, or processor_config.json with an "
         "image_processor section)"),
        "the tokenizer (tokenizer.json, or vocab.json and merges.txt)",
        "the tokenizer settings (tokenizer_config.json: special tokens, padding side)",
        "a chat template (chat_template.jinja, chat_template.json, or chat_template in tokenizer_config.json)",
    ]
    # the other forms each need is met by: the hub's file names, a template inside tokenizer_config.json
    (folder / "preprocessor_config.json").write_text(
        json.dumps(json.loads((tmp_path / "processor_config.json").read_text())["image_processor"]))
    (folder / "vocab.json").write_text("{}")
    (folder / "merges.txt").write_text("#version: 0.2\n")
    config = json.loads((tmp_path / "tokenizer_config.json").read_text())
    config["chat_template"] = (tmp_path / "chat_template.jinja").read_text()
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    assert missing_files(folder) == []
    assert missing_files(folder, weights=False) == []
    (folder / "config.json").unlink()
    assert missing_files(folder, weights=False) == ["config.json"]


def test_the_loader_and_the_config_check_name_the_folder(tmp_path, tiny_model_dir, monkeypatch):
    """A local model.path that lost its weights: the config check (Snakefile and every job) and the
    loader say which folder lacks what, instead of transformers' "Error no file named ..."."""
    from olmpipe.models.load import load_model_and_processor, load_processor

    folder = copy_model(tiny_model_dir, tmp_path / "model")
    (folder / "model.safetensors").unlink()
    with pytest.raises(ModelFolderError, match=rf"^{folder} is no loadable model folder: it lacks the model weights"):
        load_model_and_processor(folder, device="cpu")
    load_processor(folder)  # the processor alone needs no weights
    with pytest.raises(ConfigError, match=rf"model.path: {folder} is no loadable model folder: it lacks the model "
                                          r"weights \(model.safetensors, .*\); point model.path at a complete"):
        load_config(overrides={"model": {"path": str(folder)}})
    (folder / "tokenizer_config.json").unlink()
    with pytest.raises(ModelFolderError, match="lacks the tokenizer settings"):
        load_processor(folder)
    assert "the model weights" in folder_problem(folder) and "the tokenizer settings" in folder_problem(folder)
    check_model_folder("someone/not-downloaded")  # a hub id is left to its loader
    (tmp_path / "empty").mkdir()  # no config.json: the workflow's check says so (layout.model_path_problem)
    assert folder_problem(tmp_path / "empty").startswith(f"{tmp_path / 'empty'} is no loadable model folder: it "
                                                         "lacks config.json, the model weights")
    monkeypatch.chdir(tmp_path)
    assert load_config(overrides={"model": {"path": str(tiny_model_dir)}})["model"]["path"] == str(tiny_model_dir)
