// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `state_events`: what this cache tells a fleet router it holds (`cache_options::state_events`), as a
/// component beside the core. When the option names a key source, the cache reports every full KV block it
/// publishes or evicts (by chain content key, end position and class) and every snapshot it publishes or
/// drops (by snapshot key, the chain key before it, position and class; a turn end's tail tokens are part of
/// its key), in the vocabulary of <reprise/keys/state_keys.hpp>; `take` hands them out. Off (the default), it
/// holds nothing and every hook returns at once.
///
/// What is reported is what GPU memory holds: a block or snapshot offloaded to the host tier is reported
/// removed (the engine could still onboard it; a router that does not know costs a missed route, never a
/// wrong hit). Keys cost one SHA-256 (with `content_keyer`) per published block and snapshot.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/state_keys.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::detail {

class state_events {
public:
  /// Throws `std::bad_alloc`. Allocates nothing when `keys` is empty.
  state_events(state_keys_ref keys, block_ledger& blocks, snapshot_ledger& slots, const sequence_table& sequences)
      : keys_(keys), blocks_(&blocks), slots_(&slots), sequences_(&sequences) {
    if (!keys_) return;
    block_keys_.resize(blocks.size());
    slot_events_.resize(slots.size());
    roots_.resize(sequences.capacity());
    slots.set_detach_hook(&snapshot_detached, this);
  }
  state_events(const state_events&) = delete; // the snapshot ledger's hook points at it
  state_events& operator=(const state_events&) = delete;

  bool enabled() const noexcept { return static_cast<bool>(keys_); }

  void sequence_prepared(const sequence_record& r, const extra_keys& keys) noexcept {
    if (enabled()) roots_[sequences_->index_of(r)] = keys_.root(keys);
  }
  void sequence_forked(const sequence_record& from, const sequence_record& to) noexcept {
    if (enabled()) roots_[sequences_->index_of(to)] = roots_[sequences_->index_of(from)];
  }

  /// Block `b` of sequence `r` was published (a full block: reported stored) or kept as a turn end's tail
  /// (remembered: its snapshot's key continues the chain key before it).
  void block_published(block_id b, const sequence_record& r) noexcept {
    if (!enabled()) return;
    const block_node& n = blocks_->node(b);
    const content_key parent = n.parent == no_block ? roots_[sequences_->index_of(r)] : key_of(n.parent);
    if (n.state != block_state::cached) {
      key_of(b) = parent;
      return;
    }
    key_of(b) = is_zero(parent) ? content_key{} : keys_.chain(parent, blocks_->pool().tokens(b));
    if (!is_zero(key_of(b)))
      events_.push_back(state_event::block(state_change::stored, key_of(b), end_of(n), n.kind));
  }

  /// Block `n` leaves GPU memory (its snapshots are reported as the ledger drops them).
  void block_evicted(const block_node& n) noexcept {
    if (!enabled()) return;
    content_key& key = key_of(blocks_->id_of(n));
    if (n.state == block_state::cached && !is_zero(key))
      events_.push_back(state_event::block(state_change::removed, key, end_of(n), n.kind));
    key = {};
  }

  /// Snapshot slot `s` was published at the end of block `b` (a full block's end, or a tail's) as `kind`.
  void snapshot_published(slot_id s, block_id b, exactness kind) noexcept {
    if (!enabled()) return;
    const block_node& n = blocks_->node(b);
    const std::uint32_t B = blocks_->pool().block_size();
    const bool tail = n.state == block_state::tail;
    const content_key& parent = key_of(b); // a full block's own key, a tail's predecessor's
    const std::uint64_t position = tail ? std::uint64_t{n.depth} * B + n.fill : std::uint64_t{n.depth + 1} * B;
    state_event& e = slot_events_[static_cast<std::size_t>(s)];
    e = {};
    if (is_zero(parent)) return;
    const content_key key =
        keys_.snapshot(parent, tail ? blocks_->pool().tokens(b).first(n.fill) : std::span<const token_id>{}, position, kind);
    if (is_zero(key)) return;
    e = state_event::snapshot(state_change::stored, key, parent, position, kind);
    events_.push_back(e);
  }

  /// The events since the previous call; the span stays valid until the next call. An engine takes them once
  /// per step (they accumulate until then).
  std::span<const state_event> take() noexcept {
    taken_.swap(events_);
    events_.clear();
    return taken_;
  }

  /// Every reported key is the one its block or snapshot has now. Complexity: O(blocks + slots) key derivations.
  bool check() const {
    if (!enabled()) return true;
    for (std::uint32_t i = 0; i < slots_->size(); ++i) {
      const state_event& e = slot_events_[i];
      if (is_zero(e.key)) continue;
      const slot_node& n = slots_->node(static_cast<slot_id>(i));
      if (n.state != slot_state::published || n.kind != e.exact) return false;
    }
    for (block_id b = 0; b < static_cast<block_id>(blocks_->size()); ++b) {
      const block_node& n = blocks_->node(b);
      const content_key& key = block_keys_[static_cast<std::size_t>(b)];
      if (is_zero(key)) continue;
      if (n.state != block_state::cached && n.state != block_state::tail) return false;
      if (n.state == block_state::cached && n.parent != no_block && key != keys_.chain(key_of(n.parent), blocks_->pool().tokens(b)))
        return false;
    }
    return true;
  }

private:
  static bool is_zero(const content_key& k) noexcept { return k == content_key{}; }
  content_key& key_of(block_id b) noexcept { return block_keys_[static_cast<std::size_t>(b)]; }
  const content_key& key_of(block_id b) const noexcept { return block_keys_[static_cast<std::size_t>(b)]; }
  std::uint64_t end_of(const block_node& n) const noexcept {
    return std::uint64_t{n.depth + 1} * blocks_->pool().block_size();
  }

  static void snapshot_detached(void* self, const slot_node& n) noexcept {
    auto& c = *static_cast<state_events*>(self);
    state_event& e = c.slot_events_[static_cast<std::size_t>(c.slots_->id_of(n))];
    if (is_zero(e.key)) return;
    e.change = state_change::removed;
    c.events_.push_back(e);
    e = {};
  }

  state_keys_ref keys_;
  block_ledger* blocks_;
  snapshot_ledger* slots_;
  const sequence_table* sequences_;
  std::vector<content_key> block_keys_;  ///< by GPU block: its chain key (a tail: the key before it)
  std::vector<state_event> slot_events_; ///< by GPU slot: the event its publication reported
  std::vector<content_key> roots_;       ///< by sequence record: key_{-1}
  std::vector<state_event> events_, taken_;
};

} // namespace reprise::detail
