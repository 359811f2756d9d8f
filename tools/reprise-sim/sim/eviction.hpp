// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The snapshot eviction rules a replay compares (`--snapshot-eviction`): the cache's own two (LRU, cost-
/// aware) and two the simulator supplies through `cache_options::snapshot_chooser`, which the cache knows
/// nothing of:
///   - marconi: Marconi's utility, normalized recency + alpha * normalized FLOP efficiency (FLOPs the state's
///     whole prefix costs, per byte), the lowest evicted; alpha = `marconi_alpha` (default 1). It sees the
///     64 oldest idle snapshots the cache offers, not every one.
///   - oracle: an offline bound that reads the trace's future: each candidate's next use is the first later
///     request whose prompt starts with the snapshot's prefix and goes past it (prefixes compared by a hash
///     at the last multiple of 16 tokens at or below the position, and the tenant); the victim is the one
///     with the fewest FLOPs saved per request until that use (never used again: nothing), Belady's rule
///     weighted by what a hit saves.

#include "sim/trace.hpp"

#include <reprise/policy/policies.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

namespace reprise::sim {

enum class eviction_kind : std::uint8_t { lru, cost_aware, marconi, oracle };

inline constexpr eviction_kind all_evictions[] = {eviction_kind::lru, eviction_kind::cost_aware,
                                                  eviction_kind::marconi, eviction_kind::oracle};

constexpr std::string_view name_of(eviction_kind k) noexcept {
  switch (k) {
  case eviction_kind::lru: return "lru";
  case eviction_kind::cost_aware: return "cost-aware";
  case eviction_kind::marconi: return "marconi";
  case eviction_kind::oracle: return "oracle";
  }
  return "lru";
}

inline std::optional<eviction_kind> parse_eviction(std::string_view s) noexcept {
  for (eviction_kind k : all_evictions)
    if (name_of(k) == s) return k;
  return std::nullopt;
}

/// Marconi's utility over the window (this file's header).
struct marconi_chooser {
  double alpha = 1.0;
  /// Bytes of one snapshot (every candidate's): FLOP efficiency is FLOPs per byte.
  double bytes = 1.0;
  policy::prefill_cost cost{};

  static std::size_t choose(void* self, std::span<const policy::snapshot_candidate> c, epoch_t) noexcept {
    const auto& me = *static_cast<const marconi_chooser*>(self);
    epoch_t oldest = c[0].last_use, newest = c[0].last_use;
    double most = 0;
    for (const auto& x : c) {
      oldest = std::min(oldest, x.last_use);
      newest = std::max(newest, x.last_use);
      most = std::max(most, me.cost.flops(x.position) / me.bytes);
    }
    std::size_t best = 0;
    double best_utility = 0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      const double recency =
          newest == oldest ? 1.0 : static_cast<double>(c[i].last_use - oldest) / static_cast<double>(newest - oldest);
      const double efficiency = most > 0 ? me.cost.flops(c[i].position) / me.bytes / most : 0;
      const double utility = recency + me.alpha * efficiency;
      if (i == 0 || utility < best_utility) {
        best = i;
        best_utility = utility;
      }
    }
    return best;
  }
};

/// The prefix hash the oracle compares: tenant and the first `q` tokens (q a multiple of 16).
class prefix_hasher {
public:
  static constexpr std::uint32_t step = 16;
  /// Hashes at every multiple of `step` up to `tokens.size()` (index k: the first k * step tokens).
  static void hashes(std::span<const token> tokens, std::uint64_t tenant, std::vector<std::uint64_t>& out) {
    out.clear();
    std::uint64_t h = 0x9e3779b97f4a7c15ull ^ (tenant * 0xff51afd7ed558ccdull);
    out.push_back(h);
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      h = (h ^ static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[i]))) * 0x100000001b3ull;
      h ^= h >> 29;
      if ((i + 1) % step == 0) out.push_back(h);
    }
  }
};

/// The offline bound (this file's header). `index` holds (hash at k * 16, request) for every request's
/// prompt, sorted; `prompt_length` each request's length; `now` the request being served.
struct oracle_chooser {
  struct slot_info {
    std::uint64_t hash = 0;
    std::uint64_t position = 0;
  };
  struct entry {
    std::uint64_t hash;
    std::uint32_t request;
    friend bool operator<(const entry& a, const entry& b) noexcept {
      return a.hash != b.hash ? a.hash < b.hash : a.request < b.request;
    }
  };
  const std::vector<entry>* index = nullptr;
  const std::vector<std::uint32_t>* prompt_length = nullptr;
  const std::uint32_t* now = nullptr;
  std::vector<slot_info> slots; ///< what each slot holds, as the engine recorded its captures

  /// The first request after `*now` that would restore at `s` (or beyond the trace: none).
  std::uint64_t next_use(const slot_info& s) const noexcept {
    const entry key{s.hash, *now + 1};
    for (auto it = std::lower_bound(index->begin(), index->end(), key); it != index->end() && it->hash == s.hash; ++it)
      if ((*prompt_length)[it->request] > s.position) return it->request;
    return std::numeric_limits<std::uint64_t>::max();
  }

  static std::size_t choose(void* self, std::span<const policy::snapshot_candidate> c, epoch_t) noexcept {
    const auto& me = *static_cast<const oracle_chooser*>(self);
    std::size_t best = 0;
    double best_score = 0;
    for (std::size_t i = 0; i < c.size(); ++i) {
      const auto slot = static_cast<std::size_t>(c[i].slot);
      double score = 0;
      if (slot < me.slots.size() && me.slots[slot].position == c[i].position) {
        const std::uint64_t next = me.next_use(me.slots[slot]);
        if (next != std::numeric_limits<std::uint64_t>::max())
          score = c[i].saved_flops / static_cast<double>(next - *me.now);
      }
      if (i == 0 || score < best_score) {
        best = i;
        best_score = score;
      }
    }
    return best;
  }
};

} // namespace reprise::sim
