"""olmpipe.job.signals: SIGTERM ends a trainer that is still loading with exit code 75 at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import yaml
from trainkit import make_page_index

from olmpipe.job.runlock import LOCK_FILE
from olmpipe.procs import EXIT_PREEMPTED


def test_sigterm_while_the_trainer_is_still_loading_exits_75(tmp_path, tiny_model_dir):
    """Issue 20 item 10: a SIGTERM before training started ended the trainer with -15 (the handler
    was installed after the model was loaded), so SLURM's preemption of a loading job counted as a
    failure. The page index here is a FIFO nobody writes: the trainer blocks reading it, after
    taking its run lock, so the signal lands while it loads, whatever the machine's speed."""
    pages, tests = make_page_index(tmp_path)
    fifo = tmp_path / "pages.fifo"
    os.mkfifo(fifo)
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"train": {"wandb": {"mode": "disabled"}}, "rewards": {"bench": {"processes": 0}}}))
    run = tmp_path / "seed0"
    cmd = [sys.executable, "-m", "olmpipe.train", "--seed", "0", "--model", str(tiny_model_dir), "--pages", str(fifo),
           "--tests-dir", str(tests), "--run-dir", str(run), "--config", str(config)]
    proc = subprocess.Popen(cmd, env={**os.environ, "OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while not (run / LOCK_FILE).exists():  # the lock is taken before the page index is read
            assert proc.poll() is None, proc.communicate()[1][-3000:]
            assert time.monotonic() < deadline, "the trainer did not take its run lock"
            time.sleep(0.05)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == EXIT_PREEMPTED, err[-3000:]
    assert "before training started" in err, err[-3000:]
    assert not list(run.glob("checkpoint-*")) and not (run / "model").exists()
    assert pages.exists()  # the real index, untouched
