// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What the recurrent mixers share: the translation of a forward call's sequences into the kernels' varlen
/// vocabulary, the causal conv1d call, and the gated per-head norm.

#include "hybrid/batch.hpp"
#include "hybrid/math.hpp"

#include <reprise/errc.hpp>
#include <reprise/ops/conv1d.hpp>
#include <reprise/ops/slots.hpp>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>
#include <vector>

namespace reprise::example::detail {

/// The engine validated the plan, so a kernel refusing its arguments is a bug in the example: stop loudly
/// (also in release builds, where `assert` is compiled out).
inline void check(const result<void>& r, const char* what) {
  if (r) return;
  std::fprintf(stderr, "reprise example model: %s failed: %.*s\n", what, static_cast<int>(to_string(r.error()).size()),
               to_string(r.error()).data());
  std::abort();
}


/// A forward call's sequences in the kernels' varlen vocabulary (`reprise/ops/slots.hpp`).
struct varlen_meta {
  std::vector<std::int32_t> cu_seqlens{0};
  std::vector<std::int64_t> start;
  std::vector<std::int32_t> initial, live;
  std::vector<ops::capture_point> captures; ///< (sequence, position, slot), by sequence then position
  std::vector<ops::copy_pair> in_place;     ///< decode: each live slot updated in place

  explicit varlen_meta(std::span<const sequence_step> steps) {
    for (std::size_t s = 0; s < steps.size(); ++s) {
      const sequence_step& st = steps[s];
      cu_seqlens.push_back(cu_seqlens.back() + static_cast<std::int32_t>(st.count));
      start.push_back(st.start);
      // A sequence at position 0 starts from the zero state; otherwise from its live slot, which holds
      // either its own state or a snapshot the engine restored into it.
      initial.push_back(st.start == 0 ? no_slot : st.live_slot);
      live.push_back(st.live_slot);
      for (capture_point c : st.captures) {
        c.sequence = static_cast<std::int32_t>(s);
        captures.push_back(c);
      }
      in_place.push_back({st.live_slot, st.live_slot});
    }
  }
  ops::varlen_batch batch() const { return {cu_seqlens, start}; }
  ops::prefill_slots slots() const { return {initial, live, captures}; }
  std::int64_t tokens() const { return cu_seqlens.back(); }
};

/// Causal conv1d (+ SiLU) of `in` ([tokens, C]) into `out` through the library's host kernel: the chunked
/// prefill variant with conv-window captures, or the decode update.
inline void causal_conv(pass p, const varlen_meta& m, const float* in, std::int64_t channels, const float* weight,
                 std::uint32_t width, const float* bias, float* pool, std::uint32_t slots, float* out) {
  ops::conv1d_args<float> a{
      .x = ops::tensor<const float, 2>(in, m.tokens(), channels),
      .weight = ops::tensor<const float, 2>(weight, channels, width),
      .bias = bias ? ops::tensor<const float, 1>(bias, channels) : ops::tensor<const float, 1>(),
      .conv_pool = ops::tensor<float, 3>(pool, slots, width - 1, channels),
      .out = ops::tensor<float, 2>(out, m.tokens(), channels),
      .silu = true};
  const result<void> r = p == pass::prefill ? ops::causal_conv1d_prefill_host(a, m.batch(), m.slots())
                                            : ops::causal_conv1d_update_host(a, m.in_place);
  check(r, "causal conv1d");
}

/// Per-head RMSNorm of `y` ([tokens, heads, dim]) scaled by `weight` ([dim], shared by heads) and gated by
/// silu(z), in place.
inline void gated_head_norm(float* y, const float* z, std::size_t rows, std::size_t dim, const float* weight, float eps) {
  for (std::size_t r = 0; r < rows; ++r) {
    float* v = y + r * dim;
    math::rms_norm(v, 1, dim, weight, eps, v);
    for (std::size_t i = 0; i < dim; ++i) v[i] *= math::silu(z[r * dim + i]);
  }
}

/// Copies columns [from, from + width) of a [rows, stride] matrix into a dense [rows, width] one.
inline std::vector<float> columns(const std::vector<float>& m, std::size_t rows, std::size_t stride, std::size_t from,
                           std::size_t width) {
  std::vector<float> out(rows * width);
  for (std::size_t r = 0; r < rows; ++r) std::memcpy(&out[r * width], &m[r * stride + from], width * sizeof(float));
  return out;
}

} // namespace reprise::example::detail
