// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta kernels on the device against the host implementation (skipped without a GPU): chunked
// prefill with captures, bitwise resume on the device, recurrent step with padding and rollback ring, the
// step over bf16 / fp16 pools, and the launchers' errors.
#include <reprise/ops/gated_delta.hpp>

#include "gpu/harness.cuh"
#include "support/gated_delta_testing.hpp"
#include "support/ops_testing.hpp"

#include <thrust/copy.h>

#include <doctest/doctest.h>

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::ops;
using reprise::testing::bitwise_equal;
using reprise::testing::device_ok;
using reprise::testing::to_host;
using reprise::testing::gd_dims;
using reprise::testing::gd_problem;
using reprise::testing::relative_rms;

constexpr gd_dims small{2, 4, 32, 16};          // the reduced set's instantiation
constexpr gd_dims qwen3_next{16, 32, 128, 128}; // full build only

/// Device copies of a problem's operands.
template <class T>
struct device_problem {
  thrust::device_vector<T> q, k, v, out;
  thrust::device_vector<float> g, beta, pool;
  reprise::testing::scratch workspace;
  gd_dims d;
  std::int64_t tokens, slots;

  explicit device_problem(const gd_problem<T>& p)
      : q(p.q), k(p.k), v(p.v), out(p.out), g(p.g), beta(p.beta), pool(p.pool), workspace(1 << 20), d(p.d),
        tokens(p.tokens), slots(p.slots) {}

  gated_delta_args<T> args() {
    return {tensor<const T, 3>(thrust::raw_pointer_cast(q.data()), tokens, d.h, d.k),
            tensor<const T, 3>(thrust::raw_pointer_cast(k.data()), tokens, d.h, d.k),
            tensor<const T, 3>(thrust::raw_pointer_cast(v.data()), tokens, d.hv, d.v),
            tensor<const float, 2>(thrust::raw_pointer_cast(g.data()), tokens, d.hv),
            tensor<const float, 2>(thrust::raw_pointer_cast(beta.data()), tokens, d.hv),
            tensor<float, 4>(thrust::raw_pointer_cast(pool.data()), slots, d.hv, d.k, d.v),
            tensor<T, 3>(thrust::raw_pointer_cast(out.data()), tokens, d.hv, d.v)};
  }
  device_workspace ws() { return workspace.workspace(); }
  std::vector<double> outputs() const {
    const std::vector<T> h = to_host(out);
    std::vector<double> r(h.size());
    for (std::size_t i = 0; i < h.size(); ++i) r[i] = to_float(h[i]);
    return r;
  }
  std::vector<float> states() const { return to_host(pool); }
};

std::vector<double> widen(const std::vector<float>& v, std::size_t from, std::size_t n) {
  return {v.begin() + std::ptrdiff_t(from), v.begin() + std::ptrdiff_t(from + n)};
}

template <class T>
void matches_host(gd_dims dims, std::uint32_t chunk) {
  gated_delta_options o;
  o.chunk = chunk;
  o.l2norm_qk = true;
  const std::int64_t Q = chunk;
  const std::vector<std::int32_t> cu = {0, 150, 251, 321};
  const std::vector<std::int64_t> start = {0, 37, 2 * Q};
  const std::vector<std::int32_t> init = {-1, 0, 0}, fin = {1, 2, 3};
  const std::vector<capture_point> caps = {{0, 2 * Q, 5}, {0, Q, 4}, {1, Q, 6}}; // unsorted on purpose
  gd_problem<T> host(dims, cu.back(), 8, 7);
  device_problem<T> dev(host);
  const varlen_batch b{cu, start};
  const prefill_slots slots{init, fin, caps};
  REQUIRE(gated_delta_chunked_prefill_host(host.args(), o, b, slots));
  REQUIRE(gated_delta_chunked_prefill(dev.args(), o, b, slots, dev.ws(), nullptr));
  REQUIRE(device_ok());
  // Same math, different order of a few operations (FMA contraction, the device expf): tolerance, not bits.
  const double tol = std::is_same_v<T, float> ? 1e-5 : std::ldexp(1.0, -8);
  CHECK(relative_rms(dev.outputs(), host.outputs(0, host.tokens)) <= tol);
  const auto ds = dev.states();
  for (int slot = 1; slot <= 6; ++slot) {
    CAPTURE(slot);
    CHECK(relative_rms(widen(ds, slot * host.matrix(), host.matrix()),
                       widen(host.pool, slot * host.matrix(), host.matrix())) <= 1e-5);
  }
  // Then a 2-token verification step per sequence from the live slots (the host's states on both sides):
  // in place, copy-on-write into another slot, in place.
  gd_problem<T> step_host(dims, 6, 8, 9);
  step_host.pool = host.pool;
  device_problem<T> step_dev(step_host);
  const std::vector<std::int32_t> cu2 = {0, 2, 4, 6};
  const std::vector<std::int64_t> start2 = {150, 138, 198};
  const std::vector<copy_pair> pairs = {{1, 1}, {2, 7}, {3, 3}};
  const varlen_batch b2{cu2, start2};
  REQUIRE(gated_delta_recurrent_step_host(step_host.args(), o, b2, recurrent_slots{pairs}));
  REQUIRE(gated_delta_recurrent_step(step_dev.args(), o, b2, recurrent_slots{pairs}, step_dev.ws(), nullptr));
  REQUIRE(device_ok());
  CHECK(relative_rms(step_dev.outputs(), step_host.outputs(0, 6)) <= tol);
  const auto ss = step_dev.states();
  for (int slot : {1, 7, 3}) {
    CAPTURE(slot);
    CHECK(relative_rms(widen(ss, slot * host.matrix(), host.matrix()),
                       widen(step_host.pool, slot * host.matrix(), host.matrix())) <= 1e-5);
  }
}

/// A bf16 / fp16 pool (decode continuation): the device step reads the state as fp32, steps in fp32 and rounds
/// once on store, so against the same kernel over an fp32 pool holding the widened states the outputs are
/// equal bit for bit and every stored state is that pool's state rounded; the capture-safe launch equals the
/// direct one.
template <class T, class State>
void lossy_step(gd_dims dims) {
  gated_delta_options o;
  o.l2norm_qk = true;
  gd_problem<T> host(dims, 6, 8, 11);
  std::vector<State> lossy(host.pool.size());
  for (std::size_t i = 0; i < host.pool.size(); ++i) {
    lossy[i] = from_float<State>(0.5f * std::sin(0.37f * static_cast<float>(i))); // states of every slot
    host.pool[i] = to_float(lossy[i]); // the fp32 pool holds exactly the lossy values
  }
  device_problem<T> wide(host), narrow(host), planned(host);
  thrust::device_vector<State> pool(lossy.begin(), lossy.end()), planned_pool(lossy.begin(), lossy.end());
  auto lossy_args = [&](device_problem<T>& d, thrust::device_vector<State>& p) {
    const gated_delta_args<T> a = d.args();
    return gated_delta_args<T, State>{a.q, a.k, a.v, a.g, a.beta,
                                      tensor<State, 4>(thrust::raw_pointer_cast(p.data()), host.slots, dims.hv, dims.k,
                                                       dims.v),
                                      a.out};
  };
  const std::vector<std::int32_t> cu = {0, 2, 4, 6};
  const std::vector<std::int64_t> start = {150, 138, 198};
  const std::vector<copy_pair> pairs = {{1, 1}, {2, 7}, {3, 3}}; // in place, copy-on-write, in place
  const varlen_batch b{cu, start};
  REQUIRE(gated_delta_recurrent_step(wide.args(), o, b, recurrent_slots{pairs}, wide.ws(), nullptr));
  REQUIRE(gated_delta_recurrent_step(lossy_args(narrow, pool), o, b, recurrent_slots{pairs}, narrow.ws(), nullptr));
  const auto pa = lossy_args(planned, planned_pool);
  const auto shape = gated_delta_recurrent_step_plan(pa, o, b, recurrent_slots{pairs}, {});
  REQUIRE(shape.has_value());
  std::vector<std::byte> plan(shape->metadata_bytes);
  REQUIRE(gated_delta_recurrent_step_plan(pa, o, b, recurrent_slots{pairs}, plan).has_value());
  REQUIRE(cudaMemcpy(planned.ws().data, plan.data(), plan.size(), cudaMemcpyHostToDevice) == cudaSuccess);
  REQUIRE(gated_delta_recurrent_step_planned(pa, o, *shape, planned.ws(), nullptr));
  REQUIRE(device_ok());

  CHECK(narrow.outputs() == wide.outputs());
  CHECK(planned.outputs() == narrow.outputs());
  const auto p32 = wide.states();
  const std::vector<State> got = to_host(pool), got_planned = to_host(planned_pool);
  const auto r = reprise::testing::count_rounding(got, got_planned, p32);
  CHECK(r.mismatched == 0);
  CHECK(r.rounded > 0); // the stepped states needed rounding
  CHECK(r.differ == 0);
}

} // namespace

TEST_CASE("device recurrent step over bf16 / fp16 pools rounds the fp32 step once") {
  for (const gated_delta_kernel_config& c : gated_delta_instantiated_configs()) {
    if (c.chunk != 64) continue; // one row per (K, V, input)
    CAPTURE(c.key_dim);
    CAPTURE(c.value_dim);
    CAPTURE(static_cast<int>(c.input));
    const gd_dims dims{2, 4, c.key_dim, c.value_dim};
    if (c.input == dtype::f32) {
      lossy_step<float, bfloat16>(dims);
      lossy_step<float, float16>(dims);
    } else {
      lossy_step<bfloat16, bfloat16>(dims);
      lossy_step<bfloat16, float16>(dims);
    }
  }
}

TEST_CASE("device chunked prefill and step match the host for every instantiated configuration") {
  const auto configs = gated_delta_instantiated_configs();
  REQUIRE(!configs.empty());
  for (const gated_delta_kernel_config& c : configs) {
    CAPTURE(c.key_dim);
    CAPTURE(c.value_dim);
    CAPTURE(c.chunk);
    CAPTURE(static_cast<int>(c.input));
    CHECK(gated_delta_supports(c) == errc{});
    CHECK(gated_delta_supports({c.key_dim, c.value_dim, 0, c.input}) == errc{}); // the step of the same sizes
    const gd_dims dims{2, 4, c.key_dim, c.value_dim}; // head counts are runtime values
    if (c.input == dtype::f32) matches_host<float>(dims, static_cast<std::uint32_t>(c.chunk));
    else matches_host<bfloat16>(dims, static_cast<std::uint32_t>(c.chunk));
  }
  CHECK(gated_delta_supports({48, 16, 64, dtype::f32}) == errc::unsupported_config);
  CHECK(gated_delta_supports({32, 16, 64, dtype::f16}) == errc::unsupported_config);
}

TEST_CASE("device chunked prefill matches the host at Qwen3-Next head counts (full build)") {
  if (gated_delta_supports({qwen3_next.k, qwen3_next.v, 64, dtype::bf16}) != errc{}) {
    MESSAGE("Qwen3-Next instantiation not in this build (REPRISE_KERNELS_FULL=OFF)");
    return;
  }
  matches_host<bfloat16>(qwen3_next, 64);
}

TEST_CASE("device resume from an fp32 capture at an aligned position is bitwise equal") {
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::int64_t len = 300, at = 128;
  gd_problem<float> host(small, len, 8, 21);
  device_problem<float> dev(host);
  const std::vector<std::int32_t> cu = {0, static_cast<std::int32_t>(len)};
  const std::vector<std::int64_t> start = {0};
  const std::vector<std::int32_t> init = {0}, fin = {1};
  const std::vector<capture_point> caps = {{0, at, 2}};
  REQUIRE(gated_delta_chunked_prefill(dev.args(), o, varlen_batch{cu, start}, prefill_slots{init, fin, caps}, dev.ws(),
                                      nullptr));
  const auto full_out = dev.outputs();
  // The tail as its own batch, read from the capture, into slot 3.
  gd_problem<float> tail_host(host);
  device_problem<float> tail(tail_host);
  thrust::copy(dev.pool.begin(), dev.pool.end(), tail.pool.begin());
  auto a = tail.args();
  const std::int64_t skip = at;
  a.q = tensor<const float, 3>(a.q.data_handle() + skip * small.h * small.k, len - skip, small.h, small.k);
  a.k = tensor<const float, 3>(a.k.data_handle() + skip * small.h * small.k, len - skip, small.h, small.k);
  a.v = tensor<const float, 3>(a.v.data_handle() + skip * small.hv * small.v, len - skip, small.hv, small.v);
  a.g = tensor<const float, 2>(a.g.data_handle() + skip * small.hv, len - skip, small.hv);
  a.beta = tensor<const float, 2>(a.beta.data_handle() + skip * small.hv, len - skip, small.hv);
  a.out = tensor<float, 3>(a.out.data_handle() + skip * small.hv * small.v, len - skip, small.hv, small.v);
  const std::vector<std::int32_t> cu2 = {0, static_cast<std::int32_t>(len - skip)};
  const std::vector<std::int64_t> start2 = {at};
  const std::vector<std::int32_t> init2 = {2}, fin2 = {3};
  REQUIRE(gated_delta_chunked_prefill(a, o, varlen_batch{cu2, start2}, prefill_slots{init2, fin2}, tail.ws(), nullptr));
  REQUIRE(device_ok());
  const auto tail_out = tail.outputs();
  const std::size_t from = std::size_t(skip) * host.out_row();
  std::vector<float> a1(full_out.begin() + std::ptrdiff_t(from), full_out.end());
  std::vector<float> a2(tail_out.begin() + std::ptrdiff_t(from), tail_out.end());
  CHECK(bitwise_equal(a1.data(), a2.data(), a1.size()));
  const auto s_full = dev.states(), s_tail = tail.states();
  CHECK(bitwise_equal(s_full.data() + host.matrix(), s_tail.data() + 3 * host.matrix(), host.matrix()));
}

TEST_CASE("device recurrent step matches the host (padding row, rollback ring)") {
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::vector<std::int32_t> cu = {0, 1, 5, 8};
  const std::vector<std::int64_t> start = {10, 20, 1000};
  const std::vector<copy_pair> pairs = {{0, 0}, {-1, 5}, {2, 3}};
  const std::int32_t R = 4;
  const std::vector<std::int32_t> ring = {-1, -1, -1, -1, -1, -1, -1, -1, 6, 7, 8, 9};
  gd_problem<float> host(small, 8, 10, 17);
  std::copy_n(host.pool.begin(), host.matrix(), host.pool.begin() + 2 * std::ptrdiff_t(host.matrix()));
  std::fill(host.out.begin(), host.out.end(), 42.0f);
  device_problem<float> dev(host);
  const varlen_batch b{cu, start};
  const recurrent_slots r{pairs, ring, R};
  REQUIRE(gated_delta_recurrent_step_host(host.args(), o, b, r));
  REQUIRE(gated_delta_recurrent_step(dev.args(), o, b, r, dev.ws(), nullptr));
  REQUIRE(device_ok());
  const auto dout = dev.outputs();
  CHECK(relative_rms(dout, host.outputs(0, 8)) <= 1e-5);
  for (std::size_t i = std::size_t(cu[1]) * host.out_row(); i < std::size_t(cu[2]) * host.out_row(); ++i)
    REQUIRE(dout[i] == 42.0); // padding row untouched
  const auto ds = dev.states();
  for (int slot : {0, 3, 5, 6, 7, 8, 9}) {
    CAPTURE(slot);
    CHECK(relative_rms(widen(ds, slot * host.matrix(), host.matrix()),
                       widen(host.pool, slot * host.matrix(), host.matrix())) <= 1e-5);
  }
}

TEST_CASE("device launchers refuse bad input and launch nothing") {
  gated_delta_options o;
  gd_problem<float> host(small, 70, 4, 5);
  std::fill(host.out.begin(), host.out.end(), 3.0f);
  device_problem<float> dev(host);
  const std::vector<std::int32_t> cu = {0, 70};
  const std::vector<std::int64_t> start = {0};
  const std::vector<std::int32_t> init = {0}, fin = {1};
  SUBCASE("shape without an instantiation") {
    o.chunk = 32; // valid for the host implementation, not instantiated for the device
    CHECK(gated_delta_chunked_prefill(dev.args(), o, varlen_batch{cu, start}, prefill_slots{init, fin}, dev.ws(),
                                      nullptr)
              .error() == errc::unsupported_config);
  }
  SUBCASE("workspace too small") {
    CHECK(gated_delta_chunked_prefill(dev.args(), o, varlen_batch{cu, start}, prefill_slots{init, fin},
                                      device_workspace{dev.ws().data, 8}, nullptr)
              .error() == errc::size_mismatch);
  }
  SUBCASE("misaligned capture") {
    const std::vector<capture_point> caps = {{0, 60, 2}};
    CHECK(gated_delta_chunked_prefill(dev.args(), o, varlen_batch{cu, start}, prefill_slots{init, fin, caps},
                                      dev.ws(), nullptr)
              .error() == errc::misaligned);
  }
  SUBCASE("step slot out of range") {
    const std::vector<copy_pair> pairs = {{0, 4}};
    const std::vector<std::int32_t> cu1 = {0, 70};
    CHECK(gated_delta_recurrent_step(dev.args(), o, varlen_batch{cu1, start}, recurrent_slots{pairs}, dev.ws(), nullptr)
              .error() == errc::out_of_range);
  }
  REQUIRE(device_ok());
  CHECK(dev.states() == host.pool);
  CHECK(dev.outputs() == host.outputs(0, 70));
}
