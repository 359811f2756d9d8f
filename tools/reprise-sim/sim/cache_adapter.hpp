// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The replay adapter: the one file that names the `prefix_cache` API (included by the translation units
/// that instantiate it).
///
/// Every model, preset or model file, replays through `prefix_cache<dynamic_model, Policy>`: the cache is
/// built from the model's `model_config` at run time, so any block size and alignment the cache supports
/// works and byte gauges are the model's real bytes. The presets' own compile-time types run through the same
/// loop (`replay_with_preset_type`), which tests use to show that the typed and runtime forms agree.

#include "sim/progress.hpp"
#include "sim/replay.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <string>
#include <type_traits>
#include <span>

namespace reprise::sim::adapter {

using clock_type = std::chrono::steady_clock;

/// The cache options of a replay: `kv_blocks` blocks, the snapshot budget in the model's real bytes.
inline cache_options options_for(const replay_config& c, std::uint32_t kv_blocks) {
  cache_options o;
  o.kv_blocks = kv_blocks;
  o.max_sequences = c.concurrency + 1;
  o.snapshot_budget_bytes = restores_snapshots(c.policy) ? c.snapshot_budget_bytes : 0;
  o.snapshot_ttl_steps = c.snapshot_ttl_steps;
  o.max_snapshots_per_path = c.max_snapshots_per_path;
  o.capture_interval = uses_interval(c.policy) ? effective_interval(c) : 0;
  o.hasher_seed = c.hasher_seed;
  return o;
}

/// Creates the cache (typed: `Cache::create(o)`, runtime: from the model's config) and replays `t`.
template <class Cache>
void run(const trace& t, const replay_config& c, std::uint32_t kv_blocks, replay_report& rep, progress* bar) {
  const cache_options o = options_for(c, kv_blocks);
  auto created = [&] {
    if constexpr (std::is_same_v<typename Cache::model_type, dynamic_model>) return Cache::create(c.model.config, o);
    else return Cache::create(o);
  }();
  if (!created) {
    switch (created.error()) {
    case errc::budget_too_small:
      rep.error = "snapshot budget " + format_bytes(static_cast<double>(c.snapshot_budget_bytes)) +
                  " is below one snapshot (" + format_bytes(static_cast<double>(rep.bytes_per_snapshot)) + ")";
      break;
    case errc::misaligned:
      rep.error = "snapshot interval " + std::to_string(o.capture_interval) +
                  " is not a positive multiple of the alignment unit " + std::to_string(c.model.config.alignment());
      break;
    default: rep.error = "the cache refused the configuration: " + std::string(to_string(created.error()));
    }
    return;
  }
  Cache& cache = *created;
  rep.snapshot_slots = cache.snapshot_slots();

  materializer m(t);
  std::vector<token> prompt, output;
  std::vector<std::uint32_t> written;
  std::deque<std::uint32_t> in_flight;
  std::vector<std::uint8_t> live(t.requests.size(), 0);
  // Requests a later one continues (`from` segments): the others are their conversation's last turn.
  std::vector<std::uint8_t> continued(t.requests.size(), 0);
  if (c.last_turn_hints)
    for (const request& r : t.requests)
      for (const segment& s : t.segments_of(r))
        if (s.kind == segment_kind::from) continued[s.ref] = 1;
  clock_type::duration in_cache{};
  double kv_sum = 0, snap_sum = 0;
  std::uint64_t samples = 0;

  // The adapter drives the cache exactly as its contract says, so any error from commit or finish is a bug
  // here or in the cache: the first one is reported and ends the replay.
  auto misuse = [&](const char* call, errc e, std::uint32_t index) {
    if (rep.error.empty())
      rep.error = std::string(call) + " failed with " + std::string(to_string(e)) + " for request " +
                  std::to_string(t.requests[index].id);
  };
  auto finish = [&](std::uint32_t index) {
    const auto t0 = clock_type::now();
    auto done = cache.finish(index, {.last_turn = c.last_turn_hints && continued[index] == 0});
    in_cache += clock_type::now() - t0;
    if (!done) misuse("finish", done.error(), index);
    live[index] = 0;
  };
  auto finish_all = [&] {
    for (std::uint32_t index : in_flight) finish(index);
    in_flight.clear();
  };
  auto end_step = [&] {
    const auto t0 = clock_type::now();
    if (auto done = cache.step_complete(cache.current_epoch()); !done && rep.error.empty())
      rep.error = "step_complete failed with " + std::string(to_string(done.error()));
    in_cache += clock_type::now() - t0;
    const cache_metrics& mm = cache.metrics();
    const double kv = static_cast<double>(kv_blocks - mm.blocks_free) * static_cast<double>(rep.bytes_per_kv_block);
    const double snap = static_cast<double>(mm.snapshot_bytes_held);
    rep.peak_kv_bytes = std::max(rep.peak_kv_bytes, kv);
    rep.peak_snapshot_bytes = std::max(rep.peak_snapshot_bytes, snap);
    kv_sum += kv;
    snap_sum += snap;
    ++samples;
  };

  const auto wall0 = clock_type::now();
  for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
    const request& r = t.requests[i];
    m.prompt(i, prompt);
    if (bar) bar->update(i);

    // A request that continues one still in flight waits for it (its turn ended before this one began).
    if (c.concurrency > 1) {
      for (const segment& s : t.segments_of(r))
        if (s.kind == segment_kind::from && live[s.ref]) {
          finish(s.ref);
          std::erase(in_flight, s.ref);
        }
    }
    while (in_flight.size() >= c.concurrency) {
      finish(in_flight.front());
      in_flight.pop_front();
    }

    const extra_keys keys{.tenant_salt = r.tenant};
    auto t0 = clock_type::now();
    auto plan = cache.admit(i, prompt, keys);
    if (!plan && plan.error() == errc::pool_exhausted && !in_flight.empty()) {
      // Everything in flight holds blocks: let it finish, then try once more.
      in_cache += clock_type::now() - t0;
      finish_all();
      end_step();
      t0 = clock_type::now();
      plan = cache.admit(i, prompt, keys);
    }
    if (!plan) {
      in_cache += clock_type::now() - t0;
      ++rep.requests_rejected;
      end_step();
      continue;
    }
    const auto length = static_cast<std::uint32_t>(prompt.size());
    ++rep.requests;
    rep.prompt_tokens += length;
    rep.kv_matched_tokens += plan->kv_matched_tokens;
    rep.usable_tokens += plan->usable_tokens;
    rep.tokens_lost += plan->tokens_lost_to_missing_snapshot;
    rep.hits += plan->usable_tokens > 0;
    rep.kv_hits += plan->kv_matched_tokens > 0;

    // The engine restores, prefills [usable, L) and writes every planned capture.
    written.clear();
    for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
    if (auto committed = cache.commit(i, length, written); !committed) misuse("commit", committed.error(), i);

    // Decode: the model feeds every output token but the last sampled one, in steps after the prefill's (whose
    // kernels, the restore copy included, have completed by then).
    if (r.output_tokens > 0) {
      if (auto done = cache.step_complete(cache.current_epoch()); !done) misuse("step_complete", done.error(), i);
      output.clear();
      materializer::append_output(i, r.output_tokens, output);
      if (cache.extend(i, output)) {
        if (auto decoded = cache.commit(i, length + r.output_tokens - 1); !decoded) misuse("commit", decoded.error(), i);
        rep.output_tokens += r.output_tokens;
      } else {
        ++rep.decode_truncated;
      }
    }
    in_cache += clock_type::now() - t0;
    in_flight.push_back(i);
    live[i] = 1;
    if (c.concurrency == 1) {
      finish(i);
      in_flight.pop_back();
    }
    end_step();
    if (c.check_invariants && !cache.check_invariants())
      rep.error = "check_invariants failed after request " + std::to_string(r.id);
    if (!rep.error.empty()) return;
  }
  finish_all();
  end_step();
  rep.wall_seconds = std::chrono::duration<double>(clock_type::now() - wall0).count();
  rep.cache_seconds = std::chrono::duration<double>(in_cache).count();
  rep.mean_kv_bytes = samples ? kv_sum / static_cast<double>(samples) : 0;
  rep.mean_snapshot_bytes = samples ? snap_sum / static_cast<double>(samples) : 0;

  const cache_metrics& mm = cache.metrics();
  rep.blocks_shared = mm.blocks_shared;
  rep.kv_evictions = mm.kv_evictions;
  rep.snapshot_hits = mm.snapshot_hits;
  rep.snapshot_misses = mm.snapshot_misses;
  rep.captures_planned = mm.captures_planned;
  rep.captures_written = mm.captures_written;
  rep.captures_refused = mm.captures_refused;
  rep.snapshot_evictions_lru = mm.snapshot_evictions_lru;
  rep.snapshot_evictions_ttl = mm.snapshot_evictions_ttl;
  rep.snapshot_evictions_invalidated = mm.snapshot_evictions_invalidated;
  if (c.check_invariants && !cache.check_invariants()) rep.error = "check_invariants failed at the end";
}

using runner = void (*)(const trace&, const replay_config&, std::uint32_t kv_blocks, replay_report&, progress*);

/// The replay of policy `p` over a model with recurrent layers, of kind `Model` (`dynamic_model` or a
/// preset type); null for `block_sharing`, which does not apply.
template <class Model>
runner recurrent_runner(policy_kind p) {
  using namespace policy;
  switch (p) {
  case policy_kind::memory_only: return &run<prefix_cache<Model, memory_only>>;
  case policy_kind::snapshot_interval:
    return &run<prefix_cache<Model, snapshot_restore<capture<every_interval>, accept_prefill_exact>>>;
  case policy_kind::snapshot_prefix_tree:
    return &run<
        prefix_cache<Model, snapshot_restore<capture<every_interval, last_aligned, branch_point>, accept_prefill_exact>>>;
  case policy_kind::snapshot_turns: return &run<prefix_cache<Model, snapshot_restore<>>>;
  case policy_kind::snapshot_all:
    return &run<prefix_cache<
        Model, snapshot_restore<capture<every_interval, last_aligned, branch_point, end_of_turn>, accept_any>>>;
  case policy_kind::chat: return &run<prefix_cache<Model, policy::chat>>;
  case policy_kind::strict: return &run<prefix_cache<Model, policy::strict>>;
  case policy_kind::block_sharing: return nullptr;
  }
  return nullptr;
}

/// The replay of policy `p` over an attention-only model: only `block_sharing` applies.
template <class Model>
runner attention_runner(policy_kind p) {
  return p == policy_kind::block_sharing ? &run<prefix_cache<Model, policy::block_sharing>> : nullptr;
}

/// The replay of policy `p` for a runtime model with or without recurrent layers (null: does not apply).
inline runner runtime_runner(policy_kind p, bool recurrent) {
  return recurrent ? recurrent_runner<dynamic_model>(p) : attention_runner<dynamic_model>(p);
}

/// The presets' own types, for the equivalence test (null for a preset without an instantiation here).
runner preset_runner(preset_id id, policy_kind p);

} // namespace reprise::sim::adapter
