// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// An option of snapshot_restore that is neither capture<...> nor an accept policy is a static_assert.
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
struct not_an_option {};
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using restore = policy::snapshot_restore<policy::capture<policy::last_aligned>, not_an_option>;
#else
using restore = policy::snapshot_restore<policy::capture<policy::last_aligned>, policy::accept_any>;
#endif
using cache = prefix_cache<presets::nemotron_h_8b, restore>;
auto made = cache::create({.kv_blocks = 4, .snapshot_budget_bytes = presets::nemotron_h_8b::bytes_per_snapshot});
