// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Causal depthwise conv1d of Mamba2 and gated-delta mixers: varlen prefill with the conv window read from a
/// slot and captured at capture points, and the single-token decode update.
///
/// The conv state at position p is the last W-1 *pre-conv* inputs (positions p-W+1 .. p-1), oldest first,
/// stored as `[slots, W-1, C]`: restoring it and continuing is exact because it is a copy of inputs.
/// `out[t, c] = act(bias[c] + sum_k weight[c, k] * in[t - (W-1) + k, c])`, act = SiLU or identity.

#include <reprise/errc.hpp>
#include <reprise/ops/math.hpp>
#include <reprise/ops/slots.hpp>
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>
#include <reprise/state/shapes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::ops {

/// Operands of a causal conv1d call (prefill: rows are tokens; decode: rows are batch entries).
template <activation_element T>
struct conv1d_args {
  tensor<const T, 2> x;          ///< [rows, C] pre-conv inputs
  tensor<const float, 2> weight; ///< [C, W]
  tensor<const float, 1> bias;   ///< [C], or absent
  tensor<T, 3> conv_pool;        ///< [slots, W-1, C] conv windows
  tensor<T, 2> out;              ///< [rows, C]; must not alias x
  bool silu = true;              ///< apply SiLU to the output (Mamba2 and gated-delta mixers do)
};

/// One output channel: `bias + sum_k w[k] * window[k]` (window oldest first), then the activation.
/// The shared building block of the host implementation and both kernels.
template <int W>
REPRISE_HOST_DEVICE float conv1d_channel(const float (&window)[static_cast<unsigned>(W)], const float* w, float bias, bool act) noexcept {
  float acc = bias;
  REPRISE_UNROLL
  for (int k = 0; k < W; ++k) acc += w[k] * window[k];
  return act ? silu(acc) : acc;
}

/// Checks shapes. Errors: `unsupported_config` (W outside {2, 3, 4}); `size_mismatch` (extents disagree).
template <activation_element T>
errc validate_conv1d(const conv1d_args<T>& a) noexcept {
  const std::int64_t c = a.x.extent(1), w = a.weight.extent(1);
  if (!is_supported_conv_width(static_cast<std::uint32_t>(w))) return errc::unsupported_config;
  if (a.weight.extent(0) != c || a.conv_pool.extent(1) != w - 1 || a.conv_pool.extent(2) != c)
    return errc::size_mismatch;
  if (a.out.extent(0) != a.x.extent(0) || a.out.extent(1) != c) return errc::size_mismatch;
  if (!is_absent(a.bias) && a.bias.extent(0) != c) return errc::size_mismatch;
  return errc{};
}

/// Everything a prefill checks before it reads or writes anything, shared by the host implementation, the
/// device launcher and its workspace query. Errors: as `validate_conv1d`, `validate_batch` and
/// `validate_prefill_slots` (chunk 1). Complexity: that of `validate_prefill_slots`.
template <activation_element T>
errc validate_conv1d_prefill(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots) noexcept {
  if (errc e = validate_conv1d(a); e != errc{}) return e;
  return validate_prefill(b, slots, a.x.extent(0), a.conv_pool.extent(0), 1);
}

/// Everything a decode update checks, shared like `validate_conv1d_prefill`. Errors: as `validate_conv1d`;
/// `size_mismatch` (pairs.size() != rows); as `validate_decode_slots`. Complexity: O(rows log rows).
template <activation_element T>
errc validate_conv1d_update(const conv1d_args<T>& a, std::span<const copy_pair> pairs) noexcept {
  if (errc e = validate_conv1d(a); e != errc{}) return e;
  return validate_decode(pairs, a.x.extent(0), a.conv_pool.extent(0));
}

namespace detail {
template <int W, activation_element T>
void conv1d_prefill_host_w(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots) {
  const std::int64_t C = a.x.extent(1);
  std::vector<float> init_buf(static_cast<std::size_t>((W - 1) * C));
  float* init = init_buf.data();
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    const std::int64_t t0 = nth(b.cu_seqlens, s), len = b.length(s), p0 = nth(b.start_positions, s);
    const std::int32_t in_slot = nth(slots.initial, s);
    for (std::int64_t j = 0; j < W - 1; ++j)
      for (std::int64_t c = 0; c < C; ++c)
        init[j * C + c] = in_slot < 0 ? 0.0f : to_float(a.conv_pool(in_slot, j, c));
    // input at absolute position p of this sequence, p in [p0 - (W-1), p0 + len)
    auto input = [&](std::int64_t p, std::int64_t c) {
      return p >= p0 ? to_float(a.x(t0 + p - p0, c)) : init[(p - p0 + W - 1) * C + c];
    };
    for (std::int64_t i = 0; i < len; ++i)
      for (std::int64_t c = 0; c < C; ++c) {
        float window[static_cast<unsigned>(W)];
        for (int k = 0; k < W; ++k) window[k] = input(p0 + i - (W - 1) + k, c);
        const float bias = is_absent(a.bias) ? 0.0f : a.bias(c);
        a.out(t0 + i, c) = from_float<T>(conv1d_channel<W>(window, &a.weight(c, 0), bias, a.silu));
      }
    auto store = [&](std::int32_t slot, std::int64_t pos) {
      for (std::int64_t j = 0; j < W - 1; ++j)
        for (std::int64_t c = 0; c < C; ++c) a.conv_pool(slot, j, c) = from_float<T>(input(pos - (W - 1) + j, c));
    };
    for (const capture_point& cp : slots.captures)
      if (cp.sequence == s) store(cp.slot, cp.position);
    if (nth(slots.final, s) >= 0) store(nth(slots.final, s), p0 + len);
  }
}

template <int W, activation_element T>
void conv1d_update_host_w(const conv1d_args<T>& a, std::span<const copy_pair> pairs) {
  const std::int64_t C = a.x.extent(1);
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(pairs.size()); ++r) {
    const copy_pair p = nth(pairs, r);
    if (p.src < 0 || p.dst < 0) continue;
    for (std::int64_t c = 0; c < C; ++c) {
      float window[static_cast<unsigned>(W)];
      for (int k = 0; k < W - 1; ++k) window[k] = to_float(a.conv_pool(p.src, k, c));
      window[W - 1] = to_float(a.x(r, c));
      const float bias = is_absent(a.bias) ? 0.0f : a.bias(c);
      a.out(r, c) = from_float<T>(conv1d_channel<W>(window, &a.weight(c, 0), bias, a.silu));
      for (int k = 0; k < W - 1; ++k) a.conv_pool(p.dst, k, c) = from_float<T>(window[k + 1]);
    }
  }
}
} // namespace detail

/// Host causal conv1d prefill over a varlen batch.
/// Effects: writes `out` for every token; writes the conv window at each capture point and at each
/// sequence's end into the named slots (initial slots are read before anything is written).
/// Errors: as `validate_conv1d`, `validate_batch` and `validate_prefill_slots` (chunk 1); on error nothing is
/// written. Complexity: O(tokens x C x W).
template <activation_element T>
result<void> causal_conv1d_prefill_host(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots) {
  if (errc e = validate_conv1d_prefill(a, b, slots); e != errc{}) return e;
  switch (a.weight.extent(1)) {
  case 2: detail::conv1d_prefill_host_w<2>(a, b, slots); break;
  case 3: detail::conv1d_prefill_host_w<3>(a, b, slots); break;
  default: detail::conv1d_prefill_host_w<4>(a, b, slots); break;
  }
  return {};
}

/// Host causal conv1d decode step: row r reads window `pairs[r].src`, writes `out[r]` and the shifted window
/// to `pairs[r].dst` (fused copy-on-write; src == dst updates in place). Rows with a negative index are
/// padding and leave `out[r]` and every slot untouched.
/// Errors: as `validate_conv1d`; `size_mismatch` (pairs.size() != rows); as `validate_decode_slots`.
/// Complexity: O(rows x C x W).
template <activation_element T>
result<void> causal_conv1d_update_host(const conv1d_args<T>& a, std::span<const copy_pair> pairs) {
  if (errc e = validate_conv1d_update(a, pairs); e != errc{}) return e;
  switch (a.weight.extent(1)) {
  case 2: detail::conv1d_update_host_w<2>(a, pairs); break;
  case 3: detail::conv1d_update_host_w<3>(a, pairs); break;
  default: detail::conv1d_update_host_w<4>(a, pairs); break;
  }
  return {};
}

/// Device workspace the conv launchers need for these operands. The launcher itself answers (it validates and
/// plans, then stops before the device), so the size always fits the launch; 0 when the launch would fail
/// validation.
std::size_t causal_conv1d_prefill_workspace_bytes(const conv1d_args<float>& a, const varlen_batch& b,
                                                  const prefill_slots& slots) noexcept;
std::size_t causal_conv1d_prefill_workspace_bytes(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                                  const prefill_slots& slots) noexcept;
std::size_t causal_conv1d_update_workspace_bytes(const conv1d_args<float>& a, std::span<const copy_pair> pairs) noexcept;
std::size_t causal_conv1d_update_workspace_bytes(const conv1d_args<bfloat16>& a,
                                                 std::span<const copy_pair> pairs) noexcept;

/// Device causal conv1d prefill (reprise::kernels), same effects and errors as the host version plus
/// `size_mismatch` (workspace too small) and `device_error`. Tensors are device memory; `b` and `slots` are
/// host metadata.
result<void> causal_conv1d_prefill(const conv1d_args<float>& a, const varlen_batch& b, const prefill_slots& slots,
                                   device_workspace ws, stream_handle stream);
result<void> causal_conv1d_prefill(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                   const prefill_slots& slots, device_workspace ws, stream_handle stream);

/// Device causal conv1d decode step (reprise::kernels); `pairs` is host metadata.
result<void> causal_conv1d_update(const conv1d_args<float>& a, std::span<const copy_pair> pairs,
                                  device_workspace ws, stream_handle stream);
result<void> causal_conv1d_update(const conv1d_args<bfloat16>& a, std::span<const copy_pair> pairs,
                                  device_workspace ws, stream_handle stream);

// ---- CUDA-graph capture (reprise::kernels) ---------------------------------------------------------------
// As for Mamba2 (`include/reprise/ops/mamba2.hpp`, "CUDA-graph capture"): the capture-safe form plans into
// bytes the engine owns and copies into the workspace (inside the graph or before it), and launches over
// them without uploading or allocating. One captured graph serves every plan of the same shape.

/// What a captured prefill is specialized to: its grids (sequences, token tiles, window writes) and its bytes.
struct conv1d_prefill_shape {
  std::int32_t sequences = 0;
  std::int32_t tiles = 0;  ///< token tiles: the prefill kernel's grid (depends on the sequences' lengths)
  std::int32_t writes = 0; ///< window writes: one per capture and per sequence with a final slot
  std::size_t metadata_bytes = 0; ///< the plan: the whole workspace the launch reads
  friend constexpr bool operator==(const conv1d_prefill_shape&, const conv1d_prefill_shape&) = default;
};

/// Plans a prefill for a capture-safe launch. Effects: validates exactly as `causal_conv1d_prefill`; writes
/// the device metadata (sequence descriptors: token offsets, lengths, start positions, initial and final
/// slots; token tiles; window writes) into `metadata` when it is not empty. Returns the shape (with empty
/// `metadata`: a size query). Errors: as `causal_conv1d_prefill`'s validation; `size_mismatch` (`metadata`
/// non-empty and smaller than `metadata_bytes`). Complexity: O(sequences + tiles + captures).
result<conv1d_prefill_shape> causal_conv1d_prefill_plan(const conv1d_args<float>& a, const varlen_batch& b,
                                                        const prefill_slots& slots, std::span<std::byte> metadata);
result<conv1d_prefill_shape> causal_conv1d_prefill_plan(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                                        const prefill_slots& slots, std::span<std::byte> metadata);

/// Capture-safe prefill: the kernels of `causal_conv1d_prefill`, reading the plan from the first
/// `shape.metadata_bytes` of `ws`, which the engine filled (stream-ordered before the launch) with the bytes
/// of `causal_conv1d_prefill_plan` for these operand extents. Launches only; no copy, allocation or
/// synchronization. The plan's indices are not read on the host: they were validated when planned.
/// Errors: as `validate_conv1d`; `invalid_argument` (negative counts); `size_mismatch` (the shape's byte count
/// does not match its counts, or `ws` is smaller); `device_error`.
result<void> causal_conv1d_prefill_planned(const conv1d_args<float>& a, const conv1d_prefill_shape& shape,
                                           device_workspace ws, stream_handle stream);
result<void> causal_conv1d_prefill_planned(const conv1d_args<bfloat16>& a, const conv1d_prefill_shape& shape,
                                           device_workspace ws, stream_handle stream);

/// Capture-safe decode update: as `causal_conv1d_update`, with the (src, dst) pair of each of the
/// x.extent(0) rows read from device memory `pairs` at run time (the engine writes them, validated with
/// `validate_decode_slots`, before each replay; a negative index makes a padding row). Launches only.
/// Errors: as `validate_conv1d`; `invalid_argument` (null `pairs` with rows); `device_error`.
result<void> causal_conv1d_update_planned(const conv1d_args<float>& a, const copy_pair* pairs, stream_handle stream);
result<void> causal_conv1d_update_planned(const conv1d_args<bfloat16>& a, const copy_pair* pairs,
                                          stream_handle stream);

} // namespace reprise::ops
