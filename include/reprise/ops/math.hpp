// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Scalar building blocks shared by the host implementations and the CUDA kernels (`REPRISE_HOST_DEVICE`):
/// one definition of each formula, so the host tests exercise the math the device runs.

#include <reprise/config.hpp>

#include <math.h> // expf / log1pf: the same names resolve to the CUDA math library in device code

namespace reprise::ops {

/// `x * sigmoid(x)`.
REPRISE_HOST_DEVICE float silu(float x) noexcept { return x / (1.0f + expf(-x)); }

/// `log(1 + exp(x))`, returning x itself above 20 where the correction is below fp32 resolution (the
/// threshold mamba_ssm and PyTorch use).
REPRISE_HOST_DEVICE float softplus(float x) noexcept { return x > 20.0f ? x : log1pf(expf(x)); }

/// How a raw dt becomes the step size of a Mamba2 head: `dt = clamp(softplus?(raw + bias), lo, hi)`.
struct dt_transform {
  bool softplus = true;
  float min = 0.0f;
  float max = 3.0e38f; ///< "no upper limit" (finite, so the value is portable to device constant memory)
};

/// Applies `t` to a raw dt and its head's bias (0 when the model has none).
REPRISE_HOST_DEVICE float transform_dt(float raw, float bias, dt_transform t) noexcept {
  float v = raw + bias;
  if (t.softplus) v = softplus(v);
  v = v < t.min ? t.min : v;
  return v > t.max ? t.max : v;
}

/// Output gate of Mamba2: `y * silu(z)`.
REPRISE_HOST_DEVICE float gate(float y, float z) noexcept { return y * silu(z); }

} // namespace reprise::ops
