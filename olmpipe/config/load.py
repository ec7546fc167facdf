"""Loading and validating the workflow configuration outside Snakemake.

Snakemake validates ``config/config.yaml`` against ``workflow/schemas/config.schema.yaml`` in the
``Snakefile``; stage entry points run without Snakemake (``python -m olmpipe.<stage>``) use
:func:`load_config` for the same check, so a config means the same thing on both paths. The
schema owns every default: code reads ``cfg["section"]["key"]`` and never supplies its own.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from copy import deepcopy
from pathlib import Path
from typing import Any

import jsonschema
import yaml

logger = logging.getLogger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
# The schema ships inside the package (package data), so an installed olmpipe validates configs
# outside the repository. In the repository `olmpipe/config.schema.yaml` is a symlink to
# `workflow/schemas/config.schema.yaml`, the file the Snakefile validates with; a wheel holds a copy.
# (The path is resolved first: olmpipe/config/ is a package beside that file.)
SCHEMA_PATH = Path(__file__).resolve().parent.parent / "config.schema.yaml"
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
    if error.validator in ("anyOf", "oneOf") and error.context:
        options = " or ".join(dict.fromkeys(sub.message for sub in error.context))
        reason = error.schema.get("description") or next(
            (sub.schema.get("description") for sub in error.context if sub.schema.get("description")), "")
        return f"config key {where}: {error.instance!r} is not valid ({options})" + (f": {reason}" if reason else "")
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
    from olmpipe.config.checks import grpo_problems, model_problems, nonfinite_problems, sft_problems

    problems = nonfinite_problems(filled) or (grpo_problems(filled) + sft_problems(filled) + model_problems(filled))
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
    return filled


#: Words YAML reads as null; a nested ``--config`` value arrives as such a string.
_NULL_WORDS = frozenset({"null", "Null", "NULL", "~", ""})


def _schema_types(schema: Mapping[str, Any]) -> list[str]:
    kinds = schema.get("type", [])
    return list(kinds) if isinstance(kinds, list) else [kinds]


def _read_scalar(text: str, kinds: list[str]) -> Any:
    """``text`` as the first of the schema's ``kinds`` it reads as (YAML 1.1, as config files are
    read; a number also as Python's ``float`` reads it, e.g. ``1e-6``), else ``text`` unchanged.

    A key that may be a string keeps the text, unless it may also be null and the text is a null word.
    """
    if "string" in kinds:
        return None if "null" in kinds and text in _NULL_WORDS else text
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        value = text
    for kind in kinds:
        if kind == "null" and (value is None or text in _NULL_WORDS):
            return None
        if kind == "boolean" and isinstance(value, bool):
            return value
        if kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
            return value
        if kind == "number":
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return value
            try:
                return float(text)
            except ValueError:
                pass
    return text


def coerce_strings(value: Any, schema: Mapping[str, Any], *, grpo: bool = False) -> Any:
    """``value`` with every string the schema wants as a number, boolean or null read as one.

    Snakemake 9 reads a nested ``--config`` value with YAML's base loader, so in
    ``--config train='{grpo: {max_steps: 3}}'`` the 3 arrives as the string ``"3"`` (top-level
    values are parsed, nested ones are not). Each such string is read as YAML reads that word in a
    config file (:func:`_read_scalar`), by the type the schema gives its key; keys of ``train.grpo``
    (and of ``seed_overrides[].grpo``) that the schema does not list take the type of TRL's
    GRPOConfig field (:mod:`olmpipe.config.grpo_fields`). Values inside mappings the schema does not
    describe (e.g. ``grpo.generation_kwargs``) stay as they are. Returns a new value; the input is
    not changed.
    """
    if isinstance(value, str):
        return _read_scalar(value, _schema_types(schema))
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        return [coerce_strings(item, schema["items"]) for item in value]
    if not isinstance(value, Mapping):
        return value
    properties = schema.get("properties", {})
    fields = None
    out = {}
    for key, sub in value.items():
        if key in properties:
            out[key] = coerce_strings(sub, properties[key], grpo=key == "grpo")
        elif grpo:
            if fields is None:
                from olmpipe.config.grpo_fields import load_fields

                fields = load_fields()
            out[key] = coerce_strings(sub, {"type": fields.get(key, [])})
        else:
            out[key] = sub
    return out


def coerce_config(config: Mapping[str, Any], schema: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """:func:`coerce_strings` over a whole config (``seed_overrides[].grpo`` keys by GRPOConfig's types)."""
    return coerce_strings(config, load_schema() if schema is None else schema)


def check_workflow_config(config: dict[str, Any]) -> None:
    """The Snakefile's config check: validate ``config`` in place (defaults filled in, as
    ``snakemake.utils.validate`` does) and stop Snakemake with one line per problem.

    ``snakemake.utils.validate`` prints jsonschema's full report after the useful line (the failing
    part of the schema, 13 to 100 lines); this prints :func:`validate_config`'s lines, each naming
    the key and the fix, and runs the checks that jsonschema cannot express. Strings that nested
    ``--config`` values arrive as are first read by the schema's types (:func:`coerce_config`). In
    the Snakefile::

        from olmpipe.config import check_workflow_config
        check_workflow_config(config)
    """
    from snakemake.exceptions import WorkflowError

    from olmpipe.layout import model_path_problem

    try:
        filled = validate_config(coerce_config(config))
    except ConfigError as exc:
        raise WorkflowError(str(exc)) from None
    problem = model_path_problem(filled)  # the working directory is Snakemake's: paths read as the jobs read them
    if problem:
        raise WorkflowError(f"invalid configuration:\n  - {problem}")
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


def config_from_settings(settings: str, overrides: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The validated config whose sections are those of ``settings``, a JSON object, plus ``overrides``.

    How the workflow hands its already validated sections (``model``, ``generation``, ``eval_run``,
    Snakemake's ``--config`` overrides included) to ``python -m olmpipe.evaluate.baseline`` and
    ``python -m olmpipe.evaluate.stage`` through ``shell:`` rules; sections not given get schema defaults.
    Raises :class:`olmpipe.config.ConfigError` naming the problem.
    """
    try:
        raw = json.loads(settings)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--settings: not valid JSON: {exc}") from None
    if not isinstance(raw, dict):
        raise ConfigError(f"--settings: must be a JSON object of config sections, got {type(raw).__name__}")
    return validate_config(deep_update(raw, overrides or {}))
