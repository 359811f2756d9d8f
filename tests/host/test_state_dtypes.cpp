// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Lossy state-pool element types (bf16, fp16) for decode-continuation states: the conversions round to
// nearest, ties to even, like the hardware; the host decode updates read such a state as fp32 and round it
// once on store; fp32 stays the only prefill-exact state type.
#include <reprise/ops/gated_delta.hpp>
#include <reprise/ops/mamba2.hpp>

#include "support/mamba2_case.hpp"

#include <doctest/doctest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <type_traits>
#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

static_assert(state_element<float> && state_element<bfloat16> && state_element<float16>);
static_assert(!activation_element<float16>, "fp16 is a state type only: no kernel reads fp16 activations");
static_assert(!state_element<double>);
static_assert(dtype_of<float16> == dtype::f16 && dtype_of<bfloat16> == dtype::bf16 && dtype_of<float> == dtype::f32);
// The prefill keeps an fp32 pool: a Mamba2 argument set with a lossy pool is not a prefill's argument type.
static_assert(std::is_same_v<decltype(mamba2_args<float>{}.state_pool), tensor<float, 4>>);

namespace {

float f(std::uint32_t bits) { return std::bit_cast<float>(bits); }
std::uint16_t h(float v) { return from_float<float16>(v).bits; }

} // namespace

TEST_CASE("fp16: every value converts to fp32 exactly and back to itself") {
  for (std::uint32_t b = 0; b < 0x10000u; ++b) {
    const float16 v{static_cast<std::uint16_t>(b)};
    const float w = to_float(v);
    const bool nan = (b & 0x7c00u) == 0x7c00u && (b & 0x3ffu) != 0;
    if (nan) {
      CHECK(std::isnan(w));
      CHECK(std::isnan(to_float(from_float<float16>(w))));
    } else {
      CHECK(from_float<float16>(w).bits == b);
    }
  }
  CHECK(to_float(float16{0x3c00}) == 1.0f);
  CHECK(to_float(float16{0x7bff}) == 65504.0f);
  CHECK(to_float(float16{0x0001}) == std::ldexp(1.0f, -24));
  CHECK(to_float(float16{0x0400}) == std::ldexp(1.0f, -14));
  CHECK(to_float(float16{0xfc00}) == -std::numeric_limits<float>::infinity());
  CHECK(std::signbit(to_float(float16{0x8000})));
}

TEST_CASE("fp16: rounding to nearest, ties to even, overflow and underflow") {
  // Ties between neighbours go to the even mantissa.
  CHECK(h(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);                          // 1 + half an ulp: down to 1
  CHECK(h(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);                      // 1 + 1.5 ulp: up to even
  CHECK(h(std::nextafter(1.0f + std::ldexp(1.0f, -11), 2.0f)) == 0x3c01);    // just above the tie
  CHECK(h(2047.0f + 0.5f) == 0x6800);                                        // a carry into the exponent: 2048
  // Overflow: 65520 is the tie between 65504 and 2^16, which rounds to infinity.
  CHECK(h(65504.0f) == 0x7bff);
  CHECK(h(std::nextafter(65520.0f, 0.0f)) == 0x7bff);
  CHECK(h(65520.0f) == 0x7c00);
  CHECK(h(-1e9f) == 0xfc00);
  CHECK(h(std::numeric_limits<float>::infinity()) == 0x7c00);
  // Subnormals: multiples of 2^-24, ties to even, and a carry into the smallest normal.
  CHECK(h(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(h(std::ldexp(1.0f, -25)) == 0x0000);                                 // tie between 0 and 2^-24: 0
  CHECK(h(std::nextafter(std::ldexp(1.0f, -25), 1.0f)) == 0x0001);
  CHECK(h(3 * std::ldexp(1.0f, -25)) == 0x0002);                             // 1.5 x 2^-24: up to even 2
  CHECK(h(std::ldexp(1.0f, -14) - std::ldexp(1.0f, -26)) == 0x0400);         // rounds up into the normals
  CHECK(h(-std::ldexp(1.0f, -30)) == 0x8000);                                // signed zero
  CHECK(h(f(0x00000001u)) == 0x0000);                                        // an fp32 subnormal
  // NaN stays NaN, quiet.
  const float16 n = from_float<float16>(std::numeric_limits<float>::quiet_NaN());
  CHECK((n.bits & 0x7e00u) == 0x7e00u);
}

#if defined(__FLT16_MAX__) && !defined(__CUDACC__)
TEST_CASE("fp16: rounding agrees with the compiler's _Float16 on ties and on random values") {
  auto ref = [](float v) { return std::bit_cast<std::uint16_t>(static_cast<_Float16>(v)); };
  // Every tie between neighbouring fp16 values, and its fp32 neighbours.
  for (std::uint32_t b = 0; b < 0x7c00u; ++b) {
    const float lo = to_float(float16{static_cast<std::uint16_t>(b)});
    const float hi = to_float(float16{static_cast<std::uint16_t>(b + 1)});
    const float mid = lo + (hi - lo) / 2; // exact in fp32
    for (float v : {mid, std::nextafter(mid, 0.0f), std::nextafter(mid, 1e9f)}) {
      REQUIRE(h(v) == ref(v));
      REQUIRE(h(-v) == ref(-v));
    }
  }
  std::mt19937 rng(7);
  for (int i = 0; i < 1 << 20; ++i) {
    const float v = f(rng());
    if (std::isnan(v)) continue;
    REQUIRE(h(v) == ref(v));
  }
}
#endif

TEST_CASE("bf16: rounding to nearest, ties to even") {
  auto b = [](float v) { return from_float<bfloat16>(v).bits; };
  CHECK(b(1.0f) == 0x3f80);
  CHECK(b(f(0x3f808000u)) == 0x3f80); // tie: down to even
  CHECK(b(f(0x3f818000u)) == 0x3f82); // tie: up to even
  CHECK(b(f(0x3f808001u)) == 0x3f81); // above the tie
  CHECK(b(f(0x7f7fffffu)) == 0x7f80); // the largest float rounds to infinity
  for (std::uint32_t v = 0; v < 0x10000u; ++v)
    if ((v & 0x7f80u) != 0x7f80u || (v & 0x7fu) == 0) CHECK(b(to_float(bfloat16{static_cast<std::uint16_t>(v)})) == v);
}

namespace {

/// The decode update with a `State` pool equals, bit for bit, the update with an fp32 pool holding the
/// widened states, its stored states rounded once.
template <class T, class State>
void check_lossy_update() {
  constexpr std::int64_t H = 4, P = 8, G = 2, N = 16, slots = 6;
  random_source rng(91);
  mamba2_case<T> k(rng, 3, H, P, G, N, slots);
  std::vector<State> lossy(k.pool.size());
  for (std::size_t i = 0; i < k.pool.size(); ++i) {
    lossy[i] = from_float<State>(k.pool[i]);
    k.pool[i] = to_float(lossy[i]); // the fp32 pool holds exactly the lossy values
  }
  mamba2_case<T> k2 = k;
  const std::vector<copy_pair> pairs{{1, 4}, {-1, 5}, {2, 2}}; // fork, padding, in place
  REQUIRE(mamba2_state_update_host(k.args(64), pairs).has_value());

  const auto a32 = k2.args(64);
  mamba2_args<T, State> a{a32.x, a32.dt, a32.A, a32.B, a32.C, a32.D, a32.dt_bias, a32.z,
                          make_tensor(lossy.data(), slots, H, P, N), a32.y};
  const std::vector<State> before = lossy;
  REQUIRE(mamba2_state_update_host(a, pairs).has_value());

  CHECK(bitwise_equal(k.y.data(), k2.y.data(), k.y.size())); // y from the unrounded fp32 state
  std::size_t mismatched = 0, rounded = 0;
  for (std::size_t i = 0; i < lossy.size(); ++i) {
    mismatched += !(lossy[i] == from_float<State>(k.pool[i]));
    rounded += to_float(lossy[i]) != k.pool[i];
  }
  CHECK(mismatched == 0);
  CHECK(rounded > 0); // the advanced states did need rounding: the test can tell lossy from exact
  const std::size_t per = static_cast<std::size_t>(H * P * N);
  for (std::int64_t untouched : {1, 5, 0, 3})
    CHECK(std::equal(lossy.begin() + untouched * per, lossy.begin() + (untouched + 1) * per, before.begin() + untouched * per));
}

} // namespace

TEST_CASE_TEMPLATE("Mamba2 decode update with a bf16 / fp16 pool rounds the fp32 update once", T, float, bfloat16) {
  SUBCASE("bf16 pool") { check_lossy_update<T, bfloat16>(); }
  SUBCASE("fp16 pool") { check_lossy_update<T, float16>(); }
}

TEST_CASE("gated-delta recurrent step with an fp16 pool rounds the fp32 step once") {
  constexpr std::int64_t H = 2, HV = 4, K = 8, V = 4, slots = 3;
  random_source rng(92);
  const auto q = rng.values<float>(H * K, -1, 1), kk = rng.values<float>(H * K, -1, 1);
  const auto v = rng.values<float>(HV * V, -1, 1), beta = rng.values<float>(HV, 0.1f, 0.9f);
  const auto g = rng.values<float>(HV, -0.5f, -0.01f);
  std::vector<float16> lossy;
  std::vector<float> pool;
  for (float s : rng.values<float>(slots * HV * K * V, -0.5f, 0.5f)) {
    lossy.push_back(from_float<float16>(s));
    pool.push_back(to_float(lossy.back()));
  }
  std::vector<float> out32(HV * V, -7.0f), out16(HV * V, -7.0f);
  const std::vector<std::int32_t> cu{0, 1};
  const std::vector<std::int64_t> start{40};
  const std::vector<copy_pair> pairs{{0, 2}};
  gated_delta_options o;
  o.l2norm_qk = true;
  gated_delta_args<float> a32{make_tensor(q.data(), 1, H, K), make_tensor(kk.data(), 1, H, K),
                              make_tensor(v.data(), 1, HV, V), make_tensor(g.data(), 1, HV),
                              make_tensor(beta.data(), 1, HV), make_tensor(pool.data(), slots, HV, K, V),
                              make_tensor(out32.data(), 1, HV, V)};
  gated_delta_args<float, float16> a16{a32.q, a32.k, a32.v, a32.g, a32.beta,
                                       make_tensor(lossy.data(), slots, HV, K, V), make_tensor(out16.data(), 1, HV, V)};
  REQUIRE(gated_delta_recurrent_step_host(a32, o, {cu, start}, recurrent_slots{pairs}).has_value());
  REQUIRE(gated_delta_recurrent_step_host(a16, o, {cu, start}, recurrent_slots{pairs}).has_value());
  CHECK(bitwise_equal(out16.data(), out32.data(), out32.size()));
  std::size_t mismatched = 0;
  for (std::size_t i = 0; i < pool.size(); ++i) mismatched += !(lossy[i] == from_float<float16>(pool[i]));
  CHECK(mismatched == 0);
}

#ifdef REPRISE_TEST_WITH_KERNELS
// The device launchers take bf16 / fp16 pools for the decode update and the recurrent step. Their host side
// (validation, dispatch, planning) answers before anything touches the device, so it runs here without a GPU:
// every instantiated shape has the lossy pools' entry points, and they refuse what the fp32 pool's refuse.
#include "support/gated_delta_testing.hpp"

namespace {

template <class T, class State>
void lossy_mamba2_launcher(const mamba2_kernel_config& cfg) {
  random_source rng(93);
  mamba2_case<T> k(rng, 3, 4, cfg.head_dim, 2, cfg.state_dim, 6);
  std::vector<State> lossy(k.pool.size() + 8);
  const auto a32 = k.args(0);
  auto with_pool = [&](State* data, std::int64_t slots) {
    return mamba2_args<T, State>{a32.x, a32.dt, a32.A, a32.B, a32.C, a32.D, a32.dt_bias, a32.z,
                                 make_tensor(data, slots, k.H, k.P, k.N), a32.y};
  };
  // (the vector's storage is 16-byte aligned: operator new's alignment)
  const std::vector<copy_pair> pairs{{0, 3}, {-1, 4}, {1, 1}}, out_of_pool{{0, 6}, {-1, 4}, {1, 1}};
  const std::size_t bytes = mamba2_state_update_workspace_bytes(with_pool(lossy.data(), k.slots), pairs);
  CHECK(bytes > 0);
  CHECK(bytes == mamba2_state_update_workspace_bytes(a32, pairs)); // the plan does not depend on the pool's type
  CHECK(mamba2_state_update_workspace_bytes(with_pool(lossy.data(), k.slots), out_of_pool) == 0);
  CHECK(mamba2_state_update(with_pool(lossy.data(), k.slots), out_of_pool, {}, nullptr).error() == errc::out_of_range);
  // an 8-byte vector access needs the pool on a 16-byte boundary, as the fp32 pool's 16-byte one does
  CHECK(mamba2_state_update(with_pool(lossy.data() + 1, k.slots), pairs, {}, nullptr).error() == errc::misaligned);
  CHECK(mamba2_state_update_planned(with_pool(lossy.data() + 1, k.slots), nullptr, nullptr).error() ==
        errc::misaligned);
  CHECK(mamba2_state_update_planned(with_pool(lossy.data(), k.slots), nullptr, nullptr).error() ==
        errc::invalid_argument); // rows and no pairs
}

template <class T, class State>
void lossy_gated_delta_launcher(const gated_delta_kernel_config& cfg) {
  const testing::gd_dims dims{2, 4, cfg.key_dim, cfg.value_dim};
  testing::gd_problem<T> p(dims, 6, 8, 11);
  std::vector<State> lossy(p.pool.size());
  const auto a32 = p.args();
  const gated_delta_args<T, State> a{a32.q, a32.k, a32.v, a32.g, a32.beta,
                                     make_tensor(lossy.data(), p.slots, dims.hv, dims.k, dims.v), a32.out};
  gated_delta_options o;
  o.l2norm_qk = true;
  const std::vector<std::int32_t> cu = {0, 2, 4, 6};
  const std::vector<std::int64_t> start = {150, 138, 198};
  const std::vector<copy_pair> pairs = {{1, 1}, {2, 7}, {3, 3}}, out_of_pool = {{1, 1}, {2, 8}, {3, 3}};
  const varlen_batch b{cu, start};
  const auto shape = gated_delta_recurrent_step_plan(a, o, b, recurrent_slots{pairs}, {});
  REQUIRE(shape.has_value());
  CHECK(shape->sequences == 3);
  CHECK(*shape == *gated_delta_recurrent_step_plan(a32, o, b, recurrent_slots{pairs}, {}));
  std::vector<std::byte> lossy_plan(shape->metadata_bytes), plan(shape->metadata_bytes);
  REQUIRE(gated_delta_recurrent_step_plan(a, o, b, recurrent_slots{pairs}, lossy_plan).has_value());
  REQUIRE(gated_delta_recurrent_step_plan(a32, o, b, recurrent_slots{pairs}, plan).has_value());
  CHECK(lossy_plan == plan);
  CHECK(gated_delta_recurrent_step_workspace_bytes(a, o, b, recurrent_slots{pairs}) == shape->metadata_bytes);
  CHECK(gated_delta_recurrent_step_workspace_bytes(a, o, b, recurrent_slots{out_of_pool}) == 0);
  CHECK(gated_delta_recurrent_step(a, o, b, recurrent_slots{out_of_pool}, {}, nullptr).error() == errc::out_of_range);
  gated_delta_step_shape wrong = *shape;
  wrong.metadata_bytes += 1;
  CHECK(gated_delta_recurrent_step_planned(a, o, wrong, {}, nullptr).error() == errc::size_mismatch);
}

} // namespace

TEST_CASE("the device decode launchers take bf16 / fp16 pools for every instantiated shape (host side)") {
  REQUIRE(!mamba2_instantiated_configs().empty());
  for (const mamba2_kernel_config& cfg : mamba2_instantiated_configs()) {
    CAPTURE(cfg.head_dim);
    CAPTURE(cfg.state_dim);
    if (cfg.input == dtype::f32) {
      lossy_mamba2_launcher<float, bfloat16>(cfg);
      lossy_mamba2_launcher<float, float16>(cfg);
    } else {
      lossy_mamba2_launcher<bfloat16, bfloat16>(cfg);
      lossy_mamba2_launcher<bfloat16, float16>(cfg);
    }
  }
  REQUIRE(!gated_delta_instantiated_configs().empty());
  for (const gated_delta_kernel_config& cfg : gated_delta_instantiated_configs()) {
    CAPTURE(cfg.key_dim);
    CAPTURE(cfg.value_dim);
    if (cfg.input == dtype::f32) {
      lossy_gated_delta_launcher<float, bfloat16>(cfg);
      lossy_gated_delta_launcher<float, float16>(cfg);
    } else {
      lossy_gated_delta_launcher<bfloat16, bfloat16>(cfg);
      lossy_gated_delta_launcher<bfloat16, float16>(cfg);
    }
  }
}
#endif
