// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Launchers of the batched unit copy, the transfer between pools and the KV gather
// (include/reprise/ops/state_copy.hpp).
#include <reprise/ops/state_copy.hpp>

#include "state_copy.cuh"

#include <cstring>
#include <vector>

namespace reprise::ops {
namespace {
using device_runtime::workspace_layout;

struct copy_layout {
  std::size_t pools, pairs;
  workspace_layout l;
  copy_layout(std::size_t np, std::size_t nq) {
    pools = l.take<device::copy_pool_desc>(np);
    pairs = l.take<copy_pair>(nq);
  }
};

struct gather_layout {
  std::size_t table, lens;
  workspace_layout l;
  gather_layout(std::int64_t batch, std::int64_t max_blocks) {
    table = l.take<std::int32_t>(static_cast<std::size_t>(batch * max_blocks));
    lens = l.take<std::int32_t>(static_cast<std::size_t>(batch));
  }
};

std::uint32_t access_width(std::uint64_t src, std::uint64_t dst, std::uint64_t unit) {
  const std::uint64_t all = src | dst | unit;
  if (all % 16 == 0) return 16;
  if (all % 4 == 0) return 4;
  return 1;
}

/// The plan of a copy (layer descriptors, then pairs) for validated pools and pairs: its shape, and its bytes
/// into `out` when that is not empty (`size_mismatch` when it is too small). `invalid_argument` when the grid
/// would not fit one launch.
result<copy_shape> plan_copy(std::span<const std::uint64_t> src_bases, std::span<const std::uint64_t> dst_bases,
                             std::span<const std::size_t> unit_bytes, std::span<const copy_pair> pairs,
                             std::span<std::byte> out) {
  const std::size_t layers = unit_bytes.size();
  const copy_layout layout(layers, pairs.size());
  std::vector<device::copy_pool_desc> desc(layers);
  std::uint64_t chunks = 0;
  for (std::size_t i = 0; i < layers; ++i) {
    desc[i] = {src_bases[i], dst_bases[i], unit_bytes[i], access_width(src_bases[i], dst_bases[i], unit_bytes[i]),
               static_cast<std::uint32_t>(chunks)};
    chunks += (unit_bytes[i] + device::copy_chunk_bytes - 1) / device::copy_chunk_bytes;
  }
  if (chunks > 0xffffffffu || chunks * pairs.size() > 0x7fffffffu) return errc::invalid_argument;
  const copy_shape shape{static_cast<std::int32_t>(layers), static_cast<std::int32_t>(pairs.size()),
                         static_cast<std::uint32_t>(chunks), layout.l.bytes()};
  if (out.empty()) return shape;
  if (out.size() < layout.l.bytes()) return errc::size_mismatch;
  std::memset(out.data(), 0, layout.l.bytes()); // the alignment padding too: equal plans give equal bytes
  if (!desc.empty())
    std::memcpy(out.data() + layout.pools, desc.data(), desc.size() * sizeof(device::copy_pool_desc));
  if (!pairs.empty()) std::memcpy(out.data() + layout.pairs, pairs.data(), pairs.size_bytes());
  return shape;
}

/// The copy kernel over a plan already in the workspace.
result<void> launch_planned(const copy_shape& shape, device_workspace ws, stream_handle stream) {
  if (shape.layers < 0 || shape.pairs < 0) return errc::invalid_argument;
  const copy_layout layout(static_cast<std::size_t>(shape.layers), static_cast<std::size_t>(shape.pairs));
  if (layout.l.bytes() != shape.metadata_bytes) return errc::size_mismatch;
  const std::uint64_t blocks = std::uint64_t{shape.chunks} * static_cast<std::uint64_t>(shape.pairs);
  if (blocks > 0x7fffffffu) return errc::invalid_argument;
  if (blocks == 0) return {};
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  device::copy_units_kernel<<<static_cast<unsigned>(blocks), device::copy_threads, 0, stream>>>(
      device_runtime::at<device::copy_pool_desc>(ws.data, layout.pools), shape.layers,
      device_runtime::at<copy_pair>(ws.data, layout.pairs), shape.chunks);
  return device_runtime::launch_status();
}

/// Plans, uploads (one pageable copy) and launches one copy over all layers and pairs. `layers` is not empty,
/// nor is `pairs`, and both passed validation.
result<void> launch_copy(std::span<const std::uint64_t> src_bases, std::span<const std::uint64_t> dst_bases,
                         std::span<const std::size_t> unit_bytes, std::span<const copy_pair> pairs,
                         device_workspace ws, stream_handle stream) {
  const copy_layout layout(unit_bytes.size(), pairs.size());
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  std::vector<std::byte> bytes(layout.l.bytes());
  const auto shape = plan_copy(src_bases, dst_bases, unit_bytes, pairs, bytes);
  if (!shape) return shape.error();
  REPRISE_CUDA_TRY(cudaMemcpyAsync(ws.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
  return launch_planned(*shape, ws, stream);
}

/// The bases and unit sizes of a copy within pools.
struct copy_bases {
  std::vector<std::uint64_t> bases;
  std::vector<std::size_t> units;
  explicit copy_bases(std::span<const pool_view> pools) : bases(pools.size()), units(pools.size()) {
    for (std::size_t i = 0; i < pools.size(); ++i) {
      bases[i] = reinterpret_cast<std::uint64_t>(pools[i].base);
      units[i] = pools[i].unit_bytes;
    }
  }
};

/// The bases and unit sizes of a transfer between pools.
struct transfer_bases {
  std::vector<std::uint64_t> src, dst;
  std::vector<std::size_t> units;
  explicit transfer_bases(std::span<const pool_pair_view> layers)
      : src(layers.size()), dst(layers.size()), units(layers.size()) {
    for (std::size_t i = 0; i < layers.size(); ++i) {
      src[i] = reinterpret_cast<std::uint64_t>(layers[i].src.base);
      dst[i] = reinterpret_cast<std::uint64_t>(layers[i].dst.base);
      units[i] = layers[i].src.unit_bytes;
    }
  }
};
} // namespace

std::size_t copy_units_workspace_bytes(std::size_t pools, std::size_t pairs) noexcept {
  return copy_layout(pools, pairs).l.bytes();
}

result<void> copy_units(std::span<const pool_view> pools, std::span<const copy_pair> pairs, device_workspace ws,
                        stream_handle stream) {
  if (errc e = validate_copy(pools, pairs); e != errc{}) return e;
  if (pairs.empty()) return {};
  const copy_bases b(pools);
  return launch_copy(b.bases, b.bases, b.units, pairs, ws, stream);
}

std::size_t transfer_units_workspace_bytes(std::size_t layers, std::size_t pairs) noexcept {
  return copy_layout(layers, pairs).l.bytes();
}

// A kernel rather than cudaMemcpyBatchAsync: the batch API takes one (src, dst, size) triple per copy, so the
// host would build and the driver walk layers x pairs entries on every call (tens of thousands for a large
// offload), while the kernel derives them on the device from one descriptor per layer and the pair list. The
// batch API would move the bytes on the copy engines and leave the SMs free; that trade is for a measurement
// on a device to decide.
result<void> transfer_units(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs,
                            device_workspace ws, stream_handle stream) {
  if (errc e = validate_transfer(layers, pairs); e != errc{}) return e;
  if (pairs.empty()) return {};
  const transfer_bases b(layers);
  return launch_copy(b.src, b.dst, b.units, pairs, ws, stream);
}

result<copy_shape> copy_units_plan(std::span<const pool_view> pools, std::span<const copy_pair> pairs,
                                   std::span<std::byte> metadata) {
  if (errc e = validate_copy(pools, pairs); e != errc{}) return e;
  const copy_bases b(pools);
  return plan_copy(b.bases, b.bases, b.units, pairs, metadata);
}

result<copy_shape> transfer_units_plan(std::span<const pool_pair_view> layers, std::span<const copy_pair> pairs,
                                       std::span<std::byte> metadata) {
  if (errc e = validate_transfer(layers, pairs); e != errc{}) return e;
  const transfer_bases b(layers);
  return plan_copy(b.src, b.dst, b.units, pairs, metadata);
}

result<void> copy_units_planned(const copy_shape& shape, device_workspace ws, stream_handle stream) {
  return launch_planned(shape, ws, stream);
}

result<void> check_transfer_pools(std::span<const pool_pair_view> layers) {
  if (errc e = validate_transfer(layers, {}); e != errc{}) return e;
  for (const pool_pair_view& l : layers)
    for (const pool_view* p : {&l.src, &l.dst}) {
      // First and last byte: a pool that runs past the end of a registered range is caught too.
      auto* first = static_cast<unsigned char*>(p->base);
      for (unsigned char* byte : {first, first + static_cast<std::size_t>(p->units) * p->unit_bytes - 1}) {
        cudaPointerAttributes a{};
        const cudaError_t status = cudaPointerGetAttributes(&a, byte);
        if (status == cudaErrorInvalidValue) {
          (void)cudaGetLastError(); // not sticky; a later launch must not report it
          return errc::invalid_argument;
        }
        REPRISE_CUDA_TRY(status);
        // Pageable memory reports cudaMemoryTypeUnregistered; pinned memory the device reaches only under
        // another address (registered without a host-pointer mapping) reports a different devicePointer.
        if (a.type == cudaMemoryTypeUnregistered || a.devicePointer != byte) return errc::invalid_argument;
      }
    }
  return {};
}

std::size_t gather_kv_workspace_bytes(std::int64_t batch, std::int64_t max_blocks) noexcept {
  return gather_layout(batch, max_blocks).l.bytes();
}

namespace {
/// The gather kernel over a block table and lengths already in the workspace (`layout`; batch > 0).
result<void> launch_gather(const kv_gather_args& a, std::int64_t batch, std::int64_t max_blocks,
                           const gather_layout& layout, device_workspace ws, stream_handle stream) {
  const kv_pool_layout& l = a.layout;
  const dim3 grid(static_cast<unsigned>(batch * l.kv_heads),
                  static_cast<unsigned>((a.out_tokens + device::gather_tokens_per_block - 1) /
                                        device::gather_tokens_per_block));
  const auto* pool = static_cast<const unsigned char*>(a.pool);
  auto* out = static_cast<unsigned char*>(a.out);
  const auto* table = device_runtime::at<std::int32_t>(ws.data, layout.table);
  const auto* lens = device_runtime::at<std::int32_t>(ws.data, layout.lens);
  const std::size_t row = l.row_bytes();
  const bool aligned16 = row % 16 == 0 && reinterpret_cast<std::uintptr_t>(a.pool) % 16 == 0 &&
                         reinterpret_cast<std::uintptr_t>(a.out) % 16 == 0;
  if (aligned16)
    device::gather_kv_kernel<uint4><<<grid, device::gather_threads, 0, stream>>>(
        pool, l.block_size, l.kv_heads, static_cast<std::int64_t>(row / 16), table, max_blocks, lens, out, a.out_tokens);
  else
    device::gather_kv_kernel<unsigned char><<<grid, device::gather_threads, 0, stream>>>(
        pool, l.block_size, l.kv_heads, static_cast<std::int64_t>(row), table, max_blocks, lens, out, a.out_tokens);
  return device_runtime::launch_status();
}

/// The gather plan's bytes (the block table, then the lengths) into `out`.
void write_gather_plan(const kv_gather_args& a, const gather_layout& layout, std::span<std::byte> out) {
  const std::int64_t batch = a.block_table.extent(0), max_blocks = a.block_table.extent(1);
  std::memset(out.data(), 0, layout.l.bytes()); // the alignment padding too: equal plans give equal bytes
  if (batch * max_blocks > 0)
    std::memcpy(out.data() + layout.table, a.block_table.data_handle(),
                static_cast<std::size_t>(batch * max_blocks) * sizeof(std::int32_t));
  if (!a.seq_lens.empty()) std::memcpy(out.data() + layout.lens, a.seq_lens.data(), a.seq_lens.size_bytes());
}
} // namespace

result<void> gather_kv(const kv_gather_args& a, device_workspace ws, stream_handle stream) {
  if (errc e = validate_kv_gather(a); e != errc{}) return e;
  const std::int64_t batch = a.block_table.extent(0), max_blocks = a.block_table.extent(1);
  if (batch == 0 || a.out_tokens == 0) return {};
  const gather_layout layout(batch, max_blocks);
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  std::vector<std::byte> bytes(layout.l.bytes());
  write_gather_plan(a, layout, bytes);
  REPRISE_CUDA_TRY(cudaMemcpyAsync(ws.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
  return launch_gather(a, batch, max_blocks, layout, ws, stream);
}

result<gather_kv_shape> gather_kv_plan(const kv_gather_args& a, std::span<std::byte> metadata) {
  if (errc e = validate_kv_gather(a); e != errc{}) return e;
  const std::int64_t batch = a.block_table.extent(0), max_blocks = a.block_table.extent(1);
  const gather_layout layout(batch, max_blocks);
  const gather_kv_shape shape{batch, max_blocks, layout.l.bytes()};
  if (metadata.empty()) return shape;
  if (metadata.size() < layout.l.bytes()) return errc::size_mismatch;
  write_gather_plan(a, layout, metadata);
  return shape;
}

result<void> gather_kv_planned(const kv_gather_args& a, const gather_kv_shape& shape, device_workspace ws,
                               stream_handle stream) {
  const kv_pool_layout& l = a.layout;
  if (a.pool == nullptr || a.out == nullptr || l.blocks <= 0 || l.block_size <= 0 || l.kv_heads <= 0 ||
      l.head_dim <= 0 || l.element_bytes == 0 || a.out_tokens < 0 || shape.batch < 0 || shape.max_blocks < 0)
    return errc::invalid_argument;
  const gather_layout layout(shape.batch, shape.max_blocks);
  if (layout.l.bytes() != shape.metadata_bytes) return errc::size_mismatch;
  if (shape.batch == 0 || a.out_tokens == 0) return {};
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  return launch_gather(a, shape.batch, shape.max_blocks, layout, ws, stream);
}

} // namespace reprise::ops
