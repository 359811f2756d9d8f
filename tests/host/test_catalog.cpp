// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The tables front ends read: the metric list (metrics.hpp), the configuration rules (config_rules.hpp: each
// reachable, each with the errc `create` returns) and the named policies and presets (catalog.hpp).
#include <reprise/catalog.hpp>
#include <reprise/reprise.hpp>

#include <doctest/doctest.h>

#include <cstddef>
#include <set>
#include <string>
#include <string_view>
#include <type_traits>

using namespace reprise;

namespace {

using host_tiers = policy::tiers<policy::host_tier>;
using remote_tiers = policy::tiers<policy::host_tier, policy::remote_tier>;

const cache_geometry hybrid = geometry_of<presets::nemotron_h_8b>();
const cache_geometry attention = geometry_of<presets::llama3_8b>();

/// Options that break no rule for a snapshot policy on `hybrid`.
cache_options valid_options() {
  cache_options o;
  o.kv_blocks = 64;
  o.snapshot_budget_bytes = 4 * hybrid.bytes_per_snapshot;
  o.capture_interval = hybrid.alignment;
  return o;
}

/// A keyer that is never called: `check_config` only looks whether one is set.
struct unused_keyer {
  content_key root(const extra_keys&) const noexcept { return {}; }
  content_key chain(const content_key&, std::span<const token_id>, const media_digest&) const noexcept { return {}; }
  content_key snapshot(const content_key&, std::uint32_t) const noexcept { return {}; }
  content_key turn_end(const content_key&, std::uint32_t) const noexcept { return {}; }
};
static_assert(content_key_source<unused_keyer>);

/// The rules `rule_of` has seen broken.
std::set<config_rule> seen;

/// `check_config` of policy `P` and tiers `T` on geometry `g` with `valid_options()` changed by `change`, and
/// the same answer from the core's `validate` (what `create` returns).
template <class P, class T = policy::tiers<>, class Change>
config_rule rule_of(const cache_geometry& g, Change&& change) {
  cache_options o = valid_options();
  change(o);
  const config_rule r = check_config<P, T>(g, o);
  CHECK(detail::cache_core<P, xxh3_hasher, T>::validate(g, o) == to_errc(r));
  seen.insert(r);
  return r;
}

} // namespace

TEST_CASE("metrics: one list gives the struct, the names and the kinds") {
  static_assert(metric_count == 49);
  static_assert(metric_table.size() == static_cast<std::size_t>(metric::remote_turn_end_hits) + 1);
  static_assert(metric_info_of(metric::blocks_free).name == "blocks_free");
  std::set<std::string_view> names;
  std::set<std::string_view> gauges;
  for (const metric_info& m : metric_table) {
    CHECK(names.insert(m.name).second);
    CHECK(!m.doc.empty());
    if (m.kind == metric_kind::gauge) gauges.insert(m.name);
  }
  CHECK(gauges == std::set<std::string_view>{"live_sequences", "blocks_referenced", "blocks_cached", "blocks_free",
                                             "tail_blocks", "snapshots_held", "snapshot_bytes_held",
                                             "host_blocks_held", "host_snapshots_held"});
  // The visitor walks the members in declaration order, and `metric_value` reads the member it names.
  cache_metrics v;
  std::size_t visited = 0, last_offset = 0;
  for_each_metric([&](metric id, auto member) {
    CHECK(static_cast<std::size_t>(id) == visited++);
    const auto offset = static_cast<std::size_t>(reinterpret_cast<const char*>(&(v.*member)) -
                                                 reinterpret_cast<const char*>(&v));
    CHECK((visited == 1 || offset > last_offset));
    last_offset = offset;
    v.*member = static_cast<std::remove_reference_t<decltype(v.*member)>>(visited);
  });
  CHECK(visited == metric_count);
  CHECK(metric_value(v, metric::lookups) == 1);
  CHECK(metric_value(v, metric::blocks_free) == v.blocks_free);
  CHECK(metric_value(v, metric::remote_turn_end_hits) == metric_count);
}

TEST_CASE("config rules: every rule is reachable, and create returns its errc") {
  using strict = policy::strict;
  using every_interval = catalog::policies::snapshot_interval;
  using checkpoints = policy::snapshot_restore<policy::capture<policy::decode_checkpoints>, policy::accept_any>;
  using bad_every = policy::snapshot_restore<policy::capture<policy::every<96>>>;
  const unused_keyer keyer;
  cache_geometry by_hand = hybrid;
  by_hand.alignment = 24;
  cache_geometry no_snapshot_bytes = hybrid;
  no_snapshot_bytes.bytes_per_snapshot = 0;
  cache_geometry odd_block = attention;
  odd_block.block_size = 12;
  cache_geometry no_kv = hybrid;
  no_kv.bytes_per_kv_block = 0;
  auto none = [](cache_options&) {};

  CHECK(rule_of<strict>(hybrid, none) == config_rule::ok);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.max_sequences = 0; }) == config_rule::pool_size_zero);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.kv_blocks = max_pool_ids + 1; }) ==
        config_rule::pool_size_over_ids);
  CHECK(rule_of<policy::block_sharing>(odd_block, none) == config_rule::block_size_unsupported);
  CHECK(rule_of<strict>(by_hand, none) == config_rule::alignment_off_block_grid);
  CHECK(rule_of<policy::block_sharing>(hybrid, none) == config_rule::block_sharing_on_recurrent);
  CHECK(rule_of<policy::memory_only>(hybrid, [](cache_options& o) { o.share_in_step = true; }) ==
        config_rule::share_in_step_needs_block_sharing);
  CHECK(rule_of<strict>(attention, none) == config_rule::snapshot_restore_without_recurrent);
  CHECK(rule_of<strict>(no_snapshot_bytes, none) == config_rule::snapshot_bytes_zero);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.snapshot_budget_bytes = 1; }) ==
        config_rule::snapshot_budget_below_one_snapshot);
  CHECK(rule_of<bad_every>(hybrid, none) == config_rule::every_interval_misaligned);
  CHECK(rule_of<every_interval>(hybrid, [](cache_options& o) { o.capture_interval = 0; }) ==
        config_rule::capture_interval_misaligned);
  CHECK(rule_of<checkpoints>(hybrid, [](cache_options& o) { o.decode_checkpoint_interval = 64; }) ==
        config_rule::decode_checkpoint_interval_misaligned);
  CHECK(rule_of<checkpoints>(hybrid, [](cache_options& o) { o.decode_checkpoints_per_sequence = 0; }) ==
        config_rule::decode_checkpoints_per_sequence_zero);
  // cache_core alone still refuses what prefix_cache does not compile.
  CHECK(rule_of<policy::memory_only, host_tiers>(hybrid, none) == config_rule::memory_only_host_tier);
  CHECK(rule_of<policy::block_sharing, host_tiers>(attention, [](cache_options& o) {
          o.share_in_step = true;
          o.host_kv_budget_bytes = std::size_t{1} << 30;
        }) == config_rule::share_in_step_host_tier);
  CHECK(rule_of<strict, host_tiers>(no_kv, none) == config_rule::host_tier_without_kv);
  CHECK(rule_of<strict, host_tiers>(hybrid, none) == config_rule::host_kv_budget_below_one_block);
  CHECK(rule_of<policy::block_sharing, host_tiers>(attention, [](cache_options& o) {
          o.host_kv_budget_bytes = std::size_t{1} << 30;
          o.host_snapshot_budget_bytes = 1;
        }) == config_rule::host_snapshots_without_snapshot_restore);
  CHECK(rule_of<strict, host_tiers>(hybrid, [](cache_options& o) {
          o.host_kv_budget_bytes = std::size_t{1} << 30;
          o.host_snapshot_budget_bytes = 1;
        }) == config_rule::host_snapshot_budget_below_one_snapshot);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.host_kv_budget_bytes = 1; }) ==
        config_rule::host_budget_without_host_tier);
  CHECK(rule_of<strict, remote_tiers>(hybrid, [](cache_options& o) {
          o.host_kv_budget_bytes = std::size_t{1} << 30;
        }) == config_rule::remote_keys_missing);
  CHECK(rule_of<strict, remote_tiers>(hybrid, [&](cache_options& o) {
          o.host_kv_budget_bytes = std::size_t{1} << 30;
          o.remote_keys = &keyer;
          o.remote_snapshot_candidates = 0;
        }) == config_rule::remote_snapshot_candidates_zero);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.remote_write_through = true; }) ==
        config_rule::remote_options_without_remote_tier);
  CHECK(rule_of<strict>(hybrid, [](cache_options& o) { o.remote_turn_ends = true; }) ==
        config_rule::remote_options_without_remote_tier);
  CHECK(rule_of<strict, remote_tiers>(hybrid, [&](cache_options& o) {
          o.host_kv_budget_bytes = std::size_t{1} << 30;
          o.remote_keys = &keyer;
          o.remote_turn_ends = true;
        }) == config_rule::remote_turn_ends_without_turn_ends);
  CHECK(seen.size() == config_rule_table.size()); // every rule, and ok
}

TEST_CASE("config rules: names, errcs and messages are one table") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < config_rule_table.size(); ++i) {
    const auto r = static_cast<config_rule>(i);
    CHECK(names.insert(to_string(r)).second);
    CHECK(!rule_message(r).empty());
    CHECK((r == config_rule::ok) == (to_errc(r) == errc{}));
    CHECK(describe(r).find(rule_message(r)) != std::string::npos);
  }
  // The messages name the rule's subject and the fix, not only the errc (adopters asked for both).
  CHECK(describe(config_rule::block_sharing_on_recurrent) ==
        "block_sharing_on_recurrent (unsupported_config): " REPRISE_CONFIG_RULE_TEXT(block_sharing_on_recurrent));
  CHECK(rule_message(config_rule::block_sharing_on_recurrent).find("policy::snapshot_restore") != std::string::npos);
  CHECK(rule_message(config_rule::block_size_unsupported).find("8, 16, 32, 64, 128, 256") != std::string::npos);
}

TEST_CASE("config rules: prefix_cache::check is create's answer, typed or at run time") {
  using typed = prefix_cache<presets::nemotron_h_8b, policy::strict>;
  using runtime = runtime_prefix_cache<policy::strict>;
  const model_config m = model_config::of<presets::nemotron_h_8b>();
  static_assert(typed::check({.kv_blocks = 8}) == config_rule::snapshot_budget_below_one_snapshot);
  const cache_options o = valid_options();
  CHECK(typed::check(o) == config_rule::ok);
  CHECK(runtime::check(m, o) == config_rule::ok);
  CHECK(runtime::check(m, {.kv_blocks = 8}) == config_rule::snapshot_budget_below_one_snapshot);
  CHECK(runtime::create(m, {.kv_blocks = 8}).error() == errc::budget_too_small);
  CHECK(runtime_prefix_cache<policy::block_sharing>::check(m, o) == config_rule::block_sharing_on_recurrent);
}

TEST_CASE("model rules: a block size off the chunk grid says so") {
  // An attention block of 12 tokens beside a 64-token chunk: not "misaligned" alone, but the rule and its fix.
  const layer_spec groups[] = {{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 12}, 1},
                               {mamba2_shape{.heads = 1, .head_dim = 8, .state_dim = 8, .chunk = 64}, 1}};
  const model_facts f = model_config::facts_of(groups);
  CHECK(f.error == model_error::alignment_too_coarse);
  CHECK(f.to_errc() == errc::misaligned);
  CHECK(to_string(f.error) == "alignment_too_coarse");
  CHECK(rule_message(f.error).find("divide the largest") != std::string_view::npos);
  CHECK(model_config::make({groups[0], groups[1]}).error() == errc::misaligned);
}

TEST_CASE("catalog: named policies and presets") {
  std::set<std::string_view> names;
  for (std::size_t i = 0; i < catalog::policy_table.size(); ++i) {
    const auto id = static_cast<catalog::policy_id>(i);
    const catalog::policy_entry& e = catalog::entry(id);
    CHECK(names.insert(e.name).second);
    CHECK(catalog::find_policy(e.name) == id);
    CHECK(!e.doc.empty());
    catalog::visit_policy(id, [&](auto tag) {
      using P = typename decltype(tag)::type;
      CHECK(e.restores_snapshots == policy::policy_traits<P>::restores_snapshots);
      CHECK(e.takes_host_tier == takes_host_tier<P>);
      CHECK(e.summary.empty() == !e.restores_snapshots);
    });
  }
  CHECK(!catalog::find_policy("snapshot_restore")); // a C++ template's name, not a named policy
  // One name per type: `strict` is the only name of policy::strict.
  std::size_t strict_names = 0;
  for (std::size_t i = 0; i < catalog::policy_table.size(); ++i)
    catalog::visit_policy(static_cast<catalog::policy_id>(i), [&](auto tag) {
      strict_names += std::is_same_v<typename decltype(tag)::type, policy::strict>;
    });
  CHECK(strict_names == 1);
  // "memory_only has no host tier" is one fact: the catalog's flag, the rule and the typed cache agree.
  CHECK_FALSE(catalog::entry(catalog::policy_id::memory_only).takes_host_tier);
  static_assert(!takes_host_tier<policy::memory_only> && takes_host_tier<policy::chat>);

  std::set<std::string_view> models;
  for (std::size_t i = 0; i < catalog::preset_table.size(); ++i) {
    const auto id = static_cast<catalog::preset_id>(i);
    CHECK(models.insert(catalog::entry(id).name).second);
    CHECK(catalog::find_preset(catalog::entry(id).name) == id);
    CHECK(catalog::entry(id).active_params > 0);
  }
  CHECK(catalog::config_of(catalog::preset_id::nemotron_h_8b).bytes_per_snapshot() ==
        presets::nemotron_h_8b::bytes_per_snapshot);
  CHECK(catalog::entry(catalog::preset_id::nemotron_h_8b).name == "nemotron-h-8b");
  CHECK(catalog::entry(catalog::preset_id::nemotron_h_8b).type_name == "nemotron_h_8b");
}
