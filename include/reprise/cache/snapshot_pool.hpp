// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `snapshot_pool`: fixed-size snapshot slots under a byte budget, with their own LRU, optional TTL and
/// epoch-deferred reuse. The engine owns the slot memory (`slots() * bytes_per_snapshot` bytes); the pool
/// owns the slot ids.
///
/// Slot states:
///   free       in the free queue (maybe waiting for its epoch);
///   pending    planned as a capture; the sequence that will write it holds it until `commit` or release;
///   published  attached to the cached block that ends at its position (the snapshot index is the blocks'
///              `snapshot[]` references); in the LRU queue iff no sequence restores from it.

#include <reprise/cache/epoch_fifo.hpp>
#include <reprise/cache/types.hpp>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace reprise::detail {

enum class slot_state : std::uint8_t { free, pending, published };

struct slot_node {
  list_hook queue_link;         ///< free queue or LRU queue
  epoch_t tag = 0;              ///< epoch_fifo tag
  epoch_t ready_tag = 0;        ///< restorable once safe_before >= ready_tag (end-of-turn captures)
  epoch_t last_use = 0;         ///< epoch of publication or last restore, for the TTL
  block_id block = no_block;    ///< published: the block ending at the snapshot's position
  std::uint32_t refcount = 0;   ///< sequences restoring from it
  bool forked() const noexcept { return restores > 1; }
  exactness kind = exactness::prefill_exact;
  slot_state state = slot_state::free;
  bool from_decode = false;     ///< a turn end or decode checkpoint: superseded once the session moves on
  bool superseded = false;      ///< demoted: its session moved on, so a lower tier does not keep it
  /// Restores run since its publication (holds released before their holder committed do not count); from
  /// the second on it is a branch point (a fork, a sibling step, a regeneration), which no one session's next
  /// turn supersedes.
  std::uint32_t restores = 0;
};

class snapshot_pool {
public:
  using queue = epoch_fifo<slot_node, &slot_node::queue_link, &slot_node::tag>;

  explicit snapshot_pool(std::uint32_t slots) : nodes_(slots) {
    for (slot_node& n : nodes_) free_.push_back(n, 0, 0);
  }
  snapshot_pool(const snapshot_pool&) = delete;
  snapshot_pool& operator=(const snapshot_pool&) = delete;

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(nodes_.size()); }
  /// Precondition: 0 <= s < size().
  slot_node& node(slot_id s) noexcept { return nodes_[static_cast<std::size_t>(s)]; }
  const slot_node& node(slot_id s) const noexcept { return nodes_[static_cast<std::size_t>(s)]; }
  slot_id id_of(const slot_node& n) const noexcept { return static_cast<slot_id>(&n - nodes_.data()); }

  queue& free() noexcept { return free_; }
  const queue& free() const noexcept { return free_; }
  queue& lru() noexcept { return lru_; }
  const queue& lru() const noexcept { return lru_; }

  void advance(epoch_t safe_before) noexcept {
    free_.advance(safe_before);
    lru_.advance(safe_before);
  }

private:
  std::vector<slot_node> nodes_;
  queue free_;
  queue lru_;
};

} // namespace reprise::detail
