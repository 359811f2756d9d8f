// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Replaying a trace through `reprise::prefix_cache`, with model compute left out.
///
/// Each request goes through the engine-facing flow (docs/architecture.md): `admit` (with the tenant as
/// salt), `commit` of the whole prompt with every planned capture reported as written, `extend` with the
/// output tokens and `commit` of every token the model has fed (all but the last sampled one), `finish`,
/// and `step_complete` for the step. With `concurrency` > 1 up to that many requests are in flight: a
/// request is finished `concurrency` steps after its admit, or earlier when a later request continues it.
///
/// With a host KV budget the cache gets a host tier (`policy::tiers<policy::host_tier>`): what the GPU pools
/// evict is offloaded to host memory and onboarded on a later hit. The replay takes the step's moves
/// (`take_transfers`) before every `step_complete`, as an engine issues them before the step's work, and
/// counts them; no bytes move.
///
/// With `engines` > 1 the trace is served by a fleet: each engine has a cache of its own (the budgets are
/// per engine), and a router (`route_requests`) sends each request to one of them. The engines take turns
/// in trace order: a request is one or two steps of its engine's, while the others wait.
///
/// Only this header's types are shared with the rest of the tool; everything that names the cache API lives
/// in sim/cache_replay.cpp.

#include "sim/eviction.hpp"
#include "sim/models.hpp"
#include "sim/trace.hpp"

#include <reprise/cache/metrics.hpp>
#include <reprise/catalog.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::sim {

class progress;

/// The policies the simulator compares: the named policies of <reprise/catalog.hpp>, the names the Python
/// package takes too. Each is one compile-time `prefix_cache` policy type (`catalog::policies`).
using policy_kind = catalog::policy_id;

/// Every named policy, in the catalog's order.
inline constexpr auto all_policies = [] {
  std::array<policy_kind, catalog::policy_table.size()> all{};
  for (std::size_t i = 0; i < all.size(); ++i) all[i] = static_cast<policy_kind>(i);
  return all;
}();

/// Short name for the command line and CSV (`snapshot_all`).
std::string_view to_string(policy_kind p) noexcept;
std::optional<policy_kind> parse_policy(std::string_view name) noexcept;
/// Legend text: the name and, for snapshot policies, where they capture (`snapshot_all (every I, last, ...)`).
std::string describe(policy_kind p);
/// Whether the policy uses the snapshot interval.
bool uses_interval(policy_kind p) noexcept;
bool restores_snapshots(policy_kind p) noexcept;
/// The policies offered for a model (`catalog::for_recurrent_models`): `block_sharing` for attention-only
/// models, the others for hybrids.
std::vector<policy_kind> policies_for(const model_config& m);
/// Whether the policy takes a host tier (`reprise::takes_host_tier`): all but `memory_only`.
bool takes_host_tier(policy_kind p) noexcept;
/// Whether the policy keeps turn ends and may put them in the store (`cache_options::remote_turn_ends`).
bool takes_turn_ends(policy_kind p) noexcept;

struct replay_config {
  sim_model model;                     ///< its `config` may be a block-size variant of a preset
  policy_kind policy = policy_kind::snapshot_all;
  std::uint64_t kv_budget_bytes = std::uint64_t{40} << 30;
  std::uint64_t snapshot_budget_bytes = std::uint64_t{8} << 30;
  std::uint32_t snapshot_interval = 0; ///< 0: 4 x the alignment unit
  std::uint32_t concurrency = 1;
  std::uint64_t snapshot_ttl_steps = 0;
  std::uint32_t max_snapshots_per_path = 0;
  std::uint64_t hasher_seed = 0x5eed; ///< fixed, so runs are reproducible
  bool check_invariants = false;      ///< call `check_invariants()` after every request (tests)
  /// Finish requests that no later request continues with `finish_options::last_turn` (an engine that knows
  /// when a conversation ends).
  bool last_turn_hints = false;
  /// Host memory for KV blocks the GPU pool evicts (`cache_options::host_kv_budget_bytes`); 0: no host tier.
  /// Not for `memory_only`.
  std::uint64_t host_kv_budget_bytes = 0;
  /// Host memory for snapshots the GPU pool evicts (`cache_options::host_snapshot_budget_bytes`); needs a
  /// host KV budget. Ignored by policies that restore no snapshot, as `snapshot_budget_bytes` is.
  std::uint64_t host_snapshot_budget_bytes = 0;
  /// Engines serving the trace, each with its own cache of the budgets above.
  std::uint32_t engines = 1;
  /// How requests reach engines: on, a conversation stays on the engine its first request went to; off,
  /// round robin (`route_requests`).
  bool affinity = true;
  /// Route by state instead (`affinity` ignored): each engine's cache reports what it holds
  /// (`cache_options::state_events`) to a `routing::state_router`, and each request goes to the engine with
  /// the most usable tokens for its prompt among those whose requests so far are at most their share of the
  /// fleet's times 1 + `load_slack` (no session id is used).
  bool state_aware = false;
  double load_slack = 0.25;
  /// A remote tier shared by the fleet's engines (`policy::remote_tier`, below each engine's host tier, so
  /// it needs a host KV budget): what the host tiers evict is put there (prefill-exact blocks and snapshots),
  /// and every request is prefetched from it before its admit. Not for `memory_only`.
  bool remote_tier = false;
  /// The modelled store's capacity: header + payload bytes of the values it keeps, least recently used
  /// evicted first; 0: unlimited.
  std::uint64_t remote_budget_bytes = 0;
  /// Write-through (`cache_options::remote_write_through`): every prefill-exact block and snapshot is put
  /// once its step completed; off, only what the host tiers evict (write-back).
  bool remote_write_through = false;
  /// Snapshots a prefetch asks the store for (`cache_options::remote_snapshot_candidates`).
  std::uint32_t remote_snapshot_candidates = 2;
  /// Probe before every prefetch (`probe`, then `prefetch` of the keys the store has): no host unit is
  /// reserved for what the store lacks. Off: every candidate is fetched, and what misses held a unit.
  bool remote_probe = true;
  /// Turn ends in the store (`cache_options::remote_turn_ends`, policy::chat only).
  bool remote_turn_ends = false;
  /// A live Redis / Valkey server ("host:port") instead of the modelled store; empty: modelled.
  std::string remote_redis;
  /// With `remote_redis`: the payload stored with every value (a stand-in for its real bytes, checked on
  /// every hit).
  std::uint64_t remote_stand_in_bytes = 4096;
  /// Which idle snapshot goes when the snapshot budget is full (sim/eviction.hpp): the cache's LRU or
  /// cost-aware rule, or the simulator's Marconi peer or offline oracle.
  eviction_kind snapshot_eviction = eviction_kind::lru;
  /// `eviction_kind::marconi`: the weight of FLOP efficiency against recency.
  double marconi_alpha = 1.0;
};

/// Whether `c` gives the cache a host tier.
inline bool has_host_tier(const replay_config& c) noexcept { return c.host_kv_budget_bytes != 0; }

/// The engine (in [0, engines)) that serves each request of `t`.
///
/// Affinity on: a request of a session seen before goes where that session's first request went; the first
/// request of a session goes where the request its first `from` segment continues went (a conversation
/// continued under a new session id, an agent's branch), or else to a hash of its session id (FNV-1a: the
/// same engine on every machine). A trace without session ids gives each request its own (its id), so only
/// `from` keeps such a conversation together. Affinity off: round robin in trace order.
std::vector<std::uint32_t> route_requests(const trace& t, std::uint32_t engines, bool affinity);

/// The interval a config actually uses.
std::uint32_t effective_interval(const replay_config& c) noexcept;

struct replay_report {
  // --- configuration ---
  std::string model;
  std::string policy;
  std::uint32_t block_size = 0, alignment = 0, snapshot_interval = 0, concurrency = 0;
  std::uint64_t kv_budget_bytes = 0, snapshot_budget_bytes = 0;
  std::uint32_t kv_blocks = 0, snapshot_slots = 0;
  std::uint64_t bytes_per_kv_block = 0, bytes_per_snapshot = 0;
  /// Set when the configuration cannot run at all (e.g. a snapshot budget below one snapshot); the counts
  /// below are then zero.
  std::string error;
  /// Why a configuration that runs may hit rarely or never (shown in the report and on plots).
  std::vector<std::string> warnings;
  /// Host tier, per engine (0: none).
  std::uint64_t host_kv_budget_bytes = 0, host_snapshot_budget_bytes = 0;
  std::uint32_t host_kv_units = 0, host_snapshot_units = 0;
  /// The fleet: engines and routing (`replay_config`). The budgets above are each engine's.
  std::uint32_t engines = 1;
  bool affinity = true;
  bool state_aware = false;
  double load_slack = 0.25;
  /// With `state_aware`: requests sent elsewhere than the deepest state because its engine was over its load
  /// cap, and the largest share of the requests one engine served over its fair share (1 = even).
  std::uint64_t requests_redirected_by_load = 0;
  double max_engine_load_ratio = 0;

  // --- traffic ---
  std::uint64_t requests = 0;           ///< requests admitted
  std::uint64_t requests_rejected = 0;  ///< prompts needing more KV blocks than the whole budget
  std::uint64_t decode_truncated = 0;   ///< requests whose decode ran out of KV blocks
  std::uint64_t hits = 0;               ///< requests with usable (skipped) tokens > 0
  std::uint64_t kv_hits = 0;            ///< requests with KV-matched tokens > 0
  std::uint64_t prompt_tokens = 0;
  std::uint64_t kv_matched_tokens = 0;
  std::uint64_t usable_tokens = 0;      ///< prefill tokens skipped
  std::uint64_t tokens_lost = 0;        ///< KV matched but recomputed for want of a snapshot
  std::uint64_t prefill_tokens = 0;     ///< prefill tokens computed (prompt - usable)
  /// The prefill floor of the trace: prompt tokens that no earlier request's prompt + output covers (at least
  /// one token per request). 0 when not computed (`prefill_floor` refused the trace's size).
  std::uint64_t floor_tokens = 0;
  double computed_over_floor() const noexcept {
    return floor_tokens ? static_cast<double>(prefill_tokens) / static_cast<double>(floor_tokens) : 0;
  }
  std::uint64_t output_tokens = 0;
  double flops_saved = 0;               ///< 2 * active params * usable tokens

  // --- memory (per engine: in a fleet, the largest engine's peak and the mean over engines) ---
  double peak_kv_bytes = 0, mean_kv_bytes = 0;             ///< blocks not in the free queue
  double peak_snapshot_bytes = 0, mean_snapshot_bytes = 0; ///< published snapshots

  // --- host tier (`policy::host_tier`), summed over the engines ---
  /// Of kv_matched_tokens: tokens whose KV was onboarded from the host tier (full blocks and turn ends'
  /// partial blocks); the rest were in GPU memory.
  std::uint64_t host_kv_hit_tokens = 0;
  std::uint64_t gpu_kv_hit_tokens() const noexcept { return kv_matched_tokens - host_kv_hit_tokens; }
  /// Of `metrics.snapshot_hits`: restored from GPU memory.
  std::uint64_t gpu_snapshot_hits() const noexcept { return metrics.snapshot_hits - metrics.host_snapshot_hits; }
  /// Occupancy of the host tier (largest engine's peak): units held times their bytes.
  double peak_host_kv_bytes = 0, peak_host_snapshot_bytes = 0;
  /// What `take_transfers` returned, once per step: steps with at least one move, and the moves of each kind.
  std::uint64_t transfer_steps = 0, kv_offload_moves = 0, snapshot_offload_moves = 0, kv_onboard_moves = 0;

  // --- remote tier (`policy::remote_tier`): counts summed over the engines, the store's own figures ---
  bool remote_tier = false;
  bool remote_write_through = false;
  bool remote_probe = false;
  std::uint64_t remote_probed_keys = 0, remote_probed_found = 0; ///< keys the probes asked for / found
  std::string remote_store;              ///< what served it ("modelled, 2 GiB LRU", "redis at ...")
  std::uint64_t remote_budget_bytes = 0; ///< modelled store capacity (0: unlimited)
  /// Fetched values the caches verified and kept (`metrics.remote_hits`), by kind; a fetched block is
  /// onboarded as a host hit.
  std::uint64_t remote_block_hits = 0, remote_snapshot_hits = 0, remote_turn_end_hits = 0;
  bool remote_turn_ends = false; ///< turn ends went to the store
  std::uint64_t remote_store_evictions = 0; ///< values the modelled store dropped for its budget
  double peak_remote_bytes = 0;             ///< the modelled store's largest content (header + payload bytes)
  std::uint64_t remote_failures = 0;        ///< live store: timeouts, unavailable, server errors
  std::uint64_t remote_wrong_payloads = 0;  ///< live store: values read back with other bytes than put (0)

  // --- cache events ---
  /// The counters of every engine's cache (`cache_metrics`, metric_kind::counter), summed over the engines;
  /// gauges are left at 0 (the occupancy figures above sample them per step). The host and remote tiers'
  /// counters stay 0 without those tiers.
  cache_metrics metrics{};

  // --- time ---
  double cache_seconds = 0; ///< inside prefix_cache calls only
  double wall_seconds = 0;  ///< the whole replay, token expansion included

  /// One engine's share of the traffic counts above.
  struct engine_share {
    std::uint64_t requests = 0, requests_rejected = 0, hits = 0, kv_hits = 0;
    std::uint64_t prompt_tokens = 0, kv_matched_tokens = 0, usable_tokens = 0, host_kv_hit_tokens = 0;
    double hit_rate() const noexcept {
      return requests ? static_cast<double>(hits) / static_cast<double>(requests) : 0;
    }
    double kv_hit_rate() const noexcept {
      return requests ? static_cast<double>(kv_hits) / static_cast<double>(requests) : 0;
    }
    std::uint64_t prefill_tokens() const noexcept { return prompt_tokens - usable_tokens; }
  };
  /// Per engine, in engine order (one entry for a single engine).
  std::vector<engine_share> per_engine;

  double hit_rate() const noexcept { return requests ? static_cast<double>(hits) / static_cast<double>(requests) : 0; }
  double kv_hit_rate() const noexcept {
    return requests ? static_cast<double>(kv_hits) / static_cast<double>(requests) : 0;
  }
  double skipped_fraction() const noexcept {
    return prompt_tokens ? static_cast<double>(usable_tokens) / static_cast<double>(prompt_tokens) : 0;
  }
  double cache_ns_per_request() const noexcept {
    return requests ? cache_seconds * 1e9 / static_cast<double>(requests) : 0;
  }
  double requests_per_second() const noexcept {
    return wall_seconds > 0 ? static_cast<double>(requests) / wall_seconds : 0;
  }
};

/// Replays `t` through the cache configured by `c` (through `c.engines` caches for a fleet).
/// Effects: none outside the report. Errors: reported in `replay_report::error` (unsupported block size,
/// budget below one snapshot or one block, host budget below one unit or without a host KV budget, a host
/// tier with `memory_only`, misaligned interval, policy that does not apply).
/// Complexity: linear in the trace's tokens.
replay_report replay(const trace& t, const replay_config& c, progress* bar = nullptr);

/// Static checks of a configuration against a trace: warnings for setups that can never or rarely hit.
std::vector<std::string> configuration_warnings(const trace& t, const replay_config& c);

/// Bounds on the host memory of one replay. The cache keeps bookkeeping for every KV block of the budget
/// (a node, the block's tokens, an index bucket: about `cache_bytes_per_block` each) whether or not the
/// trace ever fills it, so a large budget over small blocks would allocate more than the machine has.
struct replay_limits {
  /// Block ids are non-negative `int32` (`reprise::max_pool_ids`).
  std::uint64_t max_kv_blocks = 0x7fff'ffffu;
  /// What the cache's bookkeeping for the KV blocks may take.
  std::uint64_t max_cache_bytes = std::uint64_t{4} << 30;
};

/// Estimated host bytes the cache keeps per KV block of `block_size` tokens (an upper bound).
std::uint64_t cache_bytes_per_block(std::uint32_t block_size) noexcept;

/// The most KV blocks `t` can ever hold at once: every request's prompt and output in its own blocks.
/// A cache with more blocks never evicts, so its results equal those of a cache with exactly this many.
std::uint64_t trace_block_bound(const trace& t, std::uint32_t block_size) noexcept;

/// Checks `c` against `t` and `limits` before any cache is built: a policy that does not apply to the model
/// and KV pools whose bookkeeping exceeds the limits (GPU blocks and host units, over every engine) are
/// errors (the returned message); a KV or host KV budget larger than the trace can fill is lowered to
/// `trace_block_bound` units, a snapshot or host snapshot budget to one slot per aligned position of every
/// request (same results, bounded memory), and `note` says so.
std::string check_config(const trace& t, replay_config& c, const replay_limits& limits, std::string& note);

/// `check_config`, then `replay`: the entry point of the command line and of sweeps. A failed check becomes
/// the report's `error`; a note is added to its warnings.
replay_report simulate(const trace& t, replay_config c, const replay_limits& limits = {}, progress* bar = nullptr);

/// The block sizes the cache supports, as a comma-separated list.
std::string supported_block_sizes_text();

/// The most token positions `prefill_floor` hashes (16 Mi: 256 MiB of table at most).
inline constexpr std::uint64_t max_floor_positions = std::uint64_t{1} << 24;

/// The prefill floor of `t`: for each request, its prompt length minus the longest prefix that an earlier
/// request of the same tenant's prompt + output already holds (leaving at least one token), summed. This is
/// what a cache with unbounded memory, snapshots at every position and exact reuse of decoded tokens would
/// compute; the replay of a policy is judged against it. Prefixes are compared by 64-bit rolling hashes of
/// every position (a collision could only lower the floor, with probability about positions^2 / 2^64).
/// Empty when the trace holds more than `max_positions` token positions.
/// Complexity: O(total tokens) time and memory.
std::optional<std::uint64_t> prefill_floor(const trace& t, std::uint64_t max_positions = max_floor_positions);

/// The report as `key: value` lines for people. Host-tier and fleet lines appear only when configured, so a
/// single engine without a host tier reads as it always has.
std::string format_report(const replay_report& r);

/// How the fleet routed: "on" (session affinity), "off" (round robin) or "state" (the state router).
const char* affinity_name(const replay_report& r) noexcept;

/// One table, a row per report: policy, request hit rate, prefill tokens computed, tokens lost to missing
/// snapshots, peak KV + snapshot bytes (or the error).
std::string format_summary(std::span<const replay_report> reports);

/// CSV column names of `write_report_row`, in order. Columns are only ever added at the end (the host tier
/// and fleet columns follow `warnings`), so readers of older files keep working.
std::vector<std::string> report_columns();
class csv_writer;
void write_report_row(csv_writer& w, const replay_report& r);

} // namespace reprise::sim
