// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Batched slot / KV block copy and the opt-in KV gather (host implementations): byte-exact, and every
// rejected pair list leaves the pools untouched.
#include <reprise/ops/state_copy.hpp>

#include "support/ops_testing.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <vector>

using namespace reprise;
using namespace reprise::ops;

namespace {
std::vector<unsigned char> random_bytes(reprise::testing::random_source& rng, std::size_t n) {
  std::vector<unsigned char> v(n);
  for (auto& b : v) b = static_cast<unsigned char>(rng.integer(0, 255));
  return v;
}
} // namespace

TEST_CASE("slot copy moves whole units of every pool, byte-exact") {
  reprise::testing::random_source rng(21);
  // Two layers' SSM pools and one conv pool with an odd unit size (the narrow-access path on the device).
  auto ssm0 = random_bytes(rng, 6 * 256), ssm1 = random_bytes(rng, 6 * 256), conv = random_bytes(rng, 6 * 42);
  const auto s0 = ssm0, s1 = ssm1, c0 = conv;
  const std::vector<pool_view> pools{{ssm0.data(), 256, 6}, {ssm1.data(), 256, 6}, {conv.data(), 42, 6}};
  const std::vector<copy_pair> pairs{{0, 3}, {1, 4}, {0, 5}};
  REQUIRE(copy_units_host(pools, pairs).has_value());
  const std::vector<std::pair<std::vector<unsigned char>*, const std::vector<unsigned char>*>> all{
      {&ssm0, &s0}, {&ssm1, &s1}, {&conv, &c0}};
  for (std::size_t p = 0; p < all.size(); ++p) {
    const std::size_t u = pools[p].unit_bytes;
    auto unit = [&](const std::vector<unsigned char>& v, int i) {
      return std::vector<unsigned char>(v.begin() + i * u, v.begin() + (i + 1) * u);
    };
    CHECK(unit(*all[p].first, 3) == unit(*all[p].second, 0));
    CHECK(unit(*all[p].first, 4) == unit(*all[p].second, 1));
    CHECK(unit(*all[p].first, 5) == unit(*all[p].second, 0));
    for (int i : {0, 1, 2}) CHECK(unit(*all[p].first, i) == unit(*all[p].second, i));
  }
}

TEST_CASE("copy pair lists that overlap or leave the pool are rejected, pools untouched") {
  reprise::testing::random_source rng(22);
  auto pool = random_bytes(rng, 4 * 64);
  const auto before = pool;
  const std::vector<pool_view> pools{{pool.data(), 64, 4}};
  auto reject = [&](std::vector<copy_pair> pairs, errc expected) {
    CHECK(copy_units_host(pools, pairs).error() == expected);
    CHECK(pool == before);
  };
  reject({{0, 1}, {2, 1}}, errc::overlapping_pairs); // one destination twice
  reject({{0, 1}, {1, 2}}, errc::overlapping_pairs); // a destination another pair reads
  reject({{2, 2}}, errc::overlapping_pairs);         // self copy
  reject({{0, 4}}, errc::out_of_range);
  reject({{-1, 2}}, errc::out_of_range);
  const std::vector<pool_view> null_pool{{nullptr, 64, 4}};
  CHECK(copy_units_host(null_pool, std::vector<copy_pair>{{0, 1}}).error() == errc::invalid_argument);
}

TEST_CASE("kv gather materializes [batch, heads, tokens, dim] from a block table") {
  reprise::testing::random_source rng(23);
  const kv_pool_layout l{.blocks = 5, .block_size = 4, .kv_heads = 2, .head_dim = 3, .element_bytes = 2};
  auto pool = random_bytes(rng, static_cast<std::size_t>(l.blocks * l.block_size * l.kv_heads) * l.row_bytes());
  const std::vector<std::int32_t> table{3, 0, 1, /* seq 1 */ 4, 2, -7}, lens{9, 6};
  const std::int64_t out_tokens = 10;
  std::vector<unsigned char> out(static_cast<std::size_t>(2 * l.kv_heads * out_tokens) * l.row_bytes(), 0xAB);
  kv_gather_args a{pool.data(), l, reprise::testing::cview(table, 2, 3), lens, out.data(), out_tokens};
  REQUIRE(gather_kv_host(a).has_value());
  const std::size_t row = l.row_bytes();
  for (std::int64_t b = 0; b < 2; ++b)
    for (std::int64_t h = 0; h < l.kv_heads; ++h)
      for (std::int64_t t = 0; t < out_tokens; ++t) {
        const unsigned char* got = out.data() + ((b * l.kv_heads + h) * out_tokens + t) * row;
        if (t >= lens[b]) {
          CHECK(std::vector<unsigned char>(got, got + row) == std::vector<unsigned char>(row, 0));
          continue;
        }
        const std::int64_t blk = table[b * 3 + t / l.block_size];
        const unsigned char* src = pool.data() + ((blk * l.block_size + t % l.block_size) * l.kv_heads + h) * row;
        CHECK(std::vector<unsigned char>(got, got + row) == std::vector<unsigned char>(src, src + row));
      }
  SUBCASE("a block id outside the pool is rejected") {
    const std::vector<std::int32_t> bad{3, 0, 1, 4, 5, 0};
    const auto out_before = out;
    kv_gather_args b = a;
    b.block_table = reprise::testing::cview(bad, 2, 3);
    CHECK(gather_kv_host(b).error() == errc::out_of_range);
    CHECK(out == out_before);
  }
  SUBCASE("a sequence longer than its table row is rejected") {
    const std::vector<std::int32_t> long_lens{13, 6};
    kv_gather_args b = a;
    b.seq_lens = long_lens;
    CHECK(gather_kv_host(b).error() == errc::size_mismatch);
  }
}
