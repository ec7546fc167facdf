"""GRPO rollouts through TRL's vLLM colocate mode on vLLM's CPU build (the `vllm` environment of
``scripts/setup.sh --vllm``; skipped elsewhere). Stock TRL + vLLM CPU fails at the first weight sync
(``'Parameter' object has no attribute 'weight_loader'``: vLLM repacks linear weights on CPU);
:class:`olmpipe.train.trainer.ResumableGRPOTrainer` keeps plain linear weights and drops the
engine's caches after each sync, so the run trains and the engine's log-probs follow the trainer's."""

from __future__ import annotations

import json
import math

import pytest
from trainkit import LowIdReward, make_page_index

pytest.importorskip("vllm")
pytestmark = [pytest.mark.vllm, pytest.mark.slow]


@pytest.fixture(autouse=True)
def fresh_vllm_process_groups():
    """Each colocated engine lives in the test process; vLLM keeps its process groups module-wide, and a
    later engine reuses them: an MoE engine after a dense one found no expert-parallel group ("EP group
    is only created for MoE models"). Tear them down after each test, as a new job process would."""
    yield
    from vllm.distributed import cleanup_dist_env_and_memory

    cleanup_dist_env_and_memory()


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen3_vl_moe"])
def test_colocated_vllm_rollouts_train_with_synced_weights(arch, tmp_path, tiny_models, monkeypatch):
    """Also on Qwen3-VL-MoE: its experts reach the engine in the layout vLLM loads (a sync in the live
    layout fails to load), computed from the loaded weights (olmpipe.train.trainer)."""
    from olmpipe.config import load_config
    from olmpipe.train.run import train_seed

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    pages, tests = make_page_index(tmp_path)
    grpo = {"max_steps": 2, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
            "max_completion_length": 8, "save_steps": 1000, "logging_steps": 1, "learning_rate": 0.01,
            "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.05,
            "vllm_max_model_length": 4096, "vllm_importance_sampling_correction": True}
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "device": "cpu", "grpo": grpo},
                                 "rewards": {"bench": {"processes": 0}}})
    run = tmp_path / "run"
    assert train_seed(cfg, seed=0, model_path=tiny_models(arch), pages=pages, tests_dir=tests, run_dir=run,
                      reward_funcs=[LowIdReward()]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    # step 2 generates after the first sync: vLLM's and the trainer's log-probs agree (ratio ~1;
    # measured 0.96 and 1.01) only when the engine runs the trained weights
    ratios = [r["sampling/importance_sampling_ratio/mean"] for r in rows]
    assert all(math.isfinite(x) and 0.8 < x < 1.25 for x in ratios), ratios


def _lora_vllm_run(tmp_path, tiny_model_dir, monkeypatch, name):
    from olmpipe.config import load_config
    from olmpipe.train.run import train_seed

    monkeypatch.setenv("VLLM_CPU_KVCACHE_SPACE", "1")
    pages, tests = make_page_index(tmp_path)
    grpo = {"max_steps": 3, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 2,
            "max_completion_length": 8, "save_steps": 1000, "logging_steps": 1, "learning_rate": 0.05,
            "use_vllm": True, "vllm_mode": "colocate", "vllm_gpu_memory_utilization": 0.05,
            "vllm_max_model_length": 4096, "vllm_importance_sampling_correction": True}
    # alpha / r = 8: a strong adapter, so rollouts without it would show in the ratios
    peft = {"enabled": True, "r": 4, "alpha": 32}
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "device": "cpu", "grpo": grpo, "peft": peft},
                                 "rewards": {"bench": {"processes": 0}}})
    run = tmp_path / name
    assert train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                      reward_funcs=[LowIdReward()]) == 0
    rows = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3]
    return run, [r["sampling/importance_sampling_ratio/mean"] for r in rows]


def test_lora_colocated_vllm_rollouts_use_the_merged_adapter(tmp_path, tiny_model_dir, monkeypatch):
    """LoRA + colocated vLLM: each sync sends the base with the adapter merged (the base itself kept
    bit for bit, olmpipe.job.peft.merged_named_params); after a sync the engine's log-probs follow
    the trainer's (ratio ~1), while rollouts from the base without the adapter (the control) drift."""
    run, ratios = _lora_vllm_run(tmp_path, tiny_model_dir, monkeypatch, "lora")
    assert all(math.isfinite(x) and 0.8 < x < 1.25 for x in ratios), ratios
    assert (run / "adapter" / "adapter_model.safetensors").exists() and (run / "model" / "model.safetensors").exists()

    import olmpipe.job.peft as peft_module

    def base_only(model):  # what vLLM would run if the sync forgot the adapter
        for name, param in model.named_parameters():
            name = name.removeprefix("base_model.model.").replace(".base_layer", "")
            if "lora_" not in name:
                yield name, param.data

    monkeypatch.setattr(peft_module, "merged_named_params", base_only)
    _, unsynced = _lora_vllm_run(tmp_path / "control", tiny_model_dir, monkeypatch, "lora")
    assert max(abs(x - 1) for x in unsynced[1:]) > max(abs(x - 1) for x in ratios[1:]), (ratios, unsynced)


def test_vllm_serve_keeps_the_configured_logprobs_mode():
    """The server command olmpipe builds, through the installed TRL's `trl vllm-serve` translation, as
    the installed vLLM's engine-argument parser reads it: TRL's forced processed_logprobs comes first,
    train.vllm_server.logprobs_mode last, and vLLM keeps the last (olmOCR 2's raw log-probs)."""
    from trl.scripts.vllm_serve import build_command as trl_command
    from trl.scripts.vllm_serve import make_parser
    from vllm.engine.arg_utils import AsyncEngineArgs

    try:
        from vllm.utils.argparse_utils import FlexibleArgumentParser
    except ImportError:  # vLLM < 0.31 kept it in vllm.utils
        from vllm.utils import FlexibleArgumentParser

    from olmpipe.config import load_config
    from olmpipe.train.vllm_server import build_command

    for mode in ("raw_logprobs", "processed_logprobs"):
        cfg = load_config(overrides={"train": {"grpo": {"vllm_max_model_length": 8192},
                                               "vllm_server": {"logprobs_mode": mode}}})
        args, rest = make_parser().parse_args_and_config(args=build_command(cfg, "m", ["0"], 8000)[3:],
                                                         return_remaining_strings=True)
        serve = trl_command(args, rest)
        engine_args = serve[serve.index("serve") + 2:]  # after `serve <model>`
        parsed, _ = AsyncEngineArgs.add_cli_args(FlexibleArgumentParser()).parse_known_args(engine_args)
        assert parsed.logprobs_mode == mode
