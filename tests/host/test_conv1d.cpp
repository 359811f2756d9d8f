// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Causal conv1d host implementation: prefill vs a direct fp64 convolution, split-run exactness through the
// conv window, captures, the decode update and every error path.
#include <reprise/ops/conv1d.hpp>

#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

#include <vector>

using namespace reprise;
using namespace reprise::ops;
using reprise::testing::cview;
using reprise::testing::random_source;
using reprise::testing::view;

namespace {

/// Operands of one conv layer over `tokens` rows and a pool of `slots` windows.
template <class T>
struct conv_case {
  std::int64_t C, W, tokens, slots;
  std::vector<T> x, pool, out;
  std::vector<float> weight, bias;

  conv_case(random_source& rng, std::int64_t c, std::int64_t w, std::int64_t t, std::int64_t s)
      : C(c), W(w), tokens(t), slots(s), x(rng.values<T>(t * c, -1, 1)), pool(rng.values<T>(s * (w - 1) * c, -1, 1)),
        out(static_cast<std::size_t>(t * c), from_float<T>(7.0f)), weight(rng.values<float>(c * w, -0.5, 0.5)),
        bias(rng.values<float>(c, -0.2f, 0.2f)) {}

  conv1d_args<T> args(bool silu = true) {
    return {cview(x, tokens, C), cview(weight, C, W), cview(bias, C), view(pool, slots, W - 1, C), view(out, tokens, C),
            silu};
  }
};

/// fp64 causal conv of one sequence whose history before `x` is `init` ([W-1, C], oldest first).
std::vector<double> reference_conv(const std::vector<double>& init, const std::vector<double>& x, std::int64_t C,
                                   std::int64_t W, const std::vector<float>& weight, const std::vector<float>& bias,
                                   bool act) {
  std::vector<double> hist = init;
  hist.insert(hist.end(), x.begin(), x.end());
  const std::int64_t T = static_cast<std::int64_t>(x.size()) / C;
  std::vector<double> y(static_cast<std::size_t>(T * C));
  for (std::int64_t t = 0; t < T; ++t)
    for (std::int64_t c = 0; c < C; ++c) {
      double acc = bias[c];
      for (std::int64_t k = 0; k < W; ++k) acc += double(weight[c * W + k]) * hist[(t + k) * C + c];
      y[t * C + c] = act ? acc / (1 + std::exp(-acc)) : acc;
    }
  return y;
}

} // namespace

TEST_CASE_TEMPLATE("conv1d prefill matches a direct fp64 convolution", T, float, bfloat16) {
  random_source rng(11);
  for (std::int64_t W : {2, 3, 4}) {
    CAPTURE(W);
    const std::int64_t C = 12;
    const std::vector<std::int32_t> cu{0, 5, 5, 37};
    const std::vector<std::int64_t> start{0, 9, 130};
    conv_case<T> k(rng, C, W, 37, 4);
    const std::vector<std::int32_t> initial{-1, 1, 2}, final_slots{0, -1, 3};
    const std::vector<T> pool_before = k.pool;
    REQUIRE(causal_conv1d_prefill_host(k.args(), {cu, start}, {initial, final_slots}).has_value());
    for (std::size_t s = 0; s < 3; ++s) {
      if (cu[s] == cu[s + 1]) continue;
      std::vector<double> init(static_cast<std::size_t>((W - 1) * C), 0.0);
      if (initial[s] >= 0)
        for (std::int64_t i = 0; i < (W - 1) * C; ++i) init[i] = to_float(pool_before[initial[s] * (W - 1) * C + i]);
      std::vector<double> xs, got;
      for (std::int64_t i = cu[s] * C; i < cu[s + 1] * C; ++i) {
        xs.push_back(to_float(k.x[i]));
        got.push_back(to_float(k.out[i]));
      }
      const auto ref = reference_conv(init, xs, C, W, k.weight, k.bias, true);
      const double tol = std::is_same_v<T, float> ? 1e-6 : 1e-2;
      CHECK(reprise::testing::relative_rms(got, ref) <= tol);
    }
    // Sequence 1 has no tokens: its final slot is "none" and its state is untouched. Slot 1 is only read.
    CHECK(reprise::testing::bitwise_equal(k.pool.data() + 1 * (W - 1) * C, pool_before.data() + 1 * (W - 1) * C,
                                          static_cast<std::size_t>((W - 1) * C)));
  }
}

TEST_CASE_TEMPLATE("conv1d split at any position through the window is bitwise equal", T, float, bfloat16) {
  random_source rng(12);
  const std::int64_t C = 8, W = 4, L = 50;
  for (std::int64_t split : {1, 2, 3, 17, 49}) {
    CAPTURE(split);
    conv_case<T> full(rng, C, W, L, 2);
    const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L)}, none{-1}, slot0{0};
    const std::vector<std::int64_t> start{0};
    // Uninterrupted run, capturing at `split`.
    const std::vector<capture_point> cap{{0, split, 1}};
    REQUIRE(causal_conv1d_prefill_host(full.args(), {cu, start}, {none, slot0, cap}).has_value());
    // Resumed run: [0, split) into slot 0, then [split, L) from slot 0.
    conv_case<T> part = full;
    std::fill(part.out.begin(), part.out.end(), from_float<T>(0.0f));
    std::vector<T> x1(full.x.begin(), full.x.begin() + split * C), x2(full.x.begin() + split * C, full.x.end());
    std::vector<T> y1(x1.size()), y2(x2.size());
    const std::vector<std::int32_t> cu1{0, static_cast<std::int32_t>(split)}, cu2{0, static_cast<std::int32_t>(L - split)};
    const std::vector<std::int64_t> start2{split};
    conv1d_args<T> a1{cview(x1, split, C), cview(part.weight, C, W), cview(part.bias, C), view(part.pool, 2, W - 1, C),
                      view(y1, split, C)};
    REQUIRE(causal_conv1d_prefill_host(a1, {cu1, start}, {none, slot0}).has_value());
    // The capture of the uninterrupted run is exactly the window the split run stored: the last W-1 inputs.
    CHECK(reprise::testing::bitwise_equal(full.pool.data() + (W - 1) * C, part.pool.data(), std::size_t((W - 1) * C)));
    for (std::int64_t j = 0; j < W - 1; ++j) {
      const std::int64_t pos = split - (W - 1) + j;
      for (std::int64_t c = 0; c < C; ++c) {
        const float expect = pos >= 0 ? to_float(full.x[pos * C + c]) : 0.0f;
        CHECK(to_float(full.pool[(W - 1) * C + j * C + c]) == expect);
      }
    }
    conv1d_args<T> a2{cview(x2, L - split, C), cview(part.weight, C, W), cview(part.bias, C),
                      view(part.pool, 2, W - 1, C), view(y2, L - split, C)};
    REQUIRE(causal_conv1d_prefill_host(a2, {cu2, start2}, {slot0, slot0}).has_value());
    y1.insert(y1.end(), y2.begin(), y2.end());
    CHECK(reprise::testing::bitwise_equal(y1.data(), full.out.data(), y1.size()));
    CHECK(reprise::testing::bitwise_equal(full.pool.data(), part.pool.data(), std::size_t((W - 1) * C)));
  }
}

TEST_CASE_TEMPLATE("conv1d decode update continues a prefill bitwise, padding untouched", T, float, bfloat16) {
  random_source rng(13);
  const std::int64_t C = 6, W = 3;
  conv_case<T> k(rng, C, W, 9, 6);
  const std::vector<std::int32_t> cu{0, 9}, none{-1}, slot2{2};
  const std::vector<std::int64_t> start{0};
  REQUIRE(causal_conv1d_prefill_host(k.args(), {cu, start}, {none, slot2}).has_value());
  // Continue token 9 by decode from slot 2 into slot 4 (copy-on-write), with a padding row in between.
  std::vector<T> xd = rng.values<T>(3 * C, -1, 1), yd(static_cast<std::size_t>(3 * C), from_float<T>(5.0f));
  const std::vector<copy_pair> pairs{{2, 4}, {-1, 5}, {3, 3}};
  const std::vector<T> pool_before = k.pool;
  conv1d_args<T> d{cview(xd, 3, C), cview(k.weight, C, W), cview(k.bias, C), view(k.pool, 6, W - 1, C), view(yd, 3, C)};
  REQUIRE(causal_conv1d_update_host(d, pairs).has_value());
  // Reference: prefill of the 10 tokens.
  conv_case<T> ten = k;
  ten.x.insert(ten.x.end(), xd.begin(), xd.begin() + C);
  ten.tokens = 10;
  ten.out.assign(static_cast<std::size_t>(10 * C), from_float<T>(0.0f));
  ten.pool = pool_before;
  const std::vector<std::int32_t> cu10{0, 10}, slot0{0};
  REQUIRE(causal_conv1d_prefill_host(ten.args(), {cu10, start}, {none, slot0}).has_value());
  CHECK(reprise::testing::bitwise_equal(yd.data(), ten.out.data() + 9 * C, std::size_t(C)));
  CHECK(reprise::testing::bitwise_equal(k.pool.data() + 4 * (W - 1) * C, ten.pool.data(), std::size_t((W - 1) * C)));
  // Source slot 2 kept its window (copy-on-write); padding row 1 and its slot 5 are untouched.
  CHECK(reprise::testing::bitwise_equal(k.pool.data() + 2 * (W - 1) * C, pool_before.data() + 2 * (W - 1) * C,
                                        std::size_t((W - 1) * C)));
  CHECK(reprise::testing::bitwise_equal(k.pool.data() + 5 * (W - 1) * C, pool_before.data() + 5 * (W - 1) * C,
                                        std::size_t((W - 1) * C)));
  for (std::int64_t c = 0; c < C; ++c) CHECK(to_float(yd[C + c]) == 5.0f);
  // In-place row 2: slot 3 now ends with x of row 2.
  for (std::int64_t c = 0; c < C; ++c) CHECK(to_float(k.pool[3 * (W - 1) * C + (W - 2) * C + c]) == to_float(xd[2 * C + c]));
}

TEST_CASE("conv1d bad input returns an errc and writes nothing") {
  random_source rng(14);
  const std::int64_t C = 4;
  conv_case<float> k(rng, C, 4, 8, 3);
  const std::vector<float> pool0 = k.pool, out0 = k.out;
  const std::vector<std::int32_t> cu{0, 8}, none{-1}, slot0{0}, slot9{9};
  const std::vector<std::int64_t> start{0};
  auto unchanged = [&] { return k.pool == pool0 && k.out == out0; };

  SUBCASE("width 5 is not instantiated") {
    std::vector<float> w5(C * 5);
    auto a = k.args();
    a.weight = cview(w5, C, 5);
    CHECK(causal_conv1d_prefill_host(a, {cu, start}, {none, slot0}).error() == errc::unsupported_config);
  }
  SUBCASE("slot out of range") {
    CHECK(causal_conv1d_prefill_host(k.args(), {cu, start}, {none, slot9}).error() == errc::out_of_range);
  }
  SUBCASE("capture outside the sequence") {
    const std::vector<capture_point> cap{{0, 9, 1}};
    CHECK(causal_conv1d_prefill_host(k.args(), {cu, start}, {none, slot0, cap}).error() == errc::out_of_range);
  }
  SUBCASE("capture into the final slot") {
    const std::vector<capture_point> cap{{0, 4, 0}};
    CHECK(causal_conv1d_prefill_host(k.args(), {cu, start}, {none, slot0, cap}).error() == errc::overlapping_pairs);
  }
  SUBCASE("token count disagrees with the batch") {
    const std::vector<std::int32_t> cu7{0, 7};
    CHECK(causal_conv1d_prefill_host(k.args(), {cu7, start}, {none, slot0}).error() == errc::size_mismatch);
  }
  SUBCASE("decode: two rows write one slot") {
    const std::vector<copy_pair> pairs{{0, 1}, {2, 1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    CHECK(causal_conv1d_update_host(k.args(), pairs).error() == errc::overlapping_pairs);
  }
  SUBCASE("decode: a row reads a slot another row writes") {
    const std::vector<copy_pair> pairs{{0, 1}, {1, 2}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}, {-1, -1}};
    CHECK(causal_conv1d_update_host(k.args(), pairs).error() == errc::overlapping_pairs);
  }
  SUBCASE("decode: pair count disagrees with rows") {
    const std::vector<copy_pair> pairs{{0, 1}};
    CHECK(causal_conv1d_update_host(k.args(), pairs).error() == errc::size_mismatch);
  }
  CHECK(unchanged());
}

// The device launchers and their workspace queries validate with the same functions as the host path, before
// anything touches the device, so they run here without a GPU when the kernels library is built.
TEST_CASE("conv1d workspace query validates its slots like the launch (a final slot out of range, or missing)") {
  random_source rng(5);
  conv_case<float> k(rng, 8, 4, 10, 3);
  const std::vector<std::int32_t> cu{0, 6, 10}, none{-1, -1}, live{0, 1}, far{0, 3}, short_final{0};
  const std::vector<std::int64_t> start{0, 4};
  const varlen_batch b{cu, start};
  CHECK(validate_conv1d_prefill(k.args(), b, {none, live}) == errc{});
  CHECK(validate_conv1d_prefill(k.args(), b, {none, far}) == errc::out_of_range);
  CHECK(validate_conv1d_prefill(k.args(), b, {none, short_final}) == errc::size_mismatch);
#ifdef REPRISE_TEST_WITH_KERNELS
  CHECK(causal_conv1d_prefill_workspace_bytes(k.args(), b, {none, live}) > 0);
  CHECK(causal_conv1d_prefill_workspace_bytes(k.args(), b, {none, far}) == 0);
  CHECK(causal_conv1d_prefill_workspace_bytes(k.args(), b, {none, short_final}) == 0);
  CHECK(causal_conv1d_prefill(k.args(), b, {none, far}, {}, nullptr).error() == errc::out_of_range);
  CHECK(causal_conv1d_prefill(k.args(), b, {none, short_final}, {}, nullptr).error() == errc::size_mismatch);
  const std::vector<copy_pair> pairs{{0, 1}, {2, 2}}, bad{{0, 3}, {2, 2}};
  conv_case<float> u(rng, 8, 4, 2, 3);
  CHECK(causal_conv1d_update_workspace_bytes(u.args(), pairs) > 0);
  CHECK(causal_conv1d_update_workspace_bytes(u.args(), bad) == 0);
#endif
}
