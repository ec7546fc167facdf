"""GPU check: the recipe's risky GPU paths in one run of at most 9 minutes on one GPU, as one table.

What no CPU test can show, each a row of the table (and of ``--json``):

- ``precision bf16``: one GRPO step of the embedded tiny model under ``single`` with bf16 mixed
  precision (``train.dtype: bfloat16``: float32 master weights, bf16 autocast; issue 19) at the
  recipe's learning rate 2e-6 moves nearly every tensor that the same step moves in float32
  (tensors and elements counted as in ``tests/test_train_precision.py``); ``pure_bf16`` (bf16
  weights, the explicit opt-out) is the control that loses the step.
- ``activation checkpointing``: the same step with ``train.grpo.activation_checkpointing: true``
  (TRL's gradient checkpointing on Qwen2.5-VL's vision and text blocks) moves the same weights.
- ``zero2 resume``: ZeRO-2 through ``accelerate launch`` with ``workflow/accelerate/zero2.yaml`` and
  DeepSpeed (one rank per GPU; on the CPU two ranks over gloo), 3 steps, then a run resumed from
  checkpoint-1: its final weights (DeepSpeed's float32 masters) equal the uninterrupted run's bit
  for bit.
- ``memory 7B (checkpointed)`` / ``(not checkpointed)``: random bf16 weights of Qwen2.5-VL-7B's
  shapes (policy and reference model), one 1288 px page (1656 image tokens, 6624 patches) and 3000
  completion tokens: the reference model's forward, then the policy's forward and backward with the
  completion log-probs computed as TRL does; the peak of ``torch.cuda.max_memory_allocated`` against
  ``olmpipe plan``'s estimate of the same terms (weights, gradients, reference, activations, vision
  activations, logits; AdamW states and the runtime reserve are not allocated by a probe). ``ok``
  when the plan does not underestimate (peak <= 1.1 x estimate).

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


# ----------------------------------------------------------------------------- memory probe


def _probe_shape(device: str) -> tuple[dict[str, Any], int, int]:
    """(config.json fields, page pixels, completion tokens) of the probe: Qwen2.5-VL-7B on a GPU, a
    model of the same structure with tiny widths on the CPU (head size kept: Qwen2.5-VL's mrope)."""
    from olmpipe.models.known import KNOWN_MODELS

    fields = dict(KNOWN_MODELS["Qwen/Qwen2.5-VL-7B-Instruct"])
    if device == "cuda":
        return fields, 1288, 3000
    tiny = {**fields, "hidden_size": 256, "intermediate_size": 512, "num_hidden_layers": 2, "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "vision_config": {**fields["vision_config"], "depth": 2, "hidden_size": 64, "intermediate_size": 128,
                              "num_heads": 4, "out_hidden_size": 256}}
    return tiny, 224, 32


def check_memory(device: str) -> list[dict[str, Any]]:
    """Rows ``memory 7B (checkpointed)`` and ``(not checkpointed)``, one probe after the other."""
    import gc

    import torch

    rows = []
    for checkpointing in (True, False):
        rows += _probe(device, checkpointing)
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    return rows


def _probe(device: str, checkpointing: bool) -> list[dict[str, Any]]:
    """Row ``memory 7B (...)``: measured peak of one probe step against the plan's terms."""
    import torch
    from transformers import AutoModelForImageTextToText, Qwen2_5_VLConfig

    from olmpipe.compat.trl import selective_log_softmax
    from olmpipe.config import load_config
    from olmpipe.plan import GIB, memory_plan, shape_from_config
    from olmpipe.prompts import PROMPT_TEXT_TOKENS

    fields, pixels, completion = _probe_shape(device)
    shape = shape_from_config(fields, "probe")
    cfg = load_config(overrides={
        "rasterize": {"longest_side": pixels},
        "train": {"dtype": "bfloat16", "pure_bf16": True, "grpo": {
            # one completion per micro-batch; num_generations 2 keeps the generation batch (1 x 2
            # accumulation steps) whole groups, as the config check requires
            "beta": 0.01, "per_device_train_batch_size": 1, "num_generations": 2, "max_completion_length": completion,
            "activation_checkpointing": checkpointing, "use_vllm": False}},
        "resources": {"train": {"strategy": "single", "gpu": 1, "gpu_memory_gb": 1000}}})
    plan = memory_plan(cfg, shape, 1)
    skip = {"optimizer states", "runtime reserve"}  # no optimizer step; the reserve is not allocated
    estimate = sum(t.gib for t in plan.train_terms if t.name not in skip)

    config = Qwen2_5_VLConfig(**{k: v for k, v in fields.items() if k != "model_type"})
    tokens, patches = shape.image_tokens(pixels)
    unit = shape.patch_size * shape.spatial_merge_size
    grid_h = max(1, round(pixels / unit)) * shape.spatial_merge_size
    grid_w = patches // grid_h
    if device == "cuda":
        torch.cuda.reset_peak_memory_stats()
    torch.manual_seed(0)
    with torch.device(device):
        policy = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
        reference = AutoModelForImageTextToText.from_config(config, dtype=torch.bfloat16)
    reference.eval().requires_grad_(False)
    policy.train()
    if checkpointing:
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    prompt = torch.randint(0, 100_000, (PROMPT_TEXT_TOKENS,))
    image = torch.full((tokens,), config.image_token_id)
    done = torch.randint(0, 100_000, (completion,))
    ids = torch.cat([prompt[:-1], torch.tensor([config.vision_start_token_id]), image,
                     torch.tensor([config.vision_end_token_id]), done])[None].to(device)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids), "image_grid_thw":
              torch.tensor([[1, grid_h, grid_w]], device=device), "use_cache": False,
              "pixel_values": torch.randn(patches, shape.in_chans * shape.temporal_patch_size * shape.patch_size ** 2,
                                          dtype=torch.bfloat16, device=device),
              "logits_to_keep": completion + 1}
    completion_ids = ids[:, -completion:]

    def logps(model: Any) -> Any:  # TRL 1.16 GRPOTrainer._get_per_token_logps_and_entropies
        logits = model(**inputs).logits[:, :-1, :] / 0.7
        return selective_log_softmax(logits, completion_ids)

    start = time.perf_counter()
    with torch.no_grad():
        ref = logps(reference)
    loss = -(torch.exp(logps(policy) - ref.detach())).mean()
    loss.backward()
    if device == "cuda":
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    label = f"memory 7B ({'checkpointed' if checkpointing else 'not checkpointed'})"
    terms = {t.name: round(t.gib, 6) for t in plan.train_terms}
    sequence = f"{ids.shape[1]} tokens ({tokens} image), {patches} patches"
    if device != "cuda":
        return [{"check": label, "status": "ok", "value": f"plan {estimate:.3g} GiB",
                 "detail": f"CPU: tiny widths, {sequence}; memory is measured on a GPU only; {seconds:.1f} s",
                 "data": {"plan_gib": estimate, "terms": terms}}]
    peak = torch.cuda.max_memory_allocated() / GIB
    ok = peak <= PLAN_SLACK * estimate
    return [{"check": label, "status": "ok" if ok else "failed",
             "value": f"{peak:.1f} / {estimate:.1f} GiB",
             "detail": f"peak allocated / plan's estimate ({peak / estimate:.2f}x; optimizer states and reserve "
                       f"left out); {shape.parameters() / 1e9:.2f}B params, {sequence}; {seconds:.1f} s",
             "data": {"peak_gib": peak, "plan_gib": estimate, "terms": terms}}]


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
    raise ValueError(f"unknown check {name!r}")


#: (check, its rows if it cannot run, seconds it may take on the GPU / the CPU)
CHECKS = [("precision", ["precision bf16", "activation checkpointing"], 240, 600),
          ("zero2", ["zero2 resume"], 300, 600),
          ("memory", ["memory 7B (checkpointed)", "memory 7B (not checkpointed)"], 200, 240)]


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


#: What the environment row prints: versions and the GPU.
ENVIRONMENT = ("import sys, torch, transformers\n"
               "gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'no GPU'\n"
               "print(f'python {sys.version.split()[0]}, torch {torch.__version__}, transformers '\n"
               "      f'{transformers.__version__}, {gpu}')")


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
                               timeout=300, check=False)
        rows.append({"check": "environment", "status": "ok" if probe.returncode == 0 else "failed",
                     "value": device, "detail": (probe.stdout.strip() or probe.stderr[-300:])
                     + (f"; from the wheelhouse: {', '.join(installed) or 'nothing'}" if args.wheelhouse else "")
                     + (f"; requirement conflicts: {'; '.join(conflicts)}" if conflicts else "")})
        cuda = "no GPU" not in probe.stdout
        imports: set[str] = set()
        only = set(args.only.split(",")) if args.only else None
        for name, labels, gpu_s, cpu_s in CHECKS:
            if only is not None and name not in only:
                continue
            limit = cpu_s if args.cpu else gpu_s
            if not args.cpu and not cuda:
                rows += [{"check": c, "status": "skipped", "value": "", "detail": "not run: no GPU"} for c in labels]
                continue
            if not args.cpu and time.monotonic() - started + limit > BUDGET_S + 60:
                rows += [{"check": c, "status": "skipped", "value": "", "detail": "out of the 9-minute budget"}
                         for c in labels]
                continue
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
    seconds = time.monotonic() - started
    sys.stdout.write(_table(rows) + f"{seconds:.0f} s in all\n")
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "seconds": seconds, "rows": rows,
                                               "imports": sorted(imports)}, indent=2) + "\n")
    return 0 if all(r["status"] != "failed" for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
