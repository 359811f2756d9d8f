#!/usr/bin/env bash
# Installs Reprise's build dependencies from Debian packages when they are missing. Safe to re-run.
# The CUDA toolkit (nvcc, CCCL) is expected to be installed already; without it the host library, tests,
# benchmarks and demo still build (REPRISE_ENABLE_CUDA turns off).
set -euo pipefail
pkgs=(cmake g++ make libboost-dev doctest-dev libxxhash-dev libssl-dev libbenchmark-dev libcli11-dev libsimdjson-dev
      libhiredis-dev redis-server redis-tools ninja-build ccache)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo="sudo"
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The Python package (python/) and its tests: nanobind, scikit-build-core, numpy and pytest from PyPI, into the
# interpreter CMake will find (python3 on PATH). Without them (or without Python headers) CMake skips the
# package with a message. Debian's python3 needs python3-dev for its headers; other builds ship them.
if command -v python3 >/dev/null 2>&1; then
  if ! python3 -c 'import sysconfig, os, sys; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()["include"], "Python.h")))'; then
    sudo=""
    [ "$(id -u)" -eq 0 ] || sudo="sudo"
    echo "installing: python3-dev python3-pip"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-dev python3-pip >/dev/null
  fi
  py_missing=()
  for m in nanobind:nanobind scikit_build_core:scikit-build-core numpy:numpy pytest:pytest; do
    python3 -c "import ${m%%:*}" 2>/dev/null || py_missing+=("${m##*:}")
  done
  if ((${#py_missing[@]})); then
    echo "installing from PyPI: ${py_missing[*]}"
    python3 -m pip install -q "${py_missing[@]}" || python3 -m pip install -q --break-system-packages "${py_missing[@]}"
  fi
fi
