// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Gated delta rule (Qwen3-Next, Qwen3.5, Kimi-Linear linear-attention layers): the batch description shared
/// by the host implementation and the CUDA launchers, its validation, and the host implementation of
///   - `gated_delta_chunked_prefill`: chunked (WY form) prefill of variable-length sequences on the absolute
///     chunk grid, initial state from a slot, fp32 end-of-chunk captures, final state to the live slot;
///   - `gated_delta_recurrent_step`: decode and short multi-token verification with an optional ring of
///     per-token state slots for rollback.
/// The math lives in `gated_delta_math.hpp`; the CUDA launchers are in `reprise/gpu/gated_delta.hpp`.
///
/// Layouts (row-major, token-major, packed over the batch):
///   q, k  [T, H, K]     v, o  [T, HV, V]     g, beta  [T, HV] (fp32; g is the log-decay, <= 0)
///   state slot s        [HV, K, V] at `states.data + s * states.slot_stride`
/// Value head hv reads key head hv / (HV / H) (grouped value heads).

#include <reprise/config.hpp>
#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/ops/gated_delta_math.hpp>
#include <reprise/state/shapes.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <type_traits>
#include <vector>

namespace reprise::ops {

/// The `dtype` tag of an element type the gated-delta code accepts (fp32 or bf16).
template <class T>
inline constexpr dtype dtype_of = std::is_same_v<T, float> ? dtype::f32 : dtype::bf16;

template <class T>
concept gated_delta_element = std::is_same_v<T, float> || std::is_same_v<T, gdn::bf16>;

/// One end-of-chunk capture: when sequence `seq` has folded in exactly `position` tokens (absolute), its
/// state is written to `slot` (fp32 when the pool is fp32: a prefill_exact snapshot).
struct state_capture {
  std::int32_t seq = 0;
  std::int32_t slot = 0;
  std::int64_t position = 0;
};

/// Options of a gated-delta call.
struct gated_delta_options {
  float scale = 0.0f;       ///< output scale; 0 selects 1 / sqrt(K)
  bool l2norm_qk = false;   ///< L2-normalize q and k rows in the kernel (Qwen3-Next does)
  float l2norm_eps = 1e-6f; ///< added to the sum of squares before the square root

  constexpr float effective_scale(std::uint32_t key_dim) const noexcept {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(key_dim));
  }
};

/// The state slots of one gated-delta layer: slot s is [HV, K, V] at `data + s * slot_stride`.
template <class State>
struct state_pool {
  State* data = nullptr;
  std::int32_t num_slots = 0;
  std::int64_t slot_stride = 0; ///< elements between slots, >= HV * K * V
};

/// Activations of a packed batch (see the file comment for layouts). `o` is written; the rest is read.
template <class In>
struct gated_delta_io {
  const In* q = nullptr;
  const In* k = nullptr;
  const In* v = nullptr;
  const float* g = nullptr;
  const float* beta = nullptr;
  In* o = nullptr;
  std::int64_t num_tokens = 0; ///< T: rows of q, k, v, g, beta, o
};

/// Sequences of a chunked prefill batch. All arrays are host memory for the host implementation and for
/// `validate`, device memory for the CUDA launchers (which expect the same contents validated on a host
/// mirror; the kernels themselves skip any slot index outside the pool instead of writing out of bounds).
struct gated_delta_prefill_batch {
  std::int32_t num_seqs = 0;
  const std::int32_t* cu_seqlens = nullptr;   ///< [num_seqs + 1], cu_seqlens[0] = 0, non-decreasing, last = T
  const std::int64_t* start_pos = nullptr;    ///< [num_seqs] absolute position of each sequence's first token
  const std::int32_t* initial_slot = nullptr; ///< [num_seqs] state before the first token; < 0: zero state
  const std::int32_t* final_slot = nullptr;   ///< [num_seqs] live slot for the state after the last token;
                                              ///< < 0: not written. May equal the sequence's initial slot.
  const state_capture* captures = nullptr;    ///< sorted by (seq, position); positions on the chunk grid
  std::int32_t num_captures = 0;
};

/// Sequences of a recurrent step batch (decode: one token each; verification: a few).
struct gated_delta_step_batch {
  std::int32_t num_seqs = 0;
  const std::int32_t* cu_seqlens = nullptr; ///< [num_seqs + 1]; nullptr: one token per sequence
  const std::int64_t* start_pos = nullptr;  ///< [num_seqs] tokens folded into the source state; needed with a ring
  const std::int32_t* src_slot = nullptr;   ///< [num_seqs] state to start from; < 0: padding row, skipped entirely
  const std::int32_t* dst_slot = nullptr;   ///< [num_seqs] where the final state goes (== src: in place);
                                            ///< < 0: not written (copy-on-write and scratch are both index lists)
  const std::int32_t* ring_slots = nullptr; ///< [num_seqs, ring_size] or nullptr: the state after absolute
                                            ///< position p goes to ring_slots[seq * ring_size + p % ring_size]
  std::int32_t ring_size = 0;
};

/// Slot of the rollback ring that holds the state after absolute position `position`.
constexpr std::int32_t ring_index(std::int64_t position, std::int32_t ring_size) noexcept {
  return static_cast<std::int32_t>(position % ring_size);
}

namespace detail {

inline bool slot_in_pool(std::int32_t s, std::int32_t num_slots) noexcept { return s >= 0 && s < num_slots; }

/// Slots written by a call must be pairwise distinct and must not be read by another sequence of the same
/// call: on a GPU all sequences run concurrently, so either would be a race. A sequence reading and writing
/// its own slot (in-place update) is fine: each thread block reads its tile before writing it.
inline errc check_slot_sets(std::int32_t num_slots, const std::vector<std::pair<std::int32_t, std::int32_t>>& writes,
                            const std::vector<std::pair<std::int32_t, std::int32_t>>& reads) {
  std::vector<std::int32_t> owner(static_cast<std::size_t>(num_slots), -1);
  for (auto [slot, seq] : writes) {
    if (owner[static_cast<std::size_t>(slot)] != -1) return errc::overlapping_pairs;
    owner[static_cast<std::size_t>(slot)] = seq;
  }
  for (auto [slot, seq] : reads) {
    const std::int32_t w = owner[static_cast<std::size_t>(slot)];
    if (w != -1 && w != seq) return errc::overlapping_pairs;
  }
  return errc{};
}

inline errc check_common(const gated_delta_shape& shape, dtype in_type, dtype state_type, std::int64_t num_tokens,
                         std::int32_t num_slots, std::int64_t slot_stride, std::int32_t num_seqs) {
  if (const errc e = shape.validate(); e != errc{}) return e;
  if (shape.state_type != state_type) return errc::invalid_argument;
  if (in_type != dtype::f32 && in_type != dtype::bf16) return errc::unsupported_config;
  if (num_tokens < 0 || num_seqs < 0 || num_slots < 0) return errc::invalid_argument;
  const std::int64_t matrix = std::int64_t{shape.value_heads} * shape.key_dim * shape.value_dim;
  if (slot_stride < matrix) return errc::size_mismatch;
  return errc{};
}

inline errc check_seqlens(const std::int32_t* cu, std::int32_t num_seqs, std::int64_t num_tokens) {
  if (num_seqs == 0) return num_tokens == 0 ? errc{} : errc::size_mismatch;
  if (cu[0] != 0) return errc::invalid_argument;
  for (std::int32_t s = 0; s < num_seqs; ++s)
    if (cu[s + 1] < cu[s]) return errc::invalid_argument;
  return cu[num_seqs] == num_tokens ? errc{} : errc::size_mismatch;
}

} // namespace detail

/// Checks a chunked-prefill batch against `shape` and a pool of `num_slots` slots of `slot_stride` elements.
///
/// Effects: none (reads host memory only).
/// Errors: `invalid_argument` (shape fields, state type differs from `shape.state_type`, null array,
/// cu_seqlens not starting at 0 or decreasing, negative start, captures not sorted by (seq, position)),
/// `unsupported_config` (shape chunk or input type), `size_mismatch` (cu_seqlens does not end at T, slot stride
/// too small), `out_of_range` (slot index >= num_slots, capture sequence unknown, capture position outside
/// (start, end]), `misaligned` (capture position not a multiple of Q), `overlapping_pairs` (a slot written
/// twice, or written by one sequence and read by another).
/// Complexity: O(num_seqs + num_captures + num_slots).
inline result<void> validate_gated_delta_prefill(const gated_delta_shape& shape, dtype in_type, std::int64_t num_tokens,
                                                 std::int32_t num_slots, std::int64_t slot_stride,
                                                 const gated_delta_prefill_batch& b) {
  if (const errc e = detail::check_common(shape, in_type, shape.state_type, num_tokens, num_slots, slot_stride,
                                          b.num_seqs);
      e != errc{})
    return e;
  if (b.num_captures < 0) return errc::invalid_argument;
  if (b.num_seqs > 0 && (!b.cu_seqlens || !b.start_pos || !b.initial_slot || !b.final_slot))
    return errc::invalid_argument;
  if (b.num_captures > 0 && !b.captures) return errc::invalid_argument;
  if (const errc e = detail::check_seqlens(b.cu_seqlens, b.num_seqs, num_tokens); e != errc{}) return e;

  std::vector<std::pair<std::int32_t, std::int32_t>> writes, reads;
  for (std::int32_t s = 0; s < b.num_seqs; ++s) {
    if (b.start_pos[s] < 0) return errc::invalid_argument;
    if (b.initial_slot[s] >= num_slots || b.final_slot[s] >= num_slots) return errc::out_of_range;
    if (b.initial_slot[s] >= 0) reads.emplace_back(b.initial_slot[s], s);
    if (b.final_slot[s] >= 0) writes.emplace_back(b.final_slot[s], s);
  }
  for (std::int32_t c = 0; c < b.num_captures; ++c) {
    const state_capture& cap = b.captures[c];
    if (cap.seq < 0 || cap.seq >= b.num_seqs) return errc::out_of_range;
    if (!detail::slot_in_pool(cap.slot, num_slots)) return errc::out_of_range;
    if (c > 0) {
      const state_capture& prev = b.captures[c - 1];
      if (cap.seq < prev.seq || (cap.seq == prev.seq && cap.position <= prev.position)) return errc::invalid_argument;
    }
    const std::int64_t start = b.start_pos[cap.seq];
    const std::int64_t end = start + (b.cu_seqlens[cap.seq + 1] - b.cu_seqlens[cap.seq]);
    if (cap.position <= start || cap.position > end) return errc::out_of_range;
    if (cap.position % shape.chunk != 0) return errc::misaligned;
    writes.emplace_back(cap.slot, cap.seq);
  }
  if (const errc e = detail::check_slot_sets(num_slots, writes, reads); e != errc{}) return e;
  return {};
}

/// Checks a recurrent-step batch; same error vocabulary as `validate_gated_delta_prefill`, plus
/// `invalid_argument` for a ring without start positions or with ring_size < 1, and `out_of_range` for a
/// ring slot outside the pool (negative ring entries are allowed: that position is not kept).
/// Complexity: O(num_seqs * ring_size + num_slots).
inline result<void> validate_gated_delta_step(const gated_delta_shape& shape, dtype in_type, std::int64_t num_tokens,
                                              std::int32_t num_slots, std::int64_t slot_stride,
                                              const gated_delta_step_batch& b) {
  if (const errc e = detail::check_common(shape, in_type, shape.state_type, num_tokens, num_slots, slot_stride,
                                          b.num_seqs);
      e != errc{})
    return e;
  if (b.num_seqs > 0 && (!b.src_slot || !b.dst_slot)) return errc::invalid_argument;
  if (b.cu_seqlens) {
    if (const errc e = detail::check_seqlens(b.cu_seqlens, b.num_seqs, num_tokens); e != errc{}) return e;
  } else if (num_tokens != b.num_seqs) {
    return errc::size_mismatch;
  }
  if (b.ring_slots && (b.ring_size < 1 || !b.start_pos)) return errc::invalid_argument;

  std::vector<std::pair<std::int32_t, std::int32_t>> writes, reads;
  for (std::int32_t s = 0; s < b.num_seqs; ++s) {
    if (b.start_pos && b.start_pos[s] < 0) return errc::invalid_argument;
    if (b.src_slot[s] >= num_slots || b.dst_slot[s] >= num_slots) return errc::out_of_range;
    if (b.src_slot[s] < 0) continue; // padding row: neither reads nor writes
    reads.emplace_back(b.src_slot[s], s);
    if (b.dst_slot[s] >= 0) writes.emplace_back(b.dst_slot[s], s);
    if (b.ring_slots) {
      for (std::int32_t r = 0; r < b.ring_size; ++r) {
        const std::int32_t slot = b.ring_slots[std::int64_t{s} * b.ring_size + r];
        if (slot >= num_slots) return errc::out_of_range;
        if (slot >= 0) writes.emplace_back(slot, s);
      }
    }
  }
  if (const errc e = detail::check_slot_sets(num_slots, writes, reads); e != errc{}) return e;
  return {};
}

namespace detail {

/// Scratch of one (sequence, value head) chunk loop on the host: fp32 tiles of the chunk and the state.
struct gated_delta_host_scratch {
  std::vector<float> k, q, v, g, beta, gcum, coef, kdecay, t, x, w, u, s;
  gated_delta_host_scratch(std::uint32_t chunk, std::uint32_t kd, std::uint32_t vd)
      : k(std::size_t{chunk} * kd), q(std::size_t{chunk} * kd), v(std::size_t{chunk} * vd), g(chunk), beta(chunk),
        gcum(chunk), coef(chunk), kdecay(chunk), t(std::size_t{chunk} * chunk),
        x(std::size_t{gdn::wy_block} * chunk), w(std::size_t{chunk} * kd),
        u(std::size_t{chunk} * vd), s(std::size_t{kd} * vd) {}
};

/// Loads row `row` of a [T, heads, dim] activation for head `head` into fp32, L2-normalized on request.
template <class In>
void load_row(const In* x, std::int64_t row, std::uint32_t heads, std::uint32_t head, std::uint32_t dim, float* out,
              bool l2norm, float eps) {
  const In* src = x + (row * heads + head) * dim;
  for (std::uint32_t d = 0; d < dim; ++d) out[d] = gdn::to_float(src[d]);
  if (l2norm) {
    const float r = gdn::l2_inv_norm(out, static_cast<int>(dim), eps);
    for (std::uint32_t d = 0; d < dim; ++d) out[d] *= r;
  }
}

/// T = (I + A)^-1 in place of N = -A (rows and columns < n), in the blocked order the CUDA kernel uses:
/// diagonal blocks first (rows in increasing order, each row from values computed before it is stored),
/// then block rows top-down through X (`scratch`, wy_block x n). In-place is safe on the host because
/// row i, column c reads only entries of row i right of c, which are still N.
inline void wy_blocked_solve(float* t, int ldt, int n, float* scratch) {
  constexpr int B = gdn::wy_block;
  for (int b = 0; b < n; b += B)
    for (int i = b + 2; i < std::min(n, b + B); ++i)
      for (int c = b; c < i - 1; ++c) t[i * ldt + c] = gdn::wy_solve(t, ldt, i, c, i);
  for (int b = B; b < n; b += B) {
    const int rows = std::min(n, b + B);
    for (int i = b; i < rows; ++i)
      for (int c = 0; c < b; ++c) scratch[(i - b) * n + c] = gdn::wy_solve(t, ldt, i, c, b);
    for (int i = b; i < rows; ++i)
      for (int c = 0; c < b; ++c) t[i * ldt + c] = gdn::wy_block_apply(t, ldt, scratch, n, i, c, b);
  }
}

} // namespace detail

/// Host implementation of the chunked gated-delta prefill (the math the CUDA kernel implements).
///
/// Effects: for every sequence s and value head, starts from slot `initial_slot[s]` (zero state if < 0),
/// processes its tokens in chunks on the absolute grid (a sequence starting at p with p % Q != 0 first runs
/// a short chunk up to the next multiple of Q), writes o for every token, writes the state after each
/// captured position to its capture slot, and the final state to `final_slot[s]` (if >= 0). Resuming from
/// a captured fp32 state at its position gives bitwise the same outputs and states as the uninterrupted run.
/// Errors: those of `validate_gated_delta_prefill`; on error nothing is written.
/// Complexity: O(T * HV * (Q * K + K * V)) arithmetic, O(Q * (Q + K + V) + K * V) scratch.
template <gated_delta_element In, gated_delta_element State>
result<void> gated_delta_chunked_prefill(const gated_delta_shape& shape, const gated_delta_options& opt,
                                         const gated_delta_io<In>& io, const gated_delta_prefill_batch& batch,
                                         state_pool<State> states) {
  if (shape.state_type != dtype_of<State>) return errc::invalid_argument;
  if (auto r = validate_gated_delta_prefill(shape, dtype_of<In>, io.num_tokens, states.num_slots, states.slot_stride,
                                            batch);
      !r)
    return r;
  if (io.num_tokens > 0 && (!io.q || !io.k || !io.v || !io.g || !io.beta || !io.o)) return errc::invalid_argument;
  if (batch.num_seqs > 0 && !states.data && states.num_slots > 0) return errc::invalid_argument;

  const std::uint32_t H = shape.key_heads, HV = shape.value_heads, K = shape.key_dim, V = shape.value_dim;
  const std::uint32_t Q = shape.chunk;
  const int ik = static_cast<int>(K), iv = static_cast<int>(V), iq = static_cast<int>(Q);
  const float scale = opt.effective_scale(K);
  detail::gated_delta_host_scratch sc(Q, K, V);

  std::int32_t cap_begin = 0;
  for (std::int32_t s = 0; s < batch.num_seqs; ++s) {
    const std::int64_t row0 = batch.cu_seqlens[s], len = batch.cu_seqlens[s + 1] - row0;
    const std::int64_t start = batch.start_pos[s], end = start + len;
    std::int32_t cap_end = cap_begin;
    while (cap_end < batch.num_captures && batch.captures[cap_end].seq == s) ++cap_end;

    for (std::uint32_t hv = 0; hv < HV; ++hv) {
      const std::uint32_t h = hv / (HV / H);
      const std::int64_t head_off = std::int64_t{hv} * K * V;
      float* S = sc.s.data();
      if (batch.initial_slot[s] >= 0) {
        const State* src = states.data + batch.initial_slot[s] * states.slot_stride + head_off;
        for (std::size_t e = 0; e < std::size_t{K} * V; ++e) S[e] = gdn::to_float(src[e]);
      } else {
        std::fill(sc.s.begin(), sc.s.end(), 0.0f);
      }

      std::int32_t next_cap = cap_begin;
      for (std::int64_t pos = start; pos < end;) {
        const std::int64_t chunk_end = std::min(end, (pos / Q + 1) * Q);
        const int n = static_cast<int>(chunk_end - pos);
        const std::int64_t r0 = row0 + (pos - start);

        for (int i = 0; i < n; ++i) {
          detail::load_row(io.k, r0 + i, H, h, K, &sc.k[std::size_t(i) * K], opt.l2norm_qk, opt.l2norm_eps);
          detail::load_row(io.q, r0 + i, H, h, K, &sc.q[std::size_t(i) * K], opt.l2norm_qk, opt.l2norm_eps);
          detail::load_row(io.v, r0 + i, HV, hv, V, &sc.v[std::size_t(i) * V], false, 0.0f);
          sc.g[i] = io.g[(r0 + i) * HV + hv];
          sc.beta[i] = io.beta[(r0 + i) * HV + hv];
        }
        gdn::chunk_gate_cumsum(sc.g.data(), 1, n, sc.gcum.data());
        const float glast = sc.gcum[n - 1];
        for (int i = 0; i < n; ++i) {
          sc.coef[i] = sc.beta[i] * ::expf(sc.gcum[i]);
          sc.kdecay[i] = gdn::pair_decay(glast, sc.gcum[i]);
        }
        float* T = sc.t.data();
        for (int i = 0; i < n; ++i)
          for (int j = 0; j < i; ++j) T[i * iq + j] = gdn::wy_neg_a(sc.k.data(), ik, ik, sc.gcum.data(), sc.beta.data(), i, j);
        detail::wy_blocked_solve(T, iq, n, sc.x.data());
        // W = T diag(beta e^G) K, U = T diag(beta) V, then V_new = U - W S_0 in place of U.
        for (int i = 0; i < n; ++i) {
          for (int d = 0; d < ik; ++d) sc.w[i * ik + d] = gdn::wy_apply(T, iq, sc.coef.data(), sc.k.data(), ik, i, d);
          for (int c = 0; c < iv; ++c) sc.u[i * iv + c] = gdn::wy_apply(T, iq, sc.beta.data(), sc.v.data(), iv, i, c);
        }
        for (int i = 0; i < n; ++i)
          for (int c = 0; c < iv; ++c)
            sc.u[i * iv + c] = gdn::wy_new_value(sc.u[i * iv + c], &sc.w[i * ik], S, iv, c, ik);
        // Causal scores into T (no longer needed), then outputs from S_0.
        for (int i = 0; i < n; ++i)
          for (int j = 0; j <= i; ++j)
            T[i * iq + j] = gdn::causal_score(&sc.q[i * ik], &sc.k[j * ik], ik, sc.gcum[i], sc.gcum[j]);
        for (int i = 0; i < n; ++i) {
          In* out = io.o + ((r0 + i) * HV + hv) * V;
          for (int c = 0; c < iv; ++c)
            gdn::store(out + c, scale * gdn::chunk_output(&sc.q[i * ik], S, iv, c, ik, sc.gcum[i], &T[i * iq],
                                                          sc.u.data(), iv, i));
        }
        const float decay_last = ::expf(glast);
        for (int d = 0; d < ik; ++d)
          for (int c = 0; c < iv; ++c)
            S[d * iv + c] = gdn::chunk_state(S[d * iv + c], decay_last, sc.k.data(), ik, d, sc.kdecay.data(),
                                             sc.u.data(), iv, c, n);
        pos = chunk_end;
        if (next_cap < cap_end && batch.captures[next_cap].position == pos) {
          State* dst = states.data + batch.captures[next_cap].slot * states.slot_stride + head_off;
          for (std::size_t e = 0; e < std::size_t{K} * V; ++e) gdn::store(dst + e, S[e]);
          ++next_cap;
        }
      }
      if (batch.final_slot[s] >= 0) {
        State* dst = states.data + batch.final_slot[s] * states.slot_stride + head_off;
        for (std::size_t e = 0; e < std::size_t{K} * V; ++e) gdn::store(dst + e, S[e]);
      }
    }
    cap_begin = cap_end;
  }
  return {};
}

/// Host implementation of the recurrent gated-delta step (decode, or a few tokens of speculative
/// verification per sequence).
///
/// Effects: for every non-padding sequence s (src_slot[s] >= 0), loads the state from src_slot[s], applies
/// the recurrence token by token, writes o for each token, writes the state after each token at absolute
/// position p (= start_pos[s] + tokens so far) to ring slot ring_slots[s * R + p % R] when a ring is given,
/// and the final state to dst_slot[s] (if >= 0). Padding rows leave their outputs untouched.
/// Rolling back k tokens is a restore from the ring slot of position p - k, exact as long as k < R.
/// Errors: those of `validate_gated_delta_step`; on error nothing is written.
/// Complexity: O(tokens * HV * K * V).
template <gated_delta_element In, gated_delta_element State>
result<void> gated_delta_recurrent_step(const gated_delta_shape& shape, const gated_delta_options& opt,
                                        const gated_delta_io<In>& io, const gated_delta_step_batch& batch,
                                        state_pool<State> states) {
  if (shape.state_type != dtype_of<State>) return errc::invalid_argument;
  if (auto r =
          validate_gated_delta_step(shape, dtype_of<In>, io.num_tokens, states.num_slots, states.slot_stride, batch);
      !r)
    return r;
  if (io.num_tokens > 0 && (!io.q || !io.k || !io.v || !io.g || !io.beta || !io.o)) return errc::invalid_argument;
  if (batch.num_seqs > 0 && !states.data && states.num_slots > 0) return errc::invalid_argument;

  const std::uint32_t H = shape.key_heads, HV = shape.value_heads, K = shape.key_dim, V = shape.value_dim;
  const int ik = static_cast<int>(K), iv = static_cast<int>(V);
  const float scale = opt.effective_scale(K);
  std::vector<float> S(std::size_t{K} * V), kr(K), qr(K);

  for (std::int32_t s = 0; s < batch.num_seqs; ++s) {
    if (batch.src_slot[s] < 0) continue;
    const std::int64_t row0 = batch.cu_seqlens ? batch.cu_seqlens[s] : s;
    const std::int64_t len = batch.cu_seqlens ? batch.cu_seqlens[s + 1] - row0 : 1;
    for (std::uint32_t hv = 0; hv < HV; ++hv) {
      const std::uint32_t h = hv / (HV / H);
      const std::int64_t head_off = std::int64_t{hv} * K * V;
      const State* src = states.data + batch.src_slot[s] * states.slot_stride + head_off;
      for (std::size_t e = 0; e < S.size(); ++e) S[e] = gdn::to_float(src[e]);
      for (std::int64_t i = 0; i < len; ++i) {
        const std::int64_t row = row0 + i;
        detail::load_row(io.k, row, H, h, K, kr.data(), opt.l2norm_qk, opt.l2norm_eps);
        detail::load_row(io.q, row, H, h, K, qr.data(), opt.l2norm_qk, opt.l2norm_eps);
        const float decay = ::expf(io.g[row * HV + hv]);
        const float beta = io.beta[row * HV + hv];
        const In* vrow = io.v + (row * HV + hv) * V;
        In* orow = io.o + (row * HV + hv) * V;
        for (int c = 0; c < iv; ++c)
          gdn::store(orow + c, scale * gdn::recurrent_column(&S[c], iv, kr.data(), qr.data(), ik, decay, beta,
                                                             gdn::to_float(vrow[c])));
        if (batch.ring_slots) {
          const std::int64_t p = batch.start_pos[s] + i + 1;
          const std::int32_t slot = batch.ring_slots[std::int64_t{s} * batch.ring_size + ring_index(p, batch.ring_size)];
          if (slot >= 0) {
            State* dst = states.data + slot * states.slot_stride + head_off;
            for (std::size_t e = 0; e < S.size(); ++e) gdn::store(dst + e, S[e]);
          }
        }
      }
      if (batch.dst_slot[s] >= 0) {
        State* dst = states.data + batch.dst_slot[s] * states.slot_stride + head_off;
        for (std::size_t e = 0; e < S.size(); ++e) gdn::store(dst + e, S[e]);
      }
    }
  }
  return {};
}

} // namespace reprise::ops
