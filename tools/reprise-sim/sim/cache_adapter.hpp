// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The replay adapter: the one file that names the `prefix_cache` API (included by the few translation
/// units that instantiate it, so its template instantiations compile in parallel).
///
/// Models as compile-time types. `prefix_cache<Model, ...>` reads four things from its model: the block
/// size, the alignment unit, whether recurrent layers exist, and the byte sizes of a block and a snapshot
/// (used only to turn the snapshot budget into a slot count and for byte gauges). The simulator therefore
/// instantiates the cache over *geometry models*: the smallest `hybrid_model` with a given block size B and
/// alignment unit A (one attention layer with block B, plus one Mamba2 layer with chunk A for hybrids). The
/// real model's byte sizes turn the budgets into block and slot counts, and the cache gets a snapshot budget
/// of exactly that many geometry-model snapshots. Every preset, every block-size variant and every runtime
/// model file with a listed geometry runs through the same real cache code this way (the equivalence with
/// the preset types themselves is tested in test_sim_replay.cpp).

#include "sim/progress.hpp"
#include "sim/replay.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <span>

namespace reprise::sim::adapter {

using clock_type = std::chrono::steady_clock;

/// Counts for a run, derived from the real model's bytes.
struct pool_sizes {
  std::uint32_t kv_blocks = 0;
  std::uint32_t snapshot_slots = 0;
};

template <class Model, class Policy>
void run(const trace& t, const replay_config& c, const pool_sizes& sizes, replay_report& rep, progress* bar) {
  using cache_type = prefix_cache<Model, Policy>;
  constexpr bool restores = policy::policy_traits<Policy>::restores_snapshots;
  cache_options o;
  o.kv_blocks = sizes.kv_blocks;
  o.max_sequences = c.concurrency + 1;
  o.snapshot_budget_bytes = restores ? std::size_t{sizes.snapshot_slots} * Model::bytes_per_snapshot : 0;
  o.snapshot_ttl_steps = c.snapshot_ttl_steps;
  o.max_snapshots_per_path = c.max_snapshots_per_path;
  o.capture_interval = uses_interval(c.policy) ? effective_interval(c) : 0;
  o.hasher_seed = c.hasher_seed;

  auto created = cache_type::create(o);
  if (!created) {
    switch (created.error()) {
    case errc::budget_too_small:
      rep.error = "snapshot budget " + format_bytes(static_cast<double>(c.snapshot_budget_bytes)) +
                  " is below one snapshot (" + format_bytes(static_cast<double>(rep.bytes_per_snapshot)) + ")";
      break;
    case errc::misaligned:
      rep.error = "snapshot interval " + std::to_string(o.capture_interval) +
                  " is not a positive multiple of the alignment unit " + std::to_string(Model::alignment);
      break;
    default: rep.error = "the cache refused the configuration: " + std::string(to_string(created.error()));
    }
    return;
  }
  cache_type& cache = *created;
  rep.snapshot_slots = cache.snapshot_slots();

  materializer m(t);
  std::vector<token> prompt, output;
  std::vector<std::uint32_t> written;
  std::deque<std::uint32_t> in_flight;
  std::vector<std::uint8_t> live(t.requests.size(), 0);
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
    auto done = cache.finish(index);
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
    cache.step_complete(cache.current_epoch());
    in_cache += clock_type::now() - t0;
    const cache_metrics& mm = cache.metrics();
    const double kv = static_cast<double>(sizes.kv_blocks - mm.blocks_free) * static_cast<double>(rep.bytes_per_kv_block);
    const double snap = static_cast<double>(mm.snapshots_held) * static_cast<double>(rep.bytes_per_snapshot);
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
    for (const capture_point& p : plan->captures) written.push_back(p.position);
    if (auto committed = cache.commit(i, length, written); !committed) misuse("commit", committed.error(), i);

    // Decode: the model feeds every output token but the last sampled one.
    if (r.output_tokens > 0) {
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

using runner = void (*)(const trace&, const replay_config&, const pool_sizes&, replay_report&, progress*);

template <class Model>
runner runner_for(policy_kind p) {
  using namespace policy;
  if constexpr (Model::has_recurrent) {
    switch (p) {
    case policy_kind::memory_only: return &run<Model, memory_only>;
    case policy_kind::snapshot_interval:
      return &run<Model, snapshot_restore<capture<every_interval>, accept_prefill_exact>>;
    case policy_kind::snapshot_prefix_tree:
      return &run<Model, snapshot_restore<capture<every_interval, last_aligned, branch_point>, accept_prefill_exact>>;
    case policy_kind::snapshot_turns: return &run<Model, snapshot_restore<>>;
    case policy_kind::snapshot_all:
      return &run<Model, snapshot_restore<capture<every_interval, last_aligned, branch_point, end_of_turn>, accept_any>>;
    case policy_kind::block_sharing: return nullptr;
    }
    return nullptr;
  } else {
    return p == policy_kind::block_sharing ? &run<Model, block_sharing> : nullptr;
  }
}

/// The smallest model with block size B and, for Q > 0, a recurrent layer with chunk Q (alignment max(B, Q)).
template <std::uint32_t B, std::uint32_t Q>
struct geometry_model_of {
  using type = hybrid_model<
      layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 1, .block_size = B}>, 1>,
      layers<mamba2_state<mamba2_shape{.heads = 1, .head_dim = 1, .state_dim = 1, .groups = 1, .conv_width = 4, .chunk = Q}>,
             1>>;
};
template <std::uint32_t B>
struct geometry_model_of<B, 0> {
  using type = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 1, .block_size = B}>, 1>>;
};
template <std::uint32_t B, std::uint32_t Q>
using geometry_model = typename geometry_model_of<B, Q>::type;

struct geometry {
  std::uint32_t block_size;
  std::uint32_t alignment;
  bool recurrent;
  runner (*pick)(policy_kind);
};

template <std::uint32_t B, std::uint32_t Q>
constexpr geometry make_geometry() {
  using M = geometry_model<B, Q>;
  return {M::block_size, M::alignment, M::has_recurrent, &runner_for<M>};
}

/// Geometry tables, one per translation unit (sim/geometries_*.cpp).
std::span<const geometry> attention_geometries();
std::span<const geometry> hybrid_geometries_a64();
std::span<const geometry> hybrid_geometries_a128();
std::span<const geometry> hybrid_geometries_a256();

/// `runner_for<Preset>`: the presets' own types, for the equivalence test.
runner preset_runner(preset_id id, policy_kind p);

} // namespace reprise::sim::adapter
