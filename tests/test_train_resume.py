"""A resumed run is the run it continues: weights, checkpoints, final model and soup compared bitwise
with an uninterrupted run of the same seed (CPU, one thread: the tiny model's GRPO loop is
deterministic there, two uninterrupted runs are bitwise equal). Also: a checkpoint at max_steps,
changed settings on a finished run, the run-folder lock and a trainer outliving its job."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from trainkit import LowIdReward, assert_same_final_folder, folder_files, make_page_index

from olmpipe.config import load_config
from olmpipe.job.resume import ResumeMismatchError, changed_keys, run_settings
from olmpipe.job.runlock import RunLock, RunLockedError
from olmpipe.train.run import resolve_resume, train_seed
from olmpipe.train.soup import soup

pytestmark = pytest.mark.slow

# lr 0.01 and a reward with spread: every step moves the weights, so a lost step shows.
GRPO = {"max_steps": 4, "num_generations": 4, "per_device_train_batch_size": 4, "learning_rate": 0.01,
        "gradient_accumulation_steps": 2, "max_completion_length": 8, "save_steps": 1, "logging_steps": 1,
        "save_total_limit": None}




def _weights(folder: Path) -> dict[str, torch.Tensor]:
    return load_file(str(folder / "model.safetensors"))


def _assert_same(a: Path, b: Path) -> None:
    x, y = _weights(a), _weights(b)
    assert set(x) == set(y)
    diff = {k: (x[k] - y[k]).abs().max().item() for k in x if not torch.equal(x[k], y[k])}
    assert not diff, f"{a} and {b} differ: {sorted(diff.items(), key=lambda kv: -kv[1])[:3]}"


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model_dir):
    root = tmp_path_factory.mktemp("resume")
    pages, tests = make_page_index(root)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO},
                                 "rewards": {"bench": {"processes": 0}}})
    runs = {}
    for seed in (0, 1):
        run = root / f"full{seed}"
        assert train_seed(cfg, seed=seed, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                          reward_funcs=[LowIdReward()]) == 0
        runs[seed] = run
    return {"root": root, "pages": pages, "tests": tests, "cfg": cfg, "model": tiny_model_dir, "full": runs}


def _resume_from(setup, seed: int, step: int, name: str, cfg=None) -> Path:
    run = setup["root"] / name
    run.mkdir()
    full = setup["full"][seed]
    shutil.copytree(full / f"checkpoint-{step}", run / f"checkpoint-{step}")
    shutil.copy(full / "metrics.jsonl", run / "metrics.jsonl")
    assert train_seed(cfg or setup["cfg"], seed=seed, model_path=setup["model"], pages=setup["pages"],
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    return run


def test_resumed_weights_equal_the_uninterrupted_run_at_every_step(setup):
    """The bug this guards: transformers 5 saved checkpoints in the hub key format and loaded them
    with strict=False, so every resume silently restarted from the base weights; and TRL's sampler
    gave a resumed epoch another page order."""
    full0 = setup["full"][0]
    base = _weights(setup["model"])
    assert any(not torch.equal(base[k], v) for k, v in _weights(full0 / "checkpoint-1").items())
    resumed = _resume_from(setup, 0, 2, "resumed0")
    for name in ("checkpoint-3", "checkpoint-4", "model"):
        _assert_same(full0 / name, resumed / name)
    assert [r["step"] for r in map(json.loads, (resumed / "metrics.jsonl").read_text().splitlines())] == [1, 2, 3, 4]
    # the soup of resumed seeds is the soup of the uninterrupted ones
    resumed1 = _resume_from(setup, 1, 1, "resumed1")
    _assert_same(setup["full"][1] / "model", resumed1 / "model")
    soup_full = soup([full0 / "model", setup["full"][1] / "model"], setup["root"] / "soup-full")
    soup_resumed = soup([resumed / "model", resumed1 / "model"], setup["root"] / "soup-resumed")
    _assert_same(soup_full, soup_resumed)


def test_a_checkpoint_at_max_steps_becomes_the_final_model(setup):
    """Resuming from the last checkpoint trains no further step and deletes no older checkpoint."""
    run = setup["root"] / "done"
    shutil.copytree(setup["full"][0], run)
    shutil.rmtree(run / "model")
    assert train_seed(setup["cfg"], seed=0, model_path=setup["model"], pages=setup["pages"],
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    _assert_same(setup["full"][0] / "model", run / "model")
    info = json.loads((run / "model" / "olmpipe_train.json").read_text())
    assert info["steps"] == 4 and info["from_checkpoint"] == "checkpoint-4"
    # the same files and provenance as the run that trained to the end wrote
    assert_same_final_folder(setup["full"][0] / "model", run / "model")
    assert (run / "model.metrics.jsonl").read_bytes() == (run / "metrics.jsonl").read_bytes()
    assert sorted(p.name for p in run.glob("checkpoint-*")) == [f"checkpoint-{i}" for i in (1, 2, 3, 4)]
    assert max(json.loads(x)["step"] for x in (run / "metrics.jsonl").read_text().splitlines()) == 4


HARMLESS = [
    {"train": {"grpo": {"vllm_gpu_memory_utilization": 0.9}}},
    {"train": {"grpo": {"gradient_checkpointing": True}}},
    {"train": {"grpo": {"save_steps": 3, "logging_steps": 2}}},
    {"train": {"device": "cpu", "dtype": "float32", "completions_every": 3}},
    {"rewards": {"bench": {"timeout_s": 3, "processes": 2}}},
    {"rewards": {"bench": {"short_signal": {"length_share": 0.5, "min_reward": 0.9}}}},  # a metric only
]
TRAJECTORY = [
    ({"train": {"grpo": {"per_device_train_batch_size": 8}}}, "train.grpo.per_device_train_batch_size"),
    ({"train": {"grpo": {"gradient_accumulation_steps": 1}}}, "train.grpo.gradient_accumulation_steps"),
    ({"train": {"grpo": {"num_generations": 2}}}, "train.grpo.num_generations"),
    ({"train": {"grpo": {"learning_rate": 0.5}}}, "train.grpo.learning_rate"),
    ({"train": {"grpo": {"beta": 0.04}}}, "train.grpo.beta"),
    ({"rewards": {"weights": {"eos": 0.5}}}, "rewards.weights.eos"),
    ({"rewards": {"bench": {"short_answer_guard": False}}}, "rewards.bench.short_answer_guard"),
]
SERVER = {"train": {"grpo": {"use_vllm": True, "vllm_mode": "server"}}}


def test_a_checkpoint_from_before_the_short_answer_guard_trained_without_it():
    """Checkpoints written before rewards.bench.short_answer_guard existed trained on olmOCR-Bench's
    reward: they resume unchanged with the guard off and stop, naming the key, with it on (the default)."""
    on = run_settings(load_config(overrides={"train": {"grpo": GRPO}}), 0, "m")
    off = run_settings(load_config(overrides={"train": {"grpo": GRPO}, "rewards": {"bench": {"short_answer_guard": False}}}),
                       0, "m")
    old = {k: v for k, v in on.items() if k != "rewards.bench.short_answer_guard"}
    assert changed_keys(old, off) == [] and changed_keys(old, on) == ["rewards.bench.short_answer_guard"]


def test_the_server_logprobs_mode_is_a_trajectory_setting_in_server_mode():
    """It changes every token's importance weight; off server mode it is not compared."""
    raw = {"train": {"vllm_server": {"logprobs_mode": "raw_logprobs", "startup_timeout_s": 5}}}
    a = run_settings(load_config(overrides=_merge({"train": {"grpo": GRPO}}, SERVER)), 0, "m")
    b = run_settings(load_config(overrides=_merge(_merge({"train": {"grpo": GRPO}}, SERVER), raw)), 0, "m")
    assert changed_keys(a, b) == ["train.vllm_server.logprobs_mode"]
    plain = run_settings(load_config(overrides=_merge({"train": {"grpo": GRPO}}, raw)), 0, "m")
    assert plain == run_settings(load_config(overrides={"train": {"grpo": GRPO}}), 0, "m")


@pytest.mark.parametrize("change", HARMLESS)
def test_harmless_settings_keep_the_checkpoint(change):
    cfg = load_config(overrides={"train": {"grpo": GRPO}})
    changed = load_config(overrides=_merge({"train": {"grpo": GRPO}}, change))
    assert run_settings(changed, 0, "m") == run_settings(cfg, 0, "m")


@pytest.mark.parametrize(("change", "key"), TRAJECTORY)
def test_trajectory_settings_are_compared(change, key):
    cfg = load_config(overrides={"train": {"grpo": GRPO}})
    changed = load_config(overrides=_merge({"train": {"grpo": GRPO}}, change))
    a, b = run_settings(cfg, 0, "m"), run_settings(changed, 0, "m")
    assert a[key] != b[key]
    assert run_settings(cfg, 0, "m", world_size=7) != a  # the world size too


def _merge(a: dict, b: dict) -> dict:
    out = json.loads(json.dumps(a))
    for key, value in b.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def test_changed_settings_on_a_run_resume_or_stop_and_delete_nothing(setup):
    """A harmless change resumes (bitwise the same weights); a trajectory change stops with the
    changed key named and every file kept."""
    resumed = _resume_from(setup, 0, 2, "harmless", cfg=load_config(overrides=_merge(
        {"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO}, "rewards": {"bench": {"processes": 0}}},
        {"train": {"grpo": {"vllm_gpu_memory_utilization": 0.9, "save_steps": 2}}})))
    _assert_same(setup["full"][0] / "model", resumed / "model")
    run = setup["root"] / "changed"
    shutil.copytree(setup["full"][0], run)
    shutil.rmtree(run / "model")
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    cfg = load_config(overrides=_merge({"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO}},
                                       {"train": {"grpo": {"learning_rate": 0.5}}}))
    with pytest.raises(ResumeMismatchError, match=r"train\.grpo\.learning_rate: 0\.01 -> 0\.5.*resume: continue"):
        train_seed(cfg, seed=0, model_path=setup["model"], pages=setup["pages"], tests_dir=setup["tests"],
                   run_dir=run, reward_funcs=[LowIdReward()])
    after = {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.name != ".olmpipe.lock"}
    assert {p: t for p, t in before.items() if p.name != ".olmpipe.lock"} == after


def test_a_second_trainer_on_the_same_run_folder_refuses(tmp_path):
    message = rf"{tmp_path.name} is in use by another trainer \(pid {os.getpid()}"
    with RunLock(tmp_path), pytest.raises(RunLockedError, match=message):
        RunLock(tmp_path).acquire()
    RunLock(tmp_path).acquire().release()  # free again


def _train_command(tmp_path: Path, model: Path, run: Path, steps: int) -> list[str]:
    pages, tests = make_page_index(tmp_path)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"train": {"wandb": {"mode": "disabled"}, "grpo": {
        **GRPO, "max_steps": steps, "learning_rate": 1e-3}}, "rewards": {"bench": {"processes": 0}}}))
    return [sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(model), "--pages", str(pages),
            "--tests-dir", str(tests), "--run-dir", str(run), "--config", str(config)]


def test_trainer_dies_with_its_job_and_a_second_one_refuses(tmp_path, tiny_model_dir):
    """kill -9 of the process that started the trainer (Snakemake's place): the trainer notices,
    checkpoints and exits 75; while it runs, a second trainer on the folder stops with exit 2."""
    run = tmp_path / "seed0"
    cmd = _train_command(tmp_path, tiny_model_dir, run, 400)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    # A parent shell that starts the trainer, prints its pid and waits (like Snakemake's job).
    starter = "import subprocess,sys; p=subprocess.Popen(sys.argv[1:]); print(p.pid, flush=True); p.wait()"
    with open(tmp_path / "trainer.log", "w") as log:
        parent = subprocess.Popen([sys.executable, "-c", starter, *cmd], env=env, stdout=subprocess.PIPE,
                                  stderr=log, text=True)
    trainer_pid = int(parent.stdout.readline())
    deadline = time.monotonic() + 300
    while not (run / "metrics.jsonl").exists():
        assert time.monotonic() < deadline and parent.poll() is None, (tmp_path / "trainer.log").read_text()[-3000:]
        time.sleep(0.2)
    second = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300, check=False)
    assert second.returncode == 2 and "in use by another trainer" in second.stderr, second.stderr[-2000:]
    parent.kill()  # kill -9 of the job: the trainer is re-parented
    parent.wait()
    deadline = time.monotonic() + 120
    while Path(f"/proc/{trainer_pid}").exists() and Path(f"/proc/{trainer_pid}/stat").read_text().split()[2] != "Z":
        assert time.monotonic() < deadline, "the trainer outlived its job"
        time.sleep(0.2)
    log = (tmp_path / "trainer.log").read_text()
    assert "the job that started this trainer is gone" in log and "exiting with 75" in log, log[-3000:]
    assert list(run.glob("checkpoint-*")), "no checkpoint written on the way out"


def test_evaluation_during_training_is_logged_and_plotted(tmp_path, tiny_model_dir):
    """eval_strategy steps: the eval split is rewarded every eval_steps; eval_reward lands in
    metrics.jsonl beside the training rows and is drawn in the reward plot."""
    from olmpipe.report.plots import EVAL_KEYS, read_reward_curve

    pages, tests = make_page_index(tmp_path, n_train=4, n_eval=2)
    grpo = {**GRPO, "eval_strategy": "steps", "eval_steps": 2, "num_generations_eval": 2,
            "per_device_eval_batch_size": 2}
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": grpo, "eval_max_pages": 2},
                                 "rewards": {"bench": {"processes": 0}}})
    run = tmp_path / "seed0"
    assert train_seed(cfg, seed=0, model_path=tiny_model_dir, pages=pages, tests_dir=tests, run_dir=run,
                      reward_funcs=[LowIdReward()]) == 0
    curve = read_reward_curve(run / "metrics.jsonl", EVAL_KEYS)
    assert [step for step, _ in curve] == [2.0, 4.0] and all(0 <= v <= 1 for _, v in curve)


@pytest.mark.parametrize("arch", ["qwen2_5_vl", "qwen2_vl", "qwen3_vl", "qwen3_vl_moe"])
def test_checkpoint_loader_restores_every_architecture(arch, tiny_models, tmp_path):
    """load_checkpoint_weights restores a checkpoint exactly, in what names and layout it was saved:
    as transformers saves (renamed prefixes of Qwen2/2.5-VL, live names of Qwen3-VL) and, for
    Qwen3-VL-MoE, also with the experts in the published layout of a final model (same names,
    transposed shapes: the plain load would fail on them, the conversion reads them)."""
    from olmpipe.job.trainer import load_checkpoint_weights
    from olmpipe.models.architectures import publish_expert_layout
    from olmpipe.models.load import load_model_and_processor

    trained, _ = load_model_and_processor(tiny_models(arch))
    gen = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in trained.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    trained.save_pretrained(tmp_path / "checkpoint-1")
    folders = [tmp_path / "checkpoint-1"]
    if arch == "qwen3_vl_moe":
        trained.save_pretrained(tmp_path / "published")
        assert publish_expert_layout(tmp_path / "published") > 0
        folders.append(tmp_path / "published")
    expected = trained.state_dict()
    for folder in folders:
        model, _ = load_model_and_processor(tiny_models(arch))
        load_checkpoint_weights(model, folder)
        restored = model.state_dict()
        assert all(torch.equal(restored[k], expected[k]) for k in expected), folder


def _config(**train) -> dict:
    return load_config(overrides=_merge({"train": {"wandb": {"mode": "disabled"}, "grpo": GRPO},
                                         "rewards": {"bench": {"processes": 0}}}, {"train": train}))


def _mtimes(run: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in run.rglob("*") if p.name != ".olmpipe.lock"}


def test_a_resume_on_another_training_set_stops_naming_it(setup):
    """The run settings name the training set as the trainer builds it (pages, order, test ids):
    a resume on fewer or reordered pages stops under `auto` and changes nothing; `continue` goes on
    with the new pages, and its checkpoints record them."""
    lines = setup["pages"].read_text().splitlines()
    train = [i for i, line in enumerate(lines) if json.loads(line)["split"] == "train" and json.loads(line)["test_ids"]]
    fewer, swapped = setup["root"] / "pages-fewer.jsonl", setup["root"] / "pages-swapped.jsonl"
    fewer.write_text("".join(line + "\n" for i, line in enumerate(lines) if i != train[1]))
    order = list(range(len(lines)))
    order[train[0]], order[train[1]] = train[1], train[0]
    swapped.write_text("".join(lines[i] + "\n" for i in order))
    run = setup["root"] / "otherpages"
    run.mkdir()
    shutil.copytree(setup["full"][0] / "checkpoint-2", run / "checkpoint-2")
    shutil.copy(setup["full"][0] / "metrics.jsonl", run / "metrics.jsonl")
    stored = json.loads((run / "checkpoint-2" / "olmpipe_run.json").read_text())["settings"]
    assert stored["training_set.pages"] == 4
    before = _mtimes(run)
    digest = r"'[0-9a-f]{64}' -> '[0-9a-f]{64}'"
    for pages, message in ((fewer, rf"\(training_set\.pages: 4 -> 3, training_set\.sha256: {digest}\)"),
                           (swapped, rf"\(training_set\.sha256: {digest}\)")):
        with pytest.raises(ResumeMismatchError, match=message + r".*Nothing was changed on disk"):
            train_seed(setup["cfg"], seed=0, model_path=setup["model"], pages=pages, tests_dir=setup["tests"],
                       run_dir=run, reward_funcs=[LowIdReward()])
    assert _mtimes(run) == before
    assert train_seed(_config(resume="continue"), seed=0, model_path=setup["model"], pages=fewer,
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert json.loads((run / "checkpoint-4" / "olmpipe_run.json").read_text())["settings"]["training_set.pages"] == 3
    assert json.loads((run / "model.kept" / "olmpipe_kept.json").read_text())["settings"]["training_set.pages"] == 3


def test_a_finished_run_whose_checkpoints_are_gone_is_written_again_not_retrained(setup, monkeypatch):
    """Snakemake deletes model/ before it reruns train_seed (an edit of the trainer's code does it);
    with the checkpoints deleted too, the kept copy (model.kept/, hard links) brings model/ back
    bitwise and nothing trains. A changed setting stops saying that model/ is gone and where the
    finished model is; more steps cannot be trained from it; restart moves it aside with the run."""
    from olmpipe.train.trainer import ResumableGRPOTrainer

    full = setup["full"][0]
    kept = folder_files(full / "model.kept")
    assert json.loads(kept.pop("olmpipe_kept.json"))["steps"] == 4 and kept == folder_files(full / "model")
    assert (full / "model.kept" / "model.safetensors").stat().st_ino == (full / "model" / "model.safetensors").stat().st_ino
    run = setup["root"] / "kept"
    shutil.copytree(full, run)
    for path in [run / "model", *run.glob("checkpoint-*")]:
        shutil.rmtree(path)
    (run / "model.metrics.jsonl").unlink()

    def trains(*args, **kwargs):
        raise AssertionError("the finished run was trained again")

    monkeypatch.setattr(ResumableGRPOTrainer, "train", trains)
    assert train_seed(setup["cfg"], seed=0, model_path=setup["model"], pages=setup["pages"], tests_dir=setup["tests"],
                      run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert folder_files(run / "model") == folder_files(full / "model")
    assert (run / "model.metrics.jsonl").read_bytes() == (full / "metrics.jsonl").read_bytes()

    shutil.rmtree(run / "model")
    before = _mtimes(run)
    with pytest.raises(ResumeMismatchError, match=r"model\.kept \(the run's kept final model\) was trained with other "
                       r"settings \(train\.grpo\.learning_rate: 0\.01 -> 0\.5\)\. This job changed nothing on disk, "
                       r"but \S+/kept/model is gone .* kept in \S+/model\.kept: with the settings it was trained "
                       r"with, the job writes \S+/kept/model again\. Either keep that run's model as it is"):
        train_seed(_config(grpo={**GRPO, "learning_rate": 0.5}), seed=0, model_path=setup["model"],
                   pages=setup["pages"], tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()])
    with pytest.raises(ResumeMismatchError, match="no complete checkpoint is left to train on to max_steps 6"):
        train_seed(_config(resume="continue", grpo={**GRPO, "max_steps": 6}), seed=0, model_path=setup["model"],
                   pages=setup["pages"], tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()])
    assert _mtimes(run) == before
    assert resolve_resume("restart", run, {}) is None
    aside = next(setup["root"].glob("kept.old-*"))
    assert folder_files(aside / "model.kept") == folder_files(full / "model.kept")


def test_a_damaged_kept_model_is_ignored_never_published(setup, caplog):
    """Probe2 G1: model.kept/ whose weights were cut short (its files are hard links to model/'s, so a
    write into model/ in place reaches it) or deleted was written back as model/ without usable
    weights, and the job succeeded. A damaged kept copy is skipped like a damaged checkpoint, named
    in a warning; with no checkpoint left the run trains again, bitwise the run it was."""
    full = setup["full"][0]
    run = setup["root"] / "keptdamaged"
    shutil.copytree(full, run)
    for path in [run / "model", *run.glob("checkpoint-*")]:
        shutil.rmtree(path)
    weights = run / "model.kept" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    with caplog.at_level("WARNING", logger="olmpipe.job.final"):
        assert train_seed(setup["cfg"], seed=0, model_path=setup["model"], pages=setup["pages"],
                          tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()]) == 0
    assert "model.kept: it cannot be written back as the final model (missing or damaged: model.safetensors is " \
           "truncated" in caplog.text
    _assert_same(run / "model", full / "model")
    _assert_same(run / "model.kept", full / "model")


def test_a_base_model_replaced_under_the_same_path_stops_the_resume(setup, tmp_path):
    """Probe2 G3: `model` is a path, and the folder at it can change (the embedded model rebuilt with
    another model.tiny.seed, a local folder overwritten): the run went on from its checkpoint, i.e.
    the old run finished as if trained from the new base. The settings record the base's weights
    fingerprint; another one stops `auto` naming it, before anything is loaded or changed."""
    from olmpipe.job.resume import check_workflow_resume
    from olmpipe.models.folder import weights_fingerprint

    base = tmp_path / "base"
    shutil.copytree(setup["model"], base)
    run = setup["root"] / "otherbase"
    shutil.copytree(setup["full"][0] / "checkpoint-2", run / "checkpoint-2")
    marker = run / "checkpoint-2" / "olmpipe_run.json"
    stored = json.loads(marker.read_text())
    assert stored["settings"]["base_model.weights"] == weights_fingerprint(setup["model"])
    stored["settings"]["model"] = str(base)  # the run was trained from base/ ...
    marker.write_text(json.dumps(stored))
    check_workflow_resume(setup["cfg"], 0, base, 0, run)  # ... unchanged: it resumes
    weights = base / "model.safetensors"  # ... which is then replaced by another model of the same shape
    data = bytearray(weights.read_bytes())
    data[-64:] = bytes(64)
    weights.write_bytes(bytes(data))
    before = _mtimes(run)
    message = r"\(base_model\.weights: '[0-9a-f]{16}' -> '[0-9a-f]{16}'\)\. base_model\.weights identifies"
    with pytest.raises(ResumeMismatchError, match=message + r".*Snakemake stopped before running this seed's training job"):
        check_workflow_resume(setup["cfg"], 0, base, 0, run)
    with pytest.raises(ResumeMismatchError, match=message + r".*Nothing was changed on disk"):
        train_seed(setup["cfg"], seed=0, model_path=base, pages=setup["pages"], tests_dir=setup["tests"],
                   run_dir=run, reward_funcs=[LowIdReward()])
    assert _mtimes(run) == before


def test_more_steps_on_a_finished_run_whose_last_checkpoint_is_gone_train_on_from_the_one_before(setup, caplog):
    """Probe2 G8: the kept final model (step 4) outranked checkpoint-3, so `continue` with max_steps 6
    after checkpoint-4 was deleted (or damaged) was refused: "no checkpoint is left to train on ...
    (they were deleted)", while checkpoint-3 was there. It trains on from checkpoint-3."""
    full = setup["full"][0]
    run = setup["root"] / "lastgone"
    shutil.copytree(full, run)
    shutil.rmtree(run / "model")
    shutil.rmtree(run / "checkpoint-4")
    with caplog.at_level("INFO", logger="olmpipe.job"):
        assert train_seed(_config(resume="continue", grpo={**GRPO, "max_steps": 6}), seed=0, model_path=setup["model"],
                          pages=setup["pages"], tests_dir=setup["tests"], run_dir=run,
                          reward_funcs=[LowIdReward()]) == 0
    assert f"resuming from {run / 'checkpoint-3'} (step 3)" in caplog.text
    assert json.loads((run / "model" / "olmpipe_train.json").read_text())["steps"] == 6
    assert [row["step"] for row in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
            if "loss" in row] == [1, 2, 3, 4, 5, 6]
