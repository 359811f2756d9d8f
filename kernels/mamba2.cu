// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 launchers (include/reprise/ops/mamba2.hpp): host-side validation and chunk planning, the workspace,
// and the runtime dispatch from sizes to the instances compiled in mamba2_*.cu.
#include <reprise/ops/mamba2.hpp>

#include "mamba2.cuh"

#include <cstring>
#include <vector>

// The dispatch table, one row per shape (fp32 and bf16 inputs each). Reduced set (CI): the small test shape.
// Full set: Nemotron-H (P64 N128) at every chunk.
#if REPRISE_KERNELS_FULL
#define REPRISE_MAMBA2_FULL_SHAPES(X) X(64, 64, 128) X(128, 64, 128) X(256, 64, 128)
#else
#define REPRISE_MAMBA2_FULL_SHAPES(X)
#endif
#define REPRISE_MAMBA2_SHAPES(X) X(64, 16, 16) REPRISE_MAMBA2_FULL_SHAPES(X)
REPRISE_MAMBA2_SHAPES(REPRISE_DECLARE_MAMBA2_INSTANCES)

namespace reprise::ops {
namespace {
using device_runtime::workspace_layout;
const device_runtime::instance_row<device::mamba2_instance> rows[] = {
    REPRISE_MAMBA2_SHAPES(REPRISE_MAMBA2_INSTANCE_ROW)};
/// Decode configs (chunk 0) match the instance of any chunk.
const device_runtime::instance_table<device::mamba2_instance> table{rows};

/// The kernels move states four elements at a time (16 bytes of fp32, 8 of bf16 / fp16): the pool must start
/// on a 16-byte boundary (cudaMalloc gives 256) and N must be a multiple of 4 (every instantiated N is).
template <class S>
bool vector_aligned(const tensor<S, 4>& pool) noexcept {
  return reinterpret_cast<std::uintptr_t>(pool.data_handle()) % 16 == 0;
}

/// The chunk scan reads x and z and writes y four head-dim elements at a time (16 bytes of fp32, 8 of bf16).
template <class T>
bool rows_aligned(const mamba2_args<T>& a) noexcept {
  auto ok = [](const void* p) { return reinterpret_cast<std::uintptr_t>(p) % (4 * sizeof(T)) == 0; };
  return ok(a.x.data_handle()) && ok(a.y.data_handle()) && (is_absent(a.z) || ok(a.z.data_handle()));
}

/// The chunks of a batch on the absolute grid, with the capture slot of each chunk end.
struct ssd_plan {
  std::vector<device::ssd_chunk_desc> chunks;
  std::vector<device::ssd_seq_desc> seqs;
};

ssd_plan make_plan(const varlen_batch& b, const prefill_slots& slots, std::int64_t Q) {
  ssd_plan plan;
  std::vector<std::int64_t> ends; // absolute end position of each chunk
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    const auto first = static_cast<std::int32_t>(plan.chunks.size());
    const std::int64_t start = b.start_positions[s], end = b.end_position(s);
    for (std::int64_t pos = start; pos < end; pos = ends.back()) {
      ends.push_back(chunk_end(pos, end, Q));
      plan.chunks.push_back({b.cu_seqlens[s] + (pos - start), static_cast<std::int32_t>(ends.back() - pos), -1});
    }
    plan.seqs.push_back({first, static_cast<std::int32_t>(plan.chunks.size()) - first, slots.initial[s], slots.final[s]});
  }
  for (const capture_point& c : slots.captures) {
    const device::ssd_seq_desc& sq = plan.seqs[static_cast<std::size_t>(c.sequence)];
    for (std::int32_t k = sq.first_chunk; k < sq.first_chunk + sq.chunks; ++k)
      if (ends[static_cast<std::size_t>(k)] == c.position) plan.chunks[static_cast<std::size_t>(k)].capture_slot = c.slot;
  }
  return plan;
}

struct ssd_layout {
  std::size_t chunks, seqs, dt, acum, states;
  workspace_layout l;
  ssd_layout(std::size_t nc, std::size_t ns, std::int64_t H, std::int64_t P, std::int64_t N, std::int64_t Q) {
    chunks = l.take<device::ssd_chunk_desc>(nc);
    seqs = l.take<device::ssd_seq_desc>(ns);
    dt = l.take<float>(nc * static_cast<std::size_t>(H * Q));
    acum = l.take<float>(nc * static_cast<std::size_t>(H * Q));
    states = l.take<float>(nc * static_cast<std::size_t>(H * P * N));
  }
};

template <class T>
ssd_layout layout_of(const mamba2_args<T>& a, const ssd_plan& plan) {
  return ssd_layout(plan.chunks.size(), plan.seqs.size(), a.x.extent(1), a.x.extent(2), a.B.extent(2), a.chunk);
}

/// The prefill launcher; with `query` set, a workspace size query (`device_runtime::workspace_query`).
template <class T>
result<void> ssd_prefill(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots,
                         device_workspace ws, stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_mamba2_prefill(a, b, slots); e != errc{}) return e;
  auto inst = table.find<T>(config_of(a, true));
  if (!inst) return inst.error();
  const ssd_plan plan = make_plan(b, slots, a.chunk);
  const ssd_layout layout = layout_of(a, plan);
  if (!vector_aligned(a.state_pool) || !rows_aligned(a)) return errc::misaligned;
  if (auto done = device_runtime::meet_workspace(layout.l.bytes(), ws, query)) return *done;
  if (plan.seqs.empty()) return {};
  device_runtime::metadata_upload up(layout.dt); // metadata only: the scratch after it is device-written
  up.put<device::ssd_chunk_desc>(layout.chunks, plan.chunks);
  up.put<device::ssd_seq_desc>(layout.seqs, plan.seqs);
  if (auto r = up.upload(ws.data, stream); !r) return r;
  const device::ssd_workspace dws{device_runtime::at<device::ssd_chunk_desc>(ws.data, layout.chunks),
                                  device_runtime::at<device::ssd_seq_desc>(ws.data, layout.seqs),
                                  device_runtime::at<float>(ws.data, layout.dt),
                                  device_runtime::at<float>(ws.data, layout.acum),
                                  device_runtime::at<float>(ws.data, layout.states)};
  return (*inst)->ssd_prefill(a, dws, static_cast<int>(plan.chunks.size()), static_cast<int>(plan.seqs.size()), stream);
}

/// The decode launcher; with `query` set, a workspace size query.
template <class T, class S>
result<void> state_update(const mamba2_args<T, S>& a, std::span<const copy_pair> pairs, device_workspace ws,
                          stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_mamba2_update(a, pairs); e != errc{}) return e;
  auto inst = table.find<T>(config_of(a, false));
  if (!inst) return inst.error();
  workspace_layout l;
  const std::size_t off = l.take<copy_pair>(pairs.size());
  if (!vector_aligned(a.state_pool)) return errc::misaligned;
  if (auto done = device_runtime::meet_workspace(l.bytes(), ws, query)) return *done;
  if (pairs.empty()) return {};
  device_runtime::metadata_upload up(l.bytes());
  up.put<copy_pair>(off, pairs);
  if (auto r = up.upload(ws.data, stream); !r) return r;
  return (*inst)->template update_for<S>()(a, device_runtime::at<copy_pair>(ws.data, off),
                                           static_cast<int>(pairs.size()), stream);
}

/// Host planning for a capture-safe prefill: the bytes `ssd_prefill` would upload.
template <class T>
result<ssd_prefill_shape> prefill_plan(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots,
                                       std::span<std::byte> out) {
  if (errc e = validate_mamba2_prefill(a, b, slots); e != errc{}) return e;
  auto inst = table.find<T>(config_of(a, true));
  if (!inst) return inst.error();
  const ssd_plan plan = make_plan(b, slots, a.chunk);
  const ssd_layout layout = layout_of(a, plan);
  const ssd_prefill_shape shape{static_cast<std::int32_t>(plan.chunks.size()),
                                static_cast<std::int32_t>(plan.seqs.size()), layout.dt, layout.l.bytes()};
  if (out.empty()) return shape;
  if (out.size() < layout.dt) return errc::size_mismatch;
  std::memset(out.data(), 0, layout.dt); // the alignment padding too: equal plans give equal bytes
  if (!plan.chunks.empty())
    std::memcpy(out.data() + layout.chunks, plan.chunks.data(), plan.chunks.size() * sizeof(device::ssd_chunk_desc));
  if (!plan.seqs.empty())
    std::memcpy(out.data() + layout.seqs, plan.seqs.data(), plan.seqs.size() * sizeof(device::ssd_seq_desc));
  return shape;
}

/// The capture-safe prefill: the kernels of `ssd_prefill` over a plan already in the workspace.
template <class T>
result<void> prefill_planned(const mamba2_args<T>& a, const ssd_prefill_shape& shape, device_workspace ws,
                             stream_handle stream) {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  if (a.chunk <= 0 || !is_supported_chunk(static_cast<std::uint32_t>(a.chunk))) return errc::unsupported_config;
  auto inst = table.find<T>(config_of(a, true));
  if (!inst) return inst.error();
  if (shape.chunks < 0 || shape.sequences < 0) return errc::invalid_argument;
  const ssd_layout layout(static_cast<std::size_t>(shape.chunks), static_cast<std::size_t>(shape.sequences),
                          a.x.extent(1), a.x.extent(2), a.B.extent(2), a.chunk);
  if (layout.dt != shape.metadata_bytes || layout.l.bytes() != shape.workspace_bytes) return errc::size_mismatch;
  if (!vector_aligned(a.state_pool) || !rows_aligned(a)) return errc::misaligned;
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  if (shape.sequences == 0) return {};
  const device::ssd_workspace dws{device_runtime::at<device::ssd_chunk_desc>(ws.data, layout.chunks),
                                  device_runtime::at<device::ssd_seq_desc>(ws.data, layout.seqs),
                                  device_runtime::at<float>(ws.data, layout.dt),
                                  device_runtime::at<float>(ws.data, layout.acum),
                                  device_runtime::at<float>(ws.data, layout.states)};
  return (*inst)->ssd_prefill(a, dws, shape.chunks, shape.sequences, stream);
}

/// The capture-safe decode update: pairs already in device memory.
template <class T, class S>
result<void> state_update_planned(const mamba2_args<T, S>& a, const copy_pair* pairs, stream_handle stream) {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  auto inst = table.find<T>(config_of(a, false));
  if (!inst) return inst.error();
  if (!vector_aligned(a.state_pool)) return errc::misaligned;
  const std::int64_t rows = a.x.extent(0);
  if (rows == 0) return {};
  if (pairs == nullptr) return errc::invalid_argument;
  return (*inst)->template update_for<S>()(a, pairs, static_cast<int>(rows), stream);
}
} // namespace

std::span<const mamba2_kernel_config> mamba2_instantiated_configs() noexcept {
  static const std::vector<mamba2_kernel_config> configs = table.configs();
  return configs;
}

errc mamba2_supports(const mamba2_kernel_config& c) noexcept { return table.supports(c); }

std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<float>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(ssd_prefill<float>, a, b, slots);
}
std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<bfloat16>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(ssd_prefill<bfloat16>, a, b, slots);
}
result<void> mamba2_ssd_prefill(const mamba2_args<float>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream) {
  return ssd_prefill(a, b, slots, ws, stream);
}
result<void> mamba2_ssd_prefill(const mamba2_args<bfloat16>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream) {
  return ssd_prefill(a, b, slots, ws, stream);
}
template <activation_element T, state_element State>
std::size_t mamba2_state_update_workspace_bytes(const mamba2_args<T, State>& a,
                                                std::span<const copy_pair> pairs) noexcept {
  return device_runtime::workspace_query(state_update<T, State>, a, pairs);
}
template <activation_element T, state_element State>
result<void> mamba2_state_update(const mamba2_args<T, State>& a, std::span<const copy_pair> pairs,
                                 device_workspace ws, stream_handle stream) {
  return state_update(a, pairs, ws, stream);
}

result<ssd_prefill_shape> mamba2_ssd_prefill_plan(const mamba2_args<float>& a, const varlen_batch& b,
                                                  const prefill_slots& slots, std::span<std::byte> metadata) {
  return prefill_plan(a, b, slots, metadata);
}
result<ssd_prefill_shape> mamba2_ssd_prefill_plan(const mamba2_args<bfloat16>& a, const varlen_batch& b,
                                                  const prefill_slots& slots, std::span<std::byte> metadata) {
  return prefill_plan(a, b, slots, metadata);
}
result<void> mamba2_ssd_prefill_planned(const mamba2_args<float>& a, const ssd_prefill_shape& shape,
                                        device_workspace ws, stream_handle stream) {
  return prefill_planned(a, shape, ws, stream);
}
result<void> mamba2_ssd_prefill_planned(const mamba2_args<bfloat16>& a, const ssd_prefill_shape& shape,
                                        device_workspace ws, stream_handle stream) {
  return prefill_planned(a, shape, ws, stream);
}
template <activation_element T, state_element State>
result<void> mamba2_state_update_planned(const mamba2_args<T, State>& a, const copy_pair* pairs,
                                         stream_handle stream) {
  return state_update_planned(a, pairs, stream);
}

// The decode entry points of every (activation, pool) pair the header names.
#define REPRISE_MAMBA2_DECODE_ENTRY_POINTS(T, S)                                                                \
  template std::size_t mamba2_state_update_workspace_bytes(const mamba2_args<T, S>&,                           \
                                                           std::span<const copy_pair>) noexcept;               \
  template result<void> mamba2_state_update(const mamba2_args<T, S>&, std::span<const copy_pair>,              \
                                            device_workspace, stream_handle);                                  \
  template result<void> mamba2_state_update_planned(const mamba2_args<T, S>&, const copy_pair*, stream_handle);
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(float, float)
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(float, bfloat16)
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(float, float16)
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(bfloat16, float)
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(bfloat16, bfloat16)
REPRISE_MAMBA2_DECODE_ENTRY_POINTS(bfloat16, float16)
#undef REPRISE_MAMBA2_DECODE_ENTRY_POINTS

} // namespace reprise::ops
