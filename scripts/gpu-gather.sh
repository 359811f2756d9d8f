#!/usr/bin/env bash
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#
# Gathers, on a machine with network access and the Debian build dependencies (scripts/install-deps.sh),
# everything scripts/gpu-check.sh needs on a GPU machine that has CUDA, PyTorch and Triton but no network
# and no Debian packages. Everything goes to one git-ignored folder (default .deps/gpu-kit/, under the
# ignored /.deps/), which the device run carries beside the working tree. Nothing is vendored: the folder is
# rebuilt from its sources each time.
#
#   prefix/include/          the Boost headers the build actually includes (found with the preprocessor),
#                            doctest.h, xxhash.h
#   prefix/lib/cmake/        small package configs for Boost (headers only) and doctest, written here, and
#                            doctest's own test-discovery modules copied beside them
#   src/benchmark/           Google Benchmark's source, Debian's source package of the version this machine
#                            builds against (built on the device; its library is compiled code and the device
#                            image has none)
#   python/mamba_ssm/        mamba_ssm's Python package from its PyPI source distribution (the Triton SSD);
#                            imported without its CUDA extension (bench/gpu/peers.py)
#   python/fla/              flash-linear-attention's ops package (fla-core wheel from PyPI; pure Python)
#   MANIFEST.txt             versions, origins, sha256 of each downloaded file, sizes
#
# Usage: scripts/gpu-gather.sh [--out DIR] [--mamba-version V] [--fla-version V] [--no-python]
# (Debian's source package `benchmark` is fetched with apt-get source, through a private deb-src list: the
# system's apt configuration is not changed.)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
out="$root/.deps/gpu-kit"
mamba_version="2.3.2.post1"
fla_version="0.6.0"
python_peers=1

usage() { sed -n '/^# Usage:/,/^# system/p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --out) out=$2; shift 2 ;;
    --mamba-version) mamba_version=$2; shift 2 ;;
    --fla-version) fla_version=$2; shift 2 ;;
    --no-python) python_peers=0; shift ;;
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
mkdir -p "$out/prefix/include" "$out/prefix/lib/cmake/Boost" "$out/prefix/lib/cmake/doctest" "$out/src" "$out/python"
manifest="$out/MANIFEST.txt"
echo "# gpu-kit gathered $(date -u +%Y-%m-%dT%H:%M:%SZ) by scripts/gpu-gather.sh" >"$manifest"

find_header() { # the directory holding $1, searched like the compiler's system include path
  local h=$1 d
  for d in /usr/include /usr/local/include; do
    if [ -f "$d/$h" ]; then echo "$d"; return 0; fi
  done
  echo "gpu-gather: $h not found (scripts/install-deps.sh installs it)" >&2
  return 1
}

# ---- Boost: the headers the project's sources reach, under g++ and under nvcc --------------------------
boost_dir=$(find_header boost/version.hpp)
grep -rhoE '#include <boost/[^>]+>' "$root/include" "$root/src" "$root/tests" "$root/examples" "$root/bench" \
  "$root/kernels" "$root/tools" "$root/python" 2>/dev/null | sort -u >"$tmp/boost_tu.cpp"
[ -s "$tmp/boost_tu.cpp" ] || { echo "gpu-gather: no Boost include found in the sources" >&2; exit 1; }
deps() { tr ' \\' '\n\n' | grep -E "^$boost_dir/boost/" || true; }
g++ -std=c++20 -M -x c++ "$tmp/boost_tu.cpp" | deps >"$tmp/boost.list"
nvcc_bin=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)
if [ -x "$nvcc_bin" ]; then
  cp "$tmp/boost_tu.cpp" "$tmp/boost_tu.cu"
  "$nvcc_bin" -std=c++20 -M "$tmp/boost_tu.cu" | deps >>"$tmp/boost.list"
fi
# boost/config picks a file per compiler and standard library at preprocessing time: carry all of it.
find "$boost_dir/boost/config" -type f >>"$tmp/boost.list"
echo "$boost_dir/boost/version.hpp" >>"$tmp/boost.list"
sort -u "$tmp/boost.list" | while read -r f; do
  rel=${f#"$boost_dir"/}
  mkdir -p "$out/prefix/include/$(dirname "$rel")"
  cp "$f" "$out/prefix/include/$rel"
done
boost_version=$(sed -n 's/^#define BOOST_LIB_VERSION "\(.*\)"/\1/p' "$boost_dir/boost/version.hpp" | tr _ .)
case "$boost_version" in *.*.*) ;; *) boost_version="$boost_version.0" ;; esac
cat >"$out/prefix/lib/cmake/Boost/BoostConfig.cmake" <<EOF
# Written by scripts/gpu-gather.sh: Boost $boost_version, the header subset the project includes.
if(NOT TARGET Boost::headers)
  add_library(Boost::headers INTERFACE IMPORTED)
  set_target_properties(Boost::headers PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "\${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
if(NOT TARGET Boost::boost)
  add_library(Boost::boost INTERFACE IMPORTED)
  set_target_properties(Boost::boost PROPERTIES INTERFACE_LINK_LIBRARIES Boost::headers)
endif()
set(Boost_VERSION $boost_version)
set(Boost_INCLUDE_DIRS "\${CMAKE_CURRENT_LIST_DIR}/../../../include")
EOF
cat >"$out/prefix/lib/cmake/Boost/BoostConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION $boost_version)
if(PACKAGE_FIND_VERSION VERSION_GREATER PACKAGE_VERSION)
  set(PACKAGE_VERSION_COMPATIBLE FALSE)
else()
  set(PACKAGE_VERSION_COMPATIBLE TRUE)
  if(PACKAGE_FIND_VERSION VERSION_EQUAL PACKAGE_VERSION)
    set(PACKAGE_VERSION_EXACT TRUE)
  endif()
endif()
EOF
echo "boost $boost_version headers: $(sort -u "$tmp/boost.list" | wc -l) files from $boost_dir" >>"$manifest"

# ---- xxhash.h and doctest ----------------------------------------------------------------------------
xxh_dir=$(find_header xxhash.h)
cp "$xxh_dir/xxhash.h" "$out/prefix/include/"
xxh_version=$(awk '/#define XXH_VERSION_(MAJOR|MINOR|RELEASE)/{printf "%s%s", sep, $3; sep="."}' "$xxh_dir/xxhash.h")
echo "xxhash.h $xxh_version from $xxh_dir" >>"$manifest"

doctest_dir=$(find_header doctest/doctest.h)
mkdir -p "$out/prefix/include/doctest"
cp "$doctest_dir/doctest/doctest.h" "$out/prefix/include/doctest/"
doctest_version=$(awk '/#define DOCTEST_VERSION_(MAJOR|MINOR|PATCH) /{printf "%s%s", sep, $3; sep="."}' \
  "$doctest_dir/doctest/doctest.h")
doctest_cmake=""
for d in /usr/lib/cmake/doctest /usr/local/lib/cmake/doctest /usr/share/doctest/cmake /usr/lib/x86_64-linux-gnu/cmake/doctest; do
  if [ -f "$d/doctest.cmake" ]; then doctest_cmake=$d; break; fi
done
[ -n "$doctest_cmake" ] || { echo "gpu-gather: doctest's CMake modules not found (doctest-dev)" >&2; exit 1; }
cp "$doctest_cmake/doctest.cmake" "$doctest_cmake/doctestAddTests.cmake" "$out/prefix/lib/cmake/doctest/"
cat >"$out/prefix/lib/cmake/doctest/doctestConfig.cmake" <<EOF
# Written by scripts/gpu-gather.sh: doctest $doctest_version (header only); include(doctest) finds its test
# discovery beside this file, as with doctest's own package config.
if(NOT TARGET doctest::doctest)
  list(APPEND CMAKE_MODULE_PATH "\${CMAKE_CURRENT_LIST_DIR}")
  add_library(doctest::doctest INTERFACE IMPORTED)
  set_target_properties(doctest::doctest PROPERTIES
    INTERFACE_INCLUDE_DIRECTORIES "\${CMAKE_CURRENT_LIST_DIR}/../../../include")
endif()
set(doctest_VERSION $doctest_version)
EOF
cat >"$out/prefix/lib/cmake/doctest/doctestConfigVersion.cmake" <<EOF
set(PACKAGE_VERSION $doctest_version)
set(PACKAGE_VERSION_COMPATIBLE TRUE)
EOF
echo "doctest $doctest_version from $doctest_dir, CMake modules from $doctest_cmake" >>"$manifest"

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

{
  echo "sizes:"
  du -sh "$out/prefix" "$out/src" "$out/python" 2>/dev/null | sed 's/^/  /'
  echo "  total $(du -sh "$out" | cut -f1)"
} >>"$manifest"
cat "$manifest"
total=$(du -sb "$out" | cut -f1)
if [ "$total" -gt $((48 * 1024 * 1024)) ]; then
  echo "gpu-gather: the kit is $total bytes; the device carry limit is 64 MiB with the working tree" >&2
  exit 1
fi
