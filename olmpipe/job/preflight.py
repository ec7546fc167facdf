"""Preflight checks of a training job: settings that the job that would run them cannot train.

Each of these used to pass ``snakemake -n`` and ``olmpipe plan`` and fail only inside the submitted
job (on SLURM: after queueing for a node), as a traceback: QLoRA on a job without a GPU, pure bf16
weights where the compute is float32, vLLM's server mode on the CPU, and LoRA target modules that
name nothing in the model (PEFT's ``NoMatchingPeftModuleError``, after the model was loaded:
minutes for a 7B). They are checked three times with the same code:

- when Snakemake plans the train rule (:func:`olmpipe.plan.checked_launch_prefix`, with the GPUs the
  rule really gets), so that nothing that cannot run is submitted;
- by ``olmpipe plan`` (also for a CPU job, ``--gpus 0``);
- by the trainer at start (:func:`check_job`), before the dataset is built or the model loaded.

A job's device is what ``train.device`` asks for; ``auto`` is planned as CUDA exactly when the job
has GPUs (``resources.train.gpu`` or the rule's ``gpu`` resource; a SLURM job without GPUs gets none).

The module names come from the model's own ``config.json``: the model is built on PyTorch's meta
device (no weights, no memory: 0.2 s for Qwen2.5-VL-72B once transformers is imported, measured
here), with the class :mod:`olmpipe.models.load` loads, so the check sees exactly the names PEFT will
match, whatever the architecture. A model folder that does not exist yet (the embedded model
before its rule ran, a hub id before ``download_model``) is checked when the job starts.
"""

from __future__ import annotations

import functools
import json
import logging
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from olmpipe.job.errors import JobSetupError
from olmpipe.job.kinds import GRPO, JobKind

logger = logging.getLogger(__name__)

#: Module classes LoRA adapts (PEFT 0.21 ``tuners/lora/model.py`` ``_create_new_module`` dispatchers:
#: torch's Linear, Embedding, Conv1d/2d/3d and MultiheadAttention, transformers' Conv1D).
LORA_LAYERS = ("Linear", "Embedding", "Conv1d", "Conv2d", "Conv3d", "MultiheadAttention", "Conv1D")


def job_device(train_cfg: Mapping[str, Any], gpus: int) -> str:
    """``cpu`` or ``cuda``: the device a training job with ``gpus`` GPUs trains on.

    >>> job_device({"device": "auto"}, 0), job_device({"device": "auto"}, 1), job_device({"device": "cpu"}, 8)
    ('cpu', 'cuda', 'cpu')
    """
    device = train_cfg["device"]
    return device if device != "auto" else ("cuda" if gpus > 0 else "cpu")


def device_problems(cfg: Mapping[str, Any], device: str, kind: JobKind = GRPO) -> list[str]:
    """What the job's settings need from its device that ``device`` does not give (one line each);
    ``kind``: the trainer whose section is checked (:mod:`olmpipe.job.kinds`)."""
    from olmpipe.job.peft import PeftSetupError, setup_problem
    from olmpipe.job.precision import resolve_precision

    train = kind.section_of(cfg)
    problems = []
    try:
        resolve_precision(train, device)
    except ValueError as exc:
        problems.append(str(exc))
    for seed in train["seeds"]:
        knobs = kind.knobs(train, seed)
        if device != "cuda" and knobs.get("use_vllm") and knobs.get("vllm_mode") == "server":
            problems.append("train.grpo.vllm_mode: server needs CUDA (trl vllm-serve syncs weights over NCCL); "
                            "on the CPU use vllm_mode: colocate or use_vllm: false (docs/vllm.md)")
        try:
            problem = setup_problem(train["peft"], device, knobs)
        except PeftSetupError as exc:
            problem = str(exc)
        if problem:
            problems.append(problem)
    return list(dict.fromkeys(problems))


@functools.lru_cache(maxsize=8)
def _modules(config_file: str, mtime_ns: int) -> tuple[str, tuple[tuple[str, str, int, int], ...]]:
    import torch
    import transformers

    from olmpipe.models.architectures import architecture_of, read_model_config

    folder = Path(config_file).parent
    arch = architecture_of(read_model_config(folder), config_file)
    config = transformers.AutoConfig.from_pretrained(str(folder))
    with torch.device("meta"):  # no weights, no memory: only the module tree
        model = getattr(transformers, arch.model_class)(config)
    # (name, class, in, out features: 0 for modules without them) of every module
    return arch.key, tuple((name, type(m).__name__, int(getattr(m, "in_features", 0) or 0),
                            int(getattr(m, "out_features", 0) or 0)) for name, m in model.named_modules() if name)


def model_modules(model: str | Path) -> tuple[str, dict[str, str]] | None:
    """``(model_type, module name -> class name)`` of the model folder ``model`` (see :func:`module_shapes`)."""
    found = module_shapes(model)
    return None if found is None else (found[0], {name: kind for name, (kind, _, _) in found[1].items()})


def module_shapes(model: str | Path) -> tuple[str, dict[str, tuple[str, int, int]]] | None:
    """``(model_type, module name -> (class name, in features, out features))`` of the model ``model``
    (a folder, or a hub id in the local Hugging Face cache; 0 features for modules without them), as the
    live model names them: the class :mod:`olmpipe.models.load` loads
    (:mod:`olmpipe.models.architectures`), built on the meta device from its ``config.json``. None when
    there is no config yet, or its architecture is unsupported (the config check names that)."""
    from olmpipe.models.architectures import ModelConfigError, UnsupportedArchitectureError, model_config

    try:
        found = model_config(model)
    except ModelConfigError:
        return None
    if found is None:
        return None
    config_file = Path(found[1]).resolve()
    try:
        model_type, names = _modules(str(config_file), config_file.stat().st_mtime_ns)
    except UnsupportedArchitectureError:
        return None
    return model_type, {name: (kind, fan_in, fan_out) for name, kind, fan_in, fan_out in names}


def _layers(names: Mapping[str, str], prefix: str) -> str:
    leaves = sorted({n.rsplit(".", 1)[-1] for n, kind in names.items() if n.startswith(prefix + ".")
                     and kind in LORA_LAYERS and not n.rsplit(".", 1)[-1].isdigit()})
    return ", ".join(leaves) or "none"


def module_problems(peft_cfg: Mapping[str, Any], model: str | Path) -> list[str]:
    """Every ``train.peft`` module name that matches nothing LoRA can train in the model folder ``model``.

    ``target_modules`` (and ``vision_target_modules`` with ``vision``) are matched as PEFT matches the
    pattern :func:`olmpipe.job.peft.target_modules` builds (a full match below the architecture's
    language-model or vision prefix), each name on its own: a name that matches nothing would be
    ignored by PEFT beside others that match, and alone ends training with PEFT's error after the
    model was loaded. A name that matches modules LoRA cannot adapt (e.g. ``mlp``) fails in PEFT too.
    ``modules_to_save`` names match like PEFT's (a module name ending with it); one that matches
    nothing would train nothing, silently. Empty when LoRA is off or ``model`` is no folder yet.
    """
    from olmpipe.job.peft import PeftSetupError, model_parts, module_pattern

    if not peft_cfg["enabled"]:
        return []
    found = module_shapes(model)
    if found is None:
        logger.info("train.peft module names not checked yet: %s has no config.json (checked when the job starts)",
                    model)
        return []
    model_type, shapes = found
    names = {name: kind for name, (kind, _, _) in shapes.items()}
    try:
        parts = model_parts(model_type)
    except PeftSetupError as exc:
        return [str(exc)]
    groups = [("target_modules", parts.language_model, "language model")]
    if peft_cfg["vision"]:
        groups.append(("vision_target_modules", parts.vision, "vision tower"))
    problems = []
    adapted: list[tuple[int, str, str, int, int]] = []  # (min(in, out), leaf, part, in, out) of every adapted layer
    for key, prefix, part in groups:
        # vision_target_modules: null adapts the architecture's vision linears (olmpipe.job.peft.target_modules)
        given = peft_cfg[key] if peft_cfg[key] is not None else parts.vision_linears
        for name in given:
            pattern = re.compile(module_pattern(prefix, [name]))
            matched = {n: kind for n, kind in names.items() if pattern.fullmatch(n)}
            if not matched:
                problems.append(f"train.peft.{key}: {name!r} names no module of the {part} ({prefix}) of {model} "
                                f"({model_type}); its layers LoRA can adapt: {_layers(names, prefix)}")
                continue
            adapted += [(min(shapes[n][1:]), n.rsplit(".", 1)[-1], part, *shapes[n][1:]) for n in matched
                        if min(shapes[n][1:]) > 0]
            other = sorted({kind for kind in matched.values() if kind not in LORA_LAYERS})
            if other:
                problems.append(f"train.peft.{key}: {name!r} names {', '.join(other)} modules of the {part} of "
                                f"{model}, which LoRA cannot adapt (linear, embedding and convolution layers only); "
                                f"name the layers inside them: {_layers(names, prefix)}")
    if adapted and int(peft_cfg["r"]) > min(adapted)[0]:
        width, leaf, part, fan_in, fan_out = min(adapted)
        problems.append(f"train.peft.r: {peft_cfg['r']} is larger than the smallest layer it adapts: {leaf} of the "
                        f"{part} of {model} is {fan_in} x {fan_out} (in x out features), and LoRA's update B A "
                        f"has rank min(in, out) at most, so a larger r adds r x (in + out) parameters per layer "
                        f"and no capacity; set train.peft.r to {width} or less (or leave {leaf} out of the targets)")
    for name in peft_cfg["modules_to_save"]:
        if not any(n.endswith(name) for n in names):
            leaves = sorted({n.rsplit(".", 1)[-1] for n, kind in names.items() if n.count(".") <= 2
                             and kind not in ("ModuleList", "ModuleDict") and not n.rsplit(".", 1)[-1].isdigit()})
            problems.append(f"train.peft.modules_to_save: {name!r} names no module of {model} ({model_type}): "
                            f"nothing would train beside the adapter (a module whose name ends with it is saved: e.g. "
                            f"{', '.join(leaves)})")
    return problems


def stale_embedded_model(cfg: Mapping[str, Any], model: str | Path) -> bool:
    """Whether ``model`` is the embedded model's folder built from other ``model.tiny`` settings than
    ``cfg``'s (its ``olmpipe_tiny.json``): rule ``build_model`` builds it again before the job runs,
    so its module names are not those the job will see (e.g. ``model.tiny.architecture: qwen3_vl``,
    whose vision MLP is ``linear_fc1``/``linear_fc2``, while the old folder is Qwen2.5-VL's)."""
    from olmpipe.records.models import TINY_SPEC_NAME

    model_cfg = cfg.get("model") or {}
    spec = Path(model) / TINY_SPEC_NAME
    if model_cfg.get("path") != "embedded" or not spec.is_file():
        return False
    try:
        built = json.loads(spec.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return True
    # a null setting (model.tiny.num_heads, image_mean) means the builder's default, which the
    # recorded spec holds resolved: only the settings given are compared
    return not isinstance(built, dict) or any(v is not None and built.get(k) != v
                                              for k, v in (model_cfg.get("tiny") or {}).items())


def job_problems(cfg: Mapping[str, Any], gpus: int, model: str | Path | None, kind: JobKind = GRPO) -> list[str]:
    """What a training job with ``gpus`` GPUs cannot train of ``cfg`` with the model folder ``model``
    (None, a folder that does not exist yet or an embedded model about to be rebuilt
    (:func:`stale_embedded_model`): the device checks only; the job checks its model when it starts)."""
    if model is not None and stale_embedded_model(cfg, model):
        logger.info("train.peft module names not checked yet: %s is rebuilt with other model.tiny settings first "
                    "(checked when the job starts)", model)
        model = None
    section = kind.section_of(cfg)
    device = job_device(section, gpus)
    where = (f"the training job has no GPU (GPUs: {gpus}, {kind.section}.device: {section['device']}), so it "
             "trains on the CPU" if device == "cpu" else f"the training job trains on {gpus} GPU(s)")
    problems = [f"{p} [{where}]" for p in device_problems(cfg, device, kind)]
    if model is not None:
        problems += module_problems(section["peft"], model)
    return problems


def check_job(cfg: Mapping[str, Any], device: str, model: str | Path, kind: JobKind = GRPO) -> None:
    """The trainer's preflight on its own device: raise :class:`JobSetupError` listing every problem."""
    problems = device_problems(cfg, device, kind) + module_problems(kind.section_of(cfg)["peft"], model)
    if problems:
        raise JobSetupError("this training job cannot run:\n" + "\n".join(f"  - {p}" for p in problems))
