"""GPU check: the recipe's risky GPU paths in one run of at most 9 minutes on one GPU, as one table.

What no CPU test can show, each a row of the table (and of ``--json``), in the order they run (each
row's estimated seconds on one H200 in :data:`CHECKS`; none has run on a GPU yet):

- ``environment``: versions, the GPU, and on a node with NVIDIA GPUs the driver and what the
  training job's package check says (issue 31, item 18: a driver too old for torch's CUDA stops a
  job; here it must pass).
- ``load peak 7B zero3 (1 rank)`` (item 11): Qwen2.5-VL-7B's shapes built as a ZeRO-3 job loads them
  once its TRL config exists (``HfDeepSpeedConfig``, then ``zero.Init``): the float32 policy asked
  for and the bf16 reference, partitioned in bf16; the peak against the plan's load terms at one rank,
  the float32 policy built whole (the old load) as the control.
- ``memory 3B fp32 autocast step`` (item 12): the recipe's full fine-tune of Qwen2.5-VL-3B's shapes --
  float32 masters, a bf16 reference, DDP (one rank) under bf16 autocast with activation
  checkpointing, one 1288 px page and 3000 completion tokens through TRL's fused LM head, backward,
  a fused AdamW step -- with and without DDP's gradient bucket views: the peak against the plan
  (autocast's weight copies and the float32 residual stream counted), and the saving of the views.
- ``lora 7B step + merge round trip`` (item 20): config/olmocr2-lora-1gpu.yaml's adapter on a bf16 base
  of the 7B's shapes, one step at lr 2e-6 (the peak against the LoRA plan); then two passes of the
  merged weights the vLLM sync streams leave the base bit-identical and give W + (alpha/r) B A,
  while TRL's in-place merge/unmerge (the control) rounds it.
- ``precision bf16``: one GRPO step of the embedded tiny model under ``single`` with bf16 mixed
  precision (``train.dtype: bfloat16``: float32 master weights, bf16 autocast; issue 19) at the
  recipe's learning rate 2e-6 moves nearly every tensor that the same step moves in float32
  (tensors and elements counted as in ``tests/test_train_precision.py``); ``pure_bf16`` (bf16
  weights, the explicit opt-out) is the control that loses the step.
- ``activation checkpointing``: the same step with ``train.grpo.activation_checkpointing: true``
  (TRL's gradient checkpointing on Qwen2.5-VL's vision and text blocks) moves the same weights.
- ``memory 7B (checkpointed)``: random bf16 weights of Qwen2.5-VL-7B's shapes (policy and reference
  model), one 1288 px page (1656 image tokens, 6624 patches) and 3000 completion tokens: the
  reference model's forward, then the policy's forward and backward, the completion log-probs through
  TRL 1.16's fused LM head as GRPOTrainer computes them; the peak of ``torch.cuda.max_memory_allocated``
  against ``olmpipe plan``'s estimate of the same terms (AdamW states and the runtime reserve are not
  allocated by a probe). ``ok`` when the plan does not underestimate (peak <= 1.1 x estimate), as for
  the other memory rows.
- ``qlora tiny step`` (item 20): the embedded tiny model trained one step with a 4-bit base
  (bitsandbytes, carried in the wheelhouse): the adapter moves and the merged model/ is the float32
  base plus the adapter's update.
- ``zero2 resume``: ZeRO-2 through ``accelerate launch`` with ``workflow/accelerate/zero2.yaml`` and
  DeepSpeed (one rank per GPU; on the CPU two ranks over gloo), 3 steps, then a run resumed from
  checkpoint-1: its final weights (DeepSpeed's float32 masters) equal the uninterrupted run's bit
  for bit.
- ``vllm sync (items 13-15)``: always skipped -- a colocated MoE engine on Blackwell, a server and
  a trainer GPU, two server-mode jobs on one node need a multi-GPU machine with vLLM.

A check not started within the budget is skipped ("out of the 9-minute budget"), and each runs
with at most what is left of it, so the table never takes longer.

Every row has a status (``ok``, ``failed``, ``skipped`` and why); each check runs in a child process
with a time limit, so a crash or out-of-memory costs its row, not the table. Without a GPU (and
without ``--cpu``) every check row reads "not run: no GPU".

On a GPU machine (no network needed; nothing is downloaded)::

    python benchmarks/gpu_check.py --json gpu_check.json [--wheelhouse .whl]

CPU mode (tiny shapes, two ranks over gloo, about a minute; ``tests/test_gpu_check.py`` runs it)::

    python benchmarks/gpu_check.py --cpu --json gpu_check.json

A GPU machine that has torch and transformers but not the rest (TRL, datasets, DeepSpeed, ...)
gets them as a wheelhouse of small files (under 64 MiB) made here, on a machine with network::

    echo /.whl/ >> .git/info/exclude
    python benchmarks/gpu_check.py --prepare-wheelhouse .whl --python-version 3.12

``--wheelhouse .whl`` then installs (``--no-deps``, into a folder of the run) the wheels whose
distribution the GPU machine lacks. With this project's device tool (one H200, Python 3.12, torch
and transformers installed, no network)::

    run(command="PYTHONUNBUFFERED=1 python3 benchmarks/gpu_check.py --wheelhouse .whl --json $OUT/gpu_check.json",
        carry=[".whl"], timeout_s=600)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
TESTS = REPO / "tests"
#: The GPU run's budget (the issue's 9 minutes); checks not started by then are skipped.
BUDGET_S = 9 * 60
LR = 2e-6  # olmOCR 2's learning rate (config/olmocr2.yaml)
#: Shares a bf16 mixed-precision step must reach (tests/test_train_precision.py).
TENSOR_SHARE, ELEMENT_SHARE = 0.95, 0.9
#: The plan may overestimate; above this ratio of measured to estimated memory it underestimates.
PLAN_SLACK = 1.1
#: Distributions the check imports that a GPU machine with torch and transformers may lack, carried
#: as wheels (``--prepare-wheelhouse``), at this environment's versions. ``pure`` wheels serve any
#: Python; the others are fetched for ``--python-version``. DeepSpeed is built from its sdist.
WHEELHOUSE = {
    "trl": "pure", "accelerate": "pure", "datasets": "pure", "dill": "pure", "multiprocess": "binary",
    "deepspeed": "sdist", "hjson": "pure", "pydantic": "pure", "pydantic-core": "binary",
    "annotated-types": "pure", "typing-inspection": "pure", "jsonschema": "pure",
    "jsonschema-specifications": "pure", "referencing": "pure", "rpds-py": "binary",
    "bitsandbytes": "binary",  # the qlora row (about 43 MB for manylinux x86_64; the rest is under 8 MiB)
}
#: Distributions the check imports that the project's GPU image has (KINDS.md, nvidia-h200 package
#: list, 2026-11-17): ``tests/test_gpu_check.py`` fails when the check imports anything else.
DEVICE_HAS = {
    "torch", "transformers", "tokenizers", "safetensors", "huggingface-hub", "hf-xet", "numpy", "pillow",
    "pyyaml", "packaging", "filelock", "fsspec", "regex", "tqdm", "requests", "urllib3", "idna", "certifi",
    "charset-normalizer", "jinja2", "markupsafe", "typing-extensions", "attrs", "psutil", "pyarrow", "pandas",
    "python-dateutil", "six", "xxhash", "aiohttp", "aiosignal", "aiohappyeyeballs", "frozenlist", "multidict",
    "yarl", "propcache", "sympy", "mpmath", "networkx", "triton", "einops", "msgpack", "ninja", "py-cpuinfo",
    "anyio", "h11", "httpcore", "httpx", "tabulate", "protobuf", "rich", "markdown-it-py", "mdurl",
    "pygments", "click", "typer", "shellingham", "setuptools", "nvidia-ml-py", "cuda-bindings",
    "cuda-pathfinder", "cuda-toolkit", "annotated-doc", "zipp", "peft",
}
#: Imported here only because this environment has them (wandb's optional import by transformers and
#: TRL, huggingface_hub 2's HTTP stack): a GPU machine without them runs the check the same.
OPTIONAL = {"wandb", "googleapis-common-protos", "sentry-sdk", "gitpython", "gitdb", "smmap", "setproctitle",
            "httpx2", "httpcore2", "truststore", "platformdirs", "sniffio"}
OPTIONAL_PREFIXES = ("opentelemetry-",)


def _env(extra_path: list[str] | None = None) -> dict[str, str]:
    """The children's environment: the repository and tests/ importable, no hub, no wandb."""
    paths = [*(extra_path or []), str(REPO), str(TESTS), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p), "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "WANDB_MODE": "disabled",
            "TOKENIZERS_PARALLELISM": "false"}


# ----------------------------------------------------------------------------- tiny GRPO runs


def _job(device: str, dtype: str, *, pure_bf16: bool = False, **grpo: Any) -> dict[str, Any]:
    """One seed's config: one step at lr 2e-6 with a reference model (the recipe's beta)."""
    base = {"max_steps": 1, "num_generations": 4, "per_device_train_batch_size": 4,
            "gradient_accumulation_steps": 1, "max_completion_length": 8 if device == "cpu" else 32,
            "learning_rate": LR, "lr_scheduler_type": "constant", "warmup_steps": 0, "beta": 0.01,
            "save_steps": 1, "logging_steps": 1}
    return {"train": {"wandb": {"mode": "disabled"}, "device": device, "dtype": dtype, "pure_bf16": pure_bf16,
                      "grpo": {**base, **grpo}},
            "rewards": {"bench": {"processes": 0}}, "resources": {"train": {"cpus_per_task": 1}}}


def _train(setup: dict[str, Path], name: str, job: dict[str, Any]) -> Path:
    """Train one seed in this process with a reward the tiny model moves (tests/trainkit.py)."""
    from trainkit import LowIdReward

    from olmpipe.config import load_config
    from olmpipe.train.run import train_seed

    run = setup["work"] / name
    code = train_seed(load_config(overrides=job), seed=0, model_path=setup["model"], pages=setup["pages"],
                      tests_dir=setup["tests"], run_dir=run, reward_funcs=[LowIdReward()])
    if code != 0:
        raise RuntimeError(f"{name}: train_seed returned {code}")
    return run / "model"


def check_precision(setup: dict[str, Path], device: str) -> list[dict[str, Any]]:
    """Rows ``precision bf16`` and ``activation checkpointing`` (see the module docstring)."""
    from safetensors.torch import load_file
    from trainkit import moved_elements, moved_summary

    reference = moved_elements(setup["model"], _train(setup, "float32", _job(device, "float32")))
    start = time.perf_counter()
    mixed = _train(setup, "bf16", _job(device, "bfloat16"))
    step_s = time.perf_counter() - start
    pure = _train(setup, "pure-bf16", _job(device, "bfloat16", pure_bf16=True))
    got = moved_summary(moved_elements(setup["model"], mixed), reference)
    control = moved_summary(moved_elements(setup["model"], pure), reference)
    dtypes = {str(t.dtype) for t in load_file(str(mixed / "model.safetensors")).values()}
    ok = got["tensor_share"] >= TENSOR_SHARE and got["element_share"] >= ELEMENT_SHARE and dtypes == {"torch.float32"}
    rows = [{"check": "precision bf16", "status": "ok" if ok else "failed",
             "value": f"{got['moved_tensors']}/{got['trained_tensors']} tensors",
             "detail": (f"lr {LR:g}: elements {got['element_share']:.1%} of float32's; final model {sorted(dtypes)}; "
                        f"pure_bf16 control {control['moved_tensors']}/{control['trained_tensors']} tensors; "
                        f"{step_s:.1f} s incl. start"),
             "data": {"mixed": got, "pure_bf16": control}}]

    ckpt = _train(setup, "bf16-checkpointing", _job(device, "bfloat16", activation_checkpointing=True))
    a, b = load_file(str(mixed / "model.safetensors")), load_file(str(ckpt / "model.safetensors"))
    base = load_file(str(setup["model"] / "model.safetensors"))
    diff = max((a[k] - b[k]).abs().max().item() for k in a)
    update = max((a[k] - base[k].to(a[k].dtype)).abs().max().item() for k in a)
    moved = moved_summary(moved_elements(setup["model"], ckpt), reference)
    ok = moved["tensor_share"] >= TENSOR_SHARE and diff <= 0.05 * update
    rows.append({"check": "activation checkpointing", "status": "ok" if ok else "failed",
                 "value": f"max |dw| {diff:.2g}",
                 "detail": f"vs the step without it (largest update {update:.2g}); "
                           f"{moved['moved_tensors']}/{moved['trained_tensors']} tensors moved",
                 "data": {"max_abs_diff": diff, "largest_update": update}})
    return rows


def check_zero2(setup: dict[str, Path], device: str) -> list[dict[str, Any]]:
    """Row ``zero2 resume``: accelerate + DeepSpeed ZeRO-2, a run resumed from checkpoint-1 equals
    the uninterrupted one bitwise."""
    import importlib.util

    import torch
    from safetensors.torch import load_file

    if importlib.util.find_spec("deepspeed") is None:
        return [{"check": "zero2 resume", "status": "skipped", "value": "", "detail": "deepspeed is not installed"}]
    ranks = 1 if device == "cuda" else 2
    # The job config plans one process (no resources.train.gpu): with 2 ranks on CPU, 2 accumulated
    # micro-batches of 2 keep one process's generation batch a whole group for the config check.
    job = _job(device, "bfloat16", max_steps=3, per_device_train_batch_size=4 // ranks,
               gradient_accumulation_steps=ranks, num_generations=4, learning_rate=1e-5, save_total_limit=None)

    def launch(run: Path) -> None:
        env = _env()
        if device == "cpu":
            env["CUDA_VISIBLE_DEVICES"] = ""
        cmd = [sys.executable, "-m", "accelerate.commands.launch", "--config_file",
               str(REPO / "workflow" / "accelerate" / "zero2.yaml"), "--num_processes", str(ranks),
               "--main_process_port", str(24000 + os.getpid() % 8000), str(TESTS / "lowid_train.py"),
               str(setup["model"]), str(setup["pages"]), str(setup["tests"]), str(run), json.dumps(job)]
        proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=400, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"accelerate launch ({run.name}) exited {proc.returncode}: {proc.stderr[-1500:]}")

    start = time.perf_counter()
    full, resumed = setup["work"] / "zero2-full", setup["work"] / "zero2-resumed"
    launch(full)
    seconds = time.perf_counter() - start
    resumed.mkdir()
    shutil.copytree(full / "checkpoint-1", resumed / "checkpoint-1")
    launch(resumed)
    x, y = (load_file(str(run / "model" / "model.safetensors")) for run in (full, resumed))
    base = load_file(str(setup["model"] / "model.safetensors"))
    equal = set(x) == set(y) and all(torch.equal(x[k], y[k]) for k in x)
    moved = sum(int((x[k] != base[k].to(x[k].dtype)).any()) for k in base)
    ok = equal and moved > 0.9 * len(base) and {str(t.dtype) for t in x.values()} == {"torch.float32"}
    return [{"check": "zero2 resume", "status": "ok" if ok else "failed",
             "value": "bitwise equal" if equal else "differs",
             "detail": f"{ranks} rank(s), 3 steps, resumed from checkpoint-1; {moved}/{len(base)} tensors moved; "
                       f"{seconds:.0f} s for the first run",
             "data": {"equal": equal, "moved_tensors": moved, "ranks": ranks}}]


# ----------------------------------------------------------------------------- memory probes

SEVEN_B, THREE_B = "Qwen/Qwen2.5-VL-7B-Instruct", "Qwen/Qwen2.5-VL-3B-Instruct"


def _probe_shape(device: str, model: str = SEVEN_B) -> tuple[dict[str, Any], int, int]:
    """(config.json fields, page pixels, completion tokens) of a probe: ``model``'s shapes on a GPU, a
    model of the same structure with tiny widths on the CPU (head size kept: Qwen2.5-VL's mrope)."""
    from olmpipe.models.known import KNOWN_MODELS

    fields = dict(KNOWN_MODELS[model])
    if device == "cuda":
        return fields, 1288, 3000
    tiny = {**fields, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vision_config": {**fields["vision_config"], "depth": 2, "hidden_size": 64, "intermediate_size": 128,
                              "num_heads": 4, "out_hidden_size": 256}}
    return tiny, 224, 32


def _probe_config(fields: dict[str, Any]) -> Any:
    from transformers import Qwen2_5_VLConfig

    return Qwen2_5_VLConfig(**{k: v for k, v in fields.items() if k != "model_type"})


def _probe_plan(fields: dict[str, Any], pixels: int, completion: int, **train: Any) -> Any:
    """``olmpipe plan`` of one probe step: one page and one completion per micro-batch, beta 0.01,
    one process on a GPU (``single``: ddp's terms with one rank), no vLLM."""
    from olmpipe.config import deep_update, load_config
    from olmpipe.plan import memory_plan, shape_from_config

    overrides = {
        "rasterize": {"longest_side": pixels},
        "train": {"dtype": "bfloat16", "grpo": {
            # num_generations 2 keeps the generation batch (1 x 2 accumulation steps) whole groups
            "beta": 0.01, "per_device_train_batch_size": 1, "num_generations": 2, "max_completion_length": completion,
            "activation_checkpointing": True, "use_vllm": False}},
        "resources": {"train": {"strategy": "single", "gpu": 1, "gpu_memory_gb": 1000}}}
    deep_update(overrides, {"train": train})
    return memory_plan(load_config(overrides=overrides), shape_from_config(fields, "probe"), 1)


#: Terms a probe step does not allocate: the reserve (CUDA context, allocator slack) and the KV
#: cache of transformers' generate() (the probe does not generate).
NOT_ALLOCATED = {"runtime reserve", "generation KV cache"}


def _estimate(plan: Any, skip: set[str] = frozenset()) -> float:
    return sum(t.gib for t in plan.train_terms if t.name not in NOT_ALLOCATED | set(skip))


def _probe_inputs(fields: dict[str, Any], pixels: int, completion: int, device: str) -> tuple[dict[str, Any], Any]:
    """(model inputs, labels) of one page and ``completion`` completion tokens; the labels score the
    completion only, as TRL 1.16 does (``grpo_trainer.py`` 1492-1498)."""
    import torch

    from olmpipe.plan import shape_from_config
    from olmpipe.prompts import PROMPT_TEXT_TOKENS

    shape, config = shape_from_config(fields, "probe"), _probe_config(fields)
    tokens, patches = shape.image_tokens(pixels)
    unit = shape.patch_size * shape.spatial_merge_size
    grid_h = max(1, round(pixels / unit)) * shape.spatial_merge_size
    grid_w = patches // grid_h
    torch.manual_seed(0)
    prompt = torch.randint(0, 100_000, (PROMPT_TEXT_TOKENS,))
    image = torch.full((tokens,), config.image_token_id)
    done = torch.randint(0, 100_000, (completion,))
    ids = torch.cat([prompt[:-1], torch.tensor([config.vision_start_token_id]), image,
                     torch.tensor([config.vision_end_token_id]), done])[None].to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "image_grid_thw":
              torch.tensor([[1, grid_h, grid_w]], device=device),
              "pixel_values": torch.randn(patches, shape.in_chans * shape.temporal_patch_size * shape.patch_size ** 2,
                                          dtype=torch.bfloat16, device=device)}
    labels = ids.clone()
    labels[:, :-completion] = -100
    return inputs, labels


def _sequence(inputs: dict[str, Any]) -> str:
    ids, patches = inputs["input_ids"], inputs["pixel_values"].shape[0]
    return f"{ids.shape[1]} tokens, {patches} patches"


def _build(fields: dict[str, Any], device: str | None, dtype: Any) -> Any:
    """A model of ``fields``' shapes with random weights, built on ``device`` in ``dtype`` (None: where
    transformers builds it: under ZeRO-3, DeepSpeed's ``zero.Init`` places the partitions)."""
    import contextlib

    import torch
    from transformers import AutoModelForImageTextToText

    torch.manual_seed(0)
    with torch.device(device) if device is not None else contextlib.nullcontext():
        return AutoModelForImageTextToText.from_config(_probe_config(fields), dtype=dtype)


def _log_probs(model: Any, inputs: dict[str, Any], labels: Any, device: str) -> Any:
    """The completion's log-probs through TRL's fused LM head under bf16 autocast (``grpo_trainer.py``
    1497-1498; accelerate's autocast of the forward, ``utils/modeling.py`` 2099-2113)."""
    import torch

    with torch.autocast(device, dtype=torch.bfloat16):
        return model(**inputs, labels=labels, fused_lm_head=True).log_probs


def _peak_reset(device: str) -> None:
    import gc

    import torch

    gc.collect()
    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def _peak(device: str) -> float:
    import torch

    from olmpipe.plan import GIB

    if device != "cuda":
        return 0.0
    torch.cuda.synchronize()
    return torch.cuda.max_memory_allocated() / GIB


def _world_of_one(device: str, *, deepspeed: bool = False) -> None:
    """A process group of this one process (nccl on the GPU, gloo on the CPU), as a rank of a job
    (``deepspeed``: through DeepSpeed's ``init_distributed``, as its engine makes it)."""
    import torch
    import torch.distributed as dist

    os.environ.update({"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(29000 + os.getpid() % 20000), "RANK": "0",
                       "LOCAL_RANK": "0", "WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1"})
    if device == "cuda":
        torch.cuda.set_device(0)
    backend = "nccl" if device == "cuda" else "gloo"
    if deepspeed:
        import deepspeed as ds

        ds.init_distributed(dist_backend=backend)
    elif not dist.is_initialized():
        dist.init_process_group(backend, rank=0, world_size=1)


def check_memory(device: str) -> list[dict[str, Any]]:
    """Row ``memory 7B (checkpointed)``: bf16 weights of Qwen2.5-VL-7B's shapes (policy and reference),
    one 1288 px page and 3000 completion tokens, the reference's forward, then the policy's forward and
    backward with activation checkpointing, the completion log-probs through TRL's fused LM head; the
    peak against the plan's terms (AdamW states, the reserve: not allocated)."""
    import torch

    from olmpipe.compat.trl import add_fused_lm_head

    fields, pixels, completion = _probe_shape(device)
    plan = _probe_plan(fields, pixels, completion, pure_bf16=True)
    estimate = _estimate(plan, {"optimizer states"})
    inputs, labels = _probe_inputs(fields, pixels, completion, device)
    _peak_reset(device)
    policy, reference = _build(fields, device, torch.bfloat16), _build(fields, device, torch.bfloat16)
    reference.eval().requires_grad_(False)
    policy.train().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for model in (policy, reference):
        add_fused_lm_head(model, temperature=0.7)
    start = time.perf_counter()
    with torch.no_grad():
        ref = _log_probs(reference, inputs, labels, device)
    loss = -(torch.exp(_log_probs(policy, inputs, labels, device) - ref.detach())).mean()
    loss.backward()
    peak, seconds = _peak(device), time.perf_counter() - start
    terms = {t.name: round(t.gib, 6) for t in plan.train_terms}
    label = "memory 7B (checkpointed)"
    if device != "cuda":
        return [{"check": label, "status": "ok", "value": f"plan {estimate:.3g} GiB",
                 "detail": f"CPU: tiny widths, {_sequence(inputs)}; memory is measured on a GPU only; {seconds:.1f} s",
                 "data": {"plan_gib": estimate, "terms": terms}}]
    ok = peak <= PLAN_SLACK * estimate
    return [{"check": label, "status": "ok" if ok else "failed", "value": f"{peak:.1f} / {estimate:.1f} GiB",
             "detail": f"peak allocated / plan's estimate ({peak / estimate:.2f}x; optimizer states and reserve left "
                       f"out); bf16 weights, TRL's fused LM head; {_sequence(inputs)}; {seconds:.1f} s",
             "data": {"peak_gib": peak, "plan_gib": estimate, "terms": terms}}]


def check_load(device: str) -> list[dict[str, Any]]:
    """Row ``load peak 7B zero3 (1 rank)`` (issue 31, item 11): Qwen2.5-VL-7B's shapes built as a
    ZeRO-3 job loads them once its TRL config exists (``HfDeepSpeedConfig``: transformers builds the
    model under ``deepspeed.zero.Init``, ``modeling_utils.py`` 1435-1446 -- the init context of
    ``from_pretrained`` too, 3820-3833), the float32 policy and the bf16 reference, in one rank: the
    peak against the plan's load terms at one rank, and the float32 policy built whole (the load before
    the fix) as the control."""
    import importlib.util

    import torch

    label = "load peak 7B zero3 (1 rank)"
    if importlib.util.find_spec("deepspeed") is None:
        return [{"check": label, "status": "skipped", "value": "", "detail": "deepspeed is not installed"}]
    from transformers.integrations import HfDeepSpeedConfig

    from olmpipe.config import load_config
    from olmpipe.plan import GIB, memory_plan, shape_from_config

    fields, pixels, completion = _probe_shape(device)
    shape = shape_from_config(fields, "probe")
    params = shape.parameters()
    _world_of_one(device, deepspeed=True)
    start = time.perf_counter()
    _peak_reset(device)
    whole = _build(fields, device, torch.float32)  # the float32 policy whole on the rank's GPU
    before = _peak(device)
    del whole
    # the job's order: the TRL config (its HfDeepSpeedConfig) first, then the models
    ds_config = {"train_micro_batch_size_per_gpu": 1, "gradient_accumulation_steps": 1, "bf16": {"enabled": True},
                 "zero_optimization": {"stage": 3}}
    keep = HfDeepSpeedConfig(ds_config)  # transformers keeps a weak reference: this object must live
    _peak_reset(device)
    policy = _build(fields, None, torch.float32)
    policy_peak = _peak(device)
    reference = _build(fields, None, torch.bfloat16)
    after, seconds = _peak(device), time.perf_counter() - start
    partitioned = all(hasattr(p, "ds_id") for p in policy.parameters())
    dtypes = sorted({str(p.dtype) for p in policy.parameters()})
    del policy, reference, keep
    # the plan's zero3 load terms: at 2 ranks (one rank runs as single), policy and reference scaled to 1
    cfg = load_config(overrides={"rasterize": {"longest_side": pixels}, "train": {"dtype": "bfloat16", "grpo": {
        "beta": 0.01, "per_device_train_batch_size": 1, "num_generations": 2, "max_completion_length": completion,
        "use_vllm": False}}, "resources": {"train": {"strategy": "zero3", "gpu": 2, "gpu_memory_gb": 1000}}})
    load = {t.name: t.gib for t in memory_plan(cfg, shape, 2).load_terms}
    estimate = 2 * (load["policy"] + load["reference model"]) + load["largest tensor gathered"]
    import torch.distributed as dist

    dist.destroy_process_group()
    data = {"peak_gib": after, "policy_gib": policy_peak, "float32_whole_gib": before, "plan_gib": estimate,
            "partitioned": partitioned, "dtypes": dtypes}
    shaped = partitioned and dtypes == ["torch.bfloat16"]
    if device != "cuda":
        return [{"check": label, "status": "ok" if shaped else "failed", "value": f"plan {estimate:.3g} GiB",
                 "detail": f"CPU (gloo): tiny widths; policy partitioned by zero.Init: {partitioned}, {dtypes}; "
                           f"memory is measured on a GPU only; {seconds:.1f} s", "data": data}]
    ok = shaped and after <= PLAN_SLACK * estimate and policy_peak <= 0.6 * before
    return [{"check": label, "status": "ok" if ok else "failed", "value": f"{after:.1f} / {estimate:.1f} GiB",
             "detail": f"peak building the policy (float32 asked) and the reference under zero.Init / the plan's "
                       f"load peak at 1 rank; policy alone {policy_peak:.1f} GiB ({dtypes}, partitioned: {partitioned}) "
                       f"vs {before:.1f} GiB whole in float32 ({params * 4 / GIB:.1f} = 4 B/param); {seconds:.1f} s",
             "data": data}]


def check_autocast(device: str) -> list[dict[str, Any]]:
    """Row ``memory 3B fp32 autocast step`` (issue 31, item 12): the recipe's full fine-tune on one GPU
    of Qwen2.5-VL-3B's shapes -- float32 masters, a bf16 reference, DDP (one rank) under bf16 autocast
    with activation checkpointing, the log-probs through TRL's fused LM head, backward and a fused
    AdamW step -- once without DDP's gradient bucket views and once with them (after a first step,
    so that both measure with the AdamW states in place): the peak with the views against the plan
    (autocast's weight copies and the float32 residual stream counted), and the saving of the views
    against the bucket copy they remove (4 B/param)."""
    import torch
    from torch.nn.parallel import DistributedDataParallel

    from olmpipe.compat.trl import add_fused_lm_head
    from olmpipe.plan import GIB, shape_from_config

    fields, pixels, completion = _probe_shape(device, THREE_B)
    plan = _probe_plan(fields, pixels, completion)
    estimate = _estimate(plan)
    params = shape_from_config(fields, "probe").parameters()
    inputs, labels = _probe_inputs(fields, pixels, completion, device)
    _world_of_one(device)
    policy, reference = _build(fields, device, torch.float32), _build(fields, device, torch.bfloat16)
    reference.eval().requires_grad_(False)
    policy.train().gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    for model in (policy, reference):
        add_fused_lm_head(model, temperature=0.7)
    optimizer = torch.optim.AdamW(policy.parameters(), lr=LR, weight_decay=0.0, fused=True)  # transformers' defaults
    peaks: dict[str, float] = {}
    start = time.perf_counter()
    for run, view in (("first step", True), ("without views", False), ("with views", True)):
        ddp = DistributedDataParallel(policy, gradient_as_bucket_view=view,
                                      device_ids=[0] if device == "cuda" else None)
        _peak_reset(device)
        with torch.no_grad():
            ref = _log_probs(reference, inputs, labels, device)
        ratio = torch.exp(_log_probs(ddp, inputs, labels, device) - ref)
        loss = -ratio.sum() / (labels != -100).sum()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        peaks[run] = _peak(device)
        del ddp, ref, ratio, loss
    seconds = time.perf_counter() - start
    import torch.distributed as dist

    dist.destroy_process_group()
    terms = {t.name: round(t.gib, 6) for t in plan.train_terms}
    label = "memory 3B fp32 autocast step"
    data = {"peaks_gib": peaks, "plan_gib": estimate, "terms": terms, "bucket_copy_gib": params * 4 / GIB}
    if device != "cuda":
        return [{"check": label, "status": "ok" if "autocast weight copies" in terms else "failed",
                 "value": f"plan {estimate:.3g} GiB",
                 "detail": f"CPU (gloo): tiny widths, {_sequence(inputs)}, 3 DDP steps; memory is measured on a GPU "
                           f"only; {seconds:.1f} s", "data": data}]
    saved = peaks["without views"] - peaks["with views"]
    ok = peaks["with views"] <= PLAN_SLACK * estimate and saved >= 0.9 * params * 4 / GIB
    return [{"check": label, "status": "ok" if ok else "failed",
             "value": f"{peaks['with views']:.1f} / {estimate:.1f} GiB",
             "detail": f"peak with bucket views / plan (reserve left out; autocast copies "
                       f"{terms['autocast weight copies']:.1f} GiB counted); without views {peaks['without views']:.1f} "
                       f"GiB: saves {saved:.1f} of the {params * 4 / GIB:.1f} GiB bucket copy; {_sequence(inputs)}; "
                       f"{seconds:.1f} s", "data": data}]


def check_lora(device: str) -> list[dict[str, Any]]:
    """Row ``lora 7B step + merge round trip`` (issue 31, item 20): config/olmocr2-lora-1gpu.yaml's
    adapter (r 32 on every linear layer of the language model) over a bf16 base of Qwen2.5-VL-7B's
    shapes, olmpipe's float32 adapter (``restore_fp32_adapter``), one autocast step at lr 2e-6 through
    TRL's fused head (the peak against the LoRA plan: docs/lora.md's figures, never measured before);
    then, with a non-zero adapter, two passes of the merged weights the vLLM sync streams
    (``merged_named_params``) must leave the base bit-identical and give W + (alpha/r) B A, while TRL's
    own in-place merge and unmerge (the control) rounds the base."""
    import torch
    from peft import get_peft_model

    from olmpipe.compat.trl import add_fused_lm_head
    from olmpipe.job.peft import lora_config, merged_named_params, restore_fp32_adapter
    from olmpipe.plan import load_configs

    fields, pixels, completion = _probe_shape(device)
    recipe = load_configs([REPO / "config" / "olmocr2-lora-1gpu.yaml"])["train"]["peft"]
    plan = _probe_plan(fields, pixels, completion, peft=dict(recipe))
    estimate = _estimate(plan)
    inputs, labels = _probe_inputs(fields, pixels, completion, device)
    _peak_reset(device)
    start = time.perf_counter()
    base = _build(fields, device, torch.bfloat16).requires_grad_(False)
    model = get_peft_model(base, lora_config(recipe, "qwen2_5_vl"))
    restore_fp32_adapter(model)
    model.train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.enable_input_require_grads()
    add_fused_lm_head(model.get_base_model(), temperature=0.7)
    trained = [p for p in model.parameters() if p.requires_grad]
    lora_b = [p for n, p in model.named_parameters() if p.requires_grad and "lora_B" in n]
    optimizer = torch.optim.AdamW(trained, lr=LR, weight_decay=0.0, fused=True)
    loss = -_log_probs(model, inputs, labels, device).sum() / (labels != -100).sum()
    loss.backward()
    optimizer.step()
    peak = _peak(device)
    moved = sum(int(bool(p.detach().abs().sum() > 0)) for p in lora_b)  # lora_B starts at zero
    del optimizer, loss
    with torch.no_grad():  # an adapter whose merge is visible in bf16
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.05)
    adapted = {n: p for n, p in model.named_parameters() if n.endswith("base_layer.weight")}
    kept = {n: p.detach().clone() for n, p in adapted.items()}
    for _ in range(2):
        for _name, tensor in merged_named_params(model):
            del tensor
    identical = all(torch.equal(adapted[n], kept[n]) for n in kept)
    name = next(iter(kept))
    layer = model.get_submodule(name.removesuffix(".base_layer.weight"))
    wanted = name.removeprefix("base_model.model.").replace(".base_layer", "")
    merged = next(t for n, t in merged_named_params(model) if n == wanted)
    a, b = layer.lora_A["default"].weight, layer.lora_B["default"].weight
    expected = (kept[name].float() + layer.scaling["default"] * (b.float() @ a.float())).to(kept[name].dtype)
    merge_ok = torch.allclose(merged.float(), expected.float(), atol=2e-2, rtol=1e-2)
    model.merge_adapter()
    model.unmerge_adapter()
    drifted = sum(int(not torch.equal(adapted[n], kept[n])) for n in kept)
    seconds = time.perf_counter() - start
    label = "lora 7B step + merge round trip"
    data = {"peak_gib": peak, "plan_gib": estimate, "moved": moved, "lora_b": len(lora_b), "identical": identical,
            "merge_ok": merge_ok, "control_drifted": drifted, "adapted": len(kept)}
    shaped = moved == len(lora_b) > 0 and identical and merge_ok
    detail = (f"{moved}/{len(lora_b)} lora_B moved at lr {LR:g}; base bit-identical after 2 merged "
              f"passes: {identical}, merged = W + s B A: {merge_ok}; TRL's merge/unmerge (control) changed "
              f"{drifted}/{len(kept)} base weights; {seconds:.1f} s")
    if device != "cuda":
        return [{"check": label, "status": "ok" if shaped else "failed", "value": f"plan {estimate:.3g} GiB",
                 "detail": "CPU: tiny widths; " + detail, "data": data}]
    ok = shaped and peak <= PLAN_SLACK * estimate
    return [{"check": label, "status": "ok" if ok else "failed", "value": f"{peak:.1f} / {estimate:.1f} GiB",
             "detail": f"peak / LoRA plan (r {recipe['r']}, reserve left out); " + detail, "data": data}]


def check_qlora(setup: dict[str, Path], device: str) -> list[dict[str, Any]]:
    """Row ``qlora tiny step`` (issue 31, item 20): ``train_seed`` on the embedded tiny model with
    ``train.peft.quantization: 4bit`` (bitsandbytes, GPU only): the adapter moves, and the merged
    ``model/`` is the float32 base plus (alpha/r) B A of ``adapter/``."""
    import importlib.util

    from safetensors.torch import load_file

    label = "qlora tiny step"
    if device != "cuda":
        return [{"check": label, "status": "skipped", "value": "",
                 "detail": "bitsandbytes' quantized layers do not train on the CPU (olmpipe/job/peft.py)"}]
    if importlib.util.find_spec("bitsandbytes") is None:
        return [{"check": label, "status": "skipped", "value": "", "detail": "bitsandbytes is not installed"}]
    job = _job(device, "bfloat16", learning_rate=1e-3)
    job["train"]["peft"] = {"enabled": True, "quantization": "4bit", "r": 4, "alpha": 8}
    start = time.perf_counter()
    final = _train(setup, "qlora", job)
    adapter = load_file(str(final.parent / "adapter" / "adapter_model.safetensors"))
    merged, base = load_file(str(final / "model.safetensors")), load_file(str(setup["model"] / "model.safetensors"))
    moved = sum(int(bool(t.abs().sum() > 0)) for k, t in adapter.items() if "lora_B" in k)
    lora_b = sum(1 for k in adapter if "lora_B" in k)
    worst = 0.0
    for key, a in adapter.items():
        if ".lora_A." not in key:
            continue
        target = key.removeprefix("base_model.model.").replace(".lora_A.weight", ".weight")
        name = target if target in merged else target.replace("model.language_model.", "model.")
        b = adapter[key.replace("lora_A", "lora_B")].float()
        expected = base[name].float() + (8 / 4) * (b @ a.float())
        worst = max(worst, (merged[name].float() - expected).abs().max().item())
    ok = moved == lora_b > 0 and worst <= 1e-5
    return [{"check": label, "status": "ok" if ok else "failed", "value": f"{moved}/{lora_b} lora_B moved",
             "detail": f"4-bit base, 1 step; merged model/ - (base + s B A): max |d| {worst:.2g}; "
                       f"{time.perf_counter() - start:.1f} s", "data": {"moved": moved, "max_abs_diff": worst}}]


# ----------------------------------------------------------------------------- orchestration


def _setup(work: Path) -> dict[str, Path]:
    from trainkit import make_page_index

    from olmpipe.models.tiny import build_tiny_model

    model = work / "tiny"
    if not (model / "config.json").exists():
        build_tiny_model(model, seed=0)
    pages, tests = make_page_index(work / "data")
    return {"work": work, "model": model, "pages": pages, "tests": tests}


def _imported_distributions() -> list[str]:
    """The installed distributions this process imported (what a GPU machine must have)."""
    import importlib.metadata

    names = importlib.metadata.packages_distributions()
    found = {d.lower().replace("_", "-") for m in list(sys.modules) for d in names.get(m.split(".")[0], [])}
    return sorted(found - {"olmpipe"})


def run_check(name: str, device: str, work: Path) -> list[dict[str, Any]]:
    """One check in this process (the child's side of :func:`main`)."""
    if device == "cpu":
        import torch

        torch.set_num_threads(1)
    if name == "precision":
        return check_precision(_setup(work), device)
    if name == "zero2":
        return check_zero2(_setup(work), device)
    if name == "memory":
        return check_memory(device)
    if name == "load":
        return check_load(device)
    if name == "autocast":
        return check_autocast(device)
    if name == "lora":
        return check_lora(device)
    if name == "qlora":
        return check_qlora(_setup(work), device)
    raise ValueError(f"unknown check {name!r}")


#: (check, its rows if it cannot run, estimated seconds on one H200 (child start included), the most
#: it may take there, the most on the CPU), in the order they run: the budget drops the last ones.
#: The estimates add up to 505 s (+ 10 s for the environment row) of the 540 s budget; none has run
#: on a GPU yet (README, benchmarks).
CHECKS = [("load", ["load peak 7B zero3 (1 rank)"], 75, 150, 300),
          ("autocast", ["memory 3B fp32 autocast step"], 70, 150, 300),
          ("lora", ["lora 7B step + merge round trip"], 60, 120, 300),
          ("precision", ["precision bf16", "activation checkpointing"], 110, 200, 600),
          ("memory", ["memory 7B (checkpointed)"], 50, 100, 240),
          ("qlora", ["qlora tiny step"], 40, 90, 120),
          ("zero2", ["zero2 resume"], 100, 200, 600)]
#: What one GPU cannot settle (issue 31): a row of its own, always skipped here.
MULTI_GPU_ROW = {"check": "vllm sync (items 13-15)", "status": "skipped", "value": "",
                 "detail": "needs a multi-GPU machine with vLLM (not on this device): 13, colocated Qwen3-VL-MoE on "
                           "Blackwell (or an H200 forced to moe_backend=flashinfer_cutlass); 14, a server GPU and a "
                           "trainer GPU; 15, two server-mode jobs on one node (4 GPUs). Their CPU tests: "
                           "tests/test_compat.py, tests/test_vllm_server.py"}


def install_wheelhouse(wheelhouse: Path, target: Path) -> list[str]:
    """Install (``--no-deps``) the wheels of ``wheelhouse`` whose distribution is missing here."""
    import importlib.metadata

    missing = []
    for wheel in sorted(wheelhouse.glob("*.whl")):
        dist = wheel.name.split("-")[0]
        try:
            importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            missing.append(wheel)
    if missing:
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-compile",
                        "--target", str(target), *map(str, missing)], check=True, timeout=300)
    return [w.name.split("-")[0] for w in missing]


def requirement_conflicts(dists: list[str]) -> list[str]:
    """Requirements of ``dists`` (those installed from the wheelhouse) that this machine's installed
    versions do not meet: the likely cause when a check then fails to import something."""
    import importlib.metadata

    from packaging.requirements import Requirement

    out = []
    for dist in dists:
        for line in importlib.metadata.requires(dist) or []:
            req = Requirement(line)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            try:
                have = importlib.metadata.version(req.name)
            except importlib.metadata.PackageNotFoundError:
                out.append(f"{dist} needs {req}, missing")
                continue
            if req.specifier and not req.specifier.contains(have, prereleases=True):
                out.append(f"{dist} needs {req}, found {have}")
    return out


def prepare_wheelhouse(out: Path, python_version: str) -> None:
    """Fetch :data:`WHEELHOUSE` at this environment's versions into ``out`` (needs the package index)."""
    import importlib.metadata

    out.mkdir(parents=True, exist_ok=True)
    tag = python_version.replace(".", "")
    platforms = [f"--platform=manylinux_2_{n}_x86_64" for n in (17, 24, 27, 28)] + ["--platform=manylinux2014_x86_64"]
    from olmpipe.job.packages import SUPPORTED

    for dist, kind in WHEELHOUSE.items():
        try:
            pin = f"{dist}=={importlib.metadata.version(dist)}"
        except importlib.metadata.PackageNotFoundError:  # DeepSpeed outside a GPU environment
            pin = f"{dist}{SUPPORTED[dist]}"
        if kind == "sdist":
            cmd = [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "-w", str(out), pin]
        else:
            cmd = [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:",
                   "-d", str(out), pin]
            if kind == "binary":
                cmd += ["--python-version", python_version, "--implementation", "cp", "--abi", f"cp{tag}",
                        *platforms]
        subprocess.run(cmd, check=True, timeout=600)
    size = sum(p.stat().st_size for p in out.iterdir())
    sys.stdout.write(f"{len(list(out.iterdir()))} files, {size / 2**20:.1f} MiB in {out}\n")


def _table(rows: list[dict[str, Any]]) -> str:
    width = max(len(r["check"]) for r in rows)
    lines = [f"{'check':<{width}}  {'status':<8}  {'value':<22}  detail"]
    lines += [f"{r['check']:<{width}}  {r['status']:<8}  {r['value']:<22}  {r['detail']}" for r in rows]
    return "\n".join(lines) + "\n"


#: What the environment row prints: versions, the GPU and, on a node with NVIDIA GPUs, the driver and
#: what the training job's package check says of them (issue 31, item 18: no false alarm here).
ENVIRONMENT = ("import sys, torch, transformers\n"
               "from olmpipe.job.packages import job_needs, nvidia_driver, nvidia_gpus, problems\n"
               "gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'\n"
               "line = (f'python {sys.version.split()[0]}, torch {torch.__version__}, transformers '\n"
               "        f'{transformers.__version__}, {gpu}')\n"
               "found = []\n"
               "if nvidia_gpus():\n"
               "    found = problems(job_needs(strategy='single', processes=1, cuda=True), import_modules=True)\n"
               "    line += f', NVIDIA driver {nvidia_driver()}, package check: ' + (found[0] if found else 'ok')\n"
               "print(line)\n"
               "sys.exit(1 if found else 0)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cpu", action="store_true", help="CPU mode: tiny shapes, two ranks over gloo")
    parser.add_argument("--json", default=None, help="also write the table (and each row's data) here")
    parser.add_argument("--wheelhouse", default=None, help="install the missing distributions from this folder")
    parser.add_argument("--prepare-wheelhouse", default=None, metavar="DIR",
                        help="fetch the wheels a GPU machine may lack into DIR (needs the package index)")
    parser.add_argument("--python-version", default=f"{sys.version_info.major}.{sys.version_info.minor}",
                        help="Python of the GPU machine, for --prepare-wheelhouse (default: this one)")
    parser.add_argument("--only", default=None, help="comma-separated checks to run (default: all)")
    parser.add_argument("--work", default=None, help="working folder (default: a temporary one)")
    parser.add_argument("--check", default=None, help=argparse.SUPPRESS)  # child: run one check
    parser.add_argument("--result", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    sys.path[:0] = [str(REPO), str(TESTS)]
    if args.prepare_wheelhouse:
        prepare_wheelhouse(Path(args.prepare_wheelhouse), args.python_version)
        return 0
    device = "cpu" if args.cpu else "cuda"
    if args.check:  # a child
        rows = run_check(args.check, device, Path(args.work))
        Path(args.result).write_text(json.dumps({"rows": rows, "imports": _imported_distributions()}))
        return 0

    started = time.monotonic()
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="olmpipe-gpu-check-") as tmp:
        work = Path(args.work or tmp)
        extra_path: list[str] = []
        installed: list[str] = []
        conflicts: list[str] = []
        if args.wheelhouse:
            import importlib

            installed = install_wheelhouse(Path(args.wheelhouse), work / "site")
            extra_path.append(str(work / "site"))
            sys.path.insert(0, str(work / "site"))
            importlib.invalidate_caches()
            conflicts = requirement_conflicts(installed)
        env = _env(extra_path)
        probe = subprocess.run([sys.executable, "-c", ENVIRONMENT], env=env, capture_output=True, text=True,
                               timeout=120, check=False)
        rows.append({"check": "environment", "status": "ok" if probe.returncode == 0 else "failed",
                     "value": device, "detail": (probe.stdout.strip() or probe.stderr[-300:])
                     + (f"; from the wheelhouse: {', '.join(installed) or 'nothing'}" if args.wheelhouse else "")
                     + (f"; requirement conflicts: {'; '.join(conflicts)}" if conflicts else "")})
        cuda = "no GPU" not in probe.stdout
        imports: set[str] = set()
        only = set(args.only.split(",")) if args.only else None
        for name, labels, estimate_s, gpu_s, cpu_s in CHECKS:
            if only is not None and name not in only:
                continue
            limit = cpu_s if args.cpu else gpu_s
            if not args.cpu and not cuda:
                rows += [{"check": c, "status": "skipped", "value": "", "detail": "not run: no GPU"} for c in labels]
                continue
            remaining = BUDGET_S - (time.monotonic() - started)
            if not args.cpu and remaining < estimate_s:
                rows += [{"check": c, "status": "skipped", "value": "", "detail": "out of the 9-minute budget"}
                         for c in labels]
                continue
            if not args.cpu:  # the table never takes longer than the budget
                limit = int(min(limit, remaining))
            result = work / f"{name}.json"
            cmd = [sys.executable, str(Path(__file__).resolve()), "--check", name, "--work", str(work / "runs" / name),
                   "--result", str(result), *(["--cpu"] if args.cpu else [])]
            (work / "runs" / name).mkdir(parents=True, exist_ok=True)
            begun = time.monotonic()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=limit, check=False)
                if proc.returncode != 0 or not result.exists():
                    raise RuntimeError(f"exit {proc.returncode}: {proc.stderr[-600:]}")
                child = json.loads(result.read_text())
                rows += [{**row, "seconds": round(time.monotonic() - begun, 1)} for row in child["rows"]]
                imports.update(child["imports"])
            except (subprocess.TimeoutExpired, RuntimeError) as exc:
                traceback.print_exc()
                reason = f"timed out after {limit} s" if isinstance(exc, subprocess.TimeoutExpired) else str(exc)
                rows += [{"check": c, "status": "failed", "value": "", "detail": reason.replace("\n", " ")[-400:]}
                         for c in labels]
        if only is None:
            rows.append(dict(MULTI_GPU_ROW))
    seconds = time.monotonic() - started
    sys.stdout.write(_table(rows) + f"{seconds:.0f} s in all\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "seconds": seconds, "rows": rows,
                                               "imports": sorted(imports)}, indent=2) + "\n")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
