// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// End to end with a host tier: the example engine serves workloads through a cache whose GPU pools are too
// small for them, so KV blocks, partial blocks and snapshots go to host memory and come back. What it
// decodes must equal, bit for bit, what the same policy decodes with GPU memory to spare (and caching off
// for prefill-exact policies); a corrupted host snapshot must be noticed.
#include "hybrid/config.hpp"
#include "hybrid/decoder.hpp"
#include "hybrid/kept_alive.hpp"
#include "hybrid/run.hpp"
#include "hybrid/uncached.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>

#include <doctest/doctest.h>

#include <cstring>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::example;
using presets::tiny_attention;
using presets::tiny_hybrid;
using host_tiers = policy::tiers<policy::host_tier>;

const decoder& model_of(const decoder_config& c) {
  static std::vector<std::pair<std::string, decoder>> models;
  for (auto& [pattern, m] : models)
    if (pattern == c.pattern) return m;
  result<decoder> m = decoder::make(c);
  REQUIRE(m.has_value());
  return models.emplace_back(c.pattern, std::move(m).value()).second;
}

template <class Preset, class Policy, class Tiers = policy::tiers<>>
auto make_cache(std::uint32_t kv_blocks, std::size_t snapshots, std::uint32_t host_blocks = 0,
                std::size_t host_snapshots = 0) {
  using model = typename Preset::cache_model;
  const cache_options o{.kv_blocks = kv_blocks,
                        .max_sequences = 8,
                        .snapshot_budget_bytes = snapshots * model::bytes_per_snapshot,
                        .hasher_seed = 1,
                        .host_kv_budget_bytes = host_blocks * model::bytes_per_kv_block,
                        .host_snapshot_budget_bytes = host_snapshots * model::bytes_per_snapshot};
  auto c = prefix_cache<model, Policy, xxh3_hasher, Tiers>::create(o);
  REQUIRE(c.has_value());
  return std::move(*c);
}

void check_same(const workload_result& a, const workload_result& b) {
  REQUIRE(a.turns.size() == b.turns.size());
  for (std::size_t c = 0; c < a.turns.size(); ++c) {
    REQUIRE(a.turns[c].size() == b.turns[c].size());
    for (std::size_t t = 0; t < a.turns[c].size(); ++t) {
      CAPTURE(c);
      CAPTURE(t);
      CHECK(a.turns[c][t].generated == b.turns[c][t].generated);
      REQUIRE(a.turns[c][t].last_logits.size() == b.turns[c][t].last_logits.size());
      CHECK(std::memcmp(a.turns[c][t].last_logits.data(), b.turns[c][t].last_logits.data(),
                        a.turns[c][t].last_logits.size() * sizeof(float)) == 0);
    }
  }
}

/// Six conversations of four turns behind a shared system prompt, lengths drawn per turn: with one running
/// sequence and 14 GPU blocks, nearly everything a later turn reuses has left GPU memory by then.
workload chat_workload(std::uint32_t vocab) {
  return workload::make({.conversations = 6, .turns = 4, .system_tokens = 70, .user_tokens = 5, .user_tokens_max = 20,
                         .reply_tokens = 2, .reply_tokens_max = 12, .seed = 21},
                        vocab);
}

using exact_restore = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::branch_point>,
                                               policy::accept_prefill_exact>;

} // namespace

TEST_CASE("block_sharing with a host tier decodes bitwise what caching off decodes, blocks onboarded") {
  const decoder& model = model_of(tiny_attention::config());
  const workload w = chat_workload(model.config().vocab);
  uncached off(256, tiny_attention::cache_model::block_size);
  const workload_result cold = run_workload(model, off, w, engine<uncached>::options{.max_running = 1});
  auto cache = make_cache<tiny_attention, policy::block_sharing, host_tiers>(14, 0, 64);
  const workload_result warm = run_workload(model, cache, w, engine<decltype(cache)>::options{.max_running = 1});
  check_same(warm, cold);
  CHECK(warm.metrics.host_blocks_offloaded > 0);
  CHECK(warm.metrics.host_blocks_onboarded > 20);
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("prefill-exact snapshots restored from the host tier decode bitwise what caching off decodes") {
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = chat_workload(model.config().vocab);
  uncached off(256, tiny_hybrid::cache_model::block_size);
  const workload_result cold = run_workload(model, off, w, engine<uncached>::options{.max_running = 1});
  auto cache = make_cache<tiny_hybrid, exact_restore, host_tiers>(14, 2, 64, 16);
  const workload_result warm = run_workload(model, cache, w, engine<decltype(cache)>::options{.max_running = 1});
  check_same(warm, cold);
  CHECK(warm.metrics.host_snapshot_hits > 0);
  CHECK(warm.metrics.host_blocks_onboarded > 0);
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("policy::chat through a host tier decodes bitwise what it decodes with GPU memory to spare") {
  // Turn ends (partial blocks and decode_continuation snapshots) restored from the host: the reference is the
  // same policy with pools large enough that nothing is evicted, itself checked against kept-alive sessions
  // by the chat tests of test_e2e_serving.
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = chat_workload(model.config().vocab);
  auto roomy = make_cache<tiny_hybrid, policy::chat>(512, 64);
  const workload_result reference = run_workload(model, roomy, w, engine<decltype(roomy)>::options{.max_running = 1});
  REQUIRE(reference.metrics.kv_evictions == 0);
  auto cache = make_cache<tiny_hybrid, policy::chat, host_tiers>(14, 1, 64, 16);
  const workload_result warm = run_workload(model, cache, w, engine<decltype(cache)>::options{.max_running = 1});
  check_same(warm, reference);
  CHECK(warm.stats.skipped_tokens == reference.stats.skipped_tokens); // every hit survived in the host tier
  CHECK(warm.metrics.host_snapshot_hits > 5);
  CHECK(warm.metrics.host_tails_onboarded > 0);
  CHECK(warm.metrics.kv_evictions > 0);
  CHECK(cache.check_invariants().has_value());

  // Without the host tier the same GPU pools lose most of those hits.
  auto gpu_only = make_cache<tiny_hybrid, policy::chat>(14, 1);
  const workload_result lost = run_workload(model, gpu_only, w, engine<decltype(gpu_only)>::options{.max_running = 1});
  CHECK(lost.stats.skipped_tokens < warm.stats.skipped_tokens);
}

TEST_CASE("corrupting a snapshot in the host tier changes the output, and the comparison notices") {
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = chat_workload(model.config().vocab);
  uncached off(256, tiny_hybrid::cache_model::block_size);
  const workload_result cold = run_workload(model, off, w, engine<uncached>::options{.max_running = 1});
  auto cache = make_cache<tiny_hybrid, exact_restore, host_tiers>(14, 2, 64, 16);
  std::uint32_t tampered = 0;
  std::uint64_t host_hits_seen = 0;
  engine<decltype(cache)>::options o{.max_running = 1};
  o.before_restore = [&](state_memory& states, slot_id slot) {
    // The hook runs right after each admit: a new host hit means this restore reads the host pools.
    const std::uint64_t hits = cache.metrics().host_snapshot_hits;
    const bool from_host = hits != host_hits_seen;
    host_hits_seen = hits;
    if (!from_host || tampered++ != 0) return; // only the first restore from the host
    const gated_delta_shape& d = tiny_hybrid::config().delta;
    states.delta(0)[static_cast<std::size_t>(slot) * d.value_heads * d.key_dim * d.value_dim + 5] += 0.25f;
  };
  const workload_result warm = run_workload(model, cache, w, o);
  REQUIRE(tampered > 0);
  REQUIRE(warm.metrics.host_snapshot_hits > 0);
  CHECK_FALSE([&] {
    for (std::size_t c = 0; c < warm.turns.size(); ++c)
      for (std::size_t t = 0; t < warm.turns[c].size(); ++t)
        if (std::memcmp(warm.turns[c][t].last_logits.data(), cold.turns[c][t].last_logits.data(),
                        cold.turns[c][t].last_logits.size() * sizeof(float)) != 0)
          return false;
    return true;
  }());
}
