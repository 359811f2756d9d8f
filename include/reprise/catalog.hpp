// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The names every front end offers: the named policies (a name for a compile-time policy type) and the named
/// model presets. The Python package and reprise-sim build their lists from these two tables, so a name means
/// the same cache everywhere and a name cannot exist in one front end only (tests/host/test_sim_cli.cpp checks
/// reprise-sim's names against these tables, python/tests/test_catalog.py the package's against reprise-sim's).
///
/// It is part of the library, not of a tool, because both front ends include it and an engine that reads a
/// policy or model name from its own configuration can use it too:
///
/// \code
/// const auto id = reprise::catalog::find_policy("chat");             // std::optional<policy_id>
/// reprise::catalog::visit_policy(*id, [](auto policy) {
///   using cache = reprise::runtime_prefix_cache<typename decltype(policy)::type>;
///   // ...
/// });
/// \endcode

#include <reprise/cache/config_rules.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/state/model_config.hpp>
#include <reprise/state/presets.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <type_traits>

namespace reprise::catalog {

namespace detail {
/// The index of the entry of `table` named `name`, as an `Id`. Complexity: O(entries).
template <class Id, class Table>
constexpr std::optional<Id> find_named(const Table& table, std::string_view name) noexcept {
  for (std::size_t i = 0; i < table.size(); ++i)
    if (table[i].name == name) return static_cast<Id>(i);
  return std::nullopt;
}
} // namespace detail

/// The named policies' types, one alias per name.
namespace policies {
using block_sharing = policy::block_sharing;
using memory_only = policy::memory_only;
using snapshot_interval =
    policy::snapshot_restore<policy::capture<policy::every_interval>, policy::accept_prefill_exact>;
using snapshot_prefix_tree =
    policy::snapshot_restore<policy::capture<policy::every_interval, policy::last_aligned, policy::branch_point>,
                             policy::accept_prefill_exact>;
using snapshot_turns = policy::snapshot_restore<>;
using snapshot_all = policy::snapshot_restore<
    policy::capture<policy::every_interval, policy::last_aligned, policy::branch_point, policy::end_of_turn>,
    policy::accept_any>;
using chat = policy::chat;
using strict = policy::strict;
} // namespace policies

/// The models a front end offers policy `P` for: `block_sharing` for attention-only models, every other policy
/// for models with recurrent layers (`memory_only` would also run on an attention-only model, where
/// `block_sharing` does strictly better).
template <class P>
inline constexpr bool for_recurrent_models = !std::is_same_v<P, policy::block_sharing>;

/// The named policies: X(name, summary, doc). `name` is also the alias in `catalog::policies`; `summary` says
/// where it captures in a few words (chart legends: "name (summary)"), empty for the policies without
/// snapshots. The order is the order front ends list them in.
#define REPRISE_NAMED_POLICIES(X)                                                                                  \
  X(block_sharing, "",                                                                                            \
    "attention-only models: share KV blocks and skip their prefill (policy::block_sharing)")                      \
  X(memory_only, "",                                                                                              \
    "hybrid models without a snapshot budget: share matched KV blocks, skip nothing (policy::memory_only)")       \
  X(snapshot_interval, "every I",                                                                                 \
    "snapshot_restore with a capture every `capture_interval` tokens, reusing only prefill-exact state "          \
    "(snapshot_restore<capture<every_interval>, accept_prefill_exact>)")                                          \
  X(snapshot_prefix_tree, "every I, last, branch",                                                                \
    "snapshot_restore with captures every `capture_interval` tokens plus last_aligned and branch_point, reusing " \
    "only prefill-exact state (snapshot_restore<capture<every_interval, last_aligned, branch_point>, "            \
    "accept_prefill_exact>)")                                                                                     \
  X(snapshot_turns, "last, branch, turn end",                                                                     \
    "hybrid models: skip prefill up to the deepest usable snapshot; captures at last_aligned, branch_point and "  \
    "end_of_turn; accepts decode-continuation state (policy::snapshot_restore<>)")                                \
  X(snapshot_all, "every I, last, branch, turn end",                                                              \
    "snapshot_restore with captures every `capture_interval` tokens plus last_aligned, branch_point and "         \
    "end_of_turn, accepting decode-continuation state (snapshot_restore<capture<every_interval, last_aligned, "   \
    "branch_point, end_of_turn>, accept_any>)")                                                                   \
  X(chat, "preset: branch block, turn end; accepts continuations",                                                \
    "the multi-turn chat preset: snapshots at every turn end (any position, the partial block kept), at the "     \
    "last KV block a prompt shares with a different cached continuation (branch_block), at the caller's "         \
    "capture offsets (a system prompt's end) and every `decode_checkpoint_interval` decode tokens; a hit "         \
    "continues the same session bitwise (policy::chat)")                                                          \
  X(strict, "preset: last, branch; prefill-exact only",                                                           \
    "the prefill-exact preset: captures at last_aligned and branch_point, every hit bitwise a cold prefill "      \
    "(policy::strict)")

/// A named policy.
enum class policy_id : std::uint8_t {
#define REPRISE_NAMED_POLICY_ENUM(name, summary, doc) name,
  REPRISE_NAMED_POLICIES(REPRISE_NAMED_POLICY_ENUM)
#undef REPRISE_NAMED_POLICY_ENUM
};

struct policy_entry {
  std::string_view name;
  std::string_view summary;
  std::string_view doc;
  bool restores_snapshots; ///< a `snapshot_restore`: needs a snapshot budget on a model with recurrent layers
  bool uses_interval;      ///< reads `cache_options::capture_interval`
  bool takes_host_tier;    ///< `reprise::takes_host_tier`: may have `policy::host_tier` (and the remote tier)
  bool for_recurrent_models; ///< `catalog::for_recurrent_models`: offered for models with recurrent layers
  bool takes_turn_ends;      ///< captures turn ends and accepts them: may put them in the store (`remote_turn_ends`)
};

/// The entry of policy type `P` named `name`.
template <class P>
constexpr policy_entry entry_of(std::string_view name, std::string_view summary, std::string_view doc) noexcept {
  using traits = policy::policy_traits<P>;
  bool interval = false;
  if constexpr (traits::restores_snapshots) interval = traits::capture::reads_interval;
  return {name,          summary, doc, traits::restores_snapshots, interval, takes_host_tier<P>, for_recurrent_models<P>,
          takes_turn_ends<P>};
}

/// Every named policy, indexed by `policy_id`.
inline constexpr std::array policy_table{
#define REPRISE_NAMED_POLICY_ENTRY(name, summary, doc) entry_of<policies::name>(#name, summary, doc),
    REPRISE_NAMED_POLICIES(REPRISE_NAMED_POLICY_ENTRY)
#undef REPRISE_NAMED_POLICY_ENTRY
};

constexpr const policy_entry& entry(policy_id p) noexcept { return policy_table[static_cast<std::size_t>(p)]; }

/// The policy named `name`, if any. Complexity: O(named policies).
constexpr std::optional<policy_id> find_policy(std::string_view name) noexcept {
  return detail::find_named<policy_id>(policy_table, name);
}

/// Calls `f(std::type_identity<Policy>{})` with the policy type of `p` and returns what it returns. Every
/// named policy's branch is instantiated.
template <class F>
constexpr decltype(auto) visit_policy(policy_id p, F&& f) {
  switch (p) {
#define REPRISE_NAMED_POLICY_CASE(name, summary, doc)                                                              \
  case policy_id::name: return f(std::type_identity<policies::name>{});
    REPRISE_NAMED_POLICIES(REPRISE_NAMED_POLICY_CASE)
#undef REPRISE_NAMED_POLICY_CASE
  }
  return f(std::type_identity<policies::strict>{}); // unreachable: every enumerator has a case
}

/// The named presets (<reprise/state/presets.hpp>): X(type, name, active parameters, total parameters,
/// checkpoint). `type` is the `reprise::presets` type; `name` the model's name in every front end; the
/// parameter counts (from the models' public cards; total 0 for a dense model) feed FLOPs estimates.
#define REPRISE_NAMED_PRESETS(X)                                                                                   \
  X(nemotron_h_8b, "nemotron-h-8b", 8.1e9, 0, "nvidia/Nemotron-H-8B-Base-8K")                                     \
  X(qwen3_next_80b, "qwen3-next-80b-a3b", 3.0e9, 80e9, "Qwen/Qwen3-Next-80B-A3B-Instruct")                        \
  X(falcon_h1_7b, "falcon-h1-7b", 7.6e9, 0, "tiiuae/Falcon-H1-7B-Base")                                           \
  X(llama3_8b, "llama-3-8b", 8.0e9, 0, "meta-llama/Meta-Llama-3-8B")

/// A named preset.
enum class preset_id : std::uint8_t {
#define REPRISE_NAMED_PRESET_ENUM(type, name, active, total, checkpoint) type,
  REPRISE_NAMED_PRESETS(REPRISE_NAMED_PRESET_ENUM)
#undef REPRISE_NAMED_PRESET_ENUM
};

struct preset_entry {
  std::string_view name;       ///< "nemotron-h-8b"
  std::string_view type_name;  ///< the `reprise::presets` type ("nemotron_h_8b")
  std::string_view checkpoint; ///< the Hugging Face checkpoint its layout is read from
  /// Parameters that run per token (active parameters of a mixture of experts); prefill costs about twice
  /// this many FLOPs per token.
  double active_params;
  double total_params; ///< all parameters of a mixture of experts; 0 for a dense model
};

/// Every named preset, indexed by `preset_id`.
inline constexpr std::array preset_table{
#define REPRISE_NAMED_PRESET_ENTRY(type, name, active, total, checkpoint)                                          \
  preset_entry{name, #type, checkpoint, active, total},
    REPRISE_NAMED_PRESETS(REPRISE_NAMED_PRESET_ENTRY)
#undef REPRISE_NAMED_PRESET_ENTRY
};

constexpr const preset_entry& entry(preset_id p) noexcept { return preset_table[static_cast<std::size_t>(p)]; }

/// The preset named `name`, if any. Complexity: O(named presets).
constexpr std::optional<preset_id> find_preset(std::string_view name) noexcept {
  return detail::find_named<preset_id>(preset_table, name);
}

/// Calls `f(std::type_identity<Model>{})` with the `hybrid_model` type of `p` and returns what it returns.
template <class F>
constexpr decltype(auto) visit_preset(preset_id p, F&& f) {
  switch (p) {
#define REPRISE_NAMED_PRESET_CASE(type, name, active, total, checkpoint)                                           \
  case preset_id::type: return f(std::type_identity<presets::type>{});
    REPRISE_NAMED_PRESETS(REPRISE_NAMED_PRESET_CASE)
#undef REPRISE_NAMED_PRESET_CASE
  }
  return f(std::type_identity<presets::nemotron_h_8b>{}); // unreachable: every enumerator has a case
}

/// The runtime description of preset `p` (`model_config::of` its type).
inline model_config config_of(preset_id p) {
  return visit_preset(p, [](auto model) { return model_config::of<typename decltype(model)::type>(); });
}

} // namespace reprise::catalog
