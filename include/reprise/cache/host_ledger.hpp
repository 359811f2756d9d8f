// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `host_ledger`: the host tier's bookkeeping (`policy::host_tier`). The engine owns two pools of pinned host
/// memory, one of KV-block units and one of snapshot units; the ledger owns their ids: what each holds, an
/// index to find it again, an LRU queue per pool and the epoch tags that keep a unit from being overwritten
/// while a step may still read it.
///
/// Identity across tiers. In GPU memory a cached block is verified by its key, its parent *block id*, its
/// tokens, its class and (first blocks) the extra keys, and leaf-first eviction keeps parents cached. A
/// block that left the GPU has no block id, and its parent may have left too, so every published block
/// carries a *serial*: a 64-bit number drawn once when it is published and never reused, which moves with
/// it between tiers (an onboarded block keeps its serial). A host block is verified by its key, its parent's
/// serial, its tokens, its class and (first blocks) the extra keys: equal parent serials mean the same
/// published parent, so the verification stays inductive without any hash being trusted. A host snapshot
/// is found by the serial of the block (or partial block) it sits at the end of and its class.
///
/// A unit read by an onboard or a restore in step n re-enters the LRU queue tagged n + 1, so no offload
/// overwrites it before step n completes; units held by a sequence (a restore not yet run) are out of the
/// queue altogether.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/epoch_fifo.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <boost/intrusive/unordered_set.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace reprise::detail {

/// A unit of one of the host tier's pools (KV or snapshot); `no_host_unit` when none. Its own type: a host
/// unit is never a GPU block id or snapshot slot, and the two meet only in typed moves (`host_tier.hpp`).
/// The engine-facing plans carry it as the `std::uint32_t` index into its pinned pool (`unit_index`).
enum class host_unit : std::uint32_t {};
inline constexpr host_unit no_host_unit{std::numeric_limits<std::uint32_t>::max()};
constexpr std::uint32_t unit_index(host_unit u) noexcept { return static_cast<std::uint32_t>(u); }

/// The two pools of the host tier.
enum class host_pool_kind : std::uint8_t { kv, snapshot };

/// free: in the free queue; cached: indexed (in the LRU queue unless held); reserved: taken for a fetch
/// from the remote tier, neither indexed nor queued until the fetch is reported.
enum class host_state : std::uint8_t { free, cached, reserved };

struct host_block_node {
  index_hook index_link;
  list_hook queue_link;            ///< free queue or LRU queue (out of both while held)
  block_key key{};                 ///< full block: the chain key ending at it; partial: the one it starts from
  std::uint64_t serial = 0;        ///< the published block's serial
  std::uint64_t parent_serial = 0; ///< 0 for a chain's first block
  epoch_t tag = 0;
  std::uint32_t fill = 0;          ///< tokens held: B for a full block, 1 .. B - 1 for a turn end's tail
  std::uint32_t depth = 0;         ///< index in its chain
  std::uint32_t holds = 0;
  exactness kind = exactness::prefill_exact;
  host_state state = host_state::free;
};

struct host_snapshot_node {
  index_hook index_link;
  list_hook queue_link;
  std::uint64_t serial = 0; ///< of the block the snapshot sits at the end of
  epoch_t tag = 0;
  std::uint32_t holds = 0;
  exactness kind = exactness::prefill_exact;
  host_state state = host_state::free;
  bool from_decode = false; ///< a turn end or decode checkpoint (only those are ever superseded)
};

/// The ids of one host pool: nodes, a free queue and an LRU queue, both epoch-tagged, and an index.
template <class Node, class Hash, class Equal>
class host_pool {
public:
  using queue = epoch_fifo<Node, &Node::queue_link, &Node::tag>;
  using index_type = boost::intrusive::unordered_multiset<
      Node, boost::intrusive::member_hook<Node, index_hook, &Node::index_link>, boost::intrusive::hash<Hash>,
      boost::intrusive::equal<Equal>, boost::intrusive::power_2_buckets<true>,
      boost::intrusive::constant_time_size<true>>;

  explicit host_pool(std::uint32_t units)
      : nodes_(units), buckets_(std::bit_ceil(std::max<std::size_t>(units, 2))),
        index_(typename index_type::bucket_traits(buckets_.data(), buckets_.size())) {
    for (Node& n : nodes_) free_.push_back(n, 0, 0);
  }
  host_pool(const host_pool&) = delete;
  host_pool& operator=(const host_pool&) = delete;
  ~host_pool() { index_.clear(); }

  std::uint32_t size() const noexcept { return static_cast<std::uint32_t>(nodes_.size()); }
  Node& node(host_unit u) noexcept { return nodes_[unit_index(u)]; }
  const Node& node(host_unit u) const noexcept { return nodes_[unit_index(u)]; }
  host_unit id_of(const Node& n) const noexcept { return host_unit{static_cast<std::uint32_t>(&n - nodes_.data())}; }

  queue& free() noexcept { return free_; }
  queue& lru() noexcept { return lru_; }
  const queue& free() const noexcept { return free_; }
  const queue& lru() const noexcept { return lru_; }
  index_type& index() noexcept { return index_; }
  const index_type& index() const noexcept { return index_; }

  void advance(epoch_t safe_before) noexcept {
    free_.advance(safe_before);
    lru_.advance(safe_before);
  }

private:
  std::vector<Node> nodes_;
  queue free_;
  queue lru_;
  std::vector<typename index_type::bucket_type> buckets_;
  index_type index_;
};

struct host_block_hash {
  std::size_t operator()(const host_block_node& n) const noexcept { return static_cast<std::size_t>(n.key.lo); }
  std::size_t operator()(const block_key& k) const noexcept { return static_cast<std::size_t>(k.lo); }
};
struct host_block_equal {
  bool operator()(const host_block_node& a, const host_block_node& b) const noexcept { return a.key == b.key; }
  bool operator()(const block_key& k, const host_block_node& n) const noexcept { return k == n.key; }
  bool operator()(const host_block_node& n, const block_key& k) const noexcept { return k == n.key; }
};
struct host_snapshot_hash {
  static std::size_t mix(std::uint64_t s) noexcept { // splitmix64 finalizer: serials are dense
    s = (s ^ (s >> 30)) * 0xbf58476d1ce4e5b9ULL;
    s = (s ^ (s >> 27)) * 0x94d049bb133111ebULL;
    return static_cast<std::size_t>(s ^ (s >> 31));
  }
  std::size_t operator()(const host_snapshot_node& n) const noexcept { return mix(n.serial); }
  std::size_t operator()(std::uint64_t s) const noexcept { return mix(s); }
};
struct host_snapshot_equal {
  bool operator()(const host_snapshot_node& a, const host_snapshot_node& b) const noexcept { return a.serial == b.serial; }
  bool operator()(std::uint64_t s, const host_snapshot_node& n) const noexcept { return s == n.serial; }
  bool operator()(const host_snapshot_node& n, std::uint64_t s) const noexcept { return s == n.serial; }
};

/// What a stored host block is: the GPU block it was offloaded from, described tier-independently.
struct host_block_desc {
  block_key key{};
  std::uint64_t serial = 0;
  std::uint64_t parent_serial = 0;
  std::uint32_t depth = 0;
  std::uint32_t fill = 0;
  exactness kind = exactness::prefill_exact;
  std::span<const token_id> tokens{}; ///< `fill` tokens
  const stored_extra_keys* extras = nullptr; ///< for a chain's first block
  const media_digest* media = nullptr;       ///< its media (null: none)
};

class host_ledger {
public:
  using block_pool_type = host_pool<host_block_node, host_block_hash, host_block_equal>;
  using snapshot_pool_type = host_pool<host_snapshot_node, host_snapshot_hash, host_snapshot_equal>;

  host_ledger(std::uint32_t kv_units, std::uint32_t snapshot_units, std::uint32_t block_size,
              std::size_t bytes_per_block, std::size_t bytes_per_snapshot, const epoch_clock& clock,
              cache_metrics& m)
      : blocks_(kv_units), snapshots_(snapshot_units), tokens_(std::size_t{kv_units} * block_size),
        root_extras_(kv_units), media_(kv_units), block_size_(block_size), bytes_per_block_(bytes_per_block),
        bytes_per_snapshot_(bytes_per_snapshot), clock_(&clock), metrics_(&m) {}

  const block_pool_type& blocks() const noexcept { return blocks_; }
  const snapshot_pool_type& snapshots() const noexcept { return snapshots_; }
  host_block_node& block(host_unit u) noexcept { return blocks_.node(u); }
  const host_block_node& block(host_unit u) const noexcept { return blocks_.node(u); }
  host_snapshot_node& snapshot(host_unit u) noexcept { return snapshots_.node(u); }
  const host_snapshot_node& snapshot(host_unit u) const noexcept { return snapshots_.node(u); }
  std::span<const token_id> tokens(host_unit u) const noexcept {
    return {tokens_.data() + std::size_t{unit_index(u)} * block_size_, block_size_};
  }
  const stored_extra_keys& root_extras(host_unit u) const noexcept { return root_extras_[unit_index(u)]; }
  /// The media digest of the block stored in `u`, all zero without media.
  const media_digest& media(host_unit u) const noexcept { return media_[unit_index(u)]; }
  /// The same, null without media (as `block_probe::media`).
  const media_digest* media_or_null(host_unit u) const noexcept {
    const media_digest& m = media_[unit_index(u)];
    return m.empty() ? nullptr : &m;
  }

  // --- KV blocks ---

  /// The host block equal to a GPU lookup's probe: key, parent serial, B tokens, media (null: none), class and
  /// (parent serial 0) extra keys. Changes nothing. Complexity: O(1) expected plus one B-token compare per
  /// same-key candidate.
  host_unit find_block(const block_key& key, std::uint64_t parent_serial, std::span<const token_id> tokens,
                       const stored_extra_keys& extras, const media_digest* media, exactness kind) const noexcept {
    auto [it, end] = blocks_.index().equal_range(key, host_block_hash{}, host_block_equal{});
    for (; it != end; ++it)
      if (it->fill == block_size_ && matches(*it, parent_serial, tokens, extras) && it->kind == kind &&
          media_[unit_index(blocks_.id_of(*it))] == (media != nullptr ? *media : media_digest{}))
        return blocks_.id_of(*it);
    return no_host_unit;
  }

  /// Calls `f(unit)` for every partial block starting from chain key `start` under the block of serial
  /// `parent_serial` (0: at position 0, extra keys `extras`) holding at most `tokens.size()` tokens equal to
  /// the first ones of `tokens`, whose media digest is `media_of(fill)`.
  template <class MediaOf, class F>
  void for_each_tail(const block_key& start, std::uint64_t parent_serial, const stored_extra_keys& extras,
                     std::span<const token_id> tokens, MediaOf&& media_of, F&& f) const {
    auto [it, end] = blocks_.index().equal_range(start, host_block_hash{}, host_block_equal{});
    for (; it != end; ++it) {
      if (it->fill >= block_size_ || it->fill > tokens.size()) continue;
      if (!matches(*it, parent_serial, tokens.first(it->fill), extras)) continue;
      if (media_[unit_index(blocks_.id_of(*it))] == media_of(it->fill)) f(blocks_.id_of(*it));
    }
  }

  /// Stores a copy of a block evicted from the GPU pool: a safe free unit, else the LRU one evicted. Returns
  /// the unit the engine copies into, or `no_host_unit` when every unit is held or read in a step not yet
  /// complete (the block is then dropped, as without a host tier). Complexity: O(1).
  host_unit store_block(const host_block_desc& d) noexcept {
    const host_unit u = take_block();
    if (u == no_host_unit) return no_host_unit;
    fill_block(u, d);
    ++metrics_->host_blocks_offloaded;
    metrics_->host_bytes_offloaded += bytes_per_block_;
    return u;
  }

  /// Called with a cached unit the LRU queue is about to hand out again (a lower tier may copy it first).
  using evict_hook = void (*)(void* context, host_pool_kind pool, host_unit unit) noexcept;
  void set_evict_hook(evict_hook f, void* context) noexcept {
    evict_hook_ = f;
    evict_context_ = context;
  }

  /// A block unit for a fetch from the remote tier (as `store_block` takes one), reserved until
  /// `commit_reserved_block` or `release_reserved_block`. `no_host_unit` when none is reusable, or when no unit
  /// is free and `may_evict(u)` refuses the least recently used one, `u`.
  template <class MayEvict>
  host_unit reserve_block(MayEvict&& may_evict) noexcept {
    const host_unit u = take(blocks_, host_pool_kind::kv, metrics_->host_blocks_held, metrics_->host_block_evictions, may_evict);
    if (u != no_host_unit) blocks_.node(u).state = host_state::reserved;
    return u;
  }
  /// The fetch into reserved unit `u` succeeded: it holds `d` from now on.
  void commit_reserved_block(host_unit u, const host_block_desc& d) noexcept { fill_block(u, d); }
  /// The fetch failed: `u` is free again once the current step completes.
  void release_reserved_block(host_unit u) noexcept { release(blocks_, u); }

private:
  host_unit take_block() noexcept {
    return take(blocks_, host_pool_kind::kv, metrics_->host_blocks_held, metrics_->host_block_evictions);
  }

  void fill_block(host_unit u, const host_block_desc& d) noexcept {
    host_block_node* n = &blocks_.node(u);
    n->key = d.key;
    n->serial = d.serial;
    n->parent_serial = d.parent_serial;
    n->depth = d.depth;
    n->fill = d.fill;
    n->kind = d.kind;
    n->holds = 0;
    n->state = host_state::cached;
    std::copy(d.tokens.begin(), d.tokens.end(), tokens_.begin() + static_cast<std::ptrdiff_t>(std::size_t{unit_index(u)} * block_size_));
    root_extras_[unit_index(u)] = d.parent_serial == 0 && d.extras != nullptr ? *d.extras : stored_extra_keys{};
    media_[unit_index(u)] = d.media != nullptr ? *d.media : media_digest{};
    blocks_.index().insert(*n);
    // Written by this step's transfers: an onboard in the same step is ordered after them.
    blocks_.lru().push_back(*n, clock_->release_tag(), clock_->safe_before);
    ++metrics_->host_blocks_held;
  }

public:

  /// Takes block unit `u` out of the LRU queue (an onboard or a kept copy is about to read it).
  void hold_block(host_unit u) noexcept { hold(blocks_, u); }
  /// Gives a held unit back; it is reusable once the current step completes.
  void unhold_block(host_unit u) noexcept { unhold(blocks_, u); }
  /// Marks `u` used now: most recently used, and not reusable before the current step completes.
  void touch_block(host_unit u) noexcept { touch(blocks_, u); }

  // --- snapshots ---

  std::uint32_t snapshot_units() const noexcept { return snapshots_.size(); }

  /// The host snapshot at the end of the block of serial `serial`, of class `kind`, or `no_host_unit`.
  host_unit find_snapshot(std::uint64_t serial, exactness kind) const noexcept {
    auto [it, end] = snapshots_.index().equal_range(serial, host_snapshot_hash{}, host_snapshot_equal{});
    for (; it != end; ++it)
      if (it->kind == kind) return snapshots_.id_of(*it);
    return no_host_unit;
  }

  /// Stores a snapshot evicted from the GPU pool (as `store_block`). Nothing when one of that block and
  /// class is already held (`no_host_unit`; it holds equivalent state) or no unit is reusable.
  host_unit store_snapshot(std::uint64_t serial, exactness kind, bool from_decode = false) noexcept {
    if (snapshots_.size() == 0) return no_host_unit;
    if (const host_unit u = find_snapshot(serial, kind); u != no_host_unit) {
      touch(snapshots_, u);
      return no_host_unit;
    }
    const host_unit u = take_snapshot();
    if (u == no_host_unit) return no_host_unit;
    fill_snapshot(u, serial, kind);
    snapshots_.node(u).from_decode = from_decode;
    ++metrics_->host_snapshots_offloaded;
    metrics_->host_bytes_offloaded += bytes_per_snapshot_;
    return u;
  }

  /// As `reserve_block`, for a snapshot.
  template <class MayEvict>
  host_unit reserve_snapshot(MayEvict&& may_evict) noexcept {
    const host_unit u = snapshots_.size() == 0 ? no_host_unit
                                               : take(snapshots_, host_pool_kind::snapshot, metrics_->host_snapshots_held,
                                                      metrics_->host_snapshot_evictions, may_evict);
    if (u != no_host_unit) snapshots_.node(u).state = host_state::reserved;
    return u;
  }
  /// `from_decode`: a conversation's turn end, which its next turn supersedes (`demote_snapshot`).
  void commit_reserved_snapshot(host_unit u, std::uint64_t serial, exactness kind, bool from_decode = false) noexcept {
    fill_snapshot(u, serial, kind);
    snapshots_.node(u).from_decode = from_decode;
  }
  void release_reserved_snapshot(host_unit u) noexcept { release(snapshots_, u); }

private:
  host_unit take_snapshot() noexcept {
    return take(snapshots_, host_pool_kind::snapshot, metrics_->host_snapshots_held, metrics_->host_snapshot_evictions);
  }

  /// A safe free unit of `p`, else its LRU one evicted if `may_evict` lets it (the evict hook called first,
  /// `held` and `evictions` moved); unlinked from both queues, state free. `no_host_unit` when neither is
  /// reusable.
  template <class Pool, class MayEvict = bool (*)(host_unit) noexcept>
  host_unit take(Pool& p, host_pool_kind pool, std::uint32_t& held, std::uint64_t& evictions,
                 MayEvict&& may_evict = [](host_unit) noexcept { return true; }) noexcept {
    auto* n = p.free().front_safe();
    if (n != nullptr) {
      p.free().erase(*n, clock_->safe_before);
    } else {
      n = p.lru().front_safe();
      if (n == nullptr || !may_evict(p.id_of(*n))) return no_host_unit;
      if (evict_hook_ != nullptr) evict_hook_(evict_context_, pool, p.id_of(*n));
      p.lru().erase(*n, clock_->safe_before);
      p.index().erase(p.index().iterator_to(*n));
      --held;
      ++evictions;
    }
    n->state = host_state::free;
    return p.id_of(*n);
  }

  void fill_snapshot(host_unit u, std::uint64_t serial, exactness kind) noexcept {
    host_snapshot_node* n = &snapshots_.node(u);
    n->serial = serial;
    n->kind = kind;
    n->holds = 0;
    n->state = host_state::cached;
    n->from_decode = false;
    snapshots_.index().insert(*n);
    snapshots_.lru().push_back(*n, clock_->release_tag(), clock_->safe_before);
    ++metrics_->host_snapshots_held;
  }

  template <class Pool>
  void release(Pool& p, host_unit u) noexcept {
    auto& n = p.node(u);
    n.state = host_state::free;
    n.holds = 0;
    p.free().push_back(n, clock_->release_tag(), clock_->safe_before);
  }

public:

  /// Moves host snapshot `u` to the front of its LRU queue (the next one handed out) if it still holds a
  /// turn end or decode checkpoint of class `kind` at the end of the block of serial `serial`, no sequence
  /// holds it and no incomplete step read it: the conversation that restored it has captured its next turn
  /// end, or ended. A snapshot taken in a prefill (a shared prefix's branch point) is never demoted.
  void demote_snapshot(host_unit u, std::uint64_t serial, exactness kind) noexcept {
    host_snapshot_node& n = snapshots_.node(u);
    if (n.state != host_state::cached || !n.from_decode || n.serial != serial || n.kind != kind || n.holds != 0 ||
        n.tag > clock_->safe_before)
      return;
    snapshots_.lru().erase(n, clock_->safe_before);
    snapshots_.lru().push_front_safe(n);
  }

  void hold_snapshot(host_unit u) noexcept { hold(snapshots_, u); }
  void unhold_snapshot(host_unit u) noexcept { unhold(snapshots_, u); }

  void advance(epoch_t safe_before) noexcept {
    blocks_.advance(safe_before);
    snapshots_.advance(safe_before);
  }

  std::size_t bytes_per_block() const noexcept { return bytes_per_block_; }
  std::size_t bytes_per_snapshot() const noexcept { return bytes_per_snapshot_; }

private:
  bool matches(const host_block_node& n, std::uint64_t parent_serial, std::span<const token_id> tokens,
               const stored_extra_keys& extras) const noexcept {
    if (n.parent_serial != parent_serial) return false;
    const host_unit u = blocks_.id_of(n);
    if (std::memcmp(tokens_.data() + std::size_t{unit_index(u)} * block_size_, tokens.data(), tokens.size_bytes()) != 0) return false;
    return parent_serial != 0 || root_extras_[unit_index(u)] == extras;
  }

  template <class Pool>
  void hold(Pool& p, host_unit u) noexcept {
    auto& n = p.node(u);
    if (n.holds++ == 0) p.lru().erase(n, clock_->safe_before);
  }
  template <class Pool>
  void unhold(Pool& p, host_unit u) noexcept {
    auto& n = p.node(u);
    if (--n.holds == 0) p.lru().push_back(n, clock_->release_tag(), clock_->safe_before);
  }
  template <class Pool>
  void touch(Pool& p, host_unit u) noexcept {
    auto& n = p.node(u);
    if (n.holds != 0) return;
    p.lru().erase(n, clock_->safe_before);
    p.lru().push_back(n, clock_->release_tag(), clock_->safe_before);
  }

  block_pool_type blocks_;
  snapshot_pool_type snapshots_;
  evict_hook evict_hook_ = nullptr;
  void* evict_context_ = nullptr;
  std::vector<token_id> tokens_;
  std::vector<stored_extra_keys> root_extras_;
  std::vector<media_digest> media_;
  std::uint32_t block_size_;
  std::size_t bytes_per_block_;
  std::size_t bytes_per_snapshot_;
  const epoch_clock* clock_;
  cache_metrics* metrics_;
};

} // namespace reprise::detail
