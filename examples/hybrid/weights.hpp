// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Seeded weights for the example decoder: no downloads, the same values on every platform.

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace reprise::example {

/// SplitMix64: a tiny, portable generator, so weights are the same on every platform and standard library.
class weight_source {
public:
  explicit weight_source(std::uint64_t seed) : state_(seed) {}

  /// `n` values uniform in [-scale, scale).
  std::vector<float> uniform(std::size_t n, float scale) {
    std::vector<float> v(n);
    for (float& x : v) x = scale * (2.0f * unit() - 1.0f);
    return v;
  }
  /// `n` values uniform in [lo, hi).
  std::vector<float> range(std::size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (float& x : v) x = lo + (hi - lo) * unit();
    return v;
  }
  std::vector<float> constant(std::size_t n, float value) { return std::vector<float>(n, value); }
  /// A [in, out] projection with the usual 1/sqrt(in) scale.
  std::vector<float> projection(std::size_t in, std::size_t out) {
    return uniform(in * out, 1.0f / std::sqrt(static_cast<float>(in)));
  }

private:
  float unit() {
    std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (1.0f / 16777216.0f); // 24 random bits
  }
  std::uint64_t state_;
};

} // namespace reprise::example
