"""Which generation settings change what a generation job writes: the part its rule's params carry.

Snakemake reruns a job when a value of its ``params`` changes (the params trigger). The generation
jobs (``baseline_generate``, ``evaluate_generate``, ``evaluate_sft_generate``) receive every setting
they read, but through a param that Snakemake does not record: a params function that takes
``output`` is a *derived* param (``snakemake/rules.py`` 925-934, ``_is_deriving_function``), and
the params trigger compares only the non-derived ones (``snakemake/persistence/__init__.py``
789-795, ``_params``). Their trigger is :func:`generation_trigger`: what changes the records --
the decoding settings, the pipeline mode when on, the chosen backend's identity (the other
backends' sections are left out), and the eval run's page set -- and not how fast or how robustly
they are made (batch size, concurrency, retries, timeouts, GPU memory share, tensor parallelism,
the device). This follows the resume journal (:func:`olmpipe.generate.journal.generation_fingerprint`),
which reuses a generation whatever those were; the table is ``docs/reruns.md``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from copy import deepcopy
from typing import Any

__all__ = ["OPERATIONAL_EVAL_RUN", "OPERATIONAL_GENERATION", "generation_trigger", "generation_trigger_json"]

#: ``generation`` keys (``<backend>.<key>`` for a backend's own section) that change how the
#: records are made, not what they are.
OPERATIONAL_GENERATION = (
    "batch_size",
    "max_error_fraction",
    "transformers.device",
    "vllm.gpu_memory_utilization",
    "vllm.tensor_parallel_size",
    "vllm.enforce_eager",
    "vllm.cpu_kv_cache_gb",
    "openai.api_key_env",
    "openai.concurrency",
    "openai.retries",
    "openai.backoff_s",
    "openai.timeout_s",
)
#: ``eval_run`` keys that change how a run is operated (reuse of an interrupted run, a progress bar).
OPERATIONAL_EVAL_RUN = ("resume", "progress")
#: The backends' own sections of ``generation``.
BACKEND_SECTIONS = ("transformers", "vllm", "openai")


def generation_trigger(cfg: Mapping[str, Any]) -> dict[str, Any]:
    """The settings whose change reruns a generation job: ``generation`` (with only the chosen
    backend's section) and ``eval_run`` without their operational keys, and ``model`` without its
    display name (``model.name`` names the run folders: a new name is a new folder, so the old
    one is kept and naming it again reruns nothing)."""
    generation = deepcopy(dict(cfg["generation"]))
    backend = generation["backend"]
    for name in BACKEND_SECTIONS:
        if name != backend:
            generation.pop(name, None)
    for key in OPERATIONAL_GENERATION:
        section, _, sub = key.rpartition(".")
        target = generation.get(section) if section else generation
        if isinstance(target, dict):
            target.pop(sub, None)
    if not generation["pipeline"]["enabled"]:
        generation["pipeline"] = {"enabled": False}
    eval_run = {k: v for k, v in cfg["eval_run"].items() if k not in OPERATIONAL_EVAL_RUN}
    model = {k: v for k, v in cfg["model"].items() if k != "name"}
    return {"generation": generation, "eval_run": eval_run, "model": model}


def generation_trigger_json(cfg: Mapping[str, Any]) -> str:
    """:func:`generation_trigger` as compact, key-sorted JSON (stable, so Snakemake's params compare equal)."""
    return json.dumps(generation_trigger(cfg), sort_keys=True, separators=(",", ":"), default=str)
