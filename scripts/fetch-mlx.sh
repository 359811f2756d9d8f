#!/usr/bin/env bash
# Makes the pinned Python environment in which mlx-lm (its [cpu] build: mlx + mlx-cpu, no torch) runs with Reprise's
# prompt cache: a venv in .deps/mlx/venv (git-ignored), every package pinned by version and sha256 in
# integrations/mlx-lm/requirements.txt and installed from PyPI with `pip install --require-hashes` (a file whose
# hash differs is refused). Idempotent: a venv stamped with the same requirements is reused as it is.
#
#   scripts/fetch-mlx.sh        # prints the venv's python on its last line
#
# Environment: REPRISE_MLX_VENV (default .deps/mlx/venv), PYTHON (the interpreter that makes the venv, python3).
# About 60 MB downloaded, a 360 MB venv. The hashes are those of the CPython 3.11 / x86_64 Linux wheels.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
requirements="$root/integrations/mlx-lm/requirements.txt"
venv="${REPRISE_MLX_VENV:-$root/.deps/mlx/venv}"
python="${PYTHON:-python3}"

is311="$("$python" -c 'import sys; print(sys.version_info[:2] == (3, 11))')"
if [ "$(uname -m)" != x86_64 ] || [ "$is311" != True ]; then
  echo "fetch-mlx: the pinned hashes are those of CPython 3.11 x86_64 wheels; this is $(uname -m) with" \
       "$("$python" --version 2>&1) (set PYTHON to a python3.11)" >&2
  exit 1
fi
stamp="$venv/.reprise-stamp"
want="mlx-lm requirements $(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi

rm -f "$stamp"
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
echo "fetch-mlx: installing the pinned requirements into $venv" >&2
"$venv/bin/python" -m pip install --quiet --disable-pip-version-check --require-hashes -r "$requirements" >&2
"$venv/bin/python" -m pip check >&2
"$venv/bin/python" -c 'import mlx.core, mlx_lm' >&2
echo "$want" > "$stamp"
echo "$venv/bin/python"
