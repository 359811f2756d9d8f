// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// How the state kernels address states: slot pools, variable-length batches and capture lists.
///
/// **Slot pools.** Each recurrent layer owns, per state component, one pool tensor whose leading extent is
/// the slot: the SSM / delta-rule state is `[slots, H, P, N]` fp32 and the conv window `[slots, W-1, C]`
/// (row 0 is the oldest input). A slot index is an `int32`; the same index names the same snapshot in every
/// layer's pools, so save, restore and fork are lists of indices, never host copies. A negative index means
/// "none": a padding entry in a decode batch, "start from the zero state" as an initial slot, "do not store"
/// as a final slot.
///
/// **Variable-length batches.** Tokens of all sequences are packed token-major (`x` is `[tokens, ...]`).
/// `cu_seqlens` (S+1 entries, `cu_seqlens[0] == 0`, non-decreasing, last = token count) delimits
/// sequence s as tokens `[cu_seqlens[s], cu_seqlens[s+1])`; `start_positions[s]` is the absolute position
/// of its first token (the number of tokens already folded into its initial state). The chunk grid is
/// absolute: chunk boundaries sit at multiples of Q from position 0, so a sequence starting at p > 0 first
/// runs a short chunk up to the next multiple of Q (`chunk_grid.hpp`).
///
/// **Captures.** A `capture_point{sequence, position, slot}` asks the kernel to write the state that
/// sequence `sequence` has after folding in the tokens before absolute `position` into `slot`. It must lie
/// in `(start, start + length]`; chunked kernels also require `position % Q == 0` (the end of a chunk),
/// which is what makes a restore from it bit-identical to an uninterrupted prefill.

#include <reprise/errc.hpp>
#include <reprise/ids.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::ops {

/// Element `i` (0 <= i < size) of a span or vector, indexed by a signed count as the batch tables are.
template <class Range>
constexpr decltype(auto) nth(Range& r, std::int64_t i) noexcept {
  return r[static_cast<std::size_t>(i)];
}

/// A packed batch of sequences (host-side metadata; the tensors it describes may live on the device).
struct varlen_batch {
  std::span<const std::int32_t> cu_seqlens;      ///< S+1 cumulative token offsets
  std::span<const std::int64_t> start_positions; ///< S absolute positions of each sequence's first token

  std::int64_t sequences() const noexcept {
    return cu_seqlens.empty() ? 0 : static_cast<std::int64_t>(cu_seqlens.size()) - 1;
  }
  std::int64_t tokens() const noexcept { return cu_seqlens.empty() ? 0 : cu_seqlens.back(); }
  std::int64_t length(std::int64_t s) const noexcept { return nth(cu_seqlens, s + 1) - nth(cu_seqlens, s); }
  std::int64_t end_position(std::int64_t s) const noexcept { return nth(start_positions, s) + length(s); }
};

/// One state to write during a prefill: the state of `sequence` at absolute `position`, into `slot` (the
/// same type the cache's plans carry).
using reprise::capture_point;

/// Where a prefill reads and writes each sequence's state.
struct prefill_slots {
  std::span<const std::int32_t> initial;        ///< S slots read at the start; negative: zero state
  std::span<const std::int32_t> final;          ///< S live slots written at the end; negative: not written
  std::span<const capture_point> captures = {}; ///< extra end-of-chunk states to write
};

/// One `(src, dst)` index pair of a copy (slot copy, KV block copy, decode copy-on-write).
struct copy_pair {
  std::int32_t src = 0;
  std::int32_t dst = 0;
  friend constexpr bool operator==(const copy_pair&, const copy_pair&) = default;
};

/// Checks a batch against the token count of its tensors.
/// Errors: `size_mismatch` (array lengths or the last offset disagree with `tokens`), `invalid_argument`
/// (offsets decrease, or a negative start position). Complexity: O(S).
inline errc validate_batch(const varlen_batch& b, std::int64_t tokens) noexcept {
  if (b.cu_seqlens.empty()) return tokens == 0 ? errc{} : errc::size_mismatch;
  if (b.start_positions.size() + 1 != b.cu_seqlens.size()) return errc::size_mismatch;
  if (b.cu_seqlens.front() != 0 || b.cu_seqlens.back() != tokens) return errc::size_mismatch;
  for (std::size_t s = 0; s + 1 < b.cu_seqlens.size(); ++s) {
    if (b.cu_seqlens[s + 1] < b.cu_seqlens[s]) return errc::invalid_argument;
    if (b.start_positions[s] < 0) return errc::invalid_argument;
  }
  return errc{};
}

/// Checks the slots of a prefill over `b` against a pool of `num_slots` slots.
/// `chunk` is the chunk size Q whose grid captures must sit on (1 for kernels without chunks).
/// Errors: `size_mismatch` (initial / final lengths differ from S); `out_of_range` (a slot >= num_slots, a
/// capture naming no sequence, a capture position outside (start, end]); `misaligned` (capture position not a
/// multiple of `chunk`); `invalid_argument` (two captures of one sequence at one position); `overlapping_pairs`
/// (a slot written twice, a capture slot that is some sequence's initial slot, or a final slot that another
/// sequence reads as its initial state).
/// Complexity: O((S + captures) log(S + captures)).
inline errc validate_prefill_slots(const varlen_batch& b, const prefill_slots& slots, std::int64_t num_slots,
                                   std::int64_t chunk) noexcept {
  const std::int64_t n = b.sequences();
  if (static_cast<std::int64_t>(slots.initial.size()) != n || static_cast<std::int64_t>(slots.final.size()) != n)
    return errc::size_mismatch;
  if (chunk <= 0) return errc::invalid_argument;
  for (std::int64_t s = 0; s < n; ++s) {
    if (nth(slots.initial, s) >= num_slots || nth(slots.final, s) >= num_slots) return errc::out_of_range;
  }
  for (const capture_point& c : slots.captures) {
    if (c.sequence < 0 || c.sequence >= n) return errc::out_of_range;
    if (c.slot < 0 || c.slot >= num_slots) return errc::out_of_range;
    if (c.position <= nth(b.start_positions, c.sequence) || c.position > b.end_position(c.sequence))
      return errc::out_of_range;
    if (c.position % chunk != 0) return errc::misaligned;
  }
  // Written slots: each at most once, and never one that is read as an initial state (the kernels read
  // initial states and write captures concurrently), except that a sequence's final state may overwrite its
  // own initial slot (the live slot updated in place).
  struct write {
    std::int32_t slot, sequence;
    bool is_final;
  };
  std::vector<write> writes;
  writes.reserve(static_cast<std::size_t>(n) + slots.captures.size());
  for (std::int64_t s = 0; s < n; ++s)
    if (nth(slots.final, s) >= 0) writes.push_back({nth(slots.final, s), static_cast<std::int32_t>(s), true});
  for (const capture_point& c : slots.captures) writes.push_back({c.slot, c.sequence, false});
  std::sort(writes.begin(), writes.end(), [](write a, write c) { return a.slot < c.slot; });
  for (std::size_t i = 1; i < writes.size(); ++i)
    if (writes[i].slot == writes[i - 1].slot) return errc::overlapping_pairs;
  for (std::int64_t s = 0; s < n; ++s) {
    const std::int32_t r = nth(slots.initial, s);
    if (r < 0) continue;
    auto it = std::lower_bound(writes.begin(), writes.end(), r, [](write w, std::int32_t v) { return w.slot < v; });
    if (it != writes.end() && it->slot == r && (!it->is_final || it->sequence != s)) return errc::overlapping_pairs;
  }
  std::vector<capture_point> caps(slots.captures.begin(), slots.captures.end());
  std::sort(caps.begin(), caps.end(), [](const capture_point& a, const capture_point& c) {
    return a.sequence != c.sequence ? a.sequence < c.sequence : a.position < c.position;
  });
  for (std::size_t i = 1; i < caps.size(); ++i)
    if (caps[i].sequence == caps[i - 1].sequence && caps[i].position == caps[i - 1].position)
      return errc::invalid_argument;
  return errc{};
}

/// Checks a decode batch's `(src, dst)` slot pairs against a pool of `num_slots` slots. A pair with a
/// negative index on either side is padding. Errors: `out_of_range` (an index >= num_slots);
/// `overlapping_pairs` (a destination written twice, or a destination that another pair reads).
/// Complexity: O(B log B).
inline errc validate_decode_slots(std::span<const copy_pair> pairs, std::int64_t num_slots) noexcept {
  std::vector<copy_pair> live;
  live.reserve(pairs.size());
  for (const copy_pair& p : pairs) {
    if (p.src >= num_slots || p.dst >= num_slots) return errc::out_of_range;
    if (p.src >= 0 && p.dst >= 0) live.push_back(p);
  }
  std::vector<std::int32_t> dsts;
  dsts.reserve(live.size());
  for (const copy_pair& p : live) dsts.push_back(p.dst);
  std::sort(dsts.begin(), dsts.end());
  if (std::adjacent_find(dsts.begin(), dsts.end()) != dsts.end()) return errc::overlapping_pairs;
  for (const copy_pair& p : live)
    if (p.src != p.dst && std::binary_search(dsts.begin(), dsts.end(), p.src)) return errc::overlapping_pairs;
  return errc{};
}

/// Everything about a prefill's batch and slots that a kernel family checks besides its own operands: the
/// batch against `tokens` rows, then the slots against `num_slots` on the grid of `chunk`.
/// Errors: as `validate_batch`, then as `validate_prefill_slots`. Complexity: that of `validate_prefill_slots`.
inline errc validate_prefill(const varlen_batch& b, const prefill_slots& slots, std::int64_t tokens,
                             std::int64_t num_slots, std::int64_t chunk) noexcept {
  if (errc e = validate_batch(b, tokens); e != errc{}) return e;
  return validate_prefill_slots(b, slots, num_slots, chunk);
}

/// A decode batch: one `(src, dst)` pair per row of the operands. Errors: `size_mismatch` (pairs.size() !=
/// rows); as `validate_decode_slots`. Complexity: O(rows log rows).
inline errc validate_decode(std::span<const copy_pair> pairs, std::int64_t rows, std::int64_t num_slots) noexcept {
  if (static_cast<std::int64_t>(pairs.size()) != rows) return errc::size_mismatch;
  return validate_decode_slots(pairs, num_slots);
}

/// Checks copy pairs for a pool of `units` slots or blocks. Unlike decode pairs, every index must be valid
/// and a pair copies (src != dst). Errors: `out_of_range`; `overlapping_pairs` (src == dst, a destination
/// named twice, or a destination that any pair reads: the copies run concurrently).
/// Complexity: O(n log n).
inline errc validate_copy_pairs(std::span<const copy_pair> pairs, std::int64_t units) noexcept {
  std::vector<std::int32_t> dsts, srcs;
  dsts.reserve(pairs.size());
  srcs.reserve(pairs.size());
  for (const copy_pair& p : pairs) {
    if (p.src < 0 || p.dst < 0 || p.src >= units || p.dst >= units) return errc::out_of_range;
    dsts.push_back(p.dst);
    srcs.push_back(p.src);
  }
  std::sort(dsts.begin(), dsts.end());
  std::sort(srcs.begin(), srcs.end());
  if (std::adjacent_find(dsts.begin(), dsts.end()) != dsts.end()) return errc::overlapping_pairs;
  for (std::int32_t d : dsts)
    if (std::binary_search(srcs.begin(), srcs.end(), d)) return errc::overlapping_pairs;
  return errc{};
}

} // namespace reprise::ops
