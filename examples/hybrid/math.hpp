// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The per-token arithmetic of the example decoder, fp32 on the host.
///
/// Bit-exactness of prefix caching rests on one property of this file: every output element of a token is
/// computed by the same operations in the same order whatever other tokens share the call. Each function
/// therefore works token by token with a fixed accumulation order: projections put the reduction index in the
/// outer loop and the output index in the inner one (vectorized without reassociating any sum), dot products
/// use fixed lanes and a fixed combining tree.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise::example::math {

/// out[t, j] = sum_k x[t, k] * w[k, j] (+ bias[j]) for `tokens` rows; `w` is [in, out] row-major.
inline void linear(const float* x, std::size_t tokens, std::size_t in, const float* w, std::size_t out,
                   float* y, const float* bias = nullptr) {
  for (std::size_t t = 0; t < tokens; ++t) {
    float* yt = y + t * out;
    for (std::size_t j = 0; j < out; ++j) yt[j] = bias ? bias[j] : 0.0f;
    const float* xt = x + t * in;
    for (std::size_t k = 0; k < in; ++k) {
      const float xk = xt[k];
      const float* wk = w + k * out;
      for (std::size_t j = 0; j < out; ++j) yt[j] += xk * wk[j];
    }
  }
}

/// sum_i a[i] * b[i] in eight interleaved partial sums combined by a fixed tree: a different order than a
/// sequential sum, but the same for every call, so a token's attention score has the same bits in any batch;
/// the lanes let the compiler vectorize without being allowed to reassociate.
inline float dot(const float* a, const float* b, std::size_t n) {
  constexpr std::size_t lanes = 8;
  float acc[lanes] = {};
  std::size_t i = 0;
  for (; i + lanes <= n; i += lanes)
    for (std::size_t l = 0; l < lanes; ++l) acc[l] += a[i + l] * b[i + l];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return (((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]))) + tail;
}

/// y = x / rms(x) * weight over rows of `width`.
inline void rms_norm(const float* x, std::size_t rows, std::size_t width, const float* weight, float eps,
                     float* y) {
  for (std::size_t r = 0; r < rows; ++r) {
    const float* xr = x + r * width;
    float ss = 0.0f;
    for (std::size_t i = 0; i < width; ++i) ss += xr[i] * xr[i];
    const float inv = 1.0f / std::sqrt(ss / static_cast<float>(width) + eps);
    float* yr = y + r * width;
    for (std::size_t i = 0; i < width; ++i) yr[i] = xr[i] * inv * weight[i];
  }
}

inline float silu(float v) { return v / (1.0f + std::exp(-v)); }

/// Rotary position embedding on one head vector (pairs i and i + dim/2), at absolute position `pos`.
inline void rope(float* v, std::size_t dim, std::uint32_t pos, float theta) {
  const std::size_t half = dim / 2;
  for (std::size_t i = 0; i < half; ++i) {
    const float freq = std::pow(theta, -static_cast<float>(2 * i) / static_cast<float>(dim));
    const float angle = static_cast<float>(pos) * freq;
    const float c = std::cos(angle), s = std::sin(angle);
    const float a = v[i], b = v[i + half];
    v[i] = a * c - b * s;
    v[i + half] = a * s + b * c;
  }
}

/// Index of the largest value; the lowest index wins ties, so greedy decoding is deterministic.
inline std::size_t argmax(std::span<const float> v) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < v.size(); ++i)
    if (v[i] > v[best]) best = i;
  return best;
}

} // namespace reprise::example::math
