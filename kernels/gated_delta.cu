// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Launchers and runtime dispatch of the gated-delta kernels (include/reprise/ops/gated_delta.hpp). The
// kernels themselves are instantiated in gated_delta_small.cu and gated_delta_qwen3_next.full.cu; this file
// only declares them, validates and plans the host metadata, uploads it (or, capture-safe, leaves that to the
// engine) and picks the instance.
#include <reprise/ops/gated_delta.hpp>

#include "gated_delta.cuh"

#include <algorithm>
#include <cstring>
#include <vector>

// The dispatch table, one row per shape (fp32 and bf16 inputs each). Reduced set (CI): the small test shape.
// Full set: Qwen3-Next (K128 V128 Q64).
#if REPRISE_KERNELS_FULL
#define REPRISE_GATED_DELTA_FULL_SHAPES(X) X(64, 128, 128)
#else
#define REPRISE_GATED_DELTA_FULL_SHAPES(X)
#endif
#define REPRISE_GATED_DELTA_SHAPES(X) X(64, 32, 16) REPRISE_GATED_DELTA_FULL_SHAPES(X)
REPRISE_GATED_DELTA_SHAPES(REPRISE_DECLARE_GATED_DELTA_INSTANCES)

namespace reprise::ops {
namespace {
using device_runtime::workspace_layout;

struct prefill_layout {
  std::size_t seqs, captures, capture_begin;
  workspace_layout l;
  prefill_layout(std::size_t ns, std::size_t nc) {
    seqs = l.take<device::gd_seq>(ns);
    captures = l.take<device::gd_capture>(nc);
    capture_begin = l.take<std::int32_t>(ns + 1);
  }
};

struct step_layout {
  std::size_t seqs, ring;
  workspace_layout l;
  step_layout(std::size_t ns, std::size_t nr) {
    seqs = l.take<device::gd_seq>(ns);
    ring = l.take<std::int32_t>(nr);
  }
};

const device_runtime::instance_row<device::gated_delta_instance> rows[] = {
    REPRISE_GATED_DELTA_SHAPES(REPRISE_GATED_DELTA_INSTANCE_ROW)};
/// Step configs (chunk 0) match the instance of any chunk.
const device_runtime::instance_table<device::gated_delta_instance> table{rows};

/// The operands both kernels share, from the public argument set.
template <class T, class S>
device::gd_operands<T, S> operands_of(const gated_delta_args<T, S>& a, const gated_delta_options& o) {
  return {a.q.data_handle(),
          a.k.data_handle(),
          a.v.data_handle(),
          a.g.data_handle(),
          a.beta.data_handle(),
          a.out.data_handle(),
          a.state_pool.data_handle(),
          static_cast<std::int32_t>(a.state_pool.extent(0)),
          static_cast<std::int32_t>(a.q.extent(1)),
          static_cast<std::int32_t>(a.v.extent(1)),
          o.effective_scale(a.q.extent(2)),
          o.l2norm_eps,
          o.l2norm_qk};
}

/// The prefill plan's bytes (sequence descriptors, captures sorted by sequence and position, each
/// sequence's first capture) for validated metadata, into `out` (`layout.l.bytes()` of them).
void write_prefill_plan(const varlen_batch& b, const prefill_slots& slots, const prefill_layout& layout,
                        std::span<std::byte> out) {
  const std::int64_t S = b.sequences();
  std::vector<device::gd_seq> seqs(static_cast<std::size_t>(S));
  for (std::int64_t s = 0; s < S; ++s)
    seqs[static_cast<std::size_t>(s)] = {b.cu_seqlens[s], b.length(s), b.start_positions[s], slots.initial[s],
                                         slots.final[s]};
  std::vector<device::gd_capture> caps;
  caps.reserve(slots.captures.size());
  for (const capture_point& c : slots.captures) caps.push_back({c.position, c.slot, c.sequence});
  std::sort(caps.begin(), caps.end(), [](const device::gd_capture& x, const device::gd_capture& y) {
    return x.seq != y.seq ? x.seq < y.seq : x.position < y.position;
  });
  std::vector<std::int32_t> begin(static_cast<std::size_t>(S) + 1, 0);
  for (const auto& c : caps) ++begin[static_cast<std::size_t>(c.seq) + 1];
  for (std::size_t s = 0; s < static_cast<std::size_t>(S); ++s) begin[s + 1] += begin[s];
  std::memset(out.data(), 0, layout.l.bytes()); // the alignment padding too: equal plans give equal bytes
  if (!seqs.empty()) std::memcpy(out.data() + layout.seqs, seqs.data(), seqs.size() * sizeof(device::gd_seq));
  if (!caps.empty())
    std::memcpy(out.data() + layout.captures, caps.data(), caps.size() * sizeof(device::gd_capture));
  std::memcpy(out.data() + layout.capture_begin, begin.data(), begin.size() * sizeof(std::int32_t));
}

/// The step plan's bytes (sequence descriptors with their (src, dst) pair, the ring) into `out`.
void write_step_plan(const varlen_batch& b, const recurrent_slots& r, const step_layout& layout,
                     std::span<std::byte> out) {
  const std::int64_t S = b.sequences();
  std::vector<device::gd_seq> seqs(static_cast<std::size_t>(S));
  for (std::int64_t s = 0; s < S; ++s) {
    const copy_pair pr = r.pairs[static_cast<std::size_t>(s)];
    seqs[static_cast<std::size_t>(s)] = {b.cu_seqlens[s], b.length(s), b.start_positions[s], pr.src, pr.dst};
  }
  std::memset(out.data(), 0, layout.l.bytes());
  if (!seqs.empty()) std::memcpy(out.data() + layout.seqs, seqs.data(), seqs.size() * sizeof(device::gd_seq));
  if (!r.ring.empty()) std::memcpy(out.data() + layout.ring, r.ring.data(), r.ring.size_bytes());
}

/// One pageable copy of a host plan into the workspace (the direct launchers).
result<void> upload_plan(const std::vector<std::byte>& plan, device_workspace ws, stream_handle stream) {
  if (plan.empty()) return {};
  REPRISE_CUDA_TRY(cudaMemcpyAsync(ws.data, plan.data(), plan.size(), cudaMemcpyHostToDevice, stream));
  return {};
}

/// The prefill kernel over a plan already in the workspace (`layout`, `S` sequences, S > 0).
template <class T>
result<void> launch_prefill(const gated_delta_args<T>& a, const gated_delta_options& o,
                            const device::gated_delta_instance<T>* inst, const prefill_layout& layout, std::int32_t S,
                            device_workspace ws, stream_handle stream) {
  const device::gd_prefill_params<T, float> p{
      {operands_of(a, o)},
      device_runtime::at<device::gd_seq>(ws.data, layout.seqs),
      device_runtime::at<device::gd_capture>(ws.data, layout.captures),
      device_runtime::at<std::int32_t>(ws.data, layout.capture_begin)};
  return inst->chunked_prefill(p, S, stream);
}

/// The step kernel over a plan already in the workspace (S > 0), for the pool's type `State`.
template <class T, class State>
result<void> launch_step(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                         const device::gated_delta_instance<T>* inst, const step_layout& layout, std::int32_t S,
                         std::int32_t ring_size, device_workspace ws, stream_handle stream) {
  const device::gd_step_params<T, State> p{
      {operands_of(a, o)},
      device_runtime::at<device::gd_seq>(ws.data, layout.seqs),
      ring_size > 0 ? device_runtime::at<std::int32_t>(ws.data, layout.ring) : nullptr,
      ring_size};
  return inst->template step_for<State>()(p, S, stream);
}

/// The prefill launcher; with `query` set, a workspace size query (`device_runtime::workspace_query`).
template <class T>
result<void> prefill(const gated_delta_args<T>& a, const gated_delta_options& o, const varlen_batch& b,
                     const prefill_slots& slots, device_workspace ws, stream_handle stream,
                     std::size_t* query = nullptr) {
  if (errc e = validate_gated_delta_prefill(a, o, b, slots); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, true));
  if (!inst) return inst.error();
  const std::int64_t S = b.sequences();
  const prefill_layout layout(static_cast<std::size_t>(S), slots.captures.size());
  if (auto done = device_runtime::meet_workspace(layout.l.bytes(), ws, query)) return *done;
  if (S == 0) return {};
  std::vector<std::byte> plan(layout.l.bytes());
  write_prefill_plan(b, slots, layout, plan);
  if (auto r = upload_plan(plan, ws, stream); !r) return r;
  return launch_prefill(a, o, *inst, layout, static_cast<std::int32_t>(S), ws, stream);
}

/// The step launcher; with `query` set, a workspace size query.
template <class T, class State>
result<void> step(const gated_delta_args<T, State>& a, const gated_delta_options& o, const varlen_batch& b,
                  const recurrent_slots& r, device_workspace ws, stream_handle stream, std::size_t* query = nullptr) {
  if (errc e = validate_gated_delta_step(a, o, b, r); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, false));
  if (!inst) return inst.error();
  const std::int64_t S = b.sequences();
  const step_layout layout(static_cast<std::size_t>(S), r.ring.size());
  if (auto done = device_runtime::meet_workspace(layout.l.bytes(), ws, query)) return *done;
  if (S == 0) return {};
  std::vector<std::byte> plan(layout.l.bytes());
  write_step_plan(b, r, layout, plan);
  if (auto res = upload_plan(plan, ws, stream); !res) return res;
  return launch_step(a, o, *inst, layout, static_cast<std::int32_t>(S), r.ring_size, ws, stream);
}

/// Host planning for a capture-safe prefill: the bytes `prefill` would upload.
template <class T>
result<gated_delta_prefill_shape> prefill_plan(const gated_delta_args<T>& a, const gated_delta_options& o,
                                               const varlen_batch& b, const prefill_slots& slots,
                                               std::span<std::byte> out) {
  if (errc e = validate_gated_delta_prefill(a, o, b, slots); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, true));
  if (!inst) return inst.error();
  const prefill_layout layout(static_cast<std::size_t>(b.sequences()), slots.captures.size());
  const gated_delta_prefill_shape shape{static_cast<std::int32_t>(b.sequences()),
                                        static_cast<std::int32_t>(slots.captures.size()), layout.l.bytes()};
  if (out.empty()) return shape;
  if (out.size() < layout.l.bytes()) return errc::size_mismatch;
  write_prefill_plan(b, slots, layout, out);
  return shape;
}

/// The capture-safe prefill: the kernel of `prefill` over a plan already in the workspace.
template <class T>
result<void> prefill_planned(const gated_delta_args<T>& a, const gated_delta_options& o,
                             const gated_delta_prefill_shape& shape, device_workspace ws, stream_handle stream) {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, true));
  if (!inst) return inst.error();
  if (shape.sequences < 0 || shape.captures < 0) return errc::invalid_argument;
  const prefill_layout layout(static_cast<std::size_t>(shape.sequences), static_cast<std::size_t>(shape.captures));
  if (layout.l.bytes() != shape.metadata_bytes) return errc::size_mismatch;
  if (shape.sequences == 0) return {};
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  return launch_prefill(a, o, *inst, layout, shape.sequences, ws, stream);
}

/// Host planning for a capture-safe step: the bytes `step` would upload.
template <class T, class State>
result<gated_delta_step_shape> step_plan(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                         const varlen_batch& b, const recurrent_slots& r, std::span<std::byte> out) {
  if (errc e = validate_gated_delta_step(a, o, b, r); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, false));
  if (!inst) return inst.error();
  const step_layout layout(static_cast<std::size_t>(b.sequences()), r.ring.size());
  const gated_delta_step_shape shape{static_cast<std::int32_t>(b.sequences()), r.ring_size, layout.l.bytes()};
  if (out.empty()) return shape;
  if (out.size() < layout.l.bytes()) return errc::size_mismatch;
  write_step_plan(b, r, layout, out);
  return shape;
}

/// The capture-safe step: the kernel of `step` over a plan already in the workspace.
template <class T, class State>
result<void> step_planned(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                          const gated_delta_step_shape& shape, device_workspace ws, stream_handle stream) {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  const auto inst = table.find<T>(config_of(a, o, false));
  if (!inst) return inst.error();
  if (shape.sequences < 0 || shape.ring_size < 0) return errc::invalid_argument;
  const step_layout layout(static_cast<std::size_t>(shape.sequences),
                           static_cast<std::size_t>(shape.sequences) * static_cast<std::size_t>(shape.ring_size));
  if (layout.l.bytes() != shape.metadata_bytes) return errc::size_mismatch;
  if (shape.sequences == 0) return {};
  if (ws.bytes < layout.l.bytes() || ws.data == nullptr) return errc::size_mismatch;
  return launch_step(a, o, *inst, layout, shape.sequences, shape.ring_size, ws, stream);
}

} // namespace

std::span<const gated_delta_kernel_config> gated_delta_instantiated_configs() noexcept {
  static const std::vector<gated_delta_kernel_config> configs = table.configs();
  return configs;
}

errc gated_delta_supports(const gated_delta_kernel_config& c) noexcept { return table.supports(c); }

std::size_t gated_delta_chunked_prefill_workspace_bytes(const gated_delta_args<float>& a, const gated_delta_options& o,
                                                        const varlen_batch& b, const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(prefill<float>, a, o, b, slots);
}
std::size_t gated_delta_chunked_prefill_workspace_bytes(const gated_delta_args<bfloat16>& a,
                                                        const gated_delta_options& o, const varlen_batch& b,
                                                        const prefill_slots& slots) noexcept {
  return device_runtime::workspace_query(prefill<bfloat16>, a, o, b, slots);
}
template <activation_element T, gated_delta_state_element State>
std::size_t gated_delta_recurrent_step_workspace_bytes(const gated_delta_args<T, State>& a,
                                                       const gated_delta_options& o, const varlen_batch& b,
                                                       const recurrent_slots& r) noexcept {
  return device_runtime::workspace_query(step<T, State>, a, o, b, r);
}

result<void> gated_delta_chunked_prefill(const gated_delta_args<float>& a, const gated_delta_options& o,
                                         const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                                         stream_handle stream) {
  return prefill(a, o, b, slots, ws, stream);
}
result<void> gated_delta_chunked_prefill(const gated_delta_args<bfloat16>& a, const gated_delta_options& o,
                                         const varlen_batch& b, const prefill_slots& slots, device_workspace ws,
                                         stream_handle stream) {
  return prefill(a, o, b, slots, ws, stream);
}
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_recurrent_step(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                        const varlen_batch& b, const recurrent_slots& r, device_workspace ws,
                                        stream_handle stream) {
  return step(a, o, b, r, ws, stream);
}

result<gated_delta_prefill_shape> gated_delta_chunked_prefill_plan(const gated_delta_args<float>& a,
                                                                   const gated_delta_options& o, const varlen_batch& b,
                                                                   const prefill_slots& slots,
                                                                   std::span<std::byte> metadata) {
  return prefill_plan(a, o, b, slots, metadata);
}
result<gated_delta_prefill_shape> gated_delta_chunked_prefill_plan(const gated_delta_args<bfloat16>& a,
                                                                   const gated_delta_options& o, const varlen_batch& b,
                                                                   const prefill_slots& slots,
                                                                   std::span<std::byte> metadata) {
  return prefill_plan(a, o, b, slots, metadata);
}
result<void> gated_delta_chunked_prefill_planned(const gated_delta_args<float>& a, const gated_delta_options& o,
                                                 const gated_delta_prefill_shape& shape, device_workspace ws,
                                                 stream_handle stream) {
  return prefill_planned(a, o, shape, ws, stream);
}
result<void> gated_delta_chunked_prefill_planned(const gated_delta_args<bfloat16>& a, const gated_delta_options& o,
                                                 const gated_delta_prefill_shape& shape, device_workspace ws,
                                                 stream_handle stream) {
  return prefill_planned(a, o, shape, ws, stream);
}
template <activation_element T, gated_delta_state_element State>
result<gated_delta_step_shape> gated_delta_recurrent_step_plan(const gated_delta_args<T, State>& a,
                                                               const gated_delta_options& o, const varlen_batch& b,
                                                               const recurrent_slots& r,
                                                               std::span<std::byte> metadata) {
  return step_plan(a, o, b, r, metadata);
}
template <activation_element T, gated_delta_state_element State>
result<void> gated_delta_recurrent_step_planned(const gated_delta_args<T, State>& a, const gated_delta_options& o,
                                                const gated_delta_step_shape& shape, device_workspace ws,
                                                stream_handle stream) {
  return step_planned(a, o, shape, ws, stream);
}

// The recurrent-step entry points of every (activation, pool) pair the header names.
#define REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(T, S)                                                             \
  template std::size_t gated_delta_recurrent_step_workspace_bytes(                                              \
      const gated_delta_args<T, S>&, const gated_delta_options&, const varlen_batch&, const recurrent_slots&) noexcept; \
  template result<void> gated_delta_recurrent_step(const gated_delta_args<T, S>&, const gated_delta_options&,   \
                                                   const varlen_batch&, const recurrent_slots&, device_workspace, \
                                                   stream_handle);                                             \
  template result<gated_delta_step_shape> gated_delta_recurrent_step_plan(                                      \
      const gated_delta_args<T, S>&, const gated_delta_options&, const varlen_batch&, const recurrent_slots&,    \
      std::span<std::byte>);                                                                                   \
  template result<void> gated_delta_recurrent_step_planned(const gated_delta_args<T, S>&, const gated_delta_options&, \
                                                           const gated_delta_step_shape&, device_workspace,    \
                                                           stream_handle);
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(float, float)
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(float, bfloat16)
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(float, float16)
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(bfloat16, float)
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(bfloat16, bfloat16)
REPRISE_GATED_DELTA_STEP_ENTRY_POINTS(bfloat16, float16)
#undef REPRISE_GATED_DELTA_STEP_ENTRY_POINTS

} // namespace reprise::ops
