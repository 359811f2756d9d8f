// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Launchers of the causal conv1d kernels (include/reprise/ops/conv1d.hpp), W in {2, 3, 4}, fp32 and bf16:
// direct (plan, upload, launch) and capture-safe (plan into engine-owned bytes; launch only).
#include <reprise/ops/conv1d.hpp>

#include "conv1d.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

namespace reprise::ops {
namespace {
using device_runtime::workspace_layout;

struct prefill_layout {
  std::size_t seqs, tiles, writes;
  workspace_layout l;
  prefill_layout(std::size_t ns, std::size_t nt, std::size_t nw) {
    seqs = l.take<device::seq_desc>(ns);
    tiles = l.take<device::token_tile>(nt);
    writes = l.take<device::conv_write>(nw);
  }
};

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// The host plan of a prefill: sequence descriptors, token tiles and window writes (captures, then finals).
struct prefill_plan_data {
  std::vector<device::seq_desc> seqs;
  std::vector<device::token_tile> tiles;
  std::vector<device::conv_write> writes;
  prefill_plan_data(const varlen_batch& b, const prefill_slots& slots) {
    const std::int64_t S = b.sequences();
    seqs.resize(static_cast<std::size_t>(S));
    for (std::int64_t s = 0; s < S; ++s) {
      seqs[s] = {b.cu_seqlens[s], b.length(s), b.start_positions[s], slots.initial[s], slots.final[s]};
      for (std::int64_t o = 0; o < b.length(s); o += device::conv_tile_tokens)
        tiles.push_back({static_cast<std::int32_t>(s), static_cast<std::int32_t>(o),
                         static_cast<std::int32_t>(std::min<std::int64_t>(device::conv_tile_tokens, b.length(s) - o))});
    }
    for (const capture_point& c : slots.captures) writes.push_back({c.position, c.sequence, c.slot});
    for (std::int64_t s = 0; s < S; ++s)
      if (slots.final[s] >= 0) writes.push_back({b.end_position(s), static_cast<std::int32_t>(s), slots.final[s]});
  }
  prefill_layout layout() const { return {seqs.size(), tiles.size(), writes.size()}; }
  /// The plan's bytes (`layout().l.bytes()` of them) into `out`.
  void write(std::span<std::byte> out) const {
    const prefill_layout l = layout();
    std::memset(out.data(), 0, l.l.bytes()); // the alignment padding too: equal plans give equal bytes
    if (!seqs.empty()) std::memcpy(out.data() + l.seqs, seqs.data(), seqs.size() * sizeof(device::seq_desc));
    if (!tiles.empty()) std::memcpy(out.data() + l.tiles, tiles.data(), tiles.size() * sizeof(device::token_tile));
    if (!writes.empty())
      std::memcpy(out.data() + l.writes, writes.data(), writes.size() * sizeof(device::conv_write));
  }
};

/// The prefill kernels over a plan already in the workspace (`layout` of `tiles` tiles and `writes` writes).
template <class T>
result<void> launch_prefill(const conv1d_args<T>& a, const prefill_layout& layout, std::size_t tiles,
                            std::size_t writes, device_workspace ws, stream_handle stream) {
  const std::int64_t C = a.x.extent(1);
  if (C == 0) return {};
  const auto* d_seqs = device_runtime::at<device::seq_desc>(ws.data, layout.seqs);
  const auto* d_tiles = device_runtime::at<device::token_tile>(ws.data, layout.tiles);
  const auto* d_writes = device_runtime::at<device::conv_write>(ws.data, layout.writes);
  const unsigned cblocks = static_cast<unsigned>((C + device::conv_threads - 1) / device::conv_threads);
  // 16-byte channel vectors when every row of x, out and the pool starts on a 16-byte boundary.
  constexpr int V = static_cast<int>(16 / sizeof(T));
  const bool vector = C % V == 0 && aligned16(a.x.data_handle()) && aligned16(a.out.data_handle()) &&
                      aligned16(a.conv_pool.data_handle());
  const unsigned vblocks = static_cast<unsigned>((C / V + device::conv_threads - 1) / device::conv_threads);
  auto launch = [&]<int W>() -> result<void> {
    const unsigned nt = static_cast<unsigned>(tiles);
    if (nt > 0 && vector)
      device::conv1d_prefill_kernel<W, V, T><<<dim3(nt, vblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_tiles);
    else if (nt > 0)
      device::conv1d_prefill_kernel<W, 1, T><<<dim3(nt, cblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_tiles);
    if (auto r = device_runtime::launch_status(); !r) return r;
    if (writes > 0)
      device::conv1d_store_kernel<W, T>
          <<<dim3(static_cast<unsigned>(writes), cblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_writes);
    return device_runtime::launch_status();
  };
  switch (a.weight.extent(1)) {
  case 2: return launch.template operator()<2>();
  case 3: return launch.template operator()<3>();
  default: return launch.template operator()<4>();
  }
}

/// The update kernel over `rows` (src, dst) pairs in device memory (rows > 0).
template <class T>
result<void> launch_update(const conv1d_args<T>& a, const copy_pair* d_pairs, std::int64_t rows,
                           stream_handle stream) {
  const std::int64_t C = a.x.extent(1);
  if (C == 0) return {};
  const dim3 grid(static_cast<unsigned>(rows),
                  static_cast<unsigned>((C + device::conv_threads - 1) / device::conv_threads));
  switch (a.weight.extent(1)) {
  case 2: device::conv1d_update_kernel<2, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  case 3: device::conv1d_update_kernel<3, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  default: device::conv1d_update_kernel<4, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  }
  return device_runtime::launch_status();
}

/// The prefill launcher; with `query` set, a workspace size query (`device_runtime::workspace_query`).
template <class T>
result<void> prefill(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                     stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_conv1d_prefill(a, b, slots); e != errc{}) return e;
  const prefill_plan_data plan(b, slots);
  const prefill_layout layout = plan.layout();
  if (auto done = device_runtime::meet_workspace(layout.l.bytes(), ws, query)) return *done;
  if (a.x.extent(1) == 0) return {};
  std::vector<std::byte> bytes(layout.l.bytes());
  plan.write(bytes);
  if (!bytes.empty())
    REPRISE_CUDA_TRY(cudaMemcpyAsync(ws.data, bytes.data(), bytes.size(), cudaMemcpyHostToDevice, stream));
  return launch_prefill(a, layout, plan.tiles.size(), plan.writes.size(), ws, stream);
}

/// The decode launcher; with `query` set, a workspace size query.
template <class T>
result<void> update(const conv1d_args<T>& a, std::span<const copy_pair> pairs, device_workspace ws,
                    stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_conv1d_update(a, pairs); e != errc{}) return e;
  workspace_layout l;
  const std::size_t off = l.take<copy_pair>(pairs.size());
  if (auto done = device_runtime::meet_workspace(l.bytes(), ws, query)) return *done;
  if (pairs.empty() || a.x.extent(1) == 0) return {};
  device_runtime::metadata_upload up(l.bytes());
  up.put<copy_pair>(off, pairs);
  if (auto r = up.upload(ws.data, stream); !r) return r;
  return launch_update(a, device_runtime::at<copy_pair>(ws.data, off), static_cast<std::int64_t>(pairs.size()),
                       stream);
}

/// Host planning for a capture-safe prefill: the bytes `prefill` would upload.
template <class T>
result<conv1d_prefill_shape> prefill_plan(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots,
                                          std::span<std::byte> out) {
  if (errc e = validate_conv1d_prefill(a, b, slots); e != errc{}) return e;
  const prefill_plan_data plan(b, slots);
  const prefill_layout layout = plan.layout();
  const conv1d_prefill_shape shape{static_cast<std::int32_t>(plan.seqs.size()),
                                   static_cast<std::int32_t>(plan.tiles.size()),
                                   static_cast<std::int32_t>(plan.writes.size()), layout.l.bytes()};
  if (out.empty()) return shape;
  if (out.size() < layout.l.bytes()) return errc::size_mismatch;
  plan.write(out);
  return shape;
}

/// The capture-safe prefill: the kernels of `prefill` over a plan already in the workspace.
template <class T>
result<void> prefill_planned(const conv1d_args<T>& a, const conv1d_prefill_shape& shape, device_workspace ws,
                             stream_handle stream) {
  if (errc e = validate_conv1d(a); e != errc{}) return e;
  if (shape.sequences < 0 || shape.tiles < 0 || shape.writes < 0) return errc::invalid_argument;
  const prefill_layout layout(static_cast<std::size_t>(shape.sequences), static_cast<std::size_t>(shape.tiles),
                              static_cast<std::size_t>(shape.writes));
  if (layout.l.bytes() != shape.metadata_bytes) return errc::size_mismatch;
  if (shape.tiles == 0 && shape.writes == 0) return {};
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  return launch_prefill(a, layout, static_cast<std::size_t>(shape.tiles), static_cast<std::size_t>(shape.writes), ws,
                        stream);
}

/// The capture-safe decode update: pairs already in device memory.
template <class T>
result<void> update_planned(const conv1d_args<T>& a, const copy_pair* pairs, stream_handle stream) {
  if (errc e = validate_conv1d(a); e != errc{}) return e;
  const std::int64_t rows = a.x.extent(0);
  if (rows == 0) return {};
  if (pairs == nullptr) return errc::invalid_argument;
  return launch_update(a, pairs, rows, stream);
}
} // namespace

std::size_t causal_conv1d_prefill_workspace_bytes(const conv1d_args<float>& a, const varlen_batch& b,
                                                  const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(prefill<float>, a, b, slots);
}
std::size_t causal_conv1d_prefill_workspace_bytes(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                                  const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(prefill<bfloat16>, a, b, slots);
}
std::size_t causal_conv1d_update_workspace_bytes(const conv1d_args<float>& a, std::span<const copy_pair> pairs) noexcept {
  return device_runtime::workspace_query(update<float>, a, pairs);
}
std::size_t causal_conv1d_update_workspace_bytes(const conv1d_args<bfloat16>& a,
                                                 std::span<const copy_pair> pairs) noexcept {
  return device_runtime::workspace_query(update<bfloat16>, a, pairs);
}

result<void> causal_conv1d_prefill(const conv1d_args<float>& a, const varlen_batch& b, const prefill_slots& slots,
                                   device_workspace ws, stream_handle stream) {
  return prefill(a, b, slots, ws, stream);
}
result<void> causal_conv1d_prefill(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                   const prefill_slots& slots, device_workspace ws, stream_handle stream) {
  return prefill(a, b, slots, ws, stream);
}
result<void> causal_conv1d_update(const conv1d_args<float>& a, std::span<const copy_pair> pairs,
                                  device_workspace ws, stream_handle stream) {
  return update(a, pairs, ws, stream);
}
result<void> causal_conv1d_update(const conv1d_args<bfloat16>& a, std::span<const copy_pair> pairs,
                                  device_workspace ws, stream_handle stream) {
  return update(a, pairs, ws, stream);
}

result<conv1d_prefill_shape> causal_conv1d_prefill_plan(const conv1d_args<float>& a, const varlen_batch& b,
                                                        const prefill_slots& slots, std::span<std::byte> metadata) {
  return prefill_plan(a, b, slots, metadata);
}
result<conv1d_prefill_shape> causal_conv1d_prefill_plan(const conv1d_args<bfloat16>& a, const varlen_batch& b,
                                                        const prefill_slots& slots, std::span<std::byte> metadata) {
  return prefill_plan(a, b, slots, metadata);
}
result<void> causal_conv1d_prefill_planned(const conv1d_args<float>& a, const conv1d_prefill_shape& shape,
                                           device_workspace ws, stream_handle stream) {
  return prefill_planned(a, shape, ws, stream);
}
result<void> causal_conv1d_prefill_planned(const conv1d_args<bfloat16>& a, const conv1d_prefill_shape& shape,
                                           device_workspace ws, stream_handle stream) {
  return prefill_planned(a, shape, ws, stream);
}
result<void> causal_conv1d_update_planned(const conv1d_args<float>& a, const copy_pair* pairs, stream_handle stream) {
  return update_planned(a, pairs, stream);
}
result<void> causal_conv1d_update_planned(const conv1d_args<bfloat16>& a, const copy_pair* pairs,
                                          stream_handle stream) {
  return update_planned(a, pairs, stream);
}

} // namespace reprise::ops
