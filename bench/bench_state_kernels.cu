// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// State kernels on the GPU at Nemotron-H sizes. Bandwidth figures count bytes read + written and sit next
// to a device-to-device cudaMemcpy measured in the same run (`memcpy_d2d`): the goals are slot copy >= 85 %
// and selective state update >= 75 % of it. Times come from CUDA events around each launch (manual time).
// Without a device every benchmark reports an error and the binary exits 0.
#include <reprise/gpu/device.hpp>
#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/mamba2.hpp>
#include <reprise/ops/state_copy.hpp>

#include <benchmark/benchmark.h>
#include <thrust/device_vector.h>

#include <cuda_runtime.h>

#include <vector>

using namespace reprise;
using namespace reprise::ops;

namespace {

// Nemotron-H-8B Mamba2 layer: H128 P64 N128 G8, conv over H*P + 2*G*N = 10240 channels, W4; 24 such layers.
constexpr std::int64_t H = 128, P = 64, N = 128, G = 8, W = 4, CH = H * P + 2 * G * N, layers = 24;

/// False (and the benchmark reports an error) without a device: nothing may touch device memory then.
bool require_device(benchmark::State& state) {
  if (gpu::device_present()) return true;
  state.SkipWithError("no CUDA device");
  return false;
}

/// Times `launch` with CUDA events; reports an error (and stops) when a call fails.
template <class F>
void time_device(benchmark::State& state, F&& launch) {
  cudaEvent_t start, stop;
  cudaEventCreate(&start);
  cudaEventCreate(&stop);
  if (!launch()) { // warm-up: module load, attribute setup
    state.SkipWithError("launch failed");
    return;
  }
  cudaDeviceSynchronize();
  for (auto _ : state) {
    cudaEventRecord(start);
    const bool ok = launch();
    cudaEventRecord(stop);
    cudaEventSynchronize(stop);
    if (!ok) {
      state.SkipWithError("launch failed");
      break;
    }
    float ms = 0;
    cudaEventElapsedTime(&ms, start, stop);
    state.SetIterationTime(ms / 1e3);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
}

template <class T>
thrust::device_vector<T> filled(std::size_t n, float v) {
  return thrust::device_vector<T>(n, from_float<T>(v));
}

void memcpy_d2d(benchmark::State& state) {
  if (!require_device(state)) return;
  const std::size_t bytes = std::size_t{1} << 30;
  thrust::device_vector<unsigned char> a(bytes), b(bytes);
  time_device(state, [&] {
    return cudaMemcpyAsync(thrust::raw_pointer_cast(b.data()), thrust::raw_pointer_cast(a.data()), bytes,
                           cudaMemcpyDeviceToDevice) == cudaSuccess;
  });
  state.SetBytesProcessed(state.iterations() * 2 * bytes);
}
BENCHMARK(memcpy_d2d)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// Snapshot save of `pairs` sequences across all 24 layers (SSM fp32 + conv bf16): one launch.
void slot_copy(benchmark::State& state) {
  if (!require_device(state)) return;
  const std::int64_t pairs_n = state.range(0), slots = 2 * pairs_n;
  const std::size_t ssm = H * P * N * sizeof(float), conv = (W - 1) * CH * 2;
  std::vector<thrust::device_vector<unsigned char>> pools;
  std::vector<pool_view> views;
  for (std::int64_t l = 0; l < layers; ++l) {
    pools.emplace_back(ssm * slots);
    views.push_back({thrust::raw_pointer_cast(pools.back().data()), ssm, slots});
    pools.emplace_back(conv * slots);
    views.push_back({thrust::raw_pointer_cast(pools.back().data()), conv, slots});
  }
  std::vector<copy_pair> pairs;
  for (std::int64_t i = 0; i < pairs_n; ++i) pairs.push_back({static_cast<std::int32_t>(i), static_cast<std::int32_t>(pairs_n + i)});
  thrust::device_vector<unsigned char> ws(copy_units_workspace_bytes(views.size(), pairs.size()));
  const device_workspace w{thrust::raw_pointer_cast(ws.data()), ws.size()};
  time_device(state, [&] { return copy_state_slots(views, pairs, w, nullptr).has_value(); });
  state.SetBytesProcessed(state.iterations() * 2 * pairs_n * layers * (ssm + conv));
}
BENCHMARK(slot_copy)->Arg(1)->Arg(8)->Arg(32)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// Selective state update of one layer for `batch` decode tokens, copy-on-write into fresh slots.
void state_update(benchmark::State& state) {
  if (!require_device(state)) return;
  const std::int64_t batch = state.range(0), slots = 2 * batch;
  auto x = filled<bfloat16>(batch * H * P, 0.5f), dt = filled<bfloat16>(batch * H, -2.0f);
  auto B = filled<bfloat16>(batch * G * N, 0.1f), C = filled<bfloat16>(batch * G * N, 0.1f);
  auto y = filled<bfloat16>(batch * H * P, 0.0f);
  auto A = filled<float>(H, -0.5f), D = filled<float>(H, 1.0f), pool = filled<float>(slots * H * P * N, 0.01f);
  mamba2_args<bfloat16> a{make_tensor(thrust::raw_pointer_cast(x.data()), batch, H, P),
                          make_tensor(thrust::raw_pointer_cast(dt.data()), batch, H),
                          make_tensor(thrust::raw_pointer_cast(A.data()), H),
                          make_tensor(thrust::raw_pointer_cast(B.data()), batch, G, N),
                          make_tensor(thrust::raw_pointer_cast(C.data()), batch, G, N),
                          make_tensor(thrust::raw_pointer_cast(D.data()), H), {}, {},
                          make_tensor(thrust::raw_pointer_cast(pool.data()), slots, H, P, N),
                          make_tensor(thrust::raw_pointer_cast(y.data()), batch, H, P)};
  std::vector<copy_pair> pairs;
  for (std::int64_t i = 0; i < batch; ++i) pairs.push_back({static_cast<std::int32_t>(i), static_cast<std::int32_t>(batch + i)});
  thrust::device_vector<unsigned char> ws(mamba2_state_update_workspace_bytes(a, pairs));
  const device_workspace w{thrust::raw_pointer_cast(ws.data()), ws.size()};
  time_device(state, [&] { return mamba2_state_update(a, pairs, w, nullptr).has_value(); });
  state.SetBytesProcessed(state.iterations() * batch * 2 * H * P * N * sizeof(float));
  state.SetItemsProcessed(state.iterations() * batch);
}
BENCHMARK(state_update)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// SSD chunked prefill of one layer: `tokens` tokens in one sequence, captures every 1024 tokens.
void ssd_prefill(benchmark::State& state) {
  if (!require_device(state)) return;
  const std::int64_t L = state.range(0), Q = 256;
  if (mamba2_supports({P, N, Q, dtype::bf16}) != errc{}) {
    state.SkipWithError("P64 N128 Q256 not instantiated (build with REPRISE_KERNELS_FULL=ON)");
    return;
  }
  const std::int64_t slots = 2 + L / 1024;
  auto x = filled<bfloat16>(L * H * P, 0.5f), dt = filled<bfloat16>(L * H, -2.0f);
  auto B = filled<bfloat16>(L * G * N, 0.1f), C = filled<bfloat16>(L * G * N, 0.1f);
  auto z = filled<bfloat16>(L * H * P, 1.0f), y = filled<bfloat16>(L * H * P, 0.0f);
  auto A = filled<float>(H, -0.5f), D = filled<float>(H, 1.0f), pool = filled<float>(slots * H * P * N, 0.0f);
  mamba2_args<bfloat16> a{make_tensor(thrust::raw_pointer_cast(x.data()), L, H, P),
                          make_tensor(thrust::raw_pointer_cast(dt.data()), L, H),
                          make_tensor(thrust::raw_pointer_cast(A.data()), H),
                          make_tensor(thrust::raw_pointer_cast(B.data()), L, G, N),
                          make_tensor(thrust::raw_pointer_cast(C.data()), L, G, N),
                          make_tensor(thrust::raw_pointer_cast(D.data()), H), {},
                          make_tensor(thrust::raw_pointer_cast(z.data()), L, H, P),
                          make_tensor(thrust::raw_pointer_cast(pool.data()), slots, H, P, N),
                          make_tensor(thrust::raw_pointer_cast(y.data()), L, H, P)};
  a.chunk = Q;
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  std::vector<capture_point> caps;
  for (std::int64_t p = 1024, s = 1; p <= L; p += 1024, ++s) caps.push_back({0, p, static_cast<std::int32_t>(s)});
  const varlen_batch b{cu, start};
  const prefill_slots ps{none, live, caps};
  thrust::device_vector<unsigned char> ws(mamba2_ssd_prefill_workspace_bytes(a, b, ps));
  const device_workspace w{thrust::raw_pointer_cast(ws.data()), ws.size()};
  time_device(state, [&] { return mamba2_ssd_prefill(a, b, ps, w, nullptr).has_value(); });
  state.SetItemsProcessed(state.iterations() * L); // tokens/s of one layer
}
BENCHMARK(ssd_prefill)->Arg(4096)->Arg(16384)->UseManualTime()->Unit(benchmark::kMicrosecond);

/// Causal conv1d prefill of one layer (10240 channels, W4, bf16).
void conv1d_prefill(benchmark::State& state) {
  if (!require_device(state)) return;
  const std::int64_t L = state.range(0);
  auto x = filled<bfloat16>(L * CH, 0.5f), out = filled<bfloat16>(L * CH, 0.0f);
  auto pool = filled<bfloat16>(2 * (W - 1) * CH, 0.0f);
  auto w = filled<float>(CH * W, 0.25f);
  conv1d_args<bfloat16> a{make_tensor(static_cast<const bfloat16*>(thrust::raw_pointer_cast(x.data())), L, CH),
                          make_tensor(static_cast<const float*>(thrust::raw_pointer_cast(w.data())), CH, W), {},
                          make_tensor(thrust::raw_pointer_cast(pool.data()), 2, W - 1, CH),
                          make_tensor(thrust::raw_pointer_cast(out.data()), L, CH)};
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  const varlen_batch b{cu, start};
  const prefill_slots ps{none, live};
  thrust::device_vector<unsigned char> ws(causal_conv1d_prefill_workspace_bytes(a, b, ps));
  const device_workspace wsv{thrust::raw_pointer_cast(ws.data()), ws.size()};
  time_device(state, [&] { return causal_conv1d_prefill(a, b, ps, wsv, nullptr).has_value(); });
  state.SetItemsProcessed(state.iterations() * L);
  state.SetBytesProcessed(state.iterations() * L * CH * 2 * 2);
}
BENCHMARK(conv1d_prefill)->Arg(4096)->UseManualTime()->Unit(benchmark::kMicrosecond);

} // namespace

BENCHMARK_MAIN();
