"""Loading and validating the workflow configuration outside Snakemake.

Snakemake validates ``config/config.yaml`` against ``workflow/schemas/config.schema.yaml`` in the
``Snakefile``; stage entry points run without Snakemake (``python -m olmpipe.<stage>``) use
:func:`load_config` for the same check, so a config means the same thing on both paths. The
schema owns every default: code reads ``cfg["section"]["key"]`` and never supplies its own.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[1]
# The schema ships inside the package (package data), so an installed olmpipe validates configs
# outside the repository. In the repository `olmpipe/config.schema.yaml` is a symlink to
# `workflow/schemas/config.schema.yaml`, the file the Snakefile validates with; a wheel holds a copy.
SCHEMA_PATH = Path(__file__).with_name("config.schema.yaml")
DEFAULT_CONFIG_PATH = REPO_ROOT / "config" / "config.yaml"


class ConfigError(ValueError):
    """A configuration that does not match the schema; the message names the key and the fix."""


#: Sections that were renamed: old name -> new name. A config that still uses the old name is read
#: (its keys override the new section's, which config/config.yaml always sets) with a warning.
RENAMED_SECTIONS = {"baseline": "eval_run"}


def _renamed_sections(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with every old section name of :data:`RENAMED_SECTIONS` moved to its new name."""
    for old, new in RENAMED_SECTIONS.items():
        if old not in config:
            continue
        value = config.pop(old)
        logger.warning("config section %r is now called %r (it steers both the baseline and evaluate runs); "
                       "reading it as %r", old, new, new)
        if isinstance(value, Mapping) and isinstance(config.get(new), dict):
            deep_update(config[new], value)
        else:
            config[new] = value
    return config


def load_schema(path: Path = SCHEMA_PATH) -> dict[str, Any]:
    """Read the config schema (YAML)."""
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh)


def _fill_defaults(schema: Mapping[str, Any], instance: Any) -> Any:
    """Return ``instance`` with every missing key that has a schema default filled in, recursively."""
    if not isinstance(instance, dict) or schema.get("type") != "object":
        return instance
    for key, sub in schema.get("properties", {}).items():
        if key not in instance and "default" in sub:
            instance[key] = deepcopy(sub["default"])
        if key in instance:
            instance[key] = _fill_defaults(sub, instance[key])
    return instance


def _describe(error: jsonschema.ValidationError) -> str:
    where = "/".join(str(p) for p in error.absolute_path) or "<top level>"
    if error.validator == "additionalProperties":
        allowed = sorted(error.schema.get("properties", {}))
        extra = sorted(set(error.instance) - set(allowed)) if isinstance(error.instance, dict) else []
        return (
            f"unknown key(s) {', '.join(map(repr, extra))} under {where}; "
            f"allowed keys: {', '.join(allowed)} (see workflow/schemas/config.schema.yaml)"
        )
    return f"config key {where}: {error.message}"


def validate_config(config: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Validate ``config`` against the schema and return a copy with all defaults filled in.

    Raises :class:`ConfigError` listing every problem, each naming the offending key.
    """
    schema = load_schema() if schema is None else schema
    filled = _fill_defaults(schema, _renamed_sections(deepcopy(dict(config))))
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(filled), key=lambda e: list(e.absolute_path))
    if errors:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  - {_describe(e)}" for e in errors))
    problems = grpo_problems(filled)
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
    return filled


def grpo_problems(config: Mapping[str, Any]) -> list[str]:
    """``train.grpo`` and the per-seed overrides checked against TRL's GRPOConfig fields."""
    from olmpipe.train.grpo_fields import check_knobs

    train = config.get("train")
    if not isinstance(train, Mapping):
        return []
    problems = check_knobs(train.get("grpo", {}), "train/grpo")
    for i, override in enumerate(train.get("seed_overrides", [])):
        problems += check_knobs(override.get("grpo", {}), f"train/seed_overrides/{i}/grpo")
    return problems


def check_workflow_config(config: dict[str, Any]) -> None:
    """The Snakefile's config check: validate ``config`` in place (defaults filled in, as
    ``snakemake.utils.validate`` does) and stop Snakemake with one line per problem.

    ``snakemake.utils.validate`` prints jsonschema's full report after the useful line (the failing
    part of the schema, 13 to 100 lines); this prints :func:`validate_config`'s lines, each naming
    the key and the fix, and runs the checks that jsonschema cannot express. In the Snakefile::

        from olmpipe.config import check_workflow_config
        check_workflow_config(config)
    """
    from snakemake.exceptions import WorkflowError

    try:
        filled = validate_config(config)
    except ConfigError as exc:
        raise WorkflowError(str(exc)) from None
    config.clear()
    config.update(filled)


def deep_update(base: dict[str, Any], overrides: Mapping[str, Any]) -> dict[str, Any]:
    """Merge ``overrides`` into ``base`` recursively (mappings merge, everything else replaces)."""
    for key, value in overrides.items():
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            deep_update(base[key], value)
        else:
            base[key] = deepcopy(value)
    return base


def load_config(
    path: str | Path | None = None, overrides: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Read a YAML config (default ``config/config.yaml``), apply ``overrides`` and validate it.

    >>> cfg = load_config(overrides={"rasterize": {"longest_side": 512}})
    >>> cfg["rasterize"]["longest_side"]
    512
    """
    path = Path(path) if path is not None else DEFAULT_CONFIG_PATH
    try:
        with open(path, encoding="utf-8") as fh:
            raw = yaml.safe_load(fh) or {}
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path}: not valid YAML: {exc}") from exc
    if not isinstance(raw, dict):
        raise ConfigError(f"{path}: the top level must be a mapping of sections, got {type(raw).__name__}")
    if overrides:
        deep_update(raw, overrides)
    try:
        return validate_config(raw)
    except ConfigError as exc:
        raise ConfigError(f"{path}: {exc}") from None
