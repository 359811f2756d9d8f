// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// CUDA-graph capture of the gated-delta, conv1d, state-copy and KV-gather launchers (the "CUDA-graph
// capture" sections of include/reprise/ops/gated_delta.hpp, conv1d.hpp and state_copy.hpp): each prefill,
// decode step, copy and gather is captured once, replayed with new metadata (offsets, start positions, slots,
// captures, rings, pairs, block tables) written by the engine before each replay, and compared bit for bit
// with a direct launch of the same metadata. Also: the capture-safe launchers refuse shapes that do not
// match, and launch nothing.
#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/gated_delta.hpp>
#include <reprise/ops/state_copy.hpp>

#include "gpu/harness.cuh"
#include "support/gated_delta_testing.hpp"
#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <random>
#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {

/// A captured graph and its executable, destroyed with the object.
struct graph {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t exec = nullptr;
  ~graph() {
    if (exec != nullptr) cudaGraphExecDestroy(exec);
    if (g != nullptr) cudaGraphDestroy(g);
  }
  void instantiate() { REQUIRE(cudaGraphInstantiate(&exec, g, 0) == cudaSuccess); }
};

/// A stream, destroyed with the object.
struct stream {
  cudaStream_t s = nullptr;
  stream() { REQUIRE(cudaStreamCreate(&s) == cudaSuccess); }
  ~stream() { cudaStreamDestroy(s); }
};

template <class T>
bool same_bits(const std::vector<T>& a, const std::vector<T>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0;
}

/// Pinned host memory (the engine's staging for metadata a graph copies at each replay).
struct pinned {
  std::byte* p = nullptr;
  std::size_t bytes = 0;
  explicit pinned(std::size_t n) : bytes(n) { REQUIRE(cudaMallocHost(&p, n == 0 ? 1 : n) == cudaSuccess); }
  pinned(const pinned&) = delete;
  pinned& operator=(const pinned&) = delete;
  ~pinned() { cudaFreeHost(p); }
  std::span<std::byte> span() { return {p, bytes}; }
};

/// Replays `gr` on `s` and waits.
void replay(const graph& gr, cudaStream_t s) {
  REQUIRE(cudaGraphLaunch(gr.exec, s) == cudaSuccess);
  REQUIRE(cudaStreamSynchronize(s) == cudaSuccess);
  REQUIRE(device_ok());
}

// ---- gated delta ------------------------------------------------------------------------------------------

constexpr gd_dims gd_small{2, 4, 32, 16}; // the reduced set's instantiation (K32 V16, Q64)
constexpr std::int64_t gd_slots = 10;

/// Device operands of a gated-delta problem whose every slot holds a distinct random state.
struct gd_device {
  gd_problem<float> host;
  std::vector<float> pool0, out0;
  thrust::device_vector<float> q, k, v, g, beta, pool, out;
  gd_device(std::int64_t tokens, std::uint64_t seed)
      : host(gd_small, tokens, gd_slots, seed), pool0(init_pool(host, seed)), out0(host.out.size(), 42.0f),
        q(host.q), k(host.k), v(host.v), g(host.g), beta(host.beta), pool(pool0), out(out0) {}
  static std::vector<float> init_pool(const gd_problem<float>& h, std::uint64_t seed) {
    std::mt19937_64 rng(seed + 1);
    std::normal_distribution<float> state(0.0f, 0.3f);
    std::vector<float> p(h.pool.size());
    for (float& x : p) x = state(rng);
    return p;
  }
  gated_delta_args<float> args() {
    const std::int64_t n = host.tokens;
    const gd_dims d = host.d;
    return {dcview(q, n, d.h, d.k),       dcview(k, n, d.h, d.k), dcview(v, n, d.hv, d.v), dcview(g, n, d.hv),
            dcview(beta, n, d.hv),        dview(pool, gd_slots, d.hv, d.k, d.v),          dview(out, n, d.hv, d.v)};
  }
  /// Back to the initial pool and the poisoned output, so that each run starts from the same state.
  void reset() {
    thrust::copy(pool0.begin(), pool0.end(), pool.begin());
    thrust::copy(out0.begin(), out0.end(), out.begin());
  }
};

gated_delta_options gd_options() {
  gated_delta_options o;
  o.chunk = 64;
  o.l2norm_qk = true;
  return o;
}

// ---- conv1d -----------------------------------------------------------------------------------------------

constexpr std::int64_t conv_W = 4, conv_slots = 8;

/// Device operands of a conv1d call over `rows` tokens of C channels (C = 304: the 16-byte vector path).
struct conv_device {
  std::int64_t rows, C;
  std::vector<float> x, weight, bias, pool0, out0;
  thrust::device_vector<float> dx, dw, db, pool, out;
  conv_device(random_source& rng, std::int64_t n, std::int64_t channels)
      : rows(n), C(channels), x(rng.values<float>(std::size_t(n * channels), -1, 1)),
        weight(rng.values<float>(std::size_t(channels * conv_W), -0.5, 0.5)),
        bias(rng.values<float>(std::size_t(channels), -0.1f, 0.1f)),
        pool0(rng.values<float>(std::size_t(conv_slots * (conv_W - 1) * channels), -1, 1)),
        out0(std::size_t(n * channels), 9.0f), dx(to_device(x)), dw(to_device(weight)), db(to_device(bias)),
        pool(to_device(pool0)), out(to_device(out0)) {}
  conv1d_args<float> args() {
    return {dcview(dx, rows, C), dcview(dw, C, conv_W), dcview(db, C), dview(pool, conv_slots, conv_W - 1, C),
            dview(out, rows, C)};
  }
  void reset() {
    thrust::copy(pool0.begin(), pool0.end(), pool.begin());
    thrust::copy(out0.begin(), out0.end(), out.begin());
  }
};

/// A prefill's metadata.
struct batch_case {
  std::vector<std::int32_t> cu;
  std::vector<std::int64_t> start;
  std::vector<std::int32_t> initial, final_slots;
  std::vector<capture_point> caps;
  varlen_batch batch() const { return {cu, start}; }
  prefill_slots slots() const { return {initial, final_slots, caps}; }
};

/// A recurrent step's metadata.
struct step_case {
  std::vector<std::int32_t> cu;
  std::vector<std::int64_t> start;
  std::vector<copy_pair> pairs;
  std::vector<std::int32_t> ring;
  std::int32_t ring_size = 0;
  varlen_batch batch() const { return {cu, start}; }
  recurrent_slots slots() const { return {pairs, ring, ring_size}; }
};

} // namespace

TEST_CASE("a captured gated-delta prefill replays new offsets, slots and captures bitwise like direct launches") {
  gd_device d(160, 401);
  const gated_delta_options o = gd_options();
  stream st;
  // Two batches of the same shape (2 sequences, 1 capture) with different offsets, start positions, slots and
  // captures: the second sequence of batch 2 starts off the chunk grid.
  const std::vector<batch_case> batches{
      {{0, 100, 160}, {0, 0}, {-1, 5}, {0, 1}, {{0, 64, 2}}},
      {{0, 60, 160}, {0, 24}, {6, -1}, {3, 4}, {{1, 64, 7}}},
  };
  std::vector<gated_delta_prefill_shape> shapes;
  for (const batch_case& b : batches) {
    auto sh = gated_delta_chunked_prefill_plan(d.args(), o, b.batch(), b.slots(), {});
    REQUIRE(sh.has_value());
    shapes.push_back(*sh);
  }
  REQUIRE(shapes[0] == shapes[1]);
  const gated_delta_prefill_shape shape = shapes[0];
  CHECK(shape.sequences == 2);
  CHECK(shape.captures == 1);

  scratch ws(shape.metadata_bytes);
  pinned staging(shape.metadata_bytes);
  graph gr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const cudaError_t copied =
      cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, st.s);
  const auto captured = gated_delta_chunked_prefill_planned(d.args(), o, shape, ws.workspace(), st.s);
  REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
  REQUIRE(copied == cudaSuccess);
  REQUIRE(captured.has_value());
  gr.instantiate();

  for (const batch_case& b : batches) {
    d.reset();
    REQUIRE(gated_delta_chunked_prefill_plan(d.args(), o, b.batch(), b.slots(), staging.span()).has_value());
    replay(gr, st.s);
    const auto gout = to_host(d.out);
    const auto gpool = to_host(d.pool);

    d.reset();
    scratch direct(gated_delta_chunked_prefill_workspace_bytes(d.args(), o, b.batch(), b.slots()));
    REQUIRE(gated_delta_chunked_prefill(d.args(), o, b.batch(), b.slots(), direct.workspace(), st.s).has_value());
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gout, to_host(d.out)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gout, d.out0)); // outputs were written over the poison
    CHECK(!same_bits(gpool, d.pool0));
  }
}

TEST_CASE("a captured gated-delta recurrent step replays new pairs, positions and rings bitwise like direct launches") {
  gd_device d(8, 402);
  const gated_delta_options o = gd_options();
  stream st;
  // Same shape (3 sequences, 8 tokens, ring of 4); different token split, positions, pairs (in place,
  // copy-on-write, padding) and ring slots.
  const std::vector<step_case> steps{
      {{0, 1, 5, 8}, {10, 20, 1000}, {{0, 0}, {-1, 5}, {2, 3}}, {-1, -1, -1, -1, -1, -1, -1, -1, 6, 7, 8, 9}, 4},
      {{0, 3, 4, 8}, {3, 50, 7}, {{1, 2}, {4, 4}, {-1, -1}}, {9, 8, -1, 6, -1, -1, -1, -1, -1, -1, -1, -1}, 4},
  };
  std::vector<gated_delta_step_shape> shapes;
  for (const step_case& c : steps) {
    auto sh = gated_delta_recurrent_step_plan(d.args(), o, c.batch(), c.slots(), {});
    REQUIRE(sh.has_value());
    shapes.push_back(*sh);
  }
  REQUIRE(shapes[0] == shapes[1]);
  const gated_delta_step_shape shape = shapes[0];
  CHECK(shape.sequences == 3);
  CHECK(shape.ring_size == 4);

  scratch ws(shape.metadata_bytes);
  pinned staging(shape.metadata_bytes);
  graph gr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const cudaError_t copied =
      cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, st.s);
  const auto captured = gated_delta_recurrent_step_planned(d.args(), o, shape, ws.workspace(), st.s);
  REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
  REQUIRE(copied == cudaSuccess);
  REQUIRE(captured.has_value());
  gr.instantiate();

  for (const step_case& c : steps) {
    d.reset();
    REQUIRE(gated_delta_recurrent_step_plan(d.args(), o, c.batch(), c.slots(), staging.span()).has_value());
    replay(gr, st.s);
    const auto gout = to_host(d.out);
    const auto gpool = to_host(d.pool);

    d.reset();
    scratch direct(gated_delta_recurrent_step_workspace_bytes(d.args(), o, c.batch(), c.slots()));
    REQUIRE(gated_delta_recurrent_step(d.args(), o, c.batch(), c.slots(), direct.workspace(), st.s).has_value());
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gout, to_host(d.out)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gout, d.out0));
  }
}

TEST_CASE("a captured conv1d prefill replays new offsets, slots and captures bitwise like direct launches") {
  random_source rng(403);
  conv_device d(rng, 211, 304);
  stream st;
  // Same shape (3 sequences, 4 token tiles, 5 window writes); the lengths permuted, other starts and slots.
  const std::vector<batch_case> batches{
      {{0, 150, 150, 211}, {0, 64, 1000}, {-1, 1, 2}, {0, -1, 2}, {{0, 64, 4}, {0, 128, 5}, {2, 1003, 6}}},
      {{0, 61, 61, 211}, {5, 0, 300}, {3, -1, -1}, {1, -1, 7}, {{2, 310, 0}, {0, 6, 4}, {2, 449, 5}}},
  };
  std::vector<conv1d_prefill_shape> shapes;
  for (const batch_case& b : batches) {
    auto sh = causal_conv1d_prefill_plan(d.args(), b.batch(), b.slots(), {});
    REQUIRE(sh.has_value());
    shapes.push_back(*sh);
  }
  REQUIRE(shapes[0] == shapes[1]);
  const conv1d_prefill_shape shape = shapes[0];
  CHECK(shape.sequences == 3);
  CHECK(shape.tiles == 4);
  CHECK(shape.writes == 5);

  scratch ws(shape.metadata_bytes);
  pinned staging(shape.metadata_bytes);
  graph gr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const cudaError_t copied =
      cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, st.s);
  const auto captured = causal_conv1d_prefill_planned(d.args(), shape, ws.workspace(), st.s);
  REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
  REQUIRE(copied == cudaSuccess);
  REQUIRE(captured.has_value());
  gr.instantiate();

  for (const batch_case& b : batches) {
    d.reset();
    REQUIRE(causal_conv1d_prefill_plan(d.args(), b.batch(), b.slots(), staging.span()).has_value());
    replay(gr, st.s);
    const auto gout = to_host(d.out);
    const auto gpool = to_host(d.pool);

    d.reset();
    scratch direct(causal_conv1d_prefill_workspace_bytes(d.args(), b.batch(), b.slots()));
    REQUIRE(causal_conv1d_prefill(d.args(), b.batch(), b.slots(), direct.workspace(), st.s).has_value());
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gout, to_host(d.out)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gout, d.out0));
    CHECK(!same_bits(gpool, d.pool0));
  }
}

TEST_CASE("a captured conv1d decode update replays new slot pairs bitwise like direct launches") {
  random_source rng(404);
  conv_device d(rng, 3, 304);
  thrust::device_vector<copy_pair> dpairs(3);
  stream st;
  graph gr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const auto captured = causal_conv1d_update_planned(d.args(), thrust::raw_pointer_cast(dpairs.data()), st.s);
  REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
  REQUIRE(captured.has_value());
  gr.instantiate();

  // A fork, padding and an in-place row; then other slots and no padding.
  const std::vector<std::vector<copy_pair>> steps{{{0, 3}, {-1, 7}, {2, 2}}, {{5, 1}, {4, 4}, {6, 0}}};
  for (const auto& pairs : steps) {
    REQUIRE(validate_decode_slots(pairs, conv_slots) == errc{});
    d.reset();
    thrust::copy(pairs.begin(), pairs.end(), dpairs.begin()); // same buffer: the graph holds its address
    replay(gr, st.s);
    const auto gout = to_host(d.out);
    const auto gpool = to_host(d.pool);

    d.reset();
    scratch direct(causal_conv1d_update_workspace_bytes(d.args(), pairs));
    REQUIRE(causal_conv1d_update(d.args(), pairs, direct.workspace(), st.s).has_value());
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(same_bits(gout, to_host(d.out)));
    CHECK(same_bits(gpool, to_host(d.pool)));
    CHECK(!same_bits(gpool, d.pool0));
  }
}

namespace {
std::vector<unsigned char> random_bytes(random_source& rng, std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng.integer(0, 255));
  return v;
}

/// Device pools of units of 200 KiB (several copy chunks), 44 and 42 bytes (the narrow paths), 7 units each.
struct copy_device {
  static constexpr std::int64_t units = 7;
  std::vector<std::size_t> unit_bytes{200 * 1024, 44, 42};
  std::vector<std::vector<unsigned char>> init;
  std::vector<thrust::device_vector<unsigned char>> dev;
  explicit copy_device(random_source& rng) {
    for (std::size_t u : unit_bytes) {
      init.push_back(random_bytes(rng, u * units));
      dev.push_back(to_device(init.back()));
    }
  }
  std::vector<pool_view> pools() {
    std::vector<pool_view> v;
    for (std::size_t i = 0; i < unit_bytes.size(); ++i)
      v.push_back({thrust::raw_pointer_cast(dev[i].data()), unit_bytes[i], units});
    return v;
  }
  void reset() {
    for (std::size_t i = 0; i < dev.size(); ++i) thrust::copy(init[i].begin(), init[i].end(), dev[i].begin());
  }
  std::vector<std::vector<unsigned char>> bytes() const {
    std::vector<std::vector<unsigned char>> v;
    for (const auto& d : dev) v.push_back(to_host(d));
    return v;
  }
};
} // namespace

TEST_CASE("a captured unit copy and transfer replay new pairs bitwise like direct launches") {
  random_source rng(405);
  copy_device src(rng), dst(rng);
  stream st;
  const std::vector<std::vector<copy_pair>> lists{{{0, 4}, {1, 5}, {0, 6}, {2, 3}}, {{6, 0}, {5, 1}, {4, 2}, {6, 3}}};
  const auto pools = src.pools();
  std::vector<pool_pair_view> layers;
  for (std::size_t i = 0; i < pools.size(); ++i) layers.push_back({pools[i], dst.pools()[i]});

  SUBCASE("copy within pools") {
    std::vector<copy_shape> shapes;
    for (const auto& pairs : lists) {
      auto sh = copy_units_plan(pools, pairs, {});
      REQUIRE(sh.has_value());
      shapes.push_back(*sh);
    }
    REQUIRE(shapes[0] == shapes[1]);
    const copy_shape shape = shapes[0];
    CHECK(shape.layers == 3);
    CHECK(shape.pairs == 4);
    CHECK(shape.metadata_bytes == copy_units_workspace_bytes(3, 4));

    scratch ws(shape.metadata_bytes);
    pinned staging(shape.metadata_bytes);
    graph gr;
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const cudaError_t copied =
        cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, st.s);
    const auto captured = copy_units_planned(shape, ws.workspace(), st.s);
    REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
    REQUIRE(copied == cudaSuccess);
    REQUIRE(captured.has_value());
    gr.instantiate();

    for (const auto& pairs : lists) {
      src.reset();
      REQUIRE(copy_units_plan(pools, pairs, staging.span()).has_value());
      replay(gr, st.s);
      const auto graphed = src.bytes();

      src.reset();
      scratch direct(copy_units_workspace_bytes(pools.size(), pairs.size()));
      REQUIRE(copy_units(pools, pairs, direct.workspace(), st.s).has_value());
      REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
      REQUIRE(device_ok());
      const auto directed = src.bytes();
      for (std::size_t i = 0; i < graphed.size(); ++i) {
        CAPTURE(i);
        CHECK(graphed[i] == directed[i]);
        CHECK(graphed[i] != src.init[i]); // the copy moved bytes
      }
    }
  }

  SUBCASE("transfer between pools") {
    std::vector<copy_shape> shapes;
    for (const auto& pairs : lists) {
      auto sh = transfer_units_plan(layers, pairs, {});
      REQUIRE(sh.has_value());
      shapes.push_back(*sh);
    }
    REQUIRE(shapes[0] == shapes[1]);
    const copy_shape shape = shapes[0];
    CHECK(shape.metadata_bytes == transfer_units_workspace_bytes(3, 4));

    scratch ws(shape.metadata_bytes);
    pinned staging(shape.metadata_bytes);
    graph gr;
    REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
    const cudaError_t copied =
        cudaMemcpyAsync(ws.workspace().data, staging.p, shape.metadata_bytes, cudaMemcpyHostToDevice, st.s);
    const auto captured = copy_units_planned(shape, ws.workspace(), st.s);
    REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
    REQUIRE(copied == cudaSuccess);
    REQUIRE(captured.has_value());
    gr.instantiate();

    for (const auto& pairs : lists) {
      dst.reset();
      REQUIRE(transfer_units_plan(layers, pairs, staging.span()).has_value());
      replay(gr, st.s);
      const auto graphed = dst.bytes();

      dst.reset();
      scratch direct(transfer_units_workspace_bytes(layers.size(), pairs.size()));
      REQUIRE(transfer_units(layers, pairs, direct.workspace(), st.s).has_value());
      REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
      REQUIRE(device_ok());
      const auto directed = dst.bytes();
      for (std::size_t i = 0; i < graphed.size(); ++i) {
        CAPTURE(i);
        CHECK(graphed[i] == directed[i]);
        CHECK(graphed[i] != dst.init[i]);
      }
      CHECK(src.bytes() == src.init); // the sources are only read
    }
  }
}

TEST_CASE("a captured KV gather replays new block tables and lengths bitwise like direct launches") {
  random_source rng(408);
  const kv_pool_layout l{.blocks = 9, .block_size = 16, .kv_heads = 4, .head_dim = 64, .element_bytes = 2};
  auto dpool = to_device(random_bytes(rng, static_cast<std::size_t>(l.blocks * l.block_size * l.kv_heads) * l.row_bytes()));
  const std::int64_t out_tokens = 48;
  const std::size_t out_bytes = static_cast<std::size_t>(2 * l.kv_heads * out_tokens) * l.row_bytes();
  const std::vector<unsigned char> poison(out_bytes, 0x5A);
  thrust::device_vector<unsigned char> dout(out_bytes, 0x5A);
  // Same extents (2 sequences, 3 blocks each); other blocks and lengths.
  const std::vector<std::vector<std::int32_t>> tables{{8, 1, 3, 0, 2, 7}, {4, 5, 6, 2, 8, 0}};
  const std::vector<std::vector<std::int32_t>> lens{{40, 17}, {3, 48}};
  auto args = [&](std::size_t i) {
    return kv_gather_args{thrust::raw_pointer_cast(dpool.data()), l, tensor<const std::int32_t, 2>(tables[i].data(), 2, 3),
                          lens[i], thrust::raw_pointer_cast(dout.data()), out_tokens};
  };
  auto shape = gather_kv_plan(args(0), {});
  REQUIRE(shape.has_value());
  REQUIRE(gather_kv_plan(args(1), {}).value() == *shape);
  CHECK(shape->metadata_bytes == gather_kv_workspace_bytes(2, 3));

  stream st;
  scratch ws(shape->metadata_bytes);
  pinned staging(shape->metadata_bytes);
  graph gr;
  REQUIRE(cudaStreamBeginCapture(st.s, cudaStreamCaptureModeGlobal) == cudaSuccess);
  const cudaError_t copied =
      cudaMemcpyAsync(ws.workspace().data, staging.p, shape->metadata_bytes, cudaMemcpyHostToDevice, st.s);
  const auto captured = gather_kv_planned(args(0), *shape, ws.workspace(), st.s);
  REQUIRE(cudaStreamEndCapture(st.s, &gr.g) == cudaSuccess);
  REQUIRE(copied == cudaSuccess);
  REQUIRE(captured.has_value());
  gr.instantiate();

  for (std::size_t i = 0; i < tables.size(); ++i) {
    CAPTURE(i);
    thrust::copy(poison.begin(), poison.end(), dout.begin());
    REQUIRE(gather_kv_plan(args(i), staging.span()).has_value());
    replay(gr, st.s);
    const auto graphed = to_host(dout);

    thrust::copy(poison.begin(), poison.end(), dout.begin());
    scratch direct(gather_kv_workspace_bytes(2, 3));
    REQUIRE(gather_kv(args(i), direct.workspace(), st.s).has_value());
    REQUIRE(cudaStreamSynchronize(st.s) == cudaSuccess);
    REQUIRE(device_ok());
    CHECK(graphed == to_host(dout));
    CHECK(graphed != poison);
  }
  // A shape that does not match its byte count, or a workspace too small, is refused.
  gather_kv_shape wrong = *shape;
  wrong.batch += 1;
  CHECK(gather_kv_planned(args(0), wrong, ws.workspace(), nullptr).error() == errc::size_mismatch);
  CHECK(gather_kv_planned(args(0), *shape, {ws.workspace().data, shape->metadata_bytes - 1}, nullptr).error() ==
        errc::size_mismatch);
  wrong.batch = -1;
  CHECK(gather_kv_planned(args(0), wrong, ws.workspace(), nullptr).error() == errc::invalid_argument);
}

TEST_CASE("capture-safe gated-delta, conv1d and copy launchers refuse mismatched shapes and launch nothing") {
  const gated_delta_options o = gd_options();
  gd_device g(100, 406);
  const std::vector<std::int32_t> cu{0, 100}, initial{-1}, final_slots{0};
  const std::vector<std::int64_t> start{0};
  const varlen_batch b{cu, start};
  const prefill_slots ps{initial, final_slots};
  auto gsh = gated_delta_chunked_prefill_plan(g.args(), o, b, ps, {});
  REQUIRE(gsh.has_value());
  std::vector<std::byte> small(gsh->metadata_bytes - 1);
  CHECK(gated_delta_chunked_prefill_plan(g.args(), o, b, ps, small).error() == errc::size_mismatch);
  scratch gws(gsh->metadata_bytes);
  gated_delta_prefill_shape wrong = *gsh;
  wrong.captures += 1; // the byte count no longer matches the counts
  CHECK(gated_delta_chunked_prefill_planned(g.args(), o, wrong, gws.workspace(), nullptr).error() ==
        errc::size_mismatch);
  CHECK(gated_delta_chunked_prefill_planned(g.args(), o, *gsh, {gws.workspace().data, gsh->metadata_bytes - 1},
                                            nullptr)
            .error() == errc::size_mismatch);
  gated_delta_prefill_shape negative = *gsh;
  negative.sequences = -1;
  CHECK(gated_delta_chunked_prefill_planned(g.args(), o, negative, gws.workspace(), nullptr).error() ==
        errc::invalid_argument);
  gated_delta_step_shape step{1, 2, 0};
  CHECK(gated_delta_recurrent_step_planned(g.args(), o, step, gws.workspace(), nullptr).error() ==
        errc::size_mismatch);
  step.ring_size = -1;
  CHECK(gated_delta_recurrent_step_planned(g.args(), o, step, gws.workspace(), nullptr).error() ==
        errc::invalid_argument);
  gated_delta_options bad_chunk = o;
  bad_chunk.chunk = 48;
  CHECK(gated_delta_chunked_prefill_planned(g.args(), bad_chunk, *gsh, gws.workspace(), nullptr).error() ==
        errc::unsupported_config);
  REQUIRE(device_ok());
  CHECK(same_bits(to_host(g.pool), g.pool0));
  CHECK(same_bits(to_host(g.out), g.out0));

  random_source rng(407);
  conv_device c(rng, 100, 304);
  auto csh = causal_conv1d_prefill_plan(c.args(), b, ps, {});
  REQUIRE(csh.has_value());
  scratch cws(csh->metadata_bytes);
  conv1d_prefill_shape cwrong = *csh;
  cwrong.writes += 1; // the byte count no longer matches the counts
  CHECK(causal_conv1d_prefill_planned(c.args(), cwrong, cws.workspace(), nullptr).error() == errc::size_mismatch);
  conv1d_prefill_shape cneg = *csh;
  cneg.tiles = -1;
  CHECK(causal_conv1d_prefill_planned(c.args(), cneg, cws.workspace(), nullptr).error() == errc::invalid_argument);
  CHECK(causal_conv1d_prefill_planned(c.args(), *csh, {}, nullptr).error() == errc::size_mismatch);
  CHECK(causal_conv1d_update_planned(c.args(), nullptr, nullptr).error() == errc::invalid_argument);
  REQUIRE(device_ok());
  CHECK(same_bits(to_host(c.pool), c.pool0));
  CHECK(same_bits(to_host(c.out), c.out0));

  copy_device p(rng);
  const std::vector<copy_pair> pairs{{0, 4}, {1, 5}};
  auto psh = copy_units_plan(p.pools(), pairs, {});
  REQUIRE(psh.has_value());
  const std::vector<copy_pair> overlapping{{0, 4}, {4, 5}};
  CHECK(copy_units_plan(p.pools(), overlapping, {}).error() == errc::overlapping_pairs);
  scratch pws(psh->metadata_bytes);
  CHECK(copy_units_planned(*psh, {pws.workspace().data, psh->metadata_bytes - 1}, nullptr).error() ==
        errc::size_mismatch);
  copy_shape pwrong = *psh;
  pwrong.pairs += 1;
  CHECK(copy_units_planned(pwrong, pws.workspace(), nullptr).error() == errc::size_mismatch);
  copy_shape pneg = *psh;
  pneg.layers = -1;
  CHECK(copy_units_planned(pneg, pws.workspace(), nullptr).error() == errc::invalid_argument);
  REQUIRE(device_ok());
  CHECK(p.bytes() == p.init);
}
