// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Builds against an installed or embedded Reprise and checks one fact, so the consumer build is a test.
#include <reprise/reprise.hpp>
#ifdef CONSUMER_HAS_KERNELS
#include <reprise/gpu/device.hpp>
#endif

#include <cstdio>

int main() {
  using model = reprise::presets::nemotron_h_8b;
  static_assert(model::alignment == 128); // lcm(block 16, the checkpoint's chunk_size 128)
  std::printf("consumer: Nemotron-H-8B snapshot = %zu bytes\n", model::bytes_per_snapshot);
#ifdef CONSUMER_HAS_KERNELS
  std::printf("consumer: CUDA devices = %d\n", reprise::gpu::device_count());
#endif
  return model::bytes_per_snapshot == 102137856 ? 0 : 1;
}
