// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Stand-in bytes of engine pools for the turn-end tests: a function of how a unit was computed, so that
// "the same computation" is checkable bitwise and a reader that mixed two computations, or recomputed, shows it.

#include <reprise/ids.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace reprise::testing {

using bytes = std::vector<std::byte>;

/// What a computation writes into a unit of `size` bytes: a function of the state it started from (`base`:
/// the restored bytes' hash, 0 for a cold start at position 0), the tokens it folded in since `from`, the end
/// position and who wrote it (prefill, decode step, capture).
inline bytes computed(std::uint64_t base, std::span<const token_id> tokens, std::uint32_t from, std::uint32_t end,
                      char who, std::size_t size) {
  std::uint64_t h = (base ^ 0x9e3779b97f4a7c15ULL) * 0x100000001b3ULL + static_cast<std::uint64_t>(who);
  for (std::uint32_t i = from; i < end; ++i) h = (h ^ static_cast<std::uint64_t>(tokens[i])) * 0x100000001b3ULL;
  h ^= end;
  bytes v(size);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>((h >> (8 * (k % 8))) + k);
  return v;
}

/// FNV-1a of `b`: the state a restore of those bytes starts from.
inline std::uint64_t hash_of(const bytes& b) {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (std::byte x : b) h = (h ^ static_cast<std::uint64_t>(x)) * 0x100000001b3ULL;
  return h;
}

} // namespace reprise::testing
