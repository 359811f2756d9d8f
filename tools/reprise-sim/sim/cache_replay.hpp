// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Entry points of the replay adapter (sim/cache_replay.cpp) beyond `replay()` itself.

#include "sim/replay.hpp"

namespace reprise::sim {

/// Replays through the typed `prefix_cache<Preset, Policy>` over the preset's own compile-time model type
/// (Nemotron-H-8B and Llama-3-8B) instead of the runtime-configured cache. Tests use it to show that both
/// give the same report.
replay_report replay_with_preset_type(const trace& t, const replay_config& c);

} // namespace reprise::sim
