// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A policy::every<I> capture interval must be a multiple of the model's alignment unit (128 for Nemotron-H-8B).
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using capture = policy::capture<policy::every<192>>;
#else
using capture = policy::capture<policy::every<512>>;
#endif
using cache = prefix_cache<presets::nemotron_h_8b, policy::snapshot_restore<capture>>;
auto made = cache::create({.kv_blocks = 4, .snapshot_budget_bytes = presets::nemotron_h_8b::bytes_per_snapshot});
