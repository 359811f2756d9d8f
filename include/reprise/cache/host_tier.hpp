// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `host_tier<Restores, Below>`: the host tier as a component beside the core (`policy::host_tier`). It owns
/// the host ledger (host_ledger.hpp), the serial of every GPU block, the host copy a GPU block was onboarded
/// from, the moves planned since the last `take_transfers`, a lookup's host hits and a side table of each
/// live sequence's holds in host memory, indexed like the sequence table. The core calls the hooks listed
/// in tier_hooks.hpp; `Below` is the tier under this one (`remote_tier`, remote_tier.hpp, or
/// `no_lower_tier`), to which the host tier passes on what moves through host memory.
///
/// Write-back on eviction: a GPU block the pool evicts is copied to a host unit with its snapshots (and a
/// GPU snapshot evicted alone, too), unless its host copy is still there. A lookup that stops in GPU memory
/// continues in the host ledger, verified by serials (host_ledger.hpp); the hits are onboarded into fresh GPU
/// blocks, published at once under their serials. Every move is a typed pair turned into the engine's
/// `unit_move` here, and nowhere else.
///
/// The host ledger's one evict hook fans out here: to the tier below (which may copy the unit first) and to
/// the `host_listener` (tier_hooks.hpp), which also hears which unit holds each offloaded block and snapshot.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise::detail {

/// No tier below the host tier: what the host tier evicts is gone.
struct no_lower_tier {
  static constexpr bool enabled = false;
  /// What a GPU block carries for the tier below (nothing).
  struct block_keys {};

  no_lower_tier(const tier_context&, const cache_options&, std::uint32_t, std::uint32_t) noexcept {}

  void sequence_prepared(const sequence_record&, const extra_keys&) noexcept {}
  void sequence_forked(const sequence_record&, const sequence_record&) noexcept {}
  void block_published(block_id, const sequence_record&, std::uint64_t) noexcept {}
  void snapshot_published(slot_id, block_id, exactness, std::uint64_t) noexcept {}
  void continuation_published(slot_id, block_id, std::span<const std::uint64_t>) noexcept {}
  block_keys take_gpu_block(block_id) noexcept { return {}; }
  block_keys gpu_block(block_id) const noexcept { return {}; }
  void block_stored(host_unit, const block_keys&) noexcept {}
  void snapshot_stored(host_unit, slot_id, const slot_node&, const block_keys&) noexcept {}
  bool block_onboarded(host_unit, block_id) noexcept { return false; }
  std::span<const remote_put> take_puts(std::span<const std::uint64_t>) noexcept { return {}; }
};

/// The engine's form of a move between a GPU pool and a host pool: the only place the two id spaces meet
/// (a host unit has its own type; `block_id` and `slot_id` are the public integer ids, told apart by name).
inline unit_move kv_offload_move(block_id from, host_unit to) noexcept {
  return {static_cast<std::uint32_t>(from), unit_index(to)};
}
inline unit_move snapshot_offload_move(slot_id from, host_unit to) noexcept {
  return {static_cast<std::uint32_t>(from), unit_index(to)};
}
inline unit_move kv_onboard_move(host_unit from, block_id to) noexcept {
  return {unit_index(from), static_cast<std::uint32_t>(to)};
}

template <bool Restores, class Below>
class host_tier {
public:
  static constexpr bool enabled = true;
  static constexpr bool has_remote = Below::enabled;

  /// One sequence record's holds in host memory, indexed like the sequence table's records.
  struct member {
    host_unit restore = no_host_unit;      ///< the host snapshot it restores, held until its first commit
    host_unit copy_src = no_host_unit;     ///< a turn end's partial block onboarded, held until its first commit
    host_unit turn_restore = no_host_unit; ///< the host turn end it restored from (superseded by its own)
    std::uint64_t turn_serial = 0;         ///< ... and the serial of that turn end's block
    friend bool operator==(const member&, const member&) = default;
  };

  static std::uint32_t units_in(std::size_t budget, std::size_t unit_bytes) noexcept {
    return unit_bytes == 0 ? 0 : static_cast<std::uint32_t>(std::min<std::size_t>(budget / unit_bytes, max_pool_ids));
  }

  /// Throws `std::bad_alloc`. Precondition: the options were validated for a host tier.
  explicit host_tier(const tier_context& c)
      : c_(c),
        ledger(units_in(c.options.host_kv_budget_bytes, c.geometry.bytes_per_kv_block),
               units_in(c.options.host_snapshot_budget_bytes, c.geometry.bytes_per_snapshot), c.geometry.block_size,
               c.geometry.bytes_per_kv_block, c.geometry.bytes_per_snapshot, c.clock, c.metrics),
        serial(c.options.kv_blocks, 0), twin(c.options.kv_blocks, no_host_unit), members(c.sequences.capacity()),
        below(c, c.options, ledger.blocks().size(), ledger.snapshots().size()) {
    c.slots.set_evict_hook(&snapshot_evicted, this);
    ledger.set_evict_hook(&host_unit_evicted, this);
  }
  host_tier(const host_tier&) = delete; // the ledgers' hooks point at it
  host_tier& operator=(const host_tier&) = delete;

  /// Names the listener told of offloads and dropped units (null: none). It must outlive this tier.
  void set_listener(host_listener* l) noexcept { listener_ = l; }

  std::uint32_t kv_units() const noexcept { return ledger.blocks().size(); }
  std::uint32_t snapshot_units() const noexcept { return ledger.snapshots().size(); }

  /// A fresh serial, or 0 once 2^64 - 1 were drawn: a block without a serial is never offloaded (never a
  /// wrap that could make two blocks one).
  std::uint64_t draw_serial() noexcept { return next_serial == 0 ? 0 : next_serial++; }
  std::uint64_t serial_of(block_id b) const noexcept { return serial[static_cast<std::size_t>(b)]; }

  member& member_of(const sequence_record& r) noexcept { return members[c_.sequences.index_of(r)]; }
  const member& member_of(const sequence_record& r) const noexcept { return members[c_.sequences.index_of(r)]; }

  // ------------------------------------------------------------------------------------------------------
  // sequences

  void sequence_prepared(const sequence_record& r, const extra_keys& keys) noexcept {
    member_of(r) = member{};
    below.sequence_prepared(r, keys);
  }
  void sequence_forked(const sequence_record& from, const sequence_record& to) noexcept {
    member_of(to) = member{};
    below.sequence_forked(from, to);
  }
  void sequence_ended(const sequence_record& r) noexcept { member_of(r) = member{}; }

  // ------------------------------------------------------------------------------------------------------
  // lookup past the GPU

  void lookup_started() noexcept { hit_units.clear(); }

  /// Continues a lookup that stopped at block `i` (key `key`, class `want` searched last) in GPU memory into
  /// the host tier, verified like a GPU hit with the parent's serial for its id (host_ledger.hpp), into the
  /// hits. Changes nothing.
  template <std::uint32_t B, class Hasher>
  void lookup_continue(const sequence_record& r, std::uint32_t i, block_key key, exactness want,
                       bool accepts_continuation, std::span<const token_id> prompt, const Hasher& hasher) noexcept {
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    std::uint64_t parent_serial = i == 0 ? 0 : serial_of(r.blocks[i - 1]);
    if (i != 0 && parent_serial == 0) return;
    for (; i < limit; ++i) {
      const auto tokens = prompt.subspan(std::size_t{i} * B).template first<B>();
      const media_digest* media = r.media_of_block(i);
      host_unit u = ledger.find_block(key, parent_serial, tokens, r.extras, media, want);
      if (u == no_host_unit && accepts_continuation && want == exactness::prefill_exact) {
        want = exactness::decode_continuation;
        u = ledger.find_block(key, parent_serial, tokens, r.extras, media, want);
      }
      if (u == no_host_unit) return;
      hit_units.push_back(u);
      parent_serial = ledger.block(u).serial;
      if (i + 1 < limit) {
        const auto next = prompt.subspan(std::size_t{i + 1} * B).template first<B>();
        key = chain_block(hasher, key, next, r.media_of_block(i + 1));
      }
    }
  }

  std::uint32_t hits() const noexcept { return static_cast<std::uint32_t>(hit_units.size()); }
  exactness hit_kind(std::uint32_t j) const noexcept { return ledger.block(hit_units[j]).kind; }

  /// The serial of matched block `i` of a prompt being looked up: GPU block r.blocks[i], then the host hits.
  std::uint64_t matched_serial(const sequence_record& r, std::uint32_t i) const noexcept {
    if (i < r.blocks.size()) return serial_of(r.blocks[i]);
    return ledger.block(hit_units[i - r.blocks.size()]).serial;
  }

  // ------------------------------------------------------------------------------------------------------
  // restore candidates

  /// A host snapshot for GPU tail block `b` (whose GPU snapshot is gone), or `no_host_unit`.
  host_unit tail_snapshot(block_id b) const noexcept {
    return ledger.find_snapshot(serial_of(b), exactness::decode_continuation);
  }

  /// Host tails continuing matched block `matched - 1` (or the root) with the first tokens of `tail_tokens`,
  /// whose turn-end snapshot the host holds: the longest deeper than `best` replaces it.
  void host_tails(const sequence_record& r, std::uint32_t matched, std::span<const token_id> tail_tokens,
                  restore_choice& best) const noexcept {
    const auto on_gpu = static_cast<std::uint32_t>(r.blocks.size());
    const std::uint64_t parent_serial = matched == 0 ? 0 : matched_serial(r, matched - 1);
    const block_key start = matched == 0       ? r.root
                            : matched <= on_gpu ? c_.blocks.node(r.blocks[matched - 1]).key
                                                : ledger.block(hit_units[matched - 1 - on_gpu]).key;
    if (matched != 0 && parent_serial == 0) return;
    const std::uint64_t begin = std::uint64_t{matched} * c_.geometry.block_size;
    auto media_of = [&](std::uint32_t fill) { return r.media_in(begin, begin + fill); };
    ledger.for_each_tail(start, parent_serial, r.extras, tail_tokens, media_of, [&](host_unit t) {
      const host_block_node& n = ledger.block(t);
      if (n.fill <= best.usable) return;
      const host_unit u = ledger.find_snapshot(n.serial, exactness::decode_continuation);
      if (u != no_host_unit)
        best = restore_choice{.usable = n.fill,
                              .host_snapshot = u,
                              .kind = exactness::decode_continuation,
                              .host_tail = t};
    });
  }

  /// A host snapshot at the end of matched block `i` (prefill-exact only on the alignment grid; a decode
  /// continuation only when accepted), as a choice restoring (i + 1) B tokens; none (`!restores()`) otherwise.
  restore_choice snapshot_at(const sequence_record& r, std::uint32_t i, bool on_grid, bool accepts_continuation) const noexcept {
    const std::uint64_t s = matched_serial(r, i);
    if (s == 0) return {};
    for (const exactness k : {exactness::prefill_exact, exactness::decode_continuation}) {
      if (k == exactness::decode_continuation && !accepts_continuation) break;
      if (k == exactness::prefill_exact && !on_grid) continue;
      if (const host_unit u = ledger.find_snapshot(s, k); u != no_host_unit)
        return {.usable = (i + 1) * c_.geometry.block_size, .host_snapshot = u, .kind = k};
    }
    return {};
  }

  // ------------------------------------------------------------------------------------------------------
  // onboard (admit)

  /// How many of `matched` blocks (the first `published` on the GPU, the rest host hits) the prompt shares:
  /// past the restore point it recomputes its tokens, so bringing their KV back would move bytes for
  /// nothing (a model that restores snapshots onboards host blocks only up to it). Trims the hits to match.
  std::uint32_t onboard_count(std::uint32_t published, std::uint32_t matched, const restore_choice& choice,
                              bool restores) noexcept {
    if (restores && !choice.has_tail())
      matched = std::min(matched, std::max(published, choice.usable / c_.geometry.block_size));
    hit_units.resize(matched > published ? matched - published : 0);
    return matched;
  }

  /// In `apply`: holds what the prompt restores from the host tier (until its first commit), then brings its
  /// host hits back: each gets a fresh GPU block from `take_block()`, published at once under its serial
  /// (the block table shares it like a cached one) and filled by the step's transfers. Taking the fresh
  /// blocks may offload others into the host tier, which never reuses a held unit.
  template <std::uint32_t B, class TakeBlock>
  onboarded_blocks onboard(sequence_record& r, std::uint32_t matched, const restore_choice& choice,
                           TakeBlock&& take_block) noexcept {
    onboarded_blocks done{.blocks = hits()};
    member& m = member_of(r);
    if (choice.host_snapshot != no_host_unit) ledger.hold_snapshot(choice.host_snapshot);
    if (choice.host_tail != no_host_unit) {
      ledger.hold_block(choice.host_tail);
      m.copy_src = choice.host_tail;
      if (ledger.block(choice.host_tail).kind != exactness::prefill_exact)
        r.exact_until = std::min(r.exact_until, matched * B);
    }
    for (const host_unit u : hit_units) ledger.hold_block(u);
    for (const host_unit u : hit_units) {
      const host_block_node& n = ledger.block(u);
      const auto i = static_cast<std::uint32_t>(r.blocks.size());
      const block_id parent = i == 0 ? no_block : r.blocks[i - 1];
      const block_id b = take_block();
      const auto tokens = c_.blocks.pool().template tokens_of<B>(b);
      std::copy_n(ledger.tokens(u).data(), B, tokens.data());
      // The GPU lookup found no equal block and nothing was published since, so `b` itself is published.
      c_.blocks.publish(b, {n.key, parent, tokens, &r.extras, ledger.media_or_null(u), n.kind, r.origin}, i, r.extras);
      serial[static_cast<std::size_t>(b)] = n.serial;
      twin[static_cast<std::size_t>(b)] = u;
      done.from_store += below.block_onboarded(u, b) ? 1 : 0;
      kv_onboard.push_back(kv_onboard_move(u, b));
      r.blocks.push_back(b);
      ++c_.metrics.host_blocks_onboarded;
      c_.metrics.host_bytes_onboarded += c_.geometry.bytes_per_kv_block;
    }
    // Read by this step's transfers: reusable once the step completes.
    for (const host_unit u : hit_units) ledger.unhold_block(u);
    return done;
  }

  /// A turn end's partial block restored from the host tier is copied into `dst` by the step's transfers,
  /// before the prefill. False when the choice has none.
  bool tail_onboarded(const restore_choice& choice, block_id dst) noexcept {
    if (choice.host_tail == no_host_unit) return false;
    kv_onboard.push_back(kv_onboard_move(choice.host_tail, dst));
    ++c_.metrics.host_tails_onboarded;
    c_.metrics.host_bytes_onboarded += c_.geometry.bytes_per_kv_block;
    return true;
  }

  /// The prompt restores host snapshot `choice.host_snapshot` (held since `onboard`): a decode continuation
  /// is remembered, to be superseded by this sequence's own turn end.
  void restoring(sequence_record& r, const restore_choice& choice, bool continuation) noexcept {
    member& m = member_of(r);
    m.restore = choice.host_snapshot;
    if (continuation) {
      m.turn_restore = choice.host_snapshot;
      m.turn_serial = ledger.snapshot(choice.host_snapshot).serial;
    }
    ++c_.metrics.host_snapshot_hits;
    c_.metrics.host_bytes_onboarded += c_.geometry.bytes_per_snapshot;
  }

  // ------------------------------------------------------------------------------------------------------
  // publication and eviction

  /// A freshly published block (or kept tail) `b` of sequence `r` gets its serial; the tier below names it.
  void block_published(block_id b, const sequence_record& r) noexcept {
    serial[static_cast<std::size_t>(b)] = draw_serial();
    twin[static_cast<std::size_t>(b)] = no_host_unit;
    below.block_published(b, r, serial[static_cast<std::size_t>(b)]);
  }

  /// A snapshot published on block `b`. A decode continuation (a turn end, a branch block's, a decode
  /// checkpoint) is a point a conversation continues from: the tier below may put it with the blocks before
  /// it (their serials tell, when it does, whether they are still those blocks).
  void snapshot_published(slot_id s, block_id b, exactness kind) noexcept {
    below.snapshot_published(s, b, kind, serial_of(b));
    if (kind == exactness::decode_continuation) below.continuation_published(s, b, serial);
  }

  /// Copies cached block `n`, which the GPU pool is evicting, into the host tier with its snapshots, unless
  /// its host copy (it was onboarded from) is still there. Complexity: O(B).
  void block_evicted(const block_node& n) noexcept {
    const block_id b = c_.blocks.id_of(n);
    const std::uint64_t s = serial_of(b);
    const std::uint64_t parent_serial = n.parent == no_block ? 0 : serial_of(n.parent);
    serial[static_cast<std::size_t>(b)] = 0;
    const host_unit copy_unit = std::exchange(twin[static_cast<std::size_t>(b)], no_host_unit);
    const typename Below::block_keys keys = below.take_gpu_block(b);
    // A block without a serial (2^64 drawn), or under one without, is never offloaded: its parent could not
    // be verified on the way back.
    if (s == 0 || (n.parent != no_block && parent_serial == 0)) return;
    // A turn end's partial block is only ever used with its snapshot: without a live one (on the GPU, not
    // superseded, or already in the host tier) it is not worth a host unit.
    if (n.state == block_state::tail) {
      bool restorable = false;
      if constexpr (Restores) {
        const slot_id t = n.snapshot[static_cast<int>(exactness::decode_continuation)];
        restorable = (t != no_slot && !c_.slots.node(t).superseded && c_.slots.ready(t)) ||
                     ledger.find_snapshot(s, exactness::decode_continuation) != no_host_unit;
      }
      if (!restorable) return;
    }
    const host_block_node* copy = copy_unit != no_host_unit ? &ledger.block(copy_unit) : nullptr;
    if (copy != nullptr && copy->state == host_state::cached && copy->serial == s) {
      ledger.touch_block(copy_unit);
      if (listener_ != nullptr) listener_->block_offloaded(b, copy_unit);
    } else {
      const std::uint32_t fill = n.state == block_state::tail ? n.fill : c_.geometry.block_size;
      const host_block_desc d{.key = n.key,
                              .serial = s,
                              .parent_serial = parent_serial,
                              .depth = n.depth,
                              .fill = fill,
                              .kind = n.kind,
                              .tokens = c_.blocks.pool().tokens(b).first(fill),
                              .extras = n.parent == no_block ? &c_.blocks.pool().root_extras(b) : nullptr,
                              .media = c_.blocks.pool().media_or_null(b)};
      if (const host_unit u = ledger.store_block(d); u != no_host_unit) {
        kv_offload.push_back(kv_offload_move(b, u));
        below.block_stored(u, keys);
        if (listener_ != nullptr) listener_->block_offloaded(b, u);
      }
    }
    if constexpr (Restores) {
      for (const slot_id t : n.snapshot)
        if (t != no_slot) offload_snapshot(c_.slots.node(t), s, keys);
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // the end of a restore, a superseded turn end

  /// Moves the host turn end `r` restored from to the front of the host LRU queue.
  void supersede(const sequence_record& r) noexcept {
    const member& m = member_of(r);
    if (m.turn_restore != no_host_unit)
      ledger.demote_snapshot(m.turn_restore, m.turn_serial, exactness::decode_continuation);
  }

  /// Lets go of the host units `r` held until its restore and copy had run (its first commit, or its end).
  void restore_done(sequence_record& r) noexcept {
    member& m = member_of(r);
    if (m.restore != no_host_unit) {
      ledger.unhold_snapshot(m.restore);
      m.restore = no_host_unit;
    }
    if (m.copy_src != no_host_unit) {
      ledger.unhold_block(m.copy_src);
      m.copy_src = no_host_unit;
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // transfers, steps

  /// The moves planned since the previous call; the spans stay valid until the next call.
  transfer_plan take_transfers() noexcept {
    taken_kv_offload.swap(kv_offload);
    taken_snapshot_offload.swap(snapshot_offload);
    taken_kv_onboard.swap(kv_onboard);
    kv_offload.clear();
    snapshot_offload.clear();
    kv_onboard.clear();
    transfer_plan t{taken_kv_offload, taken_snapshot_offload, taken_kv_onboard};
    t.remote_puts = below.take_puts(serial);
    return t;
  }

  void step_completed(epoch_t safe_before) noexcept { ledger.advance(safe_before); }

  // ------------------------------------------------------------------------------------------------------
  // invariants

  /// Every unit free (in the free queue, not indexed), reserved (neither) or cached (indexed; in the LRU
  /// queue iff nothing holds it, with the holds the live sequences account for); serials drawn parent first;
  /// the gauges. Complexity: O(GPU blocks + host units + sequences).
  bool check() const {
    const std::uint32_t block_size = c_.geometry.block_size;
    std::vector<std::uint32_t> block_holds(ledger.blocks().size(), 0), snapshot_holds(ledger.snapshots().size(), 0);
    for (const sequence_record& r : c_.sequences) {
      const member& m = member_of(r);
      if (m.copy_src != no_host_unit) {
        if (unit_index(m.copy_src) >= ledger.blocks().size()) return false;
        ++block_holds[unit_index(m.copy_src)];
      }
      if (m.restore != no_host_unit) {
        if (unit_index(m.restore) >= ledger.snapshots().size()) return false;
        ++snapshot_holds[unit_index(m.restore)];
      }
    }
    auto check_pool = [](const auto& pool, const std::vector<std::uint32_t>& holds, std::uint32_t& cached) {
      std::size_t free_count = 0, lru_count = 0;
      for (std::uint32_t i = 0; i < pool.size(); ++i) {
        const auto& n = pool.node(host_unit{i});
        if (n.holds != holds[i]) return false;
        const bool indexed = n.index_link.is_linked(), queued = n.queue_link.is_linked();
        if (n.state == host_state::free) {
          if (indexed || !queued || n.holds != 0) return false;
          ++free_count;
        } else if (n.state == host_state::reserved) { // a fetch from the tier below in flight
          if (indexed || queued || n.holds != 0) return false;
        } else {
          if (!indexed || queued != (n.holds == 0)) return false;
          ++cached;
          lru_count += queued;
        }
      }
      return pool.free().size() == free_count && pool.lru().size() == lru_count && pool.index().size() == cached;
    };
    std::uint32_t blocks_cached = 0, snapshots_cached = 0;
    if (!check_pool(ledger.blocks(), block_holds, blocks_cached)) return false;
    if (!check_pool(ledger.snapshots(), snapshot_holds, snapshots_cached)) return false;
    for (std::uint32_t i = 0; i < ledger.blocks().size(); ++i) {
      const host_block_node& n = ledger.block(host_unit{i});
      if (n.state != host_state::cached) continue;
      if (n.fill == 0 || n.fill > block_size || n.serial == 0 || n.parent_serial >= n.serial) return false;
    }
    // GPU blocks: a kept one has a serial drawn after its parent's; any other none.
    for (block_id b = 0; b < static_cast<block_id>(c_.blocks.size()); ++b) {
      const block_node& n = c_.blocks.node(b);
      const std::uint64_t s = serial_of(b);
      const bool kept = n.state == block_state::cached || n.state == block_state::tail;
      if (!kept && (s != 0 || twin[static_cast<std::size_t>(b)] != no_host_unit)) return false;
      if (kept && s != 0 && n.parent != no_block && serial_of(n.parent) >= s) return false;
    }
    const cache_metrics& m = c_.metrics;
    return m.host_blocks_held == blocks_cached && m.host_snapshots_held == snapshots_cached;
  }

private:
  /// Copies published snapshot `n` (its block has serial `s` and, for the tier below, `keys`) into the host
  /// tier, if it is restorable and the host holds none of that block and class.
  void offload_snapshot(const slot_node& n, std::uint64_t s, const typename Below::block_keys& keys) noexcept {
    if constexpr (Restores) {
      const slot_id t = c_.slots.id_of(n);
      // A superseded turn end (its conversation captured the next one, or ended) is not worth host memory.
      if (s == 0 || !c_.slots.ready(t) || n.superseded) return;
      host_unit u = ledger.store_snapshot(s, n.kind, n.from_decode);
      if (u != no_host_unit) {
        snapshot_offload.push_back(snapshot_offload_move(t, u));
        below.snapshot_stored(u, t, n, keys);
      } else {
        u = ledger.find_snapshot(s, n.kind); // one of that block and class already there holds the same state
      }
      if (u != no_host_unit && listener_ != nullptr) listener_->snapshot_offloaded(t, u);
    }
  }

  static void snapshot_evicted(void* self, const slot_node& n) noexcept {
    auto& h = *static_cast<host_tier*>(self);
    h.offload_snapshot(n, h.serial_of(n.block), h.below.gpu_block(n.block));
  }

  static void host_unit_evicted(void* self, host_pool_kind pool, host_unit u) noexcept {
    auto& h = *static_cast<host_tier*>(self);
    if constexpr (has_remote) h.below.host_unit_evicted(pool, u, h.ledger);
    if (h.listener_ != nullptr) h.listener_->host_unit_dropped(pool, u);
  }

  tier_context c_;
  host_listener* listener_ = nullptr;

public:
  host_ledger ledger;
  std::vector<std::uint64_t> serial; ///< by GPU block id: the published block's serial (0: none)
  std::vector<host_unit> twin;       ///< by GPU block id: the host copy it was onboarded from
  std::uint64_t next_serial = 1;     ///< 0 after the last one
  std::vector<unit_move> kv_offload, snapshot_offload, kv_onboard;       ///< planned, not yet taken
  std::vector<unit_move> taken_kv_offload, taken_snapshot_offload, taken_kv_onboard; ///< the last taken
  std::vector<host_unit> hit_units;  ///< lookup scratch: the host blocks continuing a prompt's GPU match
  std::vector<member> members;       ///< by sequence record index
  Below below;
};

} // namespace reprise::detail
