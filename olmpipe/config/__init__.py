"""The workflow's configuration: loaded, checked against its schema, and what its settings mean.

    from olmpipe.config import load_config
    cfg = load_config("config/config.yaml", overrides={"train": {"seeds": [0, 1]}})

- :mod:`~olmpipe.config.load`: read YAML, fill the schema's defaults, validate (one line per
  problem, naming the key), the Snakefile's :func:`check_workflow_config`;
- :mod:`~olmpipe.config.checks`: what the schema cannot express (non-finite numbers, TRL's fields
  and batch arithmetic, the model's architecture and folder, vLLM context lengths);
- :mod:`~olmpipe.config.grpo_fields`: every field of TRL's ``GRPOConfig`` by name and JSON type,
  and TRL's batch arithmetic;
- :mod:`~olmpipe.config.processes`: what ``resources.train`` means: training processes, vLLM server
  GPUs, strategy and nodes (:class:`LaunchPlan`), read by the launcher, the memory plan and the jobs;
- :mod:`~olmpipe.config.vllm_context`: vLLM context lengths long enough for a page of the model.

The schema (``workflow/schemas/config.schema.yaml``, shipped as ``olmpipe/config.schema.yaml``)
owns every default: code reads ``cfg["section"]["key"]`` and never supplies its own.
"""

from __future__ import annotations

from olmpipe.config.checks import (
    grpo_problems,
    model_problems,
    nonfinite_problems,
    seed_batch_problems,
    train_processes,
)
from olmpipe.config.load import (
    DEFAULT_CONFIG_PATH,
    REPO_ROOT,
    SCHEMA_PATH,
    ConfigError,
    check_workflow_config,
    coerce_config,
    coerce_strings,
    config_from_settings,
    deep_update,
    load_config,
    load_schema,
    validate_config,
)

__all__ = [
    "DEFAULT_CONFIG_PATH",
    "REPO_ROOT",
    "SCHEMA_PATH",
    "ConfigError",
    "check_workflow_config",
    "coerce_config",
    "coerce_strings",
    "config_from_settings",
    "deep_update",
    "grpo_problems",
    "load_config",
    "load_schema",
    "model_problems",
    "nonfinite_problems",
    "seed_batch_problems",
    "train_processes",
    "validate_config",
]
