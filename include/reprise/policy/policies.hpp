// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The compile-time cache policies (DESIGN.md section 4), as small tag types:
///
/// \code
/// reprise::prefix_cache<llama3_8b, policy::block_sharing>                        // attention only
/// reprise::prefix_cache<nemotron_h_8b, policy::snapshot_restore<>>               // hybrid, skip via snapshots
/// reprise::prefix_cache<nemotron_h_8b, policy::snapshot_restore<
///     policy::capture<policy::every<1024>, policy::end_of_turn>, policy::accept_any>>
/// reprise::prefix_cache<nemotron_h_8b, policy::memory_only>                      // share KV, skip nothing
/// \endcode
///
/// A policy is checked against its model where the cache is instantiated: `block_sharing` on a model with
/// recurrent layers, or a capture interval off the model's alignment unit, does not compile.

#include <reprise/cache/types.hpp>

#include <cstdint>
#include <type_traits>

namespace reprise::policy {

// ----- capture placement (compose several in `capture<...>`) -----

/// Capture every `Interval` tokens (at absolute multiples of it). `Interval` must be a multiple of the
/// model's alignment unit.
template <std::uint32_t Interval>
struct every {
  static_assert(Interval > 0, "policy::every<I>: I must be positive");
  static constexpr std::uint32_t interval = Interval;
};
/// `every` with the interval read from `cache_options::capture_interval` (checked at construction).
struct every_interval {};
/// Capture at the last aligned position before the prompt end: floor((L - 1) / A) * A, the deepest snapshot
/// a repeat of the same prompt can use.
struct last_aligned {};
/// Capture where the prompt leaves the cached tree, aligned down (SGLang's `mamba_branching_seqlen`): the
/// next prompt that shares the prefix and then diverges elsewhere restores there.
struct branch_point {};
/// Capture at offsets the caller passes to `admit` (each a multiple of the alignment unit).
struct caller_offsets {};
/// `finish` captures the live state at the end of a turn as a `decode_continuation` snapshot.
struct end_of_turn {};

/// A set of capture placements; the planned positions are the union of theirs.
template <class... Placements>
struct capture {};

// ----- which snapshots a restore may use -----

/// Only `prefill_exact` snapshots: a hit is bitwise-equal to a cold prefill.
struct accept_prefill_exact {
  static constexpr bool accepts_decode_continuation = false;
};
/// `decode_continuation` snapshots too: multi-turn chats resume where the previous turn ended.
struct accept_any {
  static constexpr bool accepts_decode_continuation = true;
};

// ----- the three policies -----

/// Attention-only models: share KV blocks and skip their prefill.
struct block_sharing {};

/// Hybrid models: share KV blocks and skip prefill up to the deepest position where a snapshot of every
/// recurrent layer exists, restoring it.
template <class Capture = capture<last_aligned, branch_point, end_of_turn>, class Accept = accept_any>
struct snapshot_restore {};

/// Hybrid models without a snapshot budget (Megatron-LM's mode): share matched KV blocks to save memory,
/// skip nothing, because the recurrent layers must see every token.
struct memory_only {};

// ----- traits the façade reads -----

namespace detail {
template <class T>
struct every_interval_of : std::integral_constant<std::uint32_t, 0> {};
template <std::uint32_t I>
struct every_interval_of<every<I>> : std::integral_constant<std::uint32_t, I> {};
} // namespace detail

template <class P>
struct policy_traits; // only the three policies above are policies

template <>
struct policy_traits<block_sharing> {
  static constexpr bool restores_snapshots = false;
  static constexpr bool skips_prefill = true;
};
template <>
struct policy_traits<memory_only> {
  static constexpr bool restores_snapshots = false;
  static constexpr bool skips_prefill = false;
};
template <class... Placements, class Accept>
struct policy_traits<snapshot_restore<capture<Placements...>, Accept>> {
  static constexpr bool restores_snapshots = true;
  static constexpr bool skips_prefill = true;
  static constexpr bool accepts_decode_continuation = Accept::accepts_decode_continuation;
  template <class P>
  static constexpr bool places = (std::is_same_v<P, Placements> || ...);
  /// Every `every<I>` interval among the placements, 0 for the others (checked against the alignment).
  static constexpr std::uint32_t intervals[] = {0, detail::every_interval_of<Placements>::value...};
};

/// A cache policy: one of `block_sharing`, `snapshot_restore<capture<...>, accept>`, `memory_only`.
template <class P>
concept cache_policy = requires {
  { policy_traits<P>::restores_snapshots } -> std::convertible_to<bool>;
};

} // namespace reprise::policy
