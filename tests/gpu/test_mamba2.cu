// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device Mamba2 SSD prefill and selective state update vs the host implementation, for every instantiated
// configuration; bitwise resume between two device runs; the update over bf16 / fp16 pools; dispatch of
// unsupported sizes.
#include <reprise/ops/mamba2.hpp>

#include "gpu/harness.cuh"
#include "support/mamba2_case.hpp"

#include <doctest/doctest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {

/// Device mirror of a mamba2_case.
template <class T>
struct device_case {
  thrust::device_vector<T> x, dt, B, C, z, y;
  thrust::device_vector<float> A, D, dt_bias, pool;
  explicit device_case(const mamba2_case<T>& k)
      : x(to_device(k.x)), dt(to_device(k.dt)), B(to_device(k.B)), C(to_device(k.C)), z(to_device(k.z)),
        y(to_device(k.y)), A(to_device(k.A)), D(to_device(k.D)), dt_bias(to_device(k.dt_bias)), pool(to_device(k.pool)) {}
  mamba2_args<T> args(const mamba2_case<T>& k, std::int64_t chunk) {
    mamba2_args<T> a{dcview(x, k.rows, k.H, k.P), dcview(dt, k.rows, k.H), dcview(A, k.H), dcview(B, k.rows, k.G, k.N),
                     dcview(C, k.rows, k.G, k.N), dcview(D, k.H), dcview(dt_bias, k.H), dcview(z, k.rows, k.H, k.P),
                     dview(pool, k.slots, k.H, k.P, k.N), dview(y, k.rows, k.H, k.P)};
    a.chunk = chunk;
    return a;
  }
};

template <class T>
void check_prefill(const mamba2_kernel_config& cfg) {
  random_source rng(71 + static_cast<std::uint64_t>(cfg.chunk));
  const std::int64_t Q = cfg.chunk, H = 8, G = 2;
  const std::int64_t L0 = 2 * Q + 37, L1 = Q + 5;
  const std::int64_t rows = L0 + L1;
  mamba2_case<T> k(rng, rows, H, cfg.head_dim, G, cfg.state_dim, 6);
  const std::vector<std::int32_t> cu{0, static_cast<std::int32_t>(L0), static_cast<std::int32_t>(rows)};
  const std::vector<std::int64_t> start{0, Q + 11}; // sequence 1 starts off the grid: a short first chunk
  const std::vector<std::int32_t> initial{-1, 5}, final_slots{0, 1};
  const std::vector<capture_point> caps{{0, Q, 2}, {0, 2 * Q, 3}, {1, 2 * Q, 4}};
  const varlen_batch batch{cu, start};
  const prefill_slots ps{initial, final_slots, caps};
  device_case<T> d(k);
  scratch ws(mamba2_ssd_prefill_workspace_bytes(d.args(k, Q), batch, ps));
  REQUIRE(mamba2_ssd_prefill(d.args(k, Q), batch, ps, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  mamba2_case<T> h = k;
  REQUIRE(mamba2_ssd_prefill_host(h.args(Q), batch, ps).has_value());
  const auto dy = to_host(d.y);
  const auto dpool = to_host(d.pool);
  CHECK(relative_rms(widen(dy), widen(h.y)) <= (std::is_same_v<T, float> ? 1e-5 : 1e-2));
  for (int slot : {0, 1, 2, 3, 4}) {
    CAPTURE(slot);
    const std::size_t n = k.state_elems();
    const std::vector<double> got(dpool.begin() + slot * n, dpool.begin() + (slot + 1) * n);
    CHECK(relative_rms(got, std::vector<double>(h.slot(slot), h.slot(slot) + n)) <= 1e-5);
  }

  // Device resume from the device capture at 2Q: bitwise equal to the device's uninterrupted run.
  mamba2_case<T> rest = k.slice(2 * Q, L0 - 2 * Q);
  rest.pool.assign(dpool.begin(), dpool.end());
  device_case<T> dr(rest);
  const std::vector<std::int32_t> cu_r{0, static_cast<std::int32_t>(L0 - 2 * Q)}, from{3}, to{5};
  const std::vector<std::int64_t> start_r{2 * Q};
  const varlen_batch br{cu_r, start_r};
  const prefill_slots pr{from, to};
  scratch ws2(mamba2_ssd_prefill_workspace_bytes(dr.args(rest, Q), br, pr));
  REQUIRE(mamba2_ssd_prefill(dr.args(rest, Q), br, pr, ws2.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  const auto ry = to_host(dr.y);
  const auto rpool = to_host(dr.pool);
  CHECK(bitwise_equal(ry.data(), dy.data() + 2 * Q * H * k.P, ry.size()));
  CHECK(bitwise_equal(rpool.data() + 5 * k.state_elems(), dpool.data(), k.state_elems()));
}

template <class T>
void check_update(const mamba2_kernel_config& cfg) {
  random_source rng(81);
  mamba2_case<T> k(rng, 4, 8, cfg.head_dim, 2, cfg.state_dim, 6);
  const std::vector<copy_pair> pairs{{0, 3}, {-1, 4}, {1, 1}, {2, 5}};
  device_case<T> d(k);
  scratch ws(mamba2_state_update_workspace_bytes(d.args(k, 0), pairs));
  REQUIRE(mamba2_state_update(d.args(k, 0), pairs, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  REQUIRE(mamba2_state_update_host(k.args(0), pairs).has_value());
  const auto dy = to_host(d.y);
  // Padding row 1 keeps its poison; the others match the host.
  CHECK(relative_rms(widen(dy), widen(k.y)) <= (std::is_same_v<T, float> ? 1e-5 : 1e-2));
  CHECK(relative_rms(widen(to_host(d.pool)), widen(k.pool)) <= 1e-5);
}

/// A bf16 / fp16 pool (decode continuation): the device update reads the state as fp32 and rounds it once on
/// store, so against the same kernel over an fp32 pool holding the widened states, y is equal bit for bit and
/// every stored state is that pool's state rounded (to nearest, ties to even); the capture-safe launch equals
/// the direct one; the host's lossy update agrees within one rounding of the pool's type.
template <class T, class State>
void check_lossy_update(const mamba2_kernel_config& cfg) {
  random_source rng(83);
  mamba2_case<T> k(rng, 4, 8, cfg.head_dim, 2, cfg.state_dim, 6);
  std::vector<State> lossy(k.pool.size());
  for (std::size_t i = 0; i < k.pool.size(); ++i) {
    lossy[i] = from_float<State>(k.pool[i]);
    k.pool[i] = to_float(lossy[i]); // the fp32 pool holds exactly the lossy values
  }
  const std::vector<copy_pair> pairs{{0, 3}, {-1, 4}, {1, 1}, {2, 5}}; // fork, padding, in place, fork
  device_case<T> wide(k), narrow(k), planned(k);
  thrust::device_vector<State> pool = to_device(lossy), planned_pool = to_device(lossy);
  auto lossy_args = [&](device_case<T>& d, thrust::device_vector<State>& p) {
    const mamba2_args<T> a = d.args(k, 0);
    return mamba2_args<T, State>{a.x, a.dt, a.A, a.B, a.C, a.D, a.dt_bias, a.z, dview(p, k.slots, k.H, k.P, k.N), a.y};
  };
  scratch ws(mamba2_state_update_workspace_bytes(wide.args(k, 0), pairs));
  REQUIRE(mamba2_state_update(wide.args(k, 0), pairs, ws.workspace(), nullptr).has_value());
  const auto a = lossy_args(narrow, pool);
  REQUIRE(mamba2_state_update_workspace_bytes(a, pairs) > 0); // an instance for the pool type, operands valid
  scratch ws2(mamba2_state_update_workspace_bytes(a, pairs));
  REQUIRE(mamba2_state_update(a, pairs, ws2.workspace(), nullptr).has_value());
  thrust::device_vector<copy_pair> dpairs = to_device(pairs);
  REQUIRE(mamba2_state_update_planned(lossy_args(planned, planned_pool), thrust::raw_pointer_cast(dpairs.data()),
                                      nullptr).has_value());
  REQUIRE(device_ok());

  const auto y32 = to_host(wide.y), y = to_host(narrow.y), yp = to_host(planned.y);
  CHECK(bitwise_equal(y.data(), y32.data(), y32.size()));
  CHECK(bitwise_equal(yp.data(), y.data(), y.size()));
  const auto p32 = to_host(wide.pool);
  const auto got = to_host(pool), got_planned = to_host(planned_pool);
  const auto r = reprise::testing::count_rounding(got, got_planned, p32);
  CHECK(r.mismatched == 0);
  CHECK(r.rounded > 0); // the advanced states needed rounding
  CHECK(r.differ == 0);

  // The host's lossy update: the same math in another operation order, each state rounded once.
  std::vector<State> host_pool = lossy;
  mamba2_case<T> h = k;
  const auto ha = h.args(0);
  REQUIRE(mamba2_state_update_host(mamba2_args<T, State>{ha.x, ha.dt, ha.A, ha.B, ha.C, ha.D, ha.dt_bias, ha.z,
                                                         make_tensor(host_pool.data(), k.slots, k.H, k.P, k.N), ha.y},
                                   pairs).has_value());
  std::vector<double> dev_states(got.size()), host_states(got.size());
  for (std::size_t i = 0; i < got.size(); ++i) dev_states[i] = to_float(got[i]), host_states[i] = to_float(host_pool[i]);
  CHECK(relative_rms(dev_states, host_states) <= std::ldexp(1.0, std::is_same_v<State, bfloat16> ? -8 : -11));
}

} // namespace

TEST_CASE("device Mamba2 decode update over bf16 / fp16 pools rounds the fp32 update once") {
  for (const mamba2_kernel_config& cfg : mamba2_instantiated_configs()) {
    CAPTURE(cfg.head_dim);
    CAPTURE(cfg.state_dim);
    CAPTURE(std::string(to_string(cfg.input)));
    if (cfg.input == dtype::f32) {
      check_lossy_update<float, bfloat16>(cfg);
      check_lossy_update<float, float16>(cfg);
    } else {
      check_lossy_update<bfloat16, bfloat16>(cfg);
      check_lossy_update<bfloat16, float16>(cfg);
    }
  }
}

TEST_CASE("device Mamba2 kernels match the host for every instantiated configuration") {
  REQUIRE(!mamba2_instantiated_configs().empty());
  for (const mamba2_kernel_config& cfg : mamba2_instantiated_configs()) {
    CAPTURE(cfg.head_dim);
    CAPTURE(cfg.state_dim);
    CAPTURE(cfg.chunk);
    CAPTURE(std::string(to_string(cfg.input)));
    if (cfg.input == dtype::f32) {
      check_prefill<float>(cfg);
      check_update<float>(cfg);
    } else {
      check_prefill<bfloat16>(cfg);
      check_update<bfloat16>(cfg);
    }
  }
}

TEST_CASE("sizes without an instantiation are unsupported_config") {
  CHECK(mamba2_supports({.head_dim = 24, .state_dim = 16, .chunk = 64, .input = dtype::f32}) == errc::unsupported_config);
  CHECK(mamba2_supports({.head_dim = 16, .state_dim = 16, .chunk = 64, .input = dtype::f16}) == errc::unsupported_config);
  CHECK(mamba2_supports({.head_dim = 16, .state_dim = 16, .chunk = 64, .input = dtype::f32}) == errc{});
  random_source rng(91);
  mamba2_case<float> k(rng, 8, 2, 24, 1, 16, 2);
  device_case<float> d(k);
  const std::vector<std::int32_t> cu{0, 8}, none{-1}, live{0};
  const std::vector<std::int64_t> start{0};
  scratch ws(1 << 20);
  CHECK(mamba2_ssd_prefill(d.args(k, 64), {cu, start}, {none, live}, ws.workspace(), nullptr).error() ==
        errc::unsupported_config);
}
