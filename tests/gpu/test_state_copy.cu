// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device slot / block copy and KV gather vs the host implementations (byte-exact).
#include <reprise/ops/state_copy.hpp>

#include "gpu/harness.cuh"
#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

using namespace reprise;
using namespace reprise::ops;
using namespace reprise::testing;

namespace {
std::vector<unsigned char> random_bytes(random_source& rng, std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng.integer(0, 255));
  return v;
}
} // namespace

TEST_CASE("device unit copy equals the host copy for 16-byte, 4-byte and byte pools") {
  random_source rng(31);
  // A 200 KiB unit spans several blocks; 44 and 42 byte units take the narrow paths.
  const std::vector<std::size_t> units{200 * 1024, 44, 42};
  const std::int64_t n = 7;
  std::vector<std::vector<unsigned char>> host;
  std::vector<thrust::device_vector<unsigned char>> dev;
  for (std::size_t u : units) {
    host.push_back(random_bytes(rng, u * n));
    dev.push_back(to_device(host.back()));
  }
  std::vector<pool_view> hpools, dpools;
  for (std::size_t i = 0; i < units.size(); ++i) {
    hpools.push_back({host[i].data(), units[i], n});
    dpools.push_back({thrust::raw_pointer_cast(dev[i].data()), units[i], n});
  }
  const std::vector<copy_pair> pairs{{0, 4}, {1, 5}, {0, 6}, {2, 3}};
  scratch ws(copy_units_workspace_bytes(dpools.size(), pairs.size()));
  REQUIRE(copy_units(dpools, pairs, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  REQUIRE(copy_units_host(hpools, pairs).has_value());
  for (std::size_t i = 0; i < units.size(); ++i) CHECK(to_host(dev[i]) == host[i]);
  // Rejected lists launch nothing.
  const std::vector<copy_pair> bad{{0, 4}, {4, 5}};
  CHECK(copy_units(dpools, bad, ws.workspace(), nullptr).error() == errc::overlapping_pairs);
  CHECK(copy_units(dpools, pairs, {}, nullptr).error() == errc::size_mismatch);
}

TEST_CASE("device kv gather equals the host gather") {
  random_source rng(32);
  const kv_pool_layout l{.blocks = 9, .block_size = 16, .kv_heads = 4, .head_dim = 64, .element_bytes = 2};
  const auto pool = random_bytes(rng, static_cast<std::size_t>(l.blocks * l.block_size * l.kv_heads) * l.row_bytes());
  const std::vector<std::int32_t> table{8, 1, 3, 0, 2, 7}, lens{40, 17};
  const std::int64_t out_tokens = 48;
  const std::size_t out_bytes = static_cast<std::size_t>(2 * l.kv_heads * out_tokens) * l.row_bytes();
  std::vector<unsigned char> out(out_bytes, 0x5A);
  auto dpool = to_device(pool);
  thrust::device_vector<unsigned char> dout(out_bytes, 0x5A);
  kv_gather_args h{pool.data(), l, cview(table, 2, 3), lens, out.data(), out_tokens};
  kv_gather_args d = h;
  d.pool = thrust::raw_pointer_cast(dpool.data());
  d.out = thrust::raw_pointer_cast(dout.data());
  scratch ws(gather_kv_workspace_bytes(2, 3));
  REQUIRE(gather_kv(d, ws.workspace(), nullptr).has_value());
  REQUIRE(device_ok());
  REQUIRE(gather_kv_host(h).has_value());
  CHECK(to_host(dout) == out);
}
