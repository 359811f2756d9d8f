// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Batched unit copy (state slots, KV blocks; within a pool or between two, host tier included) and the KV
// gather: bandwidth-bound kernels built from 16-byte vector moves.
#include "common.cuh"

#include <reprise/ops/slots.hpp>

#include <cstdint>

REPRISE_DEVICE_NAMESPACE_BEGIN

/// One layer as the copy kernel sees it: units are read at `src_base` and written at `dst_base` (equal for a
/// copy within one pool, `copy_units`; two pools for `transfer_units`, either of them possibly mapped host
/// memory). `width` is the widest access (16, 4 or 1 bytes) that both bases and the unit size allow;
/// `first_chunk` is the layer's first chunk index within one pair's chunk range.
struct copy_pool_desc {
  std::uint64_t src_base;
  std::uint64_t dst_base;
  std::uint64_t unit_bytes;
  std::uint32_t width;
  std::uint32_t first_chunk;
};

inline constexpr int copy_threads = 256;
/// Bytes one block moves: 256 threads x 16 B x 16 iterations. Large enough that a 4 MiB state slot takes
/// 64 blocks (the grid covers the chip for a handful of pairs), small enough that small conv windows waste
/// little.
inline constexpr std::uint64_t copy_chunk_bytes = 64 * 1024;

template <class Word, int Unroll>
__device__ inline void copy_words(const Word* __restrict__ src, Word* __restrict__ dst, std::uint64_t n) {
  // Unroll independent loads before the stores so several requests are in flight per thread.
  for (std::uint64_t i = threadIdx.x; i < n; i += std::uint64_t{copy_threads} * Unroll) {
    Word v[Unroll];
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const std::uint64_t j = i + static_cast<std::uint64_t>(u) * copy_threads;
      if (j < n) v[u] = __ldcs(src + j);
    }
#pragma unroll
    for (int u = 0; u < Unroll; ++u) {
      const std::uint64_t j = i + static_cast<std::uint64_t>(u) * copy_threads;
      if (j < n) __stcs(dst + j, v[u]);
    }
  }
}

/// Grid: one block per (pair, chunk of one pool's unit); `chunks_per_pair` = sum over pools of their chunks.
/// Over mapped host memory every access crosses PCIe with microseconds of latency; the unrolled 16-byte loads
/// keep 16 KiB in flight per block, and the grid of many blocks is what hides it.
__global__ void __launch_bounds__(copy_threads)
copy_units_kernel(const copy_pool_desc* __restrict__ pools, int num_pools, const ops::copy_pair* __restrict__ pairs,
                  std::uint32_t chunks_per_pair) {
  const std::uint64_t block = blockIdx.x;
  const std::uint32_t pair_index = static_cast<std::uint32_t>(block / chunks_per_pair);
  const std::uint32_t k = static_cast<std::uint32_t>(block % chunks_per_pair);
  int p = 0;
  while (p + 1 < num_pools && pools[p + 1].first_chunk <= k) ++p;
  const copy_pool_desc pool = pools[p];
  const ops::copy_pair pair = pairs[pair_index];
  const std::uint64_t begin = std::uint64_t{k - pool.first_chunk} * copy_chunk_bytes;
  const std::uint64_t end = min(begin + copy_chunk_bytes, pool.unit_bytes);
  const auto* src = reinterpret_cast<const unsigned char*>(pool.src_base + pool.unit_bytes * std::uint64_t(pair.src)) + begin;
  auto* dst = reinterpret_cast<unsigned char*>(pool.dst_base + pool.unit_bytes * std::uint64_t(pair.dst)) + begin;
  const std::uint64_t n = end - begin;
  if (pool.width == 16)
    copy_words<uint4, 4>(reinterpret_cast<const uint4*>(src), reinterpret_cast<uint4*>(dst), n / 16);
  else if (pool.width == 4)
    copy_words<unsigned int, 8>(reinterpret_cast<const unsigned int*>(src), reinterpret_cast<unsigned int*>(dst), n / 4);
  else
    copy_words<unsigned char, 8>(src, dst, n);
}

inline constexpr int gather_threads = 128;
inline constexpr int gather_tokens_per_block = 16;

/// Grid: (batch x kv_heads, token tiles of 16). Each thread moves `Word`s of rows; 16-byte words when a row
/// is a multiple of 16 bytes (head_dim 64 / 128 in bf16: 8 / 16 words per row).
template <class Word>
__global__ void __launch_bounds__(gather_threads)
gather_kv_kernel(const unsigned char* __restrict__ pool, std::int64_t block_size, std::int64_t kv_heads,
                 std::int64_t row_words, const std::int32_t* __restrict__ block_table, std::int64_t max_blocks,
                 const std::int32_t* __restrict__ seq_lens, unsigned char* __restrict__ out,
                 std::int64_t out_tokens) {
  const std::int64_t b = blockIdx.x / kv_heads, h = blockIdx.x % kv_heads;
  const std::int64_t t0 = std::int64_t{blockIdx.y} * gather_tokens_per_block;
  const std::int64_t len = seq_lens[b];
  const auto* src_words = reinterpret_cast<const Word*>(pool);
  auto* out_words = reinterpret_cast<Word*>(out);
  for (std::int64_t i = threadIdx.x; i < gather_tokens_per_block * row_words; i += gather_threads) {
    const std::int64_t t = t0 + i / row_words, w = i % row_words;
    if (t >= out_tokens) break;
    Word v{};
    if (t < len) {
      const std::int64_t blk = block_table[b * max_blocks + t / block_size];
      const std::int64_t row = (blk * block_size + t % block_size) * kv_heads + h;
      v = src_words[row * row_words + w];
    }
    out_words[((b * kv_heads + h) * out_tokens + t) * row_words + w] = v;
  }
}

REPRISE_DEVICE_NAMESPACE_END
