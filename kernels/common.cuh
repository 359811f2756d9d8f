// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Shared by every kernel translation unit: CUDA error -> reprise::errc, the device-code namespace, and the
// workspace layout / metadata upload that every launcher performs the same way.
#include <reprise/errc.hpp>
#include <reprise/ops/stream.hpp>

#include <cuda_runtime.h>

#include <cstddef>
#include <cstring>
#include <span>
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

} // namespace reprise::device_runtime
