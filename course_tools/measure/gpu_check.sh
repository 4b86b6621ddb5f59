#!/usr/bin/env bash
# `make gpu-check` and `make gpu-wheels`: the GPU check (course_tools/measure/gpu_check.py) in an
# environment of its own, on a machine that may have no internet.
#
#   gpu_check.sh [ARGS...]        python -m course_tools.measure.gpu_check ARGS... (--out DIR,
#                                 --self-test, --lessons L...)
#   gpu_check.sh --wheels         download into gpu-wheels/ the wheels the check needs besides
#                                 torch (CPython 3.12, x86_64 Linux)
#   gpu_check.sh --print-requirements
#
# The check uses the machine's own torch and never installs one. Interpreter: $GPU_PYTHON, else the
# first of python3, python and .venv/bin/python that imports torch (preferring one whose torch sees
# a CUDA GPU). When it already has nbval, pytest and the rest, the check runs there. Otherwise a
# virtual environment $GPU_VENV (.venv-gpu/) is created with --system-site-packages, so that it sees
# that torch (a .pth file adds that interpreter's site-packages too, for when it is a venv itself),
# and the rest is installed into it: with --no-index from $GPU_WHEELS (gpu-wheels/) when that folder
# holds wheels, else from the package index. Delete $GPU_VENV to start afresh.
set -euo pipefail
cd "$(dirname "$0")/../.."

WHEELS=${GPU_WHEELS:-gpu-wheels}
VENV=${GPU_VENV:-.venv-gpu}
PY_VERSION=${GPU_PYTHON_VERSION:-3.12}
# pip download matches a --platform tag exactly (only manylinux2014/2010 imply older ones), so list
# every glibc level up to 2.28, the level the torch wheels themselves need.
PLATFORMS=${GPU_PLATFORMS:-manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_24_x86_64
manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux2010_x86_64 manylinux1_x86_64}
# What the check imports; ipywidgets (tqdm's notebook bars) is installed but not required.
MODULES="torch nbval pytest nbformat nbclient jupyter_client ipykernel matplotlib tqdm numpy"

requirements() {
  # The requirements files' bounds for what the check needs (never torch), then what they leave implicit.
  grep -hiE '^(nbval|pytest|ipykernel|ipywidgets|matplotlib|numpy|tqdm)[[:space:]]*([<>=!~;]|$)' \
    requirements.txt requirements-test.txt
  printf '%s\n' nbformat nbclient jupyter_client
}

has_modules() {  # has_modules PYTHON MODULE...: true when PYTHON finds every module
  "$1" - "${@:2}" <<'PY' 2>/dev/null
import importlib.util
import sys

sys.exit(0 if all(importlib.util.find_spec(name) for name in sys.argv[1:]) else 1)
PY
}

download_wheels() {
  local python=${PYTHON:-python3} platform_args=() platform
  for platform in $PLATFORMS; do platform_args+=(--platform "$platform"); done
  mkdir -p "$WHEELS"
  requirements >"$WHEELS/requirements.txt"
  "$python" -m pip download --disable-pip-version-check --dest "$WHEELS" --only-binary=:all: \
    --python-version "$PY_VERSION" --implementation cp --abi "cp${PY_VERSION/./}" \
    "${platform_args[@]}" -r "$WHEELS/requirements.txt"
  echo "gpu-wheels: $(find "$WHEELS" -name '*.whl' | wc -l) wheels, $(du -sh "$WHEELS" | cut -f1) in" \
    "$WHEELS/ (CPython $PY_VERSION, x86_64 Linux, torch not included); copy that folder into the" \
    "repository on the GPU machine and run make gpu-check there"
}

choose_python() {
  if [ -n "${GPU_PYTHON:-}" ]; then
    echo "$GPU_PYTHON"
    return
  fi
  local candidate first=""
  for candidate in python3 python .venv/bin/python; do
    command -v "$candidate" >/dev/null 2>&1 || continue
    has_modules "$candidate" torch || continue
    if "$candidate" -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
      echo "$candidate"
      return
    fi
    first=${first:-$candidate}
  done
  echo "$first"
}

run_check() {
  local python source_args=()
  python=$(choose_python)
  if [ -z "$python" ] || ! has_modules "$python" torch; then
    echo "gpu-check: no Python with torch found (tried ${GPU_PYTHON:-python3, python, .venv/bin/python});" \
      "set GPU_PYTHON to the interpreter that has this machine's torch" >&2
    exit 2
  fi
  # shellcheck disable=SC2086
  if ! has_modules "$python" $MODULES; then
    if [ ! -x "$VENV/bin/python" ]; then
      echo "gpu-check: creating $VENV/ from $python (--system-site-packages: it keeps that torch)"
      "$python" -m venv --system-site-packages "$VENV"
    fi
    # On the environment's path, after its own packages: the repository (as `pip install -e .` would
    # do, with nothing to build) and every site-packages folder of $python. --system-site-packages
    # alone misses the latter when $python is itself a virtual environment, as on images whose
    # python3 lives in a venv such as /opt/torch/.venv.
    "$python" -c 'import os, sys; print("\n".join(p for p in sys.path if os.path.isdir(p)
                  and os.path.basename(p) in ("site-packages", "dist-packages")))' >"$VENV/torch-site.txt"
    "$VENV/bin/python" - "$PWD" "$VENV/torch-site.txt" <<'PY'
import pathlib
import sys
import sysconfig

folders = [sys.argv[1], *pathlib.Path(sys.argv[2]).read_text().splitlines()]
pathlib.Path(sysconfig.get_paths()["purelib"], "gpu_check_paths.pth").write_text("\n".join(folders) + "\n")
PY
    if compgen -G "$WHEELS/*.whl" >/dev/null; then
      source_args=(--no-index --find-links "$WHEELS")
      echo "gpu-check: installing what the check needs from $WHEELS/ (no index)"
    else
      echo "gpu-check: no wheels in $WHEELS/, installing from the package index" \
        "(on an offline machine, run make gpu-wheels elsewhere and copy $WHEELS/ here)"
    fi
    requirements >"$VENV/gpu-requirements.txt"
    "$VENV/bin/python" -m pip install --disable-pip-version-check --quiet \
      ${source_args[@]+"${source_args[@]}"} -r "$VENV/gpu-requirements.txt"
    if ! has_modules "$VENV/bin/python" torch; then
      echo "gpu-check: $VENV/ does not see the torch of $python; set GPU_PYTHON to the interpreter" \
        "that holds this machine's torch, or delete $VENV/ if it was made from another one" >&2
      exit 2
    fi
    python=$VENV/bin/python
  fi
  echo "gpu-check: $("$python" -c 'import sys, torch; print(f"{sys.executable}: Python {sys.version.split()[0]}, torch {torch.__version__}")')"
  exec "$python" -m course_tools.measure.gpu_check "$@"
}

case "${1:-}" in
  --wheels) download_wheels ;;
  --print-requirements) requirements ;;
  *) run_check "$@" ;;
esac
