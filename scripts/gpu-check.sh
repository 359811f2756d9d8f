#!/usr/bin/env bash
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#
# The device check (docs/gpu.md): on a machine with an H100/H200, CUDA 13, PyTorch and Triton, and no network
# and no Debian packages, builds Reprise for sm_90 with the full kernel set, runs every GPU test, runs them
# again under compute-sanitizer (memcheck, racecheck), runs the device benchmarks and the peer comparison,
# and writes one results folder: a log and a status per stage, CSVs, and summary.md with the device name.
# Its inputs are the working tree and the kit scripts/gpu-gather.sh prepares (default .deps/gpu-kit).
#
# Usage: scripts/gpu-check.sh [--stages LIST] [--results DIR] [--kit DIR] [--build-dir DIR] [--jobs N]
#                             [--reduced] [--tests LIST] [--peer-args "ARGS"] [--dry-run]
#   --stages LIST   comma list of: env build test memcheck racecheck initcheck synccheck bench peers summary,
#                   or `all` (env,build,test,memcheck,racecheck,bench,peers,summary; the default). Every
#                   stage but env and summary can be given alone; each fits one 10-minute call (the build
#                   resumes where it stopped if run again). summary always runs last.
#   --results DIR   results folder (default out/gpu-results; when $OUT is set, also copied to $OUT/gpu-results)
#   --kit DIR       the gathered kit (default .deps/gpu-kit)
#   --build-dir DIR build folder (default build-gpu)
#   --jobs N        build parallelism (default: the number of CPUs)
#   --reduced       the reduced kernel set (REPRISE_KERNELS_FULL=OFF) and architecture 90: for checking this
#                   script on a machine without a GPU; the device run uses the full set
#   --tests LIST    comma list of GPU test binaries the sanitizer stages run (default: all of them), to split a
#                   long sanitizer stage over several calls
#   --peer-args     extra arguments for bench/gpu/peer_compare.py (e.g. "--models nemotron-h-8b --tokens 2048");
#                   the table is peers-<those arguments>.csv / .md (peers.csv without)
#   --dry-run       print the commands of the selected stages instead of running them
# Exit status: 0 when every selected stage passed or was skipped for want of a device, 1 otherwise.
set -uo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root" || exit 2
results="$root/out/gpu-results"
kit="$root/.deps/gpu-kit"
build="$root/build-gpu"
jobs=$(nproc 2>/dev/null || echo 4)
stages="all"
reduced=0
peer_args=""
only=""
dry=0

usage() { sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --stages) stages=${2:?}; shift 2 ;;
    --results) results=${2:?}; shift 2 ;;
    --kit) kit=${2:?}; shift 2 ;;
    --build-dir) build=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --reduced) reduced=1; shift ;;
    --peer-args) peer_args=${2?}; shift 2 ;;
    --tests) only=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

known="env build test memcheck racecheck initcheck synccheck bench peers summary"
[ "$stages" = all ] && stages="env,build,test,memcheck,racecheck,bench,peers,summary"
selected=()
IFS=, read -r -a requested <<<"$stages"
for s in "${requested[@]}"; do
  case " $known " in *" $s "*) ;; *) echo "gpu-check: unknown stage '$s' (known: $known)" >&2; exit 2 ;; esac
  [ "$s" = summary ] || selected+=("$s")
done
case ",$stages," in *,env,*) ;; *) selected=(env "${selected[@]}") ;; esac # every call records where it ran
selected+=(summary)
case "$jobs" in ''|*[!0-9]*) echo "gpu-check: --jobs takes a number" >&2; exit 2 ;; esac
kit=$(cd "$kit" 2>/dev/null && pwd || echo "$kit")
mkdir -p "$results/status"
results=$(cd "$results" && pwd)

# Tools: the CUDA toolkit's folder first (compute-sanitizer sits there), then the PATH.
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH="$PATH:$cuda_home/bin:$cuda_home/compute-sanitizer"
python=${PYTHON:-python3}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# GPU test binaries and device benchmarks, named like tests/CMakeLists.txt and bench/CMakeLists.txt name them.
gpu_tests=()
for f in tests/gpu/test_*.cu; do gpu_tests+=("$(basename "$f" .cu)_gpu"); done
gpu_benches=()
for f in bench/bench_*.cu; do gpu_benches+=("$(basename "$f" .cu)_gpu"); done

# built DIR NAME: the path of a built program under DIR (in a dry run, where it will be).
built() {
  if [ "$dry" = 1 ]; then echo "$1/.../$2"; return 0; fi
  find "$1" -maxdepth 3 -type f -name "$2" -perm -u+x 2>/dev/null | head -1
}

# run STAGE CMD...: runs a command with its output appended to the stage's log (echoed in a dry run).
run() {
  local stage=$1; shift
  if [ "$dry" = 1 ]; then printf '[%s] %s\n' "$stage" "$*"; return 0; fi
  printf '$ %s\n' "$*" >>"$results/$stage.log"
  "$@" >>"$results/$stage.log" 2>&1
}
# status STAGE pass|fail|skip SECONDS NOTE
status() { [ "$dry" = 1 ] || printf '%s %s %s\n' "$2" "$3" "$4" >"$results/status/$1"; }

# A dry run prints every stage's commands, device or not.
have_device() { [ "$dry" = 1 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

stage_env() {
  [ "$dry" = 0 ] || return 0
  local f="$results/env.txt"
  {
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit $(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)$(git -C "$root" diff --quiet 2>/dev/null || echo ' (modified)')"
    if have_device; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader |
        sed 's/^/gpu /'
    else
      echo "gpu none"
    fi
    echo "nvcc $( (nvcc --version 2>/dev/null || echo none) | tail -1)"
    echo "cmake $(cmake --version 2>/dev/null | head -1)"
    echo "compute-sanitizer $( (compute-sanitizer --version 2>/dev/null || echo none) | tail -1)"
    "$python" -c 'import sys; print("python", sys.version.split()[0])' 2>/dev/null
    "$python" -c 'import torch; print("torch", torch.__version__)' 2>/dev/null || echo "torch none"
    "$python" -c 'import triton; print("triton", triton.__version__)' 2>/dev/null || echo "triton none"
    echo "kit $( [ -f "$kit/MANIFEST.txt" ] && sed -n 1p "$kit/MANIFEST.txt" || echo missing)"
  } >"$f"
  status env pass 0 "-"
}

stage_build() {
  [ -f "$kit/MANIFEST.txt" ] || { echo "gpu-check: no kit at $kit (run scripts/gpu-gather.sh on a machine with network)" \
    >>"$results/build.log"; status build fail 0 "no kit"; return 1; }
  local deps="$build/_deps"
  if [ ! -f "$deps/lib/cmake/benchmark/benchmarkConfig.cmake" ] && [ ! -f "$deps/lib64/cmake/benchmark/benchmarkConfig.cmake" ]; then
    run build cmake -S "$kit/src/benchmark" -B "$build/_benchmark" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DBENCHMARK_ENABLE_TESTING=OFF -DBENCHMARK_ENABLE_GTEST_TESTS=OFF -DBENCHMARK_ENABLE_WERROR=OFF \
      -DBENCHMARK_INSTALL_DOCS=OFF -DBENCHMARK_INSTALL_TOOLS=OFF -DCMAKE_INSTALL_PREFIX="$deps" || return 1
    run build cmake --build "$build/_benchmark" -j "$jobs" || return 1
    run build cmake --install "$build/_benchmark" || return 1
  fi
  local full=ON
  [ "$reduced" = 1 ] && full=OFF
  run build cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DREPRISE_ENABLE_CUDA=ON -DREPRISE_KERNELS_FULL="$full" \
    -DREPRISE_BUILD_TESTS=ON -DREPRISE_BUILD_BENCHMARKS=ON -DREPRISE_BUILD_EXAMPLES=ON -DREPRISE_BUILD_TOOLS=OFF \
    -DREPRISE_BUILD_PYTHON=OFF -DREPRISE_WERROR=OFF \
    "-DCMAKE_PREFIX_PATH=$kit/prefix;$deps" "-Dreprise_XXHASH_INCLUDE_DIR=$kit/prefix/include" || return 1
  run build cmake --build "$build" -j "$jobs" --target "${gpu_tests[@]}" "${gpu_benches[@]}" reprise-peer-op \
    reprise-peer-op-host reprise-demo || return 1
}

stage_test() {
  have_device || { run test ctest --test-dir "$build" -L gpu; status test skip 0 "no device"; return 0; }
  run test ctest --test-dir "$build" -L gpu --output-on-failure --output-junit "$results/test-junit.xml"
}

# sanitize TOOL: every GPU test binary under compute-sanitizer --tool TOOL, one log each.
sanitize() {
  local tool=$1 failed=0 ran=0 rc
  have_device || { status "$tool" skip 0 "no device"; return 0; }
  [ "$dry" = 1 ] || command -v compute-sanitizer >/dev/null ||
    { echo "compute-sanitizer not found" >>"$results/$tool.log"; return 1; }
  local extra=()
  case "$tool" in
    memcheck) extra=(--leak-check full) ;;
    racecheck) extra=(--racecheck-report hazard) ;;
  esac
  for t in "${gpu_tests[@]}"; do
    case ",$only," in ,,|*,"$t",*) ;; *) continue ;; esac
    ran=$((ran + 1))
    local bin
    bin=$(built "$build/tests" "$t")
    [ -n "$bin" ] || { echo "$t: not built" >>"$results/$tool.log"; failed=1; continue; }
    run "$tool" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 50 "${extra[@]}" "$bin"
    rc=$?
    [ "$dry" = 1 ] || echo "$t: exit $rc" >>"$results/$tool.log"
    [ "$rc" = 0 ] || failed=1
  done
  [ "$ran" -gt 0 ] || { echo "no GPU test binary matches --tests $only" >>"$results/$tool.log"; return 1; }
  return "$failed"
}

stage_bench() {
  have_device || { status bench skip 0 "no device"; return 0; }
  local failed=0
  for b in "${gpu_benches[@]}"; do
    local bin
    bin=$(built "$build/bench" "$b")
    [ -n "$bin" ] || { echo "$b: not built" >>"$results/bench.log"; failed=1; continue; }
    run bench "$bin" --benchmark_repetitions=5 --benchmark_report_aggregates_only=true \
      --benchmark_out="$results/$b.csv" --benchmark_out_format=csv || failed=1
  done
  return "$failed"
}

stage_peers() {
  have_device || { status peers skip 0 "no device"; return 0; }
  local bin
  bin=$(built "$build/bench" reprise-peer-op)
  [ -n "$bin" ] || { echo "reprise-peer-op: not built" >>"$results/peers.log"; return 1; }
  # One table per distinct --peer-args, so that one call per model keeps both.
  local tag
  tag=$(printf '%s' "$peer_args" | sed 's/--//g' | tr -c 'A-Za-z0-9.,_-' '_' | sed 's/__*/_/g; s/^_//; s/_$//')
  # shellcheck disable=SC2086 # --peer-args is split into words on purpose
  run peers "$python" "$root/bench/gpu/peer_compare.py" --kit "$kit" --reprise-op "$bin" \
    --out "$results/peers${tag:+-$tag}.csv" $peer_args
}

stage_summary() {
  run summary "$python" "$root/bench/gpu/gpu_summary.py" "$results"
}

overall=0
for s in "${selected[@]}"; do
  if [ "$dry" = 1 ]; then
    case "$s" in
      memcheck|racecheck|initcheck|synccheck) sanitize "$s" ;;
      *) "stage_$s" ;;
    esac
    continue
  fi
  : >"$results/$s.log"
  rm -f "$results/status/$s"
  start=$(date +%s)
  case "$s" in
    memcheck|racecheck|initcheck|synccheck) sanitize "$s" ;;
    *) "stage_$s" ;;
  esac
  rc=$?
  took=$(( $(date +%s) - start ))
  if [ ! -f "$results/status/$s" ]; then
    if [ "$rc" = 0 ]; then status "$s" pass "$took" "-"; else status "$s" fail "$took" "exit $rc"; overall=1; fi
  fi
  printf 'gpu-check: %-9s %s (%ss)\n' "$s" "$(cut -d' ' -f1 "$results/status/$s")" "$took"
done

if [ "$dry" = 0 ]; then
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$results" != "$OUT/gpu-results" ]; then
    mkdir -p "$OUT/gpu-results" && cp -r "$results/." "$OUT/gpu-results/"
  fi
  [ -f "$results/summary.md" ] && tail -n 40 "$results/summary.md"
fi
exit $overall
