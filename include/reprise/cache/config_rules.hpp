// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Every rule a cache's configuration (model geometry, policy, tiers, options) must satisfy, each with one
/// identity: a `config_rule` value that gives its `errc`, its message and, for the rules a compile-time model
/// already decides, the `static_assert` text of the typed cache. `check_config` applies them in one order for
/// both forms; front ends (the Python package, reprise-sim) print `rule_message` / `describe` instead of
/// words of their own.
///
/// A rule's message says what is wrong and what to change. It is a string literal macro
/// (`REPRISE_CONFIG_RULE_TEXT(rule)`) because a C++20 `static_assert` takes only a literal: the typed checks and
/// the runtime table expand the same macro, so the text exists once.

#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <type_traits>

/// The message of rule `rule` (a string literal).
#define REPRISE_CONFIG_RULE_TEXT(rule) REPRISE_CONFIG_RULE_TEXT_##rule

#define REPRISE_CONFIG_RULE_TEXT_ok "the configuration satisfies every rule"
#define REPRISE_CONFIG_RULE_TEXT_pool_size_zero                                                                    \
  "cache_options::kv_blocks and max_sequences must be at least 1: give the cache a KV pool and room for a sequence"
#define REPRISE_CONFIG_RULE_TEXT_pool_size_over_ids                                                                \
  "cache_options::kv_blocks and max_sequences must be at most reprise::max_pool_ids (2^31 - 1), as block and "     \
  "sequence ids are non-negative int32: lower them"
#define REPRISE_CONFIG_RULE_TEXT_block_size_unsupported                                                            \
  "the model's block size must be one of 8, 16, 32, 64, 128, 256 (reprise::supported_block_sizes), the sizes the " \
  "cache's hot loops are built for: set every attention layer's block_size to one of them"
#define REPRISE_CONFIG_RULE_TEXT_alignment_off_block_grid                                                          \
  "the geometry's alignment unit must be a positive multiple of its block size (lcm of the block and every chunk " \
  "size): build the cache_geometry with geometry_of(model), not by hand"
#define REPRISE_CONFIG_RULE_TEXT_block_sharing_on_recurrent                                                        \
  "policy::block_sharing skips prefill, but this model has recurrent (Mamba2 / gated-delta) layers whose state "   \
  "depends on every token. Use policy::snapshot_restore<...> (skip up to a recurrent-state snapshot) or "          \
  "policy::memory_only (share KV, skip nothing)."
#define REPRISE_CONFIG_RULE_TEXT_share_in_step_needs_block_sharing                                                 \
  "cache_options::share_in_step applies to policy::block_sharing only (attention-only models): a recurrent "       \
  "state's prefill cannot be skipped without a snapshot. Leave share_in_step off with this policy."
#define REPRISE_CONFIG_RULE_TEXT_snapshot_restore_without_recurrent                                                \
  "policy::snapshot_restore needs recurrent layers to snapshot; an attention-only model uses policy::block_sharing."
#define REPRISE_CONFIG_RULE_TEXT_snapshot_bytes_zero                                                               \
  "policy::snapshot_restore needs the geometry's bytes_per_snapshot (the snapshot budget's unit) to be positive: " \
  "build the cache_geometry with geometry_of(model), not by hand"
#define REPRISE_CONFIG_RULE_TEXT_snapshot_budget_below_one_snapshot                                                \
  "cache_options::snapshot_budget_bytes must hold at least one snapshot of the model's recurrent layers "          \
  "(bytes_per_snapshot), never a silent 0 % hit rate: give about one snapshot per live conversation"
#define REPRISE_CONFIG_RULE_TEXT_every_interval_misaligned                                                         \
  "a policy::every<I> capture interval must be a multiple of the model's alignment unit Model::alignment = "       \
  "lcm(block size, every chunk size); snapshots elsewhere would not be bit-exact with a cold chunked prefill. "     \
  "Round I to a multiple of Model::alignment."
#define REPRISE_CONFIG_RULE_TEXT_capture_interval_misaligned                                                       \
  "policy::every_interval captures every cache_options::capture_interval tokens, which must be a positive "        \
  "multiple of the model's alignment unit (lcm of the block size and every chunk size); snapshots elsewhere "      \
  "would not be bit-exact with a cold chunked prefill. Round it to a multiple of the alignment."
#define REPRISE_CONFIG_RULE_TEXT_decode_checkpoint_interval_misaligned                                             \
  "policy::decode_checkpoints: cache_options::decode_checkpoint_interval must be a multiple of the model's "       \
  "alignment unit (0: no checkpoints). Round it to a multiple of the alignment."
#define REPRISE_CONFIG_RULE_TEXT_decode_checkpoints_per_sequence_zero                                              \
  "policy::decode_checkpoints: cache_options::decode_checkpoints_per_sequence must be at least 1 (each sequence "  \
  "keeps its newest that many checkpoints)"
#define REPRISE_CONFIG_RULE_TEXT_memory_only_host_tier                                                             \
  "policy memory_only takes no host tier: it skips no prefill, so a block brought back from host memory would "    \
  "save nothing"
#define REPRISE_CONFIG_RULE_TEXT_share_in_step_host_tier                                                           \
  "cache_options::share_in_step is not supported with policy::host_tier: turn share_in_step off or use "           \
  "policy::tiers<>"
#define REPRISE_CONFIG_RULE_TEXT_host_tier_without_kv                                                              \
  "policy::host_tier keeps KV blocks in host memory, and this model has none (bytes_per_kv_block is 0: no "        \
  "attention layer). Use policy::tiers<> with it."
#define REPRISE_CONFIG_RULE_TEXT_host_kv_budget_below_one_block                                                    \
  "policy::host_tier: cache_options::host_kv_budget_bytes must hold at least one KV block (bytes_per_kv_block); "  \
  "host snapshots are found through their KV blocks, so they need it too"
#define REPRISE_CONFIG_RULE_TEXT_host_snapshots_without_snapshot_restore                                           \
  "cache_options::host_snapshot_budget_bytes keeps snapshots, which only policy::snapshot_restore takes: leave it " \
  "at 0 with this policy"
#define REPRISE_CONFIG_RULE_TEXT_host_snapshot_budget_below_one_snapshot                                           \
  "policy::host_tier: a non-zero cache_options::host_snapshot_budget_bytes must hold at least one snapshot "       \
  "(bytes_per_snapshot); 0 keeps no snapshot in host memory"
#define REPRISE_CONFIG_RULE_TEXT_host_budget_without_host_tier                                                     \
  "cache_options::host_kv_budget_bytes and host_snapshot_budget_bytes need a host tier: instantiate the cache "     \
  "with policy::tiers<policy::host_tier>, or leave them at 0"
#define REPRISE_CONFIG_RULE_TEXT_remote_keys_missing                                                               \
  "policy::remote_tier names what the store holds by content keys: set cache_options::remote_keys (a "             \
  "content_keyer, <reprise/keys/content_key.hpp>)"
#define REPRISE_CONFIG_RULE_TEXT_remote_snapshot_candidates_zero                                                   \
  "policy::remote_tier: cache_options::remote_snapshot_candidates must be at least 1 (snapshots a prefetch asks "  \
  "the store for)"
#define REPRISE_CONFIG_RULE_TEXT_remote_options_without_remote_tier                                                \
  "cache_options::remote_keys, remote_write_through and remote_turn_ends need a remote tier: instantiate the "     \
  "cache with policy::tiers<policy::host_tier, policy::remote_tier>, or leave them unset"
#define REPRISE_CONFIG_RULE_TEXT_remote_turn_ends_without_turn_ends                                                \
  "cache_options::remote_turn_ends puts turn ends in the store, which only a policy that captures them and accepts " \
  "decode continuations takes (policy::chat): leave it off with this policy"

/// Every rule but `ok`, in the order `check_config` applies them: X(rule, errc).
#define REPRISE_CONFIG_RULES(X)                                                                                   \
  X(pool_size_zero, invalid_argument)                                                                             \
  X(pool_size_over_ids, out_of_range)                                                                             \
  X(block_size_unsupported, unsupported_config)                                                                   \
  X(alignment_off_block_grid, misaligned)                                                                         \
  X(block_sharing_on_recurrent, unsupported_config)                                                               \
  X(share_in_step_needs_block_sharing, unsupported_config)                                                        \
  X(snapshot_restore_without_recurrent, unsupported_config)                                                       \
  X(snapshot_bytes_zero, invalid_argument)                                                                        \
  X(snapshot_budget_below_one_snapshot, budget_too_small)                                                         \
  X(every_interval_misaligned, misaligned)                                                                        \
  X(capture_interval_misaligned, misaligned)                                                                      \
  X(decode_checkpoint_interval_misaligned, misaligned)                                                            \
  X(decode_checkpoints_per_sequence_zero, invalid_argument)                                                       \
  X(memory_only_host_tier, unsupported_config)                                                                    \
  X(share_in_step_host_tier, unsupported_config)                                                                  \
  X(host_tier_without_kv, invalid_argument)                                                                       \
  X(host_kv_budget_below_one_block, budget_too_small)                                                             \
  X(host_snapshots_without_snapshot_restore, unsupported_config)                                                  \
  X(host_snapshot_budget_below_one_snapshot, budget_too_small)                                                    \
  X(host_budget_without_host_tier, unsupported_config)                                                            \
  X(remote_keys_missing, invalid_argument)                                                                        \
  X(remote_snapshot_candidates_zero, invalid_argument)                                                            \
  X(remote_options_without_remote_tier, unsupported_config)                                                       \
  X(remote_turn_ends_without_turn_ends, unsupported_config)

namespace reprise {

/// A configuration rule a cache enforces; `ok` when none is broken.
enum class config_rule : std::uint8_t {
  ok = 0,
#define REPRISE_CONFIG_RULE_ENUM(rule, code) rule,
  REPRISE_CONFIG_RULES(REPRISE_CONFIG_RULE_ENUM)
#undef REPRISE_CONFIG_RULE_ENUM
};

struct config_rule_info {
  std::string_view name;    ///< the enumerator's name (`block_sharing_on_recurrent`)
  errc code;                ///< what `create` returns when the rule is broken (`errc{}` for `ok`)
  std::string_view message; ///< what is wrong and what to change; the typed cache's `static_assert` text
};

/// Every rule, indexed by `config_rule` value.
inline constexpr std::array config_rule_table{
    config_rule_info{"ok", errc{}, REPRISE_CONFIG_RULE_TEXT(ok)},
#define REPRISE_CONFIG_RULE_INFO(rule, code) config_rule_info{#rule, errc::code, REPRISE_CONFIG_RULE_TEXT(rule)},
    REPRISE_CONFIG_RULES(REPRISE_CONFIG_RULE_INFO)
#undef REPRISE_CONFIG_RULE_INFO
};

/// The name, errc and message of `r`.
constexpr const config_rule_info& rule_info(config_rule r) noexcept {
  const auto i = static_cast<std::size_t>(r);
  return config_rule_table[i < config_rule_table.size() ? i : 0];
}
/// The errc `prefix_cache::create` returns for a broken rule (`errc{}` for `ok`).
constexpr errc to_errc(config_rule r) noexcept { return rule_info(r).code; }
/// The rule's stable name (`"block_sharing_on_recurrent"`).
constexpr std::string_view to_string(config_rule r) noexcept { return rule_info(r).name; }
/// What is wrong and what to change, the same words as the typed cache's `static_assert`.
constexpr std::string_view rule_message(config_rule r) noexcept { return rule_info(r).message; }
/// "<rule> (<errc>): <message>", the form front ends print.
inline std::string describe(config_rule r) {
  std::string s(to_string(r));
  if (r != config_rule::ok) s.append(" (").append(to_string(to_errc(r))).append(")");
  return s.append(": ").append(rule_message(r));
}

/// Whether a cache with policy `Policy` may keep tiers below the GPU (`policy::tiers<policy::host_tier, ...>`):
/// only a policy that skips prefill gains from bringing a block back, so `policy::memory_only` takes none.
template <class Policy>
inline constexpr bool takes_host_tier = policy::policy_traits<Policy>::skips_prefill;

namespace detail {
template <class Policy>
constexpr bool captures_and_accepts_turn_ends() noexcept {
  using traits = policy::policy_traits<Policy>;
  if constexpr (traits::restores_snapshots) return traits::capture::at_turn_end && traits::accepts_decode_continuation;
  else return false;
}
} // namespace detail

/// Whether a cache with policy `Policy` keeps turn ends it restores (`policy::chat`), so that it may put them
/// in the remote store (`cache_options::remote_turn_ends`).
template <class Policy>
inline constexpr bool takes_turn_ends = detail::captures_and_accepts_turn_ends<Policy>();

namespace detail {

// The rules a compile-time model decides, as predicates shared by `check_config` and the typed checks below.
template <class Policy>
constexpr bool breaks_block_sharing_on_recurrent(const cache_geometry& g) noexcept {
  return std::is_same_v<Policy, policy::block_sharing> && g.has_recurrent;
}
template <class Policy>
constexpr bool breaks_snapshot_restore_without_recurrent(const cache_geometry& g) noexcept {
  return policy::policy_traits<Policy>::restores_snapshots && !g.has_recurrent;
}
template <class Policy>
constexpr bool breaks_every_interval_misaligned(const cache_geometry& g) noexcept {
  if constexpr (policy::policy_traits<Policy>::restores_snapshots)
    return !policy::policy_traits<Policy>::capture::intervals_aligned(g.alignment);
  else return false;
}
template <class Policy, class Tiers>
constexpr bool breaks_memory_only_host_tier() noexcept {
  return policy::tier_traits<Tiers>::host && !takes_host_tier<Policy>;
}

} // namespace detail

/// The first rule that geometry `g` and options `o` break for a cache with policy `Policy` and tiers `Tiers`,
/// or `config_rule::ok`. `prefix_cache::create` fails with `to_errc` of it; `prefix_cache::check` returns it.
/// Complexity: O(1).
template <class Policy, class Tiers = policy::tiers<>>
constexpr config_rule check_config(const cache_geometry& g, const cache_options& o) noexcept {
  using traits = policy::policy_traits<Policy>;
  using rule = config_rule;
  constexpr bool restores = traits::restores_snapshots;
  constexpr bool has_host = policy::tier_traits<Tiers>::host;
  if (o.kv_blocks == 0 || o.max_sequences == 0) return rule::pool_size_zero;
  if (o.kv_blocks > max_pool_ids || o.max_sequences > max_pool_ids) return rule::pool_size_over_ids;
  if (!is_supported_block_size(g.block_size)) return rule::block_size_unsupported;
  if (g.alignment == 0 || g.alignment % g.block_size != 0) return rule::alignment_off_block_grid;
  if (detail::breaks_block_sharing_on_recurrent<Policy>(g)) return rule::block_sharing_on_recurrent;
  if (o.share_in_step && !std::is_same_v<Policy, policy::block_sharing>) return rule::share_in_step_needs_block_sharing;
  if (detail::breaks_snapshot_restore_without_recurrent<Policy>(g)) return rule::snapshot_restore_without_recurrent;
  if constexpr (restores) {
    if (g.bytes_per_snapshot == 0) return rule::snapshot_bytes_zero;
    if (o.snapshot_budget_bytes / g.bytes_per_snapshot == 0) return rule::snapshot_budget_below_one_snapshot;
    if (detail::breaks_every_interval_misaligned<Policy>(g)) return rule::every_interval_misaligned;
    if (traits::capture::reads_interval && (o.capture_interval == 0 || o.capture_interval % g.alignment != 0))
      return rule::capture_interval_misaligned;
    if (traits::capture::at_decode) {
      if (o.decode_checkpoint_interval % g.alignment != 0) return rule::decode_checkpoint_interval_misaligned;
      if (o.decode_checkpoints_per_sequence == 0) return rule::decode_checkpoints_per_sequence_zero;
    }
  }
  if constexpr (has_host) {
    if (detail::breaks_memory_only_host_tier<Policy, Tiers>()) return rule::memory_only_host_tier;
    if (o.share_in_step) return rule::share_in_step_host_tier;
    if (g.bytes_per_kv_block == 0) return rule::host_tier_without_kv;
    if (o.host_kv_budget_bytes / g.bytes_per_kv_block == 0) return rule::host_kv_budget_below_one_block;
    if (o.host_snapshot_budget_bytes != 0) {
      if (!restores) return rule::host_snapshots_without_snapshot_restore;
      if (o.host_snapshot_budget_bytes / g.bytes_per_snapshot == 0)
        return rule::host_snapshot_budget_below_one_snapshot;
    }
  } else {
    if (o.host_kv_budget_bytes != 0 || o.host_snapshot_budget_bytes != 0) return rule::host_budget_without_host_tier;
  }
  if constexpr (policy::tier_traits<Tiers>::remote) {
    if (o.remote_keys == nullptr) return rule::remote_keys_missing;
    if (o.remote_snapshot_candidates == 0) return rule::remote_snapshot_candidates_zero;
    if (o.remote_turn_ends && !takes_turn_ends<Policy>)
      return rule::remote_turn_ends_without_turn_ends;
  } else {
    if (o.remote_keys != nullptr || o.remote_write_through || o.remote_turn_ends)
      return rule::remote_options_without_remote_tier;
  }
  return rule::ok;
}

namespace detail {

/// The rules a cache type breaks whatever its model and options, as `static_assert`s.
template <class Policy, class Tiers>
struct tier_config_checks {
  static_assert(!breaks_memory_only_host_tier<Policy, Tiers>(),
                "prefix_cache: " REPRISE_CONFIG_RULE_TEXT(memory_only_host_tier));
  static constexpr bool ok = true;
};

/// The rules a compile-time model of geometry `G` breaks with `Policy`, as `static_assert`s: a typed cache
/// fails to compile where `check_config` would fail at run time.
template <class Policy, cache_geometry G>
struct model_config_checks {
  static_assert(!breaks_block_sharing_on_recurrent<Policy>(G),
                "prefix_cache: " REPRISE_CONFIG_RULE_TEXT(block_sharing_on_recurrent));
  static_assert(!breaks_snapshot_restore_without_recurrent<Policy>(G),
                "prefix_cache: " REPRISE_CONFIG_RULE_TEXT(snapshot_restore_without_recurrent));
  static_assert(is_supported_block_size(G.block_size),
                "prefix_cache: " REPRISE_CONFIG_RULE_TEXT(block_size_unsupported));
  static_assert(!breaks_every_interval_misaligned<Policy>(G),
                "prefix_cache: " REPRISE_CONFIG_RULE_TEXT(every_interval_misaligned));
  static constexpr bool ok = true;
};

} // namespace detail

} // namespace reprise
