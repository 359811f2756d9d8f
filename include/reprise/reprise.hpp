// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Umbrella header: the whole host library (reprise::reprise). Not included here: the opt-in
/// <reprise/keys/sha256_hasher.hpp> (reprise::sha256, needs OpenSSL), <reprise/ops/...> (reprise::state_ops,
/// needs CCCL) and <reprise/gpu/...> (reprise::kernels).

#include <reprise/config.hpp>
#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/state/concepts.hpp>
#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/kinds.hpp>
#include <reprise/state/model_config.hpp>
#include <reprise/state/model_facts.hpp>
#include <reprise/state/presets.hpp>
#include <reprise/state/shapes.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>
#include <reprise/keys/remote_keys.hpp>
#include <reprise/keys/xxh3_hasher.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/cache/metrics.hpp>
#include <reprise/cache/config_rules.hpp>
#include <reprise/cache/epoch_fifo.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/block_index.hpp>
#include <reprise/cache/snapshot_pool.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/capture_planner.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/cache_core.hpp>
#include <reprise/cache/invariants.hpp>
#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>
#include <reprise/catalog.hpp>
