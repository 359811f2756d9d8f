// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Randomized model-based test: thousands of random admit / commit / extend / release / finish / fork /
// step_complete operations (evictions follow from the small pools), each checked against the oracle in
// fuzz/cache_op_driver.hpp and check_invariants(), for every configuration of fuzz/cache_fuzz_entry.hpp
// (policy::chat with decode checkpoints, host and remote tiers, and two caches sharing a store of turn ends
// among them), each on a typed and a runtime-configured cache.
#include "fuzz/cache_fuzz_entry.hpp"

#include <doctest/doctest.h>

#include <iterator>
#include <random>
#include <string>
#include <vector>

using namespace reprise::testing;

TEST_CASE("random operation streams keep every oracle check and invariant") {
  const char* names[] = {"block_sharing", "block_sharing, constant hasher", "memory_only",
                         "snapshot_restore<every, last_aligned, branch_point, end_of_turn; accept_any>",
                         "snapshot_restore<last_aligned, end_of_turn; accept_prefill_exact>, TTL",
                         "chat (branch_block, end_of_turn, decode_checkpoints; accept_any)",
                         "block_sharing, host tier", "chat, host tier, constant hasher",
                         "strict, host and remote tiers",
                         "chat, host and remote tiers, turn ends in the store, write-through, two caches",
                         "chat, host and remote tiers, turn ends in the store, two caches"};
  static_assert(std::size(names) == stream_policies);
  // 0..10: the typed caches (B = 16); 11..21: the same policies on runtime-configured caches (B = 32 / B = 8).
  for (std::uint8_t config = 0; config < 2 * stream_policies; ++config) {
    const std::uint8_t policy = config % stream_policies;
    const bool runtime = config >= stream_policies;
    reprise::cache_metrics total{};
    driver_stats stats{};
    for (std::uint32_t seed = 1; seed <= 8; ++seed) {
      // The streams of the first five policies are those they had before chat was added (numbered 0..9).
      const unsigned stream = policy < 5    ? policy + (runtime ? 5u : 0u)
                              : policy == 5 ? 10u + (runtime ? 1u : 0u)
                                            : 12u + 2u * (policy - 6u) + (runtime ? 1u : 0u);
      std::mt19937 rng(seed * 7919 + stream);
      std::vector<std::uint8_t> bytes(10000);
      bytes[0] = config;
      for (std::size_t i = 1; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(rng());
      const std::string policy_name = names[policy]; // (a char pointer would be logged as an address)
      CAPTURE(policy_name);
      CAPTURE(config);
      CAPTURE(seed);
      const stream_outcome out = run_cache_operation_stream(bytes.data(), bytes.size());
      CHECK_MESSAGE(out.failure.empty(), out.failure);
      total.lookups += out.metrics.lookups;
      total.blocks_shared += out.metrics.blocks_shared;
      total.kv_evictions += out.metrics.kv_evictions;
      total.usable_tokens += out.metrics.usable_tokens;
      total.snapshot_hits += out.metrics.snapshot_hits;
      total.partial_blocks_copied += out.metrics.partial_blocks_copied;
      total.captures_written += out.metrics.captures_written;
      total.snapshot_evictions_capacity += out.metrics.snapshot_evictions_capacity;
      total.snapshot_evictions_invalidated += out.metrics.snapshot_evictions_invalidated;
      total.snapshot_evictions_ttl += out.metrics.snapshot_evictions_ttl;
      total.duplicate_blocks += out.metrics.duplicate_blocks;
      stats += out.stats;
    }
    const std::string label = std::string(names[policy]) + (runtime ? " (runtime)" : " (typed)");
    MESSAGE(label, ": lookups ", total.lookups, ", blocks shared ", total.blocks_shared, ", KV evictions ",
            total.kv_evictions, ", skipped ", total.usable_tokens, ", snapshot hits ", total.snapshot_hits,
            ", captures ", total.captures_written, ", partial blocks copied ", total.partial_blocks_copied, ", snapshot capacity/invalidated evictions ",
            total.snapshot_evictions_capacity, "/", total.snapshot_evictions_invalidated, ", TTL evictions ",
            total.snapshot_evictions_ttl, ", duplicates ",
            total.duplicate_blocks, "; off-grid captures written ", stats.off_grid_captures_written,
            ", decode checkpoints planned/written/published/dropped ", stats.checkpoints_planned, "/",
            stats.checkpoints_written, "/", stats.checkpoints_published, "/", stats.checkpoints_dropped,
            ", restores of off-grid/checkpoint/turn-end snapshots ", stats.restores_off_grid, "/",
            stats.restores_checkpoint, "/", stats.restores_turn_end, "; host tier: blocks offloaded/onboarded ",
            stats.host_offloads, "/", stats.host_onboards, ", restores from the host ", stats.restores_from_host,
            "; remote tier: puts ", stats.remote_puts, " (written through ", stats.remote_puts_through, "), hits ", stats.remote_hits, ", rejected ", stats.remote_rejected, ", probed prefetches ",
            stats.remote_probed, "; turn ends put/kept/corrupted ", stats.remote_turn_ends_put, "/",
            stats.remote_turn_end_hits, "/", stats.remote_turn_ends_corrupted, ", restores of fetched turn ends ",
            stats.restores_fetched_turn_end, "; repeated openings ", stats.repeated_openings,
            ", next turns checked to restore their own turn end ", stats.own_turn_end_checks, " (after a repeated opening ",
            stats.own_turn_end_checks_repeated, ")");
    // The streams must exercise what they claim to test.
    CHECK(total.lookups > 500);
    CHECK(total.blocks_shared > 100);
    CHECK(total.kv_evictions > 50);
    if (policy != 2) CHECK(total.usable_tokens > 0);
    if (policy >= 3 && policy != 6) {
      CHECK(total.snapshot_hits > 10);
      CHECK(total.captures_written > 10);
      CHECK(total.snapshot_evictions_invalidated + total.snapshot_evictions_capacity > 0);
    }
    if (policy == 4) CHECK(total.snapshot_evictions_ttl > 0);
    // turn ends in the store (9 with write-through, 10 without), two caches sharing it
    const bool turn_ends = policy == 9 || policy == 10;
    const bool chat = policy == 5 || policy == 7 || turn_ends;
    if (policy == 3 || chat) CHECK(total.partial_blocks_copied > 10); // turn ends off block boundaries, restored
    if (policy >= 6) {
      CHECK(stats.host_offloads > 100);
      CHECK(stats.host_onboards > (policy == 8 ? 10u : 50u));
      if (policy >= 7) CHECK(stats.restores_from_host > 10);
      if (policy == 8) {
        CHECK(stats.remote_puts > 50);
        CHECK(stats.remote_puts_through > 50);
        CHECK(stats.remote_puts > stats.remote_puts_through);
        CHECK(stats.remote_hits > 50);
        CHECK(stats.remote_rejected > 5);
        CHECK(stats.remote_probed > 50);
      }
      if (turn_ends) {
        CHECK(stats.remote_turn_ends_put > 100);
        CHECK(stats.remote_turn_end_hits > 50);
        CHECK(stats.remote_turn_ends_corrupted > 10); // each one rejected
        CHECK(stats.restores_fetched_turn_end > 50);  // each one its writer's bytes
        CHECK(stats.remote_probed > 500);
        if (policy == 9) {
          CHECK(stats.remote_puts_through > 50);
        } else {
          CHECK(stats.remote_puts_through == 0);
          CHECK(stats.remote_puts > stats.remote_turn_ends_put + 50); // written back as the host tier evicts
        }
      } else {
        CHECK(stats.remote_turn_ends_put + stats.remote_turn_end_hits + stats.restores_fetched_turn_end == 0);
      }
    } else {
      CHECK(stats.host_offloads + stats.host_onboards + stats.restores_from_host == 0);
    }
    if (chat) {
      CHECK(stats.off_grid_captures_written > 10); // branch_block
      CHECK(stats.restores_off_grid > 10);
      CHECK(stats.checkpoints_written > 10);
      if (!turn_ends) CHECK(stats.checkpoints_dropped > 0); // the per-sequence bound, modelled
      CHECK(stats.restores_checkpoint > 0);
      CHECK(stats.restores_turn_end > (turn_ends ? 0u : 10u)); // (the fleet's are mostly fetched ones)
      if (policy == 5) CHECK(stats.repeated_openings > 50); // another conversation decoding an ended one's reply
    } else {
      CHECK(stats.off_grid_captures_written == 0);
      CHECK(stats.checkpoints_planned == 0);
    }
  }
}

// 96 streams: 26 s at -O3 (the ci preset runs it), about 20 minutes under AddressSanitizer, where the other
// model-based cases cover the same driver.
#if defined(__SANITIZE_ADDRESS__)
constexpr bool under_address_sanitizer = true;
#else
constexpr bool under_address_sanitizer = false;
#endif

TEST_CASE("chat streams with room for their conversations: a next turn restores at its own turn end, also after "
          "another conversation repeated the opening" * doctest::skip(under_address_sanitizer)) {
  // Pools for about 4096 tokens and 64 snapshots, so turn ends stay held long enough for the next turn: the
  // oracle checks every next turn whose turn end is still held restores there, while other conversations
  // repeat ended ones' prompts and decode the same replies (their decode-filled blocks hold the next turns'
  // tokens).
  for (const bool runtime : {false, true}) {
    const reprise::model_config& model = runtime ? runtime_hybrid_b8() : reprise::model_config::of<small_hybrid>();
    const reprise::cache_options o{.kv_blocks = 4096 / model.block_size(),
                                   .max_sequences = 6,
                                   .snapshot_budget_bytes = 64 * model.bytes_per_snapshot(),
                                   .hasher_seed = 3,
                                   .decode_checkpoint_interval = model.alignment(),
                                   .decode_checkpoints_per_sequence = 2};
    driver_stats stats{};
    for (std::uint32_t seed = 1; seed <= 48; ++seed) {
      std::mt19937 rng(seed * 15485863 + (runtime ? 1u : 0u));
      std::vector<std::uint8_t> bytes(20000);
      for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
      byte_source in(bytes.data(), bytes.size());
      CAPTURE(runtime);
      CAPTURE(seed);
      auto run = [&]<class Cache>(Cache c) {
        cache_op_driver<Cache> d(std::move(c), o, {}, true);
        d.run(in, 8192);
        CHECK_MESSAGE(d.failure.empty(), d.failure);
        CHECK(d.cache().check_invariants().has_value());
        stats += d.stats;
      };
      if (runtime) run(make_cache<reprise::runtime_prefix_cache<reprise::policy::chat>>(o, model));
      else run(make_cache<reprise::prefix_cache<small_hybrid, reprise::policy::chat>>(o, model));
    }
    MESSAGE(std::string(runtime ? "runtime B = 8" : "typed B = 16"), ": repeated openings ", stats.repeated_openings,
            ", next turns checked ", stats.own_turn_end_checks, " (after a repeated opening ",
            stats.own_turn_end_checks_repeated, "), turn-end restores ", stats.restores_turn_end);
    CHECK(stats.repeated_openings > 100);
    CHECK(stats.own_turn_end_checks > 100);
    CHECK(stats.own_turn_end_checks_repeated > 5);
  }
}

TEST_CASE("random operation streams with share_in_step keep every oracle check and invariant") {
  // Attention-only caches sharing blocks within a step: typed (B = 16, also with a hasher that collides
  // everywhere) and runtime-configured (B = 32). The oracle checks what each pending block will hold and
  // predicts exactly which sharer commits are refused.
  using attention = reprise::testing::attn_model;
  using reprise::policy::block_sharing;
  const std::string names[] = {"typed", "typed, constant hasher", "runtime B = 32"};
  for (int config = 0; config < 3; ++config) {
    const reprise::model_config& model =
        config == 2 ? runtime_attention_b32() : reprise::model_config::of<attention>();
    const reprise::cache_options o{
        .kv_blocks = 384 / model.block_size(), .max_sequences = 6, .hasher_seed = 3, .share_in_step = true};
    std::uint64_t shared_in_step = 0, shared = 0, refusals = 0, lookups = 0;
    for (std::uint32_t seed = 1; seed <= 24; ++seed) {
      std::mt19937 rng(seed * 104729 + static_cast<std::uint32_t>(config));
      std::vector<std::uint8_t> bytes(10000);
      for (auto& b : bytes) b = static_cast<std::uint8_t>(rng());
      byte_source in(bytes.data(), bytes.size());
      CAPTURE(names[config]);
      CAPTURE(seed);
      auto run = [&]<class Cache>(Cache c) {
        cache_op_driver<Cache> d(std::move(c), o);
        d.run(in, 4096);
        CHECK_MESSAGE(d.failure.empty(), d.failure);
        shared_in_step += d.cache().metrics().blocks_shared_in_step;
        shared += d.cache().metrics().blocks_shared;
        lookups += d.cache().metrics().lookups;
        refusals += d.unwritten_refusals;
      };
      if (config == 0) run(make_cache<reprise::prefix_cache<attention, block_sharing>>(o, model));
      if (config == 1)
        run(make_cache<reprise::prefix_cache<attention, block_sharing, constant_hasher>>(o, model));
      if (config == 2) run(make_cache<reprise::runtime_prefix_cache<block_sharing>>(o, model));
    }
    MESSAGE(names[config], ": lookups ", lookups, ", blocks shared ", shared, " (", shared_in_step,
            " within a step), sharer commits refused ", refusals);
    CHECK(lookups > 500);
    CHECK(shared_in_step > 60);
    CHECK(shared > shared_in_step);
    CHECK(refusals > 60);
  }
}
