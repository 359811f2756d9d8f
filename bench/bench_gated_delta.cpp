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

constexpr std::int64_t H = 16, HV = 32, K = 128, V = 128; // Qwen3-Next-80B-A3B

struct workload {
  std::int64_t tokens, slots;
  std::vector<float> q, k, v, g, beta, out, pool;
  workload(std::int64_t t, std::int64_t s) : tokens(t), slots(s) {
    std::mt19937 rng(1);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_real_distribution<float> unif(0.0f, 1.0f);
    q.resize(static_cast<std::size_t>(t * H * K));
    k.resize(q.size());
    v.resize(static_cast<std::size_t>(t * HV * V));
    out.resize(v.size());
    for (auto* vec : {&q, &k, &v})
      for (auto& x : *vec) x = normal(rng);
    g.resize(static_cast<std::size_t>(t * HV));
    beta.resize(g.size());
    for (auto& x : g) x = -0.3f * unif(rng) - 0.002f;
    for (auto& x : beta) x = 0.05f + 0.9f * unif(rng);
    pool.assign(static_cast<std::size_t>(s * HV * K * V), 0.0f);
  }
  gated_delta_args<float> args() {
    return {tensor<const float, 3>(q.data(), tokens, H, K), tensor<const float, 3>(k.data(), tokens, H, K),
            tensor<const float, 3>(v.data(), tokens, HV, V), tensor<const float, 2>(g.data(), tokens, HV),
            tensor<const float, 2>(beta.data(), tokens, HV), tensor<float, 4>(pool.data(), slots, HV, K, V),
            tensor<float, 3>(out.data(), tokens, HV, V)};
  }
};

gated_delta_options options() {
  gated_delta_options o;
  o.l2norm_qk = true;
  return o;
}

/// One sequence of `tokens` tokens from position 0, capturing every chunk boundary it crosses.
void bm_host_chunked_prefill(benchmark::State& st) {
  const std::int64_t tokens = st.range(0);
  workload w(tokens, 2 + tokens / 64);
  const std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(tokens)};
  const std::vector<std::int64_t> start = {0};
  const std::vector<std::int32_t> init = {0}, fin = {1};
  std::vector<capture_point> caps;
  for (std::int64_t p = 64; p <= tokens; p += 64) caps.push_back({0, p, static_cast<std::int32_t>(1 + p / 64)});
  for (auto _ : st) {
    auto r = gated_delta_chunked_prefill_host(w.args(), options(), varlen_batch{cu, start}, prefill_slots{init, fin, caps});
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.out.data());
  }
  st.SetItemsProcessed(st.iterations() * tokens);
  st.counters["captures"] = static_cast<double>(caps.size());
}
BENCHMARK(bm_host_chunked_prefill)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

/// The same tokens through the recurrent step (one multi-token step over the whole sequence): the
/// sequential baseline of the chunked form.
void bm_host_recurrent_prefill_baseline(benchmark::State& st) {
  const std::int64_t tokens = st.range(0);
  workload w(tokens, 2);
  const std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(tokens)};
  const std::vector<std::int64_t> start = {0};
  const std::vector<copy_pair> pairs = {{0, 1}};
  for (auto _ : st) {
    auto r = gated_delta_recurrent_step_host(w.args(), options(), varlen_batch{cu, start}, recurrent_slots{pairs});
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.out.data());
  }
  st.SetItemsProcessed(st.iterations() * tokens);
}
BENCHMARK(bm_host_recurrent_prefill_baseline)->Arg(128)->Arg(512)->Unit(benchmark::kMillisecond)->UseRealTime();

/// Decode: one token for each of `batch` sequences, state updated in its live slot. bytes_per_second
/// counts the state traffic (fp32 read + write), the figure the GPU kernel is judged by.
void bm_host_decode(benchmark::State& st) {
  const std::int64_t batch = st.range(0);
  workload w(batch, batch);
  std::vector<std::int32_t> cu(static_cast<std::size_t>(batch) + 1);
  std::vector<std::int64_t> start(static_cast<std::size_t>(batch), 100);
  std::vector<copy_pair> pairs(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i <= batch; ++i) cu[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(i);
  for (std::int64_t i = 0; i < batch; ++i)
    pairs[static_cast<std::size_t>(i)] = {static_cast<std::int32_t>(i), static_cast<std::int32_t>(i)};
  for (auto _ : st) {
    auto r = gated_delta_recurrent_step_host(w.args(), options(), varlen_batch{cu, start}, recurrent_slots{pairs});
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(w.pool.data());
  }
  st.SetItemsProcessed(st.iterations() * batch);
  st.SetBytesProcessed(st.iterations() * batch * 2 * HV * K * V * std::int64_t{sizeof(float)});
}
BENCHMARK(bm_host_decode)->Arg(1)->Arg(8)->Unit(benchmark::kMillisecond)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
