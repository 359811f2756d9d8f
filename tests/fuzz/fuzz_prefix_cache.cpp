// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// libFuzzer target over prefix_cache operation streams (built with clang; see tests/CMakeLists.txt).
// Run: ./fuzz_prefix_cache tests/fuzz/corpus/prefix_cache -max_total_time=60
#include "fuzz/cache_fuzz_entry.hpp"

#include <cstdio>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string failure = reprise::testing::run_cache_operation_stream(data, size).failure;
  if (!failure.empty()) {
    std::fprintf(stderr, "prefix_cache oracle: %s\n", failure.c_str());
    __builtin_trap();
  }
  return 0;
}
