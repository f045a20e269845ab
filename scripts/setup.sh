#!/usr/bin/env bash
# Set up kvspec on a fresh Linux machine: .venv with the CPU build of torch 2.13.0, the few
# packages vLLM's KV-cache imports need, kvspec itself (editable), and every supported vLLM
# release unpacked --no-deps into .vllm/<version>/ (pure Python: the CUDA kernels are
# deleted, the KV-cache code never loads them). Idempotent: a run with nothing to do only
# compares stamps and takes about a second.
#
#   scripts/setup.sh            # everything in impl/vllm-versions.txt
#   scripts/setup.sh 0.33.0     # only that release (plus the environment)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="${KVSPEC_VENV:-$root/.venv}"
trees="${KVSPEC_VLLM_HOME:-$root/.vllm}"
python_bin=${KVSPEC_PYTHON:-python3}
torch_pin="torch==2.13.0"
xgrammar_pin="xgrammar==0.2.8"
export PIP_DISABLE_PIP_VERSION_CHECK=1 HF_HUB_OFFLINE=1

say() { printf 'setup: %s\n' "$*"; }
die() { printf 'setup: error: %s\n' "$*" >&2; exit 2; }

mapfile -t supported < <(grep -Ev '^\s*(#|$)' impl/vllm-versions.txt)
if [ "$#" -gt 0 ]; then wanted=("$@"); else wanted=("${supported[@]}"); fi
for v in "${wanted[@]}"; do
  printf '%s\n' "${supported[@]}" | grep -qxF -- "$v" \
    || die "unsupported vLLM version '$v' (supported: ${supported[*]})"
done

"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || die "$python_bin is missing or older than Python 3.11"

# --- 1. the environment: torch first (an exact pin takes the CPU wheel; a range would pull CUDA)
env_stamp=$(cat "$0" pyproject.toml requirements/vllm-kv.txt requirements/constraints.txt \
  | sha256sum | cut -c1-16)
if [ -f "$venv/.kvspec-env" ] && [ "$(cat "$venv/.kvspec-env")" = "$env_stamp" ]; then
  say "environment up to date ($venv)"
else
  started=$SECONDS
  [ -x "$venv/bin/python" ] || "$python_bin" -m venv "$venv"
  pip=("$venv/bin/python" -m pip install -qq)
  say "installing $torch_pin (CPU build)"
  "${pip[@]}" "$torch_pin"
  say "installing $xgrammar_pin (--no-deps) and vLLM's KV-cache import dependencies"
  "${pip[@]}" --no-deps "$xgrammar_pin"
  "${pip[@]}" -r requirements/vllm-kv.txt -c requirements/constraints.txt
  "$venv/bin/python" -c 'import torch, sys; sys.exit(torch.version.cuda is not None)' \
    || die "pip took a CUDA build of torch; kvspec needs the CPU build of $torch_pin"
  say "installing kvspec (editable) with hypothesis, z3-solver, pytest, redis, hypofuzz"
  "${pip[@]}" -c requirements/constraints.txt -e .
  echo "$env_stamp" > "$venv/.kvspec-env"
  say "environment ready in $((SECONDS - started)) s"
fi

# --- 2. the vLLM releases, side by side, so one flag picks the target without reinstalling
for v in "${wanted[@]}"; do
  tree="$trees/$v"
  if [ -f "$tree/.kvspec-complete" ]; then
    say "vLLM $v up to date ($tree)"
    continue
  fi
  started=$SECONDS
  say "installing vLLM $v (--no-deps, pure Python) into $tree"
  rm -rf "$tree" "$tree.partial"
  "$venv/bin/python" -m pip install -qq --no-deps --no-compile \
    --target "$tree.partial" "vllm==$v"
  find "$tree.partial" -name '*.so' -delete
  rm -rf "$tree.partial/bin"
  # The import check is the one that matters: the tree must import as itself, from this path.
  "$venv/bin/python" - "$tree.partial" "$v" <<'PY' || die "vLLM $v does not import on this machine"
import sys, os
tree, version = sys.argv[1], sys.argv[2]
sys.path.insert(0, tree)
import vllm
import vllm.v1.core.kv_cache_coordinator, vllm.v1.core.kv_cache_manager  # noqa: E401
import vllm.v1.core.kv_cache_utils, vllm.v1.core.sched.scheduler  # noqa: E401
from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import coordinator  # noqa: F401
assert os.path.realpath(vllm.__file__).startswith(os.path.realpath(tree)), vllm.__file__
assert vllm.__version__ == version, (vllm.__version__, version)
PY
  touch "$tree.partial/.kvspec-complete"
  mv "$tree.partial" "$tree"
  say "vLLM $v ready in $((SECONDS - started)) s"
done
say "done"
