// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// The one entry both the libFuzzer target and the corpus replay test call.

#include "fuzz/cache_op_driver.hpp"
#include "support/cache_testing.hpp"

#include <cstddef>
#include <cstdint>
#include <string>

namespace reprise::testing {

struct stream_outcome {
  std::string failure; ///< the first failed check, empty if none
  cache_metrics metrics;
};

/// Runs the stream against the cache configuration its first byte selects.
inline stream_outcome run_cache_operation_stream(const std::uint8_t* data, std::size_t size) {
  if (size == 0) return {};
  byte_source in(data + 1, size - 1);
  const cache_options small{.kv_blocks = 24, .max_sequences = 6, .hasher_seed = 3};
  switch (data[0] % 5) {
  case 0: {
    cache_op_driver<prefix_cache<attn_model, policy::block_sharing>> d(small);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics()};
  }
  case 1: {
    cache_op_driver<prefix_cache<attn_model, policy::block_sharing, constant_hasher>> d(small);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics()};
  }
  case 2: {
    cache_op_driver<prefix_cache<small_hybrid, policy::memory_only>> d(small);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics()};
  }
  case 3: {
    cache_options o = small;
    o.snapshot_budget_bytes = 5 * small_hybrid::bytes_per_snapshot;
    o.max_snapshots_per_path = 3;
    cache_op_driver<prefix_cache<small_hybrid, policy::snapshot_restore<
                                                   policy::capture<policy::every<64>, policy::last_aligned,
                                                                   policy::branch_point, policy::end_of_turn>,
                                                   policy::accept_any>>>
        d(o);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics()};
  }
  default: {
    cache_options o = small;
    o.snapshot_budget_bytes = 3 * small_hybrid::bytes_per_snapshot;
    o.snapshot_ttl_steps = 3;
    cache_op_driver<prefix_cache<small_hybrid, policy::snapshot_restore<
                                                   policy::capture<policy::last_aligned, policy::end_of_turn>,
                                                   policy::accept_prefill_exact>>>
        d(o);
    d.run(in, 4096);
    return {d.failure, d.cache().metrics()};
  }
  }
}

} // namespace reprise::testing
