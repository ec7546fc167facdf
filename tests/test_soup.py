"""Tests of olmpipe.train.soup: the float32 mean of seeds' weights into one loadable HF model folder."""

from __future__ import annotations

import json
import shutil

import pytest
import torch
from safetensors.torch import load_file

from olmpipe.models.load import load_model_and_processor
from olmpipe.models.tiny import build_tiny_model
from olmpipe.train.soup import SoupError, main, soup, weight_map


@pytest.fixture(scope="module")
def seeds(tmp_path_factory, tiny_model_dir):
    """Two tiny models of the same shape with different weights (seed 0 is the session model)."""
    other = build_tiny_model(tmp_path_factory.mktemp("seed1") / "model", seed=1)
    return [tiny_model_dir, other]


def _weights(folder):
    out = {}
    for file in sorted(set(weight_map(folder).values())):
        out.update(load_file(str(folder / file)))
    return out


def test_soup_is_the_float32_mean_and_loads(tmp_path, seeds):
    out = soup(seeds, tmp_path / "soup")
    a, b, s = _weights(seeds[0]), _weights(seeds[1]), _weights(out)
    assert set(s) == set(a)
    for name, tensor in s.items():
        assert tensor.dtype == a[name].dtype
        torch.testing.assert_close(tensor, ((a[name].float() + b[name].float()) / 2).to(tensor.dtype))
    model, processor = load_model_and_processor(out, device="cpu")
    assert model.config.text_config.hidden_size == 64 and processor is not None
    assert json.loads((out / "olmpipe_soup.json").read_text())["inputs"] == [str(p) for p in seeds]
    assert not (tmp_path / "soup.tmp").exists()


def test_a_seeds_own_records_stay_out_of_the_soup(tmp_path, seeds):
    """A final model folder of olmpipe.train carries its run's olmpipe_train.json; the soup lists its inputs instead."""
    folders = []
    for i, seed in enumerate(seeds):
        folder = shutil.copytree(seed, tmp_path / f"seed{i}" / "model")
        (folder / "olmpipe_train.json").write_text(f'{{"seed": {i}}}\n')
        folders.append(folder)
    out = soup(folders, tmp_path / "soup")
    assert not (out / "olmpipe_train.json").exists() and (out / "tokenizer.json").exists()


def test_one_seed_soup_is_that_model(tmp_path, seeds):
    out = soup(seeds[:1], tmp_path / "soup")
    a, s = _weights(seeds[0]), _weights(out)
    assert all(torch.equal(a[k], s[k]) for k in a)
    assert (out / "tokenizer.json").read_bytes() == (seeds[0] / "tokenizer.json").read_bytes()


def test_sharded_models_and_bfloat16_output(tmp_path, seeds):
    sharded = []
    for i, folder in enumerate(seeds):
        model, processor = load_model_and_processor(folder, device="cpu")
        target = tmp_path / f"sharded{i}"
        model.save_pretrained(target, max_shard_size="200KB")
        processor.save_pretrained(target)
        sharded.append(target)
    assert len(set(weight_map(sharded[0]).values())) > 1
    out = soup(sharded, tmp_path / "soup", dtype="bfloat16")
    index = json.loads((out / "model.safetensors.index.json").read_text())
    assert index["weight_map"] == json.loads((sharded[0] / "model.safetensors.index.json").read_text())["weight_map"]
    s, a, b = _weights(out), _weights(sharded[0]), _weights(sharded[1])
    name = next(n for n in s if n.endswith("embed_tokens.weight"))
    assert s[name].dtype == torch.bfloat16
    torch.testing.assert_close(s[name], ((a[name] + b[name]) / 2).to(torch.bfloat16))
    load_model_and_processor(out, device="cpu")


def test_mismatched_seeds_are_refused(tmp_path, seeds):
    small = build_tiny_model(tmp_path / "small", seed=0, hidden_size=32)
    with pytest.raises(SoupError, match="shape"):
        soup([seeds[0], small], tmp_path / "soup")
    with pytest.raises(SoupError, match="not a safetensors model folder"):
        soup([tmp_path], tmp_path / "soup2")
    assert main([str(tmp_path / "soup3"), str(seeds[0]), str(small)]) == 1


def _perturbed_copy(folder, out, seed):
    """``folder``'s model with every weight moved, saved as a training run saves its final model."""
    from olmpipe.models.architectures import publish_expert_layout

    model, processor = load_model_and_processor(folder)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    model.save_pretrained(out)
    publish_expert_layout(out)
    processor.save_pretrained(out)
    return model


@pytest.mark.parametrize("arch", ["qwen2_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_soup_of_every_architecture_is_the_mean_of_the_live_models(arch, tiny_models, tmp_path):
    """Whatever names and layouts an architecture saves (renamed prefixes, Qwen3-VL-MoE's published
    expert layout), the soup loads back as the mean of the seeds' live parameters."""
    a = _perturbed_copy(tiny_models(arch), tmp_path / "a", 1)
    b = _perturbed_copy(tiny_models(arch), tmp_path / "b", 2)
    souped, _ = load_model_and_processor(soup([tmp_path / "a", tmp_path / "b"], tmp_path / "soup"))
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    for name, param in souped.named_parameters():
        assert torch.allclose(param, (pa[name] + pb[name]) / 2, atol=1e-6), name
