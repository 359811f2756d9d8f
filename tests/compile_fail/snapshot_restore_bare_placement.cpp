// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A placement given to snapshot_restore without capture<...> is a static_assert that says to wrap it.
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using restore = policy::snapshot_restore<policy::last_aligned>;
#else
using restore = policy::snapshot_restore<policy::capture<policy::last_aligned>>;
#endif
using cache = prefix_cache<presets::nemotron_h_8b, restore>;
auto made = cache::create({.kv_blocks = 4, .snapshot_budget_bytes = presets::nemotron_h_8b::bytes_per_snapshot});
