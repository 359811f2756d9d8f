// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 selective state update (decode step, host implementation): fp64 reference, fused copy-on-write,
// padding, continuation of a prefill, errors.
#include <reprise/ops/mamba2.hpp>

#include "support/mamba2_case.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {
constexpr std::int64_t H = 4, P = 8, G = 2, N = 16;
}

TEST_CASE_TEMPLATE("state update matches one fp64 step, copy-on-write, padding untouched", T, float, bfloat16) {
  random_source rng(61);
  mamba2_case<T> k(rng, 3, H, P, G, N, 6);
  const auto pool0 = k.pool;
  const auto y0 = k.y;
  // Row 0 forks slot 1 into slot 4; row 1 is padding; row 2 advances slot 2 in place.
  const std::vector<copy_pair> pairs{{1, 4}, {-1, 5}, {2, 2}};
  REQUIRE(mamba2_state_update_host(k.args(64), pairs).has_value());
  for (std::int64_t r : {0, 2}) {
    const std::int64_t src = pairs[r].src, dst = pairs[r].dst;
    std::vector<double> S(pool0.begin() + src * H * P * N, pool0.begin() + (src + 1) * H * P * N);
    const auto ref = reference_mamba2(k, r, 1, S);
    std::vector<double> got;
    for (std::int64_t i = r * H * P; i < (r + 1) * H * P; ++i) got.push_back(to_float(k.y[i]));
    CHECK(relative_rms(got, ref) <= (std::is_same_v<T, float> ? 1e-6 : 4e-3));
    CHECK(relative_rms(std::vector<double>(k.slot(dst), k.slot(dst) + k.state_elems()), S) <= 1e-6);
  }
  CHECK(bitwise_equal(k.slot(1), pool0.data() + 1 * H * P * N, k.state_elems())); // source of the fork
  CHECK(bitwise_equal(k.slot(5), pool0.data() + 5 * H * P * N, k.state_elems())); // padding's slot
  for (std::int64_t i = H * P; i < 2 * H * P; ++i) CHECK(k.y[i] == y0[i]);         // padding's output
}

TEST_CASE("decode steps continue a chunked prefill (fp64 reference over both)") {
  random_source rng(62);
  const std::int64_t L = 130, steps = 5;
  mamba2_case<float> k(rng, L + steps, H, P, G, N, 2);
  mamba2_case<float> prompt = k.slice(0, L);
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  REQUIRE(mamba2_ssd_prefill_host(prompt.args(64), {cu, start}, {none, live}).has_value());
  std::vector<double> S(k.state_elems(), 0.0);
  (void)reference_mamba2(k, 0, L, S);
  for (std::int64_t i = 0; i < steps; ++i) {
    mamba2_case<float> step = k.slice(L + i, 1);
    step.pool = prompt.pool;
    const std::vector<copy_pair> pairs{{0, 0}};
    REQUIRE(mamba2_state_update_host(step.args(64), pairs).has_value());
    prompt.pool = step.pool;
    const auto ref = reference_mamba2(k, L + i, 1, S);
    CHECK(relative_rms(widen(step.y), ref) <= 1e-5);
  }
  CHECK(relative_rms(std::vector<double>(prompt.slot(0), prompt.slot(0) + k.state_elems()), S) <= 1e-5);
}

TEST_CASE("state update bad input returns an errc and writes nothing") {
  random_source rng(63);
  mamba2_case<float> k(rng, 2, H, P, G, N, 3);
  const auto pool0 = k.pool;
  const auto y0 = k.y;
  SUBCASE("slot out of range") {
    CHECK(mamba2_state_update_host(k.args(64), std::vector<copy_pair>{{0, 1}, {2, 3}}).error() == errc::out_of_range);
  }
  SUBCASE("two rows write one slot") {
    CHECK(mamba2_state_update_host(k.args(64), std::vector<copy_pair>{{0, 1}, {2, 1}}).error() ==
          errc::overlapping_pairs);
  }
  SUBCASE("a row reads what another writes") {
    CHECK(mamba2_state_update_host(k.args(64), std::vector<copy_pair>{{0, 1}, {1, 2}}).error() ==
          errc::overlapping_pairs);
  }
  SUBCASE("pairs and rows disagree") {
    CHECK(mamba2_state_update_host(k.args(64), std::vector<copy_pair>{{0, 1}}).error() == errc::size_mismatch);
  }
  SUBCASE("heads not a multiple of groups") {
    auto a = k.args(64);
    a.B = cview(k.B, 2, 3, N * G / 3 + 0);
    CHECK(mamba2_state_update_host(a, std::vector<copy_pair>{{0, 1}, {2, 2}}).error() != errc{});
  }
  CHECK(k.pool == pool0);
  CHECK(k.y == y0);
}
