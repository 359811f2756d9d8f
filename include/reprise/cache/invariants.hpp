// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `check_invariants(core)`: recomputes every refcount, queue membership, index entry, parent/child count,
/// LRU order, snapshot attachment and gauge of a cache from scratch and compares. For tests and debugging;
/// the hot path never calls it.

#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/cache_core.hpp>
#include <reprise/cache/in_step_sharing.hpp>
#include <reprise/cache/snapshot_pool.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace reprise::detail {

/// Errors: `invariant_violated`. Complexity: O(blocks + slots + table entries), plus O(blocks) per LRU
/// block with cached children (the leaf-first order check).
template <class Policy, class Hasher, class Tiers>
result<void> check_invariants(const cache_core<Policy, Hasher, Tiers>& c) {
  using core = cache_core<Policy, Hasher, Tiers>;
  auto fail = [] { return result<void>(errc::invariant_violated); };
  constexpr bool off_grid = [] {
    if constexpr (core::restores) return policy::policy_traits<Policy>::capture::off_grid;
    else return false;
  }();
  const block_ledger& blocks = c.blocks;
  const snapshot_ledger& slots = c.slots;
  const std::uint32_t block_size = c.geometry.block_size;
  const auto nblocks = static_cast<block_id>(blocks.size());
  const auto nslots = static_cast<slot_id>(slots.size());
  auto at = [](auto& v, std::int32_t i) -> auto& { return v[static_cast<std::size_t>(i)]; };
  std::vector<std::uint32_t> refs(blocks.size(), 0), children(blocks.size(), 0);
  std::vector<std::uint32_t> slot_refs(slots.size(), 0), slot_pending(slots.size(), 0);
  for (const sequence_record& r : c.sequences) {
    if (r.blocks.size() != (std::size_t{r.tokens} + block_size - 1) / block_size) return fail();
    if (r.computed > r.tokens || r.chain.size() > r.tokens / block_size) return fail();
    for (block_id b : r.blocks) {
      if (b < 0 || b >= nblocks) return fail();
      ++at(refs, b);
    }
    for (std::size_t i = 0; i < r.chain.size(); ++i) {
      if (r.chain[i] < 0 || r.chain[i] >= nblocks) return fail();
      if (r.chain[i] != r.blocks[i]) {
        ++at(refs, r.chain[i]);
        if (blocks.node(r.blocks[i]).state == block_state::cached) return fail();
      }
      const block_node& n = blocks.node(r.chain[i]);
      if (n.state != block_state::cached || n.depth != i) return fail();
      if (n.parent != (i == 0 ? no_block : r.chain[i - 1])) return fail();
    }
    if (r.copy_src != no_block) {
      if (r.copy_src < 0 || r.copy_src >= nblocks || blocks.node(r.copy_src).state != block_state::tail) return fail();
      ++at(refs, r.copy_src);
    }
    if (r.restore_slot != no_slot) {
      if (r.restore_slot < 0 || r.restore_slot >= nslots) return fail();
      ++at(slot_refs, r.restore_slot);
    }
    for (const capture_point& cp : r.captures) {
      // On the alignment grid, or on the block grid for a placement that splits the prefill there.
      const bool on_grid = cp.position % c.geometry.alignment == 0 || (off_grid && cp.position % block_size == 0);
      if (cp.slot < 0 || cp.slot >= nslots || !on_grid || cp.position > r.tokens) return fail();
      ++at(slot_pending, cp.slot);
    }
  }
  std::uint32_t referenced = 0, cached = 0, tails = 0;
  std::size_t pending = 0; // owned blocks in the in-step index (share_in_step), checked by c.in_step below
  for (block_id b = 0; b < nblocks; ++b) {
    const block_node& n = blocks.node(b);
    if (n.refcount != at(refs, b)) return fail();
    referenced += n.refcount != 0;
    const bool kept = n.state == block_state::cached || n.state == block_state::tail;
    pending += in_step_sharing::pending(n);
    // in the block index or the tail index, or (owned) in the in-step index
    if (n.index_link.is_linked() != (kept || in_step_sharing::pending(n))) return fail();
    const bool queued = n.queue_link.is_linked();
    if (n.state == block_state::free && (n.refcount != 0 || !queued)) return fail();
    if (n.state == block_state::owned && (n.refcount == 0 || queued)) return fail();
    if (kept) {
      ++(n.state == block_state::cached ? cached : tails);
      if (queued != (n.refcount == 0)) return fail();
      if (n.state == block_state::tail && (n.fill == 0 || n.fill >= block_size)) return fail();
      if (n.parent != no_block) {
        if (blocks.node(n.parent).state != block_state::cached) return fail();
        if (blocks.node(n.parent).depth + 1 != n.depth) return fail();
        if (n.state == block_state::tail && blocks.node(n.parent).key != n.key) return fail();
        ++at(children, n.parent);
      } else if (n.depth != 0) {
        return fail();
      }
    } else if (n.snapshot[0] != no_slot || n.snapshot[1] != no_slot) {
      return fail();
    }
  }
  for (block_id b = 0; b < nblocks; ++b)
    if (blocks.node(b).cached_children != at(children, b)) return fail();
  if (blocks.index().size() != cached || blocks.tails().size() != tails) return fail();
  if (!c.in_step.check(blocks, c.sequences, c.hasher, block_size, pending)) return fail();
  const block_pool& pool = blocks.pool();
  if (pool.free().size() + pool.lru().size() + referenced != blocks.size()) return fail();
  // LRU order: every block precedes its parent, so the head is always a leaf.
  std::vector<std::uint8_t> seen(blocks.size(), 0);
  for (const block_node& n : pool.lru()) {
    if ((n.state != block_state::cached && n.state != block_state::tail) || n.refcount != 0) return fail();
    const block_id b = blocks.id_of(n);
    if (at(children, b) != 0) {
      // a cached child is either referenced (then so would be this block) or already seen
      for (block_id ch = 0; ch < nblocks; ++ch)
        if (blocks.node(ch).state != block_state::free && blocks.node(ch).state != block_state::owned &&
            blocks.node(ch).parent == b && !at(seen, ch))
          return fail();
    }
    at(seen, b) = 1;
  }
  for (const block_node& n : pool.free())
    if (n.state != block_state::free) return fail();
  // Snapshots.
  std::uint32_t held = 0;
  for (slot_id s = 0; s < nslots; ++s) {
    const slot_node& n = slots.node(s);
    if (at(slot_pending, s) > 1) return fail();
    switch (n.state) {
    case slot_state::free:
      if (at(slot_pending, s) != 0 || at(slot_refs, s) != 0 || !n.queue_link.is_linked()) return fail();
      break;
    case slot_state::pending:
      if (at(slot_pending, s) != 1 || at(slot_refs, s) != 0 || n.queue_link.is_linked()) return fail();
      break;
    case slot_state::published: {
      ++held;
      if (at(slot_pending, s) != 0 || n.refcount != at(slot_refs, s)) return fail();
      if (n.queue_link.is_linked() != (n.refcount == 0)) return fail();
      if (n.block < 0 || n.block >= nblocks) return fail();
      const block_node& b = blocks.node(n.block);
      if ((b.state != block_state::cached && b.state != block_state::tail) ||
          b.snapshot[static_cast<int>(n.kind)] != s)
        return fail();
      if (b.state == block_state::tail && n.kind != exactness::decode_continuation) return fail();
      const std::uint64_t position =
          b.state == block_state::tail ? std::uint64_t{b.depth} * block_size + b.fill : std::uint64_t{b.depth + 1} * block_size;
      if (n.kind == exactness::prefill_exact && position % c.geometry.alignment != 0) return fail();
      if (n.refcount != 0 && b.refcount == 0) return fail(); // a restorer holds the block too
      break;
    }
    }
  }
  for (block_id b = 0; b < nblocks; ++b)
    for (slot_id s : blocks.node(b).snapshot)
      if (s != no_slot && (s < 0 || s >= nslots || slots.node(s).block != b)) return fail();
  std::size_t free_slots = 0, idle_snapshots = 0;
  for (const slot_node& n : slots.pool().free()) free_slots += n.state == slot_state::free;
  for (const slot_node& n : slots.pool().lru()) idle_snapshots += n.state == slot_state::published;
  if (free_slots != slots.pool().free().size() || idle_snapshots != slots.pool().lru().size()) return fail();
  // Gauges.
  const cache_metrics& m = c.metrics;
  if (m.live_sequences != c.sequences.size() || m.blocks_referenced != referenced || m.blocks_cached != cached ||
      m.blocks_free != pool.free().size() || m.tail_blocks != tails || m.snapshots_held != held ||
      m.snapshot_bytes_held != std::uint64_t{held} * slots.bytes_per_snapshot())
    return fail();
  // The components beside the core check their own side tables.
  if (!c.events.check()) return fail();
  if constexpr (core::tier_component::enabled) {
    if (!c.tiers.check()) return fail();
    if constexpr (core::has_remote) {
      if (!c.tiers.below.check(c.tiers.ledger)) return fail();
    }
  }
  return {};
}

} // namespace reprise::detail
