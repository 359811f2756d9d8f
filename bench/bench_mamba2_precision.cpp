// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Precision of the host Mamba2 SSD chunked prefill: relative RMS error of the outputs y and of the final state
// against an fp64 sequential recurrence, at Q = 64, 128 and 256, with the default test dt range and a wide one
// (raw dt in [-6, 3): after softplus, steps from 0.0025 to 3, so the in-chunk decay sums reach hundreds).
// The figures are reported as counters (rel_rms_y, rel_rms_state); the time is the host prefill's.
// Benchmarks measure; they assert nothing.
#include <reprise/ops/mamba2.hpp>

#include "support/mamba2_case.hpp"

#include <benchmark/benchmark.h>

#include <cstdint>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

constexpr std::int64_t tokens = 1024, H = 4, P = 16, G = 1, N = 16;

/// Args: {Q, wide dt (0 or 1)}.
void BM_ssd_prefill_precision(benchmark::State& state) {
  const std::int64_t Q = state.range(0);
  const bool wide = state.range(1) != 0;
  random_source rng(7);
  mamba2_case<float> k(rng, tokens, H, P, G, N, 1);
  if (wide) k.dt = rng.values<float>(static_cast<std::size_t>(tokens * H), -6.0f, 3.0f);
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(tokens)};
  const std::vector<std::int64_t> start{0};
  const std::vector<std::int32_t> initial{-1}, final_slot{0};
  for (auto _ : state) {
    auto r = mamba2_ssd_prefill_host(k.args(Q), {cu, start}, {initial, final_slot});
    benchmark::DoNotOptimize(r);
  }
  std::vector<double> S(k.state_elems(), 0.0);
  const std::vector<double> ref = reference_mamba2(k, 0, tokens, S);
  state.counters["rel_rms_y"] = relative_rms(widen(k.y), ref);
  state.counters["rel_rms_state"] = relative_rms(std::vector<double>(k.slot(0), k.slot(0) + k.state_elems()), S);
  state.SetItemsProcessed(state.iterations() * tokens);
}
BENCHMARK(BM_ssd_prefill_precision)
    ->ArgsProduct({{64, 128, 256}, {0, 1}})
    ->ArgNames({"Q", "wide_dt"})
    ->Unit(benchmark::kMillisecond)
    ->Iterations(3);

} // namespace

BENCHMARK_MAIN();
