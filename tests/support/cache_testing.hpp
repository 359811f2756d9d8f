// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the cache tests: small models, a colliding hasher, prompts, and an observable-state
// snapshot that proves a failed call changed nothing.

#include <reprise/reprise.hpp>

#include <cstdint>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

namespace reprise::testing {

/// Attention only, B = 16.
using attn_model = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 16}>, 2>>;
/// Hybrid: B = 16, Mamba2 Q = 64 -> alignment 64.
using small_hybrid = hybrid_model<
    layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 16}>, 1>,
    layers<mamba2_state<mamba2_shape{.heads = 2, .head_dim = 4, .state_dim = 4, .groups = 1, .conv_width = 4,
                                     .chunk = 64}>,
           2>>;
static_assert(small_hybrid::alignment == 64);

/// Every key is the same: every block lands in one bucket, and only verification tells blocks apart.
struct constant_hasher {
  explicit constant_hasher(std::uint64_t) noexcept {}
  block_key root(const extra_keys&) const noexcept { return {42, 42}; }
  block_key chain(const block_key&, std::span<const token_id>) const noexcept { return {42, 42}; }
};
static_assert(hasher<constant_hasher>);

/// A `content_key_source` for tests that need no OpenSSL: two XXH3-128 chains side by side (256 bits). A
/// snapshot's key chains two tokens (its position and a marker) onto its block's: no block chains fewer
/// than 8.
class test_content_keyer {
public:
  explicit test_content_keyer(std::uint64_t fleet_seed = 11) : a_(fleet_seed), b_(fleet_seed ^ 0x5bd1e995u) {}
  content_key root(const extra_keys& k) const noexcept { return pack(a_.root(k), b_.root(k)); }
  content_key chain(const content_key& p, std::span<const token_id> t, const media_digest& m) const noexcept {
    return pack(chain_block(a_, half(p, 0), t, m.empty() ? nullptr : &m),
                chain_block(b_, half(p, 16), t, m.empty() ? nullptr : &m));
  }
  content_key snapshot(const content_key& block, std::uint32_t position) const noexcept {
    const token_id t[2] = {static_cast<token_id>(position), -7};
    return chain(block, t, {});
  }
  content_key turn_end(const content_key& block, std::uint32_t boundary) const noexcept {
    const token_id t[2] = {static_cast<token_id>(boundary), -11};
    return chain(block, t, {});
  }

private:
  static content_key pack(const block_key& x, const block_key& y) noexcept {
    content_key k;
    std::memcpy(k.bytes.data(), &x, 16);
    std::memcpy(k.bytes.data() + 16, &y, 16);
    return k;
  }
  static block_key half(const content_key& k, std::size_t at) noexcept {
    block_key b;
    std::memcpy(&b, k.bytes.data() + at, 16);
    return b;
  }
  xxh3_hasher a_, b_;
};
static_assert(content_key_source<test_content_keyer>);

/// Tokens first, first + 1, ... (count of them).
inline std::vector<token_id> iota_tokens(std::size_t count, token_id first = 0) {
  std::vector<token_id> v(count);
  std::iota(v.begin(), v.end(), first);
  return v;
}

inline std::vector<token_id> concat(std::vector<token_id> a, const std::vector<token_id>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

/// Everything a caller can observe about a cache, to compare before and after a failing call.
template <class Cache>
struct observable {
  cache_metrics metrics;
  epoch_t epoch;
  std::vector<std::vector<block_id>> tables;

  observable(const Cache& c, std::span<const seq_id> live) : metrics(c.metrics()), epoch(c.current_epoch()) {
    for (seq_id s : live) {
      auto t = c.block_table(s);
      tables.emplace_back(t.begin(), t.end());
    }
  }
  bool operator==(const observable&) const = default;
};

} // namespace reprise::testing
