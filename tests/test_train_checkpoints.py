"""olmpipe.job.checkpoints: a checkpoint counts only once its save finished (``olmpipe_run.json``
written last); unfinished or unreadable ones are skipped with a warning and a resume continues from
the one before; a disk that fills up during a save (injected, and a real full tmpfs) blocks nothing."""

from __future__ import annotations

import errno
import json
import logging
import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from support.gate import StepGate
from trainkit import LowIdReward, make_page_index

from olmpipe.config import load_config
from olmpipe.job.checkpoints import FILES_KEY, RUN_STATE_FILE, commit, complete_checkpoints, problem, rotate
from olmpipe.records.metrics import read_metrics
from olmpipe.train.run import resolve_resume, train_seed

SETTINGS = {"train.grpo.learning_rate": 1e-6, "world_size": 1, "seed": 0}


def _save(run: Path, step: int, *, marker: bool = True) -> Path:
    """A checkpoint folder with the files transformers writes (tiny), committed when ``marker``."""
    from safetensors.torch import save_file

    folder = run / f"checkpoint-{step}"
    folder.mkdir(parents=True)
    save_file({"w": torch.arange(64, dtype=torch.float32)}, str(folder / "model.safetensors"))
    torch.save({"state": {0: torch.ones(64)}}, folder / "optimizer.pt")
    torch.save({"python": 1}, folder / "rng_state.pth")
    (folder / "trainer_state.json").write_text(json.dumps({"global_step": step, "log_history": []}))
    if marker:
        commit(folder, {"seed": 0, "step": step, "wandb_run_id": None, "settings": SETTINGS})
    return folder


def _cut(path: Path, keep: int) -> None:
    path.write_bytes(path.read_bytes()[:keep])


def test_unfinished_and_unreadable_checkpoints_are_skipped_with_a_warning(tmp_path, caplog):
    """Issue 20 item 5: the disk filled during the step-2 save, leaving every file but a 0-byte
    trainer_state.json; every later resume crashed with JSONDecodeError in checkpoint_step, naming
    no checkpoint. Now only committed, readable checkpoints count; the others are named with why."""
    run = tmp_path / "seed0"
    good = _save(run, 1)
    (_save(run, 2, marker=False) / "trainer_state.json").write_bytes(b"")  # the folder
    _cut(_save(run, 3) / "trainer_state.json", 12)  # committed, then damaged
    _cut(_save(run, 4) / "model.safetensors", 100)
    _cut(_save(run, 5) / "optimizer.pt", 200)
    (_save(run, 6) / RUN_STATE_FILE).write_text('{"seed": 0, "st')
    (run / "checkpoint-7").mkdir()  # a save that wrote nothing

    assert resolve_resume("auto", run, SETTINGS) == good
    assert complete_checkpoints(run, warn=False) == [good]
    for step, reason in [(2, "no olmpipe_run.json: its save did not finish"),
                         (3, "trainer_state.json is unreadable"),
                         (4, "model.safetensors is cut short"),
                         (5, "optimizer.pt is not a whole torch.save archive"),
                         (6, "olmpipe_run.json is unreadable"),
                         (7, "no olmpipe_run.json")]:
        assert f"skipping checkpoint {run / f'checkpoint-{step}'}: {reason}" in caplog.text, step
    # a folder named in train.resume is checked the same way (olmpipe_run.json may be missing there)
    with pytest.raises(FileNotFoundError, match=r"checkpoint-3 is not a checkpoint to continue from "
                                                r"\(trainer_state.json is unreadable"):
        resolve_resume(str(run / "checkpoint-3"), run, SETTINGS)
    (run / "checkpoint-2" / "trainer_state.json").write_text(json.dumps({"global_step": 2}))
    assert problem(run / "checkpoint-2", require_marker=False) is None
    assert resolve_resume(str(run / "checkpoint-2"), run, SETTINGS) == run / "checkpoint-2"


def _legacy(folder: Path, **settings) -> Path:
    """A checkpoint committed before the marker listed the save's files (its ``settings`` updated)."""
    marker = json.loads((folder / RUN_STATE_FILE).read_text())
    del marker[FILES_KEY]
    marker["settings"] = {**marker["settings"], **settings}
    (folder / RUN_STATE_FILE).write_text(json.dumps(marker))
    return folder


def test_a_committed_checkpoint_without_what_a_resume_loads_is_skipped(tmp_path, caplog):
    """Probe F5: a committed LoRA checkpoint whose adapter_model.safetensors was gone counted as
    complete (problem() checked only the files that were there), and the final-model path crashed on
    it. Now the weights a resume loads must be there, and every file the save wrote, with its size."""
    from safetensors.torch import save_file

    run = tmp_path / "seed0"
    good = _save(run, 1)
    lora = _legacy(_save(run, 2), **{"train.peft.enabled": True})  # the probe's folder (marker without files)
    (lora / "adapter_config.json").write_text("{}")
    save_file({"a": torch.ones(2)}, str(lora / "adapter_model.safetensors"))
    assert problem(lora) is None
    (lora / "adapter_model.safetensors").unlink()
    (_legacy(_save(run, 3)) / "model.safetensors").unlink()  # full training, weights deleted
    sharded = _legacy(_save(run, 4))
    (sharded / "model.safetensors").rename(sharded / "model-00001-of-00002.safetensors")
    (sharded / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {
        "w": "model-00001-of-00002.safetensors", "v": "model-00002-of-00002.safetensors"}}))
    deepspeed = _legacy(_save(run, 5))
    (deepspeed / "global_step5").mkdir()
    (deepspeed / "latest").write_text("global_step6")
    (_save(run, 6) / "optimizer.pt").unlink()  # the marker lists it: transformers would resume without it
    rng = _save(run, 7) / "rng_state.pth"
    torch.save({"python": 1, "more": list(range(100))}, rng)  # another whole archive than the save wrote
    assert complete_checkpoints(run) == [good]
    assert resolve_resume("auto", run, SETTINGS) == good
    for step, reason in [(2, "no adapter_model.safetensors: the LoRA adapter a resume loads is missing"),
                         (3, "no model weights (model.safetensors, a sharded index or pytorch_model.bin)"),
                         (4, "model.safetensors.index.json lists model-00002-of-00002.safetensors, which is missing"),
                         (5, "the DeepSpeed state global_step6/ that latest names is missing or empty"),
                         (6, "optimizer.pt is missing (the save wrote it: olmpipe_run.json lists it)"),
                         (7, f"rng_state.pth has {rng.stat().st_size} bytes, the save wrote ")]:
        assert f"skipping checkpoint {run / f'checkpoint-{step}'}: {reason}" in caplog.text, step
    # what the marker lists: every file of the save, by relative path and size
    listed = json.loads((good / RUN_STATE_FILE).read_text())[FILES_KEY]
    assert listed == {name: (good / name).stat().st_size
                      for name in ("model.safetensors", "optimizer.pt", "rng_state.pth", "trainer_state.json")}


def _poison(path: Path, name: str, value: float) -> None:
    """Write ``value`` over the first element of tensor ``name`` of a safetensors file, in place
    (the file keeps its size, so the marker's file list still matches: only the values are bad)."""
    header_len = struct.unpack("<Q", path.read_bytes()[:8])[0]
    header = json.loads(path.read_bytes()[8:8 + header_len])
    start = 8 + header_len + header[name]["data_offsets"][0]
    with open(path, "r+b") as fh:
        fh.seek(start)
        fh.write(struct.pack("<f", value))


def test_a_checkpoint_whose_weights_are_not_finite_is_skipped_naming_it(tmp_path, caplog):
    """Issue 31 item 3: a checkpoint whose adapter held NaN was restored, and the resumed run failed in
    generation with "probability tensor contains inf/nan" (Snakemake then deleted model/). The weights a
    resume restores -- the adapter, the model's weights, DeepSpeed's float32 masters -- are checked when
    a job decides where to go on: such a checkpoint is skipped with a warning naming it and the tensor,
    as a damaged one is, and the resume continues from the one before; a folder named in train.resume
    is refused."""
    from safetensors.torch import save_file

    run = tmp_path / "seed0"
    good = _save(run, 1)
    _poison(_save(run, 2) / "model.safetensors", "w", float("nan"))
    lora = _save(run, 3)
    (lora / "adapter_config.json").write_text("{}")
    save_file({"base_model.model.lora_A.weight": torch.ones(4), "base_model.model.lora_B.weight": torch.zeros(4)},
              str(lora / "adapter_model.safetensors"))
    _poison(lora / "adapter_model.safetensors", "base_model.model.lora_B.weight", float("inf"))
    commit(lora, {"seed": 0, "step": 3, "wandb_run_id": None, "settings": SETTINGS})  # the files as they are now
    deepspeed = _save(run, 4)
    (deepspeed / "global_step4").mkdir()
    (deepspeed / "latest").write_text("global_step4")
    masters = torch.arange(8, dtype=torch.float32)
    masters[5] = float("nan")
    torch.save({"optimizer_state_dict": {"single_partition_of_fp32_groups": [masters]}},
               deepspeed / "global_step4" / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")
    commit(deepspeed, {"seed": 0, "step": 4, "wandb_run_id": None, "settings": SETTINGS})
    assert [p.name for p in complete_checkpoints(run, warn=False)] == [f"checkpoint-{n}" for n in (1, 2, 3, 4)]
    assert resolve_resume("auto", run, SETTINGS) == good
    for step, where in ((4, ("global_step4/bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt holds NaN in "
                             "optimizer_state_dict.single_partition_of_fp32_groups.0 (1 of 8 values)")),
                        (3, "adapter_model.safetensors holds inf in base_model.model.lora_B.weight (1 of 4 values)"),
                        (2, "model.safetensors holds NaN in w (1 of 64 values)")):
        assert f"skipping checkpoint {run / f'checkpoint-{step}'}: {where}" in caplog.text, caplog.text
    with pytest.raises(FileNotFoundError, match=r"checkpoint-2 is not a checkpoint to continue from "
                                                r"\(model.safetensors holds NaN in w"):
        resolve_resume(str(run / "checkpoint-2"), run, SETTINGS)


def test_a_checkpoint_written_again_loses_its_old_marker_first(tmp_path):
    """A folder training reaches again (skipped as incomplete at the resume) is rewritten by
    transformers in place: RunState takes its old marker away at the start of that step, so a
    rewrite stopped half-way is not complete; the commit at its end marks it again."""
    from transformers import TrainerState, TrainingArguments

    from olmpipe.job.callbacks import RunState

    run = tmp_path / "seed0"
    _save(run, 1)
    stale = _save(run, 2)
    (stale / "optimizer.pt").unlink()
    callback = RunState(0, None, None, SETTINGS)
    args, state = TrainingArguments(output_dir=str(run), report_to=[]), TrainerState(global_step=0)
    callback.on_step_begin(args, state, None)  # step 1: its folder is complete; written again too
    assert not (run / "checkpoint-1" / RUN_STATE_FILE).exists()
    state.global_step = 1
    callback.on_step_begin(args, state, None)  # step 2: the stale folder is unmarked before the rewrite
    assert not (stale / RUN_STATE_FILE).exists() and (stale / f"{RUN_STATE_FILE}.replaced").is_file()
    torch.save({"state": {0: torch.ones(64)}}, stale / "optimizer.pt")
    assert problem(stale) == "no olmpipe_run.json: its save did not finish (olmpipe writes that file last)"
    state.global_step = 2
    callback.on_save(args, state, None)
    assert problem(stale) is None


def test_no_staging_folder_stays_behind_when_the_final_model_fails(tmp_path, tiny_model_dir):
    """Probe F5: a failure while the final folders were written left adapter.tmp/ and model.tmp/."""
    from olmpipe.job.final import write_final
    from olmpipe.job.peft import adapter_and_merged_writer

    final = tmp_path / "seed0" / "model"
    final.parent.mkdir()

    def fails(path: Path) -> None:
        (Path(path) / "half.safetensors").write_bytes(b"x")
        raise FileNotFoundError("checkpoint-4/adapter_model.safetensors")

    save = adapter_and_merged_writer(fails, None, tiny_model_dir, final, True, lambda: None)
    with pytest.raises(FileNotFoundError):
        write_final(save, None, final, {}, True, lambda: None, tmp_path / "metrics.jsonl", final.parent, {})
    assert sorted(p.name for p in final.parent.iterdir()) == []


def test_rotation_counts_and_deletes_committed_checkpoints_only(tmp_path):
    """save_total_limit after the commit: the newest committed ones stay (by when they were
    committed, so abandoned later steps go first), the best one is protected, unfinished folders
    are neither counted nor deleted."""
    run = tmp_path / "seed0"
    for step in (1, 2, 3):
        _save(run, step)
    _save(run, 9, marker=False)
    os.utime(run / "checkpoint-3" / RUN_STATE_FILE, (time.time() - 100, time.time() - 100))  # abandoned branch
    newest = _save(run, 4)
    deleted = rotate(run, 2, keep=newest, protect=run / "checkpoint-1")
    assert sorted(p.name for p in deleted) == ["checkpoint-2", "checkpoint-3"]
    assert sorted(p.name for p in run.iterdir()) == ["checkpoint-1", "checkpoint-4", "checkpoint-9"]
    assert rotate(run, None, keep=newest) == [] and rotate(run, 1, keep=newest) == [run / "checkpoint-1"]


SMALL = {"max_steps": 3, "num_generations": 4, "per_device_train_batch_size": 4, "gradient_accumulation_steps": 1,
         "max_completion_length": 8, "save_steps": 1, "logging_steps": 1, "save_total_limit": 1}


@pytest.mark.slow
def test_a_save_stopped_by_a_full_disk_is_never_resumed_from(tmp_path, tiny_model_dir, monkeypatch, caplog):
    """The issue's failure injected where transformers writes trainer_state.json (0 bytes, then
    ENOSPC) at step 2: save_total_limit 1 keeps checkpoint-1 (the last committed one), and the rerun
    skips checkpoint-2 with a warning and finishes from checkpoint-1, each step logged once."""
    from transformers import TrainerState

    caplog.set_level(logging.INFO, logger="olmpipe")
    pages, tests = make_page_index(tmp_path)
    cfg = load_config(overrides={"train": {"wandb": {"mode": "disabled"}, "grpo": SMALL}})
    run = tmp_path / "seed0"
    real = TrainerState.save_to_json

    def full_disk(self, json_path):
        if self.global_step == 2:
            Path(json_path).write_bytes(b"")
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), json_path)
        real(self, json_path)

    monkeypatch.setattr(TrainerState, "save_to_json", full_disk)
    kwargs = {"seed": 0, "model_path": tiny_model_dir, "pages": pages, "tests_dir": tests, "run_dir": run,
              "reward_funcs": [LowIdReward()]}
    with pytest.raises(OSError, match="No space left on device"):
        train_seed(cfg, **kwargs)
    assert (run / "checkpoint-2" / "trainer_state.json").stat().st_size == 0
    assert not (run / "checkpoint-2" / RUN_STATE_FILE).exists()
    assert complete_checkpoints(run, warn=False) == [run / "checkpoint-1"]
    monkeypatch.undo()
    assert train_seed(cfg, **kwargs) == 0
    assert f"skipping checkpoint {run / 'checkpoint-2'}: no olmpipe_run.json" in caplog.text
    assert f"resuming from {run / 'checkpoint-1'} (step 1)" in caplog.text
    assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [1, 2, 3]
    assert sorted(p.name for p in run.glob("checkpoint-*")) == ["checkpoint-3"]
    assert json.loads((run / "model" / "olmpipe_train.json").read_text())["steps"] == 3


def _fill(disk: Path) -> Path:
    """Write a file on ``disk`` until the file system is full; returns it."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for block in (1 << 20, 1 << 12):
            try:
                while True:
                    fh.write(b"\0" * block)
            except OSError as exc:
                assert exc.errno == errno.ENOSPC, exc
    return filler


@pytest.mark.slow
def test_a_real_full_disk_during_a_save(tmp_path, tiny_model_dir):
    """A real ENOSPC: the run folder on a 64 MB tmpfs, filled while the trainer waits after step 2
    (checkpoint-1 committed, checkpoint-2 not yet written). The trainer stops, saying the disk is
    full; once space is freed the rerun skips checkpoint-2 and finishes from checkpoint-1."""
    disk = tmp_path / "disk"
    disk.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64m", "tmpfs", str(disk)],
                             capture_output=True, text=True, check=False)
    if mounted.returncode:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {mounted.stderr.strip()}")
    try:
        pages, tests = make_page_index(tmp_path)
        run = disk / "seed0"
        config = tmp_path / "config.yaml"
        # nothing but the checkpoint is written at step 2 (logging at step 3 only)
        config.write_text(yaml.safe_dump({"train": {"wandb": {"mode": "disabled"},
                                                    "grpo": {**SMALL, "logging_steps": 3}},
                                          "rewards": {"bench": {"processes": 0}}}))
        cmd = [sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(tiny_model_dir), "--pages",
               str(pages), "--tests-dir", str(tests), "--run-dir", str(run), "--config", str(config)]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
        gate = StepGate(tmp_path / "gate", step=2)
        proc = subprocess.Popen(cmd, env={**env, **gate.env(env)}, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, text=True)
        gate.wait_reached(run.name, proc)
        assert complete_checkpoints(run, warn=False) == [run / "checkpoint-1"]
        filler = _fill(disk)
        gate.release(run.name)
        _, err = proc.communicate(timeout=600)
        assert proc.returncode == 1, err[-3000:]
        assert "the disk is full" in err and "checkpoint-1" in err, err[-3000:]
        assert (run / "checkpoint-2").is_dir() and not (run / "checkpoint-2" / RUN_STATE_FILE).exists()
        filler.unlink()
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600, check=False)
        assert done.returncode == 0, done.stderr[-3000:]
        assert f"skipping checkpoint {run / 'checkpoint-2'}: " in done.stderr
        assert f"resuming from {run / 'checkpoint-1'} (step 1)" in done.stderr
        assert [r["step"] for r in read_metrics(run / "metrics.jsonl")] == [3]
        assert json.loads((run / "model" / "olmpipe_train.json").read_text())["steps"] == 3
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
