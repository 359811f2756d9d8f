#!/usr/bin/env bash
# Fetches llama.cpp from PyPI's llama-cpp-python source distribution (pinned, sha256-checked), unpacks it into
# .deps/llama.cpp (git-ignored), applies integrations/llama.cpp/llama-server-reprise.patch and builds a CPU-only
# llama-server that links Reprise (the adapter in integrations/llama.cpp/). Idempotent: nothing is redone when the
# unpacked tree carries the same pinned archive and patch, and ninja rebuilds only what changed.
#
#   scripts/fetch-llama.sh            # fetch, patch, build: .deps/llama.cpp/build/bin/llama-server
#   scripts/fetch-llama.sh --no-build # fetch and patch only
#   scripts/fetch-llama.sh --bin-dir  # print the folder the binaries are built into, and do nothing else
#
# Environment: REPRISE_LLAMA_JOBS (default 2), REPRISE_LLAMA_DIR (default .deps/llama.cpp), REPRISE_LLAMA_OPT
# (the compiler's optimisation flag, default -O3; CI builds with -O1, which halves the compile time on 2 cores,
# and its tests compare runs of one build, so the level does not change what they check). Each level builds in
# a folder of its own (build for -O3, build-O1 for -O1, ...), so switching levels rebuilds nothing.
# The server embeds no web UI: the build never downloads llama.cpp's prebuilt UI assets (unpinned).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
version=0.3.36
sha256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
archive="$root/.deps/llama_cpp_python-$version.tar.gz"
dir="${REPRISE_LLAMA_DIR:-$root/.deps/llama.cpp}"
patch_file="$root/integrations/llama.cpp/llama-server-reprise.patch"
jobs="${REPRISE_LLAMA_JOBS:-2}"
opt="${REPRISE_LLAMA_OPT:--O3}"
case "$opt" in -O0|-O1|-O2|-O3|-Os) ;; *) echo "fetch-llama: REPRISE_LLAMA_OPT must be one of -O0 -O1 -O2 -O3 -Os, not '$opt'" >&2; exit 2;; esac
bdir="$dir/build"
[ "$opt" = -O3 ] || bdir="$dir/build$opt"
build=1
[ "${1:-}" = --no-build ] && build=0
if [ "${1:-}" = --bin-dir ]; then echo "$bdir/bin"; exit 0; fi

mkdir -p "$root/.deps"
if [ ! -f "$archive" ] || ! echo "$sha256  $archive" | sha256sum -c --status; then
  rm -f "$archive"
  echo "fetch-llama: downloading llama-cpp-python==$version (source distribution) from PyPI"
  python3 -m pip download --quiet --no-deps --no-binary :all: "llama-cpp-python==$version" -d "$root/.deps"
fi
if ! echo "$sha256  $archive" | sha256sum -c --status; then
  echo "fetch-llama: $archive does not have the pinned sha256 $sha256" >&2
  exit 1
fi

stamp="$dir/.reprise-stamp"
want="llama-cpp-python $version $sha256 patch $(sha256sum "$patch_file" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  echo "fetch-llama: unpacking vendor/llama.cpp and applying $(basename "$patch_file")"
  tmp="$root/.deps/unpack.$$"
  rm -rf "$tmp" && mkdir -p "$tmp"
  tar -xzf "$archive" -C "$tmp" "llama_cpp_python-$version/vendor/llama.cpp"
  src="$tmp/llama_cpp_python-$version/vendor/llama.cpp"
  (cd "$src" && patch -p1 --forward --quiet < "$patch_file")
  # Keep the existing build folders (ccache and ninja then rebuild only what the patch changed).
  for b in "$dir"/build "$dir"/build-O*; do
    if [ -d "$b" ]; then mv "$b" "$tmp/"; fi
  done
  rm -rf "$dir"
  mv "$src" "$dir"
  for b in "$tmp"/build "$tmp"/build-O*; do
    if [ -d "$b" ]; then mv "$b" "$dir/"; fi
  done
  rm -rf "$tmp"
  echo "$want" > "$stamp"
fi
[ "$build" = 1 ] || exit 0

launcher=()
if command -v ccache >/dev/null; then
  launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  # Paths below the checkout are hashed relative to it, so another clone or worktree reuses the objects.
  export CCACHE_BASEDIR="$root"
fi
if [ ! -f "$bdir/build.ninja" ] || ! grep -q "REPRISE_SOURCE_DIR:PATH=$root\$" "$bdir/CMakeCache.txt" 2>/dev/null ||
   ! grep -q "CMAKE_CXX_FLAGS_RELEASE:STRING=$opt -DNDEBUG\$" "$bdir/CMakeCache.txt" 2>/dev/null ||
   ! grep -q "LLAMA_USE_PREBUILT_UI:BOOL=OFF\$" "$bdir/CMakeCache.txt" 2>/dev/null; then
  cmake -S "$dir" -B "$bdir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=OFF \
    -DCMAKE_C_FLAGS_RELEASE="$opt -DNDEBUG" -DCMAKE_CXX_FLAGS_RELEASE="$opt -DNDEBUG" \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DREPRISE_SOURCE_DIR:PATH="$root" \
    "${launcher[@]}" >/dev/null
fi
ninja -C "$bdir" -j"$jobs" llama-server test-llama-archs
echo "fetch-llama: $bdir/bin/llama-server (and test-llama-archs, which writes random-weight models)"
