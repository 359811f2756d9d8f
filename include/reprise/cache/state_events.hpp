// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `state_events`: what this cache tells a fleet router it holds (`cache_options::state_events`), as a
/// component beside the core. When the option names a key source, the cache reports every full KV block it
/// publishes or drops (by chain content key, end position and class) and every snapshot it publishes or
/// drops (by snapshot key, the chain key before it, position and class; a turn end's tail tokens are part of
/// its key), in the vocabulary of <reprise/keys/state_keys.hpp>; `take` hands them out. Off (the default), it
/// holds nothing and every hook returns at once.
///
/// What is reported is what the engine can still bring back: GPU memory and, with a host tier
/// (`policy::host_tier`), host memory. A block or snapshot the GPU evicts into a host unit stays reported
/// stored; it is reported removed when the host tier drops it (its unit reused), or when it leaves the GPU
/// without a host copy. The host tier tells this component which unit took what (`host_listener`,
/// tier_hooks.hpp), and the component keeps, per GPU block, GPU slot, host KV unit and host snapshot unit
/// (its *holders*), the event it stands for.
///
/// One report per state, however many hold it. A block onboarded from a host unit that keeps its copy, a
/// snapshot recomputed while its host copy stays, or two GPU blocks of one key and class (a chain key does not
/// carry the class of the blocks before it: a decode-filled block under a prefill-computed parent and one under
/// a decode-filled parent) are held twice. An index of the holders by identity (kind, key, class, as the router
/// names entries) reports a state `stored` when its first holder takes it and `removed` when its last one lets
/// go: an onboard reports nothing, and a copy dropped never hides another still held.
///
/// Not reported: what the remote tier fetched into host units, until it is onboarded (it is then a GPU block
/// like any other), and turn ends' partial blocks (their snapshot's key carries their tokens). A host snapshot
/// whose block the host tier dropped stays reported while its unit holds it: the router counts a snapshot only
/// under every block before it, and a route that finds less than it scored costs a miss, never a wrong hit.
///
/// Cost: one SHA-256 (with `content_keyer`) per published block and snapshot; one expected O(1) index update
/// each time a holder takes or lets go of a state; memory, one holder (about 100 bytes) per GPU block, GPU slot
/// and host unit, and a bucket per holder, allocated when the cache is created.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/state_keys.hpp>

#include <boost/intrusive/unordered_set.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

namespace reprise::detail {

class state_events final : public host_listener {
public:
  /// Listens to `tiers` (a host tier: `set_listener`; `no_tiers`: nothing). Throws `std::bad_alloc`.
  /// Allocates nothing when `keys` is empty.
  template <class Tiers>
  state_events(state_keys_ref keys, block_ledger& blocks, snapshot_ledger& slots, const sequence_table& sequences,
               Tiers& tiers)
      : keys_(keys), blocks_(&blocks), slots_(&slots), sequences_(&sequences) {
    if (!keys_) return;
    block_keys_.resize(blocks.size());
    roots_.resize(sequences.capacity());
    slot_base_ = blocks.size();
    host_block_base_ = slot_base_ + slots.size();
    host_snapshot_base_ = host_block_base_ + tiers.kv_units();
    holders_.resize(host_snapshot_base_ + tiers.snapshot_units());
    buckets_.resize(std::bit_ceil(std::max<std::size_t>(holders_.size(), 2)));
    index_.emplace(typename holder_index::bucket_traits(buckets_.data(), buckets_.size()));
    slots.set_detach_hook(&snapshot_detached, this);
    if constexpr (Tiers::enabled) {
      host_ = &tiers.ledger;
      tiers.set_listener(this);
    }
  }
  state_events(const state_events&) = delete; // the ledgers' hooks and the host tier point at it
  state_events& operator=(const state_events&) = delete;
  ~state_events() {
    if (index_) index_->clear();
  }

  bool enabled() const noexcept { return static_cast<bool>(keys_); }

  void sequence_prepared(const sequence_record& r, const extra_keys& keys) noexcept {
    if (enabled()) roots_[sequences_->index_of(r)] = keys_.root(keys);
  }
  void sequence_forked(const sequence_record& from, const sequence_record& to) noexcept {
    if (enabled()) roots_[sequences_->index_of(to)] = roots_[sequences_->index_of(from)];
  }

  /// Block `b` of sequence `r` was published (a full block: held and reported; one onboarded from a host
  /// unit that keeps its copy is held twice and reported once) or kept as a turn end's tail (remembered: its
  /// snapshot's key continues the chain key before it).
  void block_published(block_id b, const sequence_record& r) noexcept {
    if (!enabled()) return;
    const block_node& n = blocks_->node(b);
    const content_key parent = n.parent == no_block ? roots_[sequences_->index_of(r)] : key_of(n.parent);
    if (n.state != block_state::cached) {
      key_of(b) = parent;
      return;
    }
    key_of(b) =
        is_zero(parent) ? content_key{} : keys_.chain(parent, blocks_->pool().tokens(b), blocks_->pool().media(b));
    if (!is_zero(key_of(b))) hold(gpu_block(b), state_event::block(state_change::stored, key_of(b), end_of(n), n.kind));
  }

  /// Block `n` leaves GPU memory: reported removed unless a host unit took it (`block_offloaded`, called
  /// first). Its snapshots are reported as the ledger drops them.
  void block_evicted(const block_node& n) noexcept {
    if (!enabled()) return;
    const block_id b = blocks_->id_of(n);
    release(gpu_block(b));
    key_of(b) = {};
  }

  /// Snapshot slot `s` was published at the end of block `b` (a full block's end, or a tail's) as `kind`.
  void snapshot_published(slot_id s, block_id b, exactness kind) noexcept {
    if (!enabled()) return;
    const block_node& n = blocks_->node(b);
    const std::uint32_t B = blocks_->pool().block_size();
    const bool tail = n.state == block_state::tail;
    const content_key& parent = key_of(b); // a full block's own key, a tail's predecessor's
    const std::uint64_t position = tail ? std::uint64_t{n.depth} * B + n.fill : std::uint64_t{n.depth + 1} * B;
    holder& h = gpu_slot(s);
    release(h);
    if (is_zero(parent)) return;
    // A tail's media digest covers the items among its tokens (all of its sequence's items in that block lie
    // before the prompt's end, so before the fill); a snapshot at a block end has no tail and no media.
    const content_key key = tail ? keys_.snapshot(parent, blocks_->pool().tokens(b).first(n.fill), position, kind,
                                                  blocks_->pool().media(b))
                                 : keys_.snapshot(parent, std::span<const token_id>{}, position, kind, media_digest{});
    if (is_zero(key)) return;
    hold(h, state_event::snapshot(state_change::stored, key, parent, position, kind));
  }

  // host_listener: the host tier's units (host_tier.hpp).

  void block_offloaded(block_id from, host_unit to) noexcept override {
    offloaded(gpu_block(from), host_block(to), host_->block(to).serial);
  }
  void snapshot_offloaded(slot_id from, host_unit to) noexcept override {
    offloaded(gpu_slot(from), host_snapshot(to), host_->snapshot(to).serial);
  }
  void host_unit_dropped(host_pool_kind pool, host_unit u) noexcept override {
    release(pool == host_pool_kind::kv ? host_block(u) : host_snapshot(u));
  }

  /// The events since the previous call; the span stays valid until the next call. An engine takes them once
  /// per step (they accumulate until then).
  std::span<const state_event> take() noexcept {
    taken_.swap(events_);
    events_.clear();
    return taken_;
  }

  /// Every holder's event is what it holds now: a GPU block's is its current key (every published full
  /// block with a key holds one), a GPU slot's its published snapshot's class, a host unit's the same
  /// serial, class (and for a block, end) as the unit holds; the index holds exactly the holders that hold
  /// an event. Complexity: O(blocks + slots + host units) key derivations.
  bool check() const {
    if (!enabled()) return true;
    std::size_t held = 0;
    const auto counted = [&](const holder& h, state_kind kind) {
      if (!h.link.is_linked()) return is_zero(h.event.key);
      ++held;
      return h.event.kind == kind && h.event.change == state_change::stored && !is_zero(h.event.key);
    };
    const std::uint32_t B = blocks_->pool().block_size();
    for (std::uint32_t i = 0; i < slots_->size(); ++i) {
      const holder& h = gpu_slot(static_cast<slot_id>(i));
      if (!counted(h, state_kind::snapshot)) return false;
      if (!h.link.is_linked()) continue;
      const slot_node& n = slots_->node(static_cast<slot_id>(i));
      if (n.state != slot_state::published || n.kind != h.event.exact) return false;
    }
    for (block_id b = 0; b < static_cast<block_id>(blocks_->size()); ++b) {
      const block_node& n = blocks_->node(b);
      const content_key& key = key_of(b);
      const holder& h = gpu_block(b);
      if (!counted(h, state_kind::kv_block)) return false;
      const bool reported = n.state == block_state::cached && !is_zero(key);
      if (h.link.is_linked() != reported) return false;
      if (reported && (h.event.key != key || h.event.position != end_of(n) || h.event.exact != n.kind)) return false;
      if (is_zero(key)) continue;
      if (n.state != block_state::cached && n.state != block_state::tail) return false;
      if (n.state == block_state::cached && n.parent != no_block &&
          key != keys_.chain(key_of(n.parent), blocks_->pool().tokens(b), blocks_->pool().media(b)))
        return false;
    }
    const auto host_blocks = static_cast<std::uint32_t>(host_snapshot_base_ - host_block_base_);
    for (std::uint32_t i = 0; i < host_blocks; ++i) {
      const holder& h = host_block(host_unit{i});
      if (!counted(h, state_kind::kv_block)) return false;
      if (!h.link.is_linked()) continue;
      const host_block_node& n = host_->block(host_unit{i});
      if (n.state != host_state::cached || n.serial != h.serial || n.fill != B || n.kind != h.event.exact ||
          h.event.position != std::uint64_t{n.depth + 1} * B)
        return false;
    }
    const auto host_snapshots = static_cast<std::uint32_t>(holders_.size() - host_snapshot_base_);
    for (std::uint32_t i = 0; i < host_snapshots; ++i) {
      const holder& h = host_snapshot(host_unit{i});
      if (!counted(h, state_kind::snapshot)) return false;
      if (!h.link.is_linked()) continue;
      const host_snapshot_node& n = host_->snapshot(host_unit{i});
      if (n.state != host_state::cached || n.serial != h.serial || n.kind != h.event.exact) return false;
    }
    return index_->size() == held;
  }

private:
  /// A GPU block, GPU slot or host unit, and the event it stands for while it holds reported state (linked
  /// into the index by identity). Unlinked, its event is all zeros.
  struct holder {
    index_hook link;
    state_event event{};
    std::uint64_t serial = 0; ///< a host unit's: the serial of the block it held when it took the event
  };
  /// The router's name of an entry.
  struct identity {
    const content_key* key;
    state_kind kind;
    exactness exact;
  };
  static std::size_t hash_of(const content_key& k, state_kind kind, exactness exact) noexcept {
    std::uint64_t h; // content keys are uniformly distributed digests: any 8 of their bytes hash well
    std::memcpy(&h, k.bytes.data(), sizeof h);
    return static_cast<std::size_t>(h) ^ ((static_cast<std::size_t>(kind) << 1) | static_cast<std::size_t>(exact));
  }
  struct holder_hash {
    std::size_t operator()(const holder& h) const noexcept { return hash_of(h.event.key, h.event.kind, h.event.exact); }
    std::size_t operator()(const identity& i) const noexcept { return hash_of(*i.key, i.kind, i.exact); }
  };
  struct holder_equal {
    static bool same(const state_event& e, const identity& i) noexcept {
      return e.kind == i.kind && e.exact == i.exact && e.key == *i.key;
    }
    bool operator()(const holder& a, const holder& b) const noexcept {
      return same(a.event, {&b.event.key, b.event.kind, b.event.exact});
    }
    bool operator()(const identity& i, const holder& h) const noexcept { return same(h.event, i); }
    bool operator()(const holder& h, const identity& i) const noexcept { return same(h.event, i); }
  };
  using holder_index = boost::intrusive::unordered_multiset<
      holder, boost::intrusive::member_hook<holder, index_hook, &holder::link>, boost::intrusive::hash<holder_hash>,
      boost::intrusive::equal<holder_equal>, boost::intrusive::power_2_buckets<true>,
      boost::intrusive::constant_time_size<true>>;

  static bool is_zero(const content_key& k) noexcept { return k == content_key{}; }
  static identity identity_of(const state_event& e) noexcept { return {&e.key, e.kind, e.exact}; }
  bool reported(const identity& i) const noexcept {
    return index_->find(i, holder_hash{}, holder_equal{}) != index_->end();
  }

  /// `h` holds `e` (a stored event) from now on, instead of what it held: reported stored if nothing held it.
  void hold(holder& h, const state_event& e) noexcept {
    if (h.link.is_linked() && holder_equal::same(h.event, identity_of(e))) return;
    release(h);
    h.event = e;
    if (!reported(identity_of(h.event))) events_.push_back(h.event);
    index_->insert(h);
  }
  /// `h` holds nothing from now on: what it held is reported removed if nothing else holds it.
  void release(holder& h) noexcept {
    if (!h.link.is_linked()) return;
    index_->erase(index_->iterator_to(h));
    if (!reported(identity_of(h.event))) {
      state_event removed = h.event;
      removed.change = state_change::removed;
      events_.push_back(removed);
    }
    h.event = {};
    h.serial = 0;
  }
  /// Host unit holder `to` (holding the block or snapshot of serial `serial`) takes what GPU holder `from` holds.
  void offloaded(const holder& from, holder& to, std::uint64_t serial) noexcept {
    if (!from.link.is_linked()) return; // a tail, or state without a key: never reported
    hold(to, from.event);
    to.serial = serial;
  }

  holder& gpu_block(block_id b) noexcept { return holders_[static_cast<std::size_t>(b)]; }
  const holder& gpu_block(block_id b) const noexcept { return holders_[static_cast<std::size_t>(b)]; }
  holder& gpu_slot(slot_id s) noexcept { return holders_[slot_base_ + static_cast<std::size_t>(s)]; }
  const holder& gpu_slot(slot_id s) const noexcept { return holders_[slot_base_ + static_cast<std::size_t>(s)]; }
  holder& host_block(host_unit u) noexcept { return holders_[host_block_base_ + std::size_t{unit_index(u)}]; }
  const holder& host_block(host_unit u) const noexcept { return holders_[host_block_base_ + std::size_t{unit_index(u)}]; }
  holder& host_snapshot(host_unit u) noexcept { return holders_[host_snapshot_base_ + std::size_t{unit_index(u)}]; }
  const holder& host_snapshot(host_unit u) const noexcept {
    return holders_[host_snapshot_base_ + std::size_t{unit_index(u)}];
  }

  content_key& key_of(block_id b) noexcept { return block_keys_[static_cast<std::size_t>(b)]; }
  const content_key& key_of(block_id b) const noexcept { return block_keys_[static_cast<std::size_t>(b)]; }
  std::uint64_t end_of(const block_node& n) const noexcept {
    return std::uint64_t{n.depth + 1} * blocks_->pool().block_size();
  }

  static void snapshot_detached(void* self, const slot_node& n) noexcept {
    auto& c = *static_cast<state_events*>(self);
    c.release(c.gpu_slot(c.slots_->id_of(n)));
  }

  state_keys_ref keys_;
  block_ledger* blocks_;
  snapshot_ledger* slots_;
  const sequence_table* sequences_;
  const host_ledger* host_ = nullptr;   ///< the host tier's units (`policy::host_tier`)
  std::vector<content_key> block_keys_; ///< by GPU block: its chain key (a tail: the key before it)
  std::vector<content_key> roots_;      ///< by sequence record: key_{-1}
  /// GPU blocks, then GPU slots, host KV units, host snapshot units.
  std::vector<holder> holders_;
  std::size_t slot_base_ = 0, host_block_base_ = 0, host_snapshot_base_ = 0;
  std::vector<typename holder_index::bucket_type> buckets_;
  std::optional<holder_index> index_; ///< the holders holding an event, by identity (engaged when on)
  std::vector<state_event> events_, taken_;
};

} // namespace reprise::detail
