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

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
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
    if (n.state != block_state::cached || n.kind != exactness::prefill_exact) return;
    const content_key parent = n.parent == no_block ? roots[c_.sequences.index_of(r)] : gpu_block_entry(n.parent).key;
    if (is_zero(parent)) return;
    e.parent = parent;
    e.key = keyer->chain(parent, c_.blocks.pool().tokens(b));
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
    for (std::size_t k = 0; k < taken_puts.size(); ++k)
      taken_puts[k].header =
          std::span<const std::byte>(taken_header_bytes).subspan(put_headers[k].first, put_headers[k].second);
    puts.clear();
    header_bytes.clear();
    put_headers.clear();
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
    for (std::uint32_t i = 0; i < l.blocks().size(); ++i) {
      const host_unit u{i};
      const host_block_node& n = l.block(u);
      const pending_block_fetch& p = kv_pending[i];
      if ((n.state == host_state::reserved) != p.active) return false;
      if (p.active && (p.header.size() != remote_header_fixed_bytes + 4 * std::size_t{B} || p.tokens.size() != B ||
                       is_zero(p.key) || p.key != keyer->chain(p.parent, p.tokens)))
        return false;
      const block_keys& k = host_block(u).keys;
      if (n.state == host_state::cached && !is_zero(k.key) &&
          (n.kind != exactness::prefill_exact || n.fill != B || k.key != keyer->chain(k.parent, l.tokens(u))))
        return false;
    }
    for (std::uint32_t i = 0; i < l.snapshots().size(); ++i) {
      const host_unit u{i};
      const host_snapshot_node& n = l.snapshot(u);
      const pending_snapshot_fetch& p = snapshot_pending[i];
      if ((n.state == host_state::reserved) != p.active) return false;
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
      if (k.key != keyer->chain(k.parent, c_.blocks.pool().tokens(b))) return false;
      if (n.parent != no_block && k.parent != gpu_block(n.parent).key) return false;
    }
    return true;
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
        e.in_store = true;
        ++c_.metrics.remote_puts;
        c_.metrics.remote_bytes_put += c_.geometry.bytes_per_snapshot;
      }
      snapshot_writes.resize(kept);
    }
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
  std::vector<content_key> roots;             ///< by sequence record index: the chain's root content key
  /// Write-through: publications waiting for their step to complete, in publication order.
  std::vector<block_write> block_writes;
  std::vector<snapshot_write> snapshot_writes;
  /// Puts planned since the last `take_puts`, their headers in one buffer (offset, size per put).
  std::vector<remote_put> puts, taken_puts;
  std::vector<std::pair<std::size_t, std::size_t>> put_headers;
  std::vector<std::byte> header_bytes, taken_header_bytes;
};

} // namespace reprise::detail
