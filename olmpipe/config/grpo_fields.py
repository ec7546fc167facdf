"""Every field of TRL's ``GRPOConfig``, checked by name and type when the config is loaded.

``train.grpo`` (and each ``train.seed_overrides[].grpo``) may set any field of the installed TRL's
``GRPOConfig`` -- ``use_bias_correction_kl``, the importance-sampling clip bounds,
``eval_strategy``, ``generation_kwargs``, ``lr_scheduler_kwargs``, optimizer settings, ... -- not
only the ones the schema documents. Importing TRL costs seconds, too slow for every
``snakemake -n``, so the field table is a JSON file shipped with the package
(``grpo_fields.json``: name -> JSON types, made from the dataclass by :func:`describe_fields`);
a test holds it equal to the installed TRL (pinned in pyproject.toml). Regenerate it after a TRL
upgrade with ``python -m olmpipe.config.grpo_fields --write``.

Fields that olmpipe sets from the run itself (``OWNED``) are refused with the setting to use instead.
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.layout import TRAIN_RUN

FIELDS_FILE = Path(__file__).with_name("grpo_fields.json")

#: GRPOConfig fields olmpipe sets itself, and where the value comes from.
OWNED = {
    "output_dir": f"the run folder ({TRAIN_RUN})",
    "seed": "train.seeds", "data_seed": "train.seeds",
    "bf16": "train.dtype", "fp16": "train.dtype", "use_cpu": "train.device",
    "report_to": "train.wandb.mode", "run_name": "the seed's run name",
    "remove_unused_columns": "olmpipe (the rewards need the dataset columns)",
    "log_completions": "train.completions_every (olmpipe writes its own completions table)",
    "reward_weights": "rewards.weights", "resume_from_checkpoint": "train.resume",
    "save_strategy": "train.grpo.save_steps", "logging_strategy": "train.grpo.logging_steps",
}

_JSON_TYPES = {"bool": "boolean", "int": "integer", "float": "number", "str": "string", "dict": "object",
               "list": "array", "None": "null", "NoneType": "null"}


def _types_of(annotation: str) -> list[str]:
    """JSON types accepted for a dataclass annotation string (``"float | None"`` -> number, null)."""
    text = annotation.replace("<class '", "").replace("'>", "").replace("typing.", "")
    if text.startswith(("Union[", "Optional[")):
        text = text[text.index("[") + 1:-1].replace(",", " |")
    out: set[str] = set()
    for part in text.split("|"):
        part = part.strip()
        head = part.split("[", 1)[0].strip()
        if head.startswith("Literal"):
            out.update({"boolean", "string"})
        elif head in _JSON_TYPES:
            out.add(_JSON_TYPES[head])
        elif head:
            out.add("string" if head.endswith(("Strategy", "Type", "Names")) else "object")
    if "number" in out:
        out.add("integer")
    return sorted(out)


def describe_fields(config_class: Any = None) -> dict[str, list[str]]:
    """``{field name: [JSON types]}`` of ``GRPOConfig`` (the installed TRL's by default)."""
    if config_class is None:
        from trl import GRPOConfig as config_class
    return {f.name: _types_of(str(f.type)) for f in dataclasses.fields(config_class) if f.init}


def load_fields() -> dict[str, list[str]]:
    return json.loads(FIELDS_FILE.read_text(encoding="utf-8"))


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def check_knobs(knobs: Mapping[str, Any], where: str, fields: Mapping[str, list[str]] | None = None, *,
                owned: Mapping[str, str] = OWNED, config_name: str = "GRPOConfig") -> list[str]:
    """Problems of ``knobs`` against TRL's ``config_name`` (``GRPOConfig``; the SFT stage's
    ``SFTConfig``: :mod:`olmpipe.config.sft_fields`): unknown names (with the closest valid one),
    fields olmpipe owns (``owned``), wrong types, and ``max_steps`` outside ``-1`` or ``>= 1``."""
    fields = load_fields() if fields is None else fields
    problems = []
    for name, value in knobs.items():
        if name in owned:
            problems.append(f"{where}.{name}: set by olmpipe from {owned[name]}; remove it here")
            continue
        if name not in fields:
            close = difflib.get_close_matches(name, list(fields), n=1, cutoff=0.6)
            hint = f"; did you mean {close[0]}?" if close else f" (see TRL's {config_name})"
            problems.append(f"{where}.{name}: not a field of TRL's {config_name}{hint}")
            continue
        kind = _json_type(value)
        allowed = fields[name]
        if kind not in allowed and not (kind == "integer" and "number" in allowed):
            problems.append(f"{where}.{name}: {value!r} is a {kind}, expected {' or '.join(allowed)}")
    steps = knobs.get("max_steps")
    if isinstance(steps, int) and not isinstance(steps, bool) and steps != -1 and steps < 1:
        problems.append(f"{where}.max_steps: {steps} is not a step count; use a number >= 1, or -1 to train "
                        "num_train_epochs epochs")
    return problems


#: GRPOConfig's defaults (TRL 1.16) of the fields :func:`batch_problems` reads; a test holds them
#: equal to the installed TRL's.
BATCH_DEFAULTS: dict[str, Any] = {
    "per_device_train_batch_size": 8, "gradient_accumulation_steps": 1, "num_generations": 8,
    "generation_batch_size": None, "steps_per_generation": None, "per_device_eval_batch_size": 8,
    "num_generations_eval": None, "eval_strategy": "no", "auto_find_batch_size": False,
    "vllm_importance_sampling_correction": True, "vllm_importance_sampling_mode": "sequence_mask",
    "vllm_importance_sampling_clip_min": None, "vllm_importance_sampling_clip_max": 3.0,
    "vllm_importance_sampling_cap": None,
}


def batch_pages(knobs: Mapping[str, Any], world_size: int) -> int:
    """Pages one generation batch of training takes: TRL 1.16's ``generation_batch_size //
    num_generations`` (``RepeatSampler`` draws that many pages and drops an incomplete last chunk,
    trl/trainer/utils.py:939-943), with the generation batch worked out as :func:`batch_problems`
    does (``per_device_train_batch_size x world_size x steps_per_generation``, GA when unset).

    >>> batch_pages({"per_device_train_batch_size": 4, "gradient_accumulation_steps": 2, "num_generations": 4}, 1)
    2
    """
    k = {**BATCH_DEFAULTS, **{name: value for name, value in knobs.items() if name in BATCH_DEFAULTS}}
    generation_batch = k["generation_batch_size"]
    if generation_batch is None:
        steps = k["steps_per_generation"] or k["gradient_accumulation_steps"]
        generation_batch = k["per_device_train_batch_size"] * world_size * steps
    return max(1, generation_batch // max(1, k["num_generations"]))


def batch_problems(knobs: Mapping[str, Any], world_size: int, where: str) -> list[str]:
    """What TRL 1.16's ``GRPOConfig.__post_init__`` would reject in ``knobs`` run by ``world_size``
    training processes, checked before any job starts (TRL raises only inside the trainer).

    The same checks, in the same order, on the same arithmetic (``trl/trainer/grpo_config.py``
    lines 1089-1172 at TRL 1.16.0): ``auto_find_batch_size`` (1089); ``generation_batch_size``
    a multiple of ``per_device_train_batch_size x world_size`` and not set together with
    ``steps_per_generation`` (1096-1116); the eval batch a multiple of the eval generations when
    evaluating (1118-1127; transformers sets ``do_eval`` from ``eval_strategy``); the generation batch
    a multiple of ``num_generations`` (1131-1135); ``num_generations >= 2`` (1137-1141); the
    importance-sampling clip bounds (1143-1172). A test builds the real ``GRPOConfig`` for a grid of
    values and world sizes and holds the two equal.
    """
    k = {**BATCH_DEFAULTS, **{name: value for name, value in knobs.items() if name in BATCH_DEFAULTS}}
    counts = ("per_device_train_batch_size", "gradient_accumulation_steps", "num_generations")
    if any(isinstance(k[name], bool) or not isinstance(k[name], int) for name in counts):
        return []  # wrong types are check_knobs' report
    problems = [f"{where}.{name}: {k[name]} is not a count (>= 1)" for name in counts if k[name] < 1]
    if problems:
        return problems
    if k["auto_find_batch_size"]:
        problems.append(f"{where}.auto_find_batch_size: GRPO cannot shrink its batch on out-of-memory (each "
                        "generation batch must hold whole groups of num_generations); lower "
                        "per_device_train_batch_size instead")
    per_step = k["per_device_train_batch_size"] * world_size
    generation_batch, steps = k["generation_batch_size"], k["steps_per_generation"]
    if generation_batch is not None and steps is not None:
        problems.append(f"{where}: generation_batch_size and steps_per_generation cannot both be set")
        return problems
    if generation_batch is None:
        generation_batch = per_step * (k["gradient_accumulation_steps"] if steps is None else steps)
    elif generation_batch % per_step:
        problems.append(f"{where}.generation_batch_size ({generation_batch}) must be a multiple of "
                        f"per_device_train_batch_size x training processes ({k['per_device_train_batch_size']} "
                        f"x {world_size} = {per_step})")
    if k["eval_strategy"] != "no":
        eval_generations = k["num_generations_eval"] or k["num_generations"]
        if (k["per_device_eval_batch_size"] * world_size) % eval_generations:
            problems.append(f"{where}: the eval batch, per_device_eval_batch_size x training processes "
                            f"({k['per_device_eval_batch_size']} x {world_size}), must be a multiple of the eval "
                            f"generations (num_generations_eval or num_generations: {eval_generations})")
    if generation_batch % k["num_generations"]:
        how = (f"generation_batch_size {generation_batch}" if k["generation_batch_size"] is not None else
               f"per_device_train_batch_size x training processes x "
               f"{'steps_per_generation' if steps is not None else 'gradient_accumulation_steps'} = "
               f"{k['per_device_train_batch_size']} x {world_size} x "
               f"{steps if steps is not None else k['gradient_accumulation_steps']} = {generation_batch}")
        problems.append(f"{where}.num_generations ({k['num_generations']}): each generation batch must hold whole "
                        f"groups, but {how} completions is not a multiple of it")
    if k["num_generations"] < 2:
        problems.append(f"{where}.num_generations ({k['num_generations']}): GRPO needs at least 2 completions "
                        "per page to compute advantages")
    clip_max = k["vllm_importance_sampling_cap"] if k["vllm_importance_sampling_cap"] is not None \
        else k["vllm_importance_sampling_clip_max"]
    clip_min = k["vllm_importance_sampling_clip_min"]
    if clip_min is not None and clip_max is not None and clip_min >= clip_max:
        problems.append(f"{where}.vllm_importance_sampling_clip_min ({clip_min}) must be less than "
                        f"vllm_importance_sampling_clip_max ({clip_max})")
    if (k["vllm_importance_sampling_correction"] and clip_min is None and clip_max is None
            and k["vllm_importance_sampling_mode"] in ("token_truncate", "sequence_truncate")):
        problems.append(f"{where}: vllm_importance_sampling_mode {k['vllm_importance_sampling_mode']} needs "
                        "vllm_importance_sampling_clip_min or vllm_importance_sampling_clip_max")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Write or check the GRPOConfig field table.")
    parser.add_argument("--write", action="store_true", help=f"rewrite {FIELDS_FILE.name} from the installed TRL")
    args = parser.parse_args(argv)
    fields = describe_fields()
    if args.write:
        FIELDS_FILE.write_text(json.dumps(fields, indent=1, sort_keys=True) + "\n", encoding="utf-8")
        return 0
    same = fields == load_fields()
    sys.stdout.write("up to date\n" if same else f"{FIELDS_FILE} differs from the installed TRL; run with --write\n")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
