// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What a cache with a remote tier keeps (`policy::remote_tier`): the content key of every GPU block and
/// host unit that may go to the store, the puts and fetches planned, and the header format a fetched value
/// must return unchanged.
///
/// The header (a wire format, docs/tiers.md):
///
///   "RPRSRH01" | item u8 | class u8 | 0 u16 | position u32 | tokens u32 | key [32] | parent [32] | tokens i32...
///
/// little-endian; `position` is the block's end or the snapshot's position, `parent` the key the block
/// chains from (key_{-1} for a first block) or, for a snapshot, its block's key. A fetched value is used
/// only if its header equals, byte for byte, the header the prompt itself implies: its own tokens, its own
/// chain of keys, prefill-exact.

#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/keys/block_key.hpp>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
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

/// A fetch in flight into a reserved host unit: what the unit will be once the fetch is reported with the
/// expected header.
struct pending_fetch {
  bool active = false;
  std::vector<std::byte> header;      ///< expected, byte for byte
  content_key key{}, parent{};        ///< the value's content key and its parent's (snapshot: the block's)
  block_key chain_key{};              ///< block: the in-process key ending at it
  std::uint64_t serial = 0;           ///< block: drawn at `prefetch`; snapshot: its block's
  std::uint64_t parent_serial = 0;
  std::uint32_t depth = 0;            ///< block: its index; snapshot: its position
  std::vector<token_id> tokens;       ///< block: its B tokens
  stored_extra_keys extras{};         ///< block at depth 0
};

/// Write-through: a GPU block or snapshot to put once the step `epoch` that computed it completed, if it is
/// still the same publication then (the block's serial, the slot's block and capture epoch).
struct write_through_entry {
  std::int32_t unit = 0;   ///< block_id or slot_id
  block_id block = no_block;
  std::uint64_t serial = 0;
  epoch_t epoch = 0;
};

/// A snapshot `prefetch` may fetch: its position, its block's content key and its own.
struct snapshot_candidate {
  std::uint32_t position = 0;
  content_key block{}, key{};
};

struct remote_tier_state {
  remote_tier_state(remote_keys_ref k, std::uint32_t gpu_blocks, std::uint32_t gpu_slots, std::uint32_t kv_units,
                    std::uint32_t snapshot_units)
      : keyer(k), gpu_key(gpu_blocks), gpu_parent(gpu_blocks), gpu_in_store(gpu_blocks, 0), slot_in_store(gpu_slots, 0),
        slot_epoch(gpu_slots, 0), host_key(kv_units), host_parent(kv_units),
        host_fetched(kv_units, 0), host_from_store(kv_units, 0), snapshot_key(snapshot_units), snapshot_block(snapshot_units),
        snapshot_position(snapshot_units, 0), snapshot_fetched(snapshot_units, 0), kv_pending(kv_units),
        snapshot_pending(snapshot_units) {}

  remote_keys_ref keyer;
  /// By GPU block id: the content key of a cached prefill-exact full block and the key it chains from (zero
  /// for anything that never goes to the store).
  std::vector<content_key> gpu_key, gpu_parent;
  /// By GPU block and GPU slot: the store has the value (it came from there, or was written through); moves
  /// with the bytes to the host tier. By GPU slot: the step its capture was written in.
  std::vector<std::uint8_t> gpu_in_store, slot_in_store;
  std::vector<epoch_t> slot_epoch;
  /// Write-through: publications waiting for their step to complete, in publication order.
  std::vector<write_through_entry> through_blocks, through_snapshots;
  /// By host KV unit and host snapshot unit: the same, moved with the bytes; `*_fetched`: the store has the
  /// value (it came from there, or was written through), so evicting it writes nothing back.
  std::vector<content_key> host_key, host_parent;
  std::vector<std::uint8_t> host_fetched;
  /// By host KV unit: its bytes were fetched from the store (not offloaded from GPU memory since).
  std::vector<std::uint8_t> host_from_store;
  std::vector<content_key> snapshot_key, snapshot_block;
  std::vector<std::uint32_t> snapshot_position;
  std::vector<std::uint8_t> snapshot_fetched;
  std::vector<pending_fetch> kv_pending, snapshot_pending;

  /// Puts planned since the last `take_transfers`, their headers in one buffer (offset, size per put).
  std::vector<remote_put> puts, taken_puts;
  std::vector<std::pair<std::size_t, std::size_t>> put_headers;
  std::vector<std::byte> header_bytes, taken_header_bytes;
  std::vector<remote_fetch> fetches;
  std::vector<remote_probe> probes;
  /// `prefetch` / `probe` scratch: its lookup, the keys the store has (sorted), the walked chain's block keys
  /// and the serials drawn for the fetched ones, the snapshot candidates.
  sequence_record scratch;
  std::vector<content_key> present, walked;
  std::vector<std::uint64_t> walked_serials;
  std::vector<snapshot_candidate> candidates;
  /// The block keys of recent walks, by block index, with the parent each chained from and the block's tokens:
  /// a key is a function of those alone, so one is reused when both match, and a `prefetch` after the `probe`
  /// of its prompt does not hash the prompt again. Sized to the latest walk.
  std::vector<content_key> memo_parents, memo_keys;
  std::vector<token_id> memo_tokens;
};

} // namespace reprise::detail
