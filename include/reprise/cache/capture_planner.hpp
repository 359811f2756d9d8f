// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The capture planner: `plan_captures` turns a policy's capture placements into the (position, slot) list
/// of one admitted prompt, `plan_checkpoint` adds a decode checkpoint as a sequence is extended, and
/// `resolve_captures` publishes (or frees) them when the engine commits.
///
/// `plan_captures`: Each placement computes its own positions (`policy::capture_placement`); the planner keeps those
/// on the alignment grid in (usable, L] (on the block grid when a placement captures off the grid), drops
/// positions whose cached block already holds a snapshot as good
/// as the one the prefill would write, applies the per-path cap (the deepest survive), and takes slots
/// deepest first, so a short pool serves the most useful captures.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/policy/policies.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise::detail {

/// The class of a snapshot captured at position `p` of sequence `r`: off the alignment grid the prefill is
/// split there, so restoring it continues a session (decode_continuation); on the grid it is as exact as the
/// KV before it.
inline exactness capture_kind(const sequence_record& r, std::uint64_t p, std::uint64_t alignment) noexcept {
  return p % alignment != 0 ? exactness::decode_continuation : r.kv_kind(p);
}

/// Snapshots already published along `r`'s cached chain (at most one counted per block), for the per-path
/// cap. Complexity: O(chain length).
inline std::uint32_t snapshots_on_chain(const sequence_record& r, const block_ledger& blocks) noexcept {
  std::uint32_t n = 0;
  for (const block_id id : r.chain) {
    const block_node& b = blocks.node(id);
    n += (b.snapshot[0] != no_slot || b.snapshot[1] != no_slot) ? 1 : 0;
  }
  return n;
}

/// Fills `r.captures` (sorted by position, each with a pending slot) for the prompt described by `c`.
/// Counts refused captures (path cap, no reusable slot) and planned ones in `m`. A planned capture off the
/// alignment grid splits the prefill there: `r.exact_until` drops to it.
/// Complexity: O(positions log positions + chain length).
template <class CaptureTraits>
void plan_captures(sequence_record& r, const policy::capture_context& c, std::uint32_t block_size,
                   std::uint32_t max_per_path, const block_ledger& blocks, snapshot_ledger& slots, cache_metrics& m) {
  auto& out = r.captures;
  CaptureTraits::positions(c, [&](std::uint64_t p) {
    const bool on_grid = p % c.alignment == 0 || (CaptureTraits::off_grid && p % c.block_size == 0);
    if (p > c.usable && p <= c.length && on_grid)
      out.push_back({.sequence = 0, .position = static_cast<std::int64_t>(p), .slot = no_slot});
  });
  if (out.empty()) return;
  std::sort(out.begin(), out.end(), [](const capture_point& a, const capture_point& b) { return a.position < b.position; });
  out.erase(std::unique(out.begin(), out.end()), out.end());

  // A cached block that already holds a snapshot at least as exact as this capture needs no second one.
  std::erase_if(out, [&](const capture_point& p) {
    const auto i = static_cast<std::size_t>(p.position / block_size) - 1;
    if (i >= r.chain.size()) return false;
    const block_node& b = blocks.node(r.chain[i]);
    if (b.snapshot[static_cast<int>(exactness::prefill_exact)] != no_slot) return true;
    return capture_kind(r, static_cast<std::uint64_t>(p.position), c.alignment) == exactness::decode_continuation &&
           b.snapshot[static_cast<int>(exactness::decode_continuation)] != no_slot;
  });

  std::size_t keep_from = 0;
  if (max_per_path != 0) {
    const std::uint32_t existing = snapshots_on_chain(r, blocks);
    const std::size_t room = max_per_path > existing ? max_per_path - existing : 0;
    if (out.size() > room) keep_from = out.size() - room; // keep the deepest
  }
  m.captures_refused += keep_from;
  out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(keep_from));

  std::size_t planned = 0;
  for (std::size_t i = out.size(); i-- > 0;) {
    slot_node* n = slots.take();
    if (n == nullptr) break;
    out[i].slot = slots.id_of(*n);
    ++planned;
  }
  m.captures_refused += out.size() - planned;
  m.captures_planned += planned;
  out.erase(out.begin(), out.begin() + static_cast<std::ptrdiff_t>(out.size() - planned));
  if constexpr (CaptureTraits::off_grid) {
    for (const capture_point& p : out)
      if (static_cast<std::uint64_t>(p.position) % c.alignment != 0) {
        r.exact_until = std::min(r.exact_until, static_cast<std::uint32_t>(p.position));
        break;
      }
  }
}

/// `policy::decode_checkpoints`: a capture at the sequence's new length when it is a multiple of `interval`,
/// not already planned, within the per-path cap and when a slot is reusable; the capture (or none) for the
/// extend plan. Complexity: O(1), plus O(chain) with a per-path cap.
inline std::span<const capture_point> plan_checkpoint(sequence_record& r, std::uint32_t interval,
                                                      std::uint32_t max_per_path, const block_ledger& blocks,
                                                      snapshot_ledger& slots, cache_metrics& m) noexcept {
  const std::uint32_t p = r.tokens;
  if (interval == 0 || p % interval != 0 || p <= r.computed) return {};
  if (!r.captures.empty() && r.captures.back().position >= p) return {}; // pending captures are in order
  if (max_per_path != 0 && snapshots_on_chain(r, blocks) >= max_per_path) {
    ++m.captures_refused;
    return {};
  }
  slot_node* n = slots.take();
  if (n == nullptr) {
    ++m.captures_refused;
    return {};
  }
  r.captures.push_back({.sequence = 0, .position = p, .slot = slots.id_of(*n)}); // after every earlier one
  ++m.captures_planned;
  return std::span<const capture_point>(r.captures).last(1);
}

/// At a commit of `n` tokens: publishes the captures at positions <= n that the engine wrote (marked in
/// `r.written`) on the cached block ending there, calling `published(slot, block, kind)` for each, and frees
/// the others' slots. A decode checkpoint published beyond `checkpoints_per_sequence` drops the sequence's
/// oldest. Complexity: O(captures).
template <class Published>
void resolve_captures(sequence_record& r, std::uint32_t n, const cache_geometry& g,
                      std::uint32_t checkpoints_per_sequence, block_ledger& blocks, snapshot_ledger& slots,
                      cache_metrics& m, Published&& published) noexcept {
  const std::uint32_t B = g.block_size;
  std::size_t kept = 0;
  for (std::size_t k = 0; k < r.captures.size(); ++k) {
    const capture_point c = r.captures[k];
    if (c.position > n) {
      r.captures[kept++] = c;
      continue;
    }
    slot_node& slot = slots.node(c.slot);
    const auto p = static_cast<std::uint32_t>(c.position);
    const std::uint32_t i = p / B - 1;
    const exactness kind = capture_kind(r, p, g.alignment);
    block_node* b = i < r.chain.size() ? &blocks.node(r.chain[i]) : nullptr;
    if (r.written[k] != 0 && b != nullptr && b->snapshot[static_cast<int>(kind)] == no_slot &&
        b->snapshot[static_cast<int>(exactness::prefill_exact)] == no_slot) {
      const bool checkpoint = p > r.prompt; // planned by `extend`
      slots.attach(slot, *b, kind, 0, checkpoint);
      published(c.slot, blocks.id_of(*b), kind);
      ++m.captures_written;
      if (checkpoint) {
        r.checkpoints.emplace_back(c.slot, blocks.id_of(*b));
        if (r.checkpoints.size() > checkpoints_per_sequence) {
          slots.discard(r.checkpoints.front().first, r.checkpoints.front().second);
          r.checkpoints.erase(r.checkpoints.begin());
        }
      }
    } else {
      ++m.captures_refused;
      slots.release(slot);
    }
  }
  r.captures.resize(kept);
}

} // namespace reprise::detail
