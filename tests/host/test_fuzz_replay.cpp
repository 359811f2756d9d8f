// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Replays the checked-in fuzz corpus (tests/fuzz/corpus/prefix_cache) through the same entry function as the
// libFuzzer target, so the corpus runs in every build, with or without clang.
#include "fuzz/cache_fuzz_entry.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

#ifndef REPRISE_FUZZ_CORPUS_DIR
#error "REPRISE_FUZZ_CORPUS_DIR must name tests/fuzz/corpus"
#endif

TEST_CASE("every corpus file replays without a failed check") {
  const std::filesystem::path dir = std::filesystem::path(REPRISE_FUZZ_CORPUS_DIR) / "prefix_cache";
  REQUIRE(std::filesystem::is_directory(dir));
  int files = 0;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    if (!entry.is_regular_file()) continue;
    std::ifstream in(entry.path(), std::ios::binary);
    const std::vector<std::uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    CAPTURE(entry.path().filename().string());
    const std::string failure = reprise::testing::run_cache_operation_stream(bytes.data(), bytes.size()).failure;
    CHECK_MESSAGE(failure.empty(), failure);
    ++files;
  }
  CHECK(files >= 4);
}
