#!/usr/bin/env bash
# Install olmpipe into a virtual environment, then optionally run a command inside it.
#
#   scripts/setup.sh [--dev] [-- COMMAND [ARGS...]]
#
#   scripts/setup.sh -- snakemake --cores all validate     # install, run the workflow
#   scripts/setup.sh --dev -- python -m pytest             # install with test tools, run the tests
#
# Environment:
#   OLMPIPE_VENV         virtual environment folder (default: .venv in the repository); made if missing
#   PYTHON               interpreter that makes it (default: python3.11)
#   OLMPIPE_TORCH_INDEX  pip index for torch, e.g. https://download.pytorch.org/whl/cpu on a machine
#                        whose default index would pull the multi-GB CUDA build (default: pip's own)
#
# torch is installed first and pinned (2.13.0): pyproject.toml only gives a range, and installing
# the package before torch would let pip pick the newest (CUDA) wheel.
set -euo pipefail

usage() { sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'; }

dev=0
while [[ $# -gt 0 ]]; do
    case "$1" in
        --dev) dev=1; shift ;;
        --) shift; break ;;
        -h|--help) usage; exit 0 ;;
        *) echo "setup.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    esac
done

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
venv="${OLMPIPE_VENV:-$repo/.venv}"
python="${PYTHON:-python3.11}"

if [[ ! -x "$venv/bin/python" ]]; then
    command -v "$python" >/dev/null || { echo "setup.sh: $python not found (olmpipe needs Python 3.11)" >&2; exit 1; }
    echo "setup.sh: creating virtual environment $venv with $python" >&2
    "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip install --quiet)

if ! "$venv/bin/python" -c 'import torch, sys; sys.exit(not torch.__version__.startswith("2.13.0"))' 2>/dev/null; then
    echo "setup.sh: installing torch 2.13.0" >&2
    "${pip[@]}" ${OLMPIPE_TORCH_INDEX:+--index-url "$OLMPIPE_TORCH_INDEX"} "torch==2.13.0"
fi
target="."
[[ $dev == 1 ]] && target=".[dev]"
echo "setup.sh: installing olmpipe ($target, editable)" >&2
"${pip[@]}" -e "$target"

if [[ $# -gt 0 ]]; then
    export VIRTUAL_ENV="$venv" PATH="$venv/bin:$PATH"
    exec "$@"
fi
