// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Which idle snapshot goes when a capture needs a slot and none is free: the rule (`eviction_rule`), the
/// cost-aware choice over a window of candidates, and the prefill cost model derived from a model's layers.
///
/// Why a window and not a global priority queue. A snapshot's value is the prefill it saves, which changes
/// when a neighbour on its chain is captured or evicted (the marginal saving below), so a priority fixed at
/// publication goes stale, and a heap keyed on it would need updates on every neighbour's change. GreedyDual
/// style clocks avoid the updates but keep a snapshot that was valuable once long after its chain moved on.
/// The window re-values W candidates at the moment of eviction, from the current tree: it is O(W * walk)
/// per eviction and nothing on any other call, and it never evicts a snapshot younger than the W oldest,
/// so recency still bounds how long a high-value snapshot stays unused (LRU is W = 1).
///
/// The value of candidate i is its marginal saving: cost(p) - cost(p'), where p' is the deepest other
/// snapshot at or before p on the same chain (a prompt through p would restore at p' instead), found by
/// walking at most `fallback_walk_blocks` parent blocks; with none within the walk p' is taken as 0 (its
/// whole prefix: the deep snapshots whose older neighbours went are the ones a short walk misses, and a
/// lower bound would undervalue exactly them). The score multiplies it by 1 + the restores since its
/// publication (a shared prefix's or a fanned-out step's snapshot is restored again) and divides it by
/// 1 + the steps since its last use: FLOPs saved per step the slot is held, if it is reused about as often
/// as it has been. The victim is the candidate with the lowest score (the oldest of equal ones).
/// Superseded snapshots (a conversation moved past them) are worth nothing and go first under every rule;
/// a snapshot restored twice is a branch point, which no one conversation's next turn supersedes.

#include <reprise/ids.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/state/model_config.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <variant>

namespace reprise {

/// A prefill cost model estimated from `m`'s layer shapes (`policy::prefill_cost`). The hidden width d is
/// estimated per layer kind from what public hybrid checkpoints use: 4 x the KV width (grouped-query
/// attention with 4 query heads per KV head), half a Mamba2 layer's inner width (expand = 2), half a
/// gated-delta layer's value width. Linear term: 2 FLOPs per weight of each stateful layer's projections
/// (attention: q, k, v, o; Mamba2: in_proj, out_proj; gated delta: q, k, v, gates, out) plus the recurrent
/// scans' state updates. MLP and mixture-of-experts layers carry no state and are not in a `model_config`,
/// so the linear term is a lower bound; an engine that knows its active parameters sets
/// `linear = 2 * active parameters` instead. Quadratic term: 2 * d FLOPs per token pair and attention layer.
/// Complexity: linear in the number of layer groups.
inline policy::prefill_cost prefill_cost_of(const model_config& m) noexcept {
  double d = 0;
  for (const layer_spec& g : m.groups()) {
    std::visit(
        [&](const auto& s) {
          using shape = std::decay_t<decltype(s)>;
          if constexpr (std::is_same_v<shape, kv_shape>) d = std::max(d, 4.0 * s.kv_heads * s.head_dim);
          else if constexpr (std::is_same_v<shape, mamba2_shape>) d = std::max(d, 0.5 * s.heads * s.head_dim);
          else d = std::max(d, 0.5 * s.value_heads * s.value_dim);
        },
        g.shape);
  }
  policy::prefill_cost c;
  for (const layer_spec& g : m.groups()) {
    std::visit(
        [&](const auto& s) {
          using shape = std::decay_t<decltype(s)>;
          double per_token = 0;
          if constexpr (std::is_same_v<shape, kv_shape>) {
            const double kv = static_cast<double>(s.kv_heads) * s.head_dim;
            per_token = 2 * (2 * d * d + 2 * d * kv);
            c.quadratic += 2 * d * g.count;
          } else if constexpr (std::is_same_v<shape, mamba2_shape>) {
            const double inner = static_cast<double>(s.heads) * s.head_dim;
            const double in = 2 * inner + 2.0 * s.groups * s.state_dim + s.heads;
            per_token = 2 * (d * in + inner * d) + 6 * inner * s.state_dim;
          } else {
            const double qk = 2.0 * s.key_heads * s.key_dim, v = static_cast<double>(s.value_heads) * s.value_dim;
            per_token = 2 * (d * (qk + 2 * v + 2.0 * s.value_heads) + v * d) + 4 * v * s.key_dim;
          }
          c.linear += per_token * g.count;
        },
        g.shape);
  }
  return c;
}

} // namespace reprise

namespace reprise::detail {

/// Parent blocks walked to find a candidate's fallback snapshot: bounds an eviction at W * 64 node reads.
inline constexpr std::uint32_t fallback_walk_blocks = 64;

/// The eviction rule a snapshot ledger applies, resolved from the policy and `cache_options`.
struct eviction_rule {
  policy::snapshot_eviction kind = policy::snapshot_eviction::lru;
  std::uint32_t window = 1;
  policy::prefill_cost cost{};
  policy::snapshot_chooser chooser{};

  /// Plain LRU: the oldest idle snapshot, no candidates built.
  bool plain_lru() const noexcept { return kind == policy::snapshot_eviction::lru && !chooser; }

  /// The rule of a cache with policy eviction option `Eviction` and options `kind` / `window` / `cost` /
  /// `chooser` (cache_options). A window of 0 takes the policy's (8 when the policy's rule is LRU); larger
  /// than `policy::max_eviction_window` is clamped.
  template <policy::eviction_policy Eviction>
  static eviction_rule resolve(policy::snapshot_eviction kind, std::uint32_t window, const policy::prefill_cost& cost,
                               const policy::snapshot_chooser& chooser) noexcept {
    eviction_rule r;
    r.kind = kind == policy::snapshot_eviction::policy_default ? Eviction::kind : kind;
    const std::uint32_t policy_window = Eviction::kind == policy::snapshot_eviction::lru ? 8 : Eviction::window;
    r.window = std::min(window == 0 ? policy_window : window, policy::max_eviction_window);
    r.cost = cost;
    r.chooser = chooser;
    if (r.plain_lru()) r.window = 1;
    return r;
  }
};

/// The cost-aware choice (this file's header has the rule). Precondition: `c` is not empty, oldest first.
/// Complexity: O(c.size()).
inline std::size_t cost_aware_choice(std::span<const policy::snapshot_candidate> c, epoch_t now) noexcept {
  std::size_t best = 0;
  double best_score = 0;
  for (std::size_t i = 0; i < c.size(); ++i) {
    if (c[i].superseded) return i;
    const epoch_t age = now > c[i].last_use ? now - c[i].last_use : 0;
    const double score = c[i].saved_flops * (1.0 + c[i].restores) / (1.0 + static_cast<double>(age));
    if (i == 0 || score < best_score) {
      best = i;
      best_score = score;
    }
  }
  return best;
}

} // namespace reprise::detail
