// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Building blocks of the Mamba2 SSD, shared by the host implementation (`reprise/ops/mamba2.hpp`) and the
/// CUDA kernels (`kernels/mamba2.cuh`).
///
/// Per head, with step dt_t, a_t = A dt_t (<= 0), state S [P, N] (fp32) and, inside one chunk of n tokens,
/// the segment sums seg(s, t) = a_{s+1} + ... + a_t (0 when s >= t) and the prefix sums Acum_t = seg(-1, t):
///
///     y_t   = sum_{s<=t} (C_t . B_s) exp(seg(s, t)) dt_s x_s  +  exp(Acum_t) C_t S_prev  +  D x_t
///     S_end = exp(Acum_{n-1}) S_prev  +  sum_s exp(seg(s, n-1)) dt_s x_s B_s^T
///
/// The segment sums are accumulated from s forward (mamba_ssm's `segsum`), never taken as the difference
/// Acum_t - Acum_s of two prefix sums: with wide steps the prefix sums reach hundreds, and their difference
/// keeps their absolute rounding error while the decay it feeds is of order one. Since every a_t has the same
/// sign, a forward sum carries a relative error of a few ulps of the segment itself.
///
/// Every function below computes one entry of these sums with a fixed, sequential order of floating-point
/// operations over plain fp32 buffers. The host implementation loops over all entries; a CUDA thread block
/// assigns entries to threads. Either way a chunk is a pure function of (S_prev, the chunk's inputs), which is
/// what makes a resume from a captured fp32 state at a chunk boundary bitwise equal to the uninterrupted run
/// on the same implementation.

#include <reprise/config.hpp>
#include <reprise/ops/math.hpp>

namespace reprise::ops {

/// seg(s, t) = a[s+1] + ... + a[t], accumulated in increasing index order; 0 when s >= t.
REPRISE_HOST_DEVICE float ssd_segsum(const float* a, int s, int t) noexcept {
  float v = 0.0f;
  for (int r = s + 1; r <= t; ++r) v += a[r];
  return v;
}

/// Moves the segment sums of one chunk from ending at t - 1 to ending at t: seg[s] += a[t] for s < t, and
/// seg[t] = 0. After the calls for t = 0 .. T, seg[s] == ssd_segsum(a, s, T) bit for bit (the same additions
/// in the same order), for O(T) work per step instead of O(T^2).
REPRISE_HOST_DEVICE void ssd_segsum_advance(float* seg, const float* a, int t) noexcept {
  for (int s = 0; s < t; ++s) seg[s] += a[t];
  seg[t] = 0.0f;
}

/// C_t . B_s over the state dimension, accumulated in index order.
REPRISE_HOST_DEVICE float ssd_cb(const float* c, const float* b, int n) noexcept {
  float acc = 0.0f;
  for (int i = 0; i < n; ++i) acc += c[i] * b[i];
  return acc;
}

/// Weight of source token s in the output of token t >= s: `(C_t . B_s) exp(seg(s, t)) dt_s`.
REPRISE_HOST_DEVICE float ssd_intra_weight(float cb, float seg, float dt_s) noexcept { return cb * (expf(seg) * dt_s); }

/// Weight of token s in the chunk's local end state: `exp(seg(s, n-1)) dt_s`.
REPRISE_HOST_DEVICE float ssd_state_weight(float seg_to_last, float dt_s) noexcept { return expf(seg_to_last) * dt_s; }

/// State passing across one chunk: `S_end = decay * S_prev + local` (decay = exp(Acum_last)).
REPRISE_HOST_DEVICE float ssd_pass_state(float decay, float s_prev, float local) noexcept {
  return decay * s_prev + local;
}

/// One decode step of one state element: `s * exp(dt A) + (dt x) * b`.
REPRISE_HOST_DEVICE float ssm_step(float s, float decay, float dt_x, float b) noexcept { return s * decay + dt_x * b; }

/// Output of one (token, head, p): the SSM term plus the D skip, gated by silu(z) when z is given.
REPRISE_HOST_DEVICE float mamba2_output(float ssm, float d, float x, bool has_z, float z) noexcept {
  const float v = ssm + d * x;
  return has_z ? gate(v, z) : v;
}

} // namespace reprise::ops
