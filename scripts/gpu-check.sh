#!/usr/bin/env bash
# Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#
# The device check (docs/gpu.md), in two halves:
#   - `--stages build` (on a machine with the CUDA toolkit and the Debian build dependencies, no GPU needed):
#     builds every program the device run needs for sm_90 with the full kernel set, the CUDA runtime linked
#     statically, and packs them, stripped, into the kit's bin/ (scripts/gpu-gather.sh calls it);
#   - the device run (the default stages): on a machine with an H100/H200, its driver, PyTorch and Triton, and
#     no network, no Debian packages and no build: runs the kit's prebuilt programs, every stage under its own
#     time cap inside one overall budget, and writes one flat results folder of at most 8 files led by
#     summary.md (the device name, a row per stage, the tables).
#
# Usage: scripts/gpu-check.sh [--stages LIST] [--results DIR] [--kit DIR] [--build-dir DIR] [--jobs N]
#                             [--reduced] [--budget S] [--caps LIST] [--tests LIST] [--peer-models LIST]
#                             [--peer-args "ARGS"] [--dry-run]
#   --stages LIST   comma list of: build env test demo memcheck racecheck initcheck synccheck bench peers
#                   summary, or `all` (the device run: env,test,demo,memcheck,racecheck,bench,peers,summary;
#                   the default). env and summary always run; build runs only when named.
#   --results DIR   results folder (default out/gpu-results; when $OUT is set, its files are also copied to
#                   $OUT/gpu-results)
#   --kit DIR       the kit (default .deps/gpu-kit): bin/ (the prebuilt programs), python/ (the peers),
#                   src/benchmark/ (for the build)
#   --build-dir DIR build folder of the build stage (default build-gpu)
#   --jobs N        the build's parallelism (default: the number of CPUs)
#   --reduced       build the reduced kernel set (what CI builds) instead of the full one: only to check the
#                   build stage quickly; bin/BUILD.txt records the set and summary.md shows it
#   --budget S      seconds for the whole run (default 470); each stage gets the smaller of its cap and what is
#                   left, less 10 s kept for the summary; the last stage gets all that is left
#   --caps LIST     stage=seconds overrides of the caps (defaults: env 20, test 90, demo 20, memcheck 60,
#                   racecheck 60, initcheck 60, synccheck 60, bench 45, peers 165; build none)
#   --tests LIST    comma list of the sanitizer stages' runs, each BINARY or BINARY:doctest-test-case-filter
#                   (default: one test per kernel family, listed below and in docs/gpu.md)
#   --peer-models L comma list of peer_compare.py's models, one run each (default nemotron-h-8b,qwen3-next-80b-a3b)
#   --peer-args     extra arguments for bench/gpu/peer_compare.py, after the defaults (the last one wins);
#                   the table is peers-<those arguments>.csv (peers.csv without)
#   --dry-run       print each selected stage's cap and commands instead of running them
# Exit status: 0 when every selected stage passed or was skipped (no device, or a program refuses it), 1
# otherwise (a failure, or a stage stopped by its time cap).
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
budget=470
declare -A cap=([build]=0 [env]=20 [test]=90 [demo]=20 [memcheck]=60 [racecheck]=60 [initcheck]=60
  [synccheck]=60 [bench]=45 [peers]=165 [summary]=0)

usage() { sed -n '/^# Usage:/,/^# Exit status/p' "$0" | sed 's/^# \{0,1\}//'; }
while [ $# -gt 0 ]; do
  case "$1" in
    --stages) stages=${2:?}; shift 2 ;;
    --results) results=${2:?}; shift 2 ;;
    --kit) kit=${2:?}; shift 2 ;;
    --build-dir) build=${2:?}; shift 2 ;;
    --jobs) jobs=${2:?}; shift 2 ;;
    --reduced) reduced=1; shift ;;
    --budget) budget=${2:?}; shift 2 ;;
    --caps) IFS=, read -r -a _caps <<<"${2:?}"
      for c in "${_caps[@]}"; do
        case "$c" in *=*) ;; *) echo "gpu-check: --caps takes stage=seconds" >&2; exit 2 ;; esac
        [ -n "${cap[${c%%=*}]+x}" ] || { echo "gpu-check: --caps: unknown stage '${c%%=*}'" >&2; exit 2; }
        cap[${c%%=*}]=${c#*=}
      done
      shift 2 ;;
    --peer-args) peer_args=${2?}; shift 2 ;;
    --peer-models) peer_models=${2:?}; shift 2 ;;
    --tests) only=${2:?}; shift 2 ;;
    --dry-run) dry=1; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "gpu-check: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
  esac
done

known="build env test demo memcheck racecheck initcheck synccheck bench peers summary"
[ "$stages" = all ] && stages="env,test,demo,memcheck,racecheck,bench,peers,summary"
selected=()
IFS=, read -r -a requested <<<"$stages"
for s in "${requested[@]}"; do
  case " $known " in *" $s "*) ;; *) echo "gpu-check: unknown stage '$s' (known: $known)" >&2; exit 2 ;; esac
  case "$s" in env|summary) ;; *) selected+=("$s") ;; esac
done
selected=(env "${selected[@]}" summary) # every call records where it ran, and ends with the summary
for n in "$jobs" "$budget" "${cap[@]}"; do
  case "$n" in ''|*[!0-9]*) echo "gpu-check: --jobs, --budget and --caps take whole seconds / numbers" >&2; exit 2 ;; esac
done
kit=$(cd "$kit" 2>/dev/null && pwd || echo "$kit")
mkdir -p "$results"
results=$(cd "$results" && pwd)

# Tools: the CUDA toolkit's folder after the PATH (compute-sanitizer sits there).
cuda_home=${CUDA_HOME:-/usr/local/cuda}
export PATH="$PATH:$cuda_home/bin:$cuda_home/compute-sanitizer"
python=${PYTHON:-python3}
generator=()
command -v ninja >/dev/null && generator=(-G Ninja)

# The programs, named like tests/CMakeLists.txt, bench/CMakeLists.txt, bench/gpu/ and examples/ name them.
gpu_tests=()
for f in tests/gpu/test_*.cu; do gpu_tests+=("$(basename "$f" .cu)_gpu"); done
gpu_benches=(bench_state_kernels_gpu) # first: the copies and the Mamba2 decode against the memcpy floor
for f in bench/bench_*.cu; do
  b="$(basename "$f" .cu)_gpu"
  [ "$b" = bench_state_kernels_gpu ] || gpu_benches+=("$b")
done
programs=("${gpu_tests[@]}" "${gpu_benches[@]}" reprise-peer-op reprise-demo)
# The sanitizer runs: one test per kernel family (Mamba2, gated delta, conv1d, slot / unit copies and KV
# gather), each the test case that launches the family's kernels at every instantiated configuration.
sanitizer_runs=("test_mamba2_gpu:device Mamba2 kernels match the host*"
  "test_gated_delta_gpu:device chunked prefill and step match the host*"
  "test_conv1d_gpu" "test_state_copy_gpu")
if [ -n "$only" ]; then IFS=, read -r -a sanitizer_runs <<<"$only"; fi
# The device run's peer comparison: one run per layer size (the stage's time shared evenly: each peer's Triton
# kernels compile and autotune on their first call), 2K and 16K tokens, varlen then single, bf16 then fp32
# (peer_compare.py runs them in that order, so a cap cuts the fp32 rows first).
peer_models="nemotron-h-8b,qwen3-next-80b-a3b"
peer_defaults="--tokens 2048,16384 --layouts varlen,single --dtypes bf16,f32"

# Each stage's log; stages of one kind share one, so that the folder stays within 8 files.
log_of() {
  case "$1" in
    test|demo) echo test.log ;;
    memcheck|racecheck|initcheck|synccheck) echo sanitizer.log ;;
    bench|peers) echo bench.log ;;
    *) echo "$1.log" ;;
  esac
}

# The stage's deadline (seconds since the epoch; 0: none), set by the main loop.
deadline=0
left() { echo $((deadline - $(date +%s))); }

# run STAGE CMD...: runs a program with its output appended to the stage's log, stopped at the stage's
# deadline (exit 124, or 137 when it had to be killed); echoed in a dry run.
run() {
  local stage=$1; shift
  if [ "$dry" = 1 ]; then printf '[%s]' "$stage"; printf ' %q' "$@"; echo; return 0; fi
  local log
  log="$results/$(log_of "$stage")"
  printf '$ %s\n' "$*" >>"$log"
  if [ "$deadline" = 0 ]; then "$@" >>"$log" 2>&1; return; fi
  local t
  t=$(left)
  if [ "$t" -le 0 ]; then echo "time cap reached: not run" >>"$log"; return 124; fi
  timeout -k 5 "$t" "$@" >>"$log" 2>&1
  local rc=$?
  [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "stopped by the time cap after ${t}s" >>"$log"
  return "$rc"
}
# status STAGE pass|fail|skip SECONDS NOTE: a `stage` line of env.txt (replacing the stage's earlier one).
status() {
  [ "$dry" = 1 ] && return 0
  local f="$results/env.txt"
  touch "$f"
  grep -v "^stage $1 " "$f" >"$f.tmp"
  printf 'stage %s %s %s %s\n' "$1" "$2" "$3" "$4" >>"$f.tmp"
  mv "$f.tmp" "$f"
}
stage_result() { sed -n "s/^stage $1 \([a-z]*\) .*/\1/p" "$results/env.txt" 2>/dev/null; }

# Programs run side by side within a stage (the device has CPU cores to spare and each gets the stage's whole
# time): together NAME CMD... starts one; collect STAGE PREFIX waits for all, appends each one's output to the
# stage's log in the order started, followed by `PREFIX NAME: exit N`, and leaves the statuses in rcs[NAME].
declare -a jobs_names=()
declare -A jobs_pids=() rcs=()
together_dir=""
together() {
  local name=$1; shift
  if [ "$dry" = 1 ]; then printf '[&]'; printf ' %q' "$@"; echo; return 0; fi
  [ -n "$together_dir" ] || together_dir=$(mktemp -d)
  jobs_names+=("$name")
  local t
  t=$(left)
  if [ "$deadline" != 0 ] && [ "$t" -le 0 ]; then echo "time cap reached: not run" >"$together_dir/$name.log"; rcs[$name]=124; return; fi
  {
    printf '$ %s\n' "$*"
    if [ "$deadline" = 0 ]; then "$@"; else timeout -k 5 "$t" "$@"; fi
    local rc=$?
    [ "$rc" = 124 ] || [ "$rc" = 137 ] && echo "stopped by the time cap after ${t}s"
    echo "$rc" >"$together_dir/$name.rc"
  } >"$together_dir/$name.log" 2>&1 &
  jobs_pids[$name]=$!
}
collect() {
  local stage=$1 prefix=$2 n log
  [ "$dry" = 1 ] && { jobs_names=(); return 0; }
  log="$results/$(log_of "$stage")"
  for n in "${jobs_names[@]}"; do
    [ -z "${jobs_pids[$n]+x}" ] || wait "${jobs_pids[$n]}"
    [ -n "${rcs[$n]+x}" ] || rcs[$n]=$(cat "$together_dir/$n.rc" 2>/dev/null || echo 125)
    cat "$together_dir/$n.log" >>"$log"
    echo "$prefix$n: exit ${rcs[$n]}" >>"$log"
  done
  jobs_names=()
  jobs_pids=()
  rm -rf "$together_dir"
  together_dir=""
}

# A dry run prints every stage's commands, device or not.
have_device() { [ "$dry" = 1 ] || nvidia-smi -L 2>/dev/null | grep -q '^GPU'; }

# prog NAME: the prebuilt program's path.
prog() { echo "$kit/bin/$1"; }
need() { # need STAGE NAME: false (and logged) when the program is not in the kit
  [ "$dry" = 1 ] || [ -x "$(prog "$2")" ] && return 0
  echo "$2: not in $kit/bin (run scripts/gpu-gather.sh on the build machine)" >>"$results/$(log_of "$1")"
  return 1
}

commit() { # the checkout's commit, if it is one
  local c
  c=$(git -C "$root" rev-parse HEAD 2>/dev/null) || { echo "unknown (no git checkout)"; return 0; }
  git -C "$root" diff --quiet HEAD 2>/dev/null && echo "$c" || echo "$c (modified)"
}
# The sources the programs are built from; bin/BUILD.txt records their hash, the env stage compares.
source_hash() {
  (cd "$root" && find CMakeLists.txt cmake include src kernels tests/CMakeLists.txt tests/gpu tests/support bench examples \
    -type f \( -name '*.cpp' -o -name '*.cu' -o -name '*.cuh' -o -name '*.hpp' -o -name '*.h' \
    -o -name 'CMakeLists.txt' -o -name '*.cmake' \) -not -path 'bench/results/*' 2>/dev/null |
    LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-16)
}

stage_env() {
  [ "$dry" = 0 ] || return 0
  local f="$results/env.txt" built_from="" now_hash
  now_hash=$(source_hash)
  [ -f "$kit/bin/BUILD.txt" ] && built_from=$(sed -n 's/^sources //p' "$kit/bin/BUILD.txt")
  {
    echo "date $(date -u +%Y-%m-%dT%H:%M:%SZ)"
    echo "commit $(commit)"
    if have_device; then
      nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem --format=csv,noheader |
        sed 's/^/gpu /'
    else
      echo "gpu none"
    fi
    echo "host $(uname -srm); $(nproc) CPUs"
    echo "compute-sanitizer $( (compute-sanitizer --version 2>/dev/null || echo none) | tail -1)"
    timeout 15 "$python" -c 'import sys; print("python", sys.version.split()[0])
try:
    import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)
except Exception as e: print("torch none", type(e).__name__)
try:
    import triton; print("triton", triton.__version__)
except Exception as e: print("triton none", type(e).__name__)' 2>/dev/null || echo "python none"
    echo "kit $( [ -f "$kit/MANIFEST.txt" ] && sed -n 1p "$kit/MANIFEST.txt" || echo missing)"
    if [ -f "$kit/bin/BUILD.txt" ]; then
      sed -n 's/^/prebuilt /p' "$kit/bin/BUILD.txt"
      [ "$built_from" = "$now_hash" ] && echo "prebuilt-match yes (sources $now_hash)" ||
        echo "prebuilt-match NO: built from sources $built_from, the tree has $now_hash (rerun scripts/gpu-gather.sh)"
    else
      echo "prebuilt none"
    fi
    [ -f "$f" ] && grep '^stage ' "$f"
  } >"$f.new"
  mv "$f.new" "$f"
}

stage_build() {
  [ -f "$kit/src/benchmark/CMakeLists.txt" ] || { echo "gpu-check: no Google Benchmark source under $kit/src (run scripts/gpu-gather.sh)" \
    >>"$results/build.log"; status build fail 0 "no kit"; return 1; }
  local deps="$build/_deps"
  # Google Benchmark as a static library (Debian ships only a shared one, which the device machine lacks).
  if [ ! -f "$deps/lib/cmake/benchmark/benchmarkConfig.cmake" ] && [ ! -f "$deps/lib64/cmake/benchmark/benchmarkConfig.cmake" ]; then
    run build cmake -S "$kit/src/benchmark" -B "$build/_benchmark" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release \
      -DBUILD_SHARED_LIBS=OFF -DBENCHMARK_ENABLE_TESTING=OFF -DBENCHMARK_ENABLE_GTEST_TESTS=OFF \
      -DBENCHMARK_ENABLE_WERROR=OFF -DBENCHMARK_INSTALL_DOCS=OFF -DBENCHMARK_INSTALL_TOOLS=OFF \
      -DCMAKE_INSTALL_PREFIX="$deps" || return 1
    run build cmake --build "$build/_benchmark" -j "$jobs" || return 1
    run build cmake --install "$build/_benchmark" || return 1
  fi
  local full=ON
  [ "$reduced" = 1 ] && full=OFF
  # Release with -lineinfo (compute-sanitizer names source lines); the CUDA runtime linked statically (it
  # loads libcuda.so from the driver at run time); OpenSSL left out (no device program needs it).
  run build cmake -S "$root" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_FLAGS=-lineinfo \
    -DCMAKE_CUDA_ARCHITECTURES=90 -DCMAKE_CUDA_RUNTIME_LIBRARY=Static -DREPRISE_ENABLE_CUDA=ON \
    -DREPRISE_KERNELS_FULL="$full" -DREPRISE_BUILD_TESTS=ON -DREPRISE_BUILD_BENCHMARKS=ON \
    -DREPRISE_BUILD_EXAMPLES=ON -DREPRISE_BUILD_TOOLS=OFF -DREPRISE_BUILD_PYTHON=OFF -DREPRISE_WERROR=OFF \
    -DCMAKE_DISABLE_FIND_PACKAGE_OpenSSL=ON "-DCMAKE_PREFIX_PATH=$deps" || return 1
  run build cmake --build "$build" -j "$jobs" --target "${programs[@]}" || return 1
  # Pack: each program stripped into the kit's bin/ (the kernels' -lineinfo is in the device code and stays),
  # and what they need at run time checked: nothing beyond the C and C++ runtimes (libcuda comes from the
  # driver, loaded by the static CUDA runtime).
  [ "$dry" = 1 ] && { printf '[build] pack %s into %s/bin\n' "${programs[*]}" "$kit"; return 0; }
  rm -rf "$kit/bin.new" && mkdir -p "$kit/bin.new"
  local p f bad=0
  for p in "${programs[@]}"; do
    f=$(find "$build" -path "$build/_*" -prune -o -type f -name "$p" -perm -u+x -print | head -1)
    [ -n "$f" ] || { echo "pack: $p not built" >>"$results/build.log"; return 1; }
    strip --strip-unneeded -o "$kit/bin.new/$p" "$f" || return 1
    ldd "$kit/bin.new/$p" | awk '{print $1}' |
      grep -vE '^(linux-vdso|/lib64/ld-linux-x86-64|libc|libm|libstdc\+\+|libgcc_s|libdl|libpthread|librt)\.' &&
      { echo "pack: $p needs a library the device lacks (above)" >>"$results/build.log"; bad=1; }
  done
  [ "$bad" = 0 ] || return 1
  {
    echo "sources $(source_hash)"
    echo "commit $(commit)"
    echo "kernels $([ "$full" = ON ] && echo full || echo reduced) sm_90, CUDA runtime static, Release -lineinfo, stripped"
    echo "nvcc $(nvcc --version | grep -o 'release .*')"
    echo "cxx $(c++ --version | head -1)"
    echo "glibc-needs $(cd "$kit/bin.new" && objdump -T "${programs[@]}" | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -1)," \
      "$(cd "$kit/bin.new" && objdump -T "${programs[@]}" | grep -o 'GLIBCXX_[0-9.]*' | sort -uV | tail -1)"
    echo "size $(du -sb "$kit/bin.new" | cut -f1) bytes"
  } >"$kit/bin.new/BUILD.txt"
  rm -rf "$kit/bin" && mv "$kit/bin.new" "$kit/bin"
  cat "$kit/bin/BUILD.txt" >>"$results/build.log"
}

# The GPU tests, every binary at once (doctest; exit 77: no CUDA device).
stage_test() {
  local t failed=0 ran=0 skipped=0
  rcs=()
  for t in "${gpu_tests[@]}"; do
    need test "$t" || { failed=1; continue; }
    together "$t" "$(prog "$t")" --no-colors=true
  done
  collect test ""
  [ "$dry" = 1 ] && return 0
  for t in "${!rcs[@]}"; do
    ran=$((ran + 1))
    case "${rcs[$t]}" in 0) ;; 77) skipped=$((skipped + 1)) ;; *) failed=1 ;; esac
  done
  [ "$failed" = 0 ] && [ "$ran" -gt 0 ] && [ "$skipped" = "$ran" ] && status test skip "$(stage_took)" "no device"
  return "$failed"
}

# The demo on the device: every cached run bitwise equal to its caching-off reference (exit 0). A build whose
# example model runs on the host only refuses --device gpu (exit 2, "run with --device cpu"): skipped.
stage_demo() {
  need demo reprise-demo || return 1
  run demo "$(prog reprise-demo)" --device gpu
  local rc=$?
  [ "$dry" = 1 ] && return 0
  echo "reprise-demo --device gpu: exit $rc" >>"$results/test.log"
  if [ "$rc" = 2 ] && tail -n 5 "$results/test.log" | grep -q 'run with --device cpu'; then
    status demo skip "$(stage_took)" "the demo's model runs on the host only"
    return 0
  fi
  return "$rc"
}

# sanitize TOOL: the sanitizer runs under compute-sanitizer --tool TOOL, side by side.
sanitize() {
  local tool=$1 failed=0 r t filter
  have_device || { status "$tool" skip 0 "no device"; return 0; }
  [ "$dry" = 1 ] || command -v compute-sanitizer >/dev/null ||
    { echo "compute-sanitizer not found" >>"$results/sanitizer.log"; return 1; }
  local extra=()
  case "$tool" in
    memcheck) extra=(--leak-check full) ;;
    racecheck) extra=(--racecheck-report hazard) ;;
  esac
  [ "$dry" = 1 ] || echo "==== $tool ====" >>"$results/sanitizer.log"
  rcs=()
  for r in "${sanitizer_runs[@]}"; do
    t=${r%%:*}
    filter=()
    [ "$t" = "$r" ] || filter=("--test-case=${r#*:}")
    need "$tool" "$t" || { failed=1; continue; }
    together "$t" compute-sanitizer --tool "$tool" --error-exitcode 86 --print-limit 50 "${extra[@]}" \
      "$(prog "$t")" --no-colors=true "${filter[@]}"
  done
  local mark=0
  [ "$dry" = 1 ] || mark=$(wc -l <"$results/sanitizer.log")
  collect "$tool" "$tool "
  local passed=0
  for t in "${!rcs[@]}"; do if [ "${rcs[$t]}" = 0 ]; then passed=1; else failed=1; fi; done
  # Some container runtimes keep the sanitizer off the device (it says "Device not supported" for every run):
  # that is the machine, not the code; the stage reads skip with the reason.
  if [ "$failed" = 1 ] && [ "$passed" = 0 ] && [ "$dry" = 0 ] && tail -n +"$((mark + 1))" "$results/sanitizer.log" | grep -q 'Device not supported'; then
    status "$tool" skip "$(stage_took)" "compute-sanitizer: Device not supported on this machine"
    return 0
  fi
  return "$failed"
}

# The device benchmarks: copies and decode updates against cudaMemcpyAsync device-to-device, prefill.
stage_bench() {
  local failed=0 b
  for b in "${gpu_benches[@]}"; do
    need bench "$b" || { failed=1; continue; }
  done
  # Without a device they still start (each benchmark then reports "no CUDA device"), and the stage is skip.
  for b in "${gpu_benches[@]}"; do
    [ -x "$(prog "$b")" ] || [ "$dry" = 1 ] || continue
    run bench "$(prog "$b")" --benchmark_repetitions=3 --benchmark_min_time=0.2 \
      --benchmark_report_aggregates_only=true --benchmark_out="$results/$b.csv" --benchmark_out_format=csv ||
      failed=1
  done
  [ "$failed" = 0 ] && ! have_device && status bench skip "$(stage_took)" "no device"
  return "$failed"
}

stage_peers() {
  have_device || { status peers skip 0 "no device"; return 0; }
  need peers reprise-peer-op || return 1
  # One table per distinct --peer-args, so that calls with different ones keep both.
  local tag table m models i=0 failed=0
  tag=$(printf '%s' "$peer_args" | sed 's/--//g' | tr -c 'A-Za-z0-9.,_-' '_' | sed 's/__*/_/g; s/^_//; s/_$//')
  table="$results/peers${tag:+-$tag}.csv"
  [ "$dry" = 1 ] || rm -f "$table"
  IFS=, read -r -a models <<<"$peer_models"
  for m in "${models[@]}"; do
    local stage_deadline=$deadline
    [ "$deadline" = 0 ] || deadline=$(( $(date +%s) + $(left) / (${#models[@]} - i) ))
    # shellcheck disable=SC2086 # the arguments are split into words on purpose
    run peers "$python" "$root/bench/gpu/peer_compare.py" --kit "$kit" --reprise-op "$(prog reprise-peer-op)" \
      --out "$table" --append --models "$m" $peer_defaults $peer_args || failed=1
    deadline=$stage_deadline
    i=$((i + 1))
  done
  return "$failed"
}

stage_summary() {
  [ "$dry" = 1 ] && { printf '[summary] %s %s %s\n' "$python" bench/gpu/gpu_summary.py "$results"; return 0; }
  "$python" "$root/bench/gpu/gpu_summary.py" "$results"
}

stage_start=0
stage_took() { echo $(( $(date +%s) - stage_start )); }

budget_end=$(( $(date +%s) + budget ))
last_capped=""
for s in "${selected[@]}"; do [ "${cap[$s]}" -gt 0 ] && last_capped=$s; done
overall=0
if [ "$dry" = 0 ]; then
  declare -A cleared=()
  for s in "${selected[@]}"; do
    l=$(log_of "$s")
    case "$s" in env|summary) continue ;; esac
    [ -n "${cleared[$l]+x}" ] || { : >"$results/$l"; cleared[$l]=1; }
  done
fi
for s in "${selected[@]}"; do
  stage_start=$(date +%s)
  # The stage's deadline: its cap, within what the budget leaves after 10 s for the summary (the build and
  # the summary have none).
  # The last stage before the summary also gets what the earlier ones left unused.
  deadline=0
  if [ "${cap[$s]}" -gt 0 ]; then
    room=$(( budget_end - 10 - stage_start ))
    c=${cap[$s]}
    if [ "$room" -lt "$c" ] || [ "$s" = "$last_capped" ]; then c=$room; fi
    deadline=$(( stage_start + c ))
  fi
  if [ "$dry" = 1 ]; then
    printf '# stage %s (cap %s)\n' "$s" "$([ "${cap[$s]}" -gt 0 ] && echo "${cap[$s]} s" || echo none)$([ "$s" = "$last_capped" ] && echo ", or what the budget leaves")"
    case "$s" in
      memcheck|racecheck|initcheck|synccheck) sanitize "$s" ;;
      *) "stage_$s" ;;
    esac
    continue
  fi
  if [ "$deadline" != 0 ] && [ "$deadline" -le "$stage_start" ]; then
    status "$s" fail 0 "no time left in the budget"
    overall=1
    printf 'gpu-check: %-9s %s\n' "$s" "not run: no time left in the budget"
    continue
  fi
  [ "$s" = summary ] || status "$s" running 0 "-"
  case "$s" in
    memcheck|racecheck|initcheck|synccheck) sanitize "$s" ;;
    *) "stage_$s" ;;
  esac
  rc=$?
  took=$(stage_took)
  if [ "$s" != summary ] && [ "$(stage_result "$s")" = running ]; then
    if [ "$rc" = 0 ]; then
      status "$s" pass "$took" "-"
    elif [ "$deadline" != 0 ] && [ "$(date +%s)" -ge "$deadline" ]; then
      status "$s" fail "$took" "stopped at its deadline ($((deadline - stage_start)) s)"
    else
      status "$s" fail "$took" "exit $rc"
    fi
  fi
  [ "$s" = summary ] && [ "$rc" != 0 ] && overall=1
  [ "$s" != summary ] && [ "$(stage_result "$s")" = fail ] && overall=1
  [ "$s" = summary ] || printf 'gpu-check: %-9s %s (%ss)\n' "$s" "$(stage_result "$s")" "$took"
done

if [ "$dry" = 0 ]; then
  [ "$(stage_result env)" = running ] && status env pass 0 "-"
  # The folder's files, flat, to $OUT/gpu-results (what comes back from the device machine).
  if [ -n "${OUT:-}" ] && [ -d "$OUT" ] && [ "$results" != "$OUT/gpu-results" ]; then
    mkdir -p "$OUT/gpu-results" && find "$results" -maxdepth 1 -type f -exec cp {} "$OUT/gpu-results/" \;
  fi
  [ -f "$results/summary.md" ] && sed -n '/^- device:/p; /^- prebuilt from/p; /^## Stages/,/^## /{/^|/p}' "$results/summary.md"
  echo "gpu-check: results in $results ($(find "$results" -maxdepth 1 -type f | wc -l) files)"
fi
exit $overall
