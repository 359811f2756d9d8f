// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// replay(): picks the cache instantiation for a configuration (see sim/cache_adapter.hpp).
#include "sim/cache_adapter.hpp"
#include "sim/cache_replay.hpp"

#include <algorithm>
#include <limits>
#include <string>

namespace reprise::sim {

using namespace adapter;

namespace {

/// The block count the KV budget buys, or an error text. `simulate` has already bounded the budget by what
/// the trace can fill and by the memory limit; counts above the cache's id range are capped.
std::string kv_blocks_for(const replay_config& c, std::uint32_t& blocks) {
  const model_config& m = c.model.config;
  const std::uint64_t count = m.bytes_per_kv_block() ? c.kv_budget_bytes / m.bytes_per_kv_block() : 0;
  if (count == 0)
    return "KV budget " + format_bytes(static_cast<double>(c.kv_budget_bytes)) + " is below one block (" +
           format_bytes(static_cast<double>(m.bytes_per_kv_block())) + ")";
  blocks = static_cast<std::uint32_t>(std::min<std::uint64_t>(count, max_pool_ids));
  return {};
}

/// Fills the report fields every replay shares, and checks what the cache would refuse with a less clear
/// message. Returns false (with rep.error set) when the replay cannot run.
bool prepare(const trace& t, const replay_config& c, runner run_fn, replay_report& rep, std::uint32_t& kv_blocks) {
  const model_config& m = c.model.config;
  rep.model = c.model.name;
  rep.policy = std::string(to_string(c.policy));
  rep.block_size = m.block_size();
  rep.alignment = m.alignment();
  rep.concurrency = c.concurrency;
  rep.kv_budget_bytes = c.kv_budget_bytes;
  rep.snapshot_budget_bytes = restores_snapshots(c.policy) ? c.snapshot_budget_bytes : 0;
  rep.bytes_per_kv_block = m.bytes_per_kv_block();
  rep.bytes_per_snapshot = m.bytes_per_snapshot();
  rep.host_kv_budget_bytes = c.host_kv_budget_bytes;
  rep.host_snapshot_budget_bytes = restores_snapshots(c.policy) ? c.host_snapshot_budget_bytes : 0;
  rep.engines = c.engines;
  rep.affinity = c.affinity;
  rep.state_aware = c.state_aware;
  rep.load_slack = c.load_slack;
  rep.remote_tier = c.remote_tier;
  rep.remote_write_through = c.remote_tier && c.remote_write_through;
  rep.remote_probe = c.remote_tier && c.remote_probe;
  rep.remote_turn_ends = c.remote_tier && c.remote_turn_ends && takes_turn_ends(c.policy);
  rep.remote_budget_bytes = c.remote_tier && c.remote_redis.empty() ? c.remote_budget_bytes : 0;
  if (has_host_tier(c) && !takes_host_tier(c.policy)) { // the only policy that takes none
    rep.error = rule_message(config_rule::memory_only_host_tier);
    return false;
  }
  if (rep.host_snapshot_budget_bytes != 0 && !has_host_tier(c)) {
    rep.error = "a host snapshot budget needs a host KV budget (a snapshot in host memory is found through its "
                "KV blocks, which must be kept there too)";
    return false;
  }
  if (c.remote_tier && !has_host_tier(c)) {
    rep.error = "a remote tier needs a host KV budget (values go to the store when the host tier evicts them, and "
                "come back through host memory)";
    return false;
  }
  if (c.remote_tier && c.remote_snapshot_candidates == 0) {
    rep.error = "a remote tier asks the store for at least one snapshot per prompt (remote snapshot candidates >= 1)";
    return false;
  }
  if (c.remote_tier && c.remote_redis.empty() && c.remote_budget_bytes != 0 &&
      c.remote_budget_bytes < m.bytes_per_kv_block()) {
    rep.error = "remote budget " + format_bytes(static_cast<double>(c.remote_budget_bytes)) +
                " is below one KV block (" + format_bytes(static_cast<double>(m.bytes_per_kv_block())) +
                "): the store could hold nothing (0 is unlimited)";
    return false;
  }
  if (!c.remote_redis.empty() && !c.remote_tier) {
    rep.error = "a live store (remote_redis) is the remote tier's: turn the remote tier on";
    return false;
  }
  if (c.engines == 0) {
    rep.error = "a fleet needs at least one engine";
    return false;
  }
  if (run_fn == nullptr) {
    rep.error = std::string("policy ") + std::string(to_string(c.policy)) + " does not apply to " +
                (m.has_recurrent() ? "a model with recurrent layers" : "an attention-only model");
    return false;
  }
  if (!is_supported_block_size(m.block_size())) {
    rep.error = "block size " + std::to_string(m.block_size()) + " is not supported by the cache (" +
                supported_block_sizes_text() + ")";
    return false;
  }
  rep.snapshot_interval = uses_interval(c.policy) ? effective_interval(c) : 0;
  rep.warnings = configuration_warnings(t, c);
  if (c.concurrency == 0) {
    rep.error = "concurrency must be at least 1";
    return false;
  }
  rep.error = kv_blocks_for(c, kv_blocks);
  rep.kv_blocks = kv_blocks;
  return rep.error.empty();
}

void finish_report(const replay_config& c, replay_report& rep) {
  rep.flops_saved = 2.0 * c.model.active_params * static_cast<double>(rep.usable_tokens);
  rep.prefill_tokens = rep.prompt_tokens - rep.usable_tokens;
}

} // namespace

std::string supported_block_sizes_text() {
  std::string s;
  for (std::uint32_t b : reprise::supported_block_sizes) s += (s.empty() ? "" : ", ") + std::to_string(b);
  return s;
}

replay_report replay(const trace& t, const replay_config& c, progress* bar) {
  replay_report rep;
  const runner run_fn = runtime_runner(c.policy, c.model.config.has_recurrent(), has_host_tier(c), c.remote_tier);
  std::uint32_t kv_blocks = 0;
  if (!prepare(t, c, run_fn, rep, kv_blocks)) return rep;
  run_fn(t, c, kv_blocks, rep, bar);
  finish_report(c, rep);
  if (bar) bar->finish();
  return rep;
}

replay_report replay_with_preset_type(const trace& t, const replay_config& c) {
  replay_report rep;
  if (has_host_tier(c) || c.remote_tier) {
    rep.error = "the presets' own types replay without a host or remote tier";
    return rep;
  }
  const runner run_fn = preset_runner(c.model.preset, c.policy);
  std::uint32_t kv_blocks = 0;
  if (!prepare(t, c, run_fn, rep, kv_blocks)) return rep;
  run_fn(t, c, kv_blocks, rep, nullptr);
  finish_report(c, rep);
  return rep;
}

} // namespace reprise::sim
