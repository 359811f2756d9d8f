// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device causal conv1d (prefill with captures, decode update) vs the host implementation.
#include <reprise/ops/conv1d.hpp>

#include "gpu/harness.cuh"
#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

TEST_CASE_TEMPLATE("device conv1d prefill and update match the host", T, float, bfloat16) {
  random_source rng(41);
  for (std::int64_t W : {2, 3, 4}) {
    CAPTURE(W);
    // C = 304 takes the 16-byte vector path; C = 300 (not a multiple of 8 bf16) the scalar one.
    for (std::int64_t C : {304, 300}) {
    CAPTURE(C);
    const std::int64_t slots = 8, tokens = 211;
    const std::vector<std::int32_t> cu{0, 150, 150, 211}, initial{-1, 1, 2}, final_slots{0, -1, 2};
    const std::vector<std::int64_t> start{0, 64, 1000};
    const std::vector<capture_point> caps{{0, 64, 4}, {0, 128, 5}, {2, 1003, 6}};
    auto x = rng.values<T>(tokens * C, -1, 1), pool = rng.values<T>(slots * (W - 1) * C, -1, 1);
    auto weight = rng.values<float>(C * W, -0.5, 0.5), bias = rng.values<float>(C, -0.1f, 0.1f);
    std::vector<T> out(static_cast<std::size_t>(tokens * C));
    auto dx = to_device(x), dpool = to_device(pool), dout = to_device(out);
    auto dw = to_device(weight), db = to_device(bias);
    const varlen_batch batch{cu, start};
    const prefill_slots ps{initial, final_slots, caps};
    conv1d_args<T> h{cview(x, tokens, C), cview(weight, C, W), cview(bias, C), view(pool, slots, W - 1, C),
                     view(out, tokens, C)};
    conv1d_args<T> d{dcview(dx, tokens, C), dcview(dw, C, W), dcview(db, C), dview(dpool, slots, W - 1, C),
                     dview(dout, tokens, C)};
    scratch ws(causal_conv1d_prefill_workspace_bytes(d, batch, ps));
    REQUIRE(causal_conv1d_prefill(d, batch, ps, ws.workspace(), nullptr).has_value());
    REQUIRE(device_ok());
    REQUIRE(causal_conv1d_prefill_host(h, batch, ps).has_value());
    // Windows are copies of inputs: bitwise. Outputs may differ by fused multiply-add rounding.
    CHECK(to_host(dpool) == pool);
    CHECK(relative_rms(widen(to_host(dout)), widen(out)) <= (std::is_same_v<T, float> ? 1e-6 : 1e-2));

    const std::vector<copy_pair> pairs{{0, 3}, {-1, 7}, {2, 2}};
    auto xd = rng.values<T>(3 * C, -1, 1);
    std::vector<T> yd(static_cast<std::size_t>(3 * C), from_float<T>(9.0f));
    auto dxd = to_device(xd), dyd = to_device(yd);
    conv1d_args<T> hu{cview(xd, 3, C), cview(weight, C, W), cview(bias, C), view(pool, slots, W - 1, C), view(yd, 3, C)};
    conv1d_args<T> du{dcview(dxd, 3, C), dcview(dw, C, W), dcview(db, C), dview(dpool, slots, W - 1, C),
                      dview(dyd, 3, C)};
    scratch ws2(causal_conv1d_update_workspace_bytes(du, pairs));
    REQUIRE(causal_conv1d_update(du, pairs, ws2.workspace(), nullptr).has_value());
    REQUIRE(device_ok());
    REQUIRE(causal_conv1d_update_host(hu, pairs).has_value());
    CHECK(to_host(dpool) == pool);
    CHECK(relative_rms(widen(to_host(dyd)), widen(yd)) <= (std::is_same_v<T, float> ? 1e-6 : 1e-2));
    }
  }
}
