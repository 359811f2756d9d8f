// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The ids and the capture point that the cache hands out and the state kernels take, one definition for
/// both layers, so a plan's block table, restore slot and capture list go to a kernel without conversion.
///
/// Block and slot ids are `int32`, the index type of engines' block tables and of the kernels' index arrays;
/// `-1` (`no_block`, `no_slot`) means none: a padding entry in a decode batch, "start from the zero state"
/// as an initial slot, "do not store" as a final slot, "no restore" in a plan.

#include <reprise/config.hpp>

#include <cstdint>
#include <limits>

namespace reprise {

using seq_id = std::uint64_t;  ///< an engine's request / sequence id
using block_id = std::int32_t; ///< a KV block of the engine's block pool, in [0, kv_blocks)
using slot_id = std::int32_t;  ///< a recurrent-state slot of the engine's slot pools
using epoch_t = std::uint64_t; ///< a scheduler step number (see `prefix_cache::step_complete`)

inline constexpr block_id no_block = -1;
inline constexpr slot_id no_slot = -1;

/// The most ids a pool can have: ids are non-negative `int32`.
inline constexpr std::uint32_t max_pool_ids = std::numeric_limits<std::int32_t>::max();

/// How a snapshot, or the KV of a block, was produced, which decides what reusing it is equivalent to.
enum class exactness : std::uint8_t {
  /// Computed by chunked prefill on the absolute chunk grid from the zero state (or from state that was
  /// itself prefill-exact): reuse is bitwise the same as a cold prefill of the same tokens.
  prefill_exact,
  /// Computed by decode steps, or from state that was: reuse is bitwise the same session continuing, not a
  /// cold prefill (the recurrent decode step orders floating-point sums differently from chunked prefill).
  decode_continuation,
};

/// One state to write during a prefill: the recurrent state of the batch's sequence `sequence` after it has
/// folded in the tokens before absolute `position`, into slot `slot` of every recurrent layer's pools.
///
/// The cache plans captures with `sequence == 0`; the engine sets each one's index in the batch it launches.
struct capture_point {
  std::int32_t sequence = 0;
  std::int64_t position = 0;
  slot_id slot = no_slot;
  friend constexpr bool operator==(const capture_point&, const capture_point&) = default;
};

} // namespace reprise
