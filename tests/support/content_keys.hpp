// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// The SHA-256 content keyer of the test model (small_hybrid), for the remote-tier tests (reprise::sha256).
#include "support/cache_testing.hpp"

#include <reprise/keys/content_key.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <utility>

namespace reprise::testing {

/// The fleet's keyer for small_hybrid with weights "test-weights" and fleet seed `fleet_seed`.
inline content_keyer make_keyer(std::uint64_t fleet_seed = 7) {
  auto fingerprint = model_fingerprint::make(model_config::of<small_hybrid>(), "test-weights");
  REQUIRE(fingerprint.has_value());
  auto k = content_keyer::make({.fleet_seed = fleet_seed, .fingerprint = *fingerprint}, model_config::of<small_hybrid>());
  REQUIRE(k.has_value());
  return std::move(*k);
}

} // namespace reprise::testing
