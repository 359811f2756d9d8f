// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// CUDA-graph capture of the Mamba2 launchers (include/reprise/ops/mamba2.hpp, "CUDA-graph capture"): a decode
// step and a prefill captured once, replayed with new metadata (slots, offsets, captures) written by the
// engine before each replay, bitwise equal to direct launches of the same metadata. Also: the capture-safe
// launchers refuse operands that do not match the planned shape.
#include <reprise/ops/mamba2.hpp>

#include "gpu/harness.cuh"
#include "support/mamba2_case.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstring>
#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {

// The reduced kernel set's shape (what every build instantiates): P16 N16, Q64.
constexpr std::int64_t Q = 64, H = 4, P = 16, G = 2, N = 16, slots = 8;

struct device_case {
  thrust::device_vector<float> x, dt, B, C, z, y, A, D, dt_bias, pool;
  explicit device_case(const mamba2_case<float>& k)
      : x(to_device(k.x)), dt(to_device(k.dt)), B(to_device(k.B)), C(to_device(k.C)), z(to_device(k.z)),
        y(to_device(k.y)), A(to_device(k.A)), D(to_device(k.D)), dt_bias(to_device(k.dt_bias)),
        pool(to_device(k.pool)) {}
  mamba2_args<float> args(const mamba2_case<float>& k) {
    mamba2_args<float> a{dcview(x, k.rows, k.H, k.P), dcview(dt, k.rows, k.H), dcview(A, k.H),
                         dcview(B, k.rows, k.G, k.N), dcview(C, k.rows, k.G, k.N), dcview(D, k.H),
                         dcview(dt_bias, k.H), dcview(z, k.rows, k.H, k.P), dview(pool, k.slots, k.H, k.P, k.N),
                         dview(y, k.rows, k.H, k.P)};
    a.chunk = Q;
    return a;
  }
  /// Back to the case's initial pool and output (poisoned), so that each run starts from the same state.
  void reset(const mamba2_case<float>& k) {
    thrust::copy(k.pool.begin(), k.pool.end(), pool.begin());
    thrust::copy(k.y.begin(), k.y.end(), y.begin());
  }
};

/// A captured graph and its executable, destroyed with the object.
struct graph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (g != nullptr) cudaGraphDestroy(g);
  }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// Pinned host memory (the engine's staging for metadata a graph copies at each replay).
struct pinned {
  std::byte* p = nullptr;
  explicit pinned(std::size_t bytes) { REQUIRE(cudaMallocHost(&p, bytes == 0 ? 1 : bytes) == cudaSuccess); }
  ~pinned() { cudaFreeHost(p); }
};

} // namespace

TEST_CASE("a captured decode step replays new slot pairs bitwise like direct launches") {
  random_source rng(301);
  mamba2_case<float> k(rng, 3, H, P, G, N, slots);
  device_case d(k);
  thrust::device_vector<copy_pair> dpairs(3);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);

  graph gr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const auto captured = mamba2_state_update_planned(d.args(k), thrust::raw_pointer_cast(dpairs.data()), s);
  REQUIRE(cudaStreamEndCapture(s, &gr.g) == cudaSuccess);
  REQUIRE(captured.has_value());
  REQUIRE(cudaGraphInstantiate(&gr.exec, gr.g, 0) == cudaSuccess);

  // Two steps of different metadata: a fork, padding and an in-place row; then other slots and no padding.
  const std::vector<std::vector<copy_pair>> steps{{{1, 4}, {-1, 5}, {2, 2}}, {{3, 6}, {0, 0}, {7, 1}}};
  for (const auto& pairs : steps) {
    REQUIRE(validate_decode_slots(pairs, slots) == errc{});
    d.reset(k);
    thrust::copy(pairs.begin(), pairs.end(), dpairs.begin()); // same buffer: the graph holds its address
    REQUIRE(cudaGraphLaunch(gr.exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(device_ok());
    const auto gy = to_host(d.y);
    const auto gpool = to_host(d.pool);

    d.reset(k);
    scratch ws(mamba2_state_update_workspace_bytes(d.args(k), pairs));
    REQUIRE(mamba2_state_update(d.args(k), pairs, ws.workspace(), s).has_value());
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gy, to_host(d.y)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gpool, k.pool)); // the step wrote something
  }
  cudaStreamDestroy(s);
}

TEST_CASE("a captured prefill replays new offsets, slots and captures bitwise like direct launches") {
  random_source rng(302);
  const std::int64_t rows = 160;
  mamba2_case<float> k(rng, rows, H, P, G, N, slots);
  device_case d(k);
  cudaStream_t s = nullptr;
  REQUIRE(cudaStreamCreate(&s) == cudaSuccess);

  // Two batches of the same shape (2 sequences, 3 chunks) with different offsets, start positions, slots
  // and captures: the second sequence of batch 2 starts off the chunk grid.
  struct batch_case {
    std::vector<std::int32_t> cu;
    std::vector<std::int64_t> start;
    std::vector<std::int32_t> initial, final_slots;
    std::vector<capture_point> caps;
  };
  const std::vector<batch_case> batches{
      {{0, 100, 160}, {0, 0}, {-1, 5}, {0, 1}, {{0, 64, 2}}},
      {{0, 60, 160}, {0, 24}, {6, -1}, {3, 4}, {{1, 64, 7}}},
  };
  std::vector<ssd_prefill_shape> shapes;
  for (const batch_case& b : batches) {
    auto sh = mamba2_ssd_prefill_plan(d.args(k), {b.cu, b.start}, {b.initial, b.final_slots, b.caps}, {});
    REQUIRE(sh.has_value());
    shapes.push_back(*sh);
  }
  REQUIRE(shapes[0] == shapes[1]);
  const ssd_prefill_shape shape = shapes[0];
  CHECK(shape.chunks == 3);
  CHECK(shape.sequences == 2);

  scratch ws(shape.workspace_bytes);
  pinned staging(shape.metadata_bytes);
  graph gr;
  REQUIRE(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  // The graph copies the plan from pinned memory at each replay, then runs the kernels over it.
  const cudaError_t copied =
      cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, s);
  const auto captured = mamba2_ssd_prefill_planned(d.args(k), shape, ws.workspace(), s);
  REQUIRE(cudaStreamEndCapture(s, &gr.g) == cudaSuccess);
  REQUIRE(copied == cudaSuccess);
  REQUIRE(captured.has_value());
  REQUIRE(cudaGraphInstantiate(&gr.exec, gr.g, 0) == cudaSuccess);

  for (const batch_case& b : batches) {
    const varlen_batch vb{b.cu, b.start};
    const prefill_slots ps{b.initial, b.final_slots, b.caps};
    d.reset(k);
    REQUIRE(mamba2_ssd_prefill_plan(d.args(k), vb, ps, {staging.p, shape.metadata_bytes}).has_value());
    REQUIRE(cudaGraphLaunch(gr.exec, s) == cudaSuccess);
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(device_ok());
    const auto gy = to_host(d.y);
    const auto gpool = to_host(d.pool);

    d.reset(k);
    scratch direct(mamba2_ssd_prefill_workspace_bytes(d.args(k), vb, ps));
    REQUIRE(mamba2_ssd_prefill(d.args(k), vb, ps, direct.workspace(), s).has_value());
    REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gy, to_host(d.y)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gy, k.y)); // every output was written over the poison
  }
  cudaStreamDestroy(s);
}

TEST_CASE("capture-safe launchers refuse operands that do not match, and launch nothing") {
  random_source rng(303);
  mamba2_case<float> k(rng, 100, H, P, G, N, slots);
  device_case d(k);
  const std::vector<std::int32_t> cu{0, 100}, initial{-1}, final_slots{0};
  const std::vector<std::int64_t> start{0};
  auto sh = mamba2_ssd_prefill_plan(d.args(k), {cu, start}, {initial, final_slots}, {});
  REQUIRE(sh.has_value());
  std::vector<std::byte> small(sh->metadata_bytes - 1);
  CHECK(mamba2_ssd_prefill_plan(d.args(k), {cu, start}, {initial, final_slots}, small).error() == errc::size_mismatch);
  ssd_prefill_shape wrong = *sh;
  wrong.chunks += 1; // byte counts no longer match the extents
  scratch ws(sh->workspace_bytes);
  CHECK(mamba2_ssd_prefill_planned(d.args(k), wrong, ws.workspace(), nullptr).error() == errc::size_mismatch);
  CHECK(mamba2_ssd_prefill_planned(d.args(k), *sh, {ws.workspace().data, sh->workspace_bytes - 1}, nullptr).error() ==
        errc::size_mismatch);
  ssd_prefill_shape negative = *sh;
  negative.sequences = -1;
  CHECK(mamba2_ssd_prefill_planned(d.args(k), negative, ws.workspace(), nullptr).error() == errc::invalid_argument);
  CHECK(mamba2_state_update_planned(d.args(k), nullptr, nullptr).error() == errc::invalid_argument);
  REQUIRE(device_ok());
  CHECK(same_bits(to_host(d.pool), k.pool));
  CHECK(same_bits(to_host(d.y), k.y));
}
