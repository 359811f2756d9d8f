// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The replay adapter: the one file that names the `prefix_cache` API (included by the translation units
/// that instantiate it).
///
/// Every model, preset or model file, replays through `prefix_cache<dynamic_model, Policy>` (with
/// `policy::tiers<policy::host_tier>` when the replay has a host KV budget): the cache is
/// built from the model's `model_config` at run time, so any block size and alignment the cache supports
/// works and byte gauges are the model's real bytes. The presets' own compile-time types run through the same
/// loop (`replay_with_preset_type`), which tests use to show that the typed and runtime forms agree.

#include "sim/fleet_store.hpp"
#include "sim/progress.hpp"
#include "sim/replay.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/keys/content_key.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>
#include <reprise/routing/fleet_keys.hpp>
#include <reprise/routing/state_router.hpp>

#include <algorithm>
#include <chrono>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <span>
#include <type_traits>
#include <vector>

namespace reprise::sim::adapter {

using clock_type = std::chrono::steady_clock;

/// The cache options of a replay: `kv_blocks` blocks, the snapshot budgets in the model's real bytes, the
/// fleet's content keys `keys` for a remote tier.
inline cache_options options_for(const replay_config& c, std::uint32_t kv_blocks, remote_keys_ref keys = nullptr) {
  cache_options o;
  o.kv_blocks = kv_blocks;
  o.max_sequences = c.concurrency + 1;
  o.snapshot_budget_bytes = restores_snapshots(c.policy) ? c.snapshot_budget_bytes : 0;
  o.snapshot_ttl_steps = c.snapshot_ttl_steps;
  o.max_snapshots_per_path = c.max_snapshots_per_path;
  o.capture_interval = uses_interval(c.policy) ? effective_interval(c) : 0;
  o.hasher_seed = c.hasher_seed;
  o.host_kv_budget_bytes = c.host_kv_budget_bytes;
  o.host_snapshot_budget_bytes = restores_snapshots(c.policy) ? c.host_snapshot_budget_bytes : 0;
  o.remote_keys = keys;
  // The cost model: 2 FLOPs per active parameter and token (the figure the report's savings use) plus
  // attention's quadratic term from the layer shapes.
  o.prefill_cost = {.linear = 2 * c.model.active_params, .quadratic = prefill_cost_of(c.model.config).quadratic};
  if (c.snapshot_eviction == eviction_kind::cost_aware) o.snapshot_eviction = policy::snapshot_eviction::cost_aware;
  // The simulator's choosers see the 64 oldest idle snapshots (the most the cache offers).
  if (c.snapshot_eviction == eviction_kind::marconi || c.snapshot_eviction == eviction_kind::oracle)
    o.eviction_window = policy::max_eviction_window;
  if (c.snapshot_eviction == eviction_kind::cost_aware) o.eviction_window = 0; // the cache's default, 8
  if (keys != nullptr) {
    o.remote_snapshot_candidates = c.remote_snapshot_candidates;
    o.remote_write_through = c.remote_write_through;
    o.remote_turn_ends = c.remote_turn_ends && takes_turn_ends(c.policy); // the other policies keep none
  }
  return o;
}

/// Why `create` refused `o`: the configuration rule broken (config_rules.hpp), with the budgets' and the
/// interval's figures where the command line set them.
inline std::string creation_error(const replay_config& c, const cache_options& o, config_rule rule) {
  const model_config& m = c.model.config;
  auto bytes = [](std::uint64_t v) { return format_bytes(static_cast<double>(v)); };
  switch (rule) {
  case config_rule::host_kv_budget_below_one_block:
    return "host KV budget " + bytes(o.host_kv_budget_bytes) + " is below one block (" + bytes(m.bytes_per_kv_block()) +
           ")";
  case config_rule::host_snapshot_budget_below_one_snapshot:
    return "host snapshot budget " + bytes(o.host_snapshot_budget_bytes) + " is below one snapshot (" +
           bytes(m.bytes_per_snapshot()) + ")";
  case config_rule::snapshot_budget_below_one_snapshot:
    return "snapshot budget " + bytes(c.snapshot_budget_bytes) + " is below one snapshot (" + bytes(m.bytes_per_snapshot()) + ")";
  case config_rule::capture_interval_misaligned:
    return "snapshot interval " + std::to_string(o.capture_interval) + " is not a positive multiple of the alignment unit " +
           std::to_string(m.alignment());
  default: return reprise::describe(rule);
  }
}

/// The rule `Cache::create` broke with options `o` (`prefix_cache::check`).
template <class Cache>
config_rule broken_rule(const replay_config& c, const cache_options& o) {
  if constexpr (std::is_same_v<typename Cache::model_type, dynamic_model>) return Cache::check(c.model.config, o);
  else return Cache::check(o);
}

/// What the engines of one replay share: the trace, the configuration, and the report they add to.
struct fleet_context {
  const trace& t;
  const replay_config& c;
  std::uint32_t kv_blocks;
  replay_report& rep;
  /// Requests a later one continues (`from` segments), with `last_turn_hints`: the others end their
  /// conversation.
  std::vector<std::uint8_t> continued;
  /// Requests admitted and not finished yet, on whichever engine serves them.
  std::vector<std::uint8_t> live;
  clock_type::duration in_cache{};
  /// The remote tier every engine shares (null without one).
  fleet_store* store = nullptr;
  /// `eviction_kind::oracle`: the request being served, and every prompt's prefix hashes (sim/eviction.hpp).
  std::uint32_t now = 0;
  std::vector<oracle_chooser::entry> oracle_index;
  std::vector<std::uint32_t> prompt_length;
};

/// One engine: its cache, the requests it has in flight, and its share of the report.
///
/// The engine drives the cache exactly as its contract says, so any error from commit or finish is a bug
/// here or in the cache: the first one is reported and ends the replay.
template <class Cache>
class engine {
public:
  static constexpr bool host = policy::tier_traits<typename Cache::tiers_type>::host;
  static constexpr bool remote = policy::tier_traits<typename Cache::tiers_type>::remote;

  engine(Cache cache, fleet_context& f, std::uint32_t index)
      : cache_(std::move(cache)), f_(f), index_(index),
        label_(f.c.engines > 1 ? "engine " + std::to_string(index) + ": " : std::string()) {}

  const Cache& cache() const noexcept { return cache_; }
  Cache& cache() noexcept { return cache_; }
  /// `eviction_kind::oracle`: where this engine records what its captures hold.
  void set_oracle(oracle_chooser* o) noexcept { oracle_ = o; }

  /// Serves request `i` with prompt `prompt`: admit (after finishing what must make room), commit the
  /// prompt, decode, and finish it when nothing else may be in flight.
  void serve(std::uint32_t i, std::span<const token> prompt) {
    const replay_config& c = f_.c;
    replay_report& rep = f_.rep;
    replay_report::engine_share& share = rep.per_engine[index_];
    const request& r = f_.t.requests[i];
    while (in_flight_.size() >= c.concurrency) {
      finish(in_flight_.front());
      in_flight_.pop_front();
    }

    const extra_keys keys{.tenant_salt = r.tenant};
    if constexpr (remote) fetch_from_store(i, prompt, keys);
    auto admit = [&] { return cache_.admit(i, prompt, keys); };
    auto t0 = clock_type::now();
    auto plan = admit();
    if (!plan && plan.error() == errc::pool_exhausted && !in_flight_.empty()) {
      // Everything in flight holds blocks: let it finish, then try once more.
      f_.in_cache += clock_type::now() - t0;
      finish_all();
      end_step();
      t0 = clock_type::now();
      plan = admit();
    }
    if (!plan) {
      f_.in_cache += clock_type::now() - t0;
      ++rep.requests_rejected;
      ++share.requests_rejected;
      end_step();
      return;
    }
    const auto length = static_cast<std::uint32_t>(prompt.size());
    ++rep.requests;
    rep.prompt_tokens += length;
    rep.kv_matched_tokens += plan->kv_matched_tokens;
    rep.usable_tokens += plan->usable_tokens;
    rep.tokens_lost += plan->tokens_lost_to_missing_snapshot;
    rep.hits += plan->usable_tokens > 0;
    rep.kv_hits += plan->kv_matched_tokens > 0;
    ++share.requests;
    share.prompt_tokens += length;
    share.kv_matched_tokens += plan->kv_matched_tokens;
    share.usable_tokens += plan->usable_tokens;
    share.hits += plan->usable_tokens > 0;
    share.kv_hits += plan->kv_matched_tokens > 0;
    if constexpr (host) {
      // Onboarded full blocks hold B tokens each (the plan says how many); a turn end's partial block that
      // was not copied from GPU memory came back from the host tier, and holds the match past the shared
      // full blocks (it is copied into block_table[shared_blocks]).
      std::uint64_t from_host = std::uint64_t{plan->host_blocks_onboarded} * cache_.block_size();
      if (plan->copy_src == no_block)
        from_host += plan->kv_matched_tokens - std::uint64_t{plan->shared_blocks} * cache_.block_size();
      rep.host_kv_hit_tokens += from_host;
      share.host_kv_hit_tokens += from_host;
    }

    if (oracle_ != nullptr) record_captures(i, prompt, *plan);
    // The engine restores, prefills [usable, L) and writes every planned capture.
    written_.clear();
    for (const capture_point& p : plan->captures) written_.push_back(static_cast<std::uint32_t>(p.position));
    if (auto committed = cache_.commit(i, length, written_); !committed) misuse("commit", committed.error(), i);

    // Decode: the model feeds every output token but the last sampled one, in steps after the prefill's (whose
    // kernels, the restore copy included, have completed by then).
    if (r.output_tokens > 0) {
      take_transfers();
      if (auto done = cache_.step_complete(cache_.current_epoch()); !done) misuse("step_complete", done.error(), i);
      output_.clear();
      materializer::append_output(i, r.output_tokens, output_);
      if (cache_.extend(i, output_)) {
        if (auto decoded = cache_.commit(i, length + r.output_tokens - 1); !decoded) misuse("commit", decoded.error(), i);
        rep.output_tokens += r.output_tokens;
      } else {
        ++rep.decode_truncated;
      }
    }
    f_.in_cache += clock_type::now() - t0;
    in_flight_.push_back(i);
    f_.live[i] = 1;
    if (c.concurrency == 1) {
      finish(i);
      in_flight_.pop_back();
    }
    end_step();
    if (c.check_invariants && !cache_.check_invariants())
      rep.error = label_ + "check_invariants failed after request " + std::to_string(r.id);
  }

  /// Finishes request `index`, in flight here, before its turn: a later request continues it.
  void finish_early(std::uint32_t index) {
    finish(index);
    std::erase(in_flight_, index);
  }

  /// Finishes everything in flight and completes the last step.
  void drain() {
    finish_all();
    end_step();
  }

  /// Adds the cache's counters to the report, and checks that the moves `take_transfers` listed are the ones
  /// the host tier's counters count.
  void collect() {
    replay_report& rep = f_.rep;
    const cache_metrics& mm = cache_.metrics();
    for_each_metric([&](metric id, auto member) {
      if (metric_info_of(id).kind == metric_kind::counter) rep.metrics.*member += mm.*member;
    });
    rep.transfer_steps += transfer_steps_;
    rep.kv_offload_moves += kv_offload_moves_;
    rep.snapshot_offload_moves += snapshot_offload_moves_;
    rep.kv_onboard_moves += kv_onboard_moves_;
    rep.remote_block_hits += remote_block_hits_;
    rep.remote_probed_keys += probed_keys_;
    rep.remote_probed_found += probed_found_;
    rep.remote_snapshot_hits += remote_snapshot_hits_;
    rep.remote_turn_end_hits += remote_turn_end_hits_;
    if (!rep.error.empty()) return;
    if (remote_puts_ != mm.remote_puts)
      rep.error = label_ + "take_transfers listed " + std::to_string(remote_puts_) + " remote puts; the metrics count " +
                  std::to_string(mm.remote_puts);
    if (remote_block_hits_ + remote_snapshot_hits_ + remote_turn_end_hits_ != mm.remote_hits)
      rep.error = label_ + std::to_string(remote_block_hits_ + remote_snapshot_hits_ + remote_turn_end_hits_) +
                  " fetches were kept; the metrics count " + std::to_string(mm.remote_hits);
    if (!rep.error.empty()) return;
    if (kv_offload_moves_ != mm.host_blocks_offloaded || snapshot_offload_moves_ != mm.host_snapshots_offloaded ||
        kv_onboard_moves_ != mm.host_blocks_onboarded + mm.host_tails_onboarded)
      rep.error = label_ + "take_transfers listed " + std::to_string(kv_offload_moves_) + " KV offloads, " +
                  std::to_string(snapshot_offload_moves_) + " snapshot offloads and " +
                  std::to_string(kv_onboard_moves_) + " onboards; the metrics count " +
                  std::to_string(mm.host_blocks_offloaded) + ", " + std::to_string(mm.host_snapshots_offloaded) +
                  " and " + std::to_string(mm.host_blocks_onboarded + mm.host_tails_onboarded);
    else if (f_.c.check_invariants && !cache_.check_invariants())
      rep.error = label_ + "check_invariants failed at the end";
  }

  // Occupancy over the engine's steps.
  double peak_kv = 0, peak_snapshot = 0, peak_host_kv = 0, peak_host_snapshot = 0;
  double mean_kv() const noexcept { return samples_ ? kv_sum_ / static_cast<double>(samples_) : 0; }
  double mean_snapshot() const noexcept { return samples_ ? snap_sum_ / static_cast<double>(samples_) : 0; }

private:
  void misuse(const char* call, errc e, std::uint32_t index) {
    if (f_.rep.error.empty())
      f_.rep.error = label_ + std::string(call) + " failed with " + std::string(to_string(e)) + " for request " +
                     std::to_string(f_.t.requests[index].id);
  }

  /// `eviction_kind::oracle`: the prefixes request `i`'s captures hold, and the one its turn end would.
  void record_captures(std::uint32_t i, std::span<const token> prompt, const admit_plan& plan) {
    const std::uint64_t tenant = f_.t.requests[i].tenant;
    prefix_hasher::hashes(prompt, tenant, hashes_);
    for (const capture_point& p : plan.captures) {
      const auto at = static_cast<std::uint64_t>(p.position);
      if (static_cast<std::size_t>(p.slot) < oracle_->slots.size())
        oracle_->slots[static_cast<std::size_t>(p.slot)] = {hashes_[at / prefix_hasher::step], at};
    }
    // The turn end sits at the prompt plus the decoded tokens fed (all but the last sampled one).
    const std::uint32_t out = f_.t.requests[i].output_tokens;
    ended_.assign(prompt.begin(), prompt.end());
    if (out > 1) materializer::append_output(i, out - 1, ended_);
    prefix_hasher::hashes(ended_, tenant, hashes_);
    if (turn_ends_.size() < f_.t.requests.size()) turn_ends_.resize(f_.t.requests.size());
    turn_ends_[i] = {hashes_[ended_.size() / prefix_hasher::step], ended_.size()};
  }

  void finish(std::uint32_t index) {
    const auto t0 = clock_type::now();
    auto done = cache_.finish(index, {.last_turn = f_.c.last_turn_hints && f_.continued[index] == 0});
    f_.in_cache += clock_type::now() - t0;
    if (!done) misuse("finish", done.error(), index);
    if (done && oracle_ != nullptr && done->capture.slot != no_slot && index < turn_ends_.size() &&
        static_cast<std::size_t>(done->capture.slot) < oracle_->slots.size())
      oracle_->slots[static_cast<std::size_t>(done->capture.slot)] = turn_ends_[index];
    f_.live[index] = 0;
  }

  void finish_all() {
    for (std::uint32_t index : in_flight_) finish(index);
    in_flight_.clear();
  }

  /// Prefetches request `i` from the fleet's store and reports every fetch, before its admit: the puts of
  /// what the reservations evicted go first, then each fetch is answered by the store (a hit's header, or a
  /// miss) and the cache keeps what verifies.
  void fetch_from_store(std::uint32_t i, std::span<const token> prompt, const extra_keys& keys) {
    const auto t0 = clock_type::now();
    if (f_.c.remote_probe) {
      auto listed = cache_.probe(prompt, keys);
      if (!listed) {
        f_.in_cache += clock_type::now() - t0;
        misuse("probe", listed.error(), i);
        return;
      }
      probe_keys_.clear();
      for (const remote_probe& k : listed->keys) probe_keys_.push_back(k.key);
      f_.in_cache += clock_type::now() - t0;
      f_.store->probe(probe_keys_, probe_found_);
      present_.clear();
      for (std::size_t k = 0; k < probe_keys_.size(); ++k)
        if (probe_found_[k] != 0) present_.push_back(probe_keys_[k]);
      probed_keys_ += probe_keys_.size();
      probed_found_ += present_.size();
    }
    const auto t_plan = clock_type::now();
    auto plan = f_.c.remote_probe ? cache_.prefetch(prompt, keys, present_) : cache_.prefetch(prompt, keys);
    if (!plan) {
      f_.in_cache += clock_type::now() - t_plan;
      misuse("prefetch", plan.error(), i);
      return;
    }
    fetches_.assign(plan->fetches.begin(), plan->fetches.end());
    take_transfers();
    f_.in_cache += clock_type::now() - t_plan;
    for (const remote_fetch& fetch : fetches_) {
      const bool found = f_.store->get(fetch.key, payload_bytes(fetch.item, fetch.kv_units.size()), header_);
      const auto t1 = clock_type::now();
      const std::uint64_t kept = cache_.metrics().remote_hits;
      if (auto done = cache_.fetched(fetch.item, fetch.unit, found ? std::span<const std::byte>(header_)
                                                                   : std::span<const std::byte>());
          !done)
        misuse("fetched", done.error(), i);
      if (cache_.metrics().remote_hits != kept)
        ++(fetch.item == remote_item::block      ? remote_block_hits_
           : fetch.item == remote_item::snapshot ? remote_snapshot_hits_
                                                 : remote_turn_end_hits_);
      f_.in_cache += clock_type::now() - t1;
    }
  }

  std::uint64_t payload_bytes(remote_item item, std::size_t kv_units) const noexcept {
    return remote_payload_bytes(item, kv_units, f_.rep.bytes_per_kv_block, f_.rep.bytes_per_snapshot);
  }

  /// The step's moves, which an engine issues before the step's work: counted, not executed (the remote
  /// puts go to the fleet's store).
  void take_transfers() {
    if constexpr (host) {
      const transfer_plan moves = cache_.take_transfers();
      if constexpr (remote) {
        for (const remote_put& p : moves.remote_puts) f_.store->put(p.key, p.header, payload_bytes(p.item, p.kv_units.size()));
        remote_puts_ += moves.remote_puts.size();
      }
      transfer_steps_ += !moves.empty();
      kv_offload_moves_ += moves.kv_offload.size();
      snapshot_offload_moves_ += moves.snapshot_offload.size();
      kv_onboard_moves_ += moves.kv_onboard.size();
    }
  }

  void end_step() {
    const auto t0 = clock_type::now();
    take_transfers();
    if (auto done = cache_.step_complete(cache_.current_epoch()); !done && f_.rep.error.empty())
      f_.rep.error = label_ + "step_complete failed with " + std::string(to_string(done.error()));
    // An engine steps on (other sequences decode) and its next step's transfers go out at once: the puts the
    // completed step allows (written through) reach the store now, not when this engine next gets a request.
    if constexpr (remote) {
      if (f_.c.remote_write_through) take_transfers();
    }
    f_.in_cache += clock_type::now() - t0;
    const cache_metrics& mm = cache_.metrics();
    const double kv = static_cast<double>(f_.kv_blocks - mm.blocks_free) * static_cast<double>(f_.rep.bytes_per_kv_block);
    const double snap = static_cast<double>(mm.snapshot_bytes_held);
    peak_kv = std::max(peak_kv, kv);
    peak_snapshot = std::max(peak_snapshot, snap);
    if constexpr (host) {
      peak_host_kv = std::max(peak_host_kv, static_cast<double>(mm.host_blocks_held) *
                                                static_cast<double>(f_.rep.bytes_per_kv_block));
      peak_host_snapshot = std::max(peak_host_snapshot, static_cast<double>(mm.host_snapshots_held) *
                                                            static_cast<double>(f_.rep.bytes_per_snapshot));
    }
    kv_sum_ += kv;
    snap_sum_ += snap;
    ++samples_;
  }

  Cache cache_;
  fleet_context& f_;
  std::uint32_t index_;
  std::string label_; ///< prefixes error messages in a fleet
  std::deque<std::uint32_t> in_flight_;
  std::vector<std::uint32_t> written_;
  std::vector<token> output_;
  double kv_sum_ = 0, snap_sum_ = 0;
  std::uint64_t samples_ = 0;
  std::uint64_t transfer_steps_ = 0, kv_offload_moves_ = 0, snapshot_offload_moves_ = 0, kv_onboard_moves_ = 0;
  std::uint64_t remote_puts_ = 0, remote_block_hits_ = 0, remote_snapshot_hits_ = 0, remote_turn_end_hits_ = 0;
  std::uint64_t probed_keys_ = 0, probed_found_ = 0;
  std::vector<content_key> probe_keys_, present_;
  std::vector<std::uint8_t> probe_found_;
  std::vector<remote_fetch> fetches_;
  std::vector<std::byte> header_;
  oracle_chooser* oracle_ = nullptr;
  std::vector<std::uint64_t> hashes_;
  std::vector<token> ended_;
  std::vector<oracle_chooser::slot_info> turn_ends_;
};

/// Creates the engines' caches (typed: `Cache::create(o)`, runtime: from the model's config) and replays `t`,
/// each request on the engine `route_requests` picks.
template <class Cache>
void run(const trace& t, const replay_config& c, std::uint32_t kv_blocks, replay_report& rep, progress* bar) {
  fleet_context f{.t = t, .c = c, .kv_blocks = kv_blocks, .rep = rep, .continued = {}, .live = {}, .oracle_index = {}, .prompt_length = {}};
  // The remote tier: the fleet's content keys (the model's name stands in for its weights' revision) and
  // the store every engine shares.
  std::optional<content_keyer> keyer;
  std::unique_ptr<fleet_store> store;
  if constexpr (policy::tier_traits<typename Cache::tiers_type>::remote) {
    auto fingerprint = model_fingerprint::make(c.model.config, c.model.name);
    auto made = fingerprint ? content_keyer::make({.fleet_seed = c.hasher_seed, .fingerprint = *fingerprint}, c.model.config)
                            : result<content_keyer>(failure{fingerprint.error()});
    if (!made) {
      rep.error = "no content keys for this model: " + std::string(to_string(made.error()));
      return;
    }
    keyer.emplace(std::move(*made));
    if (c.remote_redis.empty()) {
      store = std::make_unique<modelled_store>(c.remote_budget_bytes);
    } else {
      store = make_redis_fleet_store(c.remote_redis, c.remote_stand_in_bytes, rep.error);
      if (!store) return;
    }
    f.store = store.get();
    rep.remote_store = store->describe();
  }
  cache_options o = options_for(c, kv_blocks, keyer ? &*keyer : nullptr);
  // Routing by state: every cache reports what it holds, by the fleet's content keys, to one router.
  std::optional<routing::fleet_keys> state_keys;
  std::optional<routing::state_router<routing::fleet_keys>> router;
  if (c.state_aware && c.engines > 1) {
    auto fingerprint = model_fingerprint::make(c.model.config, c.model.name);
    auto made = fingerprint ? routing::fleet_keys::make({.fleet_seed = c.hasher_seed, .fingerprint = *fingerprint},
                                                        c.model.config)
                            : result<routing::fleet_keys>(failure{fingerprint.error()});
    if (!made) {
      rep.error = "no content keys for this model: " + std::string(to_string(made.error()));
      return;
    }
    state_keys.emplace(std::move(*made));
    routing::router_options ro =
        routing::router_options::for_model(c.model.config, c.engines,
                                           policy::policy_traits<typename Cache::policy_type>::accepts_decode_continuation);
    ro.load_slack = c.load_slack;
    auto r = routing::state_router<routing::fleet_keys>::make(ro, *state_keys);
    if (!r) {
      rep.error = "no state router: " + std::string(to_string(r.error()));
      return;
    }
    router.emplace(std::move(*r));
    o.state_events = &*state_keys;
  }
  rep.per_engine.assign(c.engines, {});
  // The simulator's victim choosers, one per engine (the oracle records what each engine's slots hold).
  std::vector<marconi_chooser> marconi(c.engines);
  std::vector<oracle_chooser> oracle(c.engines);
  if (c.snapshot_eviction == eviction_kind::oracle) {
    materializer all(t);
    std::vector<token> p;
    std::vector<std::uint64_t> h;
    f.prompt_length.resize(t.requests.size());
    for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
      all.prompt(i, p);
      f.prompt_length[i] = static_cast<std::uint32_t>(p.size());
      prefix_hasher::hashes(p, t.requests[i].tenant, h);
      for (std::uint64_t x : h) f.oracle_index.push_back({x, i});
    }
    std::sort(f.oracle_index.begin(), f.oracle_index.end());
  }
  std::vector<engine<Cache>> fleet;
  fleet.reserve(c.engines);
  for (std::uint32_t e = 0; e < c.engines; ++e) {
    if (c.snapshot_eviction == eviction_kind::marconi) {
      marconi[e] = {.alpha = c.marconi_alpha, .bytes = static_cast<double>(c.model.config.bytes_per_snapshot()),
                    .cost = o.prefill_cost};
      o.snapshot_chooser = {&marconi_chooser::choose, &marconi[e]};
    } else if (c.snapshot_eviction == eviction_kind::oracle) {
      oracle[e].index = &f.oracle_index;
      oracle[e].prompt_length = &f.prompt_length;
      oracle[e].now = &f.now;
      oracle[e].slots.assign(restores_snapshots(c.policy) ? c.snapshot_budget_bytes / c.model.config.bytes_per_snapshot() + 1 : 0, {});
      o.snapshot_chooser = {&oracle_chooser::choose, &oracle[e]};
    }
    if (o.remote_turn_ends) o.remote_writer_id = e + 1; // one per engine, the same in every run
    auto created = [&] {
      if constexpr (std::is_same_v<typename Cache::model_type, dynamic_model>) return Cache::create(c.model.config, o);
      else return Cache::create(o);
    }();
    if (!created) {
      rep.error = creation_error(c, o, broken_rule<Cache>(c, o));
      return;
    }
    fleet.emplace_back(std::move(*created), f, e);
    if (c.snapshot_eviction == eviction_kind::oracle) fleet.back().set_oracle(&oracle[e]);
  }
  rep.snapshot_slots = fleet.front().cache().snapshot_slots();
  rep.host_kv_units = fleet.front().cache().host_kv_units();
  rep.host_snapshot_units = fleet.front().cache().host_snapshot_units();

  // One engine needs no routing table (traces may hold millions of requests). Routing by state fills it as
  // requests come.
  std::vector<std::uint32_t> route = c.engines > 1 && !router ? route_requests(t, c.engines, c.affinity)
                                     : router                ? std::vector<std::uint32_t>(t.requests.size(), 0)
                                                             : std::vector<std::uint32_t>{};
  std::vector<double> load(c.engines, 0);
  // Each engine's events since the last delivery go to the router (a lost or late event costs a miss only).
  auto deliver_events = [&] {
    for (std::uint32_t e = 0; e < c.engines; ++e)
      for (const state_event& ev : fleet[e].cache().take_state_events()) (void)router->apply(e, ev);
  };
  auto engine_of = [&](std::uint32_t i) -> engine<Cache>& { return fleet[route.empty() ? 0 : route[i]]; };
  f.live.assign(t.requests.size(), 0);
  f.continued.assign(t.requests.size(), 0);
  if (c.last_turn_hints)
    for (const request& r : t.requests)
      for (const segment& s : t.segments_of(r))
        if (s.kind == segment_kind::from) f.continued[s.ref] = 1;

  materializer m(t);
  std::vector<token> prompt;
  const auto wall0 = clock_type::now();
  for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
    m.prompt(i, prompt);
    f.now = i;
    if (bar) bar->update(i);
    // A request that continues one still in flight waits for it (its turn ended before this one began),
    // on whichever engine it runs.
    if (c.concurrency > 1) {
      for (const segment& s : t.segments_of(t.requests[i]))
        if (s.kind == segment_kind::from && f.live[s.ref]) engine_of(s.ref).finish_early(s.ref);
    }
    if (router) {
      const extra_keys keys{.tenant_salt = t.requests[i].tenant};
      const auto choice = router->route(std::span<const token_id>(prompt.data(), prompt.size()), keys, load);
      route[i] = choice ? choice->engine : 0;
      if (choice && choice->redirected_by_load) ++rep.requests_redirected_by_load;
      load[route[i]] += 1;
    }
    engine_of(i).serve(i, prompt);
    if (!rep.error.empty()) return;
    if (router) deliver_events();
  }
  for (engine<Cache>& e : fleet) e.drain();
  if (router && !t.requests.empty())
    rep.max_engine_load_ratio = *std::max_element(load.begin(), load.end()) * c.engines / static_cast<double>(t.requests.size());
  rep.wall_seconds = std::chrono::duration<double>(clock_type::now() - wall0).count();
  rep.cache_seconds = std::chrono::duration<double>(f.in_cache).count();

  // Gauges are per engine: the largest peak, the mean over engines.
  double mean_kv = 0, mean_snapshot = 0;
  for (engine<Cache>& e : fleet) {
    rep.peak_kv_bytes = std::max(rep.peak_kv_bytes, e.peak_kv);
    rep.peak_snapshot_bytes = std::max(rep.peak_snapshot_bytes, e.peak_snapshot);
    rep.peak_host_kv_bytes = std::max(rep.peak_host_kv_bytes, e.peak_host_kv);
    rep.peak_host_snapshot_bytes = std::max(rep.peak_host_snapshot_bytes, e.peak_host_snapshot);
    mean_kv += e.mean_kv();
    mean_snapshot += e.mean_snapshot();
    e.collect();
  }
  if (store) {
    const fleet_store_stats st = store->stats();
    rep.remote_store_evictions = st.evictions;
    rep.peak_remote_bytes = static_cast<double>(st.peak_bytes_held);
    rep.remote_failures = st.failures;
    rep.remote_wrong_payloads = st.wrong_payloads;
    if (st.failures != 0)
      rep.warnings.push_back("the store (" + rep.remote_store + ") failed " + std::to_string(st.failures) +
                             " requests (unreachable, timed out or refused): their fetches count as misses and "
                             "their puts are lost");
    if (st.wrong_payloads != 0 && rep.error.empty())
      rep.error = "the store returned " + std::to_string(st.wrong_payloads) + " values with other bytes than were put";
  }
  rep.mean_kv_bytes = mean_kv / static_cast<double>(fleet.size());
  rep.mean_snapshot_bytes = mean_snapshot / static_cast<double>(fleet.size());
}

using runner = void (*)(const trace&, const replay_config&, std::uint32_t kv_blocks, replay_report&, progress*);

/// The replay of policy `p` over a model of kind `Model` (`dynamic_model` or a preset type) with the tiers
/// `Tiers`; null where the catalog does not offer the policy for the model (`recurrent`: whether it has
/// recurrent layers; a preset type's own answer decides at compile time) or it takes no host tier and
/// `Tiers` has one (`prefix_cache` refuses that combination).
template <class Model, class Tiers = policy::tiers<>>
runner runner_for(policy_kind p, bool recurrent) {
  return catalog::visit_policy(p, [&](auto tag) -> runner { // [&]: a preset type decides without `recurrent`
    using P = typename decltype(tag)::type;
    using cache = prefix_cache<Model, P, xxh3_hasher, Tiers>;
    if constexpr (policy::tier_traits<Tiers>::host && !reprise::takes_host_tier<P>) {
      return nullptr;
    } else if constexpr (std::is_same_v<Model, dynamic_model>) {
      return recurrent == catalog::for_recurrent_models<P> ? &run<cache> : nullptr;
    } else {
      if constexpr (Model::has_recurrent == catalog::for_recurrent_models<P>) return &run<cache>;
      else return nullptr;
    }
  });
}

/// The replay of policy `p` for a runtime model with or without recurrent layers, with or without a host
/// tier and a remote tier below it (null: does not apply).
inline runner runtime_runner(policy_kind p, bool recurrent, bool host, bool remote) {
  using host_tiers = policy::tiers<policy::host_tier>;
  using remote_tiers = policy::tiers<policy::host_tier, policy::remote_tier>;
  if (host && remote) return runner_for<dynamic_model, remote_tiers>(p, recurrent);
  if (host) return runner_for<dynamic_model, host_tiers>(p, recurrent);
  return runner_for<dynamic_model>(p, recurrent);
}

/// The presets' own types, for the equivalence test (null for a preset without an instantiation here). They
/// replay without a host tier.
runner preset_runner(std::optional<preset_id> id, policy_kind p);

} // namespace reprise::sim::adapter
