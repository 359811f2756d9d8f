// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Utilities shared by the state-kernel tests (host and GPU): seeded random operands, views over vectors and
// the relative RMS error the tolerances are stated in.
#include <reprise/ops/tensor.hpp>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace reprise::testing {

/// Seeded generator: every test draws fresh operands, and a failure reproduces from its seed.
class random_source {
public:
  explicit random_source(std::uint64_t seed) : engine_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(engine_); }
  std::int64_t integer(std::int64_t lo, std::int64_t hi) {
    return std::uniform_int_distribution<std::int64_t>(lo, hi)(engine_);
  }
  /// `n` values uniform in [lo, hi), rounded to `T`.
  template <class T>
  std::vector<T> values(std::size_t n, float lo, float hi) {
    std::vector<T> v(n);
    for (T& x : v) x = ops::from_float<T>(uniform(lo, hi));
    return v;
  }

private:
  std::mt19937_64 engine_;
};

/// A view of `v` with the given extents (row-major). The product of the extents must not exceed v.size().
template <class T, class... I>
ops::tensor<T, sizeof...(I)> view(std::vector<T>& v, I... extents) {
  return ops::tensor<T, sizeof...(I)>(v.data(), static_cast<std::int64_t>(extents)...);
}
template <class T, class... I>
ops::tensor<const T, sizeof...(I)> cview(const std::vector<T>& v, I... extents) {
  return ops::tensor<const T, sizeof...(I)>(v.data(), static_cast<std::int64_t>(extents)...);
}

/// Widened copy of a vector of fp32 or bf16 values.
template <class T>
std::vector<double> widen(const std::vector<T>& v) {
  std::vector<double> out(v.size());
  for (std::size_t i = 0; i < v.size(); ++i) out[i] = ops::to_float(v[i]);
  return out;
}

/// ||got - ref|| / ||ref|| (Euclidean); 0 when both are zero.
inline double relative_rms(const std::vector<double>& got, const std::vector<double>& ref) {
  double num = 0, den = 0;
  for (std::size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    num += (got[i] - ref[i]) * (got[i] - ref[i]);
    den += ref[i] * ref[i];
  }
  if (got.size() != ref.size()) return INFINITY;
  return den == 0 ? std::sqrt(num) : std::sqrt(num / den);
}

/// Bitwise equality of two buffers of trivially copyable elements.
template <class T>
bool bitwise_equal(const T* a, const T* b, std::size_t n) {
  return n == 0 || std::memcmp(a, b, n * sizeof(T)) == 0;
}

} // namespace reprise::testing
