// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Causal conv1d kernels. Channels run across threads (a warp reads 32 consecutive channels of one token:
// coalesced rows of the token-major [tokens, C] layout); tokens run along a tile inside each thread, which
// keeps the W-tap window in registers and reads every input once.
#include "common.cuh"

#include <reprise/ops/conv1d.hpp>

#include <cuda/std/bit>

#include <cstdint>

REPRISE_DEVICE_NAMESPACE_BEGIN

/// A sequence as the varlen kernels see it (built and validated on the host).
struct seq_desc {
  std::int64_t token_begin; ///< first row in the packed tensors
  std::int64_t length;
  std::int64_t start;       ///< absolute position of the first token
  std::int32_t initial;     ///< slot read at the start (negative: zero state)
  std::int32_t final;       ///< slot written at the end (negative: none)
};

/// A conv window to store: the W-1 inputs before `position` of `sequence` into `slot`.
struct conv_write {
  std::int64_t position;
  std::int32_t sequence;
  std::int32_t slot;
};

/// A tile of consecutive tokens of one sequence.
struct token_tile {
  std::int32_t sequence;
  std::int32_t offset; ///< first token of the tile, relative to the sequence
  std::int32_t count;
};

inline constexpr int conv_threads = 128;
inline constexpr int conv_tile_tokens = 64;

/// V consecutive elements as floats: one 16-byte load when V > 1 (8 bf16 or 4 fp32 channels).
template <int V, class T>
__device__ inline void load_channels(const T* p, float (&v)[V]) {
  if constexpr (V == 1) {
    v[0] = ops::to_float(*p);
  } else {
    static_assert(V * sizeof(T) == 16, "a vector is 16 bytes");
    struct pack {
      T e[V];
    };
    const pack k = cuda::std::bit_cast<pack>(*reinterpret_cast<const uint4*>(p));
#pragma unroll
    for (int j = 0; j < V; ++j) v[j] = ops::to_float(k.e[j]);
  }
}

template <int V, class T>
__device__ inline void store_channels(T* p, const float (&v)[V]) {
  if constexpr (V == 1) {
    *p = ops::from_float<T>(v[0]);
  } else {
    // Assemble the four 32-bit words in registers so that the store is one 16-byte STG.
    std::uint32_t word[4];
#pragma unroll
    for (int w = 0; w < 4; ++w) {
      if constexpr (sizeof(T) == 4) {
        word[w] = __float_as_uint(v[w]);
      } else {
        word[w] = std::uint32_t{ops::from_float<T>(v[2 * w]).bits} |
                  (std::uint32_t{ops::from_float<T>(v[2 * w + 1]).bits} << 16);
      }
    }
    __stwb(reinterpret_cast<uint4*>(p), make_uint4(word[0], word[1], word[2], word[3]));
  }
}

/// Grid (token tiles, channel blocks). Each thread owns V adjacent channels (16-byte accesses when the launcher
/// could pick V > 1) and slides their W-tap windows down a tile of up to 64 tokens: every input is read once
/// per tile plus W-1 halo rows, and each warp's row access is 512 contiguous bytes.
template <int W, int V, class T>
__global__ void __launch_bounds__(conv_threads)
conv1d_prefill_kernel(ops::conv1d_args<T> a, const seq_desc* __restrict__ seqs, const token_tile* __restrict__ tiles) {
  const std::int64_t C = a.x.extent(1);
  const std::int64_t c0 = (std::int64_t{blockIdx.y} * conv_threads + threadIdx.x) * V;
  if (c0 >= C) return;
  const token_tile tile = tiles[blockIdx.x];
  const seq_desc s = seqs[tile.sequence];
  float w[V][W], bias[V];
#pragma unroll
  for (int j = 0; j < V; ++j) {
#pragma unroll
    for (int k = 0; k < W; ++k) w[j][k] = a.weight(c0 + j, k);
    bias[j] = ops::is_absent(a.bias) ? 0.0f : a.bias(c0 + j);
  }
  // Windows before the tile's first token: inputs of this call where they exist, the initial slot before.
  float window[V][W];
#pragma unroll
  for (int k = 0; k < W - 1; ++k) {
    const std::int64_t i = std::int64_t{tile.offset} - (W - 1) + k; // relative to the sequence start
    float v[V];
    if (i >= 0) {
      load_channels<V>(&a.x(s.token_begin + i, c0), v);
    } else if (s.initial >= 0) {
      load_channels<V>(&a.conv_pool(s.initial, i + W - 1, c0), v);
    } else {
#pragma unroll
      for (int j = 0; j < V; ++j) v[j] = 0.0f;
    }
#pragma unroll
    for (int j = 0; j < V; ++j) window[j][k] = v[j];
  }
  for (int t = 0; t < tile.count; ++t) {
    const std::int64_t row = s.token_begin + tile.offset + t;
    float v[V], out[V];
    load_channels<V>(&a.x(row, c0), v);
#pragma unroll
    for (int j = 0; j < V; ++j) {
      window[j][W - 1] = v[j];
      out[j] = ops::conv1d_channel<W>(window[j], w[j], bias[j], a.silu);
#pragma unroll
      for (int k = 0; k < W - 1; ++k) window[j][k] = window[j][k + 1];
    }
    store_channels<V>(&a.out(row, c0), out);
  }
}

/// Stores conv windows (captures and final states). Runs after the prefill kernel on the same stream: a
/// final slot may be the sequence's own initial slot, and each thread reads its channel's W-1 values before
/// writing them.
template <int W, class T>
__global__ void __launch_bounds__(conv_threads)
conv1d_store_kernel(ops::conv1d_args<T> a, const seq_desc* __restrict__ seqs, const conv_write* __restrict__ writes) {
  const std::int64_t C = a.x.extent(1);
  const std::int64_t c = std::int64_t{blockIdx.y} * conv_threads + threadIdx.x;
  if (c >= C) return;
  const conv_write wr = writes[blockIdx.x];
  const seq_desc s = seqs[wr.sequence];
  T v[W - 1];
#pragma unroll
  for (int j = 0; j < W - 1; ++j) {
    const std::int64_t i = wr.position - s.start - (W - 1) + j;
    if (i >= 0) v[j] = a.x(s.token_begin + i, c);
    else v[j] = s.initial < 0 ? ops::from_float<T>(0.0f) : a.conv_pool(s.initial, i + W - 1, c);
  }
#pragma unroll
  for (int j = 0; j < W - 1; ++j) a.conv_pool(wr.slot, j, c) = v[j];
}

template <int W, class T>
__global__ void __launch_bounds__(conv_threads)
conv1d_update_kernel(ops::conv1d_args<T> a, const ops::copy_pair* __restrict__ pairs) {
  const std::int64_t C = a.x.extent(1);
  const std::int64_t c = std::int64_t{blockIdx.y} * conv_threads + threadIdx.x;
  const std::int64_t r = blockIdx.x;
  const ops::copy_pair p = pairs[r];
  if (c >= C || p.src < 0 || p.dst < 0) return;
  float w[W], window[W];
#pragma unroll
  for (int k = 0; k < W; ++k) w[k] = a.weight(c, k);
#pragma unroll
  for (int k = 0; k < W - 1; ++k) window[k] = ops::to_float(a.conv_pool(p.src, k, c));
  window[W - 1] = ops::to_float(a.x(r, c));
  const float bias = ops::is_absent(a.bias) ? 0.0f : a.bias(c);
  a.out(r, c) = ops::from_float<T>(ops::conv1d_channel<W>(window, w, bias, a.silu));
#pragma unroll
  for (int k = 0; k < W - 1; ++k) a.conv_pool(p.dst, k, c) = ops::from_float<T>(window[k + 1]);
}

REPRISE_DEVICE_NAMESPACE_END
