// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Mamba2 SSD chunked prefill with fp32 captures, and the selective state update (decode step).
///
/// Per head h (group g = h / (H / G)) and token t, with dt_t = transform_dt(dt[t, h], dt_bias[h]):
///   S_t = exp(dt_t A_h) S_{t-1} + dt_t x_t B_t^T               (S: [P, N], fp32)
///   y_t = (S_t C_t + D_h x_t) * silu(z_t)                       (gate only when z is given)
/// The chunked form (ssd_minimal_discrete in state-spaces/mamba) splits the tokens of a sequence on the
/// absolute chunk grid (`chunk_grid.hpp`); the per-chunk sums, with segment sums of A dt accumulated
/// directly rather than as differences of prefix sums, are in `mamba2_math.hpp`.
/// Each chunk is a pure function of S_prev and its own tokens, computed in a fixed order. A prefill resumed
/// from the fp32 state captured at a chunk boundary therefore repeats every later chunk bit for bit: aligned
/// restores are exact by construction, on the host and (between two device runs) on the device.

#include <reprise/errc.hpp>
#include <reprise/ops/chunk_grid.hpp>
#include <reprise/ops/mamba2_math.hpp>
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

/// Operands of a Mamba2 mixer's SSM part. Rows are tokens (prefill) or batch entries (decode). `State` is the
/// state pool's element type: fp32 (the default, and the only type the prefill takes), or bf16 / fp16 for the
/// decode update's lossy decode-continuation states (host and device).
template <activation_element T, state_element State = float>
struct mamba2_args {
  tensor<const T, 3> x;           ///< [rows, H, P]
  tensor<const T, 2> dt;          ///< [rows, H] raw dt (before bias, softplus and clamp)
  tensor<const float, 1> A;       ///< [H] negative decay rates (A = -exp(A_log))
  tensor<const T, 3> B;           ///< [rows, G, N]
  tensor<const T, 3> C;           ///< [rows, G, N]
  tensor<const float, 1> D;       ///< [H] skip weights, or absent
  tensor<const float, 1> dt_bias; ///< [H], or absent
  tensor<const T, 3> z;           ///< [rows, H, P] gate input, or absent
  tensor<State, 4> state_pool;    ///< [slots, H, P, N] SSM states
  tensor<T, 3> y;                 ///< [rows, H, P] output; must not alias an input
  std::int64_t chunk = 256;       ///< Q, prefill only: 64, 128 or 256
  dt_transform dt_mode{};
};

/// The sizes a Mamba2 kernel instantiation is compiled for.
struct mamba2_kernel_config {
  std::int64_t head_dim = 0;  ///< P
  std::int64_t state_dim = 0; ///< N
  std::int64_t chunk = 0;     ///< Q (0 for the decode update, which has no chunks)
  dtype input = dtype::bf16;  ///< element type of x, dt, B, C, z, y
  friend constexpr bool operator==(const mamba2_kernel_config&, const mamba2_kernel_config&) = default;
};

/// The configuration of `a` for a prefill (`chunked`) or a decode update.
template <activation_element T, state_element State>
mamba2_kernel_config config_of(const mamba2_args<T, State>& a, bool chunked) noexcept {
  return {a.x.extent(2), a.B.extent(2), chunked ? a.chunk : 0, dtype_of<T>};
}

/// Checks that the operands agree. Errors: `size_mismatch` (extents disagree); `invalid_argument` (H not a
/// multiple of G, or an empty dimension). Complexity: O(1).
template <activation_element T, state_element State>
errc validate_mamba2(const mamba2_args<T, State>& a) noexcept {
  const std::int64_t rows = a.x.extent(0), H = a.x.extent(1), P = a.x.extent(2);
  const std::int64_t G = a.B.extent(1), N = a.B.extent(2);
  if (H == 0 || P == 0 || G == 0 || N == 0 || H % G != 0) return errc::invalid_argument;
  if (a.dt.extent(0) != rows || a.dt.extent(1) != H || a.A.extent(0) != H) return errc::size_mismatch;
  if (a.B.extent(0) != rows || a.C.extent(0) != rows || a.C.extent(1) != G || a.C.extent(2) != N)
    return errc::size_mismatch;
  if (!is_absent(a.D) && a.D.extent(0) != H) return errc::size_mismatch;
  if (!is_absent(a.dt_bias) && a.dt_bias.extent(0) != H) return errc::size_mismatch;
  if (!is_absent(a.z) && (a.z.extent(0) != rows || a.z.extent(1) != H || a.z.extent(2) != P))
    return errc::size_mismatch;
  if (a.state_pool.extent(1) != H || a.state_pool.extent(2) != P || a.state_pool.extent(3) != N)
    return errc::size_mismatch;
  if (a.y.extent(0) != rows || a.y.extent(1) != H || a.y.extent(2) != P) return errc::size_mismatch;
  return errc{};
}

/// Everything a prefill checks before it reads or writes anything, shared by the host implementation, the
/// device launcher and its workspace query. Errors: as `validate_mamba2`; `unsupported_config` (Q not 64, 128
/// or 256); as `validate_batch`; as `validate_prefill_slots` on the chunk grid. Complexity: that of
/// `validate_prefill_slots`.
template <activation_element T>
errc validate_mamba2_prefill(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots) noexcept {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  if (a.chunk <= 0 || !is_supported_chunk(static_cast<std::uint32_t>(a.chunk))) return errc::unsupported_config;
  return validate_prefill(b, slots, a.x.extent(0), a.state_pool.extent(0), a.chunk);
}

/// Everything a decode update checks, shared like `validate_mamba2_prefill`. Errors: as `validate_mamba2`;
/// `size_mismatch` (pairs.size() != rows); as `validate_decode_slots`. Complexity: O(rows log rows).
template <activation_element T, state_element State>
errc validate_mamba2_update(const mamba2_args<T, State>& a, std::span<const copy_pair> pairs) noexcept {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  return validate_decode(pairs, a.x.extent(0), a.state_pool.extent(0));
}

namespace detail {

/// One sequence, one head, all of its chunks: the host SSD. Tokens [t0, t0 + end - p0) sit at absolute
/// positions [p0, end).
template <activation_element T>
void ssd_head_host(const mamba2_args<T>& a, std::int64_t t0, std::int64_t p0, std::int64_t end, std::int32_t initial,
                   std::int32_t final_slot, std::span<const capture_point> caps, std::int64_t h,
                   std::vector<float>& buf) {
  const std::int64_t P = a.x.extent(2), N = a.B.extent(2), Q = a.chunk;
  const std::int64_t g = h / (a.x.extent(1) / a.B.extent(1));
  const float A = a.A(h), bias = is_absent(a.dt_bias) ? 0.0f : a.dt_bias(h);
  const float Dh = is_absent(a.D) ? 0.0f : a.D(h);
  const bool has_z = !is_absent(a.z);
  const int iP = static_cast<int>(P), iN = static_cast<int>(N);
  buf.assign(static_cast<std::size_t>(P * N + 5 * Q + Q * (P + 2 * N)), 0.0f);
  float* S = buf.data();
  float* dtv = S + P * N;
  float* da = dtv + Q;
  float* acum = da + Q;
  float* seg = acum + Q;
  float* w = seg + Q;
  float* xs = w + Q;
  float* bs = xs + Q * P;
  float* cs = bs + Q * N;
  if (initial >= 0)
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t n = 0; n < N; ++n) S[p * N + n] = a.state_pool(initial, h, p, n);
  auto store = [&](std::int32_t slot) {
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t n = 0; n < N; ++n) a.state_pool(slot, h, p, n) = S[p * N + n];
  };
  for (std::int64_t pos = p0; pos < end;) {
    const std::int64_t next = chunk_end(pos, end, Q), r0 = t0 + (pos - p0);
    const int L = static_cast<int>(next - pos);
    for (int j = 0; j < L; ++j) {
      const std::int64_t r = r0 + j;
      dtv[j] = transform_dt(to_float(a.dt(r, h)), bias, a.dt_mode);
      da[j] = A * dtv[j];
      acum[j] = (j == 0 ? 0.0f : acum[j - 1]) + da[j];
      for (std::int64_t p = 0; p < P; ++p) xs[j * P + p] = to_float(a.x(r, h, p));
      for (std::int64_t n = 0; n < N; ++n) {
        bs[j * N + n] = to_float(a.B(r, g, n));
        cs[j * N + n] = to_float(a.C(r, g, n));
      }
    }
    for (int t = 0; t < L; ++t) {
      ssd_segsum_advance(seg, da, t); // seg[s] = seg(s, t)
      for (int s = 0; s <= t; ++s) w[s] = ssd_intra_weight(ssd_cb(cs + t * iN, bs + s * iN, iN), seg[s], dtv[s]);
      const float decay_t = expf(acum[t]);
      const std::int64_t r = r0 + t;
      for (std::int64_t p = 0; p < P; ++p) {
        float intra = 0.0f;
        for (int s = 0; s <= t; ++s) intra += w[s] * xs[s * iP + p];
        const float inter = ssd_cb(cs + t * iN, S + p * iN, iN);
        const float zv = has_z ? to_float(a.z(r, h, p)) : 0.0f;
        a.y(r, h, p) = from_float<T>(mamba2_output(intra + decay_t * inter, Dh, xs[t * iP + p], has_z, zv));
      }
    }
    // seg now holds seg(s, L - 1): the decay of each token to the chunk's end.
    const float decay = expf(acum[L - 1]);
    for (int s = 0; s < L; ++s) w[s] = ssd_state_weight(seg[s], dtv[s]);
    for (std::int64_t p = 0; p < P; ++p)
      for (std::int64_t n = 0; n < N; ++n) {
        float local = 0.0f;
        for (int s = 0; s < L; ++s) local += (w[s] * xs[s * iP + p]) * bs[s * iN + n];
        S[p * N + n] = ssd_pass_state(decay, S[p * N + n], local);
      }
    pos = next;
    for (const capture_point& c : caps)
      if (c.position == pos) store(c.slot);
  }
  if (final_slot >= 0) store(final_slot);
}

} // namespace detail

/// Host Mamba2 SSD chunked prefill over a varlen batch.
/// Effects: writes y for every token; reads each sequence's initial state (zero when negative), writes the
/// fp32 state at every capture point (a chunk end) and the final state into the live slot.
/// Errors: as `validate_mamba2`; `unsupported_config` (Q not 64, 128 or 256); as `validate_batch` and
/// `validate_prefill_slots` with the chunk grid (`misaligned` capture, slot `out_of_range`, ...). On error
/// nothing is written. Complexity: O(tokens x H x (Q (N + P) + P N)).
template <activation_element T>
result<void> mamba2_ssd_prefill_host(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots) {
  if (errc e = validate_mamba2_prefill(a, b, slots); e != errc{}) return e;
  std::vector<float> buf;
  std::vector<capture_point> caps;
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    caps.clear();
    for (const capture_point& c : slots.captures)
      if (c.sequence == s) caps.push_back(c);
    for (std::int64_t h = 0; h < a.x.extent(1); ++h)
      detail::ssd_head_host(a, nth(b.cu_seqlens, s), nth(b.start_positions, s), b.end_position(s),
                            nth(slots.initial, s), nth(slots.final, s), caps, h, buf);
  }
  return {};
}

/// Host selective state update (one decode token per row): row r reads state slot `pairs[r].src`, writes the
/// advanced state to `pairs[r].dst` (copy-on-write fused in; src == dst updates in place) and y[r]. Rows with
/// a negative index are padding: y[r] and every slot stay untouched.
/// Errors: as `validate_mamba2`; `size_mismatch` (pairs.size() != rows); as `validate_decode_slots`.
/// With a bf16 or fp16 pool the state is read as fp32, advanced and used for y in fp32, and rounded once
/// (to nearest, ties to even) when stored: y and the stored state equal, bit for bit, those of an fp32 pool
/// holding the widened state, the stored state rounded. Such states are decode continuations, never
/// prefill-exact.
/// Complexity: O(rows x H x P x N).
template <activation_element T, state_element State>
result<void> mamba2_state_update_host(const mamba2_args<T, State>& a, std::span<const copy_pair> pairs) {
  if (errc e = validate_mamba2_update(a, pairs); e != errc{}) return e;
  const std::int64_t H = a.x.extent(1), P = a.x.extent(2), N = a.B.extent(2), hpg = H / a.B.extent(1);
  for (std::int64_t r = 0; r < static_cast<std::int64_t>(pairs.size()); ++r) {
    const copy_pair pr = nth(pairs, r);
    if (pr.src < 0 || pr.dst < 0) continue;
    for (std::int64_t h = 0; h < H; ++h) {
      const std::int64_t g = h / hpg;
      const float dt = transform_dt(to_float(a.dt(r, h)), is_absent(a.dt_bias) ? 0.0f : a.dt_bias(h), a.dt_mode);
      const float decay = expf(dt * a.A(h)), Dh = is_absent(a.D) ? 0.0f : a.D(h);
      for (std::int64_t p = 0; p < P; ++p) {
        const float x = to_float(a.x(r, h, p)), dt_x = dt * x;
        float acc = 0.0f;
        for (std::int64_t n = 0; n < N; ++n) {
          const float s = ssm_step(to_float(a.state_pool(pr.src, h, p, n)), decay, dt_x, to_float(a.B(r, g, n)));
          a.state_pool(pr.dst, h, p, n) = from_float<State>(s);
          acc += s * to_float(a.C(r, g, n));
        }
        const bool has_z = !is_absent(a.z);
        a.y(r, h, p) = from_float<T>(mamba2_output(acc, Dh, x, has_z, has_z ? to_float(a.z(r, h, p)) : 0.0f));
      }
    }
  }
  return {};
}

// ---- device launchers (reprise::kernels) -------------------------------------------------------------------

/// The configurations this build instantiated (the reduced CI set or the full set).
std::span<const mamba2_kernel_config> mamba2_instantiated_configs() noexcept;

/// `errc{}` when this build has a kernel for `c`, else `unsupported_config`. Decode configs have chunk 0.
errc mamba2_supports(const mamba2_kernel_config& c) noexcept;

/// Device workspace `mamba2_ssd_prefill` needs for these operands: metadata plus per-chunk dt, cumulative
/// decay and chunk states (fp32 [chunks, H, P, N]). The launcher itself answers (it validates and plans, then
/// stops before the device), so the size always fits the launch; 0 when the launch would fail validation or
/// has no instance.
std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<float>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept;
std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<bfloat16>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept;

/// Device SSD chunked prefill: same effects and errors as the host version, plus `unsupported_config` when
/// this build has no instantiation for the sizes, `misaligned` (state pool not 16-byte aligned, or x, z, y
/// not aligned to four elements),
/// `size_mismatch` (workspace too small) and `device_error`.
/// Four kernels run on `stream`: chunk cumsum (CUB BlockScan), chunk states, state passing (captures, final
/// state) and chunk scan.
result<void> mamba2_ssd_prefill(const mamba2_args<float>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream);
result<void> mamba2_ssd_prefill(const mamba2_args<bfloat16>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream);

/// Device workspace `mamba2_state_update` needs for these operands, answered like the prefill's.
/// (The decode entry points are templates over the activation and state-pool types, defined in
/// reprise::kernels for every pair: fp32 or bf16 activations, an fp32, bf16 or fp16 pool.)
template <activation_element T, state_element State>
std::size_t mamba2_state_update_workspace_bytes(const mamba2_args<T, State>& a,
                                                std::span<const copy_pair> pairs) noexcept;

/// Device selective state update: as the host version (a bf16 / fp16 pool read as fp32 and rounded once on
/// store, to nearest, ties to even: the stored state and y equal, bit for bit, those of the same kernel over
/// an fp32 pool holding the widened state, the stored state rounded), plus the device errors above
/// (`misaligned`: a pool not on a 16-byte boundary, whatever its type).
template <activation_element T, state_element State>
result<void> mamba2_state_update(const mamba2_args<T, State>& a, std::span<const copy_pair> pairs,
                                 device_workspace ws, stream_handle stream);

// ---- CUDA-graph capture (reprise::kernels) ---------------------------------------------------------------
// The launchers above validate and plan on the host and upload the plan with a pageable copy: right for a
// direct call, wrong inside a captured graph, which would replay the first call's metadata forever. The
// capture-safe form splits them: the host plans into bytes the engine owns (pinned memory it copies into the
// workspace, inside the graph or before it), and the launch reads only device memory, uploads nothing and
// allocates nothing. One captured graph then serves every plan of the same shape: new offsets, slots and
// capture lists at each replay, bitwise equal to a direct launch of that plan.

/// What a captured prefill is specialized to: its grids (chunks, sequences) and its byte counts.
struct ssd_prefill_shape {
  std::int32_t chunks = 0;
  std::int32_t sequences = 0;
  std::size_t metadata_bytes = 0;  ///< the plan, at the start of the workspace
  std::size_t workspace_bytes = 0; ///< the plan and the kernels' scratch
  friend constexpr bool operator==(const ssd_prefill_shape&, const ssd_prefill_shape&) = default;
};

/// Plans a prefill for a capture-safe launch. Effects: validates exactly as `mamba2_ssd_prefill`; writes the
/// device metadata (chunk and sequence descriptors: token offsets, lengths, initial, final and capture
/// slots) into `metadata` when it is not empty. Returns the shape (with empty `metadata`: a size query).
/// Errors: as `mamba2_ssd_prefill`'s validation and dispatch; `size_mismatch` (`metadata` non-empty and
/// smaller than `metadata_bytes`). Complexity: O(chunks + captures x chunks of their sequence).
result<ssd_prefill_shape> mamba2_ssd_prefill_plan(const mamba2_args<float>& a, const varlen_batch& b,
                                                  const prefill_slots& slots, std::span<std::byte> metadata);
result<ssd_prefill_shape> mamba2_ssd_prefill_plan(const mamba2_args<bfloat16>& a, const varlen_batch& b,
                                                  const prefill_slots& slots, std::span<std::byte> metadata);

/// Capture-safe prefill: the kernels of `mamba2_ssd_prefill`, reading the plan from the first
/// `shape.metadata_bytes` of `ws`, which the engine filled (stream-ordered before the launch) with the bytes
/// of `mamba2_ssd_prefill_plan` for these operand extents. Launches only; no copy, allocation or
/// synchronization. The plan's indices are not read on the host: they were validated when planned.
/// Errors: as `validate_mamba2`; `unsupported_config`; `invalid_argument` (negative counts);
/// `size_mismatch` (the shape's byte counts do not match these extents, or `ws` is smaller);
/// `misaligned`; `device_error`.
result<void> mamba2_ssd_prefill_planned(const mamba2_args<float>& a, const ssd_prefill_shape& shape,
                                        device_workspace ws, stream_handle stream);
result<void> mamba2_ssd_prefill_planned(const mamba2_args<bfloat16>& a, const ssd_prefill_shape& shape,
                                        device_workspace ws, stream_handle stream);

/// Capture-safe decode update: as `mamba2_state_update`, with the (src, dst) pair of each of the x.extent(0)
/// rows read from device memory `pairs` at run time (the engine writes them, validated with
/// `validate_decode_slots`, before each replay; a negative index makes a padding row). Launches only.
/// Errors: as `validate_mamba2`; `invalid_argument` (null `pairs` with rows); `unsupported_config`;
/// `misaligned`; `device_error`.
template <activation_element T, state_element State>
result<void> mamba2_state_update_planned(const mamba2_args<T, State>& a, const copy_pair* pairs,
                                         stream_handle stream);

} // namespace reprise::ops
