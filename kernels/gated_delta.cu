// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Launchers and runtime dispatch of the gated-delta kernels (include/reprise/ops/gated_delta.hpp). The
// kernels themselves are instantiated in gated_delta_small.cu and gated_delta_qwen3_next.full.cu; this file
// only declares them, validates the host metadata, uploads it and picks the instance.
#include <reprise/ops/gated_delta.hpp>

#include "gated_delta.cuh"

#include <algorithm>
#include <vector>

REPRISE_DEVICE_NAMESPACE_BEGIN
REPRISE_GD_SMALL_SHAPES(REPRISE_GD_DECLARE)
#if REPRISE_KERNELS_FULL
REPRISE_GD_QWEN3_NEXT_SHAPES(REPRISE_GD_DECLARE)
#endif
REPRISE_DEVICE_NAMESPACE_END

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

/// Calls `f.template operator()<Q, K, V, BV>()` for the instantiation matching (K, V, Q); returns
/// `unsupported_config` when there is none in this build.
template <class F>
result<void> dispatch(std::int64_t K, std::int64_t V, std::uint32_t Q, F&& f) {
#define REPRISE_GD_TRY(Q_, K_, V_, BV_)                                                                           \
  if (Q == Q_ && K == K_ && V == V_) return f.template operator()<Q_, K_, V_, BV_>();
  REPRISE_GD_SMALL_SHAPES(REPRISE_GD_TRY)
#if REPRISE_KERNELS_FULL
  REPRISE_GD_QWEN3_NEXT_SHAPES(REPRISE_GD_TRY)
#endif
#undef REPRISE_GD_TRY
  return errc::unsupported_config;
}

template <class T>
result<void> prefill(const gated_delta_args<T>& a, const gated_delta_options& o, const varlen_batch& b,
                     const prefill_slots& slots, device_workspace ws, stream_handle stream) {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  if (errc e = validate_batch(b, a.q.extent(0)); e != errc{}) return e;
  if (errc e = validate_prefill_slots(b, slots, a.state_pool.extent(0), o.chunk); e != errc{}) return e;
  if (!gated_delta_kernel_available(a.q.extent(2), a.v.extent(2), o.chunk)) return errc::unsupported_config;
  const std::int64_t S = b.sequences();
  const prefill_layout layout(static_cast<std::size_t>(S), slots.captures.size());
  if (ws.data == nullptr || ws.bytes < layout.l.bytes()) return errc::size_mismatch;
  if (S == 0) return {};

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

  device_runtime::metadata_upload up(layout.l.bytes());
  up.put<device::gd_seq>(layout.seqs, seqs);
  up.put<device::gd_capture>(layout.captures, caps);
  up.put<std::int32_t>(layout.capture_begin, begin);
  if (auto r = up.upload(ws.data, stream); !r) return r;

  const device::gd_prefill_params<T, float> p{a.q.data_handle(),
                                              a.k.data_handle(),
                                              a.v.data_handle(),
                                              a.g.data_handle(),
                                              a.beta.data_handle(),
                                              a.out.data_handle(),
                                              device_runtime::at<device::gd_seq>(ws.data, layout.seqs),
                                              device_runtime::at<device::gd_capture>(ws.data, layout.captures),
                                              device_runtime::at<std::int32_t>(ws.data, layout.capture_begin),
                                              a.state_pool.data_handle(),
                                              static_cast<std::int32_t>(a.state_pool.extent(0)),
                                              static_cast<std::int32_t>(a.q.extent(1)),
                                              static_cast<std::int32_t>(a.v.extent(1)),
                                              o.effective_scale(a.q.extent(2)),
                                              o.l2norm_eps,
                                              o.l2norm_qk};
  return dispatch(a.q.extent(2), a.v.extent(2), o.chunk, [&]<int Q, int K, int V, int BV>() {
    return device::gd_launch_prefill<Q, K, V, BV, T>(p, static_cast<std::int32_t>(S), stream);
  });
}

template <class T>
result<void> step(const gated_delta_args<T>& a, const gated_delta_options& o, const varlen_batch& b,
                  const recurrent_slots& r, device_workspace ws, stream_handle stream) {
  if (errc e = validate_gated_delta(a, o); e != errc{}) return e;
  if (errc e = validate_batch(b, a.q.extent(0)); e != errc{}) return e;
  if (errc e = validate_recurrent_slots(b, r, a.state_pool.extent(0)); e != errc{}) return e;
  if (!gated_delta_kernel_available(a.q.extent(2), a.v.extent(2), o.chunk)) return errc::unsupported_config;
  const std::int64_t S = b.sequences();
  const step_layout layout(static_cast<std::size_t>(S), r.ring.size());
  if (ws.data == nullptr || ws.bytes < layout.l.bytes()) return errc::size_mismatch;
  if (S == 0) return {};

  std::vector<device::gd_seq> seqs(static_cast<std::size_t>(S));
  for (std::int64_t s = 0; s < S; ++s) {
    const copy_pair pr = r.pairs[static_cast<std::size_t>(s)];
    seqs[static_cast<std::size_t>(s)] = {b.cu_seqlens[s], b.length(s), b.start_positions[s], pr.src, pr.dst};
  }
  device_runtime::metadata_upload up(layout.l.bytes());
  up.put<device::gd_seq>(layout.seqs, seqs);
  up.put<std::int32_t>(layout.ring, r.ring);
  if (auto res = up.upload(ws.data, stream); !res) return res;

  const device::gd_step_params<T, float> p{a.q.data_handle(),
                                           a.k.data_handle(),
                                           a.v.data_handle(),
                                           a.g.data_handle(),
                                           a.beta.data_handle(),
                                           a.out.data_handle(),
                                           device_runtime::at<device::gd_seq>(ws.data, layout.seqs),
                                           r.ring_size > 0 ? device_runtime::at<std::int32_t>(ws.data, layout.ring)
                                                           : nullptr,
                                           r.ring_size,
                                           a.state_pool.data_handle(),
                                           static_cast<std::int32_t>(a.state_pool.extent(0)),
                                           static_cast<std::int32_t>(a.q.extent(1)),
                                           static_cast<std::int32_t>(a.v.extent(1)),
                                           o.effective_scale(a.q.extent(2)),
                                           o.l2norm_eps,
                                           o.l2norm_qk};
  return dispatch(a.q.extent(2), a.v.extent(2), o.chunk, [&]<int Q, int K, int V, int BV>() {
    return device::gd_launch_step<K, V, BV, T>(p, static_cast<std::int32_t>(S), stream);
  });
}

} // namespace

bool gated_delta_kernel_available(std::int64_t key_dim, std::int64_t value_dim, std::uint32_t chunk) noexcept {
#define REPRISE_GD_MATCH(Q_, K_, V_, BV_)                                                                         \
  if (chunk == Q_ && key_dim == K_ && value_dim == V_) return true;
  REPRISE_GD_SMALL_SHAPES(REPRISE_GD_MATCH)
#if REPRISE_KERNELS_FULL
  REPRISE_GD_QWEN3_NEXT_SHAPES(REPRISE_GD_MATCH)
#endif
#undef REPRISE_GD_MATCH
  return false;
}

std::size_t gated_delta_chunked_prefill_workspace_bytes(const varlen_batch& b, const prefill_slots& slots) noexcept {
  return prefill_layout(static_cast<std::size_t>(b.sequences()), slots.captures.size()).l.bytes();
}

std::size_t gated_delta_recurrent_step_workspace_bytes(const varlen_batch& b, const recurrent_slots& r) noexcept {
  return step_layout(static_cast<std::size_t>(b.sequences()), r.ring.size()).l.bytes();
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
result<void> gated_delta_recurrent_step(const gated_delta_args<float>& a, const gated_delta_options& o,
                                        const varlen_batch& b, const recurrent_slots& r, device_workspace ws,
                                        stream_handle stream) {
  return step(a, o, b, r, ws, stream);
}
result<void> gated_delta_recurrent_step(const gated_delta_args<bfloat16>& a, const gated_delta_options& o,
                                        const varlen_batch& b, const recurrent_slots& r, device_workspace ws,
                                        stream_handle stream) {
  return step(a, o, b, r, ws, stream);
}

} // namespace reprise::ops
