// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Launchers of the causal conv1d kernels (include/reprise/ops/conv1d.hpp), W in {2, 3, 4}, fp32 and bf16.
#include <reprise/ops/conv1d.hpp>

#include "conv1d.cuh"

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

/// The prefill launcher; with `query` set, a workspace size query (`device_runtime::workspace_query`).
template <class T>
result<void> prefill(const conv1d_args<T>& a, const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                     stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_conv1d_prefill(a, b, slots); e != errc{}) return e;
  const std::int64_t S = b.sequences();
  std::vector<device::seq_desc> seqs(static_cast<std::size_t>(S));
  std::vector<device::token_tile> tiles;
  std::vector<device::conv_write> writes;
  for (std::int64_t s = 0; s < S; ++s) {
    seqs[s] = {b.cu_seqlens[s], b.length(s), b.start_positions[s], slots.initial[s], slots.final[s]};
    for (std::int64_t o = 0; o < b.length(s); o += device::conv_tile_tokens)
      tiles.push_back({static_cast<std::int32_t>(s), static_cast<std::int32_t>(o),
                       static_cast<std::int32_t>(std::min<std::int64_t>(device::conv_tile_tokens, b.length(s) - o))});
  }
  for (const capture_point& c : slots.captures) writes.push_back({c.position, c.sequence, c.slot});
  for (std::int64_t s = 0; s < S; ++s)
    if (slots.final[s] >= 0) writes.push_back({b.end_position(s), static_cast<std::int32_t>(s), slots.final[s]});
  const prefill_layout layout(seqs.size(), tiles.size(), writes.size());
  if (auto done = device_runtime::meet_workspace(layout.l.bytes(), ws, query)) return *done;
  const std::int64_t C = a.x.extent(1);
  if (C == 0) return {};
  device_runtime::metadata_upload up(layout.l.bytes());
  up.put<device::seq_desc>(layout.seqs, seqs);
  up.put<device::token_tile>(layout.tiles, tiles);
  up.put<device::conv_write>(layout.writes, writes);
  if (auto r = up.upload(ws.data, stream); !r) return r;
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
    const unsigned nt = static_cast<unsigned>(tiles.size());
    if (nt > 0 && vector)
      device::conv1d_prefill_kernel<W, V, T><<<dim3(nt, vblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_tiles);
    else if (nt > 0)
      device::conv1d_prefill_kernel<W, 1, T><<<dim3(nt, cblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_tiles);
    if (auto r = device_runtime::launch_status(); !r) return r;
    if (!writes.empty())
      device::conv1d_store_kernel<W, T>
          <<<dim3(static_cast<unsigned>(writes.size()), cblocks), device::conv_threads, 0, stream>>>(a, d_seqs, d_writes);
    return device_runtime::launch_status();
  };
  switch (a.weight.extent(1)) {
  case 2: return launch.template operator()<2>();
  case 3: return launch.template operator()<3>();
  default: return launch.template operator()<4>();
  }
}

/// The decode launcher; with `query` set, a workspace size query.
template <class T>
result<void> update(const conv1d_args<T>& a, std::span<const copy_pair> pairs, device_workspace ws,
                    stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_conv1d_update(a, pairs); e != errc{}) return e;
  workspace_layout l;
  const std::size_t off = l.take<copy_pair>(pairs.size());
  if (auto done = device_runtime::meet_workspace(l.bytes(), ws, query)) return *done;
  const std::int64_t C = a.x.extent(1);
  if (pairs.empty() || C == 0) return {};
  device_runtime::metadata_upload up(l.bytes());
  up.put<copy_pair>(off, pairs);
  if (auto r = up.upload(ws.data, stream); !r) return r;
  const dim3 grid(static_cast<unsigned>(pairs.size()),
                  static_cast<unsigned>((C + device::conv_threads - 1) / device::conv_threads));
  const auto* d_pairs = device_runtime::at<copy_pair>(ws.data, off);
  switch (a.weight.extent(1)) {
  case 2: device::conv1d_update_kernel<2, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  case 3: device::conv1d_update_kernel<3, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  default: device::conv1d_update_kernel<4, T><<<grid, device::conv_threads, 0, stream>>>(a, d_pairs); break;
  }
  return device_runtime::launch_status();
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

} // namespace reprise::ops
