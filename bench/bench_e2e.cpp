// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Turn-2 prefill of a chat served by the example hybrid decoder (bench preset: d_model 256, 8 layers, Mamba2
// Q = 256, gated delta Q = 64, one attention layer), warm against cold, in the same process.
//
// Cold: a fresh cache admits the turn-2 prompt and prefills all of it. Warm: the cache has served turn 1
// (system prompt + first user message, then a greedy reply), so turn 2 restores the prefill-exact snapshot
// at the last aligned position of the turn-1 prompt and prefills the rest. Both include admit, restore,
// prefill and commit: one engine step. Reported per run: the two times, warm/cold, and the ideal ratio
// 1 - u / L (u = skipped tokens, L = turn-2 prompt length) that a cost linear in tokens would give. The ratio
// uses the thread's CPU time (the engine is single-threaded); wall times are reported next to it.
#include "hybrid/config.hpp"
#include "hybrid/decoder.hpp"
#include "hybrid/engine.hpp"
#include "hybrid/workload.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>

#include <benchmark/benchmark.h>

#include <chrono>
#include <cstring>
#include <ctime>

namespace {

using namespace reprise;
using namespace reprise::example;
using preset = presets::bench_hybrid;
using exact_restore = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::branch_point>,
                                               policy::accept_prefill_exact>;
using cache_type = prefix_cache<preset::cache_model, exact_restore>;

const decoder& bench_model() {
  static const decoder m = std::move(decoder::make(preset::config())).value();
  return m;
}

cache_type fresh_cache() {
  return std::move(cache_type::create({.kv_blocks = 512, .max_sequences = 4,
                                       .snapshot_budget_bytes = 8 * preset::cache_model::bytes_per_snapshot,
                                       .hasher_seed = 1}))
      .value();
}

/// CPU seconds of this thread: the engine is single-threaded, and unlike wall time this does not count the
/// time other processes on a shared machine take from it.
double thread_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
}

struct timed {
  completion out;
  double cpu = 0, wall = 0;
};

/// Runs `r` to completion on `e`; times its first step (admit, restore, prefill, commit: the turn's prefill).
template <class Cache>
timed serve(engine<Cache>& e, request r) {
  e.submit(std::move(r));
  const double c0 = thread_seconds();
  const auto w0 = std::chrono::steady_clock::now();
  std::vector<completion> done = e.step();
  timed t{{}, thread_seconds() - c0, std::chrono::duration<double>(std::chrono::steady_clock::now() - w0).count()};
  while (done.empty()) done = e.step();
  t.out = std::move(done.front());
  return t;
}

// Arguments: system prompt tokens, user message tokens, reply tokens.
void turn2_prefill_warm_vs_cold(benchmark::State& state) {
  const auto system = static_cast<std::uint32_t>(state.range(0)), user = static_cast<std::uint32_t>(state.range(1)),
             reply = static_cast<std::uint32_t>(state.range(2));
  const decoder& model = bench_model();
  const workload w = workload::make({.conversations = 1, .turns = 2, .system_tokens = system, .user_tokens = user,
                                     .reply_tokens = reply, .seed = 3},
                                    model.config().vocab);
  std::vector<token> turn1 = w.system_prompt;
  turn1.insert(turn1.end(), w.user[0][0].begin(), w.user[0][0].end());

  double cold_cpu = 0, warm_cpu = 0, cold_wall = 0, warm_wall = 0;
  std::uint32_t skipped = 0, length = 0;
  for (auto _ : state) {
    // Cold: nothing cached.
    cache_type cold_cache = fresh_cache();
    engine<cache_type> cold(model, cold_cache, {.max_running = 1});
    state.PauseTiming();
    // Warm: serve turn 1 first (not timed), then turn 2 reuses it.
    cache_type warm_cache = fresh_cache();
    engine<cache_type> warm(model, warm_cache, {.max_running = 1});
    const completion first = serve(warm, {1, turn1, reply, {}}).out;
    std::vector<token> turn2 = turn1;
    turn2.insert(turn2.end(), first.generated.begin(), first.generated.end());
    turn2.insert(turn2.end(), w.user[0][1].begin(), w.user[0][1].end());
    state.ResumeTiming();

    const timed c = serve(cold, {2, turn2, 1, {}});
    const timed h = serve(warm, {2, turn2, 1, {}});
    cold_cpu += c.cpu;
    warm_cpu += h.cpu;
    cold_wall += c.wall;
    warm_wall += h.wall;
    skipped = warm.admissions().back().usable_tokens;
    length = static_cast<std::uint32_t>(turn2.size());
    if (c.out.generated != h.out.generated ||
        std::memcmp(c.out.last_logits.data(), h.out.last_logits.data(), c.out.last_logits.size() * sizeof(float)) != 0)
      state.SkipWithError("warm and cold turn 2 differ");
  }
  const double n = static_cast<double>(state.iterations());
  const double ratio = warm_cpu / cold_cpu, ideal = 1.0 - static_cast<double>(skipped) / length;
  state.counters["prompt"] = length;
  state.counters["skipped"] = skipped;
  state.counters["cold_cpu_ms"] = cold_cpu / n * 1e3;
  state.counters["warm_cpu_ms"] = warm_cpu / n * 1e3;
  state.counters["cold_wall_ms"] = cold_wall / n * 1e3;
  state.counters["warm_wall_ms"] = warm_wall / n * 1e3;
  state.counters["warm/cold"] = ratio; // CPU time
  state.counters["ideal"] = ideal;
  state.counters["minus_ideal"] = ratio - ideal;
}

BENCHMARK(turn2_prefill_warm_vs_cold)
    ->ArgNames({"system", "user", "reply"})
    ->Args({768, 96, 16})
    ->Args({1280, 96, 16})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

} // namespace

BENCHMARK_MAIN();
