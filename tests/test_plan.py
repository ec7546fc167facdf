"""olmpipe.plan.memory: the per-GPU memory arithmetic, checked by hand on Qwen2.5-VL-7B shapes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from olmpipe.config import load_config
from olmpipe.models.known import KNOWN_MODELS
from olmpipe.plan import (
    GIB,
    PlanError,
    check_fits,
    checked_launch_prefix,
    load_configs,
    load_shape,
    main,
    memory_plan,
    shape_from_config,
)

REPO = Path(__file__).resolve().parents[1]
SEVEN_B = "Qwen/Qwen2.5-VL-7B-Instruct"
#: sum(p.numel()) of Qwen2_5_VLForConditionalGeneration built on the meta device from the 7B config
#: (test_parameter_count_matches_transformers recomputes it); the model card says 8.29B.
P7 = 8_292_166_656

#: The recipe's training knobs (olmOCR 2: 3000-token completions, one completion per micro-batch,
#: activation checkpointing, beta 0.01, 1288 px pages) on 80 GiB GPUs.
RECIPE = {
    "rasterize": {"longest_side": 1288},
    # 28 x 1 x 28 completions hold whole groups of 28 on 1, 7 and 8 training processes (the config check)
    "train": {"grpo": {"max_completion_length": 3000, "per_device_train_batch_size": 1, "beta": 0.01,
                       "gradient_accumulation_steps": 28, "num_generations": 28,
                       "activation_checkpointing": True, "use_vllm": True}},
    "resources": {"train": {"gpu_memory_gb": 80}},
}
DDP_COLOCATE = {"train": {"grpo": {"vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.15}},
                "resources": {"train": {"gpu": 8, "strategy": "ddp"}}}
ZERO2_SERVER = {"train": {"grpo": {"vllm_mode": "server", "vllm_gpu_memory_utilization": 0.9,
                                   "vllm_max_model_length": 16384}},
                "resources": {"train": {"gpu": 8, "vllm_server_gpus": 1, "strategy": "zero2"}}}


def config(*overrides: dict) -> dict:
    from olmpipe.config import deep_update

    merged: dict = {}
    for o in (RECIPE, *overrides):
        deep_update(merged, json.loads(json.dumps(o)))
    return load_config(overrides=merged)


def seven_b():
    return load_shape(SEVEN_B)


def rows(plan) -> dict[str, float]:
    return {t.name: t.gib for t in plan.train_terms}


def test_parameter_count_matches_transformers() -> None:
    """The shape arithmetic counts exactly the parameters transformers builds (7B and tied 3B)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    for name in (SEVEN_B, "Qwen/Qwen2.5-VL-3B-Instruct"):
        fields = {k: v for k, v in KNOWN_MODELS[name].items()}
        text = {k: v for k, v in fields.items() if k not in ("vision_config", "model_type")}
        hf = Qwen2_5_VLConfig(vision_config=dict(fields["vision_config"]), text_config=text,
                              tie_word_embeddings=fields["tie_word_embeddings"])
        with torch.device("meta"):
            model = Qwen2_5_VLForConditionalGeneration(hf)
        assert shape_from_config(fields, name).parameters() == sum(p.numel() for p in model.parameters()), name
    assert seven_b().parameters() == P7


def test_tiny_model_folder_config_is_read(tiny_model_dir) -> None:
    """A local folder's config.json (the embedded tiny model, tied embeddings) gives its real size."""
    from olmpipe.models.load import load_model_and_processor

    model, _ = load_model_and_processor(tiny_model_dir)
    assert load_shape(tiny_model_dir).parameters() == sum(p.numel() for p in model.parameters())


def test_ddp_with_colocated_vllm_at_015_does_not_fit_80gb() -> None:
    """By hand: 20 bytes/param (float32 master weights 4 + grads 4 + AdamW 8, autocast's bf16 copies 2,
    bf16 reference 2) = 154 GiB before activations; vLLM's 0.15 x 80 = 12 GiB cannot hold 15.4 GiB of weights + 6.8 GiB
    of KV cache for the model's 128000-token context."""
    plan = memory_plan(config(DDP_COLOCATE), seven_b())
    r = rows(plan)
    assert r["weights"] == pytest.approx(P7 * 4 / GIB) == pytest.approx(30.89, abs=1e-2)
    assert r["gradients"] == pytest.approx(P7 * 4 / GIB)
    assert r["optimizer states"] == pytest.approx(P7 * 8 / GIB) == pytest.approx(61.78, abs=1e-2)
    assert r["reference model"] == pytest.approx(P7 * 2 / GIB)
    assert "float32 master weights, bfloat16 compute, bfloat16 reference model" in plan.table()
    assert r["vLLM share (colocate)"] == pytest.approx(12.0)
    # activations, checkpointed: 1656 image tokens (46 x 36 at 1288 px) + 160 prompt + 3000 completion
    seq = 46 * 36 + 160 + 3000
    # float32 master weights under bf16 autocast (issue 31, item 12): each layer's input is a float32
    # residual stream (4 B), the recomputed layer's values bf16; autocast's bf16 copy of every weight
    assert r["activations"] == pytest.approx(seq * (28 * 3584 * 4 + (6 * 3584 + 2 * 512 + 4 * 18944) * 2) / GIB)
    assert r["autocast weight copies"] == pytest.approx(P7 * 2 / GIB)
    assert r["logits"] == pytest.approx(3000 * 152064 * 4 / GIB)
    assert not plan.fits
    share, total = plan.problems
    kv = 2 * 28 * 512 * 2 * 128000 / GIB  # K and V, 28 layers, 4 KV heads x 128, bf16
    assert kv == pytest.approx(6.836, abs=1e-3)
    assert "vLLM's share (0.15 x 80 = 12.0 GiB" in share and "128000-token" in share
    assert "vllm_max_model_length" in share and "vllm_gpu_memory_utilization" in share
    assert f"{P7 * 2 / GIB:.1f} GiB" in share and f"{kv:.1f} GiB" in share
    assert plan.train_total > 80 and "largest term: optimizer states (61.8 GiB)" in total
    assert "resources.train.strategy: zero2" in total


def test_zero2_on_seven_ranks_with_a_server_gpu_fits() -> None:
    """By hand: bf16 weights 2 + reference 2 bytes whole, grads 2/7 and fp32 master + moments 12/7
    sharded; the server GPU holds 15.4 GiB of weights + 0.9 GiB of KV cache for 16384 tokens."""
    plan = memory_plan(config(ZERO2_SERVER), seven_b())
    r = rows(plan)
    assert plan.launch.train_processes == 7 and plan.launch.effective_strategy == "zero2"
    assert r["gradients"] == pytest.approx(P7 * 2 / 7 / GIB)
    assert r["optimizer states"] == pytest.approx(P7 * 12 / 7 / GIB) == pytest.approx(13.24, abs=1e-2)
    assert r["reference model"] == pytest.approx(P7 * 2 / GIB)
    assert "vLLM share (colocate)" not in r
    assert 50 < plan.train_total < 55
    server = {t.name: t.gib for t in plan.server_terms}
    assert server["vLLM KV cache (1 sequence)"] == pytest.approx(2 * 28 * 512 * 2 * 16384 / GIB)
    assert plan.fits, plan.problems
    assert plan.table().rstrip().endswith("fits")


@pytest.mark.parametrize(("overrides", "largest", "fix"), [
    # ZeRO-2 still keeps the whole model and reference model on 2 GPUs of 40 GiB
    ({"resources": {"train": {"gpu": 2, "strategy": "zero2", "gpu_memory_gb": 40}}}, "optimizer states", "zero2"),
    # without activation checkpointing, 4 sequences of 3000-token completions: activations dominate
    ({"train": {"grpo": {"activation_checkpointing": False, "use_vllm": False, "beta": 0.0,
                        "per_device_train_batch_size": 4}},
      "resources": {"train": {"gpu": 8, "strategy": "zero3"}}}, "activations", "activation_checkpointing: true"),
])
def test_the_message_names_the_largest_term_and_its_setting(overrides, largest, fix) -> None:
    plan = memory_plan(config({"train": {"grpo": {"use_vllm": False}}}, overrides), seven_b())
    assert not plan.fits
    assert f"largest term: {largest}" in plan.problems[-1] and fix in plan.problems[-1]


def test_pure_bf16_halves_the_plain_strategies_and_needs_bf16_compute() -> None:
    """train.pure_bf16 (no master copy): 2 + 2 + 4 bytes on single/ddp; ZeRO-2 keeps its masters."""
    pure = {"train": {"pure_bf16": True}}
    r = rows(memory_plan(config(DDP_COLOCATE, pure), seven_b()))
    assert (r["weights"], r["gradients"], r["optimizer states"]) == pytest.approx(
        (P7 * 2 / GIB, P7 * 2 / GIB, P7 * 4 / GIB))
    assert rows(memory_plan(config(ZERO2_SERVER, pure), seven_b())) == rows(memory_plan(config(ZERO2_SERVER),
                                                                                         seven_b()))
    fp32 = rows(memory_plan(config(DDP_COLOCATE, {"train": {"dtype": "float32"}}), seven_b()))
    assert fp32["reference model"] == pytest.approx(P7 * 4 / GIB)  # float32 compute: float32 reference
    with pytest.raises(PlanError, match="train.pure_bf16"):
        memory_plan(config(DDP_COLOCATE, pure, {"train": {"dtype": "float32"}}), seven_b())


def test_sharding_strategies_order_memory() -> None:
    """Same job, more sharding, less memory per GPU; one process is always plain (no sharding)."""
    totals = {}
    for strategy in ("ddp", "zero2", "zero3", "fsdp"):
        plan = memory_plan(config({"resources": {"train": {"gpu": 8, "strategy": strategy}},
                                   "train": {"grpo": {"use_vllm": False}}}), seven_b())
        totals[strategy] = plan.train_total
    assert totals["ddp"] > totals["zero2"] > totals["zero3"]
    assert totals["fsdp"] < totals["zero2"]
    one = memory_plan(config({"resources": {"train": {"gpu": 1, "strategy": "zero3"}}}), seven_b())
    assert one.launch.effective_strategy == "single"


def test_server_mode_needs_a_collective_timeout_longer_than_the_server_start() -> None:
    """The other ranks wait for rank 0 while it starts the server: ddp_timeout must outlast it."""
    plan = memory_plan(config(ZERO2_SERVER, {"train": {"grpo": {"ddp_timeout": 600}}}), seven_b())
    assert any("train.grpo.ddp_timeout (600 s)" in m and "startup_timeout_s (900 s)" in m for m in plan.problems)


def test_server_mode_needs_a_server_gpu() -> None:
    plan = memory_plan(config(ZERO2_SERVER, {"resources": {"train": {"vllm_server_gpus": 0}}}), seven_b())
    assert any("vllm_server_gpus" in m for m in plan.problems)


@pytest.mark.parametrize(("content", "message"), [
    ("{not json", "unreadable model config"),
    ("[1, 2]", "top level must be a JSON object"),
    ('{"hidden_size": 8}', "unsupported model architecture no architectures entry"),
    ('{"model_type": "qwen3_vl", "hidden_size": 8}', "not a Qwen3-VL config"),
])
def test_bad_model_configs_name_the_file(tmp_path, content, message) -> None:
    (tmp_path / "config.json").write_text(content)
    with pytest.raises(PlanError, match=message) as info:
        load_shape(tmp_path)
    assert str(tmp_path / "config.json") in str(info.value)


def test_unknown_hub_id_says_how_to_fix() -> None:
    with pytest.raises(PlanError, match="not a known hub id.*set model.path to its folder"):
        load_shape("someone/unknown-model")


def test_rule_check_raises_before_launch_and_returns_the_prefix_when_it_fits() -> None:
    with pytest.raises(PlanError, match="does not fit in GPU memory"):
        checked_launch_prefix(config(DDP_COLOCATE), 8, SEVEN_B)
    prefix = checked_launch_prefix(config(ZERO2_SERVER), 8, SEVEN_B)
    assert "-m olmpipe.launch --exec --gpus 8 --vllm-server-gpus 1 --launcher accelerate --strategy zero2" in prefix
    # CPU jobs and a not yet built embedded model have nothing to check
    assert check_fits(config(DDP_COLOCATE), 0, SEVEN_B) is None
    assert check_fits(config(DDP_COLOCATE), 8, "results/model/tiny-not-built") is None


def test_cli_on_the_recipe_prints_the_table_and_fits(capsys) -> None:
    """Acceptance: `olmpipe plan --configfile config/olmocr2.yaml` prints the table and "fits"."""
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml")]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "per training GPU" in out and "optimizer states" in out and out.rstrip().endswith("fits")


def test_cli_stops_on_ddp_with_colocate_015(tmp_path, capsys) -> None:
    override = tmp_path / "ddp.yaml"
    override.write_text("train:\n  grpo: {vllm_mode: colocate, vllm_gpu_memory_utilization: 0.15}\n"
                        "resources:\n  train: {strategy: ddp, gpu: 8, vllm_server_gpus: 0}\n")
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml"), str(override)]) == 1
    out = capsys.readouterr().out
    assert "does not fit" in out and "largest term: optimizer states" in out


def test_cli_bad_input_exits_2(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("resources:\n  train: {strategy: zero9}\n")
    assert main(["--configfile", str(bad)]) == 2
    assert "strategy" in capsys.readouterr().err
    assert main(["--gpus", "2", "--model", "someone/unknown"]) == 2


@pytest.mark.slow
def test_snakemake_stops_before_submitting_a_job_that_does_not_fit(tmp_path) -> None:
    """The train rule runs the plan while Snakemake builds the jobs: a dry run already fails."""
    import subprocess
    import sys

    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    override = tmp_path / "ddp.yaml"
    override.write_text("train:\n  grpo: {vllm_mode: colocate, vllm_gpu_memory_utilization: 0.15}\n"
                        "resources:\n  train: {strategy: ddp, gpu: 8, vllm_server_gpus: 0}\n")
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--nolock",
           "-n", "train_seeds", "--configfile", str(REPO / "config" / "olmocr2.yaml"), str(override)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "does not fit in GPU memory" in out, out[-3000:]
    assert "largest term: optimizer states" in out


def test_recipe_checkpoints_by_hand(capsys) -> None:
    """ZeRO-2 on 7 ranks, bf16 compute: weights copy 2 + DeepSpeed module 2 + fp32 masters and two
    moments 12 = 16 B/param (132.7 GB); on SIGTERM without the weights copy, 14 B/param; the final
    model/ float32; save_total_limit 3 keeps 4 while the newest is written."""
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml")]) == 0
    out = capsys.readouterr().out
    ckpt, stop, model = P7 * 16 / 1e9, P7 * 14 / 1e9, P7 * 4 / 1e9
    assert f"one checkpoint           {ckpt:5.1f}" in out and f"checkpoint on SIGTERM    {stop:5.1f}" in out
    assert f"final model/              {model:4.1f}" in out
    assert f"disk per seed            {4 * ckpt + model:5.1f}" in out and f"6 seed(s): {6 * (4 * ckpt + model):.0f} GB" in out
    assert f"write time at 1 GB/s (resources.train.checkpoint_write_gbps): {ckpt:.0f} s, on SIGTERM {stop:.0f} s" in out
    assert "SLURM signal: 300 s before the walltime (workflow/profiles/slurm/config.yaml)" in out


@pytest.mark.parametrize(("overrides", "slurm_extra", "message"), [
    ({"resources": {"train": {"stop_grace_s": 60}}}, None,
     "resources.train.stop_grace_s (60 s) is shorter than writing the checkpoint on SIGTERM (116.1 GB at 1 GB/s"),
    ({"resources": {"train": {"checkpoint_write_gbps": 0.25, "stop_grace_s": 280}}}, "'--signal=TERM@300'",
     "SLURM signals 300 s before the walltime (the train rule's slurm_extra), less than writing the checkpoint"),
    ({"resources": {"train": {"stop_grace_s": 400}}}, "'--signal=TERM@300'",
     "resources.train.stop_grace_s (400 s) is longer than SLURM's signal lead (300 s"),
    ({}, "'--signal=B:USR1@300'", "sends SIGUSR1, but the trainer checkpoints on SIGTERM"),
])
def test_a_grace_shorter_than_the_checkpoint_write_is_refused(overrides, slurm_extra, message) -> None:
    cfg = config(ZERO2_SERVER, overrides)
    plan = memory_plan(cfg, seven_b(), slurm_extra=slurm_extra)
    assert not plan.fits and any(message in m for m in plan.checkpoints.problems), plan.checkpoints.problems
    with pytest.raises(PlanError, match="cannot write its checkpoint in time"):
        checked_launch_prefix(cfg, 8, SEVEN_B, slurm_extra)


def test_checkpoint_bytes_follow_strategy_and_precision() -> None:
    from olmpipe.plan.checkpoint import checkpoint_bytes_per_param

    assert sum(checkpoint_bytes_per_param("ddp", 4, 2).values()) == 12  # float32 weights + two moments
    assert sum(checkpoint_bytes_per_param("single", 2, 2).values()) == 6  # train.pure_bf16
    assert sum(checkpoint_bytes_per_param("zero3", 4, 2).values()) == 14
    one = memory_plan(config({"resources": {"train": {"gpu": 1}}, "train": {"grpo": {"use_vllm": False,
                                                                                    "save_total_limit": None,
                                                                                    "max_steps": 250,
                                                                                    "save_steps": 100}}}),
                      seven_b())
    c = one.checkpoints
    assert c.stop_grace_s is None and c.kept == 3  # one process: no supervisor; 250 steps / 100 -> 3 saves
    assert c.checkpoint_gb == pytest.approx(P7 * 12 / 1e9) == pytest.approx(c.stop_checkpoint_gb)


def test_cli_reads_the_profile_signal_lead(tmp_path, capsys) -> None:
    profile = tmp_path / "prof"
    profile.mkdir()
    (profile / "config.yaml").write_text("set-resources:\n  train_seed:\n    slurm_extra: \"'--signal=TERM@60'\"\n")
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml"), "--profile", str(profile)]) == 1
    out = capsys.readouterr().out
    assert f"SLURM signals 60 s before the walltime ({profile / 'config.yaml'})" in out
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml"), "--profile", "none"]) == 0
    assert "SLURM signal: none (no profile)" in capsys.readouterr().out
    (profile / "config.yaml").write_text("set-resources: [\n")
    assert main(["--configfile", str(REPO / "config" / "olmocr2.yaml"), "--profile", str(profile)]) == 2
    assert "cannot read the profile" in capsys.readouterr().err


@pytest.mark.slow
def test_snakemake_stops_a_job_whose_checkpoint_outlasts_the_signal_lead(tmp_path) -> None:
    """The train rule reads its own slurm_extra resource (a profile's set-resources, here from the
    command line): a --signal lead shorter than the checkpoint write stops the dry run."""
    import subprocess
    import sys

    for name in ("data", "config"):
        (tmp_path / name).symlink_to(REPO / name)
    cmd = [sys.executable, "-m", "snakemake", "-s", str(REPO / "Snakefile"), "-d", str(tmp_path), "--nolock",
           "-n", "train_seeds", "--configfile", str(REPO / "config" / "olmocr2.yaml"),
           "--set-resources", "train_seed:slurm_extra='--signal=TERM@30'"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0 and "cannot write its checkpoint in time" in out, out[-3000:]
    assert "SLURM signals 30 s before the walltime" in out


#: Qwen2.5-VL-7B-Instruct's preprocessor_config.json (olmOCR's checkpoints keep it): pixel budget,
#: patch and merge sizes. The image-token count below is the transformers processor's own.
QWEN25_VL_PREPROCESSOR = {"size": {"shortest_edge": 3136, "longest_edge": 12845056}, "patch_size": 14,
                          "merge_size": 2, "temporal_patch_size": 2}
#: What Qwen2.5-VL's chat template adds when a conversation has no system turn.
QWEN25_VL_DEFAULT_SYSTEM = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n"


def test_recipe_context_holds_the_longest_prompt() -> None:
    """vllm_max_model_length 8192 against the longest prompt of the recipe: a page rendered at 1288 px
    on its longest side is largest when square; the Qwen2.5-VL image processor (transformers, with
    the 7B's settings) makes 2116 image tokens of it; the text is bounded by its UTF-8 bytes (a
    byte-level BPE token covers at least one byte), default system turn included; + 3000 completion
    tokens. The plan's arithmetic gives the same image tokens."""
    import jinja2
    from PIL import Image
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    from olmpipe.models.load import CHAT_TEMPLATE
    from olmpipe.prompts import build_messages

    cfg = load_configs([REPO / "config" / "olmocr2.yaml"])
    side, grpo = cfg["rasterize"]["longest_side"], cfg["train"]["grpo"]
    processor = Qwen2VLImageProcessorPil(**QWEN25_VL_PREPROCESSOR)

    def image_tokens(width: int, height: int) -> int:
        t, h, w = processor(images=[Image.new("RGB", (width, height), "white")], return_tensors="pt")[
            "image_grid_thw"][0].tolist()
        return t * h * w // QWEN25_VL_PREPROCESSOR["merge_size"] ** 2

    shape = seven_b()
    square = image_tokens(side, side)
    assert square == shape.max_image_tokens(side) == 2116
    assert image_tokens(round(side * 8.5 / 11), side) == shape.image_tokens(side)[0]
    assert max(image_tokens(w, side) for w in range(300, side + 1, 197)) == square  # no page shape beats square
    text = jinja2.Template(CHAT_TEMPLATE).render(messages=build_messages(), add_generation_prompt=True)
    text_bound = len((QWEN25_VL_DEFAULT_SYSTEM + text).encode("utf-8"))
    longest = square + text_bound + grpo["max_completion_length"]
    assert longest <= grpo["vllm_max_model_length"], (square, text_bound, grpo["max_completion_length"])
    assert grpo["vllm_max_model_length"] - longest > 1000  # room left (measured: 2116 + 708 + 3000 = 5824)


def test_a_vllm_context_shorter_than_the_longest_prompt_is_refused() -> None:
    cfg = config(ZERO2_SERVER, {"train": {"grpo": {"vllm_max_model_length": 4096}}})
    plan = memory_plan(cfg, seven_b())
    assert any("vllm_max_model_length (4096) is shorter than the longest prompt" in m and "at least 5276" in m
               for m in plan.problems), plan.problems


# --- architectures beyond Qwen2.5-VL (olmpipe.models.architectures) ------------------------------------------

QWEN3_8B, QWEN3_30B = "Qwen/Qwen3-VL-8B-Instruct", "Qwen/Qwen3-VL-30B-A3B-Instruct"
QWEN3_CONFIG = REPO / "config" / "olmocr2-qwen3vl-8b.yaml"


def meta_model(fields: dict):
    """The transformers model of a KNOWN_MODELS entry, built on the meta device (no memory)."""
    import torch
    import transformers

    from olmpipe.models.architectures import architecture_of

    arch = architecture_of(fields, "known")
    config_class = getattr(transformers, arch.model_class.replace("ForConditionalGeneration", "Config"))
    hf = config_class(text_config=dict(fields["text_config"]), vision_config=dict(fields["vision_config"]),
                      tie_word_embeddings=fields["tie_word_embeddings"])
    with torch.device("meta"):
        return getattr(transformers, arch.model_class)(hf)


def test_qwen3_vl_parameter_counts_match_transformers() -> None:
    """Qwen3-VL-8B (8.77B, the model card's figure) and Qwen3-VL-30B-A3B counted exactly as
    transformers builds them; the MoE's active parameters leave out 120 of 128 experts per layer."""
    for name in (QWEN3_8B, QWEN3_30B):
        model = meta_model(dict(KNOWN_MODELS[name]))
        shape = load_shape(name)
        assert shape.parameters() == sum(p.numel() for p in model.parameters()), name
        assert shape.vision_parameters() == sum(p.numel() for p in model.model.visual.parameters()), name
    assert load_shape(QWEN3_8B).parameters() == 8_767_123_696
    assert load_shape(QWEN3_8B).active_parameters() == load_shape(QWEN3_8B).parameters()
    moe = load_shape(QWEN3_30B)
    assert moe.parameters() == 31_070_754_032 and moe.moe_layers == 48
    assert moe.parameters() - moe.active_parameters() == 48 * (128 - 8) * 3 * 2048 * 768


@pytest.mark.parametrize("arch_key", ["qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_tiny_folders_of_every_architecture_are_read(arch_key, tiny_models) -> None:
    """A local folder's config.json (as transformers 5.24 saves it) gives the real size, and its
    processor settings the image tokens of the tiny processor (64 at most)."""
    from olmpipe.models.load import load_model_and_processor

    folder = tiny_models(arch_key)
    model, _ = load_model_and_processor(folder)
    shape = load_shape(folder)
    assert shape.parameters() == sum(p.numel() for p in model.parameters())
    assert shape.architecture == arch_key and shape.image_tokens(1288)[0] <= 64


def test_qwen3_vl_8b_recipe_fits_eight_80gb_gpus_with_the_real_processor_s_page(capsys) -> None:
    """Acceptance: `olmpipe plan` on config/olmocr2-qwen3vl-8b.yaml prints every term and "fits"
    (7 ZeRO-2 ranks + 1 vLLM server GPU of 80 GB), and the page it plans for is the 1240 image tokens
    that the real Qwen3-VL processor (Qwen3-VL-8B's image settings) makes of a 1288 px page."""
    from support.pages import letter_page, processor_image_tokens

    assert main(["--configfile", str(QWEN3_CONFIG)]) == 0
    out = capsys.readouterr().out
    for term in ("weights", "gradients", "optimizer states", "reference model", "activations",
                 "vision activations", "logits", "runtime reserve", "vLLM weights", "vLLM KV cache"):
        assert f"\n{term} " in out, term
    assert "8.77B parameters" in out and "strategy: zero2, 7 training rank(s)" in out and out.rstrip().endswith("fits")
    plan = memory_plan(load_configs([QWEN3_CONFIG]), load_shape(QWEN3_8B))
    assert plan.fits and plan.image_tokens == 1240 and f"page image: {plan.image_tokens} tokens" in out
    page = letter_page(1288)
    assert processor_image_tokens("qwen3_vl", plan.shape.image_budget, page) == plan.image_tokens
    assert rows(plan)["activations"] > 0 and f"1 x {1240 + 160 + 8000} tokens (1240 image)" in out


def test_moe_plan_counts_all_experts_for_memory_and_active_ones_for_activations() -> None:
    """Qwen3-VL-30B-A3B on the 8B recipe's 8 x 80 GB: ZeRO-2 keeps the 31B weights whole on every rank
    and cannot fit; the message says what ZeRO-3 would need. Activations keep 8 experts' values."""
    cfg = load_configs([QWEN3_CONFIG])
    moe = load_shape(QWEN3_30B)
    plan = memory_plan(cfg, moe)
    r = rows(plan)
    assert r["weights"] == pytest.approx(moe.parameters() * 2 / GIB)
    assert not plan.fits
    [*_, total] = plan.problems
    assert "largest term: weights" in total and "with resources.train.strategy: zero3 a training GPU would need" in total
    h, q, kv = 2048, 32 * 128, 4 * 128
    per_layer = 4 * h + 2 * q + 2 * kv + 128 + 4 * 8 * 768  # router logits + 8 experts' SwiGLU values
    assert r["activations"] == pytest.approx((1240 + 160 + 8000) * (48 * h + per_layer) * 2 / GIB)
    server = {t.name: t.gib for t in plan.server_terms}
    assert server["vLLM weights"] == pytest.approx(moe.parameters() * 2 / GIB)  # every expert is loaded
    assert "8 of 128 experts" in plan.table()


def test_context_lengths_are_checked_against_the_architecture_s_page() -> None:
    """vLLM's context must hold the longest prompt (a square 1288 px page: 1600 image tokens on
    Qwen3-VL, 2116 on Qwen2.5-VL, as the architecture's image processor sizes it) plus the answer; a
    config that cannot stops naming the key and the length it needs."""
    from olmpipe.config import ConfigError

    assert load_shape(QWEN3_8B).max_image_tokens(1288) == 40 * 40 and seven_b().max_image_tokens(1288) == 46 * 46
    short = {"generation": {"backend": "vllm", "max_new_tokens": 8000, "vllm": {"max_model_len": 9700}},
             "model": {"path": QWEN3_8B}}
    with pytest.raises(ConfigError, match=r"generation.vllm.max_model_len \(9700\) is shorter than the longest prompt"
                                          r".*1600 image tokens at 32 x 32 px.*at least 9760"):
        load_config(overrides=short)
    load_config(overrides={**short, "generation": {**short["generation"], "vllm": {"max_model_len": 9760}}})
    with pytest.raises(ConfigError, match=r"at least 10276"):  # the same length is too short for Qwen2.5-VL's page
        load_config(overrides={**short, "model": {"path": SEVEN_B},
                               "generation": {**short["generation"], "vllm": {"max_model_len": 9760}}})
    cfg = load_configs([QWEN3_CONFIG])
    cfg["train"]["grpo"]["vllm_max_model_length"] = 9000
    plan = memory_plan(cfg, load_shape(QWEN3_8B))
    assert any("train.grpo.vllm_max_model_length (9000)" in p and "at least 9760" in p for p in plan.problems)
