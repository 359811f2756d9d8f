#!/usr/bin/env bash
# Installs Reprise's build dependencies from Debian packages when they are missing. Safe to re-run.
# The CUDA toolkit (nvcc, CCCL) is expected to be installed already; without it the host library, tests,
# benchmarks and demo still build (REPRISE_ENABLE_CUDA turns off).
set -euo pipefail
pkgs=(cmake g++ make libboost-dev doctest-dev libxxhash-dev libssl-dev libbenchmark-dev libcli11-dev libsimdjson-dev)
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
