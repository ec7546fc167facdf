"""Fast tests of olmpipe.train: dataset from the page index, GRPOConfig from the config, callbacks,
resume resolution and the per-seed job config (no training here; see test_train_loop.py)."""

from __future__ import annotations

import json
import shutil

import pytest
from trainkit import REPO, make_page_index

from olmpipe.config import ConfigError, load_config
from olmpipe.job.callbacks import RUN_STATE_FILE, MetricsFiles
from olmpipe.job.data import PageIndexError, build_examples, to_dataset
from olmpipe.job.jobconfig import seed_config
from olmpipe.job.resume import run_settings, trajectory_fingerprint
from olmpipe.records.metrics import read_metrics, truncate_metrics
from olmpipe.records.pages import PAGE_FIELDS, read_page_index
from olmpipe.train.args import grpo_config, grpo_knobs, resolve_dtype
from olmpipe.train.completions import CompletionsTable
from olmpipe.train.run import checkpoints, resolve_resume


def test_examples_skip_and_count_pages_without_tests(tmp_path):
    pages, tests = make_page_index(tmp_path, n_train=3, n_eval=2)
    examples, summary = build_examples(pages, tests)
    assert summary.pages == 3 and summary.skipped_no_tests == 1 and summary.skipped_other_split == 2
    assert all(ex.test_ids and len(ex.test_ids) == len(ex.test_files) for ex in examples)
    assert summary.tests == sum(summary.tests_by_type.values())
    evals, _ = build_examples(pages, tests, split="eval")
    assert len(evals) == 2


def test_filters_by_type_and_jsonl(tmp_path):
    pages, tests = make_page_index(tmp_path, n_train=4, n_eval=0)
    examples, summary = build_examples(pages, tests, types=["table"])
    assert all(set(ex.test_types) == {"table"} for ex in examples)
    assert summary.skipped_filtered >= 1 and summary.pages == len(examples)
    _, none = build_examples(pages, tests, jsonl_regex="^blanks")
    assert none.pages == 0 and none.skipped_filtered == 4
    _, limited = build_examples(pages, tests, max_pages=2)
    assert limited.pages == 2 and limited.truncated == 2


def test_reference_answers_from_a_candidate_folder(tmp_path):
    pages, tests = make_page_index(tmp_path, n_train=4, n_eval=0)
    examples, summary = build_examples(pages, tests, reference_candidate="olmocr_pipeline")
    assert summary.with_reference == 4 and all(ex.reference for ex in examples)


def test_dataset_columns_and_lazy_images(tmp_path):
    pages, tests = make_page_index(tmp_path, n_train=2, n_eval=0)
    examples, _ = build_examples(pages, tests)
    dataset = to_dataset(examples)
    row = dataset[0]
    assert row["prompt"][0]["content"][0]["type"] == "text" and row["prompt"][0]["content"][1]["type"] == "image"
    assert row["images"][0].size == (220, 300)  # decoded from the PNG on access
    assert {"pdf", "page", "test_ids", "test_files", "test_types", "reference"} <= set(dataset.column_names)
    with pytest.raises(ValueError, match="empty"):
        to_dataset([])


@pytest.mark.parametrize(("line", "message"), [
    ("not json", "not valid JSON"),
    ('["a list"]', "expected a JSON object"),
    ('{"pdf": "x.pdf"}', "page entry misses"),
])
def test_bad_page_index_names_file_and_line(tmp_path, line, message):
    path = tmp_path / "pages.jsonl"
    path.write_text("\n" + line + "\n")
    with pytest.raises(PageIndexError, match=rf"pages.jsonl:2: {message}"):
        read_page_index(path, required=PAGE_FIELDS, error=PageIndexError)


def test_unknown_test_id_and_missing_image_fail_early(tmp_path):
    pages, tests = make_page_index(tmp_path, n_train=1, n_eval=0, extra_empty=False)
    record = json.loads(pages.read_text())
    record["test_ids"].append("ghost")
    record["jsonl_files"]["ghost"], record["types"]["ghost"] = "dataset.jsonl", "present"
    pages.write_text(json.dumps(record) + "\n")
    with pytest.raises(PageIndexError, match="'ghost' is not in"):
        build_examples(pages, tests)
    record["test_ids"].remove("ghost")
    record["image"] = str(tmp_path / "nope.png")
    pages.write_text(json.dumps(record) + "\n")
    with pytest.raises(PageIndexError, match="does not exist"):
        build_examples(pages, tests)


def test_grpo_config_from_config(tmp_path):
    cfg = load_config(overrides={"train": {"seed_overrides": [
        {"seed": 4, "grpo": {"importance_sampling_level": "sequence"}}]}})
    args = grpo_config(grpo_knobs(cfg["train"], 4), output_dir=str(tmp_path), seed=4, reward_weights=[1.0, 0.5],
                       device="cpu")
    assert args.importance_sampling_level == "sequence" and args.seed == 4
    assert not args.bf16 and args.use_cpu and args.remove_unused_columns is False and not args.log_completions
    assert args.reward_weights == [1.0, 0.5] and args.report_to == []
    for key, value in cfg["train"]["grpo"].items():
        if key not in ("importance_sampling_level", "save_total_limit") and value is not None:
            assert getattr(args, key) == value, key
    assert args.save_total_limit is None  # applied by RunState after each commit (olmpipe.job.checkpoints)
    assert grpo_knobs(cfg["train"], 0)["importance_sampling_level"] == "token"
    assert resolve_dtype("auto", "cpu") == "float32" and resolve_dtype("auto", "cuda") == "bfloat16"
    with pytest.raises(ConfigError, match="max_prompt_length: not a field of TRL's GRPOConfig"):
        load_config(overrides={"train": {"seed_overrides": [{"seed": 0, "grpo": {"max_prompt_length": 9}}]}})
    bad = {**cfg["train"], "seed_overrides": [{"seed": 0, "grpo": {"max_prompt_length": 9}}]}
    with pytest.raises(ValueError, match="max_prompt_length"):
        grpo_knobs(bad, 0)


def test_every_grpo_config_field_is_reachable_and_checked(tmp_path):
    """Any GRPOConfig field reaches TRL; unknown names get the closest valid one; types are checked;
    the shipped field table equals the installed TRL's dataclass."""
    from olmpipe.config.grpo_fields import describe_fields, load_fields

    assert describe_fields() == load_fields(), "run python -m olmpipe.config.grpo_fields --write"
    cfg = load_config(overrides={"train": {"grpo": {
        "use_bias_correction_kl": False, "num_generations_eval": 4, "vllm_importance_sampling_clip_min": 0.5,
        "lr_scheduler_kwargs": {"min_lr": 0.0}, "generation_kwargs": {"top_k": 5}, "adam_beta2": 0.98}}})
    args = grpo_config(grpo_knobs(cfg["train"], 0), output_dir=str(tmp_path), seed=0, reward_weights=[1.0],
                       device="cpu")
    assert args.use_bias_correction_kl is False and args.num_generations_eval == 4
    assert args.vllm_importance_sampling_clip_min == 0.5 and args.adam_beta2 == 0.98
    assert args.generation_kwargs == {"top_k": 5} and args.lr_scheduler_kwargs == {"min_lr": 0.0}
    for bad, message in [
        ({"use_bias_corection_kl": False}, "did you mean use_bias_correction_kl"),
        ({"adam_beta2": "high"}, "adam_beta2: 'high' is a string, expected"),
        ({"seed": 3}, "set by olmpipe from train.seeds"),
        ({"max_steps": -5}, "max_steps"),
        ({"max_steps": 0}, "max_steps: 0 is not a step count"),
        ({"use_bias_correction_kl": "no"}, "expected boolean"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config(overrides={"train": {"grpo": bad}})


def test_generation_batch_must_hold_whole_groups(tmp_path):
    """TRL refuses a generation batch that is no multiple of num_generations; the config check now
    says so before any job starts (issue 20 item 8), naming the keys and the arithmetic."""
    with pytest.raises(ConfigError, match=r"train/grpo.num_generations \(3\): each generation batch must hold "
                                          r"whole groups, but .* = 4 x 1 x 2 = 8 completions"):
        load_config(overrides={"train": {"grpo": {"num_generations": 3}}})
    cfg = load_config()
    cfg["train"]["grpo"]["num_generations"] = 3  # past the check: TRL still refuses it
    with pytest.raises(ValueError, match="divisible by num_generations"):
        grpo_config(grpo_knobs(cfg["train"], 0), output_dir=str(tmp_path), seed=0, reward_weights=[1.0], device="cpu")


def test_batch_checks_are_trls(tmp_path):
    """olmpipe.config.grpo_fields.batch_problems rejects exactly what TRL 1.16's GRPOConfig rejects,
    for a grid of batch settings and world sizes (the real class, its world size set per case), and
    its defaults are the installed GRPOConfig's."""
    import dataclasses
    import itertools

    from trl import GRPOConfig

    from olmpipe.config.grpo_fields import BATCH_DEFAULTS, batch_problems

    defaults = {f.name: f.default for f in dataclasses.fields(GRPOConfig)}
    assert {k: defaults[k] for k in BATCH_DEFAULTS} == BATCH_DEFAULTS
    checked = 0
    for world, per_device, accumulation, generations, extra in itertools.product(
            (1, 2, 3), (1, 2, 4), (1, 3), (2, 3, 4, 6), (
                {}, {"steps_per_generation": 3}, {"generation_batch_size": 12},
                {"generation_batch_size": 12, "steps_per_generation": 2},
                {"eval_strategy": "steps", "per_device_eval_batch_size": 2, "eval_steps": 5},
                {"eval_strategy": "steps", "num_generations_eval": 2, "per_device_eval_batch_size": 3, "eval_steps": 5},
                {"vllm_importance_sampling_clip_min": 2.0, "vllm_importance_sampling_clip_max": 2.0},
                {"vllm_importance_sampling_mode": "token_truncate", "vllm_importance_sampling_clip_max": None},
                {"auto_find_batch_size": True}, {"num_generations": 1})):
        knobs = {"per_device_train_batch_size": per_device, "gradient_accumulation_steps": accumulation,
                 "num_generations": generations, **extra}
        sized = type("SizedGRPOConfig", (GRPOConfig,), {"world_size": property(lambda self, n=world: n)})
        try:
            sized(output_dir=str(tmp_path), use_cpu=True, report_to=[], **knobs)
            trl_ok = True
        except ValueError:
            trl_ok = False
        ours = batch_problems(knobs, world, "train/grpo")
        assert trl_ok == (not ours), (world, knobs, ours)
        checked += 1
    assert checked == 720


#: The olmOCR 2 run as it ran (allenai/olmocr v0.4.27; "README" olmocr/train/README.md, "grpo_train"
#: olmocr/train/grpo_train.py, "launcher" scripts/train/grpotrainer-beaker-multi-gpu-augusta.sh;
#: TRL v0.23.0 for the trainer defaults of that time). Key -> (value, source).
RECIPE = {
    "train.grpo.learning_rate": (2e-6, "README:147 --learning_rate 2e-6"),
    "train.grpo.beta": (0.01, "README:147 --beta 0.01"),
    "train.grpo.gradient_accumulation_steps": (28, "README:147 --gradient_accumulation_steps 28"),
    "train.grpo.num_generations": (28, "grpo_train:857"),
    "train.grpo.per_device_train_batch_size": (1, "grpo_train:790"),
    "train.grpo.warmup_steps": (100, "grpo_train:793"),
    "train.grpo.num_train_epochs": (1, "grpo_train:789"),
    "train.grpo.max_completion_length": (3000, "grpo_train:1010"),
    "train.grpo.temperature": (0.7, "grpo_train:1011"),
    "train.grpo.loss_type": ("bnpo", "grpo_train:799"),
    "train.grpo.scale_rewards": ("group", "grpo_train:800"),
    "train.grpo.num_iterations": (1, "grpo_train:856"),
    "train.grpo.save_steps": (100, "grpo_train:1005"),
    "train.grpo.save_total_limit": (3, "grpo_train:1006"),
    "train.grpo.logging_steps": (10, "grpo_train:1004"),
    "train.grpo.dataloader_num_workers": (8, "grpo_train:1017"),
    "train.grpo.dataloader_drop_last": (True, "grpo_train:1018"),
    "train.grpo.use_vllm": (True, "grpo_train:1028"),
    "train.grpo.vllm_mode": ("server", "launcher:213 (server for multi-GPU)"),
    "train.grpo.vllm_gpu_memory_utilization": (0.5, "launcher:335 trl vllm-serve --gpu-memory-utilization 0.5"),
    "train.grpo.vllm_importance_sampling_correction": (True, "TRL v0.23.0 grpo_config.py:223"),
    "train.grpo.vllm_importance_sampling_mode": ("token_truncate", "TRL v0.23.0 grpo_trainer.py:1389-1393"),
    "train.grpo.vllm_importance_sampling_clip_max": (2.0, "TRL v0.23.0 grpo_config.py:229 cap=2.0"),
    "train.grpo.use_bias_correction_kl": (False, "TRL v0.23.0 grpo_trainer.py:1653 plain k3 KL"),
    "train.grpo.disable_dropout": (False, "grpo_train:997-1032 leaves it; TRL v0.23.0 grpo_config.py:282 default"),
    "train.vllm_server.logprobs_mode": ("raw_logprobs", "launcher:335; TRL v0.23.0 vllm_serve.py:319-333 (raw)"),
    "rewards.weights.bench": (1.0, "README:147 --reward_bench 1.0"),
    "rewards.weights.front_matter": (1.0, "README:147 --reward_front_matter 1.0"),
    "rewards.weights.eos": (1.0, "README:147 --reward_eos 1.0"),
    "rewards.reference_candidate": ("claude_original", "grpo_train front matter reward vs claude_original"),
    "resources.train.gpu": (8, "README:147 --num-gpus 8"),
    "resources.train.vllm_server_gpus": (1, "launcher:131 vllm_gpu = num_gpus - 1"),
    "resources.train.strategy": ("zero2", "launcher:209 --use_deepspeed --zero_stage 2"),
    "rasterize.longest_side": (1288, "olmOCR 2 renders at 1288 px"),
}


@pytest.mark.parametrize("key", sorted(RECIPE))
def test_olmocr2_recipe_matches_the_reference_run(key):
    cfg = load_config("config/olmocr2.yaml")
    value = cfg
    for part in key.split("."):
        value = value[part]
    expected, source = RECIPE[key]
    assert value == expected, f"{key}: {value!r}, the reference ran {expected!r} ({source})"
    # every value carries its source in the recipe file's comments
    text = (REPO / "config" / "olmocr2.yaml").read_text()
    assert key.rsplit(".", 1)[1] + ":" in text


def test_olmocr2_recipe_seeds_and_max_model_length():
    cfg = load_config("config/olmocr2.yaml")
    levels = {s: grpo_knobs(cfg["train"], s)["importance_sampling_level"] for s in cfg["train"]["seeds"]}
    assert sorted(levels.values()) == ["sequence"] * 3 + ["token"] * 3  # README:152: 3 + 3 seeds, souped
    assert cfg["train"]["grpo"]["vllm_max_model_length"] is not None  # never the model's 128k default
    weights = {k for k, v in cfg["rewards"]["weights"].items() if v is not None}
    assert weights == {"bench", "front_matter", "eos"}
    # 7 training ranks x 1 x 28 accumulation = 196 completions = 7 pages x 28 generations per step
    ranks = cfg["resources"]["train"]["gpu"] - cfg["resources"]["train"]["vllm_server_gpus"]
    g = cfg["train"]["grpo"]
    assert ranks * g["per_device_train_batch_size"] * g["gradient_accumulation_steps"] == 7 * g["num_generations"]


def _state(step: int):
    from transformers import TrainerState

    return TrainerState(global_step=step, is_world_process_zero=True)


def test_metrics_files_and_truncation(tmp_path):
    cb = MetricsFiles(tmp_path)
    for step in (1, 2, 3):
        cb.on_log(None, _state(step), None, logs={"loss": 0.1 * step, "reward": float("nan")})
    cb.on_log(None, _state(3), None, logs={"train_runtime": 1.0})
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3] and rows[0]["reward"] is None
    assert (tmp_path / "train_summary.json").exists()
    assert (tmp_path / "metrics.csv").read_text().splitlines()[0].startswith("step,")
    assert truncate_metrics(tmp_path, 2) == 2
    assert [r["step"] for r in read_metrics(tmp_path / "metrics.jsonl")] == [1, 2]
    assert len((tmp_path / "metrics.csv").read_text().splitlines()) == 3


def test_completions_table_rows():
    """Rows from a batch as TRL records it (the record of a real step: tests/test_compat.py)."""
    from olmpipe.compat.trl import GenerationBatch

    verdicts = json.dumps([{"id": "t1", "type": "present", "passed": False, "reason": "not found"}])
    batch = GenerationBatch(
        completions=[[{"role": "assistant", "content": "hello"}], "bye"],
        rewards={"bench_reward": [0.0, 1.0]},
        advantages=[-0.7, 0.7],
        extra={"bench_verdicts": [verdicts, None], "page_id": ["a.pdf#1", "a.pdf#1"]},
    )
    rows = CompletionsTable.rows(2, batch)
    assert rows[0]["completion"] == "hello" and rows[0]["verdicts"][0]["reason"] == "not found"
    assert rows[1]["rewards"] == {"bench_reward": 1.0} and rows[0]["page"] == "a.pdf#1"
    assert rows[1]["verdicts"] is None and [r["step"] for r in rows] == [2, 2]


def _fake_checkpoint(run_dir, step, settings):
    import torch
    from safetensors.torch import save_file

    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"w": torch.zeros(2)}, str(folder / "model.safetensors"))  # the weights a resume loads
    if settings.get("train.peft.enabled"):  # a LoRA run's: its adapter
        save_file({"w": torch.zeros(2)}, str(folder / "adapter_model.safetensors"))
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / RUN_STATE_FILE).write_text(json.dumps({"settings": settings, "wandb_run_id": "abc"}))
    return folder


def test_resume_auto_takes_the_newest_matching_checkpoint(tmp_path):
    same = {"train.grpo.learning_rate": 1e-6, "world_size": 1}
    _fake_checkpoint(tmp_path, 2, same)
    newest = _fake_checkpoint(tmp_path, 10, same)
    (tmp_path / "checkpoint-11").mkdir()  # incomplete (no trainer_state.json): ignored
    assert [p.name for p in checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-10"]
    assert resolve_resume("auto", tmp_path, same) == newest
    assert resolve_resume(str(newest), tmp_path, {"other": 1}) == newest
    with pytest.raises(FileNotFoundError):
        resolve_resume(str(tmp_path / "nope"), tmp_path, same)


def test_changed_trajectory_settings_stop_and_restart_moves_aside(tmp_path):
    """Other settings: `auto` stops naming the changed keys and touches nothing; `continue` takes the
    checkpoint anyway; `restart` moves the whole old run aside (nothing deleted)."""
    from olmpipe.job.resume import ResumeMismatchError

    run = tmp_path / "seed0"
    old = {"train.grpo.learning_rate": 1e-6, "world_size": 1, "seed": 0}
    newest = _fake_checkpoint(run, 4, old)
    (run / "metrics.jsonl").write_text('{"step": 1}\n')
    before = sorted(p.name for p in run.rglob("*"))
    new = {**old, "train.grpo.learning_rate": 2e-6, "world_size": 7}
    with pytest.raises(ResumeMismatchError, match=r"train.grpo.learning_rate: 1e-06 -> 2e-06.*world_size: 1 -> 7"):
        resolve_resume("auto", run, new)
    assert sorted(p.name for p in run.rglob("*")) == before
    assert resolve_resume("continue", run, new) == newest
    assert resolve_resume("restart", run, new) is None
    assert not list(run.iterdir())
    aside = [p for p in tmp_path.iterdir() if p.name.startswith("seed0.old-")]
    assert len(aside) == 1 and sorted(p.name for p in aside[0].rglob("*")) == before


def test_the_same_model_by_another_path_is_no_settings_change(tmp_path, monkeypatch):
    """Issue 20 item 10: resuming with the base model given as an absolute path where the checkpoint
    recorded the relative one was refused as a settings change. Paths are compared resolved (a
    symbolic link to the same folder too); another folder is still a change."""
    from olmpipe.job.resume import ResumeMismatchError

    monkeypatch.chdir(tmp_path)
    (tmp_path / "results" / "model" / "tiny").mkdir(parents=True)
    (tmp_path / "other").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "results" / "model" / "tiny")
    run = tmp_path / "seed0"
    old = {"train.grpo.learning_rate": 1e-6, "world_size": 1, "seed": 0, "model": "results/model/tiny"}
    newest = _fake_checkpoint(run, 4, old)
    for same in (str(tmp_path / "results/model/tiny"), "./results/model/tiny/", str(tmp_path / "link")):
        assert resolve_resume("auto", run, {**old, "model": same}) == newest, same
    with pytest.raises(ResumeMismatchError, match=r"model: 'results/model/tiny' -> 'other'"):
        resolve_resume("auto", run, {**old, "model": "other"})


def test_seed_config_and_fingerprint():
    cfg = load_config("config/olmocr2.yaml")
    job = seed_config(cfg, 4)
    assert job["train"]["seeds"] == [4] and [o["seed"] for o in job["train"]["seed_overrides"]] == [4]
    assert set(job) == {"model", "rewards", "train"}
    more = load_config("config/olmocr2.yaml", {"train": {"seeds": [1, 2, 3, 4, 5, 6, 7]}})
    assert seed_config(more, 4) == job  # adding a seed does not rerun the others
    site = load_config("config/olmocr2.yaml", {"resources": {"train": {"mem_mb": 1000, "runtime": 5}}})
    assert seed_config(site, 4) == job  # nor does asking for other memory or walltime
    def fingerprint(cfg, seed, model):
        return trajectory_fingerprint(run_settings(cfg, seed, model))

    base = fingerprint(cfg, 4, "m")
    assert fingerprint(load_config("config/olmocr2.yaml", {"train": {"wandb": {"mode": "disabled"},
                                                                     "grpo": {"save_steps": 7}}}), 4, "m") == base
    assert fingerprint(load_config("config/olmocr2.yaml", {"train": {"grpo": {"beta": 0.0}}}), 4, "m") != base
    assert fingerprint(cfg, 1, "m") != base and fingerprint(cfg, 4, "other") != base
    # the knobs the job computed once are the ones the settings record
    assert run_settings(cfg, 4, "m", knobs=grpo_knobs(cfg["train"], 4)) == run_settings(cfg, 4, "m")


#: olmpipe_run.json settings written by earlier commits (tests/data/stored_run_settings.json says how).
STORED = json.loads((REPO / "tests" / "data" / "stored_run_settings.json").read_text())["cases"]
#: What the trainer adds to the settings of a job (olmpipe.job.data.training_set_id of its examples).
PAGES = {"training_set.pages": 4, "training_set.sha256": "0" * 64}


def test_lora_settings_are_no_run_setting_while_lora_is_off():
    """Off (the default), train.peft.* neither reruns a job nor stops a resume; on, it does both."""
    from olmpipe.job.jobconfig import seed_config_json
    from olmpipe.job.resume import changed_keys, run_settings

    off = load_config()
    edited = load_config(overrides={"train": {"peft": {"r": 8, "alpha": 3, "quant_type": "fp4"}}})
    assert run_settings(edited, 0, "m") == run_settings(off, 0, "m")
    assert not any(k.startswith("train.peft") for k in run_settings(off, 0, "m"))
    assert seed_config_json(edited, 0) == seed_config_json(off, 0) and "peft" not in seed_config(off, 0)["train"]
    on = load_config(overrides={"train": {"peft": {"enabled": True}}})
    on_r8 = load_config(overrides={"train": {"peft": {"enabled": True, "r": 8, "quant_type": "fp4"}}})
    # quant_type only matters with train.peft.quantization set
    assert changed_keys(run_settings(on, 0, "m"), run_settings(on_r8, 0, "m")) == ["train.peft.r"]
    assert seed_config(on, 0)["train"]["peft"]["enabled"] is True
    assert changed_keys(run_settings(off, 0, "m"), run_settings(on, 0, "m"))[0] == "train.peft.alpha"


@pytest.mark.parametrize("case", sorted(STORED))
def test_checkpoints_of_earlier_commits_resume_under_auto(tmp_path, case):
    """A checkpoint written by 1d966ff (before LoRA, fp32 masters, difficulty, the server's log-probs
    switch and the training-set record) or by c955618 (train.peft.* stored while off) resumes under
    `resume: auto` with the same config; a real change is still named. They trained on olmOCR-Bench's
    reward, before the short-answer guard: with the guard off they resume, with it on (the new
    default) the changed reward is named."""
    from olmpipe.job.resume import ResumeMismatchError, changed_keys, decide, run_settings

    stored = STORED[case]
    unguarded = json.loads(json.dumps(stored["overrides"]))
    unguarded.setdefault("rewards", {}).setdefault("bench", {})["short_answer_guard"] = False
    cfg = load_config(overrides=unguarded)
    current = {**run_settings(cfg, 0, "results/model/tiny", 1), **PAGES}
    newest = _fake_checkpoint(tmp_path, 2, stored["settings"])
    assert decide("auto", tmp_path, current).checkpoint == newest
    assert changed_keys(stored["settings"], current) == []
    guarded = {**run_settings(load_config(overrides=stored["overrides"]), 0, "results/model/tiny", 1), **PAGES}
    assert changed_keys(stored["settings"], guarded) == ["rewards.bench.short_answer_guard"]
    with pytest.raises(ResumeMismatchError, match=r"rewards\.bench\.short_answer_guard: False -> True"):
        decide("auto", tmp_path, guarded)
    grpo = {**stored["overrides"]["train"]["grpo"], "learning_rate": 0.5}
    changed = {**run_settings(load_config(overrides={**unguarded, "train": {
        **stored["overrides"]["train"], "grpo": grpo}}), 0, "results/model/tiny", 1), **PAGES}
    with pytest.raises(ResumeMismatchError, match=r"\(train\.grpo\.learning_rate: 0\.01 -> 0\.5\)"):
        decide("auto", tmp_path, changed)
    if "server" in case:  # the server's log-probs switch: absent before it existed = TRL 1.16's processed_logprobs
        raw = json.loads(json.dumps(unguarded))
        raw["train"]["vllm_server"] = {"logprobs_mode": "raw_logprobs"}
        assert changed_keys(stored["settings"], run_settings(load_config(overrides=raw), 0, "results/model/tiny",
                                                             1)) == ["train.vllm_server.logprobs_mode"]


def test_sections_that_are_off_are_ignored_on_both_sides():
    """A stored checkpoint whose LoRA or difficulty section was off compares equal to settings that
    leave the section out, and the reverse; a section switched on is a change."""
    from olmpipe.job.resume import changed_keys, run_settings

    off = run_settings(load_config(), 0, "m")
    stored = {**off, "train.peft.enabled": False, "train.peft.r": 32, "train.difficulty.enabled": False,
              "train.difficulty.samples": None}
    assert changed_keys(stored, off) == [] and changed_keys(off, stored) == []
    assert "train.peft.enabled" in changed_keys(stored, {**off, "train.peft.enabled": True, "train.peft.r": 32})
    # the vision tower's targets count only with train.peft.vision on (their default became null in 2c37768)
    lora = run_settings(load_config(overrides={"train": {"peft": {"enabled": True}}}), 0, "m")
    listed = {**lora, "train.peft.vision_target_modules": ["qkv", "proj", "gate_proj", "up_proj", "down_proj"]}
    assert changed_keys(listed, lora) == []
    vision = {**lora, "train.peft.vision": True}
    assert changed_keys({**listed, "train.peft.vision": True}, vision) == ["train.peft.vision_target_modules"]


def test_renamed_checkpointing_knob_reaches_older_transformers():
    """transformers 5.17 (the vLLM environment, the GPU image) has only gradient_checkpointing."""
    from dataclasses import dataclass

    from olmpipe.compat.transformers import for_installed as _for_installed

    @dataclass
    class Old:
        gradient_checkpointing: bool = False
        gradient_checkpointing_kwargs: dict | None = None

    @dataclass
    class New:
        activation_checkpointing: bool = False
        gradient_checkpointing: bool = False

    knobs = {"activation_checkpointing": True, "activation_checkpointing_kwargs": {"use_reentrant": False}}
    assert _for_installed(knobs, Old) == {"gradient_checkpointing": True,
                                          "gradient_checkpointing_kwargs": {"use_reentrant": False}}
    assert _for_installed(knobs, New) == knobs


def test_too_few_pages_for_one_generation_batch_is_an_error():
    """TRL's sampler drops an incomplete chunk of prompts: fewer pages than one generation batch takes
    would end training at step 0 without an error; the trainer refuses with the numbers instead."""
    from olmpipe.job.data import check_generation_batch

    check_generation_batch(2, 8, 4)
    with pytest.raises(ValueError, match=r"has 1 page\(s\) but one generation batch takes 2"):
        check_generation_batch(1, 8, 4)


def test_disable_dropout_changes_nothing_for_qwen25_vl(tiny_model_dir):
    """The recipe sets disable_dropout: false as the reference ran, olmpipe's default is true: for
    Qwen2.5-VL (the 7B's shapes, built on the meta device, and the tiny model) the choice is moot,
    since TRL only zeroes nn.Dropout modules (trl/trainer/utils.py:194-197) and there are none, and
    attention dropout is 0 in the config (transformers modeling_qwen2_5_vl.py: 0.0 in the vision
    tower, config.attention_dropout in the text model)."""
    import torch
    from transformers import Qwen2_5_VLConfig, Qwen2_5_VLForConditionalGeneration

    from olmpipe.models.known import KNOWN_MODELS
    from olmpipe.models.load import load_model_and_processor

    fields = dict(KNOWN_MODELS["allenai/olmOCR-7B-0825"])
    text = {k: v for k, v in fields.items() if k not in ("vision_config", "model_type")}
    config = Qwen2_5_VLConfig(vision_config=dict(fields["vision_config"]), text_config=text,
                              tie_word_embeddings=fields["tie_word_embeddings"])
    with torch.device("meta"):
        seven_b = Qwen2_5_VLForConditionalGeneration(config)
    tiny, _ = load_model_and_processor(tiny_model_dir)
    for model in (seven_b, tiny):
        assert not [n for n, m in model.named_modules() if isinstance(m, torch.nn.Dropout)]
        assert model.config.text_config.attention_dropout == 0.0
    assert load_config()["train"]["grpo"]["disable_dropout"] is True  # olmpipe's documented default


def test_the_workflow_checks_a_resume_before_snakemake_deletes_anything(tmp_path, tiny_model_dir):
    """check_workflow_resume (common.smk's train_launch, while the DAG is built) compares the seed's
    job settings with its run folder's last state, a checkpoint or the kept final model: a changed
    trajectory key stops naming it and saying that nothing was deleted; the training set is left to
    the job; `continue`, `restart` and a run folder without a state pass."""
    from olmpipe.job.jobconfig import seed_config_json
    from olmpipe.job.resume import ResumeMismatchError, check_workflow_resume

    cfg = load_config()
    job = load_config(overrides=json.loads(seed_config_json(cfg, 0)))
    stored = {**run_settings(job, 0, "results/model/tiny", 1), **PAGES}
    run = tmp_path / "seed0"
    check_workflow_resume(cfg, 0, "results/model/tiny", 0, run)  # nothing there yet
    _fake_checkpoint(run, 2, stored)
    check_workflow_resume(cfg, 0, "results/model/tiny", 0, run)
    faster = load_config(overrides={"train": {"grpo": {"learning_rate": 0.5}}})
    with pytest.raises(ResumeMismatchError, match=r"checkpoint-2 was trained with other settings \(train\.grpo\."
                       r"learning_rate: 1e-05 -> 0\.5\)\. Snakemake stopped before running this seed's training "
                       r"job: nothing of its run was deleted or changed\. Either continue that run"):
        check_workflow_resume(faster, 0, "results/model/tiny", 0, run)
    for resume in ("continue", "restart"):
        check_workflow_resume(load_config(overrides={"train": {"resume": resume, "grpo": {"learning_rate": 0.5}}}),
                              0, "results/model/tiny", 0, run)
    # the kept final model, once the checkpoints are gone (olmpipe.job.final)
    (run / "checkpoint-2" / RUN_STATE_FILE).unlink()
    kept = run / "model.kept"
    shutil.copytree(tiny_model_dir, kept)  # a loadable model (olmpipe.job.final.read_kept)
    (kept / "olmpipe_kept.json").write_text(json.dumps({"steps": 4, "settings": stored}))
    check_workflow_resume(cfg, 0, "results/model/tiny", 0, run)
    with pytest.raises(ResumeMismatchError, match=r"model\.kept \(the run's kept final model\) was trained with "
                       r"other settings \(train\.grpo\.learning_rate.* Either keep that run's model as it is \(train\."
                       r"resume: continue; it is at step 4 of train\.grpo\.max_steps 4, so the new settings train "
                       r"nothing unless max_steps grows\)"):
        check_workflow_resume(faster, 0, "results/model/tiny", 0, run)
