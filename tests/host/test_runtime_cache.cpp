// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The runtime-configured cache (`prefix_cache<dynamic_model, Policy>`): built from sizes read at run time, as
// an engine reading a checkpoint's config does; every create error; and the same plans and metrics as the
// typed cache over the same model, call for call.
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

/// Nemotron-H-8B, Qwen3-Next-80B-A3B and Falcon-H1-7B from numbers alone (what a config.json holds).
model_config nemotron_h_8b_from_sizes() {
  return *model_config::make(
      {{kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}, 4},
       {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8, .conv_width = 4, .chunk = 128}, 24}});
}
model_config qwen3_next_from_sizes() {
  return *model_config::make({{kv_shape{.kv_heads = 2, .head_dim = 256, .block_size = 16}, 12},
                              {gated_delta_shape{.key_heads = 16, .value_heads = 32, .key_dim = 128, .value_dim = 128,
                                                 .conv_width = 4, .chunk = 64},
                               36}});
}
model_config falcon_h1_from_sizes() {
  return *model_config::make(
      {{kv_shape{.kv_heads = 2, .head_dim = 128, .block_size = 16}, 44},
       {mamba2_shape{.heads = 24, .head_dim = 128, .state_dim = 256, .groups = 1, .conv_width = 4, .chunk = 128}, 44}});
}

using turns_policy = policy::snapshot_restore<>;

} // namespace

TEST_CASE("an engine builds caches for three hybrid checkpoints from runtime sizes only") {
  struct checkpoint {
    const char* name;
    model_config config;
    std::size_t snapshot_bytes;
    std::uint32_t alignment;
  };
  const checkpoint checkpoints[] = {{"Nemotron-H-8B", nemotron_h_8b_from_sizes(), 102137856, 128},
                                    {"Qwen3-Next-80B-A3B", qwen3_next_from_sizes(), 77266944, 64},
                                    {"Falcon-H1-7B", falcon_h1_from_sizes(), 139358208, 128}};
  for (const checkpoint& c : checkpoints) {
    CAPTURE(c.name);
    auto cache = runtime_prefix_cache<turns_policy>::create(
        c.config, {.kv_blocks = 1024, .snapshot_budget_bytes = std::size_t{8} << 30, .hasher_seed = 1});
    REQUIRE(cache.has_value());
    CHECK(cache->geometry().bytes_per_snapshot == c.snapshot_bytes);
    CHECK(cache->alignment() == c.alignment);
    CHECK(cache->snapshot_slots() == (std::size_t{8} << 30) / c.snapshot_bytes);

    // Turn 1 captures at its last aligned position; turn 2 restores there, and byte gauges are real bytes.
    const auto turn1 = iota_tokens(2 * c.alignment + 40);
    auto p1 = cache->admit(1, turn1);
    REQUIRE(p1.has_value());
    REQUIRE(p1->captures.size() == 1);
    CHECK(p1->captures[0].position == 2 * c.alignment);
    const slot_id captured = p1->captures[0].slot; // plans' spans live until the next call
    const std::uint32_t written[] = {2 * c.alignment};
    REQUIRE(cache->commit(1, static_cast<std::uint32_t>(turn1.size()), written).has_value());
    CHECK(cache->metrics().snapshot_bytes_held == c.snapshot_bytes);
    REQUIRE(cache->release(1).has_value());
    REQUIRE(cache->step_complete(cache->current_epoch()).has_value());
    auto p2 = cache->admit(2, concat(turn1, iota_tokens(30, 9000)));
    REQUIRE(p2.has_value());
    CHECK(p2->usable_tokens == 2 * c.alignment);
    CHECK(p2->restore_slot == captured);
    CHECK(cache->check_invariants().has_value());
  }
}

// The plan's captures go back to commit as they are: one position type end to end, no narrowing cast at the
// call (this block is compiled with -Wconversion as an error).
#pragma GCC diagnostic push
#pragma GCC diagnostic error "-Wconversion"
TEST_CASE("commit accepts the captures a plan hands out") {
  auto cache = runtime_prefix_cache<turns_policy>::create(
      nemotron_h_8b_from_sizes(), {.kv_blocks = 1024, .snapshot_budget_bytes = std::size_t{1} << 30, .hasher_seed = 1});
  REQUIRE(cache.has_value());
  const auto turn1 = iota_tokens(300);
  auto p1 = cache->admit(1, turn1);
  REQUIRE(p1.has_value());
  REQUIRE(p1->captures.size() == 1);
  const std::vector<capture_point> written(p1->captures.begin(), p1->captures.end()); // spans end at the next call

  SUBCASE("a position no plan hands out is refused and changes nothing") {
    std::vector<capture_point> bad = written;
    bad[0].position = -1;
    CHECK(cache->commit(1, static_cast<std::uint32_t>(turn1.size()), bad).error() == errc::invalid_argument);
    bad[0].position = std::int64_t{1} << 32;
    CHECK(cache->commit(1, static_cast<std::uint32_t>(turn1.size()), bad).error() == errc::invalid_argument);
    CHECK(cache->metrics().snapshot_bytes_held == 0);
    CHECK(cache->check_invariants().has_value());
  }
  REQUIRE(cache->commit(1, static_cast<std::uint32_t>(turn1.size()), written).has_value());
  CHECK(cache->metrics().snapshot_bytes_held == cache->geometry().bytes_per_snapshot);
  CHECK(cache->check_invariants().has_value());
}
#pragma GCC diagnostic pop

TEST_CASE("create reports every check of the typed form as an errc") {
  const model_config hybrid = model_config::of<small_hybrid>();
  const model_config attention = model_config::of<attn_model>();
  const cache_options ok{.kv_blocks = 8, .snapshot_budget_bytes = small_hybrid::bytes_per_snapshot};
  CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, ok).has_value());

  SUBCASE("block_sharing on a model with recurrent layers") {
    CHECK(runtime_prefix_cache<policy::block_sharing>::create(hybrid, ok).error() == errc::unsupported_config);
  }
  SUBCASE("snapshot_restore on an attention-only model") {
    CHECK(runtime_prefix_cache<turns_policy>::create(attention, ok).error() == errc::unsupported_config);
  }
  SUBCASE("a block size outside the supported ones") {
    const auto b48 = *model_config::make({{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 48}, 1}});
    CHECK(runtime_prefix_cache<policy::block_sharing>::create(b48, ok).error() == errc::unsupported_config);
    const auto b512 = *model_config::make({{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 512}, 1}});
    CHECK(runtime_prefix_cache<policy::block_sharing>::create(b512, ok).error() == errc::unsupported_config);
  }
  SUBCASE("an every<I> off the alignment unit, and every_interval without a valid interval") {
    using every96 = policy::snapshot_restore<policy::capture<policy::every<96>>>;
    CHECK(runtime_prefix_cache<every96>::create(hybrid, ok).error() == errc::misaligned);
    using every128 = policy::snapshot_restore<policy::capture<policy::every<128>>>;
    CHECK(runtime_prefix_cache<every128>::create(hybrid, ok).has_value());
    using runtime_interval = policy::snapshot_restore<policy::capture<policy::every_interval>>;
    cache_options o = ok;
    CHECK(runtime_prefix_cache<runtime_interval>::create(hybrid, o).error() == errc::misaligned);
    o.capture_interval = 96;
    CHECK(runtime_prefix_cache<runtime_interval>::create(hybrid, o).error() == errc::misaligned);
    o.capture_interval = 192;
    CHECK(runtime_prefix_cache<runtime_interval>::create(hybrid, o).has_value());
  }
  SUBCASE("a snapshot budget below one snapshot") {
    cache_options o = ok;
    o.snapshot_budget_bytes = small_hybrid::bytes_per_snapshot - 1;
    CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, o).error() == errc::budget_too_small);
  }
  SUBCASE("pool sizes: zero, and beyond the int32 id range") {
    cache_options o = ok;
    o.kv_blocks = 0;
    CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, o).error() == errc::invalid_argument);
    o = ok;
    o.max_sequences = 0;
    CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, o).error() == errc::invalid_argument);
    o = ok;
    o.kv_blocks = max_pool_ids + 1;
    CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, o).error() == errc::out_of_range);
    o = ok;
    o.max_sequences = max_pool_ids + 1;
    CHECK(runtime_prefix_cache<turns_policy>::create(hybrid, o).error() == errc::out_of_range);
  }
}

namespace {

/// Drives a typed and a runtime cache with the same random calls and compares every result.
template <class Model, class Policy>
void run_both(std::uint32_t seed, const cache_options& o) {
  auto typed = prefix_cache<Model, Policy>::create(o);
  auto runtime = runtime_prefix_cache<Policy>::create(model_config::of<Model>(), o);
  REQUIRE(typed.has_value());
  REQUIRE(runtime.has_value());
  std::mt19937 rng(seed);
  auto below = [&](std::uint32_t n) { return static_cast<std::uint32_t>(rng() % n); };
  std::vector<std::vector<token_id>> prompts;
  std::vector<seq_id> live;
  std::vector<std::uint32_t> computed;
  std::uint64_t admitted = 0, compared = 0;
  for (int op = 0; op < 3000; ++op) {
    const std::uint32_t kind = live.size() >= 6 ? 6 : below(10); // keep sequence records free
    if (kind < 4 || live.empty()) {
      std::vector<token_id> p;
      if (!prompts.empty() && below(2) == 0) p = prompts[below(static_cast<std::uint32_t>(prompts.size()))];
      if (p.size() > 300) p.resize(below(300));
      const std::uint32_t extra = 1 + below(200);
      for (std::uint32_t k = 0; k < extra; ++k) p.push_back(static_cast<token_id>(below(4)));
      const seq_id id = 1000 + static_cast<seq_id>(op);
      auto a = typed->admit(id, p);
      auto b = runtime->admit(id, p);
      REQUIRE(a.has_value() == b.has_value());
      if (!a) {
        CHECK(a.error() == b.error());
        CHECK(typed->metrics() == runtime->metrics());
        ++compared;
        continue;
      }
      CHECK(std::equal(a->block_table.begin(), a->block_table.end(), b->block_table.begin(), b->block_table.end()));
      CHECK(std::equal(a->captures.begin(), a->captures.end(), b->captures.begin(), b->captures.end()));
      CHECK(a->shared_blocks == b->shared_blocks);
      CHECK(a->kv_matched_tokens == b->kv_matched_tokens);
      CHECK(a->usable_tokens == b->usable_tokens);
      CHECK(a->tokens_lost_to_missing_snapshot == b->tokens_lost_to_missing_snapshot);
      CHECK(a->restore_slot == b->restore_slot);
      CHECK(a->restore_exactness == b->restore_exactness);
      std::vector<std::uint32_t> written;
      for (const capture_point& c : a->captures)
        if (below(3) != 0) written.push_back(static_cast<std::uint32_t>(c.position));
      const auto n = static_cast<std::uint32_t>(p.size());
      REQUIRE(typed->commit(id, n, written).has_value());
      REQUIRE(runtime->commit(id, n, written).has_value());
      prompts.push_back(p);
      live.push_back(id);
      computed.push_back(n);
      ++admitted;
    } else if (kind < 6) {
      const std::uint32_t i = below(static_cast<std::uint32_t>(live.size()));
      if (computed[i] > 350) continue;
      std::vector<token_id> more(1 + below(20), static_cast<token_id>(7 + below(3)));
      auto a = typed->extend(live[i], more);
      auto b = runtime->extend(live[i], more);
      REQUIRE(a.has_value() == b.has_value());
      if (!a) {
        ++compared;
        continue;
      }
      CHECK(std::equal(a->new_blocks.begin(), a->new_blocks.end(), b->new_blocks.begin(), b->new_blocks.end()));
      computed[i] += static_cast<std::uint32_t>(more.size());
      REQUIRE(typed->commit(live[i], computed[i]).has_value());
      REQUIRE(runtime->commit(live[i], computed[i]).has_value());
    } else if (kind < 9) {
      const std::uint32_t i = below(static_cast<std::uint32_t>(live.size()));
      auto a = typed->finish(live[i]);
      auto b = runtime->finish(live[i]);
      REQUIRE(a.has_value());
      REQUIRE(b.has_value());
      CHECK(a->capture == b->capture);
      live.erase(live.begin() + i);
      computed.erase(computed.begin() + i);
      REQUIRE(typed->step_complete(typed->current_epoch()).has_value());
      REQUIRE(runtime->step_complete(runtime->current_epoch()).has_value());
    } else {
      REQUIRE(typed->step_complete(typed->current_epoch()).has_value());
      REQUIRE(runtime->step_complete(runtime->current_epoch()).has_value());
    }
    CHECK(typed->metrics() == runtime->metrics());
    ++compared;
  }
  CHECK(typed->check_invariants().has_value());
  CHECK(runtime->check_invariants().has_value());
  CHECK(admitted > 400);
  CHECK(compared > 2500);
  if constexpr (policy::policy_traits<Policy>::skips_prefill) CHECK(typed->metrics().usable_tokens > 0);
  CHECK(typed->metrics().blocks_shared > 0);
}

} // namespace

TEST_CASE_TEMPLATE("the typed and the runtime cache make the same plans and metrics, call for call", Policy,
                   policy::snapshot_restore<>, policy::memory_only,
                   policy::snapshot_restore<policy::accept_prefill_exact,
                                            policy::capture<policy::every<64>, policy::branch_point>>) {
  run_both<small_hybrid, Policy>(7, {.kv_blocks = 96, .max_sequences = 8,
                                     .snapshot_budget_bytes = 6 * small_hybrid::bytes_per_snapshot,
                                     .hasher_seed = 11});
}

TEST_CASE("the typed and the runtime cache agree for block_sharing") {
  run_both<attn_model, policy::block_sharing>(9, {.kv_blocks = 96, .max_sequences = 8, .hasher_seed = 11});
}
