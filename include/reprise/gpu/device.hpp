// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Device discovery, defined in reprise::kernels: a target that does not link it stops at an #error here. The
/// header itself needs no CUDA headers, so host-only translation units of an engine can ask whether a GPU is
/// there.

#include <reprise/errc.hpp>
#include <reprise/gpu/requires_kernels.hpp>

#include <cstddef>
#include <string>

namespace reprise::gpu {

/// Properties of one CUDA device that the kernels and benchmarks care about.
struct device_info {
  std::string name;
  int ordinal = 0;
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  std::size_t global_memory_bytes = 0;
  std::size_t shared_memory_per_block_optin = 0; ///< the most dynamic shared memory a kernel may opt into
};

/// Number of CUDA devices visible to this process; 0 when there is none or no driver.
/// Complexity: one CUDA runtime call (the first call initializes the runtime).
int device_count() noexcept;

/// `device_count() > 0`.
bool device_present() noexcept;

/// Properties of device `ordinal`. Errors: `no_device` (none present), `out_of_range` (bad ordinal),
/// `device_error` (the runtime failed).
result<device_info> query_device(int ordinal = 0);

} // namespace reprise::gpu
