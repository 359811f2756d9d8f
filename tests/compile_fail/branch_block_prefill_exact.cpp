// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// branch_block captures decode_continuation snapshots off the alignment grid: with accept_prefill_exact it is
// a static_assert where the cache is instantiated.
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using restore = policy::snapshot_restore<policy::capture<policy::branch_block>, policy::accept_prefill_exact>;
#else
using restore = policy::snapshot_restore<policy::capture<policy::branch_block>, policy::accept_any>;
#endif
using cache = prefix_cache<presets::nemotron_h_8b, restore>;
auto made = cache::create({.kv_blocks = 4, .snapshot_budget_bytes = presets::nemotron_h_8b::bytes_per_snapshot});
