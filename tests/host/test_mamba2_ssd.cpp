// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 SSD chunked prefill (host implementation): accuracy against an fp64 sequential recurrence, bitwise
// resume and captures on the absolute chunk grid, tolerance for unaligned and bf16-state resumes, errors.
#include <reprise/ops/mamba2.hpp>

#include "support/mamba2_case.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {
constexpr std::int64_t H = 4, P = 8, G = 2, N = 16;

template <class T>
std::vector<double> y_of(const mamba2_case<T>& k, std::int64_t t0, std::int64_t len) {
  std::vector<double> out;
  for (std::int64_t i = t0 * H * P; i < (t0 + len) * H * P; ++i) out.push_back(to_float(k.y[i]));
  return out;
}
std::vector<double> state_of(mamba2_case<float>& k, std::int64_t slot) {
  return std::vector<double>(k.slot(slot), k.slot(slot) + k.state_elems());
}
template <class T>
std::vector<double> state_of(mamba2_case<T>& k, std::int64_t slot) {
  return std::vector<double>(k.slot(slot), k.slot(slot) + k.state_elems());
}
} // namespace

TEST_CASE_TEMPLATE("ssd chunked prefill matches the fp64 sequential recurrence", T, float, bfloat16) {
  random_source rng(51);
  for (std::int64_t Q : {64, 128, 256}) {
    CAPTURE(Q);
    // Three sequences: from zero at 0, from a slot at an unaligned start (short first chunk), and a short one.
    const std::vector<std::int32_t> cu{0, 300, 470, 475};
    const std::vector<std::int64_t> start{0, 100, 512};
    const std::vector<std::int32_t> initial{-1, 3, 4}, final_slots{0, 1, 2};
    mamba2_case<T> k(rng, 475, H, P, G, N, 5);
    const auto pool0 = k.pool;
    REQUIRE(mamba2_ssd_prefill_host(k.args(Q), {cu, start}, {initial, final_slots}).has_value());
    for (std::size_t s = 0; s < 3; ++s) {
      std::vector<double> S(k.state_elems(), 0.0);
      if (initial[s] >= 0) S.assign(pool0.begin() + initial[s] * H * P * N, pool0.begin() + (initial[s] + 1) * H * P * N);
      const auto ref = reference_mamba2(k, cu[s], cu[s + 1] - cu[s], S);
      // fp32 inputs: 1e-5. bf16 inputs: y is stored in bf16 (half an ulp is 2^-9 relative).
      CHECK(relative_rms(y_of(k, cu[s], cu[s + 1] - cu[s]), ref) <= (std::is_same_v<T, float> ? 1e-5 : 4e-3));
      CHECK(relative_rms(state_of(k, final_slots[s]), S) <= 1e-5);
    }
  }
}

TEST_CASE("segment sums advanced row by row equal the direct forward sums bit for bit") {
  // The host advances seg(s, t) one row at a time; the kernels sum seg(s, t) directly for a tile's first row.
  random_source rng(9);
  const auto a = rng.values<float>(256, -3.0f, 0.0f);
  std::vector<float> seg(256, -1.0f);
  for (int t = 0; t < 256; ++t) {
    ssd_segsum_advance(seg.data(), a.data(), t);
    for (int s = 0; s <= t; ++s) {
      const float direct = ssd_segsum(a.data(), s, t);
      REQUIRE(bitwise_equal(&seg[static_cast<std::size_t>(s)], &direct, 1));
    }
  }
  CHECK(ssd_segsum(a.data(), 7, 7) == 0.0f);
  CHECK(ssd_segsum(a.data(), 9, 3) == 0.0f);
}

TEST_CASE("ssd with wide steps keeps the in-chunk decays precise (segment sums, not prefix differences)") {
  // Raw dt in [-6, 3): steps up to 3, so the in-chunk prefix sums of A dt reach hundreds. Decays taken as
  // exp(Acum_t - Acum_s) carried 6e-7 (Q 64) to 2.2e-6 (Q 256) relative RMS here; summing each segment
  // directly keeps both y and the final state near 1.2e-7 at every Q.
  for (std::uint64_t seed : {7u, 8u}) {
    for (std::int64_t Q : {64, 128, 256}) {
      CAPTURE(seed);
      CAPTURE(Q);
      random_source rng(seed);
      const std::int64_t n = 1024;
      mamba2_case<float> k(rng, n, H, P, G, N, 1);
      k.dt = rng.values<float>(static_cast<std::size_t>(n * H), -6.0f, 3.0f);
      const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(n)};
      const std::vector<std::int64_t> start{0};
      const std::vector<std::int32_t> none{-1}, live{0};
      REQUIRE(mamba2_ssd_prefill_host(k.args(Q), {cu, start}, {none, live}).has_value());
      std::vector<double> S(k.state_elems(), 0.0);
      const auto ref = reference_mamba2(k, 0, n, S);
      CHECK(relative_rms(y_of(k, 0, n), ref) <= 3e-7);
      CHECK(relative_rms(state_of(k, 0), S) <= 3e-7);
    }
  }
}

TEST_CASE_TEMPLATE("ssd resume from a capture at an aligned position is bitwise equal", T, float, bfloat16) {
  random_source rng(52);
  for (std::int64_t Q : {64, 256}) {
    CAPTURE(Q);
    const std::int64_t L = 2 * Q + 77;
    mamba2_case<T> full(rng, L, H, P, G, N, 6);
    mamba2_case<T> original = full;
    const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
    const std::vector<std::int64_t> start{0};
    const std::vector<capture_point> caps{{0, Q, 1}, {0, 2 * Q, 2}};
    REQUIRE(mamba2_ssd_prefill_host(full.args(Q), {cu, start}, {none, live, caps}).has_value());

    for (std::int64_t at : {Q, 2 * Q}) {
      CAPTURE(at);
      const std::int32_t cap_slot = at == Q ? 1 : 2;
      // The capture equals the final state of a prefill that stops at `at`.
      mamba2_case<T> prefix = original.slice(0, at);
      const std::vector<std::int32_t> cu_p{0, static_cast<std::int32_t>(at)}, slot3{3};
      REQUIRE(mamba2_ssd_prefill_host(prefix.args(Q), {cu_p, start}, {none, slot3}).has_value());
      CHECK(bitwise_equal(prefix.slot(3), full.slot(cap_slot), full.state_elems()));
      CHECK(bitwise_equal(prefix.y.data(), full.y.data(), prefix.y.size()));

      // Restore the capture into a fresh slot and continue: outputs and final state bit for bit.
      mamba2_case<T> rest = original.slice(at, L - at);
      std::copy(full.slot(cap_slot), full.slot(cap_slot) + full.state_elems(), rest.slot(4));
      const std::vector<std::int32_t> cu_r{0, static_cast<std::int32_t>(L - at)}, slot4{4};
      const std::vector<std::int64_t> start_r{at};
      REQUIRE(mamba2_ssd_prefill_host(rest.args(Q), {cu_r, start_r}, {slot4, slot4}).has_value());
      CHECK(bitwise_equal(rest.y.data(), full.y.data() + at * H * P, rest.y.size()));
      CHECK(bitwise_equal(rest.slot(4), full.slot(0), full.state_elems()));
    }
  }
}

TEST_CASE("ssd resume at an unaligned position or from a bf16 state stays within tolerance") {
  random_source rng(53);
  const std::int64_t Q = 64, L = 250;
  mamba2_case<float> full(rng, L, H, P, G, N, 4);
  const mamba2_case<float> original = full;
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  const std::vector<capture_point> caps{{0, 128, 3}};
  REQUIRE(mamba2_ssd_prefill_host(full.args(Q), {cu, start}, {none, live, caps}).has_value());

  SUBCASE("unaligned split at 100: chunks [100, 128) then the grid") {
    mamba2_case<float> a = original.slice(0, 100);
    const std::vector<std::int32_t> cu_a{0, 100}, slot1{1};
    REQUIRE(mamba2_ssd_prefill_host(a.args(Q), {cu_a, start}, {none, slot1}).has_value());
    mamba2_case<float> b = original.slice(100, L - 100);
    std::copy(a.slot(1), a.slot(1) + a.state_elems(), b.slot(1));
    const std::vector<std::int32_t> cu_b{0, static_cast<std::int32_t>(L - 100)};
    const std::vector<std::int64_t> start_b{100};
    REQUIRE(mamba2_ssd_prefill_host(b.args(Q), {cu_b, start_b}, {slot1, slot1}).has_value());
    std::vector<double> y(a.y.begin(), a.y.end());
    y.insert(y.end(), b.y.begin(), b.y.end());
    CHECK(relative_rms(y, widen(full.y)) <= 1e-5);
    CHECK(relative_rms(state_of(b, 1), state_of(full, 0)) <= 1e-5);
  }
  SUBCASE("bf16-rounded capture at 128") {
    mamba2_case<float> b = original.slice(128, L - 128);
    for (std::size_t i = 0; i < b.state_elems(); ++i) b.slot(2)[i] = to_float(from_float<bfloat16>(full.slot(3)[i]));
    const std::vector<std::int32_t> cu_b{0, static_cast<std::int32_t>(L - 128)}, slot2{2};
    const std::vector<std::int64_t> start_b{128};
    REQUIRE(mamba2_ssd_prefill_host(b.args(Q), {cu_b, start_b}, {slot2, slot2}).has_value());
    // A bf16 state carries 2^-9 relative rounding; it decays with the state's influence.
    const std::vector<double> tail(full.y.begin() + 128 * H * P, full.y.end());
    const double err = relative_rms(widen(b.y), tail);
    CHECK(err > 0.0); // the rounding is visible: this is not the bitwise path
    CHECK(err <= 3e-3);
    CHECK(relative_rms(state_of(b, 2), state_of(full, 0)) <= 3e-3);
  }
}

TEST_CASE("ssd bad input returns an errc and writes nothing") {
  random_source rng(54);
  mamba2_case<float> k(rng, 100, H, P, G, N, 3);
  const auto pool0 = k.pool;
  const auto y0 = k.y;
  const std::vector<std::int32_t> cu{0, 100}, none{-1}, live{0}, far{3};
  const std::vector<std::int64_t> start{0};
  SUBCASE("chunk 32 is not a Mamba2 chunk size") {
    CHECK(mamba2_ssd_prefill_host(k.args(32), {cu, start}, {none, live}).error() == errc::unsupported_config);
  }
  SUBCASE("capture off the chunk grid") {
    const std::vector<capture_point> caps{{0, 96, 1}};
    CHECK(mamba2_ssd_prefill_host(k.args(64), {cu, start}, {none, live, caps}).error() == errc::misaligned);
  }
  SUBCASE("slot out of range") {
    CHECK(mamba2_ssd_prefill_host(k.args(64), {cu, start}, {none, far}).error() == errc::out_of_range);
  }
  SUBCASE("capture into another sequence's initial slot") {
    const std::vector<std::int32_t> live2{0, 1}, init2{-1, 2};
    const std::vector<std::int32_t> cu2{0, 80, 100};
    const std::vector<std::int64_t> start2{0, 0};
    const std::vector<capture_point> caps{{0, 64, 2}};
    CHECK(mamba2_ssd_prefill_host(k.args(64), {cu2, start2}, {init2, live2, caps}).error() == errc::overlapping_pairs);
  }
  SUBCASE("state pool of the wrong head dimension") {
    auto a = k.args(64);
    a.state_pool = view(k.pool, 3, H, P / 2, 2 * N);
    CHECK(mamba2_ssd_prefill_host(a, {cu, start}, {none, live}).error() == errc::size_mismatch);
  }
  CHECK(k.pool == pool0);
  CHECK(k.y == y0);
}
