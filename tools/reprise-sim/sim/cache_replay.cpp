// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// replay(): picks the cache instantiation for a configuration (see sim/cache_adapter.hpp).
#include "sim/cache_adapter.hpp"
#include "sim/cache_replay.hpp"

#include <limits>

namespace reprise::sim {

using namespace adapter;

namespace {

template <class F>
void for_each_geometry(F&& f) {
  for (auto table : {attention_geometries(), hybrid_geometries_a64(), hybrid_geometries_a128(), hybrid_geometries_a256()})
    for (const geometry& g : table) f(g);
}

const geometry* find_geometry(const model_config& m) {
  const geometry* found = nullptr;
  for_each_geometry([&](const geometry& g) {
    if (g.block_size == m.block_size() && g.alignment == m.alignment() && g.recurrent == m.has_recurrent()) found = &g;
  });
  return found;
}

} // namespace

std::string supported_geometries() {
  std::string s;
  for_each_geometry([&](const geometry& g) {
    if (!s.empty()) s += ", ";
    s += (g.recurrent ? "hybrid B=" : "attention-only B=") + std::to_string(g.block_size) +
         (g.recurrent ? " A=" + std::to_string(g.alignment) : std::string());
  });
  return s;
}

replay_report replay(const trace& t, const replay_config& c, progress* bar) {
  replay_report rep;
  const model_config& m = c.model.config;
  rep.model = c.model.name;
  rep.policy = std::string(to_string(c.policy));
  rep.block_size = m.block_size();
  rep.alignment = m.alignment();
  rep.snapshot_interval = uses_interval(c.policy) ? effective_interval(c) : 0;
  rep.concurrency = c.concurrency;
  rep.kv_budget_bytes = c.kv_budget_bytes;
  rep.snapshot_budget_bytes = restores_snapshots(c.policy) ? c.snapshot_budget_bytes : 0;
  rep.bytes_per_kv_block = m.bytes_per_kv_block();
  rep.bytes_per_snapshot = m.bytes_per_snapshot();
  rep.warnings = configuration_warnings(t, c);

  const geometry* g = find_geometry(m);
  runner run_fn = g ? g->pick(c.policy) : nullptr;
  if (g == nullptr) {
    rep.error = "no cache instantiation for block size " + std::to_string(m.block_size()) + " with alignment " +
                std::to_string(m.alignment()) + "; supported: " + supported_geometries();
    return rep;
  }
  if (run_fn == nullptr) {
    rep.error = std::string("policy ") + std::string(to_string(c.policy)) + " does not apply to " +
                (m.has_recurrent() ? "a model with recurrent layers" : "an attention-only model");
    return rep;
  }
  if (c.concurrency == 0) {
    rep.error = "concurrency must be at least 1";
    return rep;
  }
  pool_sizes sizes;
  const std::uint64_t blocks = m.bytes_per_kv_block() ? c.kv_budget_bytes / m.bytes_per_kv_block() : 0;
  if (blocks == 0) {
    rep.error = "KV budget " + format_bytes(static_cast<double>(c.kv_budget_bytes)) + " is below one block (" +
                format_bytes(static_cast<double>(m.bytes_per_kv_block())) + ")";
    return rep;
  }
  sizes.kv_blocks = static_cast<std::uint32_t>(std::min<std::uint64_t>(blocks, std::numeric_limits<std::uint32_t>::max() - 1));
  if (restores_snapshots(c.policy) && m.bytes_per_snapshot() != 0)
    sizes.snapshot_slots = static_cast<std::uint32_t>(
        std::min<std::uint64_t>(c.snapshot_budget_bytes / m.bytes_per_snapshot(), std::uint64_t{1} << 24));
  rep.kv_blocks = sizes.kv_blocks;
  run_fn(t, c, sizes, rep, bar);
  rep.flops_saved = 2.0 * c.model.active_params * static_cast<double>(rep.usable_tokens);
  rep.prefill_tokens = rep.prompt_tokens - rep.usable_tokens;
  if (bar) bar->finish();
  return rep;
}

replay_report replay_with_preset_type(const trace& t, const replay_config& c) {
  // The same loop over the preset's own type, for the equivalence test of the geometry models.
  replay_report rep;
  rep.bytes_per_kv_block = c.model.config.bytes_per_kv_block();
  rep.bytes_per_snapshot = c.model.config.bytes_per_snapshot();
  pool_sizes sizes;
  sizes.kv_blocks = static_cast<std::uint32_t>(c.kv_budget_bytes / rep.bytes_per_kv_block);
  if (restores_snapshots(c.policy) && rep.bytes_per_snapshot)
    sizes.snapshot_slots = static_cast<std::uint32_t>(c.snapshot_budget_bytes / rep.bytes_per_snapshot);
  rep.kv_blocks = sizes.kv_blocks;
  runner run_fn = preset_runner(c.model.preset, c.policy);
  if (run_fn == nullptr) {
    rep.error = "no preset instantiation";
    return rep;
  }
  run_fn(t, c, sizes, rep, nullptr);
  rep.flops_saved = 2.0 * c.model.active_params * static_cast<double>(rep.usable_tokens);
  rep.prefill_tokens = rep.prompt_tokens - rep.usable_tokens;
  return rep;
}

} // namespace reprise::sim
