"""The Weights & Biases run of a training job: one run per seed, continued across resumes.

The run id is the checkpoint's when resuming (stored in its ``olmpipe_run.json``), else the run
folder's ``wandb_run_id`` file, else a new one written there; metrics also always go to
``metrics.jsonl``/``.csv`` (:class:`olmpipe.job.callbacks.MetricsFiles`), whatever wandb does.
``<section>.wandb.mode`` is ``offline`` by default (``wandb sync`` later), ``online`` or ``disabled``.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.job.checkpoints import RUN_STATE_FILE
from olmpipe.records.train import WANDB_ID_NAME

__all__ = ["init_wandb", "wandb_run_id"]


def _stored_run_id(checkpoint: Path) -> str | None:
    path = checkpoint / RUN_STATE_FILE
    return json.loads(path.read_text(encoding="utf-8")).get("wandb_run_id") if path.exists() else None


def wandb_run_id(run_dir: Path, checkpoint: Path | None) -> str:
    """The wandb run id: the checkpoint's when resuming, else the run folder's, else a new one."""
    stored = _stored_run_id(checkpoint) if checkpoint is not None else None
    if stored:
        return stored
    id_file = run_dir / WANDB_ID_NAME
    if checkpoint is not None and id_file.exists():
        return id_file.read_text(encoding="utf-8").strip()
    run_id = uuid.uuid4().hex[:12]
    id_file.write_text(run_id + "\n", encoding="utf-8")
    return run_id


def init_wandb(cfg: Mapping[str, Any], section: str, run_dir: Path, run_id: str, seed: int, name: str) -> Any:
    """``wandb.init`` of a seed's run (resumed when it exists), configured with its sections."""
    import wandb

    wcfg = cfg[section]["wandb"]
    return wandb.init(
        project=wcfg["project"],
        entity=wcfg["entity"],
        id=run_id,
        resume="allow",
        mode=wcfg["mode"],
        dir=str(run_dir),
        name=name,
        config={"seed": seed, section: cfg[section], "rewards": cfg["rewards"], "model": cfg["model"]},
    )
