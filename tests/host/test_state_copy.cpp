// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Batched slot / KV block copy, the transfer between two pools (host tier) and the opt-in KV gather (host
// implementations): byte-exact, and every rejected call leaves the pools untouched.
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

namespace {
using bytes = std::vector<unsigned char>;

bytes unit_of(const bytes& pool, std::size_t unit_bytes, std::int32_t i) {
  const auto begin = pool.begin() + static_cast<std::ptrdiff_t>(static_cast<std::size_t>(i) * unit_bytes);
  return bytes(begin, begin + static_cast<std::ptrdiff_t>(unit_bytes));
}

/// Three layers as a GPU tier and a host tier would hold them: unit sizes of a 16-byte multiple, a 4-byte
/// multiple and an odd size (the three device access widths); 6 GPU units and 4 host units per layer.
struct two_tiers {
  static constexpr std::int64_t gpu_units = 6, host_units = 4;
  std::vector<std::size_t> unit{256, 44, 41};
  std::vector<bytes> gpu, host;
  explicit two_tiers(reprise::testing::random_source& rng) {
    for (std::size_t u : unit) {
      gpu.push_back(random_bytes(rng, u * gpu_units));
      host.push_back(random_bytes(rng, u * host_units));
    }
  }
  std::vector<pool_pair_view> offload() {
    std::vector<pool_pair_view> v;
    for (std::size_t l = 0; l < unit.size(); ++l)
      v.push_back({{gpu[l].data(), unit[l], gpu_units}, {host[l].data(), unit[l], host_units}});
    return v;
  }
  std::vector<pool_pair_view> onboard() {
    std::vector<pool_pair_view> v;
    for (const pool_pair_view& p : offload()) v.push_back({p.dst, p.src});
    return v;
  }
};
} // namespace

TEST_CASE("transfer moves units between two pools of every layer, both directions, byte-exact") {
  reprise::testing::random_source rng(24);
  two_tiers t(rng);
  const auto gpu0 = t.gpu, host0 = t.host;
  // Offload: GPU units 5, 2, 0 into host units 0, 1, 3 (host unit 2 keeps its bytes); an index beyond the host
  // pool's 4 units is fine on the GPU side.
  const std::vector<copy_pair> out{{5, 0}, {2, 1}, {0, 3}};
  REQUIRE(transfer_units_host(t.offload(), out).has_value());
  for (std::size_t l = 0; l < t.unit.size(); ++l) {
    const std::size_t u = t.unit[l];
    for (const copy_pair& p : out) CHECK(unit_of(t.host[l], u, p.dst) == unit_of(gpu0[l], u, p.src));
    CHECK(unit_of(t.host[l], u, 2) == unit_of(host0[l], u, 2));
    CHECK(t.gpu[l] == gpu0[l]);
  }
  // Onboard: host units back into GPU units, `{3, 3}` included (distinct pools: same index, different memory).
  const auto host1 = t.host;
  const std::vector<copy_pair> in{{0, 4}, {3, 3}, {1, 0}};
  REQUIRE(transfer_units_host(t.onboard(), in).has_value());
  for (std::size_t l = 0; l < t.unit.size(); ++l) {
    const std::size_t u = t.unit[l];
    CHECK(unit_of(t.gpu[l], u, 4) == unit_of(gpu0[l], u, 5));
    CHECK(unit_of(t.gpu[l], u, 3) == unit_of(gpu0[l], u, 0));
    CHECK(unit_of(t.gpu[l], u, 0) == unit_of(gpu0[l], u, 2));
    for (std::int32_t i : {1, 2, 5}) CHECK(unit_of(t.gpu[l], u, i) == unit_of(gpu0[l], u, i));
    CHECK(t.host[l] == host1[l]);
  }
  // No pairs, or no layers and no pairs: nothing to do.
  CHECK(transfer_units_host(t.offload(), {}).has_value());
  CHECK(transfer_units_host({}, {}).has_value());
}

TEST_CASE("transfer errors write nothing") {
  reprise::testing::random_source rng(25);
  two_tiers t(rng);
  const auto gpu0 = t.gpu, host0 = t.host;
  const std::vector<copy_pair> ok{{5, 0}, {1, 2}};
  auto reject = [&](const std::vector<pool_pair_view>& layers, const std::vector<copy_pair>& pairs, errc expected) {
    CHECK(validate_transfer(layers, pairs) == expected);
    CHECK(transfer_units_host(layers, pairs).error() == expected);
    CHECK(t.gpu == gpu0);
    CHECK(t.host == host0);
  };
  SUBCASE("indices outside their own side") {
    reject(t.offload(), {{5, 0}, {1, 4}}, errc::out_of_range);  // host pool has 4 units
    reject(t.onboard(), {{0, 5}, {4, 1}}, errc::out_of_range);  // reading host unit 4
    reject(t.offload(), {{6, 0}}, errc::out_of_range);
    reject(t.offload(), {{-1, 0}}, errc::out_of_range);
    reject(t.offload(), {{0, -1}}, errc::out_of_range);
  }
  SUBCASE("a destination named twice") { reject(t.offload(), {{5, 0}, {1, 0}}, errc::overlapping_pairs); }
  SUBCASE("malformed pools") {
    auto layers = t.offload();
    layers[1].dst.base = nullptr;
    reject(layers, ok, errc::invalid_argument);
    layers = t.offload();
    layers[2].src.unit_bytes = 0;
    reject(layers, ok, errc::invalid_argument);
    layers = t.offload();
    layers[0].dst.units = 0;
    reject(layers, ok, errc::invalid_argument);
    layers = t.offload();
    layers[1].dst.unit_bytes = 40; // the host view disagrees with the GPU unit size
    reject(layers, ok, errc::size_mismatch);
    reject({}, ok, errc::invalid_argument);
  }
  SUBCASE("a destination pool sharing memory with another pool") {
    // Destination inside its own layer's source.
    auto layers = t.offload();
    layers[0].dst = {t.gpu[0].data() + 256, 256, 4};
    reject(layers, ok, errc::invalid_argument);
    // Source inside its own layer's destination, off the unit grid.
    layers = t.onboard();
    layers[1].src = {t.gpu[1].data() + 3, 44, 2};
    reject(layers, ok, errc::invalid_argument);
    // Two layers writing the same bytes.
    layers = t.offload();
    layers[2].dst = {t.host[0].data() + 100, 41, 3};
    reject(layers, ok, errc::invalid_argument);
    // One layer writing what another reads.
    layers = t.offload();
    layers[2].dst = {t.gpu[0].data(), 41, 4};
    reject(layers, ok, errc::invalid_argument);
  }
}

TEST_CASE("transfer pools: read-only sharing is allowed, one pool on both sides follows the copy_units rules") {
  reprise::testing::random_source rng(26);
  two_tiers t(rng);
  SUBCASE("two layers reading one source pool") {
    auto layers = t.offload();
    layers[1].src = {t.gpu[0].data(), 44, 5}; // 220 of layer 0's 1536 bytes, another view
    const auto src = t.gpu[0];
    REQUIRE(transfer_units_host(layers, std::vector<copy_pair>{{4, 1}}).has_value());
    CHECK(unit_of(t.host[1], 44, 1) == unit_of(src, 44, 4));
  }
  SUBCASE("source and destination the same pool") {
    auto layers = t.offload();
    layers[0].dst = layers[0].src; // layer 0 copies within its GPU pool
    CHECK(validate_transfer(layers, std::vector<copy_pair>{{4, 3}}) == errc{});
    CHECK(validate_transfer(layers, std::vector<copy_pair>{{3, 3}}) == errc::overlapping_pairs);
    CHECK(validate_transfer(layers, std::vector<copy_pair>{{0, 1}, {1, 2}}) == errc::overlapping_pairs);
    // Indices still meet each side's smallest pool: the host pools of layers 1 and 2 have 4 units.
    CHECK(validate_transfer(layers, std::vector<copy_pair>{{5, 4}}) == errc::out_of_range);
    // With one layer, the transfer is exactly copy_units.
    auto a = t.gpu[0];
    auto b = a;
    const std::vector<copy_pair> pairs{{0, 3}, {1, 4}, {0, 5}};
    const pool_pair_view same{{a.data(), 256, 6}, {a.data(), 256, 6}};
    REQUIRE(transfer_units_host(std::span(&same, 1), pairs).has_value());
    const pool_view pb{b.data(), 256, 6};
    REQUIRE(copy_units_host(std::span(&pb, 1), pairs).has_value());
    CHECK(a == b);
  }
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
