// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `block_index`: key -> cached block (and `tail_index`: start key -> the partial blocks kept there), a Boost.Intrusive `unordered_set` over the pool's nodes with a bucket
/// array allocated once (a power of two >= the number of blocks), so lookups and inserts never allocate.
///
/// A lookup is a *verified* match: same 128-bit key, same parent block, same B tokens, the same media digest
/// (the media items among those tokens, at their offsets), the same exactness class, and for a chain's first
/// block the same extra keys. The class is part of a block's identity: a
/// prefix whose KV was computed by prefill and the same prefix filled by decode steps are two blocks (their
/// KV differs in the last bits), so a prefill-exact policy always finds the prefill-computed one. The parent check makes the verification
/// inductive: a cached block's parent is cached (leaf-first eviction), so equal parent ids mean equal
/// prefixes. A hasher that returns one constant for everything only makes the buckets long.

#include <reprise/cache/block_pool.hpp>

#include <boost/intrusive/unordered_set.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

namespace reprise::detail {

/// What a lookup or insert compares against.
struct block_probe {
  block_key key;
  block_id parent = no_block;
  std::span<const token_id> tokens;         ///< exactly B tokens
  const stored_extra_keys* extras = nullptr; ///< compared when parent == no_block
  const media_digest* media = nullptr;       ///< the block's media (null: none)
  exactness kind = exactness::prefill_exact;
  /// decode_continuation: which computation wrote the block (a sequence's `origin`). Two such blocks of
  /// equal tokens hold equal bits only when one computation wrote both, so the origin is part of their
  /// identity; a prefill-exact block's bits follow from its tokens alone (origin ignored).
  std::uint64_t origin = 0;
};

class block_index {
  struct node_hash {
    std::size_t operator()(const block_node& n) const noexcept { return static_cast<std::size_t>(n.key.lo); }
    std::size_t operator()(const block_probe& p) const noexcept { return static_cast<std::size_t>(p.key.lo); }
  };
  /// Node-to-node equality is identity: two distinct cached nodes are never equal (inserts are unique).
  struct node_identity {
    bool operator()(const block_node& a, const block_node& b) const noexcept { return &a == &b; }
  };
  struct probe_equal {
    const block_pool* pool;
    bool operator()(const block_probe& p, const block_node& n) const noexcept { return matches(p, n); }
    bool operator()(const block_node& n, const block_probe& p) const noexcept { return matches(p, n); }
    bool matches(const block_probe& p, const block_node& n) const noexcept {
      if (n.kind != p.kind) return false;
      if (p.kind == exactness::decode_continuation && pool->origin(pool->id_of(n)) != p.origin) return false;
      return alike(p, n);
    }
    /// The same tokens after the same parent: everything but the class and the origin.
    bool alike(const block_probe& p, const block_node& n) const noexcept {
      if (n.key != p.key || n.parent != p.parent || n.has_media != (p.media != nullptr)) return false;
      const auto stored = pool->tokens(pool->id_of(n));
      if (std::memcmp(stored.data(), p.tokens.data(), p.tokens.size_bytes()) != 0) return false;
      if (p.media != nullptr && *pool->media_or_null(pool->id_of(n)) != *p.media) return false;
      return p.parent != no_block || pool->root_extras(pool->id_of(n)) == *p.extras;
    }
  };
  using set_type = boost::intrusive::unordered_set<
      block_node, boost::intrusive::member_hook<block_node, index_hook, &block_node::index_link>,
      boost::intrusive::hash<node_hash>, boost::intrusive::equal<node_identity>,
      boost::intrusive::power_2_buckets<true>, boost::intrusive::constant_time_size<true>>;

public:
  using insert_commit_data = typename set_type::insert_commit_data;

  explicit block_index(const block_pool& pool)
      : pool_(&pool), buckets_(std::bit_ceil(std::max<std::size_t>(pool.size(), 2))),
        set_(typename set_type::bucket_traits(buckets_.data(), buckets_.size())) {}
  block_index(const block_index&) = delete;
  block_index& operator=(const block_index&) = delete;
  ~block_index() { set_.clear(); }

  /// The cached block equal to `p`, or null. Complexity: O(1) expected, plus one B-token compare per
  /// candidate with the same key.
  block_node* find(const block_probe& p) noexcept {
    auto it = set_.find(p, node_hash{}, probe_equal{pool_});
    return it == set_.end() ? nullptr : &*it;
  }

  /// Calls `f(node)` for every cached block equal to `p` but for its class and origin: the blocks of these
  /// tokens after this parent that a prefill and different decode continuations wrote. Complexity: as
  /// `find`, over the key's bucket.
  template <class F>
  void for_each_alike(const block_probe& p, F&& f) {
    const probe_equal eq{pool_};
    const auto bucket = set_.bucket(p, node_hash{});
    for (auto it = set_.begin(bucket); it != set_.end(bucket); ++it)
      if (eq.alike(p, *it)) f(*it);
  }

  /// First half of a unique insert: null and `data` filled when no equal block is cached, else the equal one.
  block_node* insert_check(const block_probe& p, insert_commit_data& data) noexcept {
    auto [it, ok] = set_.insert_unique_check(p, node_hash{}, probe_equal{pool_}, data);
    return ok ? nullptr : &*it;
  }
  /// Second half: links `n` (whose key the check used) without a second probe.
  void insert_commit(block_node& n, const insert_commit_data& data) noexcept { set_.insert_unique_commit(n, data); }

  void erase(block_node& n) noexcept { set_.erase(set_.iterator_to(n)); }

  /// Starts loading the bucket of key `key` (power-of-two buckets: the low bits of `key.lo`). A hint only:
  /// it changes nothing, and a wrong guess costs one wasted load.
  void prefetch(const block_key& key) const noexcept {
    __builtin_prefetch(buckets_.data() + (static_cast<std::size_t>(key.lo) & (buckets_.size() - 1)));
  }
  std::size_t size() const noexcept { return set_.size(); }
  bool contains(const block_node& n) const noexcept { return n.index_link.is_linked(); }

private:
  const block_pool* pool_;
  std::vector<typename set_type::bucket_type> buckets_;
  set_type set_;
};

/// `tail_index`: the partial blocks kept at turn ends (`block_state::tail`), by the chain key they start
/// from (their parent's key, or the root key for a tail at position 0). A lookup lists a parent's tails; the
/// caller verifies each candidate's parent, extra keys, tokens and media. A node is in this index or in the block
/// index, never both (they share its hook). Buckets are allocated once.
class tail_index {
  struct key_hash {
    std::size_t operator()(const block_node& n) const noexcept { return static_cast<std::size_t>(n.key.lo); }
    std::size_t operator()(const block_key& k) const noexcept { return static_cast<std::size_t>(k.lo); }
  };
  struct key_equal {
    bool operator()(const block_node& a, const block_node& b) const noexcept { return a.key == b.key; }
    bool operator()(const block_key& k, const block_node& n) const noexcept { return k == n.key; }
    bool operator()(const block_node& n, const block_key& k) const noexcept { return k == n.key; }
  };
  using set_type = boost::intrusive::unordered_multiset<
      block_node, boost::intrusive::member_hook<block_node, index_hook, &block_node::index_link>,
      boost::intrusive::hash<key_hash>, boost::intrusive::equal<key_equal>, boost::intrusive::power_2_buckets<true>,
      boost::intrusive::constant_time_size<true>>;

public:
  explicit tail_index(std::size_t capacity)
      : buckets_(std::bit_ceil(std::max<std::size_t>(capacity, 2))),
        set_(typename set_type::bucket_traits(buckets_.data(), buckets_.size())) {}
  tail_index(const tail_index&) = delete;
  tail_index& operator=(const tail_index&) = delete;
  ~tail_index() { set_.clear(); }

  /// Calls `f(node)` for every tail whose start key is `start`. Complexity: O(1) expected plus the tails
  /// of that key.
  template <class F>
  void for_each(const block_key& start, F&& f) {
    auto [it, end] = set_.equal_range(start, key_hash{}, key_equal{});
    for (; it != end; ++it) f(*it);
  }
  void insert(block_node& n) noexcept { set_.insert(n); }
  void erase(block_node& n) noexcept { set_.erase(set_.iterator_to(n)); }
  std::size_t size() const noexcept { return set_.size(); }

private:
  std::vector<typename set_type::bucket_type> buckets_;
  set_type set_;
};

} // namespace reprise::detail
