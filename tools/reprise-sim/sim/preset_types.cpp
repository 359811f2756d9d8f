// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The cache over the presets' own compile-time model types, for the typed-vs-runtime equivalence test.
#include "sim/cache_adapter.hpp"

#include <reprise/state/presets.hpp>

namespace reprise::sim::adapter {

runner preset_runner(std::optional<preset_id> id, policy_kind p) {
  if (id == preset_id::nemotron_h_8b) return runner_for<presets::nemotron_h_8b>(p, true);
  if (id == preset_id::llama3_8b) return runner_for<presets::llama3_8b>(p, false);
  return nullptr;
}

} // namespace reprise::sim::adapter
