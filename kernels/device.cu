// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Device discovery (include/reprise/gpu/device.hpp).
#include <reprise/gpu/device.hpp>

#include <cuda_runtime.h>

namespace reprise::gpu {

int device_count() noexcept {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError(); // clear the sticky "no driver / no device" error
    return 0;
  }
  return n;
}

bool device_present() noexcept { return device_count() > 0; }

result<device_info> query_device(int ordinal) {
  const int n = device_count();
  if (n == 0) return failure{errc::no_device};
  if (ordinal < 0 || ordinal >= n) return failure{errc::out_of_range};
  cudaDeviceProp prop{};
  if (cudaGetDeviceProperties(&prop, ordinal) != cudaSuccess) return failure{errc::device_error};
  device_info info;
  info.name = prop.name;
  info.ordinal = ordinal;
  info.compute_major = prop.major;
  info.compute_minor = prop.minor;
  info.sm_count = prop.multiProcessorCount;
  info.global_memory_bytes = prop.totalGlobalMem;
  info.shared_memory_per_block_optin = prop.sharedMemPerBlockOptin;
  return info;
}

} // namespace reprise::gpu
