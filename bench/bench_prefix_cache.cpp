// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// admit + commit + release of one prompt through prefix_cache<.., block_sharing> (B = 16, xxh3 hasher), for
// 1K / 8K / 32K / 128K tokens at 0 / 50 / 100 % prefix hit, against the bookkeeping floor measured in the
// same process: chaining the same hasher over the same full blocks plus one hash-table probe per block.
// At the end the binary prints the ratio cache / floor (CPU time: the machine is shared, so wall time waits
// on other processes) for every configuration, from the medians when --benchmark_repetitions is given. It
// also counts heap allocations inside the timed loop (allocs_per_op), which should be 0.
#include <reprise/reprise.hpp>

#include "cpu_time_reporter.hpp"

#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <new>
#include <numeric>
#include <string>
#include <unordered_set>
#include <vector>

namespace {
std::atomic<std::uint64_t> g_allocations{0};
} // namespace

// Counting replacements of the global allocation functions (malloc/free underneath by definition).
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
#endif
void* operator new(std::size_t n) {
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(n == 0 ? 1 : n)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, std::size_t) noexcept { std::free(p); }
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

namespace {
using namespace reprise;
using model = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}>, 32>>;
using cache = prefix_cache<model, policy::block_sharing>;
constexpr std::uint32_t B = model::block_size;

std::vector<token_id> base_prompt(std::size_t n) {
  std::vector<token_id> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<token_id>((i * 2654435761u) % 151936u);
  return v;
}

/// The prompt of one iteration: the first `hit` percent of the base, then tokens no earlier iteration used.
void make_unique(std::vector<token_id>& prompt, std::size_t shared, std::uint64_t iteration) {
  if (shared < prompt.size()) prompt[shared] = static_cast<token_id>(200000 + iteration % 1000000000);
}

void BM_cache(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const auto hit = static_cast<std::size_t>(state.range(1));
  const auto blocks = static_cast<std::uint32_t>(tokens / B + 1);
  auto made = cache::create({.kv_blocks = 4 * blocks, .max_sequences = 4, .hasher_seed = 11});
  cache& c = *made;
  const auto base = base_prompt(tokens);
  {
    (void)c.admit(0, base);
    (void)c.commit(0, static_cast<std::uint32_t>(tokens));
    (void)c.release(0);
  }
  const std::size_t shared = hit == 100 ? tokens : tokens * hit / 100 / B * B;
  std::vector<token_id> prompt = base;
  seq_id id = 1;
  // Warm-up: the sequence records reach their steady-state capacity, the pool cycles once.
  for (int i = 0; i < 6; ++i) {
    make_unique(prompt, shared, id);
    (void)c.admit(id, prompt);
    (void)c.commit(id, static_cast<std::uint32_t>(tokens));
    (void)c.release(id);
    (void)c.step_complete(c.current_epoch());
    ++id;
  }
  const std::uint64_t allocations_before = g_allocations.load();
  std::uint64_t matched = 0;
  for (auto _ : state) {
    make_unique(prompt, shared, id);
    auto plan = c.admit(id, prompt);
    matched += plan->kv_matched_tokens;
    (void)c.commit(id, static_cast<std::uint32_t>(tokens));
    (void)c.release(id);
    (void)c.step_complete(c.current_epoch());
    ++id;
  }
  const double iterations = static_cast<double>(state.iterations());
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
  state.counters["hit_pct"] = static_cast<double>(matched) / iterations / static_cast<double>(tokens) * 100.0;
  state.counters["allocs_per_op"] = static_cast<double>(g_allocations.load() - allocations_before) / iterations;
  state.counters["evictions_per_op"] = static_cast<double>(c.metrics().kv_evictions) / (iterations + 6);
}

void BM_floor(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const auto hit = static_cast<std::size_t>(state.range(1));
  const xxh3_hasher h(11);
  const auto base = base_prompt(tokens);
  // A hash table of the same size as the cache's index, holding the base prompt's keys.
  std::unordered_set<std::uint64_t> table;
  table.reserve(4 * (tokens / B + 1));
  block_key k = h.root({});
  for (std::size_t i = 0; i + B <= tokens; i += B) {
    k = h.chain(k, std::span<const token_id>(base).subspan(i, B));
    table.insert(k.lo);
  }
  const std::size_t shared = hit == 100 ? tokens : tokens * hit / 100 / B * B;
  std::vector<token_id> prompt = base;
  std::uint64_t id = 1;
  std::uint64_t found = 0;
  for (auto _ : state) {
    make_unique(prompt, shared, id++);
    block_key key = h.root({});
    for (std::size_t i = 0; i + B <= tokens; i += B) {
      key = h.chain(key, std::span<const token_id>(prompt).subspan(i, B));
      found += table.count(key.lo);
    }
    benchmark::DoNotOptimize(found);
  }
  state.counters["ns_per_token"] =
      benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate |
                                                          benchmark::Counter::kInvert);
}

/// Each configuration's cache run is followed directly by its floor run (not all cache runs, then all floor
/// runs): on a shared machine the load drifts over the minutes the whole binary takes, and a ratio of two
/// runs seconds apart is far less exposed to that drift.
void register_benchmarks() {
  for (std::int64_t tokens : {1024, 8192, 32768, 131072})
    for (std::int64_t hit : {0, 50, 100}) {
      benchmark::RegisterBenchmark("BM_cache", BM_cache)->Args({tokens, hit})->Unit(benchmark::kMicrosecond);
      benchmark::RegisterBenchmark("BM_floor", BM_floor)->Args({tokens, hit})->Unit(benchmark::kMicrosecond);
    }
}

/// cache / floor for every configuration run.
void print_ratios(const reprise::bench::cpu_time_reporter& reporter) {
  std::printf("\n%-22s %12s %12s %8s\n", "config (tokens/hit%)", "cache cpu us", "floor cpu us", "ratio");
  for (const auto& [name, t] : reporter.times()) {
    if (name.rfind("BM_cache/", 0) != 0) continue;
    const std::string config = name.substr(9);
    const double floor = reporter.time("BM_floor/" + config);
    if (floor == 0) continue;
    std::printf("%-22s %12.2f %12.2f %8.2f\n", config.c_str(), t, floor, t / floor);
  }
}
} // namespace

int main(int argc, char** argv) {
  register_benchmarks();
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  reprise::bench::cpu_time_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter);
  benchmark::Shutdown();
  return 0;
}
