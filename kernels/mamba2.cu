// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 launchers (include/reprise/ops/mamba2.hpp): host-side validation and chunk planning, the workspace,
// and the runtime dispatch from sizes to the instances compiled in mamba2_*.cu.
#include <reprise/ops/mamba2.hpp>

#include "mamba2.cuh"

#include <array>
#include <vector>

// The dispatch table. Reduced set (CI): the small test shape. Full set: Nemotron-H (P64 N128) at every chunk.
REPRISE_DECLARE_MAMBA2_INSTANCE(64, 16, 16, f32)
REPRISE_DECLARE_MAMBA2_INSTANCE(64, 16, 16, bf16)
#if REPRISE_KERNELS_FULL
REPRISE_DECLARE_MAMBA2_INSTANCE(64, 64, 128, f32)
REPRISE_DECLARE_MAMBA2_INSTANCE(64, 64, 128, bf16)
REPRISE_DECLARE_MAMBA2_INSTANCE(128, 64, 128, f32)
REPRISE_DECLARE_MAMBA2_INSTANCE(128, 64, 128, bf16)
REPRISE_DECLARE_MAMBA2_INSTANCE(256, 64, 128, f32)
REPRISE_DECLARE_MAMBA2_INSTANCE(256, 64, 128, bf16)
#endif

namespace reprise::ops {
namespace {
using device_runtime::workspace_layout;
namespace di = reprise::device_instances;

template <class T>
std::span<const device::mamba2_instance<T>* const> instances() noexcept {
  if constexpr (std::is_same_v<T, float>) {
    static const device::mamba2_instance<float>* const table[] = {
        &di::REPRISE_MAMBA2_INSTANCE_NAME(64, 16, 16, f32),
#if REPRISE_KERNELS_FULL
        &di::REPRISE_MAMBA2_INSTANCE_NAME(64, 64, 128, f32),
        &di::REPRISE_MAMBA2_INSTANCE_NAME(128, 64, 128, f32),
        &di::REPRISE_MAMBA2_INSTANCE_NAME(256, 64, 128, f32),
#endif
    };
    return table;
  } else {
    static const device::mamba2_instance<bfloat16>* const table[] = {
        &di::REPRISE_MAMBA2_INSTANCE_NAME(64, 16, 16, bf16),
#if REPRISE_KERNELS_FULL
        &di::REPRISE_MAMBA2_INSTANCE_NAME(64, 64, 128, bf16),
        &di::REPRISE_MAMBA2_INSTANCE_NAME(128, 64, 128, bf16),
        &di::REPRISE_MAMBA2_INSTANCE_NAME(256, 64, 128, bf16),
#endif
    };
    return table;
  }
}

/// The instance for `c`, or `unsupported_config`. A decode config (chunk 0) matches any chunk.
template <class T>
result<const device::mamba2_instance<T>*> dispatch(const mamba2_kernel_config& c) noexcept {
  for (const auto* inst : instances<T>()) {
    const mamba2_kernel_config& k = inst->config;
    if (k.head_dim == c.head_dim && k.state_dim == c.state_dim && k.input == c.input &&
        (c.chunk == 0 || k.chunk == c.chunk))
      return inst;
  }
  return errc::unsupported_config;
}

/// The kernels move states as 16-byte vectors: the pool must start on a 16-byte boundary (cudaMalloc
/// gives 256) and N must be a multiple of 4 (every instantiated N is).
bool vector_aligned(const tensor<float, 4>& pool) noexcept {
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
  std::vector<std::int64_t> chunk_end; // absolute end position of each chunk
  for (std::int64_t s = 0; s < b.sequences(); ++s) {
    const auto first = static_cast<std::int32_t>(plan.chunks.size());
    for (std::int64_t i = 0, pos = b.start_positions[s], len = b.length(s); i < len;) {
      const std::int64_t L = std::min(Q - pos % Q, len - i);
      plan.chunks.push_back({b.cu_seqlens[s] + i, static_cast<std::int32_t>(L), -1});
      i += L;
      pos += L;
      chunk_end.push_back(pos);
    }
    plan.seqs.push_back({first, static_cast<std::int32_t>(plan.chunks.size()) - first, slots.initial[s], slots.final[s]});
  }
  for (const capture_point& c : slots.captures) {
    const device::ssd_seq_desc& sq = plan.seqs[c.sequence];
    for (std::int32_t k = sq.first_chunk; k < sq.first_chunk + sq.chunks; ++k)
      if (chunk_end[k] == c.position) plan.chunks[k].capture_slot = c.slot;
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

template <class T>
std::size_t ssd_workspace_bytes(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots) noexcept {
  if (validate_mamba2(a) != errc{} || !is_supported_chunk(static_cast<std::uint32_t>(a.chunk)) ||
      validate_batch(b, a.x.extent(0)) != errc{} ||
      validate_prefill_slots(b, slots, a.state_pool.extent(0), a.chunk) != errc{})
    return 0;
  return layout_of(a, make_plan(b, slots, a.chunk)).l.bytes();
}

template <class T>
result<void> ssd_prefill(const mamba2_args<T>& a, const varlen_batch& b, const prefill_slots& slots,
                         device_workspace ws, stream_handle stream) {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  if (!is_supported_chunk(static_cast<std::uint32_t>(a.chunk))) return errc::unsupported_config;
  if (errc e = validate_batch(b, a.x.extent(0)); e != errc{}) return e;
  if (errc e = validate_prefill_slots(b, slots, a.state_pool.extent(0), a.chunk); e != errc{}) return e;
  auto inst = dispatch<T>(config_of(a, true));
  if (!inst) return inst.error();
  if (!vector_aligned(a.state_pool) || !rows_aligned(a)) return errc::misaligned;
  const ssd_plan plan = make_plan(b, slots, a.chunk);
  const ssd_layout layout = layout_of(a, plan);
  if (ws.data == nullptr || ws.bytes < layout.l.bytes()) return errc::size_mismatch;
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

template <class T>
result<void> state_update(const mamba2_args<T>& a, std::span<const copy_pair> pairs, device_workspace ws,
                          stream_handle stream) {
  if (errc e = validate_mamba2(a); e != errc{}) return e;
  if (static_cast<std::int64_t>(pairs.size()) != a.x.extent(0)) return errc::size_mismatch;
  if (errc e = validate_decode_slots(pairs, a.state_pool.extent(0)); e != errc{}) return e;
  auto inst = dispatch<T>(config_of(a, false));
  if (!inst) return inst.error();
  if (!vector_aligned(a.state_pool)) return errc::misaligned;
  workspace_layout l;
  const std::size_t off = l.take<copy_pair>(pairs.size());
  if (ws.data == nullptr || ws.bytes < l.bytes()) return errc::size_mismatch;
  if (pairs.empty()) return {};
  device_runtime::metadata_upload up(l.bytes());
  up.put<copy_pair>(off, pairs);
  if (auto r = up.upload(ws.data, stream); !r) return r;
  return (*inst)->state_update(a, device_runtime::at<copy_pair>(ws.data, off), static_cast<int>(pairs.size()), stream);
}

std::vector<mamba2_kernel_config> all_configs() {
  std::vector<mamba2_kernel_config> v;
  for (const auto* i : instances<float>()) v.push_back(i->config);
  for (const auto* i : instances<bfloat16>()) v.push_back(i->config);
  return v;
}
} // namespace

std::span<const mamba2_kernel_config> mamba2_instantiated_configs() noexcept {
  static const std::vector<mamba2_kernel_config> configs = all_configs();
  return configs;
}

errc mamba2_supports(const mamba2_kernel_config& c) noexcept {
  if (c.input == dtype::f32) return dispatch<float>(c).has_value() ? errc{} : errc::unsupported_config;
  if (c.input == dtype::bf16) return dispatch<bfloat16>(c).has_value() ? errc{} : errc::unsupported_config;
  return errc::unsupported_config;
}

std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<float>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept {
  return ssd_workspace_bytes(a, b, slots);
}
std::size_t mamba2_ssd_prefill_workspace_bytes(const mamba2_args<bfloat16>& a, const varlen_batch& b,
                                               const prefill_slots& slots) noexcept {
  return ssd_workspace_bytes(a, b, slots);
}
result<void> mamba2_ssd_prefill(const mamba2_args<float>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream) {
  return ssd_prefill(a, b, slots, ws, stream);
}
result<void> mamba2_ssd_prefill(const mamba2_args<bfloat16>& a, const varlen_batch& b, const prefill_slots& slots,
                                device_workspace ws, stream_handle stream) {
  return ssd_prefill(a, b, slots, ws, stream);
}
std::size_t mamba2_state_update_workspace_bytes(std::size_t rows) noexcept {
  workspace_layout l;
  (void)l.take<copy_pair>(rows);
  return l.bytes();
}
result<void> mamba2_state_update(const mamba2_args<float>& a, std::span<const copy_pair> pairs,
                                 device_workspace ws, stream_handle stream) {
  return state_update(a, pairs, ws, stream);
}
result<void> mamba2_state_update(const mamba2_args<bfloat16>& a, std::span<const copy_pair> pairs,
                                 device_workspace ws, stream_handle stream) {
  return state_update(a, pairs, ws, stream);
}

} // namespace reprise::ops
