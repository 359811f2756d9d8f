// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// The one entry both the libFuzzer target and the corpus replay test call.

#include "fuzz/cache_op_driver.hpp"
#include "support/cache_testing.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise::testing {

struct stream_outcome {
  std::string failure; ///< the first failed check, empty if none
  cache_metrics metrics;
  driver_stats stats; ///< what the oracle saw exercised
};

/// A cache of type `Cache` with options `o`: typed, or built from `config` at run time.
template <class Cache>
Cache make_cache(const cache_options& o, const model_config& config) {
  auto c = [&] {
    if constexpr (std::is_same_v<typename Cache::model_type, dynamic_model>) return Cache::create(config, o);
    else return Cache::create(o);
  }();
  if (!c.has_value()) __builtin_trap();
  return std::move(*c);
}

/// Runs the stream against one cache, or against `caches` caches (writer ids 1, 2, ...) sharing one store
/// and the conversations that ended, each operation going to the one the stream's next byte picks; the
/// metrics and stats are their sums.
template <class Cache>
stream_outcome run_driver(byte_source& in, cache_options o, const model_config& config, std::uint32_t caches = 1,
                          bool repeat_openings = false) {
  if (caches == 1) {
    cache_op_driver<Cache> d(make_cache<Cache>(o, config), o, {}, repeat_openings);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics(), d.stats};
  }
  const auto fleet = std::make_shared<shared_fleet>();
  std::vector<std::unique_ptr<cache_op_driver<Cache>>> engines;
  for (std::uint32_t k = 0; k < caches; ++k) {
    o.remote_writer_id = k + 1;
    engines.push_back(std::make_unique<cache_op_driver<Cache>>(make_cache<Cache>(o, config), o, fleet, repeat_openings));
  }
  auto failed = [&] {
    return std::any_of(engines.begin(), engines.end(), [](const auto& e) { return !e->failure.empty(); });
  };
  for (std::size_t op = 0; op < 4096 && !in.empty() && !failed(); ++op) engines[in.below(caches)]->step(in);
  stream_outcome out;
  for (std::uint32_t k = 0; k < caches; ++k) {
    const cache_op_driver<Cache>& e = *engines[k];
    if (out.failure.empty() && !e.failure.empty()) out.failure = "cache " + std::to_string(k + 1) + ": " + e.failure;
#define REPRISE_SUM_METRIC(name, kind, type, doc) out.metrics.name += e.cache().metrics().name;
    REPRISE_CACHE_METRICS(REPRISE_SUM_METRIC)
#undef REPRISE_SUM_METRIC
    out.stats += e.stats;
  }
  return out;
}

/// The runtime-configured models the streams also run on: block sizes other than the typed ones' 16.
inline const model_config& runtime_attention_b32() {
  static const model_config m = *model_config::make({{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 32}, 2}});
  return m;
}
inline const model_config& runtime_hybrid_b8() {
  static const model_config m = *model_config::make(
      {{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 8}, 1},
       {mamba2_shape{.heads = 2, .head_dim = 4, .state_dim = 4, .groups = 1, .conv_width = 4, .chunk = 64}, 2}});
  return m;
}

/// The number of policies the first byte chooses from.
inline constexpr std::uint8_t stream_policies = 11;

/// Runs the stream against the cache configuration its first byte selects: byte % 11 picks the policy
/// (0 block_sharing, 1 block_sharing with a colliding hasher, 2 memory_only, 3 snapshot_restore with every
/// placement, 4 prefill-exact snapshots with a TTL, 5 policy::chat with decode checkpoints, 6 block_sharing
/// with a host tier, 7 policy::chat with a host tier for blocks and snapshots and a colliding hasher, 8
/// policy::strict with host and remote tiers, 9 and 10 policy::chat with host and remote tiers and turn ends
/// in the store, two caches sharing it, with write-through and without), (byte / 11) % 2 picks the
/// typed cache over the test models (B = 16) or a runtime-configured cache (`dynamic_model`) over a model
/// of another block size, and (byte / 22) % 2 picks LRU or cost-aware snapshot eviction (the latter only from
/// byte 22 on). First bytes 0..5 select what they did when there were 6 policies.
/// Defined once, in cache_fuzz_entry.cpp: its 22 cache configurations are the heaviest code the tests compile.
stream_outcome run_cache_operation_stream(const std::uint8_t* data, std::size_t size);

} // namespace reprise::testing
