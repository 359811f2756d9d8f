// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// run_cache_operation_stream, compiled once for the corpus replay, the model-based test and the libFuzzer target.
#include "fuzz/cache_fuzz_entry.hpp"

namespace reprise::testing {

stream_outcome run_cache_operation_stream(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  byte_source in(data + 1, size - 1);
  const bool runtime = (data[0] / stream_policies) % 2 == 1;
  const model_config& attention = runtime ? runtime_attention_b32() : model_config::of<attn_model>();
  const model_config& hybrid = runtime ? runtime_hybrid_b8() : model_config::of<small_hybrid>();
  // Pools of 384 tokens whatever the block size, so every configuration evicts about as often.
  const bool recurrent = data[0] % stream_policies >= 2 && data[0] % stream_policies != 6;
  const std::uint32_t block_size = recurrent ? hybrid.block_size() : attention.block_size();
  // First bytes from 2 * stream_policies on repeat the configurations with cost-aware snapshot eviction (a
  // window of 4, the cost model derived from the model) in place of LRU; below it they select what they did
  // before eviction was a choice.
  const bool cost_aware = (data[0] / (2 * stream_policies)) % 2 == 1;
  const cache_options small{.kv_blocks = 384 / block_size,
                            .max_sequences = 6,
                            .hasher_seed = 3,
                            .snapshot_eviction = cost_aware ? policy::snapshot_eviction::cost_aware
                                                            : policy::snapshot_eviction::policy_default,
                            .eviction_window = cost_aware ? 4u : 0u};
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
  // chat as in case 5 with 3 GPU slots, and a host tier of 256 tokens' blocks and 4 snapshots (reads one byte: the
  // decode checkpoints kept per sequence).
  const auto chat_on_host = [&] {
    cache_options o = small;
    o.snapshot_budget_bytes = 3 * hybrid.bytes_per_snapshot();
    o.decode_checkpoint_interval = hybrid.alignment();
    o.decode_checkpoints_per_sequence = 1 + in.below(2);
    o.host_kv_budget_bytes = 256 / block_size * hybrid.bytes_per_kv_block();
    o.host_snapshot_budget_bytes = 4 * hybrid.bytes_per_snapshot();
    return o;
  };
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
    cache_options o = chat_on_host();
    o.remote_keys = &keys;
    o.remote_write_through = data[0] % stream_policies == 9;
    o.remote_turn_ends = true;
    return run.template operator()<small_hybrid, policy::chat, xxh3_hasher,
                                   policy::tiers<policy::host_tier, policy::remote_tier>>(o, hybrid, 2);
  }
  default: {
    const cache_options o = chat_on_host();
    // Every key collides: a host block is told apart from an equal-token block under another parent (decode
    // checkpoints' repeated token patterns make many) by its parent's serial alone.
    return run.template operator()<small_hybrid, policy::chat, constant_hasher, host_tiers>(o, hybrid);
  }
  }
}

} // namespace reprise::testing
