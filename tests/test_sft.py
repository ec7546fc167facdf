"""The SFT stage: its pairs (bench candidate folder, pairs folder, front matter), and its job through
the same skeleton as GRPO (olmpipe.job.run.run_job): the final model, metrics, a bitwise resume,
LoRA, a changed setting on a finished run, SIGTERM while loading."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from PIL import Image
from safetensors.torch import load_file
from trainkit import SAMPLE, make_page_index

from olmpipe.config import load_config
from olmpipe.job.resume import ResumeMismatchError
from olmpipe.job.run import run_job
from olmpipe.job.setup import JobRequest
from olmpipe.prompts import parse_page_output
from olmpipe.records.sft import SFTPair, read_pairs, write_pairs
from olmpipe.sft.pairs import PairsError, bench_pairs, build_pairs, folder_pairs, in_answer_format
from olmpipe.sft.steps import SFTSteps, pairs_identity

FRONT = {"primary_language": "en", "is_rotation_valid": True, "rotation_correction": 0, "is_table": False,
         "is_diagram": False}
ARGS = {"max_steps": 4, "save_steps": 1, "per_device_train_batch_size": 2, "learning_rate": 0.01,
        "max_length": 400, "save_total_limit": None}


# ---------------------------------------------------------------- pairs


def test_an_answer_without_front_matter_gets_one_and_one_with_it_is_kept():
    target, how = in_answer_format("Hello world.", FRONT)
    assert how == "front_matter_added" and parse_page_output(target).valid
    assert parse_page_output(target).text == "Hello world."
    kept, how = in_answer_format(target, {**FRONT, "primary_language": "de"})
    assert (kept, how) == (target, "kept")
    bad, reason = in_answer_format("---\nprimary_language: en\nrotation_correction: 45\n---\nText", FRONT)
    assert bad is None and "front matter does not parse" in reason


def test_bench_pairs_take_the_train_pages_with_an_answer_in_the_candidate_folder(tmp_path):
    pages, _ = make_page_index(tmp_path, n_train=4, n_eval=1)
    pairs, summary = bench_pairs(pages, "olmocr_pipeline", FRONT)
    records = [json.loads(line) for line in pages.read_text().splitlines()]
    train = [r for r in records if r["split"] == "train" and r["pdf"] != "empty.pdf"]
    assert [p.pdf for p in pairs] == [r["pdf"] for r in train]  # the eval page is never a pair
    assert summary["skipped_no_answer"] == 1  # the page without tests has no answer either
    assert all(p.source == "bench:olmocr_pipeline" and parse_page_output(p.target).valid for p in pairs)
    assert pairs[0].target.endswith((SAMPLE / "olmocr_pipeline" / f"{Path(pairs[0].pdf).stem}_pg1_repeat1.md")
                                    .read_text().strip())
    assert bench_pairs(pages, "olmocr_pipeline", FRONT, max_pages=2)[1]["truncated"] == len(pairs) - 2


def test_pairs_folder_needs_each_image_beside_its_answer(tmp_path):
    folder = tmp_path / "pairs"
    (folder / "sub").mkdir(parents=True)
    for name in ("a", "sub/b"):
        Image.new("RGB", (40, 60), "white").save(folder / f"{name}.png")
        (folder / f"{name}.md").write_text(f"page {name}")
    pairs, summary = folder_pairs(folder, FRONT)
    assert [p.name for p in pairs] == ["a", "sub/b"] and summary["front_matter_added"] == 2
    Image.new("RGB", (40, 60), "white").save(folder / "lonely.jpg")
    with pytest.raises(PairsError, match=r"lonely.jpg: no an answer|lonely.jpg: no an answer \(.md or .txt\)"):
        folder_pairs(folder, FRONT)
    (folder / "lonely.jpg").unlink()
    (folder / "c.md").write_text("---\nprimary_language: en\n---\nbroken")
    with pytest.raises(PairsError, match="c.md: no an image"):
        folder_pairs(folder, FRONT)
    with pytest.raises(PairsError, match="not a folder"):
        folder_pairs(tmp_path / "none", FRONT)


def test_build_pairs_refuses_a_bench_without_answers(tmp_path):
    pages, _ = make_page_index(tmp_path)
    cfg = load_config(overrides={"sft": {"candidate": "no_such_folder"}})
    with pytest.raises(PairsError, match="no train page has an answer in the candidate folder 'no_such_folder'"):
        build_pairs(cfg, pages, tmp_path / "p.jsonl", tmp_path / "p.json")
    assert not (tmp_path / "p.jsonl").exists()


def test_pairs_file_errors_name_file_and_line(tmp_path):
    path = tmp_path / "pairs.jsonl"
    write_pairs(path, [SFTPair("a", "a.png", "0" * 64, "---\n---", "pairs:x")])
    assert read_pairs(path)[0].name == "a"
    path.write_text(path.read_text() + '{"name": "b"}\n')
    with pytest.raises(ValueError, match=r"pairs.jsonl:2: SFT pair misses image, image_sha256, target, source"):
        read_pairs(path)


def test_the_training_set_identity_follows_answers_and_pixels():
    a = SFTPair("a", "a.png", "1" * 64, "t", "s")
    assert pairs_identity([a]) != pairs_identity([SFTPair("a", "a.png", "1" * 64, "t2", "s")])
    assert pairs_identity([a]) != pairs_identity([SFTPair("a", "a.png", "2" * 64, "t", "s")])
    assert pairs_identity([a]) == pairs_identity([SFTPair("a", "b.png", "1" * 64, "t", "other")])


# ---------------------------------------------------------------- the job


def _pairs(root: Path) -> Path:
    pages, _ = make_page_index(root, n_train=4, n_eval=1)
    cfg = load_config(overrides={"sft": {"candidate": "olmocr_pipeline"}})
    build_pairs(cfg, pages, root / "pairs.jsonl", root / "pairs.json")
    return root / "pairs.jsonl"


def _cfg(**sft):
    return load_config(overrides={"sft": {"wandb": {"mode": "disabled"}, "args": {**ARGS, **sft.pop("args", {})},
                                          **sft}})


def _run(cfg, model, pairs, run: Path, seed: int = 0) -> int:
    request = JobRequest(cfg, seed, model, pairs, pairs.parent, run, run / "model")
    return run_job(SFTSteps(), request)


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("sft")
    pairs = _pairs(root)
    cfg = _cfg()
    assert _run(cfg, tiny_model_dir, pairs, root / "full") == 0
    return {"root": root, "pairs": pairs, "cfg": cfg, "model": tiny_model_dir, "full": root / "full"}


@pytest.mark.slow
def test_a_run_writes_the_final_model_metrics_and_checkpoints(sft_run):
    run = sft_run["full"]
    info = json.loads((run / "model" / "olmpipe_train.json").read_text())
    assert info["steps"] == 4 and info["reward_names"] is None and info["dataset"]["pages"] == 4
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2, 3, 4] and all("loss" in r and "mean_token_accuracy" in r for r in rows)
    assert (run / "model.metrics.jsonl").read_bytes() == (run / "metrics.jsonl").read_bytes()
    assert sorted(p.name for p in run.glob("checkpoint-*")) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    stored = json.loads((run / "checkpoint-2" / "olmpipe_run.json").read_text())
    assert stored["settings"]["sft.args.learning_rate"] == 0.01 and "train.grpo.learning_rate" not in stored["settings"]
    assert stored["settings"]["training_set.pages"] == 4
    base, trained = load_file(str(sft_run["model"] / "model.safetensors")), load_file(str(run / "model" / "model.safetensors"))
    moved = sum(not torch.equal(base[k], trained[k]) for k in base)
    assert moved > len(base) // 2, f"only {moved} of {len(base)} tensors moved"
    # the bench pages it trained on travel with the model (issue 31 item 0): a GRPO run on it inherits them
    from olmpipe.records.sft import read_pairs
    from olmpipe.records.train import trained_pages_of

    pairs = {(p.pdf, p.page) for p in read_pairs(sft_run["pairs"])}
    assert len(pairs) == 4 and set(trained_pages_of(run / "model")) == pairs


@pytest.mark.slow
@pytest.mark.parametrize("step", [1, 3])
def test_a_resumed_run_ends_with_the_weights_of_the_uninterrupted_one(sft_run, step):
    full, run = sft_run["full"], sft_run["root"] / f"resume{step}"
    run.mkdir()
    shutil.copytree(full / f"checkpoint-{step}", run / f"checkpoint-{step}")
    shutil.copy(full / "metrics.jsonl", run / "metrics.jsonl")
    assert _run(sft_run["cfg"], sft_run["model"], sft_run["pairs"], run) == 0
    a, b = load_file(str(full / "model" / "model.safetensors")), load_file(str(run / "model" / "model.safetensors"))
    assert set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a), "the resumed run's weights differ"
    rows = [json.loads(line)["step"] for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert rows == [1, 2, 3, 4]


@pytest.mark.slow
def test_a_changed_setting_on_a_finished_run_stops_naming_the_sft_key(sft_run):
    run = sft_run["root"] / "changed"
    shutil.copytree(sft_run["full"], run)
    shutil.rmtree(run / "model")
    cfg = _cfg(args={"learning_rate": 0.02})
    with pytest.raises(ResumeMismatchError, match=r"sft\.args\.learning_rate: 0\.01 -> 0\.02.*sft\.resume: continue"):
        _run(cfg, sft_run["model"], sft_run["pairs"], run)
    assert (run / "checkpoint-4").is_dir()  # nothing deleted


@pytest.mark.slow
def test_lora_sft_trains_an_adapter_and_publishes_the_merged_model(sft_run):
    run = sft_run["root"] / "lora"
    cfg = _cfg(peft={"enabled": True, "r": 4, "alpha": 8}, args={"max_steps": 2, "save_steps": 2})
    assert _run(cfg, sft_run["model"], sft_run["pairs"], run) == 0
    assert (run / "adapter" / "adapter_config.json").is_file() and (run / "model" / "model.safetensors").is_file()
    base, merged = load_file(str(sft_run["model"] / "model.safetensors")), load_file(str(run / "model" / "model.safetensors"))
    changed = [k for k in base if not torch.equal(base[k], merged[k])]
    assert changed and all(".proj." in k or "_proj." in k for k in changed), changed[:5]
