// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Building blocks of the gated delta rule, shared by the host implementation
/// (`reprise/ops/gated_delta.hpp`) and the CUDA kernels (`kernels/gated_delta.cuh`).
///
/// The recurrence, per value head, with state S [K, V] (fp32), key k_t and query q_t [K], value v_t [V],
/// log-decay g_t <= 0 and write strength beta_t in (0, 1):
///
///     S   <- exp(g_t) S
///     v'  =  beta_t (v_t - S^T k_t)
///     S   <- S + k_t v'^T
///     o_t =  scale S^T q_t
///
/// The chunked (WY) form over a chunk of n <= Q tokens, with the in-chunk cumulative gate G_i = g_0 + ... + g_i
/// (restarted at every chunk start, so a chunk's arithmetic never depends on where the sequence began):
///
///     A  = strict_lower(diag(beta) K K^T * exp(G_i - G_j)),   T = (I + A)^-1   (forward substitution)
///     W  = T diag(beta exp(G)) K,   U = T diag(beta) V,        V_new = U - W S_0
///     O  = scale (diag(exp(G)) Q S_0 + lower(Q K^T * exp(G_i - G_j)) V_new)
///     S_n = exp(G_{n-1}) S_0 + (K * exp(G_{n-1} - G_j))^T V_new
///
/// Every function below computes one entry (or R independent entries side by side) of one of these matrices
/// with a fixed, sequential order of floating-point operations over plain row-major buffers. The host
/// implementation loops over all entries; a CUDA thread block assigns entries to threads. Either way the arithmetic of a chunk is a pure function
/// of (S_0, the chunk's inputs), which is what makes a resume from a captured fp32 state at a chunk boundary
/// bitwise equal to the uninterrupted run on the same implementation.
///
/// All buffers here are fp32; the callers convert inputs and states (`ops::to_float`, `ops::from_float`)
/// at load and store time.

#include <reprise/config.hpp>

#include <math.h> // expf / sqrtf: the same names resolve to the CUDA math library in device code

namespace reprise::ops::gdn {

// ---------------------------------------------------------------------------------------------------------
// Scalars and dot products

/// exp(a - b) for a later gate a and an earlier gate b of the same chunk (the argument is <= 0, so no
/// overflow whatever the chunk length or the decay strength).
REPRISE_HOST_DEVICE float pair_decay(float gi, float gj) { return ::expf(gi - gj); }

/// sum_d a[d * sa] * b[d * sb], accumulated in index order.
REPRISE_HOST_DEVICE float dot(const float* a, int sa, const float* b, int sb, int n) {
  float acc = 0.0f;
  for (int d = 0; d < n; ++d) acc += a[d * sa] * b[d * sb];
  return acc;
}

/// 1 / sqrt(sum x^2 + eps): the L2 normalization factor of a query or key row (eps as in the reference
/// implementations, 1e-6), accumulated in index order.
REPRISE_HOST_DEVICE float l2_inv_norm(const float* x, int n, float eps) {
  float ss = 0.0f;
  for (int d = 0; d < n; ++d) ss += x[d] * x[d];
  return 1.0f / ::sqrtf(ss + eps);
}

/// Inclusive cumulative sum of the log-decays of one chunk (`g` with stride `sg`), restarted at 0 at the
/// chunk start. O(n), sequential on purpose: 64 additions are cheaper than any parallel scan's barriers and
/// the order is the same on host and device.
REPRISE_HOST_DEVICE void chunk_gate_cumsum(const float* g, int sg, int n, float* gcum) {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) {
    acc += g[i * sg];
    gcum[i] = acc;
  }
}

// ---------------------------------------------------------------------------------------------------------
// WY representation of one chunk. `k`, `q` are [n, K] with leading dimension ldk, `t` is [n, n] (ld ldt).

/// Rows per diagonal block of the blocked forward substitution.
inline constexpr int wy_block = 16;

/// Forward substitution for T = (I + A)^-1 (unit lower triangular; the diagonal is not stored), N = -A:
///     T_ic = N_ic + sum_{c<j<i} N_ij T_jc.
/// This returns the partial sum N_ic + sum_{c<j<end} N_ij T_jc. With end = i it is T_ic itself, used inside
/// a diagonal block of `wy_block` rows (row i solved after rows < i of its block, all columns of a row from
/// registers, so row i of N is read before it is overwritten). With end = the first row of i's block it is
/// entry (i, c) of X = sum_l N_{r,l} T_{l,m} that `wy_block_apply` turns into an off-diagonal block of T.
/// Blocking cuts the dependent chain from Q rows to `wy_block` rows plus Q / wy_block block rows, which
/// is what keeps the device solve short (34 barriers instead of 124 at Q = 64).
REPRISE_HOST_DEVICE float wy_solve(const float* t, int ldt, int i, int c, int end) {
  float acc = t[i * ldt + c];
  for (int j = c + 1; j < end; ++j) acc += t[i * ldt + j] * t[j * ldt + c];
  return acc;
}

/// Off-diagonal block entry: T_ic = X_ic + sum_{b<=x<i} T_ix X_xc, where b is the first row of i's block,
/// T_ix are the (finished) strict entries of the diagonal block and X (rows b.., leading dimension ldx) comes
/// from `wy_solve` with end = b.
REPRISE_HOST_DEVICE float wy_block_apply(const float* t, int ldt, const float* x, int ldx, int i, int c, int b) {
  float acc = x[(i - b) * ldx + c];
  for (int r = b; r < i; ++r) acc += t[i * ldt + r] * x[(r - b) * ldx + c];
  return acc;
}

/// Entry (i, col) of (I + strict_lower(T)) diag(coef) X:
///     coef_i x_i,col + sum_{j<i} T_ij (coef_j x_j,col).
/// With coef = beta exp(G) and X = K this is W; with coef = beta and X = V it is U.
REPRISE_HOST_DEVICE float wy_apply(const float* t, int ldt, const float* coef, const float* x, int ldx, int i,
                                   int col) {
  float acc = coef[i] * x[i * ldx + col];
  for (int j = 0; j < i; ++j) acc += t[i * ldt + j] * (coef[j] * x[j * ldx + col]);
  return acc;
}

// The matrix products of a chunk are computed R entries at a time: entries that share an operand (a column
// of S or of V_new, a row of k) load it once for all R accumulators. Each entry still sees exactly the
// operations, in exactly the order, of its own scalar loop; R only changes how many such loops run side by
// side. On the device this cuts shared-memory loads per FMA from two to about one. Entries are rows
// first + r * stride, r < R; rows past the chunk's end are computed (their buffers are allocated) but
// never stored.

/// Entries (i, j_r), j_r = j0 + r * dj, of the WY matrix -A (strict lower; 0 on and above the diagonal and
/// for rows >= n): -(beta_i k_i . k_j) exp(G_i - G_j). Row i of k is loaded once for the R dot products.
template <int R>
REPRISE_HOST_DEVICE void wy_neg_a(float* t, int ldt, const float* k, int ldk, int kdim, const float* gcum,
                                  const float* beta, int i, int j0, int dj, int n) {
  float acc[static_cast<unsigned>(R)];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int d = 0; d < kdim; ++d) {
    const float ki = k[i * ldk + d];
    for (int r = 0; r < R; ++r) acc[r] += ki * k[(j0 + r * dj) * ldk + d];
  }
  for (int r = 0; r < R; ++r) {
    const int j = j0 + r * dj;
    t[i * ldt + j] = (i < n && j < i) ? -(beta[i] * acc[r]) * pair_decay(gcum[i], gcum[j]) : 0.0f;
  }
}

/// Entries (i, j_r), j_r <= i < n, of the causal in-chunk scores P_ij = (q_i . k_j) exp(G_i - G_j).
template <int R>
REPRISE_HOST_DEVICE void causal_scores(float* p, int ldp, const float* q, const float* k, int ldk, int kdim,
                                       const float* gcum, int i, int j0, int dj, int n) {
  float acc[static_cast<unsigned>(R)];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int d = 0; d < kdim; ++d) {
    const float qi = q[i * ldk + d];
    for (int r = 0; r < R; ++r) acc[r] += qi * k[(j0 + r * dj) * ldk + d];
  }
  for (int r = 0; r < R; ++r) {
    const int j = j0 + r * dj;
    if (i < n && j <= i) p[i * ldp + j] = acc[r] * pair_decay(gcum[i], gcum[j]);
  }
}

/// Entries (i_r, c), i_r = i0 + r * di < n, of V_new = U - W S_0, in place of U. Column c of S_0 ([K, *],
/// leading dimension lds) is loaded once for the R rows.
template <int R>
REPRISE_HOST_DEVICE void wy_new_values(float* u, int ldu, const float* w, int ldw, const float* s, int lds, int c,
                                       int kdim, int i0, int di, int n) {
  float acc[static_cast<unsigned>(R)];
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  for (int d = 0; d < kdim; ++d) {
    const float sv = s[d * lds + c];
    for (int r = 0; r < R; ++r) acc[r] += w[(i0 + r * di) * ldw + d] * sv;
  }
  for (int r = 0; r < R; ++r)
    if (i0 + r * di < n) u[(i0 + r * di) * ldu + c] = u[(i0 + r * di) * ldu + c] - acc[r];
}

/// Entries (i_r, c), i_r = i0 + r * di, of the chunk output before `scale`:
///     exp(G_i) (q_i . S_0[:, c]) + sum_{j<=i} P_ij V_new[j, c]
/// into out[r]. Column c of S_0 and of V_new is loaded once for the R rows.
template <int R>
REPRISE_HOST_DEVICE void chunk_outputs(float (&out)[static_cast<unsigned>(R)], const float* q, int ldq, const float* s, int lds, int c,
                                       int kdim, const float* gcum, const float* p, int ldp, const float* vnew,
                                       int ldv, int i0, int di) {
  for (int r = 0; r < R; ++r) out[r] = 0.0f;
  for (int d = 0; d < kdim; ++d) {
    const float sv = s[d * lds + c];
    for (int r = 0; r < R; ++r) out[r] += q[(i0 + r * di) * ldq + d] * sv;
  }
  for (int r = 0; r < R; ++r) out[r] = out[r] * ::expf(gcum[i0 + r * di]);
  const int last = i0 + (R - 1) * di;
  for (int j = 0; j <= last; ++j) {
    const float vv = vnew[j * ldv + c];
    for (int r = 0; r < R; ++r)
      if (j <= i0 + r * di) out[r] += p[(i0 + r * di) * ldp + j] * vv;
  }
}

/// Entries (d_r, c), d_r = d0 + r * dd, of the end-of-chunk state, in place:
///     exp(G_{n-1}) S_0[d, c] + sum_{j<n} (k_j,d exp(G_{n-1} - G_j)) V_new[j, c]
/// (`kdecay[j]` = exp(G_{n-1} - G_j), `decay_last` = exp(G_{n-1})). Column c of V_new is loaded once for the
/// R rows.
template <int R>
REPRISE_HOST_DEVICE void chunk_states(float* s, int lds, int c, int d0, int dd, float decay_last, const float* k,
                                      int ldk, const float* kdecay, const float* vnew, int ldv, int n) {
  float acc[static_cast<unsigned>(R)];
  for (int r = 0; r < R; ++r) acc[r] = decay_last * s[(d0 + r * dd) * lds + c];
  for (int j = 0; j < n; ++j) {
    const float vv = vnew[j * ldv + c], kd = kdecay[j];
    for (int r = 0; r < R; ++r) acc[r] += (k[j * ldk + d0 + r * dd] * kd) * vv;
  }
  for (int r = 0; r < R; ++r) s[(d0 + r * dd) * lds + c] = acc[r];
}

// ---------------------------------------------------------------------------------------------------------
// Recurrent form (decode and short verification), one state column at a time.

// The recurrence for one column c of S is split into two passes over its rows; a CUDA thread holds a
// slice of rows of one column in registers, the host holds the whole column (one slice). Partial sums of
// the slices are added in slice order.

/// First pass over a slice of rows of column c: S[d, c] <- decay S[d, c]; returns sum_d S[d, c] k_d
/// (the slice's part of S^T k after the decay).
REPRISE_HOST_DEVICE float recurrent_decay_project(float* s, int ss, const float* k, int n, float decay) {
  float kv = 0.0f;
  for (int d = 0; d < n; ++d) {
    s[d * ss] *= decay;
    kv += s[d * ss] * k[d];
  }
  return kv;
}

/// The delta-rule write strength of column c: beta (v_c - (S^T k)_c).
REPRISE_HOST_DEVICE float recurrent_delta(float beta, float v_c, float kv) { return beta * (v_c - kv); }

/// Second pass: S[d, c] += k_d u_c; returns sum_d S[d, c] q_d (the slice's part of S^T q, before `scale`).
REPRISE_HOST_DEVICE float recurrent_write_project(float* s, int ss, const float* k, const float* q, int n, float u) {
  float o = 0.0f;
  for (int d = 0; d < n; ++d) {
    s[d * ss] += k[d] * u;
    o += s[d * ss] * q[d];
  }
  return o;
}

/// One token for a whole column (one slice): returns (S_new^T q)_c before `scale`.
REPRISE_HOST_DEVICE float recurrent_column(float* s_col, int ss, const float* k, const float* q, int kdim,
                                           float decay, float beta, float v_c) {
  const float kv = recurrent_decay_project(s_col, ss, k, kdim, decay);
  return recurrent_write_project(s_col, ss, k, q, kdim, recurrent_delta(beta, v_c, kv));
}

} // namespace reprise::ops::gdn
