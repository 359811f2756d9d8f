// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `remote_tier<Restores>`: the remote tier as a component below the host tier (`policy::remote_tier`). It
/// owns the content key of every GPU block, GPU snapshot slot and host unit that may go to the store (one
/// table per id space, an entry per id), the puts planned (write-back when the host tier evicts a unit,
/// write-through once a step completed), the fetches in flight into reserved host units and a side table
/// of each live sequence's root key. The host tier calls it as values move through host memory; the
/// planning of `prefetch`, `probe` and `fetched` is remote_fetch.hpp. It also defines the header a fetched
/// value must return unchanged.
///
/// The header (a wire format, docs/tiers.md):
///
///   "RPRSRH01" | item u8 | class u8 | 0 u16 | position u32 | tokens u32 | key [32] | parent [32] | tokens i32...
///
/// little-endian; `position` is the block's end or the snapshot's position, `parent` the key the block
/// chains from (key_{-1} for a first block) or, for a snapshot, its block's key. A fetched value is used
/// only if its header equals, byte for byte, the header the prompt itself implies: its own tokens, its own
/// chain of keys, prefill-exact.
///
/// A turn end (`cache_options::remote_turn_ends`) has the same header with item 2 and class 1
/// (decode_continuation): `position` p is the turn's last position, `key` its turn-end key (the boundary
/// floor(p/B) B), `parent` the key of the last block the store names (key_{d-1}: the chain's last
/// prefill-exact block; key_{-1} when none is) and the tokens those of [d B, p), so d = (p - tokens) / B;
/// then the origin of each block d .. floor(p/B) - 1 and of the partial block (`block_origin`: writer u64,
/// serial u64; zero for none). Its payload is its partial block (zeros at a block boundary) and its snapshot.
///
/// The full blocks d .. floor(p/B) - 1 are values of their own, *continuation blocks*, each put once: by the
/// first turn end whose chain holds it, never again by a later turn end of the same conversation (a block
/// fetched from the store, or put, is marked `in_store` and travels so through the tiers). So a turn end puts
/// the blocks computed since the previous one, its partial block and its snapshot: flat in the conversation's
/// length. A continuation block of chain key key_i (key_{i-1} chained with its tokens, as if prefill-exact)
/// sits under `continuation_key(key_i)` with the block header (item 0, class 1, `key` that index, `parent`
/// key_{i-1}, its B tokens) followed by its origin. A reader fetches the ones it lacks beside the turn end and
/// keeps the turn end only if every header equals the one its prompt implies and every block's origin is the
/// one the turn end lists: a missing, replaced or corrupt link makes the whole turn end a miss, so every byte
/// a reader uses is still one writer's computation, or blocks of the same origin the reader holds.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace reprise::detail {

inline constexpr char remote_header_magic[8] = {'R', 'P', 'R', 'S', 'R', 'H', '0', '1'};
inline constexpr std::size_t remote_header_fixed_bytes = 8 + 4 + 4 + 4 + 32 + 32;

inline bool is_zero(const content_key& k) noexcept { return k == content_key{}; }

/// Appends the header of a value to `out`.
inline void append_remote_header(std::vector<std::byte>& out, remote_item item, exactness kind, std::uint32_t position,
                                 const content_key& key, const content_key& parent,
                                 std::span<const token_id> tokens) {
  auto u32 = [&](std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
  };
  for (char c : remote_header_magic) out.push_back(static_cast<std::byte>(c));
  out.push_back(static_cast<std::byte>(item));
  out.push_back(static_cast<std::byte>(kind));
  out.push_back(std::byte{0});
  out.push_back(std::byte{0});
  u32(position);
  u32(static_cast<std::uint32_t>(tokens.size()));
  for (std::uint8_t b : key.bytes) out.push_back(static_cast<std::byte>(b));
  for (std::uint8_t b : parent.bytes) out.push_back(static_cast<std::byte>(b));
  for (token_id t : tokens) u32(static_cast<std::uint32_t>(t));
}

/// The index of the continuation block whose chain key is `chain` (see the file comment): a snapshot key at
/// position 0, which names no snapshot (none sits at 0), so no other value is under it.
template <class Keys>
content_key continuation_key(const Keys& keyer, const content_key& chain) noexcept {
  return is_zero(chain) ? content_key{} : keyer->snapshot(chain, 0);
}

/// Which computation wrote a block that no content key names (a decode-filled block, or any computed after
/// a decode continuation): the engine (`cache_options::remote_writer_id`) and the serial it gave the block.
/// Travels with the block through the host tier and, inside turn ends, through the store; two blocks of
/// equal tokens and equal origin hold equal bytes.
struct block_origin {
  std::uint64_t writer = 0, serial = 0;
  friend constexpr bool operator==(const block_origin&, const block_origin&) = default;
};
inline constexpr std::size_t block_origin_bytes = 16;

inline void append_origin(std::vector<std::byte>& out, const block_origin& o) {
  for (const std::uint64_t v : {o.writer, o.serial})
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(v >> (8 * i)));
}
inline block_origin read_origin(std::span<const std::byte> in) noexcept {
  block_origin o;
  for (std::size_t i = 0; i < 8; ++i) o.writer |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  for (std::size_t i = 0; i < 8; ++i) o.serial |= static_cast<std::uint64_t>(in[8 + i]) << (8 * i);
  return o;
}

/// A block fetch in flight into a reserved host KV unit: what the unit will be once the fetch is reported
/// with the expected header.
struct pending_block_fetch {
  bool active = false;
  std::vector<std::byte> header;      ///< expected, byte for byte
  content_key key{}, parent{};        ///< the block's content key and the one it chains from
  block_key chain_key{};              ///< the in-process key ending at it
  std::uint64_t serial = 0;           ///< drawn at `prefetch`
  std::uint64_t parent_serial = 0;
  std::uint32_t index = 0;            ///< its index in the chain (depth)
  std::vector<token_id> tokens;       ///< its B tokens
  media_digest media{};               ///< the media among them (all zero: none)
  stored_extra_keys extras{};         ///< for a chain's first block
};

/// A snapshot fetch in flight into a reserved host snapshot unit.
struct pending_snapshot_fetch {
  bool active = false;
  std::vector<std::byte> header;      ///< expected, byte for byte
  content_key key{}, block{};         ///< the snapshot's content key and its block's
  std::uint64_t serial = 0;           ///< its block's serial
  std::uint32_t position = 0;         ///< the position it sits at (its block's end)
};

/// A turn-end fetch in flight (`cache_options::remote_turn_ends`), by the host snapshot unit it fills: a
/// prompt's turn end under block boundary `boundary`, continuing its prefill-exact chain of `first` blocks
/// (key `anchor`, serial `parent_serial`, in-process key `start`) with blocks [first, boundary / B) and a
/// partial block, whose length only the header tells.
struct pending_turn_end_fetch {
  bool active = false;
  content_key key{}, anchor{};
  std::uint32_t first = 0, boundary = 0;
  std::uint32_t own = 0;              ///< blocks first .. first + own - 1 the prompt matched in this engine
  std::vector<block_origin> origins;  ///< ... their origins, which the turn end's must equal
  std::uint64_t parent_serial = 0;    ///< of block first + own - 1 (0 at the root)
  block_key start{};                  ///< its in-process key (the root's)
  std::vector<host_unit> units;       ///< the fetched blocks' units, then the partial block's
  std::vector<std::uint64_t> serials; ///< drawn at `prefetch`, one per unit
  /// The chain keys of blocks first .. boundary / B - 1 (key_i), for their continuation blocks' headers.
  std::vector<content_key> chain;
  /// Per fetched block (every unit but the last), what its continuation block's fetch reported: 0 not yet,
  /// 1 its header as expected (its origin in `block_origins`), 2 missing or wrong; `turn_end_state` the same
  /// for the turn end's own value, whose header is kept in `header` until every part has reported.
  std::vector<std::uint8_t> block_state;
  std::vector<block_origin> block_origins;
  std::vector<std::byte> header;
  std::uint8_t turn_end_state = 0;
  bool any_rejected = false;          ///< a part came back with a wrong header (else only misses)
  std::uint32_t waiting = 0;          ///< parts not reported yet
  std::vector<token_id> tokens;       ///< the prompt's tokens [first B, boundary + B - 1), as far as it has them
  std::vector<media_digest> media;    ///< the media digests of the prompt's blocks first .. boundary / B - 1
  /// The position of the prompt's first media item at or past `boundary` (max: none). The store's turn ends
  /// hold no media in their partial block (`continuation_published`), so one at a position past an item of
  /// the prompt is another computation's state, refused.
  std::uint32_t media_from = std::numeric_limits<std::uint32_t>::max();
  stored_extra_keys extras{};         ///< for a chain's first block
};

/// Write-through of a GPU block, put once the step `epoch` that computed it completed if the block is still
/// that publication (its serial).
struct block_write {
  block_id block = no_block;
  std::uint64_t serial = 0;
  epoch_t epoch = 0;
};

/// Write-through of a GPU snapshot slot: put once its step completed if the slot still holds that capture
/// (its block, whose serial is unchanged, and its capture epoch).
struct snapshot_write {
  slot_id slot = no_slot;
  block_id block = no_block;
  std::uint64_t serial = 0;
  epoch_t epoch = 0;
};

/// A turn end captured in GPU memory, put once the step that wrote it completed if its snapshot slot and
/// every block of its payload are still those publications (their serials, and the slot's capture epoch).
struct turn_end_write {
  slot_id slot = no_slot;
  block_id on = no_block;             ///< the block the snapshot is attached to
  std::uint64_t on_serial = 0;
  epoch_t epoch = 0;
  std::uint32_t position = 0;         ///< p, the turn's last position
  content_key key{}, anchor{};        ///< its turn-end key; key_{d-1}
  std::vector<block_id> blocks;       ///< blocks d .. floor(p/B) - 1, then the partial block (no_block: none)
  std::vector<content_key> chain;     ///< the chain keys of blocks d .. floor(p/B) - 1
  std::vector<std::uint64_t> serials; ///< each one's serial at the capture
  std::vector<block_origin> origins;  ///< each one's origin (none for no_block)
  std::vector<token_id> tokens;       ///< tokens [d B, p)
};

/// The engine's form of a put: the only place a host unit, a GPU block or a GPU slot becomes a number.
inline remote_put host_put(remote_item item, host_unit u, const content_key& key) noexcept {
  return {item, unit_index(u), key, {}, false};
}
inline remote_put gpu_block_put(block_id b, const content_key& key) noexcept {
  return {remote_item::block, static_cast<std::uint32_t>(b), key, {}, true};
}
inline remote_put gpu_snapshot_put(slot_id s, const content_key& key) noexcept {
  return {remote_item::snapshot, static_cast<std::uint32_t>(s), key, {}, true};
}

template <bool Restores>
class remote_tier {
public:
  static constexpr bool enabled = true;

  /// What a GPU block carries for the store: its content key and the key it chains from (zero for anything
  /// that never goes to the store), and whether the store has it (it came from there, or was written
  /// through). Moves with the bytes to the host tier and back.
  struct block_keys {
    content_key key{}, parent{};
    bool in_store = false;
    block_origin origin{}; ///< `remote_turn_ends`: who computed a block no key names
  };
  /// A GPU snapshot slot: the store has it; the step its capture was written in.
  struct slot_entry {
    bool in_store = false;
    epoch_t epoch = 0;
  };
  /// A host KV unit: as `block_keys`, and whether its bytes were fetched from the store (not offloaded from
  /// GPU memory since).
  struct host_block_entry {
    block_keys keys{};
    bool from_store = false;
  };
  /// A host snapshot unit: its content key, its block's, its position, and whether the store has it.
  struct host_snapshot_entry {
    content_key key{}, block{};
    std::uint32_t position = 0;
    bool in_store = false;
  };

  /// Throws `std::bad_alloc`.
  remote_tier(const tier_context& c, const cache_options& o, std::uint32_t kv_units, std::uint32_t snapshot_units)
      : c_(c), keyer(o.remote_keys), gpu_blocks(o.kv_blocks), gpu_slots(c.slots.size()), host_blocks(kv_units),
        host_snapshots(snapshot_units), kv_pending(kv_units), snapshot_pending(snapshot_units),
        turn_end_pending(snapshot_units), turn_end_of_block(kv_units, no_unit),
        roots(c.sequences.capacity()) {}
  remote_tier(const remote_tier&) = delete;
  remote_tier& operator=(const remote_tier&) = delete;

  // ------------------------------------------------------------------------------------------------------
  // sequences

  void sequence_prepared(const sequence_record& r, const extra_keys& keys) noexcept {
    roots[c_.sequences.index_of(r)] = keyer->root(keys);
  }
  void sequence_forked(const sequence_record& from, const sequence_record& to) noexcept {
    roots[c_.sequences.index_of(to)] = roots[c_.sequences.index_of(from)];
  }

  // ------------------------------------------------------------------------------------------------------
  // GPU publications

  /// A freshly published block (or kept tail) `b` of sequence `r`, of serial `serial`, gets its content key
  /// when it is a prefill-exact full block; with write-through it is put once its step completes.
  void block_published(block_id b, const sequence_record& r, std::uint64_t serial) noexcept {
    const block_node& n = c_.blocks.node(b);
    block_keys& e = gpu_block_entry(b);
    e = {};
    if (n.state != block_state::cached || n.kind != exactness::prefill_exact) {
      if (c_.options.remote_turn_ends) e.origin = {c_.options.remote_writer_id, serial};
      return;
    }
    const content_key parent = n.parent == no_block ? roots[c_.sequences.index_of(r)] : gpu_block_entry(n.parent).key;
    if (is_zero(parent)) {
      if (c_.options.remote_turn_ends) e.origin = {c_.options.remote_writer_id, serial};
      return;
    }
    e.parent = parent;
    e.key = keyer->chain(parent, c_.blocks.pool().tokens(b), c_.blocks.pool().media(b));
    if (c_.options.remote_write_through && !is_zero(e.key)) block_writes.push_back({b, serial, c_.clock.current});
  }

  /// Write-through: snapshot slot `s`, just published for block `b` (serial `serial`) as `kind` and written
  /// in the current step, is put once that step completes if it is a prefill-exact one at a full block's end.
  void snapshot_published(slot_id s, block_id b, exactness kind, std::uint64_t serial) noexcept {
    slot_entry& e = gpu_slots[static_cast<std::size_t>(s)];
    e = {false, c_.clock.current};
    if (c_.options.remote_write_through && kind == exactness::prefill_exact &&
        c_.blocks.node(b).state == block_state::cached && !is_zero(gpu_block_entry(b).key))
      snapshot_writes.push_back({s, b, serial, c_.clock.current});
  }

  /// `cache_options::remote_turn_ends`: decode-continuation snapshot slot `s`, just published on block `b` (a
  /// partial block kept with it, or the full block it ends), is a point a conversation continues from: a
  /// turn end, or a branch block's snapshot (a shared prefix where conversations part), or a decode
  /// checkpoint. Names it as a turn end and keeps it to put once its step completes, with the chain past the
  /// last block the store names (the decode-filled blocks, and any other this engine restored or computed
  /// after a decode continuation). `serials`: the GPU blocks' serials. Complexity: one content key per block
  /// of that chain, O(its tokens).
  void continuation_published(slot_id s, block_id b, std::span<const std::uint64_t> serials) noexcept {
    if (!c_.options.remote_turn_ends) return;
    const std::uint32_t B = c_.geometry.block_size;
    const block_node& n = c_.blocks.node(b);
    const bool partial = n.state == block_state::tail;
    turn_end_write w;
    w.slot = s;
    w.on = b;
    w.on_serial = serials[static_cast<std::size_t>(b)];
    w.epoch = c_.clock.current;
    w.position = partial ? n.depth * B + n.fill : (n.depth + 1) * B;
    block_id at = partial ? n.parent : b;
    for (; at != no_block && is_zero(gpu_block(at).key); at = c_.blocks.node(at).parent) w.blocks.push_back(at);
    std::reverse(w.blocks.begin(), w.blocks.end());
    if (at != no_block) {
      w.anchor = gpu_block(at).key;
    } else {
      const stored_extra_keys& x = c_.blocks.pool().root_extras(w.blocks.empty() ? b : w.blocks.front());
      w.anchor = keyer->root({.model_revision = x.model_revision, .lora_id = x.lora_id, .tenant_salt = x.tenant_salt});
    }
    content_key key = w.anchor;
    for (const block_id blk : w.blocks) {
      if (is_zero(key)) break;
      const auto tokens = c_.blocks.pool().tokens(blk);
      w.tokens.insert(w.tokens.end(), tokens.begin(), tokens.end());
      key = keyer->chain(key, tokens, c_.blocks.pool().media(blk));
      w.chain.push_back(key);
    }
    // The store's index of a turn end does not name its position, so nothing keys the media of its partial
    // block: one with media stays in this engine (a reader could not tell it from the same tokens without).
    if (partial && n.has_media) {
      ++c_.metrics.remote_turn_ends_lost;
      return;
    }
    if (partial) {
      const auto tokens = c_.blocks.pool().tokens(b).first(n.fill);
      w.tokens.insert(w.tokens.end(), tokens.begin(), tokens.end());
    }
    w.key = is_zero(key) ? content_key{} : keyer->turn_end(key, w.position / B * B);
    if (is_zero(w.key)) { // a key the source cannot compute: the turn end stays in this engine
      ++c_.metrics.remote_turn_ends_lost;
      return;
    }
    w.blocks.push_back(partial ? b : no_block);
    for (const block_id blk : w.blocks) {
      w.serials.push_back(blk == no_block ? 0 : serials[static_cast<std::size_t>(blk)]);
      w.origins.push_back(blk == no_block ? block_origin{} : gpu_block(blk).origin);
    }
    turn_end_writes.push_back(std::move(w));
  }

  // ------------------------------------------------------------------------------------------------------
  // moves through the host tier

  /// GPU block `b` is evicted: its keys leave with it (to a host unit, or nowhere).
  block_keys take_gpu_block(block_id b) noexcept { return std::exchange(gpu_block_entry(b), block_keys{}); }
  const block_keys& gpu_block(block_id b) const noexcept { return gpu_blocks[static_cast<std::size_t>(b)]; }

  /// The host tier stored an evicted GPU block, whose keys were `keys`, in unit `u`.
  void block_stored(host_unit u, const block_keys& keys) noexcept { host_block(u) = {keys, false}; }

  /// The host tier stored GPU snapshot `t` (node `n`, its block's keys `keys`) in unit `u`. Only a
  /// prefill-exact snapshot at a full block's end is writer-independent: the store may have it.
  void snapshot_stored(host_unit u, slot_id t, const slot_node& n, const block_keys& keys) noexcept {
    const block_node& b = c_.blocks.node(n.block);
    const bool shareable = n.kind == exactness::prefill_exact && b.state == block_state::cached && !is_zero(keys.key);
    const std::uint32_t position = (b.depth + 1) * c_.geometry.block_size;
    host_snapshot_entry& e = host_snapshot(u);
    e.key = shareable ? keyer->snapshot(keys.key, position) : content_key{};
    e.block = shareable ? keys.key : content_key{};
    e.position = position;
    e.in_store = gpu_slots[static_cast<std::size_t>(t)].in_store;
  }

  /// Host unit `u` was onboarded into GPU block `b`: the keys come back with it. True when the store filled
  /// the unit.
  bool block_onboarded(host_unit u, block_id b) noexcept {
    const host_block_entry& h = host_block(u);
    gpu_block_entry(b) = h.keys;
    c_.metrics.remote_blocks_onboarded += h.from_store ? 1 : 0;
    return h.from_store;
  }

  /// The store can take back host unit `u` should a fetch need it: it has it already, or it is a value the
  /// store holds (a prefill-exact full block, or prefill-exact snapshot, with a key), written back on eviction.
  bool store_can_hold_block(host_unit u, const host_ledger& l) const noexcept {
    const host_block_entry& e = host_block(u);
    const host_block_node& n = l.block(u);
    return e.keys.in_store ||
           (!is_zero(e.keys.key) && n.kind == exactness::prefill_exact && n.fill == c_.geometry.block_size);
  }
  bool store_can_hold_snapshot(host_unit u, const host_ledger& l) const noexcept {
    const host_snapshot_entry& e = host_snapshot(u);
    return e.in_store || (!is_zero(e.key) && l.snapshot(u).kind == exactness::prefill_exact);
  }

  /// Write-back: the host tier is handing out unit `u` of `pool` again; a prefill-exact full block or
  /// snapshot that did not come from the store is written there. Its header is built now; the engine copies
  /// the unit's bytes before the transfers that overwrite it.
  void host_unit_evicted(host_pool_kind pool, host_unit u, const host_ledger& l) {
    const std::size_t begin = header_bytes.size();
    if (pool == host_pool_kind::kv) {
      const host_block_node& n = l.block(u);
      const host_block_entry& e = host_block(u);
      if (e.keys.in_store || is_zero(e.keys.key) || n.kind != exactness::prefill_exact || n.fill != c_.geometry.block_size)
        return;
      append_remote_header(header_bytes, remote_item::block, n.kind, (n.depth + 1) * n.fill, e.keys.key, e.keys.parent,
                           l.tokens(u));
      puts.push_back(host_put(remote_item::block, u, e.keys.key));
      c_.metrics.remote_bytes_put += c_.geometry.bytes_per_kv_block;
    } else {
      const host_snapshot_node& n = l.snapshot(u);
      const host_snapshot_entry& e = host_snapshot(u);
      if (e.in_store || is_zero(e.key) || n.kind != exactness::prefill_exact) return;
      append_remote_header(header_bytes, remote_item::snapshot, n.kind, e.position, e.key, e.block, {});
      puts.push_back(host_put(remote_item::snapshot, u, e.key));
      c_.metrics.remote_bytes_put += c_.geometry.bytes_per_snapshot;
    }
    put_headers.emplace_back(begin, header_bytes.size() - begin);
    put_parts.emplace_back(put_units.size(), 0);
    ++c_.metrics.remote_puts;
  }

  // ------------------------------------------------------------------------------------------------------
  // puts

  /// The puts planned since the previous call (write-through ones first turned into puts, given the GPU
  /// blocks' serials now); the span stays valid until the next call.
  std::span<const remote_put> take_puts(std::span<const std::uint64_t> serials) {
    write_through(serials);
    taken_puts.swap(puts);
    taken_header_bytes.swap(header_bytes);
    taken_put_units.swap(put_units);
    for (std::size_t k = 0; k < taken_puts.size(); ++k) {
      taken_puts[k].header =
          std::span<const std::byte>(taken_header_bytes).subspan(put_headers[k].first, put_headers[k].second);
      taken_puts[k].kv_units =
          std::span<const std::uint32_t>(taken_put_units).subspan(put_parts[k].first, put_parts[k].second);
    }
    puts.clear();
    header_bytes.clear();
    put_headers.clear();
    put_units.clear();
    put_parts.clear();
    return taken_puts;
  }

  // ------------------------------------------------------------------------------------------------------
  // invariants

  /// Reserved host units are exactly the pending fetches' (each fetch's header its size and kind); every
  /// content key stored is the one the keyer derives from what it names (a GPU block's from its parent's key
  /// and its tokens, a host block's likewise, a host snapshot's from its block's key and position); blocks
  /// that never go to the store hold none. Complexity: O(GPU blocks + host units) key derivations.
  bool check(const host_ledger& l) const {
    const std::uint32_t B = c_.geometry.block_size;
    // The KV units turn-end fetches reserved, each once and never one a block fetch reserved too.
    std::vector<std::uint8_t> in_turn_end(l.blocks().size(), 0);
    for (std::uint32_t i = 0; i < turn_end_pending.size(); ++i) {
      const pending_turn_end_fetch& t = turn_end_pending[i];
      if (!t.active) continue;
      if (snapshot_pending[i].active || t.units.size() != t.serials.size() || t.units.empty() || t.boundary % B != 0 ||
          t.boundary / B - t.first - t.own + 1 != t.units.size() || t.origins.size() != t.own ||
          t.key != keyer->turn_end(turn_end_parent(t), t.boundary))
        return false;
      for (const host_unit u : t.units)
        if (unit_index(u) >= in_turn_end.size() || in_turn_end[unit_index(u)]++ != 0) return false;
      // Its links: one per unit but the partial block's, the chain keys those of its tokens, the parts not
      // reported yet exactly those a fetch into a unit is still pending for.
      const std::uint32_t blocks = t.boundary / B - t.first;
      const std::size_t links = t.units.size() - 1;
      if (t.chain.size() != blocks || t.block_state.size() != links ||
          t.block_origins.size() != t.block_state.size() || (blocks != 0 && t.chain.back() != turn_end_parent(t)))
        return false;
      std::uint32_t waiting = t.turn_end_state == 0 ? 1 : 0;
      for (std::size_t j = 0; j < t.block_state.size(); ++j) {
        const bool pending = turn_end_of_block[unit_index(t.units[j])] == i;
        if (pending != (t.block_state[j] == 0)) return false;
        waiting += pending ? 1 : 0;
      }
      if (waiting != t.waiting || waiting == 0) return false;
    }
    for (std::uint32_t u = 0; u < turn_end_of_block.size(); ++u) {
      const std::uint32_t owner = turn_end_of_block[u];
      if (owner != no_unit && (owner >= turn_end_pending.size() || !turn_end_pending[owner].active || in_turn_end[u] == 0))
        return false;
    }
    for (std::uint32_t i = 0; i < l.blocks().size(); ++i) {
      const host_unit u{i};
      const host_block_node& n = l.block(u);
      const pending_block_fetch& p = kv_pending[i];
      if (p.active && in_turn_end[i] != 0) return false;
      if ((n.state == host_state::reserved) != (p.active || in_turn_end[i] != 0)) return false;
      if (p.active && (p.header.size() != remote_header_fixed_bytes + 4 * std::size_t{B} || p.tokens.size() != B ||
                       is_zero(p.key) || p.key != keyer->chain(p.parent, p.tokens, p.media)))
        return false;
      const block_keys& k = host_block(u).keys;
      if (n.state == host_state::cached && !is_zero(k.key) &&
          (n.kind != exactness::prefill_exact || n.fill != B ||
           k.key != keyer->chain(k.parent, l.tokens(u), l.media(u))))
        return false;
    }
    for (std::uint32_t i = 0; i < l.snapshots().size(); ++i) {
      const host_unit u{i};
      const host_snapshot_node& n = l.snapshot(u);
      const pending_snapshot_fetch& p = snapshot_pending[i];
      if ((n.state == host_state::reserved) != (p.active || turn_end_pending[i].active)) return false;
      if (p.active && (p.header.size() != remote_header_fixed_bytes || p.position == 0 || p.position % B != 0 ||
                       p.key != keyer->snapshot(p.block, p.position)))
        return false;
      const host_snapshot_entry& e = host_snapshot(u);
      if (n.state == host_state::cached && !is_zero(e.key) &&
          (n.kind != exactness::prefill_exact || e.key != keyer->snapshot(e.block, e.position)))
        return false;
    }
    for (block_id b = 0; b < static_cast<block_id>(c_.blocks.size()); ++b) {
      const block_node& n = c_.blocks.node(b);
      const block_keys& k = gpu_block(b);
      if (is_zero(k.key)) continue;
      if (n.state != block_state::cached || n.kind != exactness::prefill_exact) return false;
      if (k.key != keyer->chain(k.parent, c_.blocks.pool().tokens(b), c_.blocks.pool().media(b))) return false;
      if (n.parent != no_block && k.parent != gpu_block(n.parent).key) return false;
    }
    return true;
  }

  /// The chain key a pending turn-end fetch's key names: key_{k-1}, from its anchor through its blocks' tokens.
  content_key turn_end_parent(const pending_turn_end_fetch& t) const noexcept {
    const std::uint32_t B = c_.geometry.block_size;
    content_key key = t.anchor;
    const std::uint32_t blocks = t.boundary / B - t.first;
    for (std::uint32_t j = 0; j < blocks && !is_zero(key); ++j)
      key = keyer->chain(key, std::span<const token_id>(t.tokens).subspan(std::size_t{j} * B, B), t.media[j]);
    return key;
  }

private:
  block_keys& gpu_block_entry(block_id b) noexcept { return gpu_blocks[static_cast<std::size_t>(b)]; }

public:
  host_block_entry& host_block(host_unit u) noexcept { return host_blocks[unit_index(u)]; }
  const host_block_entry& host_block(host_unit u) const noexcept { return host_blocks[unit_index(u)]; }
  host_snapshot_entry& host_snapshot(host_unit u) noexcept { return host_snapshots[unit_index(u)]; }
  const host_snapshot_entry& host_snapshot(host_unit u) const noexcept { return host_snapshots[unit_index(u)]; }

private:
  /// Write-through: turns the publications whose step completed into puts from GPU memory, if each is still
  /// the publication it was (a block evicted since was offloaded, and goes to the store from the host tier;
  /// a slot reused since holds another snapshot). Publications of steps still running wait.
  void write_through(std::span<const std::uint64_t> serials) {
    auto done = [&](epoch_t epoch) { return epoch < c_.clock.safe_before; };
    std::size_t kept = 0;
    for (const block_write& w : block_writes) {
      if (!done(w.epoch)) {
        block_writes[kept++] = w;
        continue;
      }
      block_keys& k = gpu_block_entry(w.block);
      if (serials[static_cast<std::size_t>(w.block)] != w.serial || w.serial == 0 || k.in_store || is_zero(k.key)) continue;
      const block_node& n = c_.blocks.node(w.block);
      const std::size_t begin = header_bytes.size();
      append_remote_header(header_bytes, remote_item::block, n.kind, (n.depth + 1) * c_.geometry.block_size, k.key,
                           k.parent, c_.blocks.pool().tokens(w.block));
      puts.push_back(gpu_block_put(w.block, k.key));
      put_headers.emplace_back(begin, header_bytes.size() - begin);
    put_parts.emplace_back(put_units.size(), 0);
      k.in_store = true;
      ++c_.metrics.remote_puts;
      c_.metrics.remote_bytes_put += c_.geometry.bytes_per_kv_block;
    }
    block_writes.resize(kept);
    if constexpr (Restores) {
      kept = 0;
      for (const snapshot_write& w : snapshot_writes) {
        if (!done(w.epoch)) {
          snapshot_writes[kept++] = w;
          continue;
        }
        const slot_node& n = c_.slots.node(w.slot);
        slot_entry& e = gpu_slots[static_cast<std::size_t>(w.slot)];
        const block_keys& k = gpu_block(w.block);
        if (n.state != slot_state::published || n.block != w.block || n.kind != exactness::prefill_exact ||
            e.epoch != w.epoch || e.in_store || serials[static_cast<std::size_t>(w.block)] != w.serial ||
            w.serial == 0 || is_zero(k.key))
          continue;
        const std::uint32_t position = (c_.blocks.node(w.block).depth + 1) * c_.geometry.block_size;
        const content_key key = keyer->snapshot(k.key, position);
        if (is_zero(key)) continue;
        const std::size_t begin = header_bytes.size();
        append_remote_header(header_bytes, remote_item::snapshot, exactness::prefill_exact, position, key, k.key, {});
        puts.push_back(gpu_snapshot_put(w.slot, key));
        put_headers.emplace_back(begin, header_bytes.size() - begin);
    put_parts.emplace_back(put_units.size(), 0);
        e.in_store = true;
        ++c_.metrics.remote_puts;
        c_.metrics.remote_bytes_put += c_.geometry.bytes_per_snapshot;
      }
      snapshot_writes.resize(kept);
      put_turn_ends(serials);
    }
  }

  /// The turn ends whose step completed, put from GPU memory if nothing of them was reused since (else
  /// counted lost: the engine still holds what is left of them). Those of steps still running wait.
  void put_turn_ends(std::span<const std::uint64_t> serials) {
    std::size_t kept = 0;
    for (turn_end_write& w : turn_end_writes) {
      if (!(w.epoch < c_.clock.safe_before)) {
        if (&turn_end_writes[kept] != &w) turn_end_writes[kept] = std::move(w);
        ++kept;
        continue;
      }
      const slot_node& n = c_.slots.node(w.slot);
      bool same = n.state == slot_state::published && n.kind == exactness::decode_continuation && n.block == w.on &&
                  gpu_slots[static_cast<std::size_t>(w.slot)].epoch == w.epoch && w.on_serial != 0 &&
                  serials[static_cast<std::size_t>(w.on)] == w.on_serial;
      for (std::size_t j = 0; same && j < w.blocks.size(); ++j)
        same = w.blocks[j] == no_block || (w.serials[j] != 0 && serials[static_cast<std::size_t>(w.blocks[j])] == w.serials[j]);
      if (!same) {
        ++c_.metrics.remote_turn_ends_lost;
        continue;
      }
      // The links: each full block the store lacks, put before the turn end that names it. One fetched from
      // the store or put by an earlier turn end is there already (`in_store`) and is not put again: this is
      // what keeps a turn end's put flat in the conversation's length.
      const std::uint32_t B = c_.geometry.block_size;
      const std::size_t full = w.blocks.size() - 1;
      link_keys.assign(full, content_key{});
      for (std::size_t j = 0; same && j < full; ++j)
        if (!gpu_block(w.blocks[j]).in_store) same = !is_zero(link_keys[j] = continuation_key(keyer, w.chain[j]));
      if (!same) { // a key the source cannot compute: the turn end stays in this engine
        ++c_.metrics.remote_turn_ends_lost;
        continue;
      }
      for (std::size_t j = 0; j < full; ++j) {
        block_keys& k = gpu_block_entry(w.blocks[j]);
        if (k.in_store) continue;
        const content_key& index = link_keys[j];
        const std::size_t at = header_bytes.size();
        append_remote_header(header_bytes, remote_item::block, exactness::decode_continuation,
                             (c_.blocks.node(w.blocks[j]).depth + 1) * B, index, j == 0 ? w.anchor : w.chain[j - 1],
                             std::span<const token_id>(w.tokens).subspan(j * B, B));
        append_origin(header_bytes, w.origins[j]);
        puts.push_back(gpu_block_put(w.blocks[j], index));
        put_headers.emplace_back(at, header_bytes.size() - at);
        put_parts.emplace_back(put_units.size(), 0);
        k.in_store = true;
        ++c_.metrics.remote_puts;
        c_.metrics.remote_bytes_put += c_.geometry.bytes_per_kv_block;
      }
      const std::size_t begin = header_bytes.size();
      append_remote_header(header_bytes, remote_item::turn_end, exactness::decode_continuation, w.position, w.key,
                           w.anchor, w.tokens);
      for (const block_origin& o : w.origins) append_origin(header_bytes, o);
      puts.push_back({remote_item::turn_end, static_cast<std::uint32_t>(w.slot), w.key, {}, true, {}});
      put_headers.emplace_back(begin, header_bytes.size() - begin);
      // The payload: its partial block (no_unit: zeros), then its snapshot.
      put_parts.emplace_back(put_units.size(), 1);
      put_units.push_back(w.blocks.back() == no_block ? no_unit : static_cast<std::uint32_t>(w.blocks.back()));
      ++c_.metrics.remote_puts;
      ++c_.metrics.remote_turn_ends_put;
      c_.metrics.remote_bytes_put += remote_payload_bytes(remote_item::turn_end, 1, c_.geometry.bytes_per_kv_block,
                                                          c_.geometry.bytes_per_snapshot);
    }
    turn_end_writes.resize(kept);
  }

  tier_context c_;

public:
  decltype(cache_options::remote_keys) keyer; ///< how the fleet names values (kept alive by the engine)
  std::vector<block_keys> gpu_blocks;         ///< by GPU block id
  std::vector<slot_entry> gpu_slots;          ///< by GPU snapshot slot
  std::vector<host_block_entry> host_blocks;  ///< by host KV unit
  std::vector<host_snapshot_entry> host_snapshots; ///< by host snapshot unit
  std::vector<pending_block_fetch> kv_pending;     ///< by host KV unit
  std::vector<pending_snapshot_fetch> snapshot_pending; ///< by host snapshot unit
  std::vector<pending_turn_end_fetch> turn_end_pending; ///< by host snapshot unit
  /// By host KV unit: the snapshot unit of the pending turn end whose continuation block is being fetched
  /// into it, until that fetch reports (no_unit: none).
  std::vector<std::uint32_t> turn_end_of_block;
  std::vector<content_key> roots;             ///< by sequence record index: the chain's root content key
  /// Write-through: publications waiting for their step to complete, in publication order.
  std::vector<block_write> block_writes;
  std::vector<snapshot_write> snapshot_writes;
  std::vector<turn_end_write> turn_end_writes; ///< `remote_turn_ends`: captured, waiting for their step
  std::vector<content_key> link_keys;          ///< scratch: the continuation keys of the turn end being put
  /// Puts planned since the last `take_puts`, their headers in one buffer (offset, size per put) and turn
  /// ends' KV units in another (offset, count per put; none for a block or a snapshot).
  std::vector<remote_put> puts, taken_puts;
  std::vector<std::pair<std::size_t, std::size_t>> put_headers, put_parts;
  std::vector<std::byte> header_bytes, taken_header_bytes;
  std::vector<std::uint32_t> put_units, taken_put_units;
};

} // namespace reprise::detail
