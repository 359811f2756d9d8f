// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by every kernel translation unit: CUDA error -> reprise::errc, the device-code namespace, the
// workspace layout / metadata upload / size query that every launcher performs the same way, and the instance
// table that maps a runtime configuration to an explicitly instantiated kernel family member.
#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <optional>
#include <span>
#include <type_traits>
#include <vector>

// Device templates live in reprise::device::<arch tag> (REPRISE_DEVICE_ABI comes from CMake and names the
// architecture list) so that translation units built for different GPU targets never share a symbol, as CUB
// does with its inline namespace.
#ifndef REPRISE_DEVICE_ABI
#define REPRISE_DEVICE_ABI arch_default
#endif
#define REPRISE_DEVICE_NAMESPACE_BEGIN                                                                          \
  namespace reprise::device {                                                                                   \
  inline namespace REPRISE_DEVICE_ABI {
#define REPRISE_DEVICE_NAMESPACE_END                                                                            \
  }                                                                                                             \
  }

namespace reprise::device_runtime {

/// Maps a CUDA runtime status to the project's error: `no_device` when there is no usable device or driver,
/// `device_error` for anything else that failed.
inline errc to_errc(cudaError_t e) noexcept {
  switch (e) {
  case cudaSuccess: return errc{};
  case cudaErrorNoDevice:
  case cudaErrorInsufficientDriver: return errc::no_device;
  default: return errc::device_error;
  }
}

/// Status of the last launch on this thread (clears the non-sticky error so later calls start clean).
inline result<void> launch_status() noexcept {
  if (errc e = to_errc(cudaGetLastError()); e != errc{}) return e;
  return {};
}

#define REPRISE_CUDA_TRY(expr)                                                                                  \
  do {                                                                                                          \
    if (::reprise::errc reprise_e_ = ::reprise::device_runtime::to_errc(expr); reprise_e_ != ::reprise::errc{}) \
      return reprise_e_;                                                                                        \
  } while (0)

/// Layout of a launcher's workspace: host-built metadata first (uploaded with one copy), then device-only
/// scratch. Offsets are 256-byte aligned, the alignment of cudaMalloc, so any element type fits anywhere.
class workspace_layout {
public:
  template <class T>
  std::size_t take(std::size_t count) noexcept {
    const std::size_t offset = (bytes_ + 255) / 256 * 256;
    bytes_ = offset + count * sizeof(T);
    return offset;
  }
  std::size_t bytes() const noexcept { return bytes_; }

private:
  std::size_t bytes_ = 0;
};

/// Host staging of the metadata part of a workspace.
class metadata_upload {
public:
  explicit metadata_upload(std::size_t bytes) : host_(bytes) {}
  template <class T>
  void put(std::size_t offset, std::span<const T> v) {
    if (!v.empty()) std::memcpy(host_.data() + offset, v.data(), v.size_bytes());
  }
  /// One asynchronous host-to-device copy. For pageable memory the runtime stages the bytes before it
  /// returns, so `host_` may be destroyed right after.
  result<void> upload(void* device, ops::stream_handle stream) const {
    if (host_.empty()) return {};
    REPRISE_CUDA_TRY(cudaMemcpyAsync(device, host_.data(), host_.size(), cudaMemcpyHostToDevice, stream));
    return {};
  }

private:
  std::vector<std::byte> host_;
};

template <class T>
T* at(void* base, std::size_t offset) noexcept {
  return reinterpret_cast<T*>(static_cast<std::byte*>(base) + offset);
}

/// The step where a launcher, having validated and planned, meets its workspace (CUB's null-buffer idiom):
/// a size query (`query` set) stores the `bytes` the launch needs and ends the call successfully; a launch
/// needs `ws` to hold them (a launch that needs no bytes accepts an empty workspace). Returns what the
/// launcher returns when the call ends here (the answered query, or `size_mismatch`), or nothing when the
/// launch goes on.
inline std::optional<result<void>> meet_workspace(std::size_t bytes, ops::device_workspace ws,
                                                  std::size_t* query) noexcept {
  if (query != nullptr) {
    *query = bytes;
    return result<void>{};
  }
  if (ws.bytes < bytes || (bytes > 0 && ws.data == nullptr)) return result<void>{errc::size_mismatch};
  return std::nullopt;
}

/// The workspace size of a launch, asked the way CUB asks (null-buffer idiom): every launcher ends in
/// `(..., device_workspace ws, stream_handle stream, std::size_t* query)`; when `query` is set it validates
/// and plans exactly as for a launch, stores the bytes it would need in `*query` and returns before touching
/// the device. `workspace_query(launcher, operands...)` calls it so; the result is 0 when the operands are
/// invalid (the launch would return the error). Size and launch share one code path and cannot disagree.
template <class... Params, class... Operands>
std::size_t workspace_query(result<void> (*launcher)(Params...), const Operands&... operands) noexcept {
  std::size_t bytes = 0;
  return launcher(operands..., ops::device_workspace{}, nullptr, &bytes).has_value() ? bytes : 0;
}

/// Of an instance's three entry points of one kind, for an fp32, a bf16 and an fp16 state pool, the one for
/// pool type `S` (the decode kernels take all three; prefill-exact states are fp32 only).
template <class S, class F32, class BF16, class F16>
constexpr auto for_pool(F32 f32, BF16 bf16, F16 f16) noexcept {
  if constexpr (std::is_same_v<S, float>)
    return f32;
  else if constexpr (std::is_same_v<S, ops::bfloat16>)
    return bf16;
  else
    return f16;
}

/// One row of a kernel family's instance table: the fp32-input and bf16-input instances of one shape.
template <template <class> class Instance>
struct instance_row {
  const Instance<float>* f32;
  const Instance<ops::bfloat16>* bf16;

  template <class T>
  const Instance<T>* of() const noexcept {
    if constexpr (std::is_same_v<T, float>)
      return f32;
    else
      return bf16;
  }
};

/// The runtime dispatch of one kernel family: the shapes this build compiled, each for both input types.
/// `Instance<T>` carries its `config`, a plain aggregate with a `chunk` (Q of the chunked entry point; a
/// query with chunk 0 asks for an entry point without chunks and matches any Q), an `input` dtype and
/// `operator==`. Complexity: linear in the (handful of) rows.
template <template <class> class Instance>
struct instance_table {
  using config = decltype(Instance<float>::config);
  std::span<const instance_row<Instance>> rows;

  /// The instance for `c`, or `unsupported_config`.
  template <class T>
  result<const Instance<T>*> find(const config& c) const noexcept {
    for (const instance_row<Instance>& row : rows) {
      const Instance<T>* inst = row.template of<T>();
      config want = c;
      if (want.chunk == 0) want.chunk = inst->config.chunk;
      if (inst->config == want) return inst;
    }
    return errc::unsupported_config;
  }

  /// `errc{}` when some instance serves `c`, else `unsupported_config`.
  errc supports(const config& c) const noexcept {
    if (c.input == dtype::f32) return find<float>(c) ? errc{} : errc::unsupported_config;
    if (c.input == dtype::bf16) return find<ops::bfloat16>(c) ? errc{} : errc::unsupported_config;
    return errc::unsupported_config;
  }

  /// Every compiled configuration, fp32 inputs first.
  std::vector<config> configs() const {
    std::vector<config> v;
    for (const auto& row : rows) v.push_back(row.f32->config);
    for (const auto& row : rows) v.push_back(row.bf16->config);
    return v;
  }
};

} // namespace reprise::device_runtime

// The element-type tokens of the instance macros.
namespace reprise::device_types {
using f32 = float;
using bf16 = ::reprise::ops::bfloat16;
} // namespace reprise::device_types

/// Declares (in a dispatch file) or defines (in an instantiation file, one shape family per file) the fp32-
/// and bf16-input instances of one shape of kernel family `Family` (a `reprise::device` template over the
/// input type). `NAME(args..., T)` names an instance; `OF(args..., T)` is the `reprise::device` constant
/// that holds its entry points. `REPRISE_INSTANCE_ROW` is the shape's row of the family's instance table.
#define REPRISE_DECLARE_INSTANCE(Family, Name, T)                                                               \
  namespace reprise::device_instances {                                                                        \
  extern const ::reprise::device::Family<::reprise::device_types::T> Name;                                     \
  }
#define REPRISE_DEFINE_INSTANCE(Family, Name, T, ...)                                                           \
  REPRISE_DECLARE_INSTANCE(Family, Name, T)                                                                    \
  namespace reprise::device_instances {                                                                        \
  const ::reprise::device::Family<::reprise::device_types::T> Name = ::reprise::device::__VA_ARGS__;           \
  }
#define REPRISE_INSTANCE_ROW(NAME, ...)                                                                         \
  {&::reprise::device_instances::NAME(__VA_ARGS__, f32), &::reprise::device_instances::NAME(__VA_ARGS__, bf16)},
