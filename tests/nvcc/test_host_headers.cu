// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The host library compiled by nvcc (-std=c++20), as an engine's .cu translation units include it: every
// preset, model_config, and typed prefix caches driven through create / admit / commit. Needs no GPU: nothing
// here launches a kernel, so it runs (label `host`) on any machine where CUDA is enabled.
#include <reprise/reprise.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

using namespace reprise;

namespace {

std::vector<token_id> tokens(std::uint32_t n) {
  std::vector<token_id> v(n);
  for (std::uint32_t i = 0; i < n; ++i) v[i] = static_cast<token_id>(i % 1000 + 1);
  return v;
}

// Admits a prompt, commits it (with every planned capture written), then admits the same prompt again and
// returns the second plan's skip.
template <class Cache>
std::uint32_t repeat_skip(std::uint32_t prompt_length, std::size_t host_kv_bytes = 0) {
  auto made = Cache::create({.kv_blocks = 256,
                             .max_sequences = 4,
                             .snapshot_budget_bytes = std::size_t{4} * Cache::model_type::bytes_per_snapshot,
                             .hasher_seed = 7,
                             .host_kv_budget_bytes = host_kv_bytes});
  REQUIRE(made.has_value());
  Cache& c = *made;
  const std::vector<token_id> prompt = tokens(prompt_length);
  auto first = c.admit(1, prompt);
  REQUIRE(first.has_value());
  std::vector<std::uint32_t> written;
  for (const capture_point& p : first->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  REQUIRE(c.commit(1, prompt_length, written).has_value());
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto second = c.admit(2, prompt);
  REQUIRE(second.has_value());
  CHECK(c.check_invariants().has_value());
  return second->usable_tokens;
}

} // namespace

static_assert(presets::nemotron_h_8b::alignment == 128); // the checkpoint's chunk_size
static_assert(presets::nemotron_h_8b::bytes_per_snapshot == 102137856);
static_assert(presets::qwen3_next_80b::alignment == 64);
static_assert(presets::falcon_h1_7b::alignment == 128);
static_assert(presets::llama3_8b::is_attention_only);

TEST_CASE("presets and model_config agree under nvcc") {
  const model_config c = model_config::of<presets::qwen3_next_80b>();
  CHECK(c.bytes_per_snapshot() == presets::qwen3_next_80b::bytes_per_snapshot);
  CHECK(c.alignment() == 64);
  CHECK(model_config::of<presets::falcon_h1_7b>().alignment() == 128);
  CHECK(model_config::of<presets::llama3_8b>().has_recurrent() == false);
  auto made = model_config::make({{kv_shape{.kv_heads = 8, .head_dim = 128}, 4},
                                  {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8}, 24}});
  REQUIRE(made.has_value());
  CHECK(made->bytes_per_snapshot() == presets::nemotron_h_8b::bytes_per_snapshot);
  CHECK(model_config::make({{kv_shape{.kv_heads = 0xffffffffu, .head_dim = 0xffffffffu}, 1}}).error() ==
        errc::out_of_range);
}

TEST_CASE("typed prefix caches under nvcc: create, admit, commit, admit again") {
  CHECK(repeat_skip<prefix_cache<presets::llama3_8b, policy::block_sharing>>(100) == 96);
  CHECK(repeat_skip<prefix_cache<presets::nemotron_h_8b, policy::snapshot_restore<>>>(600) == 512);
  CHECK(repeat_skip<prefix_cache<presets::qwen3_next_80b,
                                 policy::snapshot_restore<policy::capture<policy::every<128>>,
                                                          policy::accept_prefill_exact>>>(300) == 256);
  CHECK(repeat_skip<prefix_cache<presets::falcon_h1_7b, policy::memory_only>>(300) == 0);
}

TEST_CASE("a runtime-configured cache under nvcc: built from a model_config, restores at a turn end") {
  auto config = model_config::make({{kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 32}, 4},
                                    {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8}, 24}});
  REQUIRE(config.has_value());
  auto made = runtime_prefix_cache<policy::snapshot_restore<>>::create(
      *config, {.kv_blocks = 64, .snapshot_budget_bytes = 2 * config->bytes_per_snapshot(), .hasher_seed = 3});
  REQUIRE(made.has_value());
  auto& c = *made;
  REQUIRE(c.admit(1, tokens(100)).has_value());
  REQUIRE(c.commit(1, 100).has_value());
  auto f = c.finish(1);
  REQUIRE(f.has_value());
  CHECK(f->capture.position == 100);
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  std::vector<token_id> next = tokens(100);
  next.push_back(7);
  next.push_back(8);
  auto p = c.admit(2, next);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 100);
  CHECK(p->copy_src != no_block);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("the chat and strict presets under nvcc: branch blocks, decode checkpoints, prefill-exact restores") {
  CHECK(repeat_skip<prefix_cache<presets::nemotron_h_8b, policy::strict>>(600) == 512);
  auto config = model_config::make({{kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 32}, 4},
                                    {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8}, 24}});
  REQUIRE(config.has_value());
  auto made = runtime_prefix_cache<policy::chat>::create(*config, {.kv_blocks = 64,
                                                                   .snapshot_budget_bytes = 4 * config->bytes_per_snapshot(),
                                                                   .hasher_seed = 3,
                                                                   .decode_checkpoint_interval = 256});
  REQUIRE(made.has_value());
  auto& c = *made;
  REQUIRE(c.admit(1, tokens(100)).has_value());
  REQUIRE(c.commit(1, 100).has_value());
  auto e = c.extend(1, tokens(156)); // to 256: a decode checkpoint
  REQUIRE(e.has_value());
  REQUIRE(e->captures.size() == 1);
  CHECK(e->captures[0].position == 256);
  REQUIRE(c.commit(1, 256, std::vector<std::uint32_t>{256}).has_value());
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  // A prompt sharing the first 80 tokens branches there: a capture at 64 (the last shared block), off the grid.
  std::vector<token_id> other = tokens(80);
  for (token_id t = 0; t < 40; ++t) other.push_back(5000 + t);
  auto p = c.admit(2, other);
  REQUIRE(p.has_value());
  REQUIRE(p->captures.size() == 1);
  CHECK(p->captures[0].position == 64);
  CHECK(p->restore_exactness == exactness::decode_continuation);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("host and remote tiers under nvcc: offload, prefetch and onboard plan the same moves") {
  using tiered = prefix_cache<presets::nemotron_h_8b, policy::strict, xxh3_hasher,
                              policy::tiers<policy::host_tier, policy::remote_tier>>;
  struct counting_keyer {
    content_key root(const extra_keys&) const noexcept { return key(1); }
    content_key chain(const content_key& p, std::span<const token_id> t, const media_digest&) const noexcept {
      content_key k = p;
      k.bytes[31] = static_cast<std::uint8_t>(k.bytes[31] + 1);
      k.bytes[30] = static_cast<std::uint8_t>(t.empty() ? 0 : t[0]);
      return k;
    }
    content_key snapshot(const content_key& b, std::uint32_t position) const noexcept {
      content_key k = b;
      k.bytes[0] = static_cast<std::uint8_t>(position >> 8);
      return k;
    }
    content_key turn_end(const content_key& b, std::uint32_t boundary) const noexcept {
      content_key k = b;
      k.bytes[1] = static_cast<std::uint8_t>(boundary >> 8);
      return k;
    }
    static content_key key(std::uint8_t v) {
      content_key k;
      k.bytes[0] = v;
      return k;
    }
  } keys;
  static_assert(content_key_source<counting_keyer>);
  using model = presets::nemotron_h_8b;
  auto made = tiered::create({.kv_blocks = 40,
                              .snapshot_budget_bytes = model::bytes_per_snapshot,
                              .host_kv_budget_bytes = 64 * model::bytes_per_kv_block,
                              .host_snapshot_budget_bytes = 2 * model::bytes_per_snapshot,
                              .remote_keys = &keys});
  REQUIRE(made.has_value());
  auto& c = *made;
  CHECK(c.host_kv_units() == 64);
  CHECK(repeat_skip<prefix_cache<presets::nemotron_h_8b, policy::strict, xxh3_hasher, policy::tiers<policy::host_tier>>>(
            600, 64 * model::bytes_per_kv_block) == 512);
  auto plan = c.prefetch(tokens(600));
  REQUIRE(plan.has_value());
  CHECK(plan->blocks > 0); // nothing cached anywhere: the whole chain is asked of the store
  for (const remote_fetch& f : plan->fetches) REQUIRE(c.fetched(f.item, f.unit, {}).has_value());
  CHECK(c.metrics().remote_misses == plan->fetches.size());
  CHECK(c.check_invariants().has_value());
}
