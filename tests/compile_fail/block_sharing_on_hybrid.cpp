// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// policy::block_sharing skips prefill; a model with recurrent layers must use snapshot_restore or memory_only.
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/state/presets.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using cache = prefix_cache<presets::nemotron_h_8b, policy::block_sharing>;
#else
using cache = prefix_cache<presets::nemotron_h_8b, policy::memory_only>;
#endif
auto made = cache::create({.kv_blocks = 4});
