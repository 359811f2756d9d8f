// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Host gated-delta throughput at Qwen3-Next-80B-A3B sizes (H16 HV32 K128 V128, Q64): chunked prefill
// tokens/s against the recurrent step over the same tokens (the baseline the WY form replaces), and decode
// tokens/s. The host implementation is the reference for the CUDA kernels and a regression guard for the
// math, not a production path; these figures track it. Benchmarks measure; they assert nothing.
#include <reprise/ops/gated_delta.hpp>

#include <benchmark/benchmark.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;

gated_delta_shape qwen3_next() {
  gated_delta_shape s;
  s.key_heads = 16;
  s.value_heads = 32;
  s.key_dim = 128;
  s.value_dim = 128;
  s.chunk = 64;
  return s;
}

struct workload {
  gated_delta_shape shape = qwen3_next();
  std::int64_t tokens;
  std::vector<float> q, k, v, g, beta, o, pool;
  explicit workload(std::int64_t t, int slots) : tokens(t) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(0.0f, 1.0f);
    const std::size_t nk = std::size_t(t) * shape.key_heads * shape.key_dim;
    const std::size_t nv = std::size_t(t) * shape.value_heads * shape.value_dim;
    q.resize(nk);
    k.resize(nk);
    v.resize(nv);
    o.resize(nv);
    for (auto* vec : {&q, &k, &v})
      for (auto& x : *vec) x = normal(rng);
    g.resize(std::size_t(t) * shape.value_heads);
    beta.resize(g.size());
    for (auto& x : g) x = -0.3f * unif(rng) - 0.002f;
    for (auto& x : beta) x = 0.05f + 0.9f * unif(rng);
    pool.assign(std::size_t(slots) * shape.value_heads * shape.key_dim * shape.value_dim, 0.0f);
  }
  gated_delta_io<float> io() { return {q.data(), k.data(), v.data(), g.data(), beta.data(), o.data(), tokens}; }
  state_pool<float> states() {
    const std::int64_t m = std::int64_t{shape.value_heads} * shape.key_dim * shape.value_dim;
    return {pool.data(), static_cast<std::int32_t>(pool.size() / std::size_t(m)), m};
  }
};

gated_delta_options options() {
  gated_delta_options opt;
  opt.l2norm_qk = true;
  return opt;
}

/// One sequence of `tokens` tokens from position 0, capturing every chunk boundary it crosses.
void bm_host_chunked_prefill(benchmark::State& st) {
  const std::int64_t tokens = st.range(0);
  workload w(tokens, 2 + static_cast<int>(tokens / 64));
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(tokens)};
  const std::int64_t start = 0;
  const std::int32_t init = 0, fin = 1;
  std::vector<state_capture> caps;
  for (std::int64_t p = 64; p <= tokens; p += 64)
    caps.push_back({0, static_cast<std::int32_t>(1 + p / 64), p});
  const gated_delta_prefill_batch b{1, cu, &start, &init, &fin, caps.data(), static_cast<std::int32_t>(caps.size())};
  for (auto _ : st) {
    auto r = gated_delta_chunked_prefill(w.shape, options(), w.io(), b, w.states());
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.o.data());
  }
  st.SetItemsProcessed(st.iterations() * tokens);
  st.counters["captures"] = static_cast<double>(caps.size());
}
BENCHMARK(bm_host_chunked_prefill)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The same tokens through the recurrent step (one multi-token "verification" of the whole sequence): the
/// sequential baseline for the chunked form.
void bm_host_recurrent_prefill_baseline(benchmark::State& st) {
  const std::int64_t tokens = st.range(0);
  workload w(tokens, 2);
  const std::int32_t cu[2] = {0, static_cast<std::int32_t>(tokens)};
  const std::int32_t src = 0, dst = 1;
  const gated_delta_step_batch b{1, cu, nullptr, &src, &dst, nullptr, 0};
  for (auto _ : st) {
    auto r = gated_delta_recurrent_step(w.shape, options(), w.io(), b, w.states());
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.o.data());
  }
  st.SetItemsProcessed(st.iterations() * tokens);
}
BENCHMARK(bm_host_recurrent_prefill_baseline)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Decode: one token for each of `batch` sequences, state read from and written back to its live slot.
/// bytes_per_second counts the state traffic (fp32 read + write), the figure the GPU kernel is judged by.
void bm_host_decode(benchmark::State& st) {
  const std::int32_t batch = static_cast<std::int32_t>(st.range(0));
  workload w(batch, batch);
  std::vector<std::int32_t> slots(static_cast<std::size_t>(batch));
  for (std::int32_t i = 0; i < batch; ++i) slots[std::size_t(i)] = i;
  const gated_delta_step_batch b{batch, nullptr, nullptr, slots.data(), slots.data(), nullptr, 0};
  for (auto _ : st) {
    auto r = gated_delta_recurrent_step(w.shape, options(), w.io(), b, w.states());
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.pool.data());
  }
  st.SetItemsProcessed(st.iterations() * batch);
  st.SetBytesProcessed(st.iterations() * std::int64_t{batch} * 2 * w.shape.matrix_state_bytes());
}
BENCHMARK(bm_host_decode)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace
BENCHMARK_MAIN();
