"""Fast tests of olmpipe.train: dataset from the page index, GRPOConfig from the config, callbacks,
resume resolution and the per-seed job config (no training here; see test_train_loop.py)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from trainkit import make_page_index

from olmpipe.config import load_config
from olmpipe.train.args import grpo_config, grpo_knobs, resolve_dtype
from olmpipe.train.callbacks import (
    RUN_STATE_FILE,
    CompletionsTable,
    MetricsFiles,
    read_metrics,
    truncate_metrics,
)
from olmpipe.train.data import PageIndexError, build_examples, read_page_index, to_dataset
from olmpipe.train.run import checkpoints, resolve_resume
from olmpipe.train.workflow import run_fingerprint, seed_config


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
        read_page_index(path)


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
    args = grpo_config(cfg["train"], output_dir=str(tmp_path), seed=4, reward_weights=[1.0, 0.5], device="cpu")
    assert args.importance_sampling_level == "sequence" and args.seed == 4
    assert not args.bf16 and args.use_cpu and args.remove_unused_columns is False and not args.log_completions
    assert args.reward_weights == [1.0, 0.5] and args.report_to == []
    for key, value in cfg["train"]["grpo"].items():
        if key != "importance_sampling_level" and value is not None:
            assert getattr(args, key) == value, key
    assert grpo_knobs(cfg["train"], 0)["importance_sampling_level"] == "token"
    assert resolve_dtype("auto", "cpu") == "float32" and resolve_dtype("auto", "cuda") == "bfloat16"
    bad = load_config(overrides={"train": {"seed_overrides": [{"seed": 0, "grpo": {"max_prompt_length": 9}}]}})
    with pytest.raises(ValueError, match="max_prompt_length"):
        grpo_knobs(bad["train"], 0)


def test_generation_batch_must_hold_whole_groups(tmp_path):
    cfg = load_config(overrides={"train": {"grpo": {"num_generations": 3}}})
    with pytest.raises(ValueError, match="divisible by num_generations"):
        grpo_config(cfg["train"], output_dir=str(tmp_path), seed=0, reward_weights=[1.0], device="cpu")


def test_olmocr2_recipe_config():
    cfg = load_config("config/olmocr2.yaml")
    g = cfg["train"]["grpo"]
    assert (g["learning_rate"], g["beta"], g["num_generations"], g["vllm_mode"]) == (2e-6, 0.01, 28, "colocate")
    assert cfg["rasterize"]["longest_side"] == 1288 and len(cfg["train"]["seeds"]) == 6
    levels = {s: grpo_knobs(cfg["train"], s)["importance_sampling_level"] for s in cfg["train"]["seeds"]}
    assert set(levels.values()) == {"token", "sequence"}
    weights = {k for k, v in cfg["rewards"]["weights"].items() if v is not None}
    assert weights == {"bench", "front_matter", "eos"}


def _state(step: int) -> SimpleNamespace:
    return SimpleNamespace(global_step=step, is_world_process_zero=True)


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


def test_completions_table_rows(tmp_path):
    verdicts = json.dumps([{"id": "t1", "type": "present", "passed": False, "reason": "not found"}])
    record = {
        "completion": [[{"role": "assistant", "content": "hello"}], "bye"],
        "rewards": {"bench_reward": [0.0, 1.0]},
        "advantages": [-0.7, 0.7],
        "extra": {"bench_verdicts": [verdicts, None], "page_id": ["a.pdf#1", "a.pdf#1"]},
    }
    trainer = SimpleNamespace(_logs=record)
    CompletionsTable(trainer, tmp_path, every=2).on_log(None, _state(2), None, logs={"loss": 0.0})
    rows = [json.loads(x) for x in (tmp_path / "completions" / "step000002.jsonl").read_text().splitlines()]
    assert rows[0]["completion"] == "hello" and rows[0]["verdicts"][0]["reason"] == "not found"
    assert rows[1]["rewards"] == {"bench_reward": 1.0} and rows[0]["page"] == "a.pdf#1"
    CompletionsTable(trainer, tmp_path, every=2).on_log(None, _state(3), None, logs={"loss": 0.0})
    assert not (tmp_path / "completions" / "step000003.jsonl").exists()


def _fake_checkpoint(run_dir, step, fingerprint):
    folder = run_dir / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (folder / RUN_STATE_FILE).write_text(json.dumps({"fingerprint": fingerprint, "wandb_run_id": "abc"}))
    return folder


def test_resume_auto_takes_the_newest_matching_checkpoint(tmp_path):
    _fake_checkpoint(tmp_path, 2, "f1")
    newest = _fake_checkpoint(tmp_path, 10, "f1")
    (tmp_path / "checkpoint-11").mkdir()  # incomplete (no trainer_state.json): ignored
    assert [p.name for p in checkpoints(tmp_path)] == ["checkpoint-2", "checkpoint-10"]
    assert resolve_resume("auto", tmp_path, "f1") == newest
    assert resolve_resume("never", tmp_path, "f1") is None
    assert resolve_resume(str(newest), tmp_path, "other") == newest
    with pytest.raises(FileNotFoundError):
        resolve_resume(str(tmp_path / "nope"), tmp_path)
    # other settings: the old run is removed and training starts over
    (tmp_path / "metrics.jsonl").write_text('{"step": 1}\n')
    assert resolve_resume("auto", tmp_path, "f2") is None
    assert checkpoints(tmp_path) == [] and not (tmp_path / "metrics.jsonl").exists()


def test_seed_config_and_fingerprint():
    cfg = load_config("config/olmocr2.yaml")
    job = seed_config(cfg, 4)
    assert job["train"]["seeds"] == [4] and [o["seed"] for o in job["train"]["seed_overrides"]] == [4]
    assert set(job) == {"model", "rewards", "train"}
    more = load_config("config/olmocr2.yaml", {"train": {"seeds": [1, 2, 3, 4, 5, 6, 7]}})
    assert seed_config(more, 4) == job  # adding a seed does not rerun the others
    site = load_config("config/olmocr2.yaml", {"resources": {"train": {"mem_mb": 1000, "runtime": 5}}})
    assert seed_config(site, 4) == job  # nor does asking for other memory or walltime
    base = run_fingerprint(cfg, 4, "m")
    assert run_fingerprint(load_config("config/olmocr2.yaml", {"train": {"wandb": {"mode": "disabled"},
                                                                         "grpo": {"save_steps": 7}}}), 4, "m") == base
    assert run_fingerprint(load_config("config/olmocr2.yaml", {"train": {"grpo": {"beta": 0.0}}}), 4, "m") != base
    assert run_fingerprint(cfg, 1, "m") != base and run_fingerprint(cfg, 4, "other") != base
