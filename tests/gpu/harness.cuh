// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// GPU test harness: Thrust device vectors for operands, views over them, workspaces, and a synchronous
// "launch and check" that turns asynchronous failures into test failures.
#include <reprise/ops/stream.hpp>
#include <reprise/ops/tensor.hpp>

#include <thrust/device_vector.h>
#include <thrust/host_vector.h>

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

namespace reprise::testing {

/// A device copy of a host vector.
template <class T>
thrust::device_vector<T> to_device(const std::vector<T>& v) {
  return thrust::device_vector<T>(v.begin(), v.end());
}

/// A host copy of a device vector.
template <class T>
std::vector<T> to_host(const thrust::device_vector<T>& v) {
  thrust::host_vector<T> h = v;
  return std::vector<T>(h.begin(), h.end());
}

template <class T, class... I>
ops::tensor<T, sizeof...(I)> dview(thrust::device_vector<T>& v, I... extents) {
  return ops::tensor<T, sizeof...(I)>(thrust::raw_pointer_cast(v.data()), static_cast<std::int64_t>(extents)...);
}
template <class T, class... I>
ops::tensor<const T, sizeof...(I)> dcview(const thrust::device_vector<T>& v, I... extents) {
  return ops::tensor<const T, sizeof...(I)>(thrust::raw_pointer_cast(v.data()), static_cast<std::int64_t>(extents)...);
}

/// Device scratch of `bytes` bytes, kept alive by the returned vector.
struct scratch {
  thrust::device_vector<unsigned char> memory;
  explicit scratch(std::size_t bytes) : memory(bytes == 0 ? 1 : bytes) {}
  ops::device_workspace workspace() {
    return {thrust::raw_pointer_cast(memory.data()), memory.size()};
  }
};

/// Waits for the device and reports any asynchronous error.
inline bool device_ok() { return cudaDeviceSynchronize() == cudaSuccess && cudaGetLastError() == cudaSuccess; }

/// How a lossy (bf16 / fp16) pool's states after a kernel compare with an fp32 pool's after the same kernel over
/// the widened states: `mismatched` stored states that are not the fp32 state rounded (to nearest, ties to
/// even), `rounded` ones the rounding changed (none would mean the check cannot tell a lossy pool from an exact
/// one), `differ` ones a second run's pool (`again`) holds otherwise.
struct rounding_count {
  std::size_t mismatched = 0, rounded = 0, differ = 0;
};

template <class State>
rounding_count count_rounding(const std::vector<State>& got, const std::vector<State>& again,
                              const std::vector<float>& wide) {
  rounding_count c;
  for (std::size_t i = 0; i < got.size(); ++i) {
    c.mismatched += !(got[i] == ops::from_float<State>(wide[i]));
    c.rounded += ops::to_float(got[i]) != wide[i];
    c.differ += !(again[i] == got[i]);
  }
  return c;
}

} // namespace reprise::testing
