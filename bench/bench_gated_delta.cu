// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta kernels on the device at Qwen3-Next-80B-A3B sizes (H16 HV32 K128 V128, Q64; the small test
// shape when the build has only the reduced set):
//   - decode: the recurrent step over a batch, its state traffic (fp32 read + write per sequence) against a
//     device-to-device cudaMemcpy of the same bytes measured in the same run (`vs_memcpy`, goal >= 0.70 at
//     batch >= 64);
//   - prefill: chunked prefill tokens/s, with a capture at every chunk boundary.
// Timed with CUDA events (manual time). Benchmarks measure; they assert nothing. Without a device every
// benchmark reports "no CUDA device".
#include <reprise/gpu/device.hpp>
#include <reprise/ops/gated_delta.hpp>

#include <benchmark/benchmark.h>

#include <cuda_runtime.h>

#include <cstdint>
#include <random>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;

struct dims {
  std::int64_t h, hv, k, v;
};

dims bench_dims() {
  if (gated_delta_supports({128, 128, 64, dtype::bf16}) == errc{}) return {16, 32, 128, 128};
  return {2, 4, 32, 16};
}

/// A zeroed device buffer of `n` elements.
template <class T>
struct device_buffer {
  T* ptr = nullptr;
  std::size_t n = 0;
  explicit device_buffer(std::size_t count) : n(count) {
    if (cudaMalloc(&ptr, n * sizeof(T) + 1) != cudaSuccess) ptr = nullptr;
    if (ptr) cudaMemset(ptr, 0, n * sizeof(T));
  }
  ~device_buffer() { cudaFree(ptr); }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;
};

std::vector<float> random_values(std::size_t n, float lo, float hi, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> d(lo, hi);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

std::vector<bfloat16> to_bf16(const std::vector<float>& v) {
  std::vector<bfloat16> r(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) r[i] = from_float<bfloat16>(v[i]);
  return r;
}

template <class T>
void upload(device_buffer<T>& dst, const std::vector<T>& src) {
  if (dst.ptr) cudaMemcpy(dst.ptr, src.data(), src.size() * sizeof(T), cudaMemcpyHostToDevice);
}

/// bf16 activations (what Qwen3-Next runs), fp32 state pool of `slots` slots.
struct device_layer {
  dims d;
  std::int64_t tokens, slots;
  device_buffer<bfloat16> q, k, v, out;
  device_buffer<float> g, beta, pool;
  device_buffer<std::byte> workspace;
  device_layer(dims dd, std::int64_t t, std::int64_t s)
      : d(dd), tokens(t), slots(s), q(std::size_t(t * d.h * d.k)), k(q.n), v(std::size_t(t * d.hv * d.v)), out(v.n),
        g(std::size_t(t * d.hv)), beta(g.n), pool(std::size_t(s * d.hv * d.k * d.v)), workspace(std::size_t(1) << 22) {
    upload(q, to_bf16(random_values(q.n, -1, 1, 1)));
    upload(k, to_bf16(random_values(k.n, -1, 1, 2)));
    upload(v, to_bf16(random_values(v.n, -1, 1, 3)));
    upload(g, random_values(g.n, -0.3f, -0.002f, 4));
    upload(beta, random_values(beta.n, 0.05f, 0.95f, 5));
  }

  gated_delta_args<bfloat16> args() const {
    return {tensor<const bfloat16, 3>(q.ptr, tokens, d.h, d.k), tensor<const bfloat16, 3>(k.ptr, tokens, d.h, d.k),
            tensor<const bfloat16, 3>(v.ptr, tokens, d.hv, d.v), tensor<const float, 2>(g.ptr, tokens, d.hv),
            tensor<const float, 2>(beta.ptr, tokens, d.hv), tensor<float, 4>(pool.ptr, slots, d.hv, d.k, d.v),
            tensor<bfloat16, 3>(out.ptr, tokens, d.hv, d.v)};
  }
  device_workspace ws() const { return {workspace.ptr, workspace.n}; }
  std::size_t state_bytes() const { return std::size_t(d.hv * d.k * d.v) * sizeof(float); }
};

/// Times `f` (enqueued on the default stream) with CUDA events; returns seconds per call.
template <class F>
double time_calls(F&& f, int reps) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  f(); // warm-up
  cudaEventRecord(a);
  for (int i = 0; i < reps; ++i) f();
  cudaEventRecord(b);
  cudaEventSynchronize(b);
  float ms = 0;
  cudaEventElapsedTime(&ms, a, b);
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return ms * 1e-3 / reps;
}

void bm_device_decode(benchmark::State& st) {
  if (!gpu::device_present()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  const std::int64_t batch = st.range(0);
  // Two slots per sequence, ping-pong (src != dst: the copy-on-write form, the state is read and written).
  device_layer layer(bench_dims(), batch, 2 * batch);
  std::vector<std::int32_t> cu(static_cast<std::size_t>(batch) + 1);
  std::vector<std::int64_t> start(static_cast<std::size_t>(batch), 100);
  std::vector<copy_pair> pairs(static_cast<std::size_t>(batch));
  for (std::int64_t i = 0; i <= batch; ++i) cu[std::size_t(i)] = static_cast<std::int32_t>(i);
  for (std::int64_t i = 0; i < batch; ++i) pairs[std::size_t(i)] = {static_cast<std::int32_t>(i), static_cast<std::int32_t>(batch + i)};
  gated_delta_options o;
  o.l2norm_qk = true;
  const varlen_batch b{cu, start};
  const recurrent_slots r{pairs};
  const std::size_t bytes = std::size_t(batch) * layer.state_bytes();
  device_buffer<std::byte> src(bytes), dst(bytes);
  bool ok = true;
  for (auto _ : st) {
    const double t = time_calls([&] { ok &= gated_delta_recurrent_step(layer.args(), o, b, r, layer.ws(), nullptr).has_value(); }, 20);
    st.SetIterationTime(t);
    const double tm = time_calls([&] { cudaMemcpyAsync(dst.ptr, src.ptr, bytes, cudaMemcpyDeviceToDevice); }, 20);
    st.counters["GB/s"] = 2.0 * double(bytes) / t * 1e-9;
    st.counters["memcpy_GB/s"] = 2.0 * double(bytes) / tm * 1e-9;
    st.counters["vs_memcpy"] = tm / t;
  }
  if (!ok) st.SkipWithError("launch failed");
  st.SetItemsProcessed(st.iterations() * batch);
}
BENCHMARK(bm_device_decode)->Arg(1)->Arg(16)->Arg(64)->Arg(256)->UseManualTime()->Unit(benchmark::kMicrosecond);

void bm_device_chunked_prefill(benchmark::State& st) {
  if (!gpu::device_present()) {
    st.SkipWithError("no CUDA device");
    return;
  }
  const std::int64_t seqs = st.range(0), len = st.range(1);
  const std::int64_t caps_per_seq = len / 64;
  device_layer layer(bench_dims(), seqs * len, seqs * (2 + caps_per_seq));
  const auto n = static_cast<std::size_t>(seqs);
  std::vector<std::int32_t> cu(n + 1), init(n), fin(n);
  std::vector<std::int64_t> start(n, 0);
  std::vector<capture_point> caps;
  std::int32_t next = 0;
  for (std::int64_t s = 0; s < seqs; ++s) {
    cu[std::size_t(s) + 1] = static_cast<std::int32_t>((s + 1) * len);
    init[std::size_t(s)] = next++;
    fin[std::size_t(s)] = next++;
    for (std::int64_t c = 1; c <= caps_per_seq; ++c) caps.push_back({static_cast<std::int32_t>(s), c * 64, next++});
  }
  gated_delta_options o;
  o.l2norm_qk = true;
  const varlen_batch b{cu, start};
  const prefill_slots slots{init, fin, caps};
  bool ok = true;
  for (auto _ : st) {
    const double t = time_calls([&] { ok &= gated_delta_chunked_prefill(layer.args(), o, b, slots, layer.ws(), nullptr).has_value(); }, 3);
    st.SetIterationTime(t);
  }
  if (!ok) st.SkipWithError("launch failed");
  st.SetItemsProcessed(st.iterations() * seqs * len);
  st.counters["captures"] = double(caps.size());
}
BENCHMARK(bm_device_chunked_prefill)->Args({1, 4096})->Args({8, 512})->Args({32, 1024})->UseManualTime()->Unit(benchmark::kMillisecond);

} // namespace

BENCHMARK_MAIN();
