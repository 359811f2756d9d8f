// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `block_pool`: bookkeeping for a fixed pool of KV block ids. The engine owns the block memory; the pool
/// owns the ids, their refcounts, the tokens each block holds (for hit verification), a free queue and the
/// LRU queue of cached blocks no sequence references.
///
/// Every block is in exactly one of four states:
///   free       in the free queue (maybe waiting for its epoch), refcount 0, not in an index;
///   cached     a full block in the block index; in the LRU queue iff refcount == 0;
///   tail       a partial block kept at a turn's end with the snapshot at its fill, in the tail index (found
///              by its parent); in the LRU queue iff refcount == 0;
///   owned      referenced by sequences, not (yet) in an index.
///
/// Leaf-first LRU: a sequence always holds a whole chain from the root, and releases it deepest block first,
/// so in the LRU queue every block precedes its parent. The head is therefore always a leaf of the cached
/// tree and evicting it never strands a cached child (`check_invariants` of the cache verifies the order).

#include <reprise/cache/epoch_fifo.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <boost/intrusive/unordered_set_hook.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::detail {

using index_hook = boost::intrusive::unordered_set_member_hook<
    boost::intrusive::link_mode<boost::intrusive::safe_link>, boost::intrusive::store_hash<true>>;

enum class block_state : std::uint8_t { free, owned, cached, tail };

struct block_node {
  index_hook index_link;         ///< block index (cached) or tail index (tail)
  list_hook queue_link;          ///< free queue or LRU queue
  block_key key{};               ///< cached: the chain key ending at the block; tail: the one it starts from
  block_id parent = no_block;    ///< cached parent (no_block for a chain's first block)
  std::uint32_t refcount = 0;
  std::uint32_t cached_children = 0;
  std::uint32_t depth = 0;       ///< index in its chain: the block covers [depth * B, (depth + 1) * B)
  epoch_t tag = 0;               ///< epoch_fifo tag
  slot_id snapshot[2] = {no_slot, no_slot}; ///< published snapshot at the block's end, by `exactness`
  std::uint32_t fill = 0;        ///< tail: tokens held (1 .. B - 1), from depth * B (here: the node stays 88 bytes)
  block_state state = block_state::free;
  exactness kind = exactness::prefill_exact; ///< how its KV was computed (valid while cached)
  /// Its tokens hold media items (`block_pool::media`): read first, so that verifying a text block never
  /// touches the side array.
  bool has_media = false;
};
static_assert(sizeof(block_node) <= 88, "block_node: keep the node within 88 bytes (pool scans and LRU walks)");

class block_pool {
public:
  using free_queue = epoch_fifo<block_node, &block_node::queue_link, &block_node::tag>;
  using lru_queue = epoch_fifo<block_node, &block_node::queue_link, &block_node::tag>;

  /// Effects: all `blocks` ids start free and immediately reusable.
  block_pool(std::uint32_t blocks, std::uint32_t block_size)
      : block_size_(block_size), nodes_(blocks), tokens_(std::size_t{blocks} * block_size), root_extras_(blocks),
        origins_(blocks, 0), media_(blocks) {
    for (block_node& n : nodes_) free_.push_back(n, 0, 0);
  }
  block_pool(const block_pool&) = delete;
  block_pool& operator=(const block_pool&) = delete;

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(nodes_.size()); }
  std::uint32_t block_size() const noexcept { return block_size_; }

  /// Precondition for every accessor taking an id: 0 <= b < size().
  block_node& node(block_id b) noexcept { return nodes_[index(b)]; }
  const block_node& node(block_id b) const noexcept { return nodes_[index(b)]; }
  block_id id_of(const block_node& n) const noexcept { return static_cast<block_id>(&n - nodes_.data()); }

  /// The B tokens stored for block `b` (the tokens of a partial block beyond its fill are stale).
  std::span<token_id> tokens(block_id b) noexcept { return {tokens_.data() + index(b) * block_size_, block_size_}; }
  std::span<const token_id> tokens(block_id b) const noexcept {
    return {tokens_.data() + index(b) * block_size_, block_size_};
  }
  /// The same with the block size `B` as a compile-time constant. Precondition: B == block_size().
  template <std::uint32_t B>
  std::span<token_id, B> tokens_of(block_id b) noexcept {
    return std::span<token_id, B>(tokens_.data() + index(b) * B, B);
  }
  template <std::uint32_t B>
  std::span<const token_id, B> tokens_of(block_id b) const noexcept {
    return std::span<const token_id, B>(tokens_.data() + index(b) * B, B);
  }
  /// Extra keys of a chain's first block (meaningful only for cached blocks with depth 0).
  stored_extra_keys& root_extras(block_id b) noexcept { return root_extras_[index(b)]; }
  const stored_extra_keys& root_extras(block_id b) const noexcept { return root_extras_[index(b)]; }
  /// The computation that wrote a cached decode_continuation block (`block_probe::origin`); 0 for a
  /// prefill-exact one. Beside the node, which stays within 88 bytes; read only where blocks of equal
  /// tokens meet (publish, and a lookup past the prefill-computed prefix).
  std::uint64_t& origin(block_id b) noexcept { return origins_[index(b)]; }
  std::uint64_t origin(block_id b) const noexcept { return origins_[index(b)]; }

  /// The media digest of the items among the block's tokens (for a partial block, among those it holds),
  /// all zero without media. Beside the node, which stays within 88 bytes; `block_node::has_media` says
  /// whether it is worth reading.
  media_digest media(block_id b) const noexcept {
    return nodes_[index(b)].has_media ? media_[index(b)] : media_digest{};
  }
  void set_media(block_id b, const media_digest& m) noexcept {
    media_[index(b)] = m;
    nodes_[index(b)].has_media = !m.empty();
  }
  /// The media digest of block `b` as a probe compares it: null without media.
  const media_digest* media_or_null(block_id b) const noexcept {
    return nodes_[index(b)].has_media ? &media_[index(b)] : nullptr;
  }

  free_queue& free() noexcept { return free_; }
  const free_queue& free() const noexcept { return free_; }
  lru_queue& lru() noexcept { return lru_; }
  const lru_queue& lru() const noexcept { return lru_; }

  /// Blocks an allocation could take right now without waiting for an epoch: safe free blocks plus safe
  /// unreferenced cached blocks (evictable). Complexity: O(1).
  std::size_t available() const noexcept { return free_.safe_count() + lru_.safe_count(); }

  void advance(epoch_t safe_before) noexcept {
    free_.advance(safe_before);
    lru_.advance(safe_before);
  }

private:
  static std::size_t index(block_id b) noexcept { return static_cast<std::size_t>(b); }

  std::uint32_t block_size_;
  std::vector<block_node> nodes_;
  std::vector<token_id> tokens_;
  std::vector<stored_extra_keys> root_extras_;
  std::vector<std::uint64_t> origins_;
  std::vector<media_digest> media_;
  free_queue free_;
  lru_queue lru_;
};

} // namespace reprise::detail
