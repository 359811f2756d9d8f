// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Gated delta rule kernels: chunked prefill (WY form) with fp32 captures, and the recurrent step (decode and
// short verification) with a rollback ring. The per-entry math is `reprise/ops/gated_delta_math.hpp`, the
// same functions the host implementation calls; this file only decides which thread computes which entry
// and where the tiles live.
//
// Prefill: one CTA per (V tile, value head, sequence), 256 threads, sequential over the chunks of its
// sequence. The CTA keeps its [K, BV] state tile in shared memory for the whole sequence (loaded once,
// stored at captures and at the end) and stages the chunk's k, q (normalized, fp32) and v tile beside it.
// The V tiles of one head recompute the same WY factors (A, T, W): the columns of S evolve independently
// given those factors, so splitting V is exact and buys V / BV times more CTAs for short batches.
// Shared-memory strides are padded (K + 1, Q + 1) so that a warp walking rows or columns hits 32 banks.
//
// Recurrent step: one CTA per (V tile, value head, sequence); lane = column, warp = slice of K rows, the
// state slice in registers across the tokens of the sequence; slice partial sums meet in shared memory and
// are added in slice order.
#include "common.cuh"

#include <reprise/ops/gated_delta.hpp>

#include <cub/warp/warp_reduce.cuh>
#include <cuda_runtime.h>

#include <cstdint>

REPRISE_DEVICE_NAMESPACE_BEGIN

namespace gdn = ::reprise::ops::gdn;
using ::reprise::ops::from_float;
using ::reprise::ops::to_float;

/// A sequence as the gated-delta kernels see it (built from the validated host metadata).
struct gd_seq {
  std::int64_t row0;   ///< first row in the packed tensors
  std::int64_t length; ///< tokens
  std::int64_t start;  ///< absolute position of the first token
  std::int32_t first;  ///< prefill: initial slot (< 0: zero state); step: source slot (< 0: padding)
  std::int32_t last;   ///< prefill: final slot (< 0: none); step: destination slot (< 0: padding)
};

/// A capture as the prefill kernel reads it: sorted by (sequence, position), indexed per sequence.
struct gd_capture {
  std::int64_t position;
  std::int32_t slot;
  std::int32_t seq;
};

/// Activations, the state pool and the options that both gated-delta kernels read (device pointers).
template <class In, class State>
struct gd_operands {
  const In* q;
  const In* k;
  const In* v;
  const float* g;
  const float* beta;
  In* o;
  State* states;
  std::int32_t num_slots;
  std::int32_t key_heads;
  std::int32_t value_heads;
  float scale;
  float l2norm_eps;
  bool l2norm;
};

/// Operands of the prefill kernel (metadata validated and uploaded by the launcher).
template <class In, class State>
struct gd_prefill_params : gd_operands<In, State> {
  const gd_seq* seqs;                 // [S]
  const gd_capture* captures;         // sorted by (seq, position)
  const std::int32_t* capture_begin;  // [S + 1]: sequence s owns [capture_begin[s], capture_begin[s + 1])
};

/// Shared-memory plan of the prefill kernel, in floats.
template <int Q, int K, int BV>
struct gd_prefill_smem {
  static constexpr int ldk = K + 1; // rows of k, q, W: a warp walking a column of rows hits distinct banks
  static constexpr int ldt = Q + 1; // -A, T and the causal scores
  static constexpr int state = 0;
  static constexpr int k = state + K * BV;
  static constexpr int q = k + Q * ldk;
  static constexpr int w = q + Q * ldk; // W; the X blocks of the solve before that
  static constexpr int t = w + Q * ldk;
  static constexpr int v = t + Q * ldt;
  static constexpr int u = v + Q * BV; // U, then V_new in place
  static constexpr int g = u + Q * BV;
  static constexpr int beta = g + Q;
  static constexpr int gcum = beta + Q;
  static constexpr int coef = gcum + Q;
  static constexpr int kdecay = coef + Q;
  static constexpr int floats = kdecay + Q;
  static constexpr std::size_t bytes = std::size_t{floats} * sizeof(float);
  static_assert(gdn::wy_block * Q <= Q * ldk, "the solve's X blocks live in the W buffer");
};

inline constexpr int gd_prefill_threads = 256;

template <int Q, int K, int V, int BV, class In, class State>
__global__ void __launch_bounds__(gd_prefill_threads, 1) gd_chunked_prefill_kernel(gd_prefill_params<In, State> p) {
  static_assert(V % BV == 0 && Q % gdn::wy_block == 0);
  using L = gd_prefill_smem<Q, K, BV>;
  constexpr int ldk = L::ldk, ldt = L::ldt, B = gdn::wy_block, NT = gd_prefill_threads;
  // Entries per thread of the blocked products: QR of a Q x Q score matrix, VR of a Q x BV tile, SR of the
  // K x BV state tile; the thread grid must tile each matrix exactly.
  static_assert(NT % Q == 0 && Q % (NT / Q) == 0 && NT % BV == 0 && Q % (NT / BV) == 0 && K % (NT / BV) == 0);
  constexpr int QR = Q / (NT / Q), VR = Q / (NT / BV), SR = K / (NT / BV);
  extern __shared__ float smem[];
  float* s_state = smem + L::state;
  float* s_k = smem + L::k;
  float* s_q = smem + L::q;
  float* s_w = smem + L::w;
  float* s_t = smem + L::t;
  float* s_v = smem + L::v;
  float* s_u = smem + L::u;
  float* s_g = smem + L::g;
  float* s_beta = smem + L::beta;
  float* s_gcum = smem + L::gcum;
  float* s_coef = smem + L::coef;
  float* s_kdecay = smem + L::kdecay;

  const int tid = threadIdx.x;
  const int seq = blockIdx.x;
  const int hv = blockIdx.y;
  const int c0 = blockIdx.z * BV;
  const int H = p.key_heads, HV = p.value_heads;
  const int h = hv / (HV / H);
  const gd_seq sq = p.seqs[seq];
  const std::int64_t row0 = sq.row0, start = sq.start, end = sq.start + sq.length;
  constexpr std::int64_t slot_stride = std::int64_t{K} * V; // per value head; slots are [HV, K, V]
  const std::int64_t head_off = std::int64_t{hv} * K * V + c0;

  const bool has_init = sq.first >= 0 && sq.first < p.num_slots;
  const State* init = p.states + (has_init ? sq.first : 0) * (slot_stride * HV) + head_off;
  for (int e = tid; e < K * BV; e += NT) {
    const int d = e / BV, c = e % BV;
    s_state[e] = has_init ? to_float(init[std::int64_t{d} * V + c]) : 0.0f;
  }
  auto store_state = [&](std::int32_t slot) {
    if (slot < 0 || slot >= p.num_slots) return; // validated on the host; never write out of bounds
    State* dst = p.states + slot * (slot_stride * HV) + head_off;
    for (int e = tid; e < K * BV; e += NT) {
      const int d = e / BV, c = e % BV;
      dst[std::int64_t{d} * V + c] = from_float<State>(s_state[e]);
    }
  };

  std::int32_t cap = p.capture_begin[seq];
  const std::int32_t cap_end = p.capture_begin[seq + 1];
  for (std::int64_t pos = start; pos < end;) {
    const std::int64_t next = ops::chunk_end(pos, end, Q);
    const int n = static_cast<int>(next - pos);
    const std::int64_t r0 = row0 + (pos - start);
    __syncthreads(); // the previous chunk is done with every buffer

    // Stage the chunk: rows of k and q (one warp reads one contiguous row segment), the v tile, g, beta.
    for (int e = tid; e < n * K; e += NT) {
      const int i = e / K, d = e % K;
      const std::int64_t src = ((r0 + i) * H + h) * K + d;
      s_k[i * ldk + d] = to_float(p.k[src]);
      s_q[i * ldk + d] = to_float(p.q[src]);
    }
    for (int e = tid; e < n * BV; e += NT) {
      const int i = e / BV, c = e % BV;
      s_v[i * BV + c] = to_float(p.v[((r0 + i) * HV + hv) * V + c0 + c]);
    }
    if (tid < n) {
      s_g[tid] = p.g[(r0 + tid) * HV + hv];
      s_beta[tid] = p.beta[(r0 + tid) * HV + hv];
    }
    __syncthreads();
    if (p.l2norm && tid < 2 * n) { // one thread per row: lanes are on distinct rows, so distinct banks
      float* row = tid < n ? s_k + tid * ldk : s_q + (tid - n) * ldk;
      const float r = gdn::l2_inv_norm(row, K, p.l2norm_eps);
      for (int d = 0; d < K; ++d) row[d] *= r;
    }
    if (tid == 0) gdn::chunk_gate_cumsum(s_g, 1, n, s_gcum);
    __syncthreads();
    const float glast = s_gcum[n - 1];
    if (tid < n) {
      s_coef[tid] = s_beta[tid] * ::expf(s_gcum[tid]);
      s_kdecay[tid] = gdn::pair_decay(glast, s_gcum[tid]);
    }
    // -A (strict lower, zero elsewhere so the padded rows of a short chunk solve to identity rows). Lane = row
    // i (distinct banks thanks to the K + 1 stride), the R columns j of a thread are uniform across its warp
    // (broadcast loads).
    gdn::wy_neg_a<QR>(s_t, ldt, s_k, ldk, K, s_gcum, s_beta, tid % Q, tid / Q, NT / Q, n);
    __syncthreads();

    // T = (I + A)^-1, blocked: the diagonal blocks row by row (all blocks at once) ...
    for (int il = 2; il < B; ++il) {
      const int blk = tid / B, cl = tid % B;
      const int i = blk * B + il, c = blk * B + cl;
      const bool active = blk < Q / B && i < n && cl < il - 1;
      const float val = active ? gdn::wy_solve(s_t, ldt, i, c, i) : 0.0f;
      __syncthreads();
      if (active) s_t[i * ldt + c] = val;
      __syncthreads();
    }
    // ... then each block row below the first from the block rows above it.
    for (int b = B; b < n; b += B) {
      const int rows = (n < b + B ? n : b + B) - b;
      for (int e = tid; e < rows * b; e += NT) {
        const int xi = e / b, c = e % b;
        s_w[xi * Q + c] = gdn::wy_solve(s_t, ldt, b + xi, c, b);
      }
      __syncthreads();
      for (int e = tid; e < rows * b; e += NT) {
        const int xi = e / b, c = e % b;
        s_t[(b + xi) * ldt + c] = gdn::wy_block_apply(s_t, ldt, s_w, Q, b + xi, c, b);
      }
      __syncthreads();
    }

    // W = T diag(beta e^G) K and U = T diag(beta) V.
    for (int e = tid; e < n * K; e += NT) {
      const int i = e / K, d = e % K;
      s_w[i * ldk + d] = gdn::wy_apply(s_t, ldt, s_coef, s_k, ldk, i, d);
    }
    for (int e = tid; e < n * BV; e += NT) {
      const int i = e / BV, c = e % BV;
      s_u[i * BV + c] = gdn::wy_apply(s_t, ldt, s_beta, s_v, BV, i, c);
    }
    __syncthreads();
    // V_new = U - W S_0 in place (lane = column c, the thread's R rows share its column of S_0); causal scores
    // over T, now free.
    gdn::wy_new_values<VR>(s_u, BV, s_w, ldk, s_state, BV, tid % BV, K, tid / BV, NT / BV, n);
    gdn::causal_scores<QR>(s_t, ldt, s_q, s_k, ldk, K, s_gcum, tid % Q, tid / Q, NT / Q, n);
    __syncthreads();
    {
      float out[VR];
      const int c = tid % BV, i0 = tid / BV;
      gdn::chunk_outputs<VR>(out, s_q, ldk, s_state, BV, c, K, s_gcum, s_t, ldt, s_u, BV, i0, NT / BV);
#pragma unroll
      for (int r = 0; r < VR; ++r) {
        const int i = i0 + r * (NT / BV);
        if (i < n) p.o[((r0 + i) * HV + hv) * V + c0 + c] = from_float<In>(p.scale * out[r]);
      }
    }
    __syncthreads(); // outputs read S_0
    gdn::chunk_states<SR>(s_state, BV, tid % BV, tid / BV, NT / BV, ::expf(glast), s_k, ldk, s_kdecay, s_u, BV, n);
    pos = next;
    if (cap < cap_end && p.captures[cap].position == pos) {
      __syncthreads();
      store_state(p.captures[cap].slot);
      ++cap;
    }
  }
  __syncthreads();
  store_state(sq.last);
}

/// Operands of the recurrent step kernel.
template <class In, class State>
struct gd_step_params : gd_operands<In, State> {
  const gd_seq* seqs;             // [S]; first = src, last = dst, either < 0: padding
  const std::int32_t* ring_slots; // [S, ring_size] or null
  std::int32_t ring_size;
};

/// Threads of the recurrent step: BV lanes (columns) x `slices` warps (row slices of K).
template <int K, int BV>
struct gd_step_config {
  static constexpr int slices = K >= 128 ? 8 : (K >= 32 ? 4 : 1);
  static constexpr int rows = K / slices;
  static constexpr int threads = BV * slices;
  static_assert(K % slices == 0);
  static_assert(threads >= 64, "two warps reduce the q and k norms");
};

template <int K, int V, int BV, class In, class State>
__global__ void __launch_bounds__(gd_step_config<K, BV>::threads) gd_recurrent_step_kernel(gd_step_params<In, State> p) {
  using C = gd_step_config<K, BV>;
  constexpr int R = C::rows, NS = C::slices, NT = C::threads;
  using warp_reduce = cub::WarpReduce<float>;
  __shared__ float s_k[K], s_q[K], s_part[NS][BV], s_norm[2];
  __shared__ typename warp_reduce::TempStorage s_reduce[2];

  const int tid = threadIdx.x;
  const int c = tid % BV, slice = tid / BV;
  const int seq = blockIdx.x;
  const int hv = blockIdx.y;
  const int c0 = blockIdx.z * BV;
  const gd_seq sq = p.seqs[seq];
  // Padding row (either index negative; out-of-pool indices were refused on the host and are skipped here
  // rather than trusted): nothing read, nothing written.
  if (sq.first < 0 || sq.last < 0 || sq.first >= p.num_slots || sq.last >= p.num_slots) return;
  const int H = p.key_heads, HV = p.value_heads;
  const int h = hv / (HV / H);
  const std::int64_t row0 = sq.row0, len = sq.length;
  const std::int64_t slot_elems = std::int64_t{HV} * K * V;
  const std::int64_t head_off = std::int64_t{hv} * K * V + c0 + c;
  const int d0 = slice * R;

  // The slice of column c in registers: each load instruction of a warp reads BV consecutive elements.
  float s[R];
  const State* src = p.states + sq.first * slot_elems + head_off;
#pragma unroll
  for (int r = 0; r < R; ++r) s[r] = to_float(src[std::int64_t{d0 + r} * V]);
  auto store_state = [&](std::int32_t slot) {
    if (slot < 0 || slot >= p.num_slots) return;
    State* dst = p.states + slot * slot_elems + head_off;
#pragma unroll
    for (int r = 0; r < R; ++r) dst[std::int64_t{d0 + r} * V] = from_float<State>(s[r]);
  };

  for (std::int64_t i = 0; i < len; ++i) {
    const std::int64_t row = row0 + i;
    for (int d = tid; d < K; d += NT) {
      s_k[d] = to_float(p.k[(row * H + h) * K + d]);
      s_q[d] = to_float(p.q[(row * H + h) * K + d]);
    }
    __syncthreads();
    if (p.l2norm) {
      // Warp 0 reduces the squares of k, warp 1 those of q: a one-thread walk over K would put ~K dependent
      // shared-memory loads on the critical path of every token.
      const int warp = tid / 32, lane = tid % 32;
      if (warp < 2) {
        const float* x = warp == 0 ? s_k : s_q;
        float ss = 0.0f;
        for (int d = lane; d < K; d += 32) ss += x[d] * x[d];
        ss = warp_reduce(s_reduce[warp]).Sum(ss);
        if (lane == 0) s_norm[warp] = 1.0f / ::sqrtf(ss + p.l2norm_eps);
      }
      __syncthreads();
      for (int d = tid; d < K; d += NT) {
        s_k[d] *= s_norm[0];
        s_q[d] *= s_norm[1];
      }
      __syncthreads();
    }
    const float decay = ::expf(p.g[row * HV + hv]);
    const float beta = p.beta[row * HV + hv];
    const float v_c = to_float(p.v[(row * HV + hv) * V + c0 + c]);

    s_part[slice][c] = gdn::recurrent_decay_project(s, 1, s_k + d0, R, decay);
    __syncthreads();
    float kv = 0.0f;
#pragma unroll
    for (int w = 0; w < NS; ++w) kv += s_part[w][c];
    __syncthreads(); // every slice has read the projection before the buffer is reused
    const float u = gdn::recurrent_delta(beta, v_c, kv);
    s_part[slice][c] = gdn::recurrent_write_project(s, 1, s_k + d0, s_q + d0, R, u);
    __syncthreads();
    if (slice == 0) {
      float o = 0.0f;
#pragma unroll
      for (int w = 0; w < NS; ++w) o += s_part[w][c];
      p.o[(row * HV + hv) * V + c0 + c] = from_float<In>(p.scale * o);
    }
    if (p.ring_slots) {
      const std::int64_t pos = sq.start + i + 1;
      store_state(p.ring_slots[std::int64_t{seq} * p.ring_size + pos % p.ring_size]);
    }
    __syncthreads(); // s_k, s_q and s_part are reused by the next token
  }
  store_state(sq.last);
}

/// Launches the prefill kernel: grid (sequences, value heads, V / BV), the shared-memory plan above.
template <int Q, int K, int V, int BV, class In>
result<void> gd_launch_prefill(const gd_prefill_params<In, float>& p, std::int32_t num_seqs, ops::stream_handle stream) {
  using L = gd_prefill_smem<Q, K, BV>;
  auto* kernel = gd_chunked_prefill_kernel<Q, K, V, BV, In, float>;
  // Above 48 KiB a kernel must opt into its dynamic shared memory (Qwen3-Next: ~146 KiB of 227 KiB).
  REPRISE_CUDA_TRY(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(L::bytes)));
  kernel<<<dim3(static_cast<unsigned>(num_seqs), static_cast<unsigned>(p.value_heads), V / BV), gd_prefill_threads,
           L::bytes, stream>>>(p);
  return device_runtime::launch_status();
}

/// Launches the recurrent step kernel over a state pool of `State`: grid (sequences, value heads, V / BV).
template <int K, int V, int BV, class In, class State>
result<void> gd_launch_step(const gd_step_params<In, State>& p, std::int32_t num_seqs, ops::stream_handle stream) {
  gd_recurrent_step_kernel<K, V, BV, In, State>
      <<<dim3(static_cast<unsigned>(num_seqs), static_cast<unsigned>(p.value_heads), V / BV),
         gd_step_config<K, BV>::threads, 0, stream>>>(p);
  return device_runtime::launch_status();
}

// ---- instances ----------------------------------------------------------------------------------------------
/// A recurrent step's entry point for activations `T` over a state pool of `S`.
template <class T, class S>
using gd_step_fn = result<void> (*)(const gd_step_params<T, S>&, std::int32_t seqs, ops::stream_handle);

/// Entry points of one compiled configuration; the dispatch table in gated_delta.cu lists them. The recurrent
/// step comes for an fp32 pool (prefill-exact states) and for bf16 / fp16 pools (decode-continuation states).
template <class T>
struct gated_delta_instance {
  ops::gated_delta_kernel_config config;
  result<void> (*chunked_prefill)(const gd_prefill_params<T, float>&, std::int32_t seqs, ops::stream_handle);
  gd_step_fn<T, float> recurrent_step;
  gd_step_fn<T, ops::bfloat16> recurrent_step_bf16;
  gd_step_fn<T, ops::float16> recurrent_step_f16;

  /// The recurrent step over a pool of `S`.
  template <class S>
  gd_step_fn<T, S> step_for() const noexcept {
    return device_runtime::for_pool<S>(recurrent_step, recurrent_step_bf16, recurrent_step_f16);
  }
};

/// The instance of (Q, K, V, T) with V tiles of BV columns: chunked prefill for chunk Q and the steps for
/// (K, V), one per pool type.
template <int Q, int K, int V, int BV, class T>
inline constexpr gated_delta_instance<T> gated_delta_instance_of{
    {K, V, Q, ops::dtype_of<T>}, &gd_launch_prefill<Q, K, V, BV, T>, &gd_launch_step<K, V, BV, T, float>,
    &gd_launch_step<K, V, BV, T, ops::bfloat16>, &gd_launch_step<K, V, BV, T, ops::float16>};

REPRISE_DEVICE_NAMESPACE_END

/// Declares (in gated_delta.cu) or defines (in an instantiation file, one shape family per file) the fp32 and
/// bf16 instances of one shape; `REPRISE_GATED_DELTA_INSTANCE_ROW` is its row of the dispatch table. BV, the V
/// tile of a thread block, is a tuning choice of the definition.
#define REPRISE_GATED_DELTA_INSTANCE_NAME(Q, K, V, T) gated_delta_q##Q##_k##K##_v##V##_##T
#define REPRISE_DECLARE_GATED_DELTA_INSTANCES(Q, K, V)                                                          \
  REPRISE_DECLARE_INSTANCE(gated_delta_instance, REPRISE_GATED_DELTA_INSTANCE_NAME(Q, K, V, f32), f32)         \
  REPRISE_DECLARE_INSTANCE(gated_delta_instance, REPRISE_GATED_DELTA_INSTANCE_NAME(Q, K, V, bf16), bf16)
#define REPRISE_DEFINE_GATED_DELTA_INSTANCES(Q, K, V, BV)                                                       \
  REPRISE_DEFINE_INSTANCE(gated_delta_instance, REPRISE_GATED_DELTA_INSTANCE_NAME(Q, K, V, f32), f32,          \
                          gated_delta_instance_of<Q, K, V, BV, float>)                                         \
  REPRISE_DEFINE_INSTANCE(gated_delta_instance, REPRISE_GATED_DELTA_INSTANCE_NAME(Q, K, V, bf16), bf16,        \
                          gated_delta_instance_of<Q, K, V, BV, ::reprise::ops::bfloat16>)
#define REPRISE_GATED_DELTA_INSTANCE_ROW(Q, K, V) REPRISE_INSTANCE_ROW(REPRISE_GATED_DELTA_INSTANCE_NAME, Q, K, V)
