// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers shared by the cache tests: small models, a colliding hasher, prompts, and an observable-state
// snapshot that proves a failed call changed nothing.

#include <reprise/reprise.hpp>

#include <cstdint>
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
