"""Loading and validating the workflow configuration outside Snakemake.

Snakemake validates ``config/config.yaml`` against ``workflow/schemas/config.schema.yaml`` in the
``Snakefile``; stage entry points run without Snakemake (``python -m olmpipe.<stage>``) use
:func:`load_config` for the same check, so a config means the same thing on both paths. The
schema owns every default: code reads ``cfg["section"]["key"]`` and never supplies its own.
"""

from __future__ import annotations

import logging
import math
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
    problems = nonfinite_problems(filled) or (grpo_problems(filled) + _model_problems(filled))
    if problems:
        raise ConfigError("invalid configuration:\n" + "\n".join(f"  - {p}" for p in problems))
    return filled


def nonfinite_problems(value: Any, where: str = "") -> list[str]:
    """Every ``.inf``/``.nan`` in the config, by key: no setting means anything with them.

    jsonschema's ``number`` accepts them, and then ``learning_rate: .inf`` trains a model of NaN
    weights and ``temperature: .nan`` fails deep inside TRL. A knob that can be switched off takes
    ``null`` (or its documented off value), never an infinity.
    """
    if isinstance(value, float) and not math.isfinite(value):
        return [f"config key {where or '<top level>'}: {value} is not a finite number"]
    if isinstance(value, Mapping):
        return [p for key, sub in value.items() for p in nonfinite_problems(sub, f"{where}/{key}" if where else str(key))]
    if isinstance(value, list):
        return [p for i, sub in enumerate(value) for p in nonfinite_problems(sub, f"{where}/{i}")]
    return []


def train_processes(config: Mapping[str, Any]) -> int | None:
    """Training processes of a ``train_seed`` job as ``resources.train`` plans it (None: no valid plan).

    The rule's ``gpu`` resource can be overridden on the command line or by a profile; the train
    rule checks the batch again with the GPUs it really gets (:func:`olmpipe.plan.checked_launch_prefix`).
    """
    from olmpipe.process_plan import LaunchError, plan

    res = config.get("resources", {}).get("train", {})
    try:
        return plan(res["gpu"], res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    except (KeyError, TypeError, LaunchError):
        return None


def seed_batch_problems(config: Mapping[str, Any], world_size: int) -> list[str]:
    """TRL's batch arithmetic (:func:`olmpipe.train.grpo_fields.batch_problems`) for every seed's
    knobs, each problem once, saying how many training processes it assumed."""
    from olmpipe.train.grpo_fields import batch_problems

    train = config["train"]
    found = {"train/grpo": batch_problems(train["grpo"], world_size, "train/grpo")}
    for i, override in enumerate(train["seed_overrides"]):
        where = f"train/seed_overrides/{i}/grpo"
        if override.get("grpo"):
            found[where] = batch_problems({**train["grpo"], **override["grpo"]}, world_size, where)
    seen: set[str] = set()
    problems = []
    for where, listed in found.items():
        for problem in listed:
            what = problem[len(where):]
            if what not in seen:
                seen.add(what)
                problems.append(f"{problem} [{world_size} training process(es) as resources.train plans them]")
    return problems


def grpo_problems(config: Mapping[str, Any]) -> list[str]:
    """``train.grpo`` and the per-seed overrides checked against TRL's GRPOConfig fields, and the
    batch arithmetic TRL would reject at train time."""
    from olmpipe.train.grpo_fields import check_knobs

    train = config.get("train")
    if not isinstance(train, Mapping):
        return []
    problems = check_knobs(train.get("grpo", {}), "train/grpo")
    for i, override in enumerate(train.get("seed_overrides", [])):
        problems += check_knobs(override.get("grpo", {}), f"train/seed_overrides/{i}/grpo")
    processes = train_processes(config)
    if not problems and processes is not None:
        problems += seed_batch_problems(config, processes)
    return problems


def _model_problems(config: Mapping[str, Any]) -> list[str]:
    """``model.path`` of an unsupported architecture (:func:`olmpipe.architectures.model_problems`),
    a model folder with a ``config.json`` that cannot be loaded (:func:`olmpipe.modelfolder.folder_problem`:
    no weights, a missing shard, tokenizer, processor settings or chat template), and vLLM context
    lengths too short for a page of the model's architecture (:func:`olmpipe.vllm_context.context_problems`),
    where the model's image processor is known: the embedded model's architecture, a model folder (a hub id's download folder once it exists, or its
    Hugging Face cache), or a hub id of :data:`olmpipe.known_models.KNOWN_MODELS`."""
    from olmpipe.architectures import (
        ARCHITECTURES,
        architecture_of,
        image_budget_of,
        model_config,
        model_problems,
    )
    from olmpipe.known_models import KNOWN_MODELS
    from olmpipe.vllm_context import context_problems

    model = config.get("model")
    if not isinstance(model, Mapping) or "path" not in model:
        return []
    if model["path"] == "embedded":
        from olmpipe.tinymodel import tiny_budget

        budget = tiny_budget(ARCHITECTURES[model["tiny"]["architecture"]])
    else:
        from olmpipe.layout import ModelPathError, model_dir

        try:  # the folder the jobs read: a local one, or a hub id's download once it is there
            target = model_dir(config)
        except ModelPathError:  # a hub id without model.revision: the workflow's own check says so
            target = model["path"]
        target = target if Path(target).exists() else model["path"]
        problems = model_problems(target)
        if not problems and (Path(target) / "config.json").is_file():  # no config.json: layout.model_path_problem
            from olmpipe.modelfolder import folder_problem

            problem = folder_problem(target)
            problems = [f"model.path: {problem}"] if problem else []
        if problems:
            return problems
        found = model_config(target)
        if found is not None:
            budget = image_budget_of(Path(found[1]).parent, architecture_of(*found))
        elif model["path"] in KNOWN_MODELS:
            budget = architecture_of(KNOWN_MODELS[model["path"]], model["path"]).image_budget
        else:
            return []
    return context_problems(config, budget)


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
    GRPOConfig field (:mod:`olmpipe.train.grpo_fields`). Values inside mappings the schema does not
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
                from olmpipe.train.grpo_fields import load_fields

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
