#!/usr/bin/env bash
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#
# Prepares, on a machine with network access, the CUDA toolkit and the Debian build dependencies
# (scripts/install-deps.sh), everything the device run of scripts/gpu-check.sh needs on a GPU machine that has
# a driver, PyTorch and Triton but no network, no Debian packages and no time to build. Everything goes to one
# git-ignored folder (default .deps/gpu-kit/, under the ignored /.deps/), which travels with the working tree.
# Nothing is vendored: the folder is rebuilt from its sources each time.
#
#   bin/                     the programs the device runs (GPU tests, device benchmarks, reprise-peer-op,
#                            reprise-demo), built here for sm_90 with the full kernel set and the static CUDA
#                            runtime, stripped (scripts/gpu-check.sh --stages build); bin/BUILD.txt records
#                            the sources' hash, the toolchain and what the programs need at run time
#   src/benchmark/           Google Benchmark's source, Debian's source package of the version this machine has
#                            (the build links it statically: Debian ships only a shared library)
#   python/mamba_ssm/        mamba_ssm's Python package from its PyPI source distribution (the Triton SSD);
#                            imported without its CUDA extension (bench/gpu/peers.py)
#   python/fla/              flash-linear-attention's ops package (fla-core wheel from PyPI; pure Python)
#   MANIFEST.txt             versions, origins, sha256 of each downloaded file, sizes
#
# Usage: scripts/gpu-gather.sh [--out DIR] [--mamba-version V] [--fla-version V] [--no-python] [--no-build]
#                              [--jobs N] [--build-dir DIR]
#   --no-build  gather the sources only (no bin/)
#   --jobs N, --build-dir DIR   passed to scripts/gpu-check.sh --stages build (build folder default build-gpu)
# The whole kit must stay under 48 MiB (the device transfer takes 64 MiB with the working tree); the script
# fails past that. (Debian's source package `benchmark` is fetched with apt-get source, through a private
# deb-src list: the system's apt configuration is not changed.)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.deps/gpu-kit"
mamba_version="2.3.2.post1"
fla_version="0.6.0"
python_peers=1
build_bin=1
build_args=()

usage() { sed -n '/^# Usage:/,/^# deb-src/p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --mamba-version) mamba_version=$2; shift 2 ;;
    --fla-version) fla_version=$2; shift 2 ;;
    --no-python) python_peers=0; shift ;;
    --no-build) build_bin=0; shift ;;
    --jobs|--build-dir) build_args+=("$1" "$2"); shift 2 ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-gather: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

case "$out" in
  "$root"/.deps/*) ;;
  *) echo "gpu-gather: note: $out is outside $root/.deps/ (the git-ignored folder); make sure git ignores it" >&2 ;;
esac

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
rm -rf "$out"
mkdir -p "$out/src" "$out/python"
manifest="$out/MANIFEST.txt"
echo "# gpu-kit gathered $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/gpu-gather.sh" >"$manifest"

# ---- Google Benchmark source: Debian's source package, through a deb-src list of our own -------------------
apt_dir="$tmp/apt"
mkdir -p "$apt_dir/lists/partial" "$apt_dir/parts" "$apt_dir/src"
for f in /etc/apt/sources.list.d/*.sources; do
  [ -f "$f" ] && sed 's/^Types: deb$/Types: deb-src/' "$f" >"$apt_dir/parts/$(basename "$f")"
done
if [ -f /etc/apt/sources.list ]; then grep -E '^deb ' /etc/apt/sources.list | sed 's/^deb /deb-src /' >"$apt_dir/parts/list.list" || true; fi
apt_opts=(-o "Dir::Etc::SourceList=/dev/null" -o "Dir::Etc::SourceParts=$apt_dir/parts" -o "Dir::State::Lists=$apt_dir/lists")
apt-get "${apt_opts[@]}" update -qq >/dev/null
bench_version=$(dpkg-query -W -f='${source:Version}' libbenchmark-dev 2>/dev/null || true)
(cd "$apt_dir/src" && apt-get "${apt_opts[@]}" source --download-only -qq "benchmark${bench_version:+=$bench_version}" >/dev/null 2>&1)
orig=$(ls "$apt_dir"/src/benchmark_*.orig.tar.* | head -1)
mkdir -p "$out/src/benchmark" "$apt_dir/unpack"
tar -xf "$orig" -C "$apt_dir/unpack"
bench_src=$(ls -d "$apt_dir"/unpack/*/ | head -1)
for part in CMakeLists.txt cmake include src LICENSE; do cp -r "$bench_src/$part" "$out/src/benchmark/"; done
echo "google benchmark: Debian source package $(basename "$orig") sha256 $(sha256sum "$orig" | cut -d' ' -f1)" >>"$manifest"

# ---- the peers' Python code --------------------------------------------------------------------------
if [ "$python_peers" = 1 ]; then
  py=$(command -v python3)
  # mamba_ssm: its source distribution (it publishes no wheel on PyPI; the Triton ops are plain Python). pip
  # download cannot take it (preparing its metadata needs torch and CUDA), so it is read from the index pip
  # uses by default, through pip's own description of it, and checked against the digest the index publishes.
  "$py" - "$mamba_version" "$tmp" <<'EOF' >>"$manifest"
import hashlib, json, sys, urllib.request, tarfile, pathlib
from pip._internal.models.index import PyPI
version, tmp = sys.argv[1], pathlib.Path(sys.argv[2])
meta = json.load(urllib.request.urlopen(f"{PyPI.pypi_url}/mamba-ssm/json"))
sdist = next(u for u in meta["releases"][version] if u["packagetype"] == "sdist")
data = urllib.request.urlopen(sdist["url"]).read()
digest = hashlib.sha256(data).hexdigest()
if digest != sdist["digests"]["sha256"]:
    sys.exit("gpu-gather: mamba_ssm sdist digest mismatch")
(tmp / "mamba.tar.gz").write_bytes(data)
with tarfile.open(tmp / "mamba.tar.gz") as t:
    members = [m for m in t.getmembers() if "/mamba_ssm/" in m.name and m.name.endswith(".py")]
    t.extractall(tmp / "mamba", members=members, filter="data")
print(f"mamba_ssm {version}: {sdist['filename']} sha256 {digest} (Python files of mamba_ssm/ only)")
EOF
  cp -r "$tmp"/mamba/mamba_ssm-*/mamba_ssm "$out/python/"
  python3 -m pip download --quiet --no-deps --only-binary :all: "fla-core==$fla_version" -d "$tmp/fla" >/dev/null
  whl=$(ls "$tmp"/fla/fla_core-*.whl)
  (cd "$tmp/fla" && python3 -m zipfile -e "$whl" unpacked)
  cp -r "$tmp/fla/unpacked/fla" "$out/python/"
  echo "fla-core $fla_version: $(basename "$whl") sha256 $(sha256sum "$whl" | cut -d' ' -f1) (package fla/)" >>"$manifest"
  find "$out/python" -name '__pycache__' -prune -exec rm -rf {} +
fi

# ---- the programs: built for the device here (no GPU needed), packed into bin/ -------------------------
if [ "$build_bin" = 1 ]; then
  if ! "$root/scripts/gpu-check.sh" --stages build --kit "$out" --results "$root/out/gpu-build" "${build_args[@]}" >/dev/null; then
    echo "gpu-gather: the build failed; see $root/out/gpu-build/build.log" >&2
    exit 1
  fi
  sed 's/^/prebuilt /' "$out/bin/BUILD.txt" >>"$manifest"
fi

{
  echo "sizes:"
  du -sh "$out"/* 2>/dev/null | grep -v MANIFEST | sed 's/^/  /'
  echo "  total $(du -sh "$out" | cut -f1) ($(du -sb "$out" | cut -f1) bytes)"
} >>"$manifest"
cat "$manifest"
total=$(du -sb "$out" | cut -f1)
if [ "$total" -gt $((48 * 1024 * 1024)) ]; then
  echo "gpu-gather: the kit is $total bytes, over 48 MiB; the device transfer takes 64 MiB with the working tree" >&2
  exit 1
fi
