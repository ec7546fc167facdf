"""LoRA training (olmpipe/job/peft.py): what the adapter targets, what is refused, vLLM syncs that
leave the frozen base as it was, and a LoRA run that resumes bitwise like full training (the adapter,
optimizer, scheduler and RNG restored; shown to differ when the adapter is not restored), whose
model/ is a plain merged folder and adapter/ a PEFT folder, and whose seeds soup to the float32
mean of the merged weights."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file
from trainkit import LowIdReward, assert_same_final_folder, folder_files, make_page_index

from olmpipe.config import load_config
from olmpipe.job.peft import (
    AdapterLoadError,
    PeftSetupError,
    check_setup,
    load_adapter_checkpoint,
    lora_config,
    merged_named_params,
    model_parts,
    target_modules,
)

PEFT_DEFAULTS = load_config()["train"]["peft"]


def _peft(**changes):
    return {**PEFT_DEFAULTS, "enabled": True, **changes}


def _wrapped(tiny_model_dir, dtype="float32", **changes):
    from peft import get_peft_model

    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(tiny_model_dir, dtype=dtype, device="cpu")
    torch.manual_seed(0)
    return get_peft_model(model, lora_config(_peft(**{"r": 4, "alpha": 8, **changes}), model.config.model_type))


def _adapted(model) -> set[str]:
    from peft.tuners.lora import LoraLayer

    return {name.removeprefix("base_model.model.") for name, m in model.named_modules() if isinstance(m, LoraLayer)}


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_adapters_go_on_the_language_model_by_default_and_on_the_vision_tower_when_asked(arch, tiny_models):
    """Every architecture: the default targets adapt each linear layer of the language model (only
    attention in Qwen3-VL-MoE, whose experts are fused parameters) and, with `vision`, each linear
    layer of the vision blocks (gate/up/down, fc1/fc2 or linear_fc1/linear_fc2 by architecture)."""
    from olmpipe.models.architectures import ARCHITECTURES

    folder, expected = tiny_models(arch), ARCHITECTURES[arch]
    lm_only = _adapted(_wrapped(folder))
    assert lm_only and all(n.startswith("model.language_model.layers.") for n in lm_only)
    assert {n.rsplit(".", 1)[1] for n in lm_only} == set(expected.language_linear_names)
    assert set(expected.language_linear_names) <= set(PEFT_DEFAULTS["target_modules"])
    both = _adapted(_wrapped(folder, vision=True))
    vision = {n for n in both - lm_only}
    assert vision and all(n.startswith("model.visual.blocks.") for n in vision)
    assert {n.rsplit(".", 1)[1] for n in vision} == set(expected.vision_linear_names)
    assert not any("lm_head" in n or "merger" in n for n in both)
    only_q = _adapted(_wrapped(folder, target_modules=["q_proj"]))
    assert {n.rsplit(".", 1)[1] for n in only_q} == {"q_proj"}
    listed = _adapted(_wrapped(folder, vision=True, vision_target_modules=["qkv"])) - lm_only
    assert {n.rsplit(".", 1)[1] for n in listed} == {"qkv"}


def test_target_pattern_is_anchored_to_the_architecture_prefixes():
    parts = model_parts("qwen2_5_vl")
    pattern = target_modules(parts, _peft(target_modules=["proj"]))
    assert re.fullmatch(pattern, "model.language_model.layers.0.mlp.proj")
    assert not re.fullmatch(pattern, "model.language_model.layers.0.mlp.down_proj")  # whole names, not suffixes
    assert not re.fullmatch(pattern, "model.visual.blocks.0.attn.proj")
    with pytest.raises(PeftSetupError, match="model_type 'llama'; olmpipe supports .*Qwen3-VL \\(qwen3_vl\\)"):
        model_parts("llama")


def test_rslora_dora_and_modules_to_save_reach_the_lora_config():
    config = lora_config(_peft(rslora=True, dora=True, modules_to_save=["merger"], r=8, alpha=16, dropout=0.1),
                         "qwen2_5_vl")
    assert (config.r, config.lora_alpha, config.lora_dropout) == (8, 16, 0.1)
    assert config.use_rslora and config.use_dora and config.modules_to_save == ["merger"]
    assert lora_config(_peft(), "qwen2_5_vl").modules_to_save is None


@pytest.mark.parametrize("quant", ["4bit", "8bit"])
def test_qlora_is_refused_on_the_cpu_and_with_vllm(quant):
    with pytest.raises(PeftSetupError, match=rf"quantization: {quant} \(QLoRA\) needs a CUDA GPU"):
        check_setup(_peft(quantization=quant), "cpu", {"use_vllm": False})
    with pytest.raises(PeftSetupError, match="use_vllm.*packed"):
        check_setup(_peft(quantization=quant), "cuda", {"use_vllm": True})
    check_setup(_peft(quantization=quant, enabled=False), "cpu", {"use_vllm": True})  # off: nothing to check
    check_setup(_peft(), "cpu", {"use_vllm": True})  # LoRA on a full-precision base: anywhere


def test_adapter_dropout_with_trls_disable_dropout_is_refused_naming_both_keys(tmp_path, capsys):
    """Issue 31 item 2: TRL's disable_dropout (olmpipe's default true) sets every nn.Dropout's p to 0
    after PEFT wrapped the model (trl/trainer/utils.py:194-197, grpo_trainer.py:1006), LoRA's dropout
    included: `train.peft.dropout: 0.1` trained without dropout, silently. The plan and the job refuse
    the combination, naming both keys; either one changed (per seed too) trains."""
    from olmpipe.job.preflight import job_problems
    from olmpipe.plan import main as plan_main

    message = r"train.peft.dropout: 0.1 .*train.grpo.disable_dropout: true"
    with pytest.raises(PeftSetupError, match=message):
        check_setup(_peft(dropout=0.1), "cpu", {"use_vllm": False, "disable_dropout": True})
    check_setup(_peft(dropout=0.1), "cpu", {"use_vllm": False, "disable_dropout": False})
    check_setup(_peft(dropout=0.0), "cpu", {"use_vllm": False, "disable_dropout": True})
    check_setup(_peft(dropout=0.1, enabled=False), "cpu", {"use_vllm": False, "disable_dropout": True})
    cfg = load_config(overrides={"train": {"seeds": [0, 1], "peft": {"enabled": True, "dropout": 0.1}}})
    [problem] = job_problems(cfg, 0, None)
    assert re.search(message, problem), problem
    per_seed = load_config(overrides={"train": {"seeds": [0], "peft": {"enabled": True, "dropout": 0.1},
                                                "seed_overrides": [{"seed": 0, "grpo": {"disable_dropout": False}}]}})
    assert job_problems(per_seed, 0, None) == []
    override = tmp_path / "dropout.yaml"
    override.write_text(json.dumps({"train": {"peft": {"enabled": True, "dropout": 0.1}}}))
    assert plan_main(["--configfile", str(override)]) == 2
    assert "train.grpo.disable_dropout" in capsys.readouterr().err


def test_qlora_on_the_cpu_stops_train_seed_before_loading_anything(tmp_path):
    from olmpipe.job.preflight import JobSetupError
    from olmpipe.train.run import train_seed

    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "device": "cpu",
                                           "peft": {"enabled": True, "quantization": "4bit"}}})
    with pytest.raises(JobSetupError, match="needs a CUDA GPU"):
        train_seed(cfg, seed=0, model_path=tmp_path / "no-model", pages=tmp_path / "p.jsonl", tests_dir=tmp_path,
                   run_dir=tmp_path / "run")
    assert not any((tmp_path / "run").glob("checkpoint-*"))


def test_olmpipe_train_refuses_qlora_on_the_cpu_with_exit_2(tmp_path, capsys):
    from olmpipe.train.cli import main

    config = json.dumps({"train": {"device": "cpu", "wandb": {"mode": "disabled"},
                                   "peft": {"enabled": True, "quantization": "8bit"}}})
    code = main(["--seed", "0", "--model", str(tmp_path / "m"), "--pages", str(tmp_path / "p.jsonl"),
                 "--tests-dir", str(tmp_path), "--run-dir", str(tmp_path / "run"), "--config-json", config])
    assert code == 2
    assert "train.peft.quantization: 8bit (QLoRA) needs a CUDA GPU" in capsys.readouterr().err


def test_a_trained_copy_of_a_tied_lm_head_is_refused_with_vllm(tiny_model_dir):
    from olmpipe.job.peft import check_model
    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(tiny_model_dir, device="cpu")
    assert model.config.tie_word_embeddings  # the tiny model ties them, as Qwen2.5-VL-3B does
    with pytest.raises(PeftSetupError, match="tie_word_embeddings"):
        check_model(_peft(modules_to_save=["lm_head"]), model, {"use_vllm": True})
    check_model(_peft(modules_to_save=["lm_head"]), model, {"use_vllm": False})
    check_model(_peft(), model, {"use_vllm": True})


def test_lora_settings_are_trajectory_settings():
    from olmpipe.job.resume import changed_keys, run_settings

    base = run_settings(load_config(overrides={"train": {"peft": {"enabled": True}}}), 0, "m")
    for change, key in (({"r": 8}, "train.peft.r"), ({"alpha": 3}, "train.peft.alpha"),
                        ({"vision": True}, "train.peft.vision"), ({"enabled": False}, "train.peft.enabled"),
                        ({"target_modules": ["q_proj"]}, "train.peft.target_modules")):
        changed = run_settings(load_config(overrides={"train": {"peft": {"enabled": True, **change}}}), 0, "m")
        assert key in changed_keys(base, changed), key


def _randomize_adapter(model) -> None:
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)


def test_vllm_sync_yields_merged_weights_and_leaves_the_bf16_base_bit_for_bit(tiny_model_dir):
    """TRL 1.16 merges and unmerges in place at every sync; in bfloat16 that rounds the frozen base
    (the control below). merged_named_params yields the same merged tensors and restores the base."""
    model = _wrapped(tiny_model_dir, dtype="bfloat16")
    _randomize_adapter(model)
    base = {n: p.detach().clone() for n, p in model.named_parameters() if "lora_" not in n}
    for _ in range(5):
        # collected first and read afterwards, as vLLM's packed NCCL broadcast (server mode) does:
        # pack_tensors keeps every yielded tensor of a chunk and concatenates them at the end
        synced = dict(list(merged_named_params(model)))
    assert all(torch.equal(base[n], p) for n, p in model.named_parameters() if n in base)
    # the names and values vLLM gets are those of the merged model
    import copy

    merged = copy.deepcopy(model).merge_and_unload()
    expected = dict(merged.named_parameters())
    assert set(synced) == set(expected)
    assert all(torch.equal(synced[n], expected[n].data) for n in expected)
    assert any(not torch.equal(synced[n], base["base_model.model." + n.replace(".weight", ".base_layer.weight")])
               for n in synced if "q_proj.weight" in n)
    # the control: PEFT's merge_adapter/unmerge_adapter, what TRL's own sync calls, moves the base
    for _ in range(5):
        model.merge_adapter()
        model.unmerge_adapter()
    assert any(not torch.equal(base[n], p) for n, p in model.named_parameters() if n in base)


def test_an_adapter_checkpoint_that_does_not_fit_is_refused(tmp_path, tiny_model_dir):
    model = _wrapped(tiny_model_dir)
    with pytest.raises(AdapterLoadError, match="no adapter_model.safetensors"):
        load_adapter_checkpoint(model, tmp_path)
    _wrapped(tiny_model_dir, r=8).save_pretrained(str(tmp_path / "r8"))
    with pytest.raises(AdapterLoadError, match="of another shape"):
        load_adapter_checkpoint(model, tmp_path / "r8")
    _wrapped(tiny_model_dir, target_modules=["q_proj"]).save_pretrained(str(tmp_path / "q"))
    with pytest.raises(AdapterLoadError, match="missing"):
        load_adapter_checkpoint(model, tmp_path / "q")


# --- LoRA runs (slow): resume bitwise, outputs, soup -------------------------------------------------

# beta > 0: the KL reference is the adapter disabled; activation checkpointing (TRL's
# enable_input_require_grads path for PEFT) and evaluation during training on, as a user would run.
GRPO = {"max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 4, "learning_rate": 0.05,
        "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 1, "logging_steps": 1,
        "save_total_limit": None, "beta": 0.04, "activation_checkpointing": True, "eval_strategy": "steps",
        "eval_steps": 2}
LORA = {"enabled": True, "r": 4, "alpha": 8, "modules_to_save": ["lm_head"]}


@pytest.fixture(scope="module")
def lora_runs(tmp_path_factory, tiny_model_dir):
    from olmpipe.train.run import train_seed

    root = tmp_path_factory.mktemp("lora")
    pages, tests = make_page_index(root)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO, "peft": LORA},
                                 "rewards": {"bench": {"processes": 0}}})
    runs = {}
    for seed in (0, 1):
        runs[seed] = root / f"full{seed}"
        assert train_seed(cfg, seed=seed, model_path=tiny_model_dir, pages=pages, tests_dir=tests,
                          run_dir=runs[seed], reward_funcs=[LowIdReward()]) == 0
    return {"root": root, "pages": pages, "tests": tests, "cfg": cfg, "model": tiny_model_dir, "full": runs}


def _resume(setup, seed: int, step: int, name: str) -> Path:
    from olmpipe.train.run import train_seed

    run = setup["root"] / name
    run.mkdir()
    shutil.copytree(setup["full"][seed] / f"checkpoint-{step}", run / f"checkpoint-{step}")
    shutil.copy(setup["full"][seed] / "metrics.jsonl", run / "metrics.jsonl")
    assert train_seed(setup["cfg"], seed=seed, model_path=setup["model"], pages=setup["pages"],
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    return run


def _differences(a: Path, b: Path, file: str) -> dict[str, float]:
    x, y = load_file(str(a / file)), load_file(str(b / file))
    assert set(x) == set(y)
    return {k: (x[k] - y[k]).abs().max().item() for k in x if not torch.equal(x[k], y[k])}


@pytest.mark.slow
def test_lora_resume_is_bitwise_the_uninterrupted_run(lora_runs):
    full = lora_runs["full"][0]
    first = load_file(str(full / "checkpoint-1" / "adapter_model.safetensors"))
    assert any(v.abs().max() > 0 for k, v in first.items() if "lora_B" in k)  # the adapter trained
    resumed = _resume(lora_runs, 0, 2, "resumed0")
    for name in ("checkpoint-3", "checkpoint-4"):
        assert not _differences(full / name, resumed / name, "adapter_model.safetensors"), name
    assert not _differences(full / "adapter", resumed / "adapter", "adapter_model.safetensors")
    assert not _differences(full / "model", resumed / "model", "model.safetensors")
    rows = [json.loads(x) for x in (resumed / "metrics.jsonl").read_text().splitlines()]
    assert sorted({r["step"] for r in rows}) == [1, 2, 3, 4]
    assert [r["step"] for r in rows if "eval_reward" in r] == [2, 4]  # evaluation during training ran
    full_rows = [json.loads(x) for x in (full / "metrics.jsonl").read_text().splitlines()]
    assert any(r.get("kl", 0) > 0 for r in full_rows)  # the policy moved away from the adapter-disabled reference


@pytest.mark.slow
def test_a_resume_that_does_not_restore_the_adapter_is_caught(lora_runs, monkeypatch):
    """The negative control of the resume test: with the adapter left fresh (optimizer, scheduler and
    RNG still restored), the resumed run's adapter and merged model differ from the uninterrupted run's."""
    import olmpipe.job.peft as peft_module

    monkeypatch.setattr(peft_module, "load_adapter_checkpoint", lambda model, checkpoint: None)
    resumed = _resume(lora_runs, 0, 2, "not-restored0")
    assert _differences(lora_runs["full"][0] / "checkpoint-4", resumed / "checkpoint-4", "adapter_model.safetensors")
    assert _differences(lora_runs["full"][0] / "model", resumed / "model", "model.safetensors")


@pytest.mark.slow
def test_lora_outputs_load_as_a_plain_model_and_as_a_peft_adapter(lora_runs):
    from peft import PeftModel

    from olmpipe.models.load import load_model_and_processor

    run = lora_runs["full"][0]
    info = json.loads((run / "model" / "olmpipe_train.json").read_text())
    assert info["peft"]["r"] == 4 and info["adapter_sibling"] == "adapter" and info["steps"] == 4
    assert not list((run / "model").glob("adapter_*"))  # model/ is a plain model folder
    merged, processor = load_model_and_processor(run / "model", device="cpu")
    base, _ = load_model_and_processor(lora_runs["model"], device="cpu")
    adapted = PeftModel.from_pretrained(base, str(run / "adapter"))
    inputs = processor.tokenizer(["<|im_start|>user\nread the page<|im_end|>"], return_tensors="pt")
    with torch.no_grad():
        want = adapted(**inputs).logits
        got = merged(**inputs).logits
        with adapted.disable_adapter():
            plain = adapted(**inputs).logits
    assert torch.allclose(got, want, atol=1e-4)
    assert not torch.allclose(plain, want, atol=1e-3)  # the adapter changes the model


@pytest.mark.slow
def test_lora_soup_is_the_float32_mean_of_the_merged_seeds(lora_runs):
    from olmpipe.train.soup import soup

    a, b = (lora_runs["full"][s] / "model" for s in (0, 1))
    out = soup([a, b], lora_runs["root"] / "soup", dtype="float32")
    wa, wb, ws = (load_file(str(p / "model.safetensors")) for p in (a, b, out))
    assert set(ws) == set(wa)
    for key in ws:
        assert torch.equal(ws[key], (wa[key].float() + wb[key].float()) / 2), key


@pytest.mark.slow
def test_a_lora_checkpoint_at_max_steps_becomes_the_merged_final_model(lora_runs):
    from olmpipe.train.run import train_seed

    run = lora_runs["root"] / "done"
    shutil.copytree(lora_runs["full"][0], run)
    shutil.rmtree(run / "model")
    shutil.rmtree(run / "adapter")
    assert train_seed(lora_runs["cfg"], seed=0, model_path=lora_runs["model"], pages=lora_runs["pages"],
                      tests_dir=lora_runs["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert not _differences(lora_runs["full"][0] / "model", run / "model", "model.safetensors")
    assert not _differences(lora_runs["full"][0] / "adapter", run / "adapter", "adapter_model.safetensors")
    assert json.loads((run / "model" / "olmpipe_train.json").read_text())["from_checkpoint"] == "checkpoint-4"
    # the same files and provenance as the run that trained to the end wrote
    assert_same_final_folder(lora_runs["full"][0] / "model", run / "model")
    assert_same_final_folder(lora_runs["full"][0] / "adapter", run / "adapter")


@pytest.mark.slow
def test_a_lora_checkpoint_without_its_adapter_is_skipped_and_the_run_finishes_from_the_one_before(lora_runs, caplog):
    """Probe F5: a committed checkpoint-4 whose adapter_model.safetensors is gone (marker written
    before the file list existed, as the probe's) was taken as complete: FileNotFoundError from the
    final-model path, adapter.tmp/ and model.tmp/ left behind. Now it is skipped with a warning naming
    it, the run continues from checkpoint-3, writes checkpoint-4 again, and ends bitwise equal."""
    import logging

    from olmpipe.job.checkpoints import FILES_KEY, RUN_STATE_FILE
    from olmpipe.train.run import train_seed

    caplog.set_level(logging.INFO, logger="olmpipe")
    run = lora_runs["root"] / "no-adapter"
    shutil.copytree(lora_runs["full"][0], run)
    shutil.rmtree(run / "model")
    shutil.rmtree(run / "adapter")
    shutil.rmtree(run / "model.kept")  # as the probe's run (before the kept copy): the checkpoints alone
    marker = json.loads((run / "checkpoint-4" / RUN_STATE_FILE).read_text())
    del marker[FILES_KEY]
    (run / "checkpoint-4" / RUN_STATE_FILE).write_text(json.dumps(marker))
    (run / "checkpoint-4" / "adapter_model.safetensors").unlink()
    assert train_seed(lora_runs["cfg"], seed=0, model_path=lora_runs["model"], pages=lora_runs["pages"],
                      tests_dir=lora_runs["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert (f"skipping checkpoint {run / 'checkpoint-4'}: no adapter_model.safetensors: the LoRA adapter a resume "
            "loads is missing") in caplog.text
    assert f"resuming from {run / 'checkpoint-3'} (step 3)" in caplog.text
    assert not list(run.glob("*.tmp"))
    assert (run / "checkpoint-4" / f"{RUN_STATE_FILE}.replaced").is_file()
    assert FILES_KEY in json.loads((run / "checkpoint-4" / RUN_STATE_FILE).read_text())
    assert not _differences(lora_runs["full"][0] / "model", run / "model", "model.safetensors")
    assert not _differences(lora_runs["full"][0] / "adapter", run / "adapter", "adapter_model.safetensors")


@pytest.mark.slow
def test_a_lora_checkpoint_whose_adapter_holds_nan_is_skipped_and_the_run_finishes_from_the_one_before(
        lora_runs, caplog):
    """Issue 31 item 3: a checkpoint whose adapter held NaN was restored, then generation failed with
    "probability tensor contains inf/nan" (and Snakemake deleted model/). The job skips it, naming it
    and the tensor, resumes from the checkpoint before and ends bitwise equal to the uninterrupted run."""
    import logging
    import struct

    from olmpipe.train.run import train_seed

    caplog.set_level(logging.INFO, logger="olmpipe")
    run = lora_runs["root"] / "nan-adapter"
    shutil.copytree(lora_runs["full"][0], run)
    for name in ("model", "adapter", "model.kept", "checkpoint-4"):
        shutil.rmtree(run / name)
    adapter = run / "checkpoint-3" / "adapter_model.safetensors"
    data = adapter.read_bytes()
    header = json.loads(data[8:8 + struct.unpack("<Q", data[:8])[0]])
    name = next(k for k in sorted(header) if "lora_B" in k)
    with open(adapter, "r+b") as fh:  # in place: the file keeps its size, only a value is bad
        fh.seek(8 + struct.unpack("<Q", data[:8])[0] + header[name]["data_offsets"][0])
        fh.write(struct.pack("<f", float("nan")))
    assert train_seed(lora_runs["cfg"], seed=0, model_path=lora_runs["model"], pages=lora_runs["pages"],
                      tests_dir=lora_runs["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert (f"skipping checkpoint {run / 'checkpoint-3'}: adapter_model.safetensors holds NaN in {name} "
            "(1 of") in caplog.text, caplog.text[-3000:]
    assert f"resuming from {run / 'checkpoint-2'} (step 2)" in caplog.text
    assert not _differences(lora_runs["full"][0] / "model", run / "model", "model.safetensors")
    assert not _differences(lora_runs["full"][0] / "adapter", run / "adapter", "adapter_model.safetensors")


@pytest.mark.slow
def test_continue_cannot_change_the_adapter_shape_and_a_final_model_records_what_trained_it(lora_runs):
    """`train.resume: continue` with another adapter shape stops before any model is loaded, naming
    the key (mid-run and at the run's end alike) and changing nothing; with another alpha on a
    finished run, model/ is the checkpoint's adapter merged and olmpipe_train.json says so."""
    from olmpipe.job.resume import ResumeMismatchError
    from olmpipe.train.run import train_seed

    full = lora_runs["full"][0]

    def config(**peft):
        return load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO, "resume": "continue",
                                                "peft": {**LORA, **peft}}, "rewards": {"bench": {"processes": 0}}})

    done, midway = lora_runs["root"] / "continue-done", lora_runs["root"] / "continue-midway"
    shutil.copytree(full, done)
    shutil.rmtree(done / "model")
    shutil.rmtree(done / "adapter")
    midway.mkdir()
    shutil.copytree(full / "checkpoint-2", midway / "checkpoint-2")
    for run in (done, midway):
        before = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.name != ".olmpipe.lock"}
        for change, message in (({"r": 8}, r"\(train\.peft\.r: 4 -> 8\)"),
                                ({"modules_to_save": []}, r"\(train\.peft\.modules_to_save: \['lm_head'\] -> \[\]\)"),
                                ({"enabled": False}, r"\(train\.peft\.enabled: True -> False\)")):
            with pytest.raises(ResumeMismatchError, match=message + r": a run can go on with other settings, not with "
                               r"another adapter\. Set train\.peft\.\w+ back"):
                train_seed(config(**change), seed=0, model_path=lora_runs["model"], pages=lora_runs["pages"],
                           tests_dir=lora_runs["tests"], run_dir=run, reward_funcs=[LowIdReward()])
        assert {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.name != ".olmpipe.lock"} == before
    assert train_seed(config(alpha=16), seed=0, model_path=lora_runs["model"], pages=lora_runs["pages"],
                      tests_dir=lora_runs["tests"], run_dir=done, reward_funcs=[LowIdReward()]) == 0
    assert folder_files(done / "model")["model.safetensors"] == folder_files(full / "model")["model.safetensors"]
    info = json.loads((done / "model" / "olmpipe_train.json").read_text())
    assert info["peft"]["alpha"] == 8 and info["from_checkpoint"] == "checkpoint-4"
    kept = json.loads((done / "model.kept" / "olmpipe_kept.json").read_text())
    assert kept["steps"] == 4 and kept["settings"]["train.peft.alpha"] == 8
    assert json.loads((done / "adapter" / "adapter_config.json").read_text())["lora_alpha"] == 8
