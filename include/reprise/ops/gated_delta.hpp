// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Gated delta rule (Qwen3-Next, Qwen3.5, Kimi-Linear linear-attention layers):
///   - chunked prefill (WY form, Q = 64 or 32) of a variable-length batch on the absolute chunk grid, initial
///     state from a slot, fp32 end-of-chunk captures, final state to the live slot;
///   - recurrent step for decode and short multi-token verification, with an optional ring of per-token
///     state slots so that an engine can roll back rejected draft tokens.
/// Host implementations (`*_host`, the reference the tests run everywhere) and device launchers (defined in
/// reprise::kernels) share the math of `gated_delta_math.hpp` and the slot conventions of `slots.hpp`.
///
/// Operands (row-major views, tokens packed over the batch):
///   q, k   [tokens, H, K]      v, out  [tokens, HV, V]      g, beta  [tokens, HV] fp32
///   state_pool [slots, HV, K, V] fp32 (bf16 accepted by the host implementation: a lossy state)
/// g is the log-decay (<= 0; Qwen3-Next: -exp(A_log) softplus(a + dt_bias)), beta the write strength
/// (sigmoid(b)). Value head hv reads key head hv / (HV / H) (grouped value heads).

#include <reprise/errc.hpp>
#include <reprise/ops/chunk_grid.hpp>
#include <reprise/ops/gated_delta_math.hpp>
#include <reprise/ops/slots.hpp>
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>
#include <reprise/state/shapes.hpp>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::ops {

/// Element types of a gated-delta state pool: fp32, or bf16 / fp16 for lossy states (`state_element`).
template <class T>
concept gated_delta_state_element = state_element<T>;

/// Operands of a gated-delta call (prefill rows are tokens; decode rows are tokens of the batch).
template <activation_element T, gated_delta_state_element State = float>
struct gated_delta_args {
  tensor<const T, 3> q;          ///< [tokens, H, K]
  tensor<const T, 3> k;          ///< [tokens, H, K]
  tensor<const T, 3> v;          ///< [tokens, HV, V]
  tensor<const float, 2> g;      ///< [tokens, HV] log-decay
  tensor<const float, 2> beta;   ///< [tokens, HV]
  tensor<State, 4> state_pool;   ///< [slots, HV, K, V]
  tensor<T, 3> out;              ///< [tokens, HV, V]; must not alias the inputs
};

/// Scalar options of a gated-delta call.
struct gated_delta_options {
  std::uint32_t chunk = 64; ///< chunk size Q of the prefill grid (64; 32 allowed)
  float scale = 0.0f;       ///< output scale; 0 selects 1 / sqrt(K)
  bool l2norm_qk = false;   ///< L2-normalize q and k rows in the kernel (Qwen3-Next does)
  float l2norm_eps = 1e-6f; ///< added to the sum of squares before the square root

  constexpr float effective_scale(std::int64_t key_dim) const noexcept {
    return scale != 0.0f ? scale : 1.0f / std::sqrt(static_cast<float>(key_dim));
  }
};

/// The layer shape an argument set describes (for dispatch and byte counts).
template <activation_element T, gated_delta_state_element State>
constexpr gated_delta_shape shape_of(const gated_delta_args<T, State>& a, const gated_delta_options& o) noexcept {
  gated_delta_shape s;
  s.key_heads = static_cast<std::uint32_t>(a.q.extent(1));
  s.value_heads = static_cast<std::uint32_t>(a.v.extent(1));
  s.key_dim = static_cast<std::uint32_t>(a.q.extent(2));
  s.value_dim = static_cast<std::uint32_t>(a.v.extent(2));
  s.chunk = o.chunk;
  s.state_type = dtype_of<State>;
  return s;
}

/// The sizes a gated-delta kernel instantiation is compiled for (the head counts are runtime values).
struct gated_delta_kernel_config {
  std::int64_t key_dim = 0;   ///< K
  std::int64_t value_dim = 0; ///< V
  std::int64_t chunk = 0;     ///< Q (0 for the recurrent step, which has no chunks)
  dtype input = dtype::bf16;  ///< element type of q, k, v, out
  friend constexpr bool operator==(const gated_delta_kernel_config&, const gated_delta_kernel_config&) = default;
};

/// The configuration of `a` for a chunked prefill (`chunked`) or a recurrent step.
template <activation_element T, gated_delta_state_element State>
constexpr gated_delta_kernel_config config_of(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                              bool chunked) noexcept {
  return {a.q.extent(2), a.v.extent(2), chunked ? std::int64_t{o.chunk} : 0, dtype_of<T>};
}

/// Slots of a recurrent step. `pairs[s]` = (src, dst) per sequence: the step reads the state from src and
/// writes the final state to dst (src == dst: in place; different: copy-on-write fused in). A pair with a
/// negative index on either side is a padding row: nothing is read or written, its outputs stay untouched.
/// With a ring (`ring_size` > 0, `ring` = [sequences, ring_size] slot indices), the state after absolute
/// position p (p = start_positions[s] + tokens done) also goes to `ring[s * ring_size + p % ring_size]`
/// (negative entry: that position is not kept). Rolling back k tokens is then a restore (or simply the next
/// step's src) from the ring slot of position p - k, exact for k < ring_size.
struct recurrent_slots {
  std::span<const copy_pair> pairs;
  std::span<const std::int32_t> ring = {};
  std::int32_t ring_size = 0;
};

/// Ring slot index (within a sequence's ring) of absolute position `position`.
constexpr std::int32_t ring_index(std::int64_t position, std::int32_t ring_size) noexcept {
  return static_cast<std::int32_t>(position % ring_size);
}

/// Checks operand extents and options.
/// Errors: `invalid_argument` (a zero head count or dimension, HV not a multiple of H, non-positive eps);
/// `unsupported_config` (chunk not 32 or 64); `size_mismatch` (extents disagree between operands).
/// Complexity: O(1).
template <activation_element T, gated_delta_state_element State>
errc validate_gated_delta(const gated_delta_args<T, State>& a, const gated_delta_options& o) noexcept {
  const std::int64_t n = a.q.extent(0), H = a.q.extent(1), K = a.q.extent(2);
  const std::int64_t HV = a.v.extent(1), V = a.v.extent(2);
  if (H == 0 || K == 0 || HV == 0 || V == 0 || HV % H != 0) return errc::invalid_argument;
  if (!(o.l2norm_eps > 0.0f)) return errc::invalid_argument;
  if (!is_supported_delta_chunk(o.chunk)) return errc::unsupported_config;
  if (a.k.extent(0) != n || a.k.extent(1) != H || a.k.extent(2) != K) return errc::size_mismatch;
  if (a.v.extent(0) != n || a.out.extent(0) != n || a.out.extent(1) != HV || a.out.extent(2) != V)
    return errc::size_mismatch;
  if (a.g.extent(0) != n || a.g.extent(1) != HV || a.beta.extent(0) != n || a.beta.extent(1) != HV)
    return errc::size_mismatch;
  if (a.state_pool.extent(1) != HV || a.state_pool.extent(2) != K || a.state_pool.extent(3) != V)
    return errc::size_mismatch;
  return errc{};
}

/// Checks the slots of a recurrent step over `b` against a pool of `num_slots` slots.
/// Errors: `size_mismatch` (pairs not one per sequence, ring not sequences x ring_size); `invalid_argument`
/// (negative ring_size); `out_of_range` (a slot >= num_slots); `overlapping_pairs` (a slot written twice, or
/// written for one sequence and read for another: all sequences run concurrently).
/// Complexity: O(S x ring_size + num_slots).
inline errc validate_recurrent_slots(const varlen_batch& b, const recurrent_slots& r, std::int64_t num_slots) {
  const std::int64_t S = b.sequences();
  if (static_cast<std::int64_t>(r.pairs.size()) != S) return errc::size_mismatch;
  if (r.ring_size < 0) return errc::invalid_argument;
  if (static_cast<std::int64_t>(r.ring.size()) != S * r.ring_size) return errc::size_mismatch;
  for (const copy_pair& p : r.pairs)
    if (p.src >= num_slots || p.dst >= num_slots) return errc::out_of_range;
  for (std::int32_t slot : r.ring)
    if (slot >= num_slots) return errc::out_of_range;
  std::vector<std::int32_t> owner(static_cast<std::size_t>(num_slots), -1);
  auto write = [&](std::int32_t slot, std::int32_t seq) {
    if (owner[static_cast<std::size_t>(slot)] != -1) return false;
    owner[static_cast<std::size_t>(slot)] = seq;
    return true;
  };
  for (std::int64_t s = 0; s < S; ++s) {
    const copy_pair p = r.pairs[static_cast<std::size_t>(s)];
    if (p.src < 0 || p.dst < 0) continue;
    if (!write(p.dst, static_cast<std::int32_t>(s))) return errc::overlapping_pairs;
    for (std::int32_t i = 0; i < r.ring_size; ++i) {
      const std::int32_t slot = r.ring[static_cast<std::size_t>(s * r.ring_size + i)];
      if (slot >= 0 && !write(slot, static_cast<std::int32_t>(s))) return errc::overlapping_pairs;
    }
  }
  for (std::int64_t s = 0; s < S; ++s) {
    const copy_pair p = r.pairs[static_cast<std::size_t>(s)];
    if (p.src < 0 || p.dst < 0) continue;
    const std::int32_t w = owner[static_cast<std::size_t>(p.src)];
    if (w != -1 && w != s) return errc::overlapping_pairs;
  }
  return errc{};
}

/// Everything a chunked prefill checks before it reads or writes anything, shared by the host implementation,
/// the device launcher and its workspace query. Errors: as `validate_gated_delta`, `validate_batch` and
/// `validate_prefill_slots` on the chunk grid. Complexity: that of `validate_prefill_slots`.
template <activation_element T, gated_delta_state_element State>
errc validate_gated_delta_prefill(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                  const varlen_batch& b, const prefill_slots& slots) noexcept {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  return validate_prefill(b, slots, a.q.extent(0), a.state_pool.extent(0), o.chunk);
}

/// Everything a recurrent step checks, shared like `validate_gated_delta_prefill`. Errors: as
/// `validate_gated_delta`, `validate_batch` and `validate_recurrent_slots`. Complexity: that of
/// `validate_recurrent_slots`.
template <activation_element T, gated_delta_state_element State>
errc validate_gated_delta_step(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                               const varlen_batch& b, const recurrent_slots& r) {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  if (errc e = validate_batch(b, a.q.extent(0)); e != errc{}) return e;
  return validate_recurrent_slots(b, r, a.state_pool.extent(0));
}

namespace detail {

/// fp32 scratch of one (sequence, value head) chunk loop of the host implementation.
struct gated_delta_host_scratch {
  std::vector<float> k, q, v, g, beta, gcum, coef, kdecay, t, x, w, u, s;
  gated_delta_host_scratch(std::int64_t chunk, std::int64_t kd, std::int64_t vd)
      : k(std::size_t(chunk * kd)), q(std::size_t(chunk * kd)), v(std::size_t(chunk * vd)), g(std::size_t(chunk)),
        beta(std::size_t(chunk)), gcum(std::size_t(chunk)), coef(std::size_t(chunk)), kdecay(std::size_t(chunk)),
        t(std::size_t(chunk * chunk)), x(std::size_t(gdn::wy_block * chunk)), w(std::size_t(chunk * kd)),
        u(std::size_t(chunk * vd)), s(std::size_t(kd * vd)) {}
};

/// Row (token, head) of q or k in fp32, L2-normalized on request.
template <class T>
void load_key_row(const tensor<const T, 3>& x, std::int64_t row, std::int64_t head, float* out, bool l2norm, float eps) {
  const std::int64_t dim = x.extent(2);
  for (std::int64_t d = 0; d < dim; ++d) out[d] = to_float(x(row, head, d));
  if (l2norm) {
    const float r = gdn::l2_inv_norm(out, static_cast<int>(dim), eps);
    for (std::int64_t d = 0; d < dim; ++d) out[d] *= r;
  }
}

template <class State>
void load_state(const tensor<State, 4>& pool, std::int32_t slot, std::int64_t hv, float* s) {
  const std::int64_t K = pool.extent(2), V = pool.extent(3);
  for (std::int64_t d = 0; d < K; ++d)
    for (std::int64_t c = 0; c < V; ++c) s[d * V + c] = slot < 0 ? 0.0f : to_float(pool(slot, hv, d, c));
}

template <class State>
void store_state(const tensor<State, 4>& pool, std::int32_t slot, std::int64_t hv, const float* s) {
  const std::int64_t K = pool.extent(2), V = pool.extent(3);
  for (std::int64_t d = 0; d < K; ++d)
    for (std::int64_t c = 0; c < V; ++c) pool(slot, hv, d, c) = from_float<State>(s[d * V + c]);
}

/// T = (I + A)^-1 in place of N = -A (rows and columns < n), in the blocked order the CUDA kernel uses:
/// the diagonal blocks first (rows in increasing order), then block rows top-down through X (`scratch`,
/// wy_block x n). In place is safe here because row i, column c reads only entries of row i right of c,
/// which still hold N.
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

/// One chunk of n tokens (rows r0..r0+n-1) of value head hv, key head h: outputs, then S advanced in place.
template <class T, class State>
void gated_delta_host_chunk(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                            gated_delta_host_scratch& sc, std::int64_t r0, int n, std::int64_t h, std::int64_t hv) {
  const int K = static_cast<int>(a.q.extent(2)), V = static_cast<int>(a.v.extent(2)), Q = static_cast<int>(o.chunk);
  const float scale = o.effective_scale(K);
  float* S = sc.s.data();
  for (int i = 0; i < n; ++i) {
    load_key_row(a.k, r0 + i, h, sc.k.data() + i * K, o.l2norm_qk, o.l2norm_eps);
    load_key_row(a.q, r0 + i, h, sc.q.data() + i * K, o.l2norm_qk, o.l2norm_eps);
    for (int c = 0; c < V; ++c) sc.v.data()[i * V + c] = to_float(a.v(r0 + i, hv, c));
    sc.g.data()[i] = a.g(r0 + i, hv);
    sc.beta.data()[i] = a.beta(r0 + i, hv);
  }
  gdn::chunk_gate_cumsum(sc.g.data(), 1, n, sc.gcum.data());
  const float glast = sc.gcum.data()[n - 1];
  for (int i = 0; i < n; ++i) {
    sc.coef.data()[i] = sc.beta.data()[i] * expf(sc.gcum.data()[i]);
    sc.kdecay.data()[i] = gdn::pair_decay(glast, sc.gcum.data()[i]);
  }
  // R = 8 entries side by side (Q is a multiple of 8; the buffers hold Q rows, so the rows past n that a
  // block touches exist and are simply not stored).
  constexpr int R = 8;
  float* tm = sc.t.data();
  for (int i = 0; i < n; ++i)
    for (int j0 = 0; j0 < i; j0 += R)
      gdn::wy_neg_a<R>(tm, Q, sc.k.data(), K, K, sc.gcum.data(), sc.beta.data(), i, j0, 1, n);
  wy_blocked_solve(tm, Q, n, sc.x.data());
  // W = T diag(beta e^G) K, U = T diag(beta) V, then V_new = U - W S_0 in place of U.
  for (int i = 0; i < n; ++i) {
    for (int d = 0; d < K; ++d) sc.w.data()[i * K + d] = gdn::wy_apply(tm, Q, sc.coef.data(), sc.k.data(), K, i, d);
    for (int c = 0; c < V; ++c) sc.u.data()[i * V + c] = gdn::wy_apply(tm, Q, sc.beta.data(), sc.v.data(), V, i, c);
  }
  for (int c = 0; c < V; ++c)
    for (int i0 = 0; i0 < n; i0 += R) gdn::wy_new_values<R>(sc.u.data(), V, sc.w.data(), K, S, V, c, K, i0, 1, n);
  // Causal scores over T (no longer needed), then outputs from S_0, then the end-of-chunk state.
  for (int i = 0; i < n; ++i)
    for (int j0 = 0; j0 <= i; j0 += R) gdn::causal_scores<R>(tm, Q, sc.q.data(), sc.k.data(), K, K, sc.gcum.data(), i, j0, 1, n);
  for (int c = 0; c < V; ++c)
    for (int i0 = 0; i0 < n; i0 += R) {
      float out[R];
      gdn::chunk_outputs<R>(out, sc.q.data(), K, S, V, c, K, sc.gcum.data(), tm, Q, sc.u.data(), V, i0, 1);
      for (int r = 0; r < R && i0 + r < n; ++r) a.out(r0 + i0 + r, hv, c) = from_float<T>(scale * out[r]);
    }
  const float decay_last = expf(glast);
  for (int c = 0; c < V; ++c) {
    int d0 = 0;
    for (; d0 + R <= K; d0 += R)
      gdn::chunk_states<R>(S, V, c, d0, 1, decay_last, sc.k.data(), K, sc.kdecay.data(), sc.u.data(), V, n);
    for (; d0 < K; ++d0)
      gdn::chunk_states<1>(S, V, c, d0, 1, decay_last, sc.k.data(), K, sc.kdecay.data(), sc.u.data(), V, n);
  }
}

} // namespace detail

/// Host chunked gated-delta prefill over a varlen batch: the math the CUDA kernel runs.
///
/// Effects: for every sequence s and value head, starts from `slots.initial[s]` (zero state if negative),
/// walks its tokens in chunks on the absolute grid (`chunk_end`: a sequence starting at p with p % Q != 0
/// first runs a short chunk up to the next multiple of Q), writes `out` for every token, the state at each capture
/// point to its slot, and the final state to `slots.final[s]` (if >= 0). Resuming from an fp32 capture at
/// its position reproduces the uninterrupted run bit for bit (states and outputs): a chunk's arithmetic
/// depends only on its start state and its own tokens.
/// Errors: as `validate_gated_delta`, `validate_batch` and `validate_prefill_slots` (chunk Q); on error
/// nothing is written.
/// Complexity: O(tokens x HV x (Q x K + K x V)) arithmetic; O(Q x (Q + K + V) + K x V) scratch.
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_chunked_prefill_host(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                              const varlen_batch& b, const prefill_slots& slots) {
  if (errc e = validate_gated_delta_prefill(a, o, b, slots); e != errc{}) return e;
  const std::int64_t H = a.q.extent(1), HV = a.v.extent(1), Q = o.chunk;
  detail::gated_delta_host_scratch sc(Q, a.q.extent(2), a.v.extent(2));
  std::vector<capture_point> caps(slots.captures.begin(), slots.captures.end());
  std::sort(caps.begin(), caps.end(), [](const capture_point& x, const capture_point& y) {
    return x.sequence != y.sequence ? x.sequence < y.sequence : x.position < y.position;
  });
  auto cap_first = caps.begin();
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    auto cap_last = cap_first;
    while (cap_last != caps.end() && cap_last->sequence == s) ++cap_last;
    const std::int64_t row0 = nth(b.cu_seqlens, s), start = nth(b.start_positions, s), end = b.end_position(s);
    for (std::int64_t hv = 0; hv < HV; ++hv) {
      const std::int64_t h = hv / (HV / H);
      detail::load_state(a.state_pool, nth(slots.initial, s), hv, sc.s.data());
      auto cap = cap_first;
      for (std::int64_t pos = start; pos < end;) {
        const std::int64_t next = chunk_end(pos, end, Q);
        detail::gated_delta_host_chunk(a, o, sc, row0 + (pos - start), static_cast<int>(next - pos), h, hv);
        pos = next;
        if (cap != cap_last && cap->position == pos) detail::store_state(a.state_pool, (cap++)->slot, hv, sc.s.data());
      }
      if (nth(slots.final, s) >= 0) detail::store_state(a.state_pool, nth(slots.final, s), hv, sc.s.data());
    }
    cap_first = cap_last;
  }
  return {};
}

/// Host recurrent gated-delta step (decode; or a few tokens per sequence for speculative verification).
///
/// Effects: for every non-padding sequence s, loads the state from `pairs[s].src`, applies the recurrence
/// token by token (writing `out` for each), stores the state after each token to the ring (if any) and the
/// final state to `pairs[s].dst`. Padding rows leave their outputs and all slots untouched. States after
/// decode steps are `decode_continuation` snapshots: bit-identical to the same session continuing, not to a
/// chunked prefill of the same tokens.
/// Errors: as `validate_gated_delta`, `validate_batch` and `validate_recurrent_slots`; on error nothing is
/// written.
/// Complexity: O(tokens x HV x K x V).
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_recurrent_step_host(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                             const varlen_batch& b, const recurrent_slots& r) {
  if (errc e = validate_gated_delta_step(a, o, b, r); e != errc{}) return e;
  const std::int64_t H = a.q.extent(1), K = a.q.extent(2), HV = a.v.extent(1), V = a.v.extent(2);
  const float scale = o.effective_scale(K);
  std::vector<float> S(static_cast<std::size_t>(K * V)), kr(static_cast<std::size_t>(K)), qr(static_cast<std::size_t>(K));
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    const copy_pair p = r.pairs[static_cast<std::size_t>(s)];
    if (p.src < 0 || p.dst < 0) continue;
    for (std::int64_t hv = 0; hv < HV; ++hv) {
      const std::int64_t h = hv / (HV / H);
      detail::load_state(a.state_pool, p.src, hv, S.data());
      for (std::int64_t i = 0; i < b.length(s); ++i) {
        const std::int64_t row = nth(b.cu_seqlens, s) + i;
        detail::load_key_row(a.k, row, h, kr.data(), o.l2norm_qk, o.l2norm_eps);
        detail::load_key_row(a.q, row, h, qr.data(), o.l2norm_qk, o.l2norm_eps);
        const float decay = expf(a.g(row, hv)), beta = a.beta(row, hv);
        for (std::int64_t c = 0; c < V; ++c)
          a.out(row, hv, c) = from_float<T>(scale * gdn::recurrent_column(&S[std::size_t(c)], static_cast<int>(V), kr.data(),
                                                                          qr.data(), static_cast<int>(K), decay, beta,
                                                                          to_float(a.v(row, hv, c))));
        if (r.ring_size > 0) {
          const std::int64_t pos = nth(b.start_positions, s) + i + 1;
          const std::int32_t slot = r.ring[static_cast<std::size_t>(s * r.ring_size + ring_index(pos, r.ring_size))];
          if (slot >= 0) detail::store_state(a.state_pool, slot, hv, S.data());
        }
      }
      detail::store_state(a.state_pool, p.dst, hv, S.data());
    }
  }
  return {};
}

// ---------------------------------------------------------------------------------------------------------
// Device launchers (reprise::kernels). Tensors are device memory; the batch and slot lists are host metadata,
// validated like the host implementations and uploaded into the workspace with one asynchronous copy.

/// The configurations this build instantiated (fp32 states): the reduced CI set has the small test shape
/// K32 V16 Q64, the full set adds Qwen3-Next (K128 V128 Q64); fp32 and bf16 inputs each.
std::span<const gated_delta_kernel_config> gated_delta_instantiated_configs() noexcept;

/// `errc{}` when this build has a kernel for `c`, else `unsupported_config`. Step configs have chunk 0.
errc gated_delta_supports(const gated_delta_kernel_config& c) noexcept;

/// Device workspace the launchers need for these operands. The launcher itself answers (it validates and
/// plans, then stops before the device), so the size always fits the launch; 0 when the launch would fail
/// validation or has no instance.
std::size_t gated_delta_chunked_prefill_workspace_bytes(const gated_delta_args<float>& a, const gated_delta_options& o,
                                                        const varlen_batch& b, const prefill_slots& slots) noexcept;
std::size_t gated_delta_chunked_prefill_workspace_bytes(const gated_delta_args<bfloat16>& a,
                                                        const gated_delta_options& o, const varlen_batch& b,
                                                        const prefill_slots& slots) noexcept;
/// (The recurrent-step entry points are templates over the activation and state-pool types, defined in
/// reprise::kernels for every pair: fp32 or bf16 activations, an fp32, bf16 or fp16 pool.)
template <activation_element T, gated_delta_state_element State>
std::size_t gated_delta_recurrent_step_workspace_bytes(const gated_delta_args<T, State>& a,
                                                       const gated_delta_options& o, const varlen_batch& b,
                                                       const recurrent_slots& r) noexcept;

/// Device chunked prefill: effects of `gated_delta_chunked_prefill_host`, stream-ordered.
/// Errors: as the host version (nothing launched); `unsupported_config` (no instantiation for K, V, Q);
/// `size_mismatch` (workspace too small); `device_error` / `no_device`.
/// Complexity: one kernel of S x HV x V/BV thread blocks, each sequential over its sequence's chunks.
result<void> gated_delta_chunked_prefill(const gated_delta_args<float>& a, const gated_delta_options& o,
                                         const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                                         stream_handle stream);
result<void> gated_delta_chunked_prefill(const gated_delta_args<bfloat16>& a, const gated_delta_options& o,
                                         const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                                         stream_handle stream);

/// Device recurrent step: effects of `gated_delta_recurrent_step_host`, stream-ordered. Bandwidth-bound:
/// each state is read once and written once (plus once per ring write) whatever the tokens per sequence.
/// A bf16 / fp16 pool is read as fp32, stepped in fp32 over all of a sequence's tokens, and rounded (to
/// nearest, ties to even) at each store (the final state, each ring write): the outputs and stored states
/// equal, bit for bit, those of the same kernel over an fp32 pool holding the widened state, each stored
/// state rounded.
/// Errors: as the host version (nothing launched); `unsupported_config`; `size_mismatch` (workspace);
/// `device_error` / `no_device`.
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_recurrent_step(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                        const varlen_batch& b, const recurrent_slots& r, device_workspace ws,
                                        stream_handle stream);

// ---- CUDA-graph capture (reprise::kernels) ---------------------------------------------------------------
// As for Mamba2 (`include/reprise/ops/mamba2.hpp`, "CUDA-graph capture"): the launchers above plan on the host
// and upload with a pageable copy, which a captured graph would freeze. The capture-safe form plans into bytes
// the engine owns (pinned memory it copies into the workspace, inside the graph or before it) and launches
// over them without uploading or allocating. One captured graph serves every plan of the same shape: new
// offsets, start positions, slots, capture lists and rings at each replay, bitwise equal to a direct launch.

/// What a captured chunked prefill is specialized to: its grid (sequences), its capture count and its bytes.
struct gated_delta_prefill_shape {
  std::int32_t sequences = 0;
  std::int32_t captures = 0;
  std::size_t metadata_bytes = 0; ///< the plan: the whole workspace the launch reads
  friend constexpr bool operator==(const gated_delta_prefill_shape&, const gated_delta_prefill_shape&) = default;
};

/// What a captured recurrent step is specialized to: its grid (sequences), its ring size and its bytes.
struct gated_delta_step_shape {
  std::int32_t sequences = 0;
  std::int32_t ring_size = 0;
  std::size_t metadata_bytes = 0; ///< the plan: the whole workspace the launch reads
  friend constexpr bool operator==(const gated_delta_step_shape&, const gated_delta_step_shape&) = default;
};

/// Plans a chunked prefill for a capture-safe launch. Effects: validates exactly as
/// `gated_delta_chunked_prefill`; writes the device metadata (sequence descriptors: token offsets, lengths,
/// start positions, initial and final slots; captures sorted per sequence) into `metadata` when it is not
/// empty. Returns the shape (with empty `metadata`: a size query).
/// Errors: as `gated_delta_chunked_prefill`'s validation and dispatch; `size_mismatch` (`metadata` non-empty
/// and smaller than `metadata_bytes`). Complexity: O(sequences + captures log captures).
result<gated_delta_prefill_shape> gated_delta_chunked_prefill_plan(const gated_delta_args<float>& a,
                                                                   const gated_delta_options& o, const varlen_batch& b,
                                                                   const prefill_slots& slots,
                                                                   std::span<std::byte> metadata);
result<gated_delta_prefill_shape> gated_delta_chunked_prefill_plan(const gated_delta_args<bfloat16>& a,
                                                                   const gated_delta_options& o, const varlen_batch& b,
                                                                   const prefill_slots& slots,
                                                                   std::span<std::byte> metadata);

/// Capture-safe chunked prefill: the kernel of `gated_delta_chunked_prefill`, reading the plan from the first
/// `shape.metadata_bytes` of `ws`, which the engine filled (stream-ordered before the launch) with the bytes
/// of `gated_delta_chunked_prefill_plan` for these operand extents. Launches only; no copy, allocation or
/// synchronization. The plan's indices are not read on the host: they were validated when planned.
/// Errors: as `validate_gated_delta`; `unsupported_config`; `invalid_argument` (negative counts);
/// `size_mismatch` (the shape's byte count does not match its counts, or `ws` is smaller); `device_error`.
result<void> gated_delta_chunked_prefill_planned(const gated_delta_args<float>& a, const gated_delta_options& o,
                                                 const gated_delta_prefill_shape& shape, device_workspace ws,
                                                 stream_handle stream);
result<void> gated_delta_chunked_prefill_planned(const gated_delta_args<bfloat16>& a, const gated_delta_options& o,
                                                 const gated_delta_prefill_shape& shape, device_workspace ws,
                                                 stream_handle stream);

/// Plans a recurrent step for a capture-safe launch. Effects: validates exactly as
/// `gated_delta_recurrent_step`; writes the device metadata (sequence descriptors with their (src, dst)
/// pair; the ring) into `metadata` when it is not empty. Returns the shape (with empty `metadata`: a size
/// query). Errors: as `gated_delta_recurrent_step`'s validation and dispatch; `size_mismatch` (`metadata`
/// non-empty and smaller than `metadata_bytes`). Complexity: O(sequences x (1 + ring_size)).
template <activation_element T, gated_delta_state_element State>
result<gated_delta_step_shape> gated_delta_recurrent_step_plan(const gated_delta_args<T, State>& a,
                                                               const gated_delta_options& o, const varlen_batch& b,
                                                               const recurrent_slots& r,
                                                               std::span<std::byte> metadata);

/// Capture-safe recurrent step: the kernel of `gated_delta_recurrent_step` over the bytes of
/// `gated_delta_recurrent_step_plan` at the start of `ws` (filled by the engine before the launch). Launches
/// only. Errors: as `validate_gated_delta`; `unsupported_config`; `invalid_argument` (negative counts);
/// `size_mismatch` (byte count, or `ws` smaller); `device_error`.
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_recurrent_step_planned(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                                const gated_delta_step_shape& shape, device_workspace ws,
                                                stream_handle stream);

} // namespace reprise::ops
