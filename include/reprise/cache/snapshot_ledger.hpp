// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `snapshot_ledger`: the operations on snapshot slots (take, attach to a block, detach, hold while
/// restoring, LRU and TTL eviction), with the gauges they move, over the snapshot pool.
///
/// A published snapshot is attached to the cached block that ends at its position, one per exactness class
/// (`block_node::snapshot`); that attachment is the snapshot index. Evicting the block, or an ancestor,
/// drops it (`invalidate`); a snapshot can also go alone (its own LRU and TTL), leaving the block cached.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/snapshot_eviction.hpp>
#include <reprise/cache/snapshot_pool.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise::detail {

class snapshot_ledger {
public:
  snapshot_ledger(std::uint32_t slots, std::size_t bytes_per_snapshot, block_pool& blocks, const epoch_clock& clock,
                  cache_metrics& m)
      : pool_(slots), bytes_per_snapshot_(bytes_per_snapshot), blocks_(&blocks), clock_(&clock), metrics_(&m) {}

  const snapshot_pool& pool() const noexcept { return pool_; }
  slot_node& node(slot_id s) noexcept { return pool_.node(s); }
  const slot_node& node(slot_id s) const noexcept { return pool_.node(s); }
  slot_id id_of(const slot_node& n) const noexcept { return pool_.id_of(n); }
  std::uint32_t size() const noexcept { return pool_.size(); }
  std::size_t bytes_per_snapshot() const noexcept { return bytes_per_snapshot_; }

  /// Called with a published snapshot that LRU eviction is about to drop (a lower tier may copy it first).
  using evict_hook = void (*)(void* context, const slot_node& n) noexcept;
  void set_evict_hook(evict_hook f, void* context) noexcept {
    evict_hook_ = f;
    evict_context_ = context;
  }

  /// Called with every published snapshot about to be unpublished, however it goes (LRU, its block evicted,
  /// TTL, a checkpoint dropped): a fleet router's events report it removed unless a host unit took it
  /// (state_events.hpp).
  void set_detach_hook(evict_hook f, void* context) noexcept {
    detach_hook_ = f;
    detach_context_ = context;
  }

  /// Which idle snapshot `take` evicts (snapshot_eviction.hpp); LRU until set.
  void set_eviction(const eviction_rule& r) noexcept { rule_ = r; }
  const eviction_rule& eviction() const noexcept { return rule_; }

  /// A slot for a capture, now pending: a safe free one, else an idle snapshot evicted, chosen by the
  /// eviction rule among the oldest safe ones. Null when neither is reusable.
  /// Complexity: O(1) under LRU; O(W * fallback_walk_blocks) under another rule with window W.
  slot_node* take() noexcept {
    slot_node* n = pool_.free().front_safe();
    if (n != nullptr) {
      pool_.free().erase(*n, clock_->safe_before);
    } else {
      n = victim();
      if (n == nullptr) return nullptr;
      ++metrics_->snapshot_evictions_capacity;
      if (evict_hook_ != nullptr) evict_hook_(evict_context_, *n);
      detach(*n);
      pool_.lru().erase(*n, clock_->safe_before);
    }
    n->state = slot_state::pending;
    return n;
  }

  /// The candidates `take` would choose among now, oldest first, written into `out` (at most its size and
  /// the rule's window); returns how many. For tests and choosers. Complexity: as `take`.
  std::size_t candidates(std::span<policy::snapshot_candidate> out) const noexcept {
    const std::size_t limit = std::min<std::size_t>({out.size(), rule_.window, pool_.lru().safe_count()});
    std::size_t k = 0;
    // The safe nodes are a prefix of the queue (epoch_fifo), so the first `limit` nodes are all reusable.
    for (auto it = pool_.lru().begin(); k < limit; ++it) out[k++] = candidate(*it);
    return k;
  }

  /// Publishes pending slot `n` at the end of cached block `b`, restorable once `safe_before >= ready`;
  /// `from_decode`: a turn end or a decode checkpoint (only those are ever superseded, see `demote`).
  void attach(slot_node& n, block_node& b, exactness kind, epoch_t ready, bool from_decode = false) noexcept {
    n.state = slot_state::published;
    n.from_decode = from_decode;
    n.superseded = false;
    n.restores = 0;
    n.block = blocks_->id_of(b);
    n.kind = kind;
    n.ready_tag = ready;
    n.last_use = clock_->current;
    n.refcount = 0;
    b.snapshot[static_cast<int>(kind)] = pool_.id_of(n);
    pool_.lru().push_back(n, clock_->release_tag(), clock_->safe_before);
    ++metrics_->snapshots_held;
    metrics_->snapshot_bytes_held += bytes_per_snapshot_;
  }

  /// Frees a pending or detached slot, reusable once the current step completes (its kernels may still
  /// write or read it).
  void release(slot_node& n) noexcept {
    n.state = slot_state::free;
    n.refcount = 0;
    pool_.free().push_back(n, clock_->release_tag(), clock_->safe_before);
  }

  /// Holds published snapshot `s` for a restore (out of the LRU queue while held).
  void hold(slot_id s) noexcept {
    slot_node& n = pool_.node(s);
    if (n.refcount++ == 0) pool_.lru().erase(n, clock_->safe_before);
  }
  /// Ends a hold; `restored`: the restore ran (the holder committed), so it counts. A hold released before
  /// that (an engine's matched-token query, a request not scheduled) counts nothing. A snapshot restored a
  /// second time (a sibling of a fanned-out step, a regeneration, a fork) is a branch point: no one
  /// session's next turn supersedes it any more, and if a session already had, it is no longer first to go.
  void unhold(slot_id s, bool restored) noexcept {
    slot_node& n = pool_.node(s);
    if (restored && n.restores != UINT32_MAX) ++n.restores; // saturates: only the ordering of counts is read
    if (n.restores > 1) n.superseded = false;
    if (--n.refcount != 0) return;
    n.last_use = clock_->current;
    pool_.lru().push_back(n, clock_->release_tag(), clock_->safe_before);
  }

  /// Moves snapshot `s` to the front of the LRU queue (the next one evicted) if it is still the idle
  /// turn-end or decode-checkpoint snapshot of block `b` and its last hold ended in a completed step, so
  /// that its slot may be reused at once. Otherwise changes nothing: a snapshot captured in a prefill (a
  /// shared prefix's branch point) is never superseded by one conversation's next turn. Complexity: O(1).
  void demote(slot_id s, block_id b) noexcept {
    slot_node& n = pool_.node(s);
    if (!supersedable(s, b) || n.tag > clock_->safe_before) return;
    pool_.lru().erase(n, clock_->safe_before);
    pool_.lru().push_front_safe(n);
    n.superseded = true;
  }

  /// Drops snapshot `s` if it is still the idle from-decode snapshot of block `b` (a sequence's checkpoint
  /// beyond its bound); its slot is reusable once the current step completes. Complexity: O(1).
  /// A checkpoint restored twice is dropped too: the bound on a sequence's checkpoints is a memory bound.
  void discard(slot_id s, block_id b) noexcept {
    if (idle_from_decode(s, b)) drop(pool_.node(s));
  }

  /// Drops the snapshots attached to block `b` (it is being evicted). Precondition: none is held (a
  /// restoring sequence holds the block too, so an evicted block's snapshots are idle).
  void invalidate(block_node& b) noexcept {
    for (slot_id s : b.snapshot) {
      if (s == no_slot) continue;
      ++metrics_->snapshot_evictions_invalidated;
      drop(pool_.node(s));
    }
  }

  /// Evicts idle snapshots unused for more than `ttl` steps (0: no TTL). Complexity: O(evicted).
  void expire(std::uint64_t ttl) noexcept {
    if (ttl == 0) return;
    while (slot_node* head = pool_.lru().front()) {
      if (clock_->current - head->last_use <= ttl) break;
      ++metrics_->snapshot_evictions_ttl;
      drop(*head);
    }
  }

  /// The snapshot at block `b`'s end that a restore may use now, or no_slot: prefill-exact first, then
  /// (when accepted) decode-continuation, each once its capture's step completed.
  slot_id usable(const block_node& b, bool accept_continuation) const noexcept {
    const slot_id exact = b.snapshot[static_cast<int>(exactness::prefill_exact)];
    if (exact != no_slot && ready(exact)) return exact;
    if (accept_continuation) {
      const slot_id cont = b.snapshot[static_cast<int>(exactness::decode_continuation)];
      if (cont != no_slot && ready(cont)) return cont;
    }
    return no_slot;
  }

  void advance(epoch_t safe_before) noexcept { pool_.advance(safe_before); }

  /// Restorable now: its capture's step completed.
  bool ready(slot_id s) const noexcept { return pool_.node(s).ready_tag <= clock_->safe_before; }

private:
  /// The position a published snapshot sits at: the end of its block, or of a tail's tokens.
  std::uint64_t position_of(const block_node& b) const noexcept {
    const std::uint64_t B = blocks_->block_size();
    return b.state == block_state::tail ? std::uint64_t{b.depth} * B + b.fill : (std::uint64_t{b.depth} + 1) * B;
  }

  /// Candidate `n`: its position, the deepest other snapshot at or before it on its chain (the same block's
  /// other class, then up to `fallback_walk_blocks` ancestors), the FLOPs that difference costs.
  policy::snapshot_candidate candidate(const slot_node& n) const noexcept {
    policy::snapshot_candidate c;
    c.slot = pool_.id_of(n);
    c.last_use = n.last_use;
    c.superseded = n.superseded;
    c.restores = n.restores;
    const block_node& own = blocks_->node(n.block);
    c.position = position_of(own);
    const slot_id other = own.snapshot[1 - static_cast<int>(n.kind)];
    if (other != no_slot) {
      c.fallback = c.position;
    } else {
      // A tail's parent ends at the tail's start; a full block's parent ends one block before it.
      block_id b = own.parent;
      std::uint64_t end = std::uint64_t{own.depth} * blocks_->block_size();
      bool found = false;
      for (std::uint32_t walked = 0; b != no_block && walked < fallback_walk_blocks; ++walked) {
        const block_node& p = blocks_->node(b);
        if (p.snapshot[0] != no_slot || p.snapshot[1] != no_slot) {
          found = true;
          break;
        }
        b = p.parent;
        end -= blocks_->block_size();
      }
      // None within the walk: valued as if none sat above it (its whole prefix, as Marconi values a state).
      // Deep chains whose older snapshots went are what the walk misses, and a lower bound there (one just
      // past the walk) undervalues exactly the snapshots that save the most.
      c.fallback = found ? end : 0;
    }
    c.saved_flops = rule_.cost.flops(c.position) - rule_.cost.flops(c.fallback);
    return c;
  }

  /// The idle snapshot `take` evicts, or null when none is reusable.
  slot_node* victim() noexcept {
    slot_node* front = pool_.lru().front_safe();
    if (front == nullptr || rule_.plain_lru() || front->superseded) return front;
    std::array<policy::snapshot_candidate, policy::max_eviction_window> buffer;
    const std::size_t k = candidates(buffer);
    const std::span<const policy::snapshot_candidate> c(buffer.data(), k);
    std::size_t pick = 0;
    if (rule_.chooser) {
      // A caller's chooser sees the superseded ones too; they still go first.
      for (; pick < k && !c[pick].superseded; ++pick) {}
      if (pick == k) pick = rule_.chooser.choose(rule_.chooser.context, c, clock_->current);
      if (pick >= k) pick = 0;
    } else if (rule_.kind == policy::snapshot_eviction::cost_aware) {
      pick = cost_aware_choice(c, clock_->current);
    }
    return &pool_.node(c[pick].slot);
  }

  /// Still the idle from-decode snapshot of block `b` (not evicted and reused since).
  bool idle_from_decode(slot_id s, block_id b) const noexcept {
    const slot_node& n = pool_.node(s);
    return n.state == slot_state::published && n.block == b && n.from_decode && n.refcount == 0;
  }
  /// ... and no branch point.
  bool supersedable(slot_id s, block_id b) const noexcept { return idle_from_decode(s, b) && !pool_.node(s).forked(); }

  void detach(slot_node& n) noexcept {
    if (detach_hook_ != nullptr) detach_hook_(detach_context_, n);
    block_node& b = blocks_->node(n.block);
    b.snapshot[static_cast<int>(n.kind)] = no_slot;
    n.block = no_block;
    --metrics_->snapshots_held;
    metrics_->snapshot_bytes_held -= bytes_per_snapshot_;
  }

  /// Unpublishes an idle published snapshot; its slot is reusable once the current step completes.
  void drop(slot_node& n) noexcept {
    detach(n);
    pool_.lru().erase(n, clock_->safe_before);
    release(n);
  }

  snapshot_pool pool_;
  evict_hook evict_hook_ = nullptr;
  void* evict_context_ = nullptr;
  evict_hook detach_hook_ = nullptr;
  void* detach_context_ = nullptr;
  std::size_t bytes_per_snapshot_;
  block_pool* blocks_;
  const epoch_clock* clock_;
  cache_metrics* metrics_;
  eviction_rule rule_{};
};

} // namespace reprise::detail
