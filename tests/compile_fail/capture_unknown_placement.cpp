// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A capture<...> argument that is no placement (here `int`) is a static_assert naming the valid ones, not a
// policy that silently plans nothing.
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using capture = policy::capture<policy::last_aligned, int>;
#else
using capture = policy::capture<policy::last_aligned, policy::branch_point>;
#endif
using cache = prefix_cache<presets::nemotron_h_8b, policy::snapshot_restore<capture>>;
auto made = cache::create({.kv_blocks = 4, .snapshot_budget_bytes = presets::nemotron_h_8b::bytes_per_snapshot});
