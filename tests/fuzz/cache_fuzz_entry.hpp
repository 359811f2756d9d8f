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
/// of another block size. First bytes 0..5 select what they did when there were 6 policies.
inline stream_outcome run_cache_operation_stream(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  byte_source in(data + 1, size - 1);
  const bool runtime = (data[0] / stream_policies) % 2 == 1;
  const model_config& attention = runtime ? runtime_attention_b32() : model_config::of<attn_model>();
  const model_config& hybrid = runtime ? runtime_hybrid_b8() : model_config::of<small_hybrid>();
  // Pools of 384 tokens whatever the block size, so every configuration evicts about as often.
  const bool recurrent = data[0] % stream_policies >= 2 && data[0] % stream_policies != 6;
  const std::uint32_t block_size = recurrent ? hybrid.block_size() : attention.block_size();
  const cache_options small{.kv_blocks = 384 / block_size, .max_sequences = 6, .hasher_seed = 3};
  using every_path = policy::snapshot_restore<
      policy::capture<policy::every<64>, policy::last_aligned, policy::branch_point, policy::end_of_turn>,
      policy::accept_any>;
  using exact_only = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::end_of_turn>,
                                              policy::accept_prefill_exact>;
  auto run = [&]<class Model, class Policy, class Hasher = xxh3_hasher, class Tiers = policy::tiers<>>(
                 const cache_options& o, const model_config& config, std::uint32_t caches = 1,
                 bool repeat_openings = false) {
    if (runtime)
      return run_driver<prefix_cache<dynamic_model, Policy, Hasher, Tiers>>(in, o, config, caches, repeat_openings);
    return run_driver<prefix_cache<Model, Policy, Hasher, Tiers>>(in, o, config, caches, repeat_openings);
  };
  using host_tiers = policy::tiers<policy::host_tier>;
  switch (data[0] % stream_policies) {
  case 0: return run.template operator()<attn_model, policy::block_sharing>(small, attention);
  case 1: return run.template operator()<attn_model, policy::block_sharing, constant_hasher>(small, attention);
  case 2: return run.template operator()<small_hybrid, policy::memory_only>(small, hybrid);
  case 3: {
    cache_options o = small;
    o.snapshot_budget_bytes = 5 * hybrid.bytes_per_snapshot();
    o.max_snapshots_per_path = 3;
    return run.template operator()<small_hybrid, every_path>(o, hybrid);
  }
  case 4: {
    cache_options o = small;
    o.snapshot_budget_bytes = 3 * hybrid.bytes_per_snapshot();
    o.snapshot_ttl_steps = 3;
    return run.template operator()<small_hybrid, exact_only>(o, hybrid);
  }
  case 5: {
    // Branch snapshots off the alignment grid, turn ends, and decode checkpoints at every alignment unit
    // (64 on both hybrid models), 1 or 2 kept per sequence (the stream's next byte), competing for 5 slots;
    // conversations whose openings others repeat, decoding the same replies.
    cache_options o = small;
    o.snapshot_budget_bytes = 5 * hybrid.bytes_per_snapshot();
    o.decode_checkpoint_interval = hybrid.alignment();
    o.decode_checkpoints_per_sequence = 1 + in.below(2);
    return run.template operator()<small_hybrid, policy::chat>(o, hybrid, 1, true);
  }
  case 6: {
    // A host tier of 256 tokens' blocks under the 384-token GPU pool: offloads, onboards and host evictions.
    cache_options o = small;
    o.host_kv_budget_bytes = 256 / block_size * attention.bytes_per_kv_block();
    return run.template operator()<attn_model, policy::block_sharing, xxh3_hasher, host_tiers>(o, attention);
  }
  case 8: {
    // strict (prefill-exact captures) with small host pools under a remote store: what the host tier evicts
    // is put (and, in half the streams, every prefill-exact block and snapshot is written through from GPU
    // memory once its step completed), and every admit is preceded by a prefetch from the store.
    static const test_content_keyer keys;
    cache_options o = small;
    o.remote_write_through = in.below(2) == 1;
    o.snapshot_budget_bytes = 3 * hybrid.bytes_per_snapshot();
    o.host_kv_budget_bytes = 128 / block_size * hybrid.bytes_per_kv_block();
    o.host_snapshot_budget_bytes = 2 * hybrid.bytes_per_snapshot();
    o.remote_keys = &keys;
    return run.template operator()<small_hybrid, policy::strict, xxh3_hasher,
                                   policy::tiers<policy::host_tier, policy::remote_tier>>(o, hybrid);
  }
  case 9:
  case 10: {
    // chat with host and remote tiers and turn ends in the store, prefill-exact blocks and snapshots written
    // through (9) or written back as the host tier evicts them (10); turn ends are put from GPU memory
    // either way. Two caches share the store and the conversations that ended: a next turn goes to either,
    // which probes the store and fetches the turn end its last writer left (or its own).
    static const test_content_keyer keys;
    cache_options o = small;
    o.snapshot_budget_bytes = 3 * hybrid.bytes_per_snapshot();
    o.decode_checkpoint_interval = hybrid.alignment();
    o.decode_checkpoints_per_sequence = 1 + in.below(2);
    o.host_kv_budget_bytes = 256 / block_size * hybrid.bytes_per_kv_block();
    o.host_snapshot_budget_bytes = 4 * hybrid.bytes_per_snapshot();
    o.remote_keys = &keys;
    o.remote_write_through = data[0] % stream_policies == 9;
    o.remote_turn_ends = true;
    return run.template operator()<small_hybrid, policy::chat, xxh3_hasher,
                                   policy::tiers<policy::host_tier, policy::remote_tier>>(o, hybrid, 2);
  }
  default: {
    // chat as in case 5 with 3 GPU slots, and a host tier of 256 tokens' blocks and 4 snapshots.
    cache_options o = small;
    o.snapshot_budget_bytes = 3 * hybrid.bytes_per_snapshot();
    o.decode_checkpoint_interval = hybrid.alignment();
    o.decode_checkpoints_per_sequence = 1 + in.below(2);
    o.host_kv_budget_bytes = 256 / block_size * hybrid.bytes_per_kv_block();
    o.host_snapshot_budget_bytes = 4 * hybrid.bytes_per_snapshot();
    // Every key collides: a host block is told apart from an equal-token block under another parent (decode
    // checkpoints' repeated token patterns make many) by its parent's serial alone.
    return run.template operator()<small_hybrid, policy::chat, constant_hasher, host_tiers>(o, hybrid);
  }
  }
}

} // namespace reprise::testing
