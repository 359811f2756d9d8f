// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `block_ledger`: the operations on KV block ids (take, evict, reference, publish), over the block pool and
/// its index, with the gauges they move. Like vLLM's `BlockPool`, it knows blocks, not sequences or
/// snapshots: eviction tells its caller through a callback, which drops the snapshots attached to the block.
///
/// `epoch_clock` is shared with the snapshot ledger: both defer reuse of what was given up in step n until
/// the engine reports step n complete (kernels of step n may still read it).

#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace reprise::detail {

/// The step being scheduled and the reuse boundary, shared by both ledgers.
struct epoch_clock {
  epoch_t current = 0;     ///< the step being scheduled (at most max_epoch + 1)
  epoch_t safe_before = 0; ///< nodes tagged <= safe_before are reusable
  /// The tag of what is given up now: reusable once the current step completes. At most 2^64 - 1.
  epoch_t release_tag() const noexcept { return current + 1; }
};

class block_ledger {
public:
  /// Leaf-first LRU victims whose index buckets `admit` prefetches ahead of evicting them.
  static constexpr std::uint32_t eviction_lookahead = 8;

  block_ledger(std::uint32_t blocks, std::uint32_t block_size, const epoch_clock& clock, cache_metrics& m)
      : pool_(blocks, block_size), index_(pool_), tails_(blocks), clock_(&clock), metrics_(&m) {
    m.blocks_free = blocks;
  }

  block_pool& pool() noexcept { return pool_; }
  const block_pool& pool() const noexcept { return pool_; }
  const block_index& index() const noexcept { return index_; }
  const tail_index& tails() const noexcept { return tails_; }
  block_node& node(block_id b) noexcept { return pool_.node(b); }
  const block_node& node(block_id b) const noexcept { return pool_.node(b); }
  block_id id_of(const block_node& n) const noexcept { return pool_.id_of(n); }
  std::uint32_t size() const noexcept { return pool_.size(); }

  /// The cached block equal to `p` (verified: key, parent, tokens, extra keys), or null.
  block_node* find(const block_probe& p) noexcept { return index_.find(p); }
  /// Every cached block equal to `p` but for its class and origin (block_index::for_each_alike).
  template <class F>
  void for_each_alike(const block_probe& p, F&& f) {
    index_.for_each_alike(p, f);
  }
  void prefetch(const block_key& k) const noexcept { index_.prefetch(k); }

  /// Blocks `take` could return now. Complexity: O(1).
  std::size_t available() const noexcept { return pool_.available(); }

  /// Blocks `take` could return after the `held` and `also_held` blocks (about to be referenced) leave the
  /// LRU queue. Complexity: O(held).
  std::size_t available_excluding(std::span<const block_id> held, std::span<const block_id> also_held = {}) const noexcept {
    std::size_t in_lru_safe = 0;
    for (std::span<const block_id> list : {held, also_held})
      for (block_id b : list) {
        const block_node& n = pool_.node(b);
        if (n.refcount == 0 && n.tag <= clock_->safe_before) ++in_lru_safe;
      }
    return pool_.available() - in_lru_safe;
  }

  /// Takes a reusable block with refcount 1: a safe free one, else the LRU head, evicted after
  /// `on_evict(node)` has dropped what hangs on it. Precondition: available() > 0. Complexity: O(1).
  template <class OnEvict>
  block_id take(OnEvict&& on_evict) noexcept {
    block_node* n = pool_.free().front_safe();
    if (n != nullptr) {
      pool_.free().erase(*n, clock_->safe_before);
      --metrics_->blocks_free;
    } else {
      n = pool_.lru().front_safe();
      on_evict(*n);
      evict(*n);
    }
    n->state = block_state::owned;
    n->has_media = false; // a fresh block's tokens are the taker's (`block_pool::set_media`)
    n->refcount = 1;
    ++metrics_->blocks_referenced;
    return pool_.id_of(*n);
  }

  /// Starts loading the index buckets of the next `eviction_lookahead` LRU victims; returns the position
  /// past them, for `prefetch_next_victim` (only the head is ever evicted, so it stays valid).
  auto prefetch_victims() const noexcept {
    auto ahead = pool_.lru().begin();
    for (std::uint32_t k = 0; k < eviction_lookahead && ahead != pool_.lru().end(); ++k, ++ahead)
      index_.prefetch(ahead->key);
    return ahead;
  }
  template <class It>
  void prefetch_next_victim(It& ahead) const noexcept {
    if (ahead != pool_.lru().end()) index_.prefetch((ahead++)->key);
  }

  void reference(block_node& n) noexcept {
    if (n.refcount++ == 0) {
      pool_.lru().erase(n, clock_->safe_before);
      ++metrics_->blocks_referenced;
    }
  }

  /// Drops one reference; an unreferenced cached block joins the LRU queue, an unpublished one the free
  /// queue (both reusable once the current step completes).
  void unreference(block_node& n) noexcept {
    if (--n.refcount != 0) return;
    --metrics_->blocks_referenced;
    if (n.state == block_state::cached || n.state == block_state::tail) {
      pool_.lru().push_back(n, clock_->release_tag(), clock_->safe_before);
    } else {
      n.state = block_state::free;
      pool_.free().push_back(n, clock_->release_tag(), clock_->safe_before);
      ++metrics_->blocks_free;
    }
  }

  /// Publishes owned block `b` as `probe` describes it (key, parent, tokens, media, class), unless an equal block
  /// is cached: then that one is referenced and returned instead (`b` stays private to its sequence).
  /// Complexity: O(1) expected plus one B-token compare per same-key candidate.
  block_id publish(block_id b, const block_probe& probe, std::uint32_t depth, const stored_extra_keys& extras) noexcept {
    block_index::insert_commit_data data;
    if (block_node* equal = index_.insert_check(probe, data)) {
      reference(*equal);
      ++metrics_->duplicate_blocks;
      return pool_.id_of(*equal);
    }
    block_node& n = pool_.node(b);
    n.key = probe.key;
    n.parent = probe.parent;
    n.depth = depth;
    n.kind = probe.kind;
    n.state = block_state::cached;
    pool_.origin(b) = probe.kind == exactness::decode_continuation ? probe.origin : 0;
    pool_.set_media(b, probe.media != nullptr ? *probe.media : media_digest{});
    if (probe.parent == no_block) pool_.root_extras(b) = extras;
    else ++pool_.node(probe.parent).cached_children;
    index_.insert_commit(n, data);
    ++metrics_->blocks_published;
    ++metrics_->blocks_cached;
    return b;
  }

  /// Keeps owned block `b`, the partial block of a sequence that ends at depth * B + fill, as a tail under
  /// `parent` (starting from chain key `start`), with the media digest its tokens have now (`set_media`: a
  /// sequence's media items lie before its prompt's end, so all of the block's lie before the fill).
  /// Precondition: 0 < fill < B; `b` is held by the ending sequence only (it joins the LRU queue when that
  /// sequence lets go).
  void keep_tail(block_id b, const block_key& start, block_id parent, std::uint32_t depth, std::uint32_t fill,
                 exactness kind, const stored_extra_keys& extras) noexcept {
    block_node& n = pool_.node(b);
    n.key = start;
    n.parent = parent;
    n.depth = depth;
    n.fill = fill;
    n.kind = kind;
    n.state = block_state::tail;
    if (parent == no_block) pool_.root_extras(b) = extras;
    else ++pool_.node(parent).cached_children;
    tails_.insert(n);
    ++metrics_->tail_blocks;
  }

  /// Calls `f(node)` for every tail under `parent` that starts from chain key `start`, has the extra keys
  /// `extras` (checked for a tail at position 0), holds at most `tokens.size()` tokens equal to the first
  /// ones of `tokens`, and whose media digest is `media_of(fill)` (the caller's media among its first `fill`
  /// tokens). Complexity: O(1) expected plus O(B) per candidate, and a `media_of` call per candidate whose
  /// tokens match.
  template <class MediaOf, class F>
  void for_each_tail(const block_key& start, block_id parent, const stored_extra_keys& extras,
                     std::span<const token_id> tokens, MediaOf&& media_of, F&& f) {
    tails_.for_each(start, [&](block_node& n) {
      if (n.parent != parent || n.fill > tokens.size()) return;
      const block_id b = pool_.id_of(n);
      if (parent == no_block && !(pool_.root_extras(b) == extras)) return;
      if (std::memcmp(pool_.tokens(b).data(), tokens.data(), std::size_t{n.fill} * sizeof(token_id)) != 0) return;
      const media_digest want = media_of(n.fill);
      if (n.has_media ? pool_.media(b) != want : !want.empty()) return;
      f(n);
    });
  }

  void advance(epoch_t safe_before) noexcept { pool_.advance(safe_before); }

private:
  /// Evicts an unreferenced cached leaf or tail: it leaves its index and becomes owned by the taker.
  void evict(block_node& n) noexcept {
    pool_.lru().erase(n, clock_->safe_before);
    if (n.state == block_state::tail) {
      tails_.erase(n);
      --metrics_->tail_blocks;
    } else {
      index_.erase(n);
      --metrics_->blocks_cached;
    }
    if (n.parent != no_block) --pool_.node(n.parent).cached_children;
    n.parent = no_block;
    n.key = {};
    n.fill = 0;
    n.state = block_state::free;
    ++metrics_->kv_evictions;
  }

  block_pool pool_;
  block_index index_;
  tail_index tails_;
  const epoch_clock* clock_;
  cache_metrics* metrics_;
};

} // namespace reprise::detail
