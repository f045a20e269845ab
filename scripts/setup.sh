#!/usr/bin/env bash
# Set up kvspec on a fresh Linux machine: .venv with the CPU build of torch 2.13.0, the few
# packages vLLM's KV-cache imports need, kvspec itself (editable), and every supported vLLM
# release unpacked --no-deps into .vllm/<version>/ (pure Python: the CUDA kernels are
# deleted, the KV-cache code never loads them). Idempotent: a run with nothing to do only
# compares stamps and takes about a second.
#
#   scripts/setup.sh            # everything in impl/vllm-versions.txt
#   scripts/setup.sh 0.33.0     # only that release (plus the environment)
#
# The installer is uv (pinned in requirements/constraints.txt, bootstrapped by pip into
# <venv>/.kvspec-uv) unless KVSPEC_INSTALLER=pip: the same pins, packages and trees, and the
# faster cold set-up (benchmarks/setup_installers.py; benchmarks/results/setup_installers.md).
# Either way torch is the CPU wheel on pip's find-links, never a build resolved from PyPI. The
# release trees are fetched while the environment installs, then import-checked together, each
# in its own process forked from one that has imported torch and transformers (KVSPEC_SETUP_JOBS
# caps how many at a time; default: all).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
venv="${KVSPEC_VENV:-$root/.venv}"
trees="${KVSPEC_VLLM_HOME:-$root/.vllm}"
python_bin=${KVSPEC_PYTHON:-python3}
installer=${KVSPEC_INSTALLER:-uv}
jobs_max=${KVSPEC_SETUP_JOBS:-99}
torch_version="2.13.0"
torch_pin="torch==$torch_version"
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
case "$installer" in
  pip | uv) ;;
  *) die "KVSPEC_INSTALLER=$installer: use pip or uv" ;;
esac
[[ "$jobs_max" =~ ^[1-9][0-9]*$ ]] || die "KVSPEC_SETUP_JOBS=$jobs_max: give a positive number"

"$python_bin" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
  || die "$python_bin is missing or older than Python 3.11"

env_stamp=$( (cat scripts/setup.sh pyproject.toml requirements/vllm-kv.txt requirements/constraints.txt
  echo "installer=$installer") | sha256sum | cut -c1-16)
env_ready=false
if [ -f "$venv/.kvspec-env" ] && [ "$(cat "$venv/.kvspec-env")" = "$env_stamp" ]; then
  env_ready=true
fi
todo=()
for v in "${wanted[@]}"; do [ -f "$trees/$v/.kvspec-complete" ] || todo+=("$v"); done
if $env_ready && [ "${#todo[@]}" -eq 0 ]; then
  say "environment up to date ($venv)"
  for v in "${wanted[@]}"; do say "vLLM $v up to date ($trees/$v)"; done
  say "done"
  exit 0
fi

started=$SECONDS
if [ ! -x "$venv/bin/python" ]; then
  if [ "$installer" = uv ]; then
    "$python_bin" -m venv --without-pip "$venv"  # uv installs pip, at ensurepip's version
  else
    "$python_bin" -m venv "$venv"
  fi
fi
py="$venv/bin/python"
pip=("$py" -m pip install -qq)

# --- uv: pinned, bootstrapped by pip into the venv's folder (not into its site-packages),
# given the same indexes and find-links as pip's configuration and environment.
uv=() uv_index=() torch_wheel=""
pip_setting() {  # every value of one of pip's settings (config files, environment), one a line
  local var="${1^^}"; var="PIP_${var//-/_}"
  { "$python_bin" -m pip config list 2>/dev/null \
      | sed -n "s/^[^.]*\.$1='\(.*\)'\$/\1/p" | sed 's/\\n/ /g'
    printf '%s\n' "${!var:-}"; } | tr ' ' '\n' | awk 'NF && !seen[$0]++'
}
if [ "$installer" = uv ]; then
  uv_pin=$(grep -E '^uv==' requirements/constraints.txt) || die "requirements/constraints.txt pins no uv"
  uv_home="$venv/.kvspec-uv"
  if [ "$("$uv_home/bin/uv" --version 2>/dev/null | cut -d' ' -f2)" != "${uv_pin#uv==}" ]; then
    say "installing $uv_pin (the installer) into $uv_home"
    bootstrap=("$python_bin" -m pip)
    "${bootstrap[@]}" --version >/dev/null 2>&1 || bootstrap=("$py" -m pip)
    if ! "${bootstrap[@]}" --version >/dev/null 2>&1; then
      "$py" -m ensurepip -q >/dev/null || die "no pip to bootstrap uv with (KVSPEC_INSTALLER=pip?)"
    fi
    rm -rf "$uv_home"
    "${bootstrap[@]}" install -qq --no-compile --target "$uv_home" "$uv_pin" \
      || die "could not install $uv_pin"
  fi
  uv=("$uv_home/bin/uv" pip install -q --python "$py")
  while read -r url; do uv_index+=(--index-url "$url"); done < <(pip_setting index-url)
  while read -r url; do uv_index+=(--extra-index-url "$url"); done < <(pip_setting extra-index-url)
  pytag=$("$py" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
  while read -r dir; do
    uv_index+=(--find-links "$dir")
    for whl in "${dir#file://}/torch-$torch_version+cpu-$pytag-$pytag-"*"_$(uname -m).whl"; do
      if [ -f "$whl" ] && [ -z "$torch_wheel" ]; then torch_wheel=$whl; fi
    done
  done < <(pip_setting find-links)
  # pip's own choice among several indexes: the best version wherever it lies
  [ "${#uv_index[@]}" -eq 0 ] || uv_index+=(--index-strategy unsafe-best-match)
fi

# --- the vLLM releases: fetched now, in the background, while the environment installs
mkdir -p "$trees"
fetch_tree() {  # <version>: the wheel unpacked --no-deps into <tree>.partial, no .so, no bin
  # (nor the .lock uv leaves in a --target folder)
  local v=$1 tree="$trees/$1" log="$trees/.$1.log"
  local get=("${pip[@]}" --no-compile)
  [ "$installer" = pip ] || get=("${uv[@]}" "${uv_index[@]}")
  rm -rf "$tree" "$tree.partial" "$trees/.$v.error"
  if ! { "${get[@]}" --no-deps --target "$tree.partial" "vllm==$v" >"$log" 2>&1 \
      && find "$tree.partial" -name '*.so' -delete && rm -rf "$tree.partial/bin" "$tree.partial/.lock"; }; then
    echo "vLLM $v did not install ($installer's output: $log)" > "$trees/.$v.error"
    return 1
  fi
}
fail_if_any() {  # <what each release must have>: one line naming every release that failed
  local errors="" v
  for v in "${todo[@]}"; do
    if [ -f "$trees/.$v.error" ]; then
      errors+="${errors:+; }$(cat "$trees/.$v.error")"
      rm -f "$trees/.$v.error"
    elif [ ! -e "$trees/$v$1" ]; then
      errors+="${errors:+; }vLLM $v: no $trees/$v$1 (see $trees/.$v.log)"
    fi
  done
  [ -z "$errors" ] || die "$errors"
}
fetching=()
if [ "${#todo[@]}" -gt 0 ]; then
  say "fetching vLLM ${todo[*]} (--no-deps, pure Python) into $trees, with $installer"
  for v in "${todo[@]}"; do fetch_tree "$v" & fetching+=($!); done
fi

# --- 1. the environment: torch first (an exact pin takes the CPU wheel; a range would pull CUDA)
if $env_ready; then
  say "environment up to date ($venv)"
else
  say "installing $torch_pin (CPU build), $xgrammar_pin (--no-deps), vLLM's KV-cache import" \
    "dependencies and kvspec (editable), with $installer"
  if [ "$installer" = uv ]; then
    [ -n "$torch_wheel" ] || die "no CPU wheel of $torch_pin for this Python on pip's find-links" \
      "($(pip_setting find-links | tr '\n' ' ')); KVSPEC_INSTALLER=pip uses pip's own choice"
    "${uv[@]}" --no-deps "$xgrammar_pin" || die "uv could not install $xgrammar_pin"
    # One resolution, the pins of constraints.txt, torch only from that file. pip compiles
    # what it installs; so does uv here, so the two environments are the same to the byte code.
    pip_version=$("$python_bin" -c 'import ensurepip; print(ensurepip.version())')
    "${uv[@]}" "${uv_index[@]}" --compile-bytecode "$torch_wheel" "pip==$pip_version" \
      -r requirements/vllm-kv.txt -c requirements/constraints.txt -e . \
      || die "uv could not install the environment"
  else
    "${pip[@]}" -c requirements/constraints.txt "$torch_pin" || die "pip could not install $torch_pin"
    "${pip[@]}" --no-deps "$xgrammar_pin" || die "pip could not install $xgrammar_pin"
    "${pip[@]}" -r requirements/vllm-kv.txt -c requirements/constraints.txt \
      || die "pip could not install requirements/vllm-kv.txt"
    "${pip[@]}" -c requirements/constraints.txt -e . || die "pip could not install kvspec (editable)"
  fi
  "$py" -c 'import torch, sys; sys.exit(torch.version.cuda is not None)' \
    || die "$installer took a CUDA build of torch; kvspec needs the CPU build of $torch_pin"
  echo "$env_stamp" > "$venv/.kvspec-env"
  say "environment ready in $((SECONDS - started)) s"
fi

# --- 2. the vLLM releases, side by side, so one flag picks the target without reinstalling
if [ "${#todo[@]}" -gt 0 ]; then
  for pid in "${fetching[@]}"; do wait "$pid" || true; done
  fail_if_any .partial
  # The import check is the one that matters: each tree must import as itself, from this path,
  # in a process of its own (forked, so torch and transformers are imported once for all).
  checks=()
  for v in "${todo[@]}"; do checks+=("$trees/$v.partial" "$v" "$trees/.$v.log"); done
  "$py" - "$jobs_max" "${checks[@]}" >"$trees/.kvspec-imports" 2>&1 <<'PY' || true
import os, sys, traceback
jobs, items = int(sys.argv[1]), list(zip(*[iter(sys.argv[2:])] * 3))
try:
    import torch, transformers  # noqa: E401, F401  (every release imports both, from the venv)
except BaseException:
    for _, _, log in items:
        with open(log, "a") as out:
            out.write(traceback.format_exc())
    sys.exit(1)
running = {}


def reap():
    pid, status = os.wait()
    version = running.pop(pid)
    if os.waitstatus_to_exitcode(status) == 0:
        print("imports", version, flush=True)


for tree, version, log in items:
    while len(running) >= jobs:
        reap()
    sys.stdout.flush(), sys.stderr.flush()
    pid = os.fork()
    if pid:
        running[pid] = version
        continue
    code = 1
    try:
        out = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(out, 1), os.dup2(out, 2)
        sys.path.insert(0, tree)
        import vllm
        import vllm.v1.core.kv_cache_coordinator, vllm.v1.core.kv_cache_manager  # noqa: E401
        import vllm.v1.core.kv_cache_utils, vllm.v1.core.sched.scheduler  # noqa: E401
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake.store import coordinator  # noqa: F401
        assert os.path.realpath(vllm.__file__).startswith(os.path.realpath(tree)), vllm.__file__
        assert vllm.__version__ == version, (vllm.__version__, version)
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush(), sys.stderr.flush()
        os._exit(code)
while running:
    reap()
PY
  for v in "${todo[@]}"; do
    tree="$trees/$v"
    if grep -qxF "imports $v" "$trees/.kvspec-imports"; then
      touch "$tree.partial/.kvspec-complete"
      mv "$tree.partial" "$tree"
      rm -f "$trees/.$v.log"
      say "vLLM $v ready ($tree)"
    else
      echo "vLLM $v does not import on this machine (its output: $trees/.$v.log)" > "$trees/.$v.error"
    fi
  done
  fail_if_any /.kvspec-complete
  rm -f "$trees/.kvspec-imports"
  say "vLLM ${todo[*]} ready in $((SECONDS - started)) s from the start"
fi
for v in "${wanted[@]}"; do
  printf '%s\n' "${todo[@]}" | grep -qxF -- "$v" || say "vLLM $v up to date ($trees/$v)"
done
say "done"
