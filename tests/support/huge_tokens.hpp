// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Prompts of ~2^32 tokens for the tests of the cache's limits, without the memory they would take.

#include <reprise/reprise.hpp>

#include <doctest/doctest.h>

#include <sys/mman.h>

#include <cstddef>
#include <span>

namespace reprise::testing {

/// `count` tokens of reserved, never-touched address space (zero pages if read): lets a test pass a prompt
/// of ~2^32 tokens without 16 GiB of memory. The cache must refuse such prompts before reading them.
class huge_tokens {
public:
  explicit huge_tokens(std::size_t count) : bytes_(count * sizeof(token_id)) {
    void* p = mmap(nullptr, bytes_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    REQUIRE(p != MAP_FAILED);
    data_ = static_cast<const token_id*>(p);
    count_ = count;
  }
  ~huge_tokens() { munmap(const_cast<token_id*>(data_), bytes_); }
  huge_tokens(const huge_tokens&) = delete;
  huge_tokens& operator=(const huge_tokens&) = delete;
  std::span<const token_id> first(std::size_t n) const { return {data_, n}; }

private:
  std::size_t bytes_;
  const token_id* data_ = nullptr;
  std::size_t count_ = 0;
};

} // namespace reprise::testing
