// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `cache_metrics` and the table that names its fields, both generated from one list
/// (`REPRISE_CACHE_METRICS`): the struct a cache returns from `metrics()`, the names and kinds front ends
/// print (the Python package's metrics dict, reprise-sim's CSV columns), and a visitor over the members.
/// A metric is added by one line of the list; nothing else names them all.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string_view>

/// The metric list: X(name, kind, C++ type, one-line doc), in declaration order. `counter`: monotonic since
/// construction; `gauge`: current occupancy. Order, names and types are part of the API (code reads the
/// members by name; the Python dict and the simulator's columns follow this order).
#define REPRISE_CACHE_METRICS(X)                                                                                    \
  /* --- lookups (admit) --- */                                                                                   \
  X(lookups, counter, std::uint64_t, "admits that succeeded")                                                     \
  X(prompt_tokens, counter, std::uint64_t, "prompt tokens of those admits")                                       \
  X(kv_matched_tokens, counter, std::uint64_t, "KV hit tokens")                                                   \
  X(usable_tokens, counter, std::uint64_t, "prefill tokens skipped")                                              \
  X(tokens_lost_to_missing_snapshot, counter, std::uint64_t, "KV hit tokens recomputed for want of a snapshot")  \
  X(blocks_shared, counter, std::uint64_t, "block references taken on already cached blocks")                     \
  X(bytes_saved, counter, std::uint64_t, "blocks_shared * bytes per KV block")                                    \
  X(blocks_shared_in_step, counter, std::uint64_t,                                                                \
    "of blocks_shared, not yet written when shared (share_in_step)")                                              \
  /* --- publication and eviction --- */                                                                          \
  X(blocks_published, counter, std::uint64_t, "full blocks published in the index")                               \
  X(duplicate_blocks, counter, std::uint64_t,                                                                     \
    "full blocks not published because an equal block was cached first")                                         \
  X(kv_evictions, counter, std::uint64_t, "cached KV blocks evicted")                                             \
  /* --- snapshots --- */                                                                                         \
  X(snapshot_hits, counter, std::uint64_t, "admits that restore a snapshot")                                      \
  X(snapshot_misses, counter, std::uint64_t, "admits with a KV match but no usable snapshot")                     \
  X(partial_blocks_copied, counter, std::uint64_t, "snapshot hits at a turn end off a block boundary (block copied)") \
  X(captures_planned, counter, std::uint64_t, "captures handed to the engine")                                    \
  X(captures_written, counter, std::uint64_t, "captures published as snapshots")                                  \
  X(captures_refused, counter, std::uint64_t, "captures not planned (no slot, path cap) or dropped at commit")     \
  X(snapshot_evictions_capacity, counter, std::uint64_t, "snapshots evicted for a capture by the eviction rule")  \
  X(snapshot_evictions_ttl, counter, std::uint64_t, "snapshots evicted past snapshot_ttl_steps")                  \
  X(snapshot_evictions_invalidated, counter, std::uint64_t, "snapshots dropped because their KV block was evicted") \
  /* --- gauges --- */                                                                                            \
  X(live_sequences, gauge, std::uint32_t, "sequences admitted and not released")                                  \
  X(blocks_referenced, gauge, std::uint32_t, "blocks held by at least one sequence")                              \
  X(blocks_cached, gauge, std::uint32_t, "blocks in the index (referenced or not)")                               \
  X(blocks_free, gauge, std::uint32_t, "blocks in the free queue (some may wait for their epoch)")                \
  X(tail_blocks, gauge, std::uint32_t, "partial blocks kept at turn ends with their snapshot")                    \
  X(snapshots_held, gauge, std::uint32_t, "published snapshots")                                                  \
  X(snapshot_bytes_held, gauge, std::uint64_t, "snapshots_held * bytes per snapshot")                             \
  /* --- host tier (policy::host_tier) --- */                                                                     \
  X(host_blocks_onboarded, counter, std::uint64_t,                                                                \
    "KV hits in the host tier: blocks copied back (of kv_matched_tokens)")                                        \
  X(host_tails_onboarded, counter, std::uint64_t, "partial blocks of turn ends copied back from the host tier")   \
  X(host_snapshot_hits, counter, std::uint64_t, "of snapshot_hits: restored from the host tier")                  \
  X(host_blocks_offloaded, counter, std::uint64_t, "KV blocks (full or partial) copied to the host tier")         \
  X(host_snapshots_offloaded, counter, std::uint64_t, "snapshots copied to the host tier")                        \
  X(host_bytes_offloaded, counter, std::uint64_t, "bytes device to host")                                         \
  X(host_bytes_onboarded, counter, std::uint64_t, "bytes host to device, restores from the host included")        \
  X(host_block_evictions, counter, std::uint64_t, "KV blocks evicted from the host tier")                         \
  X(host_snapshot_evictions, counter, std::uint64_t, "snapshots evicted from the host tier")                      \
  X(host_blocks_held, gauge, std::uint32_t, "KV blocks in the host tier")                                         \
  X(host_snapshots_held, gauge, std::uint32_t, "snapshots in the host tier")                                      \
  /* --- remote tier (policy::remote_tier) --- */                                                                 \
  X(remote_puts, counter, std::uint64_t, "values handed to the engine for the store")                             \
  X(remote_bytes_put, counter, std::uint64_t, "their payload bytes")                                              \
  X(remote_fetches, counter, std::uint64_t, "fetches planned by prefetch (a turn end and its links: one)")        \
  X(remote_hits, counter, std::uint64_t, "fetched values verified and kept in the host tier")                     \
  X(remote_misses, counter, std::uint64_t, "fetches reported absent")                                             \
  X(remote_rejected, counter, std::uint64_t, "fetched values whose header differed: dropped, never used")         \
  X(remote_bytes_fetched, counter, std::uint64_t, "payload bytes of the hits")                                    \
  X(remote_blocks_onboarded, counter, std::uint64_t, "of host_blocks_onboarded, from units the store filled")      \
  X(remote_turn_ends_put, counter, std::uint64_t, "of remote_puts: turn ends (remote_turn_ends)")                  \
  X(remote_turn_ends_lost, counter, std::uint64_t, "turn ends not put: a part was reused before their step completed") \
  X(remote_turn_end_hits, counter, std::uint64_t, "of remote_hits: turn ends verified and kept in the host tier")

namespace reprise {

/// Counters since construction (monotonic) and gauges (current occupancy): the members of
/// `REPRISE_CACHE_METRICS`, in its order, each documented in `metric_table`.
struct cache_metrics {
#define REPRISE_METRIC_MEMBER(name, kind, type, doc) type name = 0;
  REPRISE_CACHE_METRICS(REPRISE_METRIC_MEMBER)
#undef REPRISE_METRIC_MEMBER

  friend bool operator==(const cache_metrics&, const cache_metrics&) = default;
};

/// One value per metric, in declaration order (`metric_table[static_cast<std::size_t>(m)]` describes `m`).
enum class metric : std::uint8_t {
#define REPRISE_METRIC_ENUM(name, kind, type, doc) name,
  REPRISE_CACHE_METRICS(REPRISE_METRIC_ENUM)
#undef REPRISE_METRIC_ENUM
};

enum class metric_kind : std::uint8_t {
  counter, ///< monotonic since construction: summing it over caches is meaningful
  gauge,   ///< current occupancy
};

struct metric_info {
  std::string_view name; ///< the member's name, also the Python dict key and the CSV column
  metric_kind kind;
  std::string_view doc;
};

/// Every metric's name, kind and doc, in declaration order.
inline constexpr std::array metric_table{
#define REPRISE_METRIC_INFO(name, kind, type, doc) metric_info{#name, metric_kind::kind, doc},
    REPRISE_CACHE_METRICS(REPRISE_METRIC_INFO)
#undef REPRISE_METRIC_INFO
};

inline constexpr std::size_t metric_count = metric_table.size();

/// The name, kind and doc of `m`.
constexpr const metric_info& metric_info_of(metric m) noexcept { return metric_table[static_cast<std::size_t>(m)]; }

/// The value of metric `m` in `v`, widened to 64 bits. Complexity: O(1) (a switch).
constexpr std::uint64_t metric_value(const cache_metrics& v, metric m) noexcept {
  switch (m) {
#define REPRISE_METRIC_VALUE(name, kind, type, doc)                                                                 \
  case metric::name: return v.name;
    REPRISE_CACHE_METRICS(REPRISE_METRIC_VALUE)
#undef REPRISE_METRIC_VALUE
  }
  return 0;
}

/// Calls `f(metric, member)` for every metric in declaration order, `member` being a pointer to the
/// `cache_metrics` member (its type differs between `std::uint32_t` and `std::uint64_t` members).
template <class F>
constexpr void for_each_metric(F&& f) {
#define REPRISE_METRIC_VISIT(name, kind, type, doc) f(metric::name, &cache_metrics::name);
  REPRISE_CACHE_METRICS(REPRISE_METRIC_VISIT)
#undef REPRISE_METRIC_VISIT
}

} // namespace reprise
