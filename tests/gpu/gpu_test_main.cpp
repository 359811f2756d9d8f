// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The doctest runner shared by every GPU test binary. Listing test cases always works (CTest discovers
// them at build time on machines without a GPU); running them without a CUDA device exits 77, which CTest
// reports as skipped (SKIP_RETURN_CODE 77).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>
#include <reprise/gpu/device.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i)
    if (std::strncmp(argv[i], "--list", 6) == 0 || std::strncmp(argv[i], "-l", 2) == 0) listing = true;
  if (!listing && !reprise::gpu::device_present()) {
    std::puts("no CUDA device present: skipping GPU tests");
    return 77;
  }
  doctest::Context context(argc, argv);
  return context.run();
}
