// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The absolute chunk grid of every chunked kernel family (Mamba2 SSD, gated delta), on the host and the
/// device.
///
/// Chunk boundaries sit at multiples of Q counted from absolute position 0, whatever position a prefill
/// starts at: a prefill resumed at p > 0 with p % Q != 0 first runs a short chunk up to the next multiple of
/// Q, then whole chunks, then a short last chunk. A chunk's arithmetic depends only on its start state and
/// its own tokens, so a prefill resumed from a state captured at a multiple of Q repeats every later chunk of
/// the uninterrupted run bit for bit. Every implementation walks a sequence with `chunk_end`, so the host
/// reference, the launchers' chunk plans and the kernels cannot disagree on where a chunk ends.

#include <reprise/config.hpp>

#include <cstdint>

namespace reprise::ops {

/// End (exclusive, absolute) of the chunk that starts at absolute position `pos` in a sequence whose tokens
/// end at `end` (> pos): the next multiple of `chunk` after `pos`, or `end` when that comes first.
/// Walk a sequence as `for (p = start; p < end; p = chunk_end(p, end, Q))`. Complexity: O(1).
REPRISE_HOST_DEVICE constexpr std::int64_t chunk_end(std::int64_t pos, std::int64_t end, std::int64_t chunk) noexcept {
  const std::int64_t next = (pos / chunk + 1) * chunk;
  return next < end ? next : end;
}

static_assert(chunk_end(0, 300, 64) == 64 && chunk_end(100, 300, 64) == 128 && chunk_end(256, 300, 64) == 300);

} // namespace reprise::ops
