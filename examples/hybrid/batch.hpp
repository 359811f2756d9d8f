// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What one forward call of the example decoder computes: a batch of sequences, each a run of consecutive
/// tokens at its own absolute position, with its block table, live recurrent slot and capture points.

#include <reprise/ids.hpp>

#include <cstdint>
#include <span>

namespace reprise::example {

/// One sequence's share of a forward call.
struct sequence_step {
  std::uint32_t start = 0;                ///< absolute position of the first token of this call
  std::uint32_t count = 0;                ///< tokens of this sequence in the call, >= 1
  std::span<const block_id> blocks;       ///< block table covering positions [0, start + count)
  slot_id live_slot = 0;                  ///< recurrent state slot holding the state at `start`
  /// The cache's planned captures: positions in (start, start + count], on the chunk grid (their
  /// `sequence` field is ignored: the step's index in the call is its sequence).
  std::span<const capture_point> captures;
  /// KV entries of positions below this are already in shared blocks and are not written again (they would
  /// be bitwise the same, but shared blocks are read-only). `memory_only` recomputes such positions.
  std::uint32_t kv_write_from = 0;
};

/// How recurrent layers process the tokens of a call. Attention, norms and MLPs do not depend on it.
enum class pass {
  prefill, ///< chunked prefill on the absolute chunk grid, with captures
  decode,  ///< one recurrent step per token (decode)
};

} // namespace reprise::example
