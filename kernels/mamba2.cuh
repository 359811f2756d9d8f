// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Mamba2 kernels for Hopper: the SSD chunked prefill as four stream-ordered kernels (the stage split of
// mamba_ssm's Triton kernels and CUTLASS example 111) and the selective state update.
//
//   1. chunk_cumsum  grid (chunks, H / 8)    dt transform, a = A dt, in-chunk inclusive scan (CUB BlockScan)
//   2. chunk_state   grid (chunks, H)        local[c] = sum_s exp(seg(s, last)) dt_s x_s B_s^T  ([P, N])
//   3. state_passing grid (seqs, H, P*N/1024) S = exp(Acum_last) S + local[c], sequentially over a sequence's
//                                            chunks; stores S_prev[c] in place of local[c], captures, final
//   4. chunk_scan    grid (chunks, H, Q/64)  y = causal (C B^T o exp(seg)) x + exp(Acum) C S_prev + D x, gate
//
// The per-entry math (segment sums of A dt accumulated from s forward, weights, state passing, output) is
// `reprise/ops/mamba2_math.hpp`, the functions the host implementation calls; a segment sum seg(s, t) costs
// t - s additions from shared memory per weight, the price of never subtracting two large prefix sums.
//
// All arithmetic is fp32 FFMA on tiles staged in shared memory (fp32 accumulation; the bitwise resume
// guarantee rests on each chunk being a fixed-order function of its inputs, which tensor-core fragments with
// bf16 operands would also satisfy but at lower precision). Every global access is row-contiguous across a
// warp; tiles that are read along their other axis are stored transposed so that shared-memory reads are
// 16-byte vectors or broadcasts.
#include "common.cuh"

#include <reprise/ops/mamba2.hpp>
#include <reprise/ops/mamba2_math.hpp>

#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>

#include <cstdint>

REPRISE_DEVICE_NAMESPACE_BEGIN

/// A chunk of the batch on the absolute grid (built on the host).
struct ssd_chunk_desc {
  std::int64_t token_begin;  ///< first row in the packed tensors
  std::int32_t length;       ///< <= Q (short first chunk after an unaligned start, short last chunk)
  std::int32_t capture_slot; ///< slot that receives the state at the chunk's end, or -1
};

/// A sequence: its chunks are [first_chunk, first_chunk + chunks).
struct ssd_seq_desc {
  std::int32_t first_chunk;
  std::int32_t chunks;
  std::int32_t initial;
  std::int32_t final;
};

/// Device pointers of one prefill's workspace.
struct ssd_workspace {
  const ssd_chunk_desc* chunks;
  const ssd_seq_desc* seqs;
  float* dt;     ///< [chunks, H, Q] transformed dt
  float* acum;   ///< [chunks, H, Q] in-chunk inclusive cumsum of A dt (decays from the chunk start)
  float* states; ///< [chunks, H, P, N] local chunk states, then (after state passing) S_prev of each chunk
};

template <class T>
__device__ inline float ld(const T& v) {
  return ops::to_float(v);
}

/// Four consecutive elements (16 bytes of fp32, 8 of bf16) in one access; `p` is aligned (the launcher
/// checks the tensor bases, and P is a multiple of 4).
template <class T>
__device__ inline void load4(const T* p, float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    const float4 q = __ldg(reinterpret_cast<const float4*>(p));
    v[0] = q.x, v[1] = q.y, v[2] = q.z, v[3] = q.w;
  } else {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(p));
    v[0] = __uint_as_float(q.x << 16), v[1] = __uint_as_float(q.x & 0xffff0000u);
    v[2] = __uint_as_float(q.y << 16), v[3] = __uint_as_float(q.y & 0xffff0000u);
  }
}

template <class T>
__device__ inline void store4(T* p, const float (&v)[4]) {
  if constexpr (sizeof(T) == 4) {
    __stwb(reinterpret_cast<float4*>(p), make_float4(v[0], v[1], v[2], v[3]));
  } else {
    auto bits = [](float f) { return std::uint32_t{ops::from_float<T>(f).bits}; };
    __stwb(reinterpret_cast<uint2*>(p), make_uint2(bits(v[0]) | bits(v[1]) << 16, bits(v[2]) | bits(v[3]) << 16));
  }
}

// ---- 1. chunk cumsum --------------------------------------------------------------------------------------
inline constexpr int cumsum_heads = 8;

template <int Q, class T>
__global__ void __launch_bounds__(Q) ssd_chunk_cumsum_kernel(ops::mamba2_args<T> a, ssd_workspace ws) {
  using scan = cub::BlockScan<float, Q>;
  __shared__ typename scan::TempStorage temp;
  __shared__ float tile[Q][cumsum_heads + 1];
  const std::int64_t H = a.x.extent(1);
  const std::int64_t c = blockIdx.x, h0 = std::int64_t{blockIdx.y} * cumsum_heads;
  const ssd_chunk_desc chunk = ws.chunks[c];
  // Coalesced: consecutive threads read consecutive heads of one token's dt row.
  for (int i = threadIdx.x; i < Q * cumsum_heads; i += Q) {
    const int t = i / cumsum_heads, hh = i % cumsum_heads;
    const std::int64_t h = h0 + hh;
    float v = 0.0f;
    if (t < chunk.length && h < H)
      v = ops::transform_dt(ld(a.dt(chunk.token_begin + t, h)), ops::is_absent(a.dt_bias) ? 0.0f : a.dt_bias(h),
                            a.dt_mode);
    tile[t][hh] = v;
  }
  __syncthreads();
  for (int hh = 0; hh < cumsum_heads && h0 + hh < H; ++hh) {
    const std::int64_t h = h0 + hh;
    const float dtv = tile[threadIdx.x][hh];
    const float da = threadIdx.x < chunk.length ? a.A(h) * dtv : 0.0f;
    float acum;
    scan(temp).InclusiveSum(da, acum);
    __syncthreads(); // temp storage is reused by the next head
    const std::int64_t o = (c * H + h) * Q + threadIdx.x;
    ws.dt[o] = dtv;
    ws.acum[o] = acum;
  }
}

// ---- 2. chunk state ---------------------------------------------------------------------------------------
template <int P, int N>
struct chunk_state_tiling {
  static constexpr int threads = P * N / 4 < 256 ? P * N / 4 : 256;
  static constexpr int n_groups = N / 4;                     // float4 columns of the state
  static constexpr int rows = P * N / (4 * threads);         // state rows per thread
  static constexpr int tokens = 32;                          // tokens staged per step
  static_assert(N % 4 == 0 && threads % n_groups == 0 && rows * 4 * threads == P * N, "unsupported P / N");
};

template <int Q, int P, int N, class T>
__global__ void __launch_bounds__(chunk_state_tiling<P, N>::threads)
ssd_chunk_state_kernel(ops::mamba2_args<T> a, ssd_workspace ws) {
  using tiling = chunk_state_tiling<P, N>;
  constexpr int K = tiling::tokens;
  __shared__ float da[Q];
  __shared__ float weight[Q];
  __shared__ __align__(16) float xs[K][P];
  __shared__ __align__(16) float bs[K][N];
  const std::int64_t H = a.x.extent(1), G = a.B.extent(1);
  const std::int64_t c = blockIdx.x, h = blockIdx.y, g = h / (H / G);
  const ssd_chunk_desc chunk = ws.chunks[c];
  const float* dt = ws.dt + (c * H + h) * Q;
  const float A = a.A(h);
  for (int s = threadIdx.x; s < Q; s += tiling::threads) da[s] = A * dt[s];
  __syncthreads();
  const int last = chunk.length - 1;
  for (int s = threadIdx.x; s < Q; s += tiling::threads)
    weight[s] = s < chunk.length ? ops::ssd_state_weight(ops::ssd_segsum(da, s, last), dt[s]) : 0.0f;
  const int ng = threadIdx.x % tiling::n_groups, pg = threadIdx.x / tiling::n_groups;
  const int p0 = pg * tiling::rows;
  float acc[tiling::rows][4] = {};
  for (int s0 = 0; s0 < chunk.length; s0 += K) {
    __syncthreads(); // weight ready / previous tile consumed
    for (int i = threadIdx.x; i < K * P; i += tiling::threads) {
      const int s = i / P, p = i % P;
      xs[s][p] = s0 + s < chunk.length ? ld(a.x(chunk.token_begin + s0 + s, h, p)) * weight[s0 + s] : 0.0f;
    }
    for (int i = threadIdx.x; i < K * N; i += tiling::threads) {
      const int s = i / N, n = i % N;
      bs[s][n] = s0 + s < chunk.length ? ld(a.B(chunk.token_begin + s0 + s, g, n)) : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int s = 0; s < K; ++s) {
      const float4 b = *reinterpret_cast<const float4*>(&bs[s][ng * 4]);
#pragma unroll
      for (int r = 0; r < tiling::rows; ++r) {
        const float xv = xs[s][p0 + r];
        acc[r][0] += xv * b.x;
        acc[r][1] += xv * b.y;
        acc[r][2] += xv * b.z;
        acc[r][3] += xv * b.w;
      }
    }
  }
  float* out = ws.states + (c * H + h) * P * N;
#pragma unroll
  for (int r = 0; r < tiling::rows; ++r)
    __stwb(reinterpret_cast<float4*>(out + (p0 + r) * N + ng * 4), make_float4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]));
}

// ---- 3. state passing -------------------------------------------------------------------------------------
inline constexpr int passing_threads = 256;

template <int Q, int P, int N>
__global__ void __launch_bounds__(passing_threads) ssd_state_passing_kernel(ops::tensor<float, 4> pool, ssd_workspace ws) {
  const std::int64_t H = pool.extent(1);
  const std::int64_t e = std::int64_t{blockIdx.z} * passing_threads + threadIdx.x; // float4 index in [P, N]
  if (e >= P * N / 4) return;
  const ssd_seq_desc seq = ws.seqs[blockIdx.x];
  const std::int64_t h = blockIdx.y;
  auto slot_ptr = [&](std::int32_t slot) {
    return reinterpret_cast<float4*>(&pool(slot, h, 0, 0)) + e;
  };
  float4 s = seq.initial >= 0 ? *slot_ptr(seq.initial) : make_float4(0.f, 0.f, 0.f, 0.f);
  for (int k = 0; k < seq.chunks; ++k) {
    const std::int64_t c = seq.first_chunk + k;
    const ssd_chunk_desc chunk = ws.chunks[c];
    float4* local_ptr = reinterpret_cast<float4*>(ws.states + (c * H + h) * P * N) + e;
    const float4 local = *local_ptr;
    *local_ptr = s; // the chunk scan reads the state before chunk c here
    const float decay = expf(ws.acum[(c * H + h) * Q + chunk.length - 1]);
    s = make_float4(ops::ssd_pass_state(decay, s.x, local.x), ops::ssd_pass_state(decay, s.y, local.y),
                    ops::ssd_pass_state(decay, s.z, local.z), ops::ssd_pass_state(decay, s.w, local.w));
    if (chunk.capture_slot >= 0) *slot_ptr(chunk.capture_slot) = s;
  }
  if (seq.final >= 0) *slot_ptr(seq.final) = s;
}

// ---- 4. chunk scan ----------------------------------------------------------------------------------------
template <int Q, int P, int N>
struct chunk_scan_tiling {
  static constexpr int threads = 256;
  static constexpr int tq = 64;                 // output tokens per block
  static constexpr int ts = 64;                 // source tokens per step
  static constexpr int ns = N < 32 ? N : 32;   // state columns per staged slice
  static constexpr int p_groups = P / 4;        // float4 columns of y
  static constexpr int t_groups = threads / p_groups;
  static constexpr int rows = tq / t_groups;    // output rows per thread
  static constexpr int pad = 4;                 // keeps rows 16-byte aligned and spreads banks
  static_assert(P % 4 == 0 && threads % p_groups == 0 && rows >= 1 && rows * t_groups == tq, "unsupported P");
  static_assert(N % ns == 0 && Q % tq == 0, "unsupported N / Q");
  // Shared memory (floats): C^T [N][tq], slice [ns][max(P, ts)], G [tq][ts], x [ts][P], dt, A dt and Acum [Q].
  static constexpr int ct = N * (tq + pad);
  static constexpr int slice = ns * ((P > ts ? P : ts) + pad);
  static constexpr int gt = tq * (ts + pad);
  static constexpr int xs = ts * (P + pad);
  static constexpr std::size_t smem_bytes = sizeof(float) * (ct + slice + gt + xs + 3 * Q);
};

template <int Q, int P, int N, class T>
__global__ void __launch_bounds__(256) ssd_chunk_scan_kernel(ops::mamba2_args<T> a, ssd_workspace ws) {
  using tiling = chunk_scan_tiling<Q, P, N>;
  constexpr int TQ = tiling::tq, TS = tiling::ts, NS = tiling::ns, R = tiling::rows, PAD = tiling::pad;
  constexpr int SW = (P > TS ? P : TS) + PAD; // row stride of the staged slice
  extern __shared__ __align__(16) float smem[];
  float* ct = smem;                  // [N][TQ + PAD]   C of the output tokens, transposed
  float* slice = ct + tiling::ct;    // [NS][SW]        S_prev^T slice, or B^T slice
  float* gt = slice + tiling::slice; // [TQ][TS + PAD]  masked, decayed C B^T
  float* xs = gt + tiling::gt;       // [TS][P + PAD]   x of the source tokens
  float* dts = xs + tiling::xs;      // [Q]
  float* das = dts + Q;              // [Q]     A dt
  float* acs = das + Q;              // [Q]

  const std::int64_t H = a.x.extent(1), G = a.B.extent(1);
  const std::int64_t c = blockIdx.x, h = blockIdx.y, g = h / (H / G);
  const int t0 = blockIdx.z * TQ;
  const ssd_chunk_desc chunk = ws.chunks[c];
  if (t0 >= chunk.length) return;
  const std::int64_t row0 = chunk.token_begin;
  const int tid = threadIdx.x;
  const float A = a.A(h);
  for (int i = tid; i < Q; i += tiling::threads) {
    dts[i] = ws.dt[(c * H + h) * Q + i];
    das[i] = A * dts[i];
    acs[i] = ws.acum[(c * H + h) * Q + i];
  }
  for (int i = tid; i < TQ * N; i += tiling::threads) {
    const int t = i / N, n = i % N;
    ct[n * (TQ + PAD) + t] = t0 + t < chunk.length ? ld(a.C(row0 + t0 + t, g, n)) : 0.0f;
  }
  const int pg = tid % tiling::p_groups, tg = tid / tiling::p_groups;
  const int p0 = pg * 4, tr0 = tg * R; // this thread's outputs: rows tr0 .. tr0+R-1, columns p0 .. p0+3
  float acc[R][4] = {};

  // Inter-chunk term: exp(Acum_t) * C_t S_prev^T, S_prev staged in slices of NS state columns.
  const float* s_prev = ws.states + (c * H + h) * P * N;
  for (int n0 = 0; n0 < N; n0 += NS) {
    __syncthreads();
    for (int i = tid; i < P * NS; i += tiling::threads) {
      const int p = i / NS, n = i % NS;
      slice[n * SW + p] = s_prev[p * N + n0 + n];
    }
    __syncthreads();
#pragma unroll 4
    for (int n = 0; n < NS; ++n) {
      const float4 sv = *reinterpret_cast<const float4*>(&slice[n * SW + p0]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float cv = ct[(n0 + n) * (TQ + PAD) + tr0 + r];
        acc[r][0] += cv * sv.x;
        acc[r][1] += cv * sv.y;
        acc[r][2] += cv * sv.z;
        acc[r][3] += cv * sv.w;
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const float d = expf(acs[min(t0 + tr0 + r, Q - 1)]);
#pragma unroll
    for (int j = 0; j < 4; ++j) acc[r][j] *= d;
  }

  // Intra-chunk term over causal source tiles.
  const int ti = tid / 16, si = tid % 16; // C B^T micro-tile: rows ti*4.., columns si*4..
  const int s_end = min(t0 + TQ, chunk.length);
  for (int s0 = 0; s0 < s_end; s0 += TS) {
    float cb[4][4] = {};
    for (int n0 = 0; n0 < N; n0 += NS) {
      __syncthreads();
      for (int i = tid; i < TS * NS; i += tiling::threads) {
        const int s = i / NS, n = i % NS;
        slice[n * SW + s] = s0 + s < chunk.length ? ld(a.B(row0 + s0 + s, g, n0 + n)) : 0.0f;
      }
      __syncthreads();
#pragma unroll 4
      for (int n = 0; n < NS; ++n) {
        const float4 cv = *reinterpret_cast<const float4*>(&ct[(n0 + n) * (TQ + PAD) + ti * 4]);
        const float4 bv = *reinterpret_cast<const float4*>(&slice[n * SW + si * 4]);
        const float cr[4] = {cv.x, cv.y, cv.z, cv.w}, br[4] = {bv.x, bv.y, bv.z, bv.w};
#pragma unroll
        for (int i = 0; i < 4; ++i)
#pragma unroll
          for (int j = 0; j < 4; ++j) cb[i][j] += cr[i] * br[j];
      }
    }
    // Mask to s <= t, weight by exp(seg(s, t)) dt_s (16-byte stores along s); stage x of the tile. seg(s, t)
    // for the first row, then one addition per further row: the additions of ssd_segsum, in its order.
    const int tq = t0 + ti * 4;
    float seg[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) seg[j] = ops::ssd_segsum(das, s0 + si * 4 + j, tq);
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      float w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int t = tq + i, s = s0 + si * 4 + j;
        if (i > 0 && s < t) seg[j] += das[t];
        const bool live = s <= t && s < chunk.length && t < chunk.length;
        w[j] = live ? ops::ssd_intra_weight(cb[i][j], seg[j], dts[s]) : 0.0f;
      }
      *reinterpret_cast<float4*>(&gt[(ti * 4 + i) * (TS + PAD) + si * 4]) = make_float4(w[0], w[1], w[2], w[3]);
    }
    for (int i = tid; i < TS * P; i += tiling::threads) {
      const int s = i / P, p = i % P;
      xs[s * (P + PAD) + p] = s0 + s < chunk.length ? ld(a.x(row0 + s0 + s, h, p)) : 0.0f;
    }
    __syncthreads();
#pragma unroll 4
    for (int s = 0; s < TS; ++s) {
      const float4 xv = *reinterpret_cast<const float4*>(&xs[s * (P + PAD) + p0]);
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const float gv = gt[(tr0 + r) * (TS + PAD) + s];
        acc[r][0] += gv * xv.x;
        acc[r][1] += gv * xv.y;
        acc[r][2] += gv * xv.z;
        acc[r][3] += gv * xv.w;
      }
    }
  }

  // D skip, gate, store.
  const float Dh = ops::is_absent(a.D) ? 0.0f : a.D(h);
  const bool has_z = !ops::is_absent(a.z);
#pragma unroll
  for (int r = 0; r < R; ++r) {
    const int t = t0 + tr0 + r;
    if (t >= chunk.length) break;
    const std::int64_t row = row0 + t;
    float xv[4], zv[4] = {}, out[4];
    load4(&a.x(row, h, p0), xv);
    if (has_z) load4(&a.z(row, h, p0), zv);
#pragma unroll
    for (int j = 0; j < 4; ++j) out[j] = ops::mamba2_output(acc[r][j], Dh, xv[j], has_z, zv[j]);
    store4(&a.y(row, h, p0), out);
  }
}

// ---- selective state update (decode) ----------------------------------------------------------------------
template <int P, int N>
struct state_update_tiling {
  static constexpr int threads = 128;
  static constexpr int lanes_per_row = N / 4;           // each lane owns a float4 of a state row
  static constexpr int rows_per_pass = threads / lanes_per_row;
  static_assert(N % 4 == 0 && lanes_per_row <= 32 && 32 % lanes_per_row == 0, "unsupported N");
};

/// A lane's four consecutive elements of a state row, widened to fp32 (exactly), and stored back rounded once
/// (to nearest, ties to even: `ops::from_float`, the host's rounding) when the pool holds bf16 / fp16. An fp32
/// pool moves 16 bytes per access, a 2-byte pool 8. Plain accesses, not `__ldg`: src and dst may be one slot.
template <class S>
__device__ inline float4 load_state4(const S* p) {
  if constexpr (sizeof(S) == 4) {
    return *reinterpret_cast<const float4*>(p);
  } else {
    const uint2 q = *reinterpret_cast<const uint2*>(p); // element 0 in the low half (little-endian)
    auto wide = [](std::uint32_t bits) { return ops::to_float(S{static_cast<std::uint16_t>(bits)}); };
    return make_float4(wide(q.x & 0xffffu), wide(q.x >> 16), wide(q.y & 0xffffu), wide(q.y >> 16));
  }
}

template <class S>
__device__ inline void store_state4(S* p, float4 v) {
  if constexpr (sizeof(S) == 4) {
    *reinterpret_cast<float4*>(p) = v;
  } else {
    auto bits = [](float f) { return std::uint32_t{ops::from_float<S>(f).bits}; };
    *reinterpret_cast<uint2*>(p) = make_uint2(bits(v.x) | bits(v.y) << 16, bits(v.z) | bits(v.w) << 16);
  }
}

/// Grid (rows, H). One state row [N] per logical warp of N/4 lanes: 16-byte loads and stores of an fp32 state
/// (8-byte of a bf16 / fp16 one, `S`), y reduced with cub::WarpReduce over the logical warp. The update and y
/// run in fp32 whatever `S`; only the stored state is rounded.
template <int P, int N, class T, class S>
__global__ void __launch_bounds__(128)
state_update_kernel(ops::mamba2_args<T, S> a, const ops::copy_pair* __restrict__ pairs) {
  using tiling = state_update_tiling<P, N>;
  constexpr int LR = tiling::lanes_per_row;
  using reduce = cub::WarpReduce<float, LR>;
  __shared__ typename reduce::TempStorage temp[tiling::rows_per_pass];
  const std::int64_t r = blockIdx.x, h = blockIdx.y;
  const ops::copy_pair pr = pairs[r];
  if (pr.src < 0 || pr.dst < 0) return;
  const std::int64_t H = a.x.extent(1), g = h / (H / a.B.extent(1));
  const int lane = threadIdx.x % LR, sub = threadIdx.x / LR;
  const float dt = ops::transform_dt(ld(a.dt(r, h)), ops::is_absent(a.dt_bias) ? 0.0f : a.dt_bias(h), a.dt_mode);
  const float decay = expf(dt * a.A(h));
  const float Dh = ops::is_absent(a.D) ? 0.0f : a.D(h);
  const bool has_z = !ops::is_absent(a.z);
  float b[4], cc[4];
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    b[j] = ld(a.B(r, g, lane * 4 + j));
    cc[j] = ld(a.C(r, g, lane * 4 + j));
  }
  // Issue the loads of several rows before the first use, so that each warp keeps 16-byte requests in flight.
  constexpr int in_flight = P / tiling::rows_per_pass >= 4 ? 4 : 1;
  for (int base = sub; base < P; base += tiling::rows_per_pass * in_flight) {
    float4 s[in_flight];
    float x[in_flight];
#pragma unroll
    for (int k = 0; k < in_flight; ++k) {
      const int p = base + k * tiling::rows_per_pass;
      if (p < P) {
        s[k] = load_state4(&a.state_pool(pr.src, h, p, lane * 4));
        x[k] = ld(a.x(r, h, p));
      }
    }
#pragma unroll
    for (int k = 0; k < in_flight; ++k) {
      const int p = base + k * tiling::rows_per_pass; // uniform across the logical warp
      if (p >= P) break;
      const float dt_x = dt * x[k];
      const float4 n = make_float4(ops::ssm_step(s[k].x, decay, dt_x, b[0]), ops::ssm_step(s[k].y, decay, dt_x, b[1]),
                                   ops::ssm_step(s[k].z, decay, dt_x, b[2]), ops::ssm_step(s[k].w, decay, dt_x, b[3]));
      store_state4(&a.state_pool(pr.dst, h, p, lane * 4), n);
      const float part = n.x * cc[0] + n.y * cc[1] + n.z * cc[2] + n.w * cc[3];
      const float y = reduce(temp[sub]).Sum(part);
      if (lane == 0) {
        const float zv = has_z ? ld(a.z(r, h, p)) : 0.0f;
        a.y(r, h, p) = ops::from_float<T>(ops::mamba2_output(y, Dh, x[k], has_z, zv));
      }
    }
  }
}

// ---- instances ----------------------------------------------------------------------------------------------
/// A decode update's entry point for activations `T` over a state pool of `S`.
template <class T, class S>
using mamba2_update_fn = result<void> (*)(const ops::mamba2_args<T, S>&, const ops::copy_pair*, int rows,
                                          ops::stream_handle);

/// Entry points of one compiled configuration; the dispatch table in mamba2.cu lists them. The decode update
/// comes for an fp32 pool (prefill-exact states) and for bf16 / fp16 pools (decode-continuation states).
template <class T>
struct mamba2_instance {
  ops::mamba2_kernel_config config;
  result<void> (*ssd_prefill)(const ops::mamba2_args<T>&, ssd_workspace, int chunks, int seqs, ops::stream_handle);
  mamba2_update_fn<T, float> state_update;
  mamba2_update_fn<T, ops::bfloat16> state_update_bf16;
  mamba2_update_fn<T, ops::float16> state_update_f16;

  /// The decode update over a pool of `S`.
  template <class S>
  mamba2_update_fn<T, S> update_for() const noexcept {
    return device_runtime::for_pool<S>(state_update, state_update_bf16, state_update_f16);
  }
};

template <int Q, int P, int N, class T>
result<void> launch_ssd_prefill(const ops::mamba2_args<T>& a, ssd_workspace ws, int chunks, int seqs,
                                ops::stream_handle stream) {
  const unsigned H = static_cast<unsigned>(a.x.extent(1));
  if (chunks == 0) return {};
  ssd_chunk_cumsum_kernel<Q, T><<<dim3(chunks, (H + cumsum_heads - 1) / cumsum_heads), Q, 0, stream>>>(a, ws);
  if (auto r = device_runtime::launch_status(); !r) return r;
  ssd_chunk_state_kernel<Q, P, N, T><<<dim3(chunks, H), chunk_state_tiling<P, N>::threads, 0, stream>>>(a, ws);
  if (auto r = device_runtime::launch_status(); !r) return r;
  ssd_state_passing_kernel<Q, P, N>
      <<<dim3(seqs, H, (P * N / 4 + passing_threads - 1) / passing_threads), passing_threads, 0, stream>>>(a.state_pool, ws);
  if (auto r = device_runtime::launch_status(); !r) return r;
  using tiling = chunk_scan_tiling<Q, P, N>;
  auto* kernel = &ssd_chunk_scan_kernel<Q, P, N, T>;
  REPRISE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                        static_cast<int>(tiling::smem_bytes)));
  kernel<<<dim3(chunks, H, Q / tiling::tq), tiling::threads, tiling::smem_bytes, stream>>>(a, ws);
  return device_runtime::launch_status();
}

template <int P, int N, class T, class S>
result<void> launch_state_update(const ops::mamba2_args<T, S>& a, const ops::copy_pair* pairs, int rows,
                                 ops::stream_handle stream) {
  if (rows == 0) return {};
  state_update_kernel<P, N, T, S><<<dim3(rows, static_cast<unsigned>(a.x.extent(1))), 128, 0, stream>>>(a, pairs);
  return device_runtime::launch_status();
}

/// The instance of (Q, P, N, T): prefill for chunk Q and the decode updates for (P, N), one per pool type.
template <int Q, int P, int N, class T>
inline constexpr mamba2_instance<T> mamba2_instance_of{
    {P, N, Q, ops::dtype_of<T>}, &launch_ssd_prefill<Q, P, N, T>, &launch_state_update<P, N, T, float>,
    &launch_state_update<P, N, T, ops::bfloat16>, &launch_state_update<P, N, T, ops::float16>};

REPRISE_DEVICE_NAMESPACE_END

/// Declares (in mamba2.cu) or defines (in an instantiation file) the fp32 and bf16 instances of one shape;
/// `REPRISE_MAMBA2_INSTANCE_ROW` is its row of the dispatch table.
#define REPRISE_MAMBA2_INSTANCE_NAME(Q, P, N, T) mamba2_q##Q##_p##P##_n##N##_##T
#define REPRISE_DECLARE_MAMBA2_INSTANCES(Q, P, N)                                                               \
  REPRISE_DECLARE_INSTANCE(mamba2_instance, REPRISE_MAMBA2_INSTANCE_NAME(Q, P, N, f32), f32)                   \
  REPRISE_DECLARE_INSTANCE(mamba2_instance, REPRISE_MAMBA2_INSTANCE_NAME(Q, P, N, bf16), bf16)
#define REPRISE_DEFINE_MAMBA2_INSTANCES(Q, P, N)                                                                \
  REPRISE_DEFINE_INSTANCE(mamba2_instance, REPRISE_MAMBA2_INSTANCE_NAME(Q, P, N, f32), f32,                    \
                          mamba2_instance_of<Q, P, N, float>)                                                  \
  REPRISE_DEFINE_INSTANCE(mamba2_instance, REPRISE_MAMBA2_INSTANCE_NAME(Q, P, N, bf16), bf16,                  \
                          mamba2_instance_of<Q, P, N, ::reprise::ops::bfloat16>)
#define REPRISE_MAMBA2_INSTANCE_ROW(Q, P, N) REPRISE_INSTANCE_ROW(REPRISE_MAMBA2_INSTANCE_NAME, Q, P, N)
