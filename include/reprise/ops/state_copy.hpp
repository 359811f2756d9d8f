// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Batched movement of whole states and KV blocks: slot copy (snapshot save, restore, fork), KV block copy
/// (copy-on-write of a partial block), transfer between two pools (offload to and onboard from a host-memory
/// tier) and the opt-in KV gather.
///
/// A pool is `units` fixed-size units of `unit_bytes` (a slot of one state component of one layer, or a KV
/// block of one layer). One call applies the same `(src, dst)` pairs to every pool in the list, so copying a
/// snapshot across all recurrent layers (conv windows and SSM states alike) is a single launch. The device
/// copy moves 16-byte vectors when every pool base and unit size is a multiple of 16 bytes (always true for
/// real model shapes), and narrower words otherwise.

#include <reprise/errc.hpp>
#include <reprise/ops/slots.hpp>
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <vector>

namespace reprise::ops {

/// A pool of equally sized units (state slots or KV blocks) at `base`.
struct pool_view {
  void* base = nullptr;
  std::size_t unit_bytes = 0;
  std::int64_t units = 0;
};

/// Checks pools and pairs for a batched copy. Errors: `invalid_argument` (a pool with a null base or zero
/// unit size); `out_of_range` / `overlapping_pairs` as `validate_copy_pairs` (against the smallest pool).
inline errc validate_copy(std::span<const pool_view> pools, std::span<const copy_pair> pairs) noexcept {
  std::int64_t units = -1;
  for (const pool_view& p : pools) {
    if (p.base == nullptr || p.unit_bytes == 0 || p.units <= 0) return errc::invalid_argument;
    units = units < 0 ? p.units : (p.units < units ? p.units : units);
  }
  if (pools.empty()) return pairs.empty() ? errc{} : errc::invalid_argument;
  return validate_copy_pairs(pairs, units);
}

/// Host implementation of the batched unit copy: for every pool and pair, unit `dst` = unit `src`.
/// Effects: byte-exact copies. Errors: as `validate_copy`; on error nothing is written.
/// Complexity: O(pools x pairs x unit_bytes).
inline result<void> copy_units_host(std::span<const pool_view> pools, std::span<const copy_pair> pairs) {
  if (errc e = validate_copy(pools, pairs); e != errc{}) return e;
  for (const pool_view& p : pools) {
    auto* base = static_cast<std::byte*>(p.base);
    for (const copy_pair& c : pairs)
      std::memcpy(base + static_cast<std::size_t>(c.dst) * p.unit_bytes,
                  base + static_cast<std::size_t>(c.src) * p.unit_bytes, p.unit_bytes);
  }
  return {};
}

/// Device workspace `copy_units` needs for `pools` pools and `pairs` pairs.
std::size_t copy_units_workspace_bytes(std::size_t pools, std::size_t pairs) noexcept;

/// Device batched unit copy (reprise::kernels): one launch for every pool and pair, on `stream`.
/// Effects: as `copy_units_host`, stream-ordered. Errors: as `validate_copy` (nothing launched);
/// `size_mismatch` (workspace too small); `device_error` (launch failed).
/// Complexity: one kernel; bandwidth-bound, 2 x pools x pairs x unit_bytes bytes moved.
result<void> copy_units(std::span<const pool_view> pools, std::span<const copy_pair> pairs, device_workspace ws,
                        stream_handle stream);

/// Snapshot save / restore / fork: `copy_units` over the slot pools of every recurrent layer.
inline result<void> copy_state_slots(std::span<const pool_view> slot_pools, std::span<const copy_pair> pairs,
                                     device_workspace ws, stream_handle stream) {
  return copy_units(slot_pools, pairs, ws, stream);
}

/// KV copy-on-write: `copy_units` over the block pools of every attention layer.
inline result<void> copy_kv_blocks(std::span<const pool_view> block_pools, std::span<const copy_pair> pairs,
                                   device_workspace ws, stream_handle stream) {
  return copy_units(block_pools, pairs, ws, stream);
}

/// One layer of a transfer between two pools: unit `dst` of `dst` receives unit `src` of `src`. The two views
/// have equal `unit_bytes` and may have different unit counts (a GPU block pool and a smaller host tier).
struct pool_pair_view {
  pool_view src;
  pool_view dst;
};

/// Checks layers and pairs for a transfer between pools (the host tier's offload and onboard).
///
/// Every index is checked against its own side: `src` against the smallest source pool, `dst` against the
/// smallest destination pool. Source and destination are normally distinct memory, so `{i, i}` is a valid
/// pair. Memory is checked pool by pool as whole byte ranges `[base, base + units x unit_bytes)`:
/// - a layer whose source and destination are the same pool (same base, hence same unit size) is a copy
///   within that pool, and then the rules of `copy_units` hold for the whole call: no destination may be read
///   by any pair (a self pair `{i, i}` included), since the copies run concurrently;
/// - no destination pool may share a byte with any other pool of the call: another layer's source or
///   destination, or its own layer's source unless that is the very same pool. Source pools may share memory
///   freely. Engines whose layers alias one buffer (views of different geometry over the same bytes) issue one
///   call per aliasing group.
///
/// Errors: `invalid_argument` (no layers but some pairs; a null base, zero unit size or no units; a pool
/// whose byte range does not fit in the address space; overlapping pools as above); `size_mismatch` (a
/// layer's source and destination unit sizes differ); `out_of_range` (an index outside its side's pools);
/// `overlapping_pairs` (a destination named twice, or, for a within-pool layer, a destination that a pair
/// reads). Complexity: O(L log L + n log n) for L layers and n pairs.
inline errc validate_transfer(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs) noexcept {
  if (layers.empty()) return pairs.empty() ? errc{} : errc::invalid_argument;
  struct range {
    std::uintptr_t begin, end;
    bool written;
  };
  std::vector<range> ranges;
  ranges.reserve(2 * layers.size());
  std::int64_t src_units = -1, dst_units = -1;
  bool within_pool = false;
  for (const pool_pair_view& l : layers) {
    for (const pool_view* p : {&l.src, &l.dst})
      if (p->base == nullptr || p->unit_bytes == 0 || p->units <= 0) return errc::invalid_argument;
    if (l.src.unit_bytes != l.dst.unit_bytes) return errc::size_mismatch;
    src_units = src_units < 0 ? l.src.units : (l.src.units < src_units ? l.src.units : src_units);
    dst_units = dst_units < 0 ? l.dst.units : (l.dst.units < dst_units ? l.dst.units : dst_units);
    // Equal bases (the unit sizes are equal by now) are one pool, entered once as written, as long as the
    // longer of the two views.
    const bool same = l.src.base == l.dst.base;
    within_pool = within_pool || same;
    const auto add = [&](const pool_view& p, std::int64_t units, bool written) {
      const auto begin = reinterpret_cast<std::uintptr_t>(p.base);
      const auto n = static_cast<std::uintptr_t>(units);
      if (n > UINTPTR_MAX / p.unit_bytes || begin > UINTPTR_MAX - n * p.unit_bytes) return false;
      ranges.push_back({begin, begin + n * p.unit_bytes, written});
      return true;
    };
    const bool fits = same ? add(l.dst, l.src.units > l.dst.units ? l.src.units : l.dst.units, true)
                           : add(l.src, l.src.units, false) && add(l.dst, l.dst.units, true);
    if (!fits) return errc::invalid_argument;
  }
  // Sweep by start address: a range meets an earlier one iff the earlier one ends past its start, so the
  // largest end seen so far (of any range, of written ranges) decides. Read-only ranges may meet each other.
  std::sort(ranges.begin(), ranges.end(), [](const range& a, const range& b) { return a.begin < b.begin; });
  std::uintptr_t any_end = 0, written_end = 0;
  for (const range& r : ranges) {
    if (r.begin < written_end || (r.written && r.begin < any_end)) return errc::invalid_argument;
    any_end = r.end > any_end ? r.end : any_end;
    if (r.written) written_end = r.end > written_end ? r.end : written_end;
  }
  std::vector<std::int32_t> dsts, srcs;
  dsts.reserve(pairs.size());
  srcs.reserve(pairs.size());
  for (const copy_pair& p : pairs) {
    if (p.src < 0 || p.dst < 0 || p.src >= src_units || p.dst >= dst_units) return errc::out_of_range;
    dsts.push_back(p.dst);
    srcs.push_back(p.src);
  }
  std::sort(dsts.begin(), dsts.end());
  if (std::adjacent_find(dsts.begin(), dsts.end()) != dsts.end()) return errc::overlapping_pairs;
  if (within_pool) {
    std::sort(srcs.begin(), srcs.end());
    for (std::int32_t d : dsts)
      if (std::binary_search(srcs.begin(), srcs.end(), d)) return errc::overlapping_pairs;
  }
  return errc{};
}

/// Host implementation of the transfer: for every layer and pair, unit `dst` of the destination pool = unit
/// `src` of the source pool. Effects: byte-exact copies. Errors: as `validate_transfer`; on error nothing is
/// written. Complexity: O(layers x pairs x unit_bytes).
inline result<void> transfer_units_host(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs) {
  if (errc e = validate_transfer(layers, pairs); e != errc{}) return e;
  for (const pool_pair_view& l : layers) {
    const auto* src = static_cast<const std::byte*>(l.src.base);
    auto* dst = static_cast<std::byte*>(l.dst.base);
    for (const copy_pair& c : pairs)
      std::memcpy(dst + static_cast<std::size_t>(c.dst) * l.dst.unit_bytes,
                  src + static_cast<std::size_t>(c.src) * l.src.unit_bytes, l.dst.unit_bytes);
  }
  return {};
}

/// Device workspace `transfer_units` needs for `layers` layers and `pairs` pairs.
std::size_t transfer_units_workspace_bytes(std::size_t layers, std::size_t pairs) noexcept;

/// Device transfer between pools (reprise::kernels): one launch for every layer and pair, on `stream`; the
/// GPU <-> host tier's offload (device source, host destination) and onboard (the reverse), or device to
/// device.
///
/// Host pools must be pinned and mapped, and their `base` the address the device uses for them: the kernel
/// reads and writes host memory directly through unified addressing (zero-copy over PCIe), which is what lets
/// one launch move a batch of many small blocks where one `cudaMemcpyAsync` per block would pay a call and a
/// DMA setup each. `cudaHostAlloc` / `cudaMallocHost` memory qualifies as is; `cudaHostRegister`ed memory
/// needs `cudaHostRegisterMapped` and, unless the device reports
/// `cudaDevAttrCanUseHostPointerForRegisteredMem`, the pointer from `cudaHostGetDevicePointer`. Pageable
/// memory faults the kernel (a sticky error that ends the context). The launcher does not query pointers on
/// every call; `check_transfer_pools` does, once, where the engine sets up its pools.
///
/// Effects: as `transfer_units_host`, stream-ordered: a host source must stay unchanged, and a host
/// destination unread by the CPU, until the stream has been synchronized past the launch. Errors: as `validate_transfer` (nothing launched); `size_mismatch`
/// (workspace too small); `device_error` (launch failed). Complexity: one kernel; 16-byte accesses when every
/// base and unit size of a layer is a multiple of 16 bytes; 2 x layers x pairs x unit_bytes bytes moved.
result<void> transfer_units(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs,
                            device_workspace ws, stream_handle stream);

/// Checks that the device can address every pool of `layers` through its `base` as given (device memory, or
/// pinned host memory mapped at that address): the precondition of `transfer_units`, asked of the CUDA
/// runtime for the first and the last byte of each pool. Errors: as `validate_transfer` with no pairs;
/// `invalid_argument` (pageable memory, or host memory the device reaches only at an address other than
/// `base`);
/// `no_device` / `device_error` (the runtime failed). Complexity: two runtime queries per pool, so for setup
/// rather than every step.
result<void> check_transfer_pools(std::span<const pool_pair_view> layers);

/// Layout of one paged KV tensor (K or V of one layer): `[blocks, block_size, kv_heads, head_dim]` elements
/// of `element_bytes`, the layout of vLLM's and SGLang's paged caches.
struct kv_pool_layout {
  std::int64_t blocks = 0;
  std::int64_t block_size = 0;
  std::int64_t kv_heads = 0;
  std::int64_t head_dim = 0;
  std::size_t element_bytes = 2;

  constexpr std::size_t row_bytes() const noexcept { return static_cast<std::size_t>(head_dim) * element_bytes; }
};

/// Arguments of the opt-in KV gather: materialize `out[b, h, t, :]` = token t of sequence b (head h) for
/// t < seq_lens[b], zero for seq_lens[b] <= t < out_tokens. The cache never calls it: engines whose attention
/// reads paged blocks directly pay nothing.
struct kv_gather_args {
  const void* pool = nullptr;                  ///< one K or V pool, `layout`
  kv_pool_layout layout;
  tensor<const std::int32_t, 2> block_table;   ///< host [batch, max_blocks] block ids
  std::span<const std::int32_t> seq_lens;      ///< host [batch]
  void* out = nullptr;                         ///< [batch, kv_heads, out_tokens, head_dim]
  std::int64_t out_tokens = 0;
};

/// Checks gather arguments. Errors: `invalid_argument` (null pointers, empty layout); `size_mismatch`
/// (seq_lens length, a sequence longer than out_tokens or than its block-table row covers); `out_of_range`
/// (a block id used by a sequence outside the pool).
inline errc validate_kv_gather(const kv_gather_args& a) noexcept {
  const kv_pool_layout& l = a.layout;
  if (a.pool == nullptr || a.out == nullptr || l.blocks <= 0 || l.block_size <= 0 || l.kv_heads <= 0 ||
      l.head_dim <= 0 || l.element_bytes == 0 || a.out_tokens < 0)
    return errc::invalid_argument;
  const std::int64_t batch = a.block_table.extent(0);
  if (static_cast<std::int64_t>(a.seq_lens.size()) != batch) return errc::size_mismatch;
  for (std::int64_t b = 0; b < batch; ++b) {
    const std::int64_t len = nth(a.seq_lens, b);
    if (len < 0 || len > a.out_tokens || len > a.block_table.extent(1) * l.block_size) return errc::size_mismatch;
    for (std::int64_t i = 0; i * l.block_size < len; ++i) {
      const std::int32_t blk = a.block_table(b, i);
      if (blk < 0 || blk >= l.blocks) return errc::out_of_range;
    }
  }
  return errc{};
}

/// Host implementation of the KV gather. Errors: as `validate_kv_gather`; nothing written on error.
/// Complexity: O(batch x kv_heads x out_tokens x head_dim).
inline result<void> gather_kv_host(const kv_gather_args& a) {
  if (errc e = validate_kv_gather(a); e != errc{}) return e;
  const kv_pool_layout& l = a.layout;
  const std::size_t row = l.row_bytes();
  const auto* pool = static_cast<const std::byte*>(a.pool);
  auto* out = static_cast<std::byte*>(a.out);
  for (std::int64_t b = 0; b < a.block_table.extent(0); ++b)
    for (std::int64_t h = 0; h < l.kv_heads; ++h)
      for (std::int64_t t = 0; t < a.out_tokens; ++t) {
        std::byte* dst = out + static_cast<std::size_t>((b * l.kv_heads + h) * a.out_tokens + t) * row;
        if (t >= nth(a.seq_lens, b)) {
          std::memset(dst, 0, row);
          continue;
        }
        const std::int64_t blk = a.block_table(b, t / l.block_size);
        const std::int64_t src_row = (blk * l.block_size + t % l.block_size) * l.kv_heads + h;
        std::memcpy(dst, pool + static_cast<std::size_t>(src_row) * row, row);
      }
  return {};
}

/// Device workspace `gather_kv` needs for a block table of `batch` x `max_blocks`.
std::size_t gather_kv_workspace_bytes(std::int64_t batch, std::int64_t max_blocks) noexcept;

/// Device KV gather (reprise::kernels). Effects: as `gather_kv_host`, stream-ordered, 16-byte vectors when
/// rows are 16-byte multiples. Errors: as `validate_kv_gather`; `size_mismatch` (workspace too small);
/// `device_error`.
result<void> gather_kv(const kv_gather_args& a, device_workspace ws, stream_handle stream);

// ---- CUDA-graph capture (reprise::kernels) ---------------------------------------------------------------
// As for Mamba2 (`include/reprise/ops/mamba2.hpp`, "CUDA-graph capture"): `copy_units` and `transfer_units`
// upload their layer descriptors and pairs with a pageable copy, which a captured graph would freeze. The
// capture-safe form plans both into bytes the engine owns (pinned memory it copies into the workspace, inside
// the graph or before it) and launches the copy over them without uploading or allocating. One captured graph
// serves every plan of the same shape: new pairs (and pools, if they move) at each replay.

/// What a captured copy or transfer is specialized to: its layer and pair counts, its grid and its bytes.
struct copy_shape {
  std::int32_t layers = 0;
  std::int32_t pairs = 0;
  std::uint32_t chunks = 0;       ///< copy chunks of one unit over all layers: the grid is chunks x pairs
  std::size_t metadata_bytes = 0; ///< the plan (layer descriptors, then pairs): the whole workspace the launch reads
  friend constexpr bool operator==(const copy_shape&, const copy_shape&) = default;
};

/// Plans a copy within pools for a capture-safe launch. Effects: validates exactly as `copy_units`; writes the
/// device metadata (one descriptor per pool: base, unit size, access width; then the pairs) into `metadata`
/// when it is not empty. Returns the shape (with empty `metadata`: a size query). Errors: as `validate_copy`;
/// `invalid_argument` (a grid too large for one launch); `size_mismatch` (`metadata` non-empty and smaller
/// than `metadata_bytes`). Complexity: that of `validate_copy`.
result<copy_shape> copy_units_plan(std::span<const pool_view> pools, std::span<const copy_pair> pairs,
                                   std::span<std::byte> metadata);

/// Plans a transfer between pools for a capture-safe launch: as `copy_units_plan`, validated as
/// `transfer_units` (its pointer precondition included: `check_transfer_pools` once at setup).
result<copy_shape> transfer_units_plan(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs,
                                       std::span<std::byte> metadata);

/// Capture-safe copy or transfer: the kernel of `copy_units` / `transfer_units`, reading the plan from the
/// first `shape.metadata_bytes` of `ws`, which the engine filled (stream-ordered before the launch) with the
/// bytes of `copy_units_plan` or `transfer_units_plan`. Launches only; no copy, allocation or
/// synchronization. The plan's indices and bases are not read on the host: they were validated when planned.
/// Errors: `invalid_argument` (negative counts, a grid too large for one launch); `size_mismatch` (the
/// shape's byte count does not match its counts, or `ws` is smaller); `device_error`.
result<void> copy_units_planned(const copy_shape& shape, device_workspace ws, stream_handle stream);

/// What a captured KV gather is specialized to: its block table's extents and its bytes.
struct gather_kv_shape {
  std::int64_t batch = 0;
  std::int64_t max_blocks = 0;
  std::size_t metadata_bytes = 0; ///< the plan (block table, then lengths): the whole workspace the launch reads
  friend constexpr bool operator==(const gather_kv_shape&, const gather_kv_shape&) = default;
};

/// Plans a KV gather for a capture-safe launch. Effects: validates exactly as `gather_kv`; writes the device
/// metadata (the block table, then the lengths) into `metadata` when it is not empty. Returns the shape (with
/// empty `metadata`: a size query). Errors: as `validate_kv_gather`; `size_mismatch` (`metadata` non-empty and
/// smaller than `metadata_bytes`). Complexity: O(batch x max_blocks).
result<gather_kv_shape> gather_kv_plan(const kv_gather_args& a, std::span<std::byte> metadata);

/// Capture-safe KV gather: the kernel of `gather_kv` over the bytes of `gather_kv_plan` at the start of `ws`
/// (filled by the engine before the launch). Reads `pool`, `layout`, `out` and `out_tokens` of `a`; its
/// `block_table` and `seq_lens` are not read (the plan holds them, validated when planned, against the same
/// layout and `out_tokens`). Launches only. Errors: `invalid_argument` (null pointers, empty layout, negative
/// counts); `size_mismatch` (the shape's byte count does not match its extents, or `ws` is smaller);
/// `device_error`.
result<void> gather_kv_planned(const kv_gather_args& a, const gather_kv_shape& shape, device_workspace ws,
                               stream_handle stream);

} // namespace reprise::ops
