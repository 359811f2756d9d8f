// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Host implementations of the state kernels: throughput for regression tracking. Each family has its baseline
// in the same binary (memcpy for the copies, the fp32 multiply-add count for SSD), so ratios are comparable
// across machines. Shapes are scaled down from Nemotron-H so a run takes seconds.
#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/mamba2.hpp>
#include <reprise/ops/state_copy.hpp>

#include <benchmark/benchmark.h>

#include <cstring>
#include <random>
#include <vector>

using namespace reprise;
using namespace reprise::ops;

namespace {

template <class T>
std::vector<T> random_values(std::size_t n, float lo, float hi, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<T> v(n);
  for (T& x : v) x = from_float<T>(d(rng));
  return v;
}

template <class T>
const T* cx(const std::vector<T>& v) {
  return v.data();
}

// Mamba2 layer at a reduced size: H8 P32 N32 G1 (Nemotron-H is H128 P64 N128 G8).
constexpr std::int64_t H = 8, P = 32, N = 32, G = 1;

template <class T>
struct mamba2_operands {
  std::int64_t rows;
  std::vector<T> x, dt, B, C, z, y;
  std::vector<float> A, D, bias, pool;
  explicit mamba2_operands(std::int64_t r)
      : rows(r), x(random_values<T>(r * H * P, -1, 1, 1)), dt(random_values<T>(r * H, -4, -1, 2)),
        B(random_values<T>(r * G * N, -1, 1, 3)), C(random_values<T>(r * G * N, -1, 1, 4)),
        z(random_values<T>(r * H * P, -1, 1, 5)), y(static_cast<std::size_t>(r * H * P)),
        A(random_values<float>(H, -1, -0.2f, 6)), D(random_values<float>(H, 0.5, 1.5, 7)),
        bias(random_values<float>(H, -0.5, 0.5, 8)), pool(static_cast<std::size_t>(2 * H * P * N)) {}
  mamba2_args<T> args(std::int64_t chunk) {
    mamba2_args<T> a{make_tensor(cx(x), rows, H, P), make_tensor(cx(dt), rows, H), make_tensor(cx(A), H),
                     make_tensor(cx(B), rows, G, N), make_tensor(cx(C), rows, G, N), make_tensor(cx(D), H),
                     make_tensor(cx(bias), H), make_tensor(cx(z), rows, H, P), make_tensor(pool.data(), 2, H, P, N),
                     make_tensor(y.data(), rows, H, P)};
    a.chunk = chunk;
    return a;
  }
};

template <class T>
void ssd_prefill(benchmark::State& state) {
  const std::int64_t Q = state.range(0), L = 1024;
  mamba2_operands<T> m(L);
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  for (auto _ : state) {
    auto r = mamba2_ssd_prefill_host(m.args(Q), {cu, start}, {none, live});
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(m.y.data());
  }
  state.SetItemsProcessed(state.iterations() * L); // tokens/s
}
BENCHMARK_TEMPLATE(ssd_prefill, float)->Arg(64)->Arg(128)->Arg(256)->Unit(benchmark::kMillisecond);
BENCHMARK_TEMPLATE(ssd_prefill, bfloat16)->Arg(64)->Unit(benchmark::kMillisecond);

void state_update(benchmark::State& state) {
  const std::int64_t rows = 1;
  mamba2_operands<float> m(rows);
  const std::vector<copy_pair> pairs{{0, 1}};
  for (auto _ : state) {
    auto r = mamba2_state_update_host(m.args(0), pairs);
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(m.pool.data());
  }
  state.SetItemsProcessed(state.iterations() * rows);                              // tokens/s
  state.SetBytesProcessed(state.iterations() * rows * 2 * H * P * N * sizeof(float)); // state read + write
}
BENCHMARK(state_update);

void conv1d_prefill(benchmark::State& state) {
  const std::int64_t C = 1024, W = 4, L = 1024;
  auto x = random_values<bfloat16>(L * C, -1, 1, 9);
  auto w = random_values<float>(C * W, -0.5, 0.5, 10);
  std::vector<bfloat16> pool(static_cast<std::size_t>(2 * (W - 1) * C)), out(static_cast<std::size_t>(L * C));
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  conv1d_args<bfloat16> a{make_tensor(cx(x), L, C), make_tensor(cx(w), C, W), {}, make_tensor(pool.data(), 2, W - 1, C),
                          make_tensor(out.data(), L, C)};
  for (auto _ : state) {
    auto r = causal_conv1d_prefill_host(a, {cu, start}, {none, live});
    benchmark::DoNotOptimize(r);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetItemsProcessed(state.iterations() * L);
}
BENCHMARK(conv1d_prefill)->Unit(benchmark::kMillisecond);

// Slot copy of a snapshot of 4 layers (1 MiB SSM + 24 KiB conv per layer) vs memcpy of the same bytes.
constexpr std::size_t ssm_bytes = 1 << 20, conv_bytes = 24 << 10, layers = 4;

void slot_copy(benchmark::State& state) {
  std::vector<std::vector<unsigned char>> pools;
  std::vector<pool_view> views;
  for (std::size_t l = 0; l < layers; ++l) {
    pools.emplace_back(4 * ssm_bytes, static_cast<unsigned char>(l));
    views.push_back({pools.back().data(), ssm_bytes, 4});
    pools.emplace_back(4 * conv_bytes, static_cast<unsigned char>(l));
    views.push_back({pools.back().data(), conv_bytes, 4});
  }
  const std::vector<copy_pair> pairs{{0, 2}, {1, 3}};
  for (auto _ : state) {
    auto r = copy_units_host(views, pairs);
    benchmark::DoNotOptimize(r);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * pairs.size() * layers * (ssm_bytes + conv_bytes));
}
BENCHMARK(slot_copy);

void memcpy_baseline(benchmark::State& state) {
  const std::size_t bytes = 2 * layers * (ssm_bytes + conv_bytes);
  std::vector<unsigned char> src(bytes, 1), dst(bytes);
  for (auto _ : state) {
    std::memcpy(dst.data(), src.data(), bytes);
    benchmark::ClobberMemory();
  }
  state.SetBytesProcessed(state.iterations() * 2 * bytes); // read + write, as for slot_copy
}
BENCHMARK(memcpy_baseline);

} // namespace

BENCHMARK_MAIN();
