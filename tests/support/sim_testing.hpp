// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Replay configurations shared by the reprise-sim tests.

#include "sim/models.hpp"
#include "sim/replay.hpp"

#include <cstdint>

namespace reprise::testing {

/// Nemotron-H-8B under `p`, with GPU pools of `kv_blocks` KV blocks and `snapshot_slots` snapshots.
inline sim::replay_config nemotron(sim::policy_kind p, std::uint64_t kv_blocks, std::uint64_t snapshot_slots) {
  sim::replay_config c;
  c.model = *sim::find_preset("nemotron-h-8b");
  c.policy = p;
  c.kv_budget_bytes = kv_blocks * c.model.config.bytes_per_kv_block();
  c.snapshot_budget_bytes = snapshot_slots * c.model.config.bytes_per_snapshot();
  return c;
}

/// A fleet of `engines` with small GPU pools (256 blocks, 2 snapshots) and host tiers of 4x them, sharing a
/// modelled remote tier.
inline sim::replay_config remote_fleet(sim::policy_kind p, std::uint32_t engines, bool affinity) {
  sim::replay_config c = nemotron(p, 256, 2);
  c.engines = engines;
  c.affinity = affinity;
  c.host_kv_budget_bytes = 4 * c.kv_budget_bytes;
  c.host_snapshot_budget_bytes = 4 * c.snapshot_budget_bytes;
  c.remote_tier = true;
  return c;
}

} // namespace reprise::testing
