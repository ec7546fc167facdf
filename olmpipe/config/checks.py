"""The checks of a configuration that its schema cannot express: non-finite numbers, TRL's
``GRPOConfig`` fields and batch arithmetic, and what the model implies (its architecture, its
folder, vLLM context lengths for its pages). :func:`olmpipe.config.validate_config` runs them
after the schema, so a job and the Snakefile refuse the same configurations.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any


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
    from olmpipe.config.processes import LaunchError, plan

    res = config.get("resources", {}).get("train", {})
    try:
        return plan(res["gpu"], res["launcher"], res["vllm_server_gpus"], res["strategy"], res["nodes"]).train_processes
    except (KeyError, TypeError, LaunchError):
        return None


def seed_batch_problems(config: Mapping[str, Any], world_size: int) -> list[str]:
    """TRL's batch arithmetic (:func:`olmpipe.config.grpo_fields.batch_problems`) for every seed's
    knobs, each problem once, saying how many training processes it assumed."""
    from olmpipe.config.grpo_fields import batch_problems

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


def sft_problems(config: Mapping[str, Any]) -> list[str]:
    """``sft.args`` and the per-seed overrides checked against TRL's SFTConfig fields
    (:mod:`olmpipe.config.sft_fields`)."""
    from olmpipe.config.sft_fields import check_knobs

    sft = config.get("sft")
    if not isinstance(sft, Mapping):
        return []
    problems = check_knobs(sft.get("args", {}), "sft/args")
    for i, override in enumerate(sft.get("seed_overrides", [])):
        problems += check_knobs(override.get("args", {}), f"sft/seed_overrides/{i}/args")
    return problems


def grpo_problems(config: Mapping[str, Any]) -> list[str]:
    """``train.grpo`` and the per-seed overrides checked against TRL's GRPOConfig fields, and the
    batch arithmetic TRL would reject at train time."""
    from olmpipe.config.grpo_fields import check_knobs

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


def model_problems(config: Mapping[str, Any]) -> list[str]:
    """``model.path`` of an unsupported architecture (:func:`olmpipe.models.architectures.model_problems`),
    a model folder with a ``config.json`` that cannot be loaded (:func:`olmpipe.models.folder.folder_problem`:
    no weights, a missing shard, tokenizer, processor settings or chat template), and vLLM context
    lengths too short for a page of the model's architecture (:func:`olmpipe.config.vllm_context.context_problems`),
    where the model's image processor is known: the embedded model's architecture, a model folder (a hub id's download folder once it exists, or its
    Hugging Face cache), or a hub id of :data:`olmpipe.models.known.KNOWN_MODELS`."""
    from olmpipe.config.vllm_context import context_problems
    from olmpipe.models.architectures import (
        ARCHITECTURES,
        architecture_of,
        image_budget_of,
        model_config,
        model_problems,
    )
    from olmpipe.models.known import KNOWN_MODELS

    model = config.get("model")
    if not isinstance(model, Mapping) or "path" not in model:
        return []
    if model["path"] == "embedded":
        from olmpipe.models.tiny import tiny_budget

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
            from olmpipe.models.folder import folder_problem

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




def wants_server(grpo: Mapping[str, Any]) -> bool:
    """True when the GRPO knobs ask for generation by a vLLM server (``use_vllm`` + ``server``)."""
    return bool(grpo["use_vllm"]) and grpo["vllm_mode"] == "server"


#: Seconds by which ``train.grpo.ddp_timeout`` must exceed the server's start-up budget: the other
#: ranks also wait for rank 0's own model loading and dataset building around the start-up.
DDP_TIMEOUT_MARGIN_S = 120


def collective_timeout_problem(train_cfg: Mapping[str, Any], grpo: Mapping[str, Any], train_processes: int) -> str | None:
    """Why the job's collectives would time out while rank 0 starts the server, or None.

    Only rank 0 starts the server (TRL talks to it from the main process); the other ranks wait for
    it in a collective, which fails after ``ddp_timeout`` (the process group's timeout,
    :func:`olmpipe.job.distributed.init_distributed`).
    """
    if train_processes <= 1 or not wants_server(grpo):
        return None
    startup = float(train_cfg["vllm_server"]["startup_timeout_s"])
    need = startup + DDP_TIMEOUT_MARGIN_S
    if grpo["ddp_timeout"] >= need:
        return None
    return (f"train.grpo.ddp_timeout ({grpo['ddp_timeout']} s) must be at least train.vllm_server.startup_timeout_s "
            f"({startup:g} s) + {DDP_TIMEOUT_MARGIN_S} s: the other {train_processes - 1} rank(s) wait in a collective "
            f"while rank 0 starts the vLLM server; raise train.grpo.ddp_timeout to {math.ceil(need)} or more, or lower "
            "startup_timeout_s")
