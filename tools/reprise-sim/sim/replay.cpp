// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/replay.hpp"

#include "sim/csv.hpp"

#include <algorithm>
#include <bit>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <vector>

namespace reprise::sim {

std::string_view to_string(policy_kind p) noexcept { return catalog::entry(p).name; }

std::optional<policy_kind> parse_policy(std::string_view name) noexcept { return catalog::find_policy(name); }

std::string describe(policy_kind p) {
  const catalog::policy_entry& e = catalog::entry(p);
  return e.summary.empty() ? std::string(e.name) : std::string(e.name) + " (" + std::string(e.summary) + ")";
}

bool uses_interval(policy_kind p) noexcept { return catalog::entry(p).uses_interval; }

bool restores_snapshots(policy_kind p) noexcept { return catalog::entry(p).restores_snapshots; }

bool takes_host_tier(policy_kind p) noexcept { return catalog::entry(p).takes_host_tier; }

bool takes_turn_ends(policy_kind p) noexcept { return catalog::entry(p).takes_turn_ends; }

std::vector<policy_kind> policies_for(const model_config& m) {
  std::vector<policy_kind> offered;
  for (policy_kind p : all_policies)
    if (catalog::entry(p).for_recurrent_models == m.has_recurrent()) offered.push_back(p);
  return offered;
}

std::uint32_t effective_interval(const replay_config& c) noexcept {
  return c.snapshot_interval ? c.snapshot_interval : 4 * c.model.config.alignment();
}

std::vector<std::uint32_t> route_requests(const trace& t, std::uint32_t engines, bool affinity) {
  std::vector<std::uint32_t> route(t.requests.size(), 0);
  if (engines <= 1) return route;
  if (!affinity) {
    for (std::size_t i = 0; i < route.size(); ++i) route[i] = static_cast<std::uint32_t>(i % engines);
    return route;
  }
  constexpr std::uint32_t unrouted = ~std::uint32_t{0};
  std::vector<std::uint32_t> session_engine(t.sessions.size(), unrouted);
  for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
    const request& r = t.requests[i];
    std::uint32_t& engine = session_engine[r.session];
    if (engine == unrouted) {
      for (const segment& s : t.segments_of(r))
        if (s.kind == segment_kind::from) {
          engine = route[s.ref];
          break;
        }
    }
    if (engine == unrouted) {
      std::uint64_t h = 0xcbf29ce484222325ULL; // FNV-1a
      for (const char ch : t.sessions[r.session]) h = (h ^ static_cast<unsigned char>(ch)) * 0x100000001b3ULL;
      engine = static_cast<std::uint32_t>(h % engines);
    }
    route[i] = engine;
  }
  return route;
}

std::vector<std::string> configuration_warnings(const trace& t, const replay_config& c) {
  std::vector<std::string> w;
  const model_config& m = c.model.config;
  std::uint64_t longest = 0;
  for (const request& r : t.requests) longest = std::max(longest, r.prompt_tokens);
  if (c.policy == policy_kind::memory_only)
    w.push_back("memory_only never skips prefill (recurrent layers must see every token); it only shares KV memory");
  // A snapshot policy on an attention-only model has no snapshot size to divide by: replay() reports it.
  if (restores_snapshots(c.policy) && m.has_recurrent() && m.bytes_per_snapshot() != 0) {
    if (m.bytes_per_snapshot() > c.snapshot_budget_bytes)
      w.push_back("never hits: snapshot budget " + format_bytes(static_cast<double>(c.snapshot_budget_bytes)) +
                  " is below one snapshot (" + format_bytes(static_cast<double>(m.bytes_per_snapshot())) + ")");
    else if (c.snapshot_budget_bytes / m.bytes_per_snapshot() < c.concurrency)
      w.push_back("fewer snapshot slots (" + std::to_string(c.snapshot_budget_bytes / m.bytes_per_snapshot()) +
                  ") than requests in flight (" + std::to_string(c.concurrency) + "): captures will be refused");
    if (longest != 0 && longest <= m.alignment())
      w.push_back("never hits: every prompt is at most " + std::to_string(longest) +
                  " tokens, not past the first snapshot position " + std::to_string(m.alignment()));
    if (uses_interval(c.policy) && effective_interval(c) % m.alignment() != 0)
      w.push_back("snapshot interval " + std::to_string(effective_interval(c)) + " is not a multiple of the alignment unit " +
                  std::to_string(m.alignment()));
  }
  if (c.policy == policy_kind::block_sharing && longest != 0 && longest <= m.block_size())
    w.push_back("never hits: no prompt is longer than one block (" + std::to_string(m.block_size()) + " tokens)");
  if (m.bytes_per_kv_block() != 0) {
    const std::uint64_t blocks = c.kv_budget_bytes / m.bytes_per_kv_block();
    const std::uint64_t needed = (longest + m.block_size() - 1) / m.block_size();
    if (blocks < needed)
      w.push_back("KV budget holds " + std::to_string(blocks) + " blocks, fewer than the longest prompt needs (" +
                  std::to_string(needed) + "): such requests are rejected");
  }
  return w;
}

std::uint64_t cache_bytes_per_block(std::uint32_t block_size) noexcept {
  // block_node (two intrusive hooks, the key, links and counters: under 128 bytes), the block's tokens,
  // its root extra keys, and up to two index buckets (the bucket count is the next power of two).
  return 128 + std::uint64_t{4} * block_size + 32 + 2 * 16;
}

std::uint64_t trace_block_bound(const trace& t, std::uint32_t block_size) noexcept {
  std::uint64_t blocks = 1;
  for (const request& r : t.requests) blocks += (r.prompt_tokens + r.output_tokens + block_size - 1) / block_size;
  return blocks;
}

std::string check_config(const trace& t, replay_config& c, const replay_limits& limits, std::string& note) {
  note.clear();
  const model_config& m = c.model.config;
  const std::vector<policy_kind> applicable = policies_for(m);
  if (std::find(applicable.begin(), applicable.end(), c.policy) == applicable.end()) {
    std::string names;
    for (policy_kind p : applicable) names += (names.empty() ? "" : ", ") + std::string(to_string(p));
    return "policy " + std::string(to_string(c.policy)) + " does not apply to " + c.model.name + " (" +
           (m.has_recurrent() ? "it has recurrent layers" : "attention-only") + "); its policies: " + names;
  }
  // Snapshot slots: at most one capture per aligned position of every request, so a larger budget only
  // adds slots that stay empty (the cache keeps bookkeeping for each).
  const std::uint64_t per_snapshot = m.bytes_per_snapshot();
  std::uint64_t slot_bound = 1;
  for (const request& r : t.requests) slot_bound += (r.prompt_tokens + r.output_tokens) / m.alignment() + 1;
  if (restores_snapshots(c.policy) && per_snapshot != 0) {
    if (c.snapshot_budget_bytes / per_snapshot > slot_bound) {
      note = "snapshot budget " + format_bytes(static_cast<double>(c.snapshot_budget_bytes)) + " holds " +
             std::to_string(c.snapshot_budget_bytes / per_snapshot) + " snapshots, more than this trace can capture (" +
             std::to_string(slot_bound) + "): simulated with " + std::to_string(slot_bound) +
             " slots, which gives the same results";
      c.snapshot_budget_bytes = slot_bound * per_snapshot;
    }
  }
  // The host snapshot pool likewise: more units than the trace has aligned positions stay empty.
  if (restores_snapshots(c.policy) && per_snapshot != 0 && c.host_snapshot_budget_bytes / per_snapshot > slot_bound) {
    if (!note.empty()) note += "; ";
    note += "host snapshot budget " + format_bytes(static_cast<double>(c.host_snapshot_budget_bytes)) + " holds " +
            std::to_string(c.host_snapshot_budget_bytes / per_snapshot) + " snapshots, more than this trace can capture (" +
            std::to_string(slot_bound) + "): simulated with " + std::to_string(slot_bound) +
            " host slots, which gives the same results";
    c.host_snapshot_budget_bytes = slot_bound * per_snapshot;
  }
  const std::uint64_t per_block = m.bytes_per_kv_block();
  const std::uint64_t bound = trace_block_bound(t, m.block_size());
  // Host KV units: one per block the trace can fill is as good as more (a budget below one block is the
  // cache's `budget_too_small`, reported by replay()).
  std::uint64_t host_blocks = 0;
  if (per_block != 0 && c.host_kv_budget_bytes >= per_block) {
    host_blocks = c.host_kv_budget_bytes / per_block;
    if (host_blocks > bound) {
      if (!note.empty()) note += "; ";
      note += "host KV budget " + format_bytes(static_cast<double>(c.host_kv_budget_bytes)) + " holds " +
              std::to_string(host_blocks) + " blocks, more than this trace can fill (" + std::to_string(bound) +
              "): simulated with " + std::to_string(bound) + " host blocks, which gives the same results";
      host_blocks = bound;
      c.host_kv_budget_bytes = bound * per_block;
    }
  }
  if (per_block == 0 || c.kv_budget_bytes < per_block) return {}; // replay() reports a budget below one block
  const std::uint64_t requested = c.kv_budget_bytes;
  const std::uint64_t budget_blocks = c.kv_budget_bytes / per_block;
  std::uint64_t blocks = budget_blocks;
  if (budget_blocks > bound) {
    blocks = bound;
    if (!note.empty()) note += "; ";
    note += "KV budget " + format_bytes(static_cast<double>(c.kv_budget_bytes)) + " holds " +
           std::to_string(budget_blocks) + " blocks, more than this trace can fill (" + std::to_string(bound) +
           "): simulated with " + std::to_string(bound) + " blocks, which gives the same results";
    c.kv_budget_bytes = bound * per_block;
  }
  const std::uint64_t host = cache_bytes_per_block(m.block_size());
  const std::uint64_t by_memory = limits.max_cache_bytes / host;
  const std::uint64_t max_blocks = std::min(limits.max_kv_blocks, by_memory);
  if (blocks > max_blocks)
    return "KV budget " + format_bytes(static_cast<double>(requested)) + " needs " + std::to_string(blocks) +
           " blocks of " + format_bytes(static_cast<double>(per_block)) + "; the simulator tracks at most " +
           std::to_string(max_blocks) + " blocks (2^32 - 2 block ids, " +
           format_bytes(static_cast<double>(limits.max_cache_bytes)) + " of cache bookkeeping at about " +
           std::to_string(host) + " bytes per block): use a KV budget of at most " +
           format_bytes(static_cast<double>(max_blocks * per_block));
  // Every engine keeps bookkeeping for its GPU blocks and its host KV units (about the same per unit).
  const std::uint64_t units = (blocks + host_blocks) * std::max<std::uint64_t>(c.engines, 1);
  if (units > by_memory)
    return std::to_string(c.engines) + (c.engines == 1 ? " engine" : " engines") + " x (" + std::to_string(blocks) +
           " KV blocks + " + std::to_string(host_blocks) + " host KV blocks) need about " +
           format_bytes(static_cast<double>(units * host)) + " of cache bookkeeping (about " + std::to_string(host) +
           " bytes per block), more than the limit of " + format_bytes(static_cast<double>(limits.max_cache_bytes)) +
           " (--max-cache-memory)";
  return {};
}

namespace {

/// An open-addressing set of nonzero 64-bit hashes, sized once.
class hash_set {
public:
  explicit hash_set(std::uint64_t capacity) : slots_(std::bit_ceil(std::max<std::uint64_t>(2 * capacity, 16)), 0) {}
  bool contains(std::uint64_t h) const noexcept {
    for (std::size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == h) return true;
      if (slots_[i] == 0) return false;
    }
  }
  void insert(std::uint64_t h) noexcept {
    for (std::size_t i = h & (slots_.size() - 1);; i = (i + 1) & (slots_.size() - 1)) {
      if (slots_[i] == h) return;
      if (slots_[i] == 0) {
        slots_[i] = h;
        return;
      }
    }
  }

private:
  std::vector<std::uint64_t> slots_;
};

std::uint64_t mix(std::uint64_t x) noexcept { // murmur3's finalizer
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ULL;
  return x ^ (x >> 33);
}

} // namespace

std::optional<std::uint64_t> prefill_floor(const trace& t, std::uint64_t max_positions) {
  std::uint64_t positions = 0;
  for (const request& r : t.requests) positions += r.prompt_tokens + r.output_tokens;
  if (positions > max_positions) return std::nullopt;
  hash_set seen(positions);
  materializer m(t);
  std::vector<token> tokens;
  std::vector<std::uint64_t> prefix; // prefix[k]: hash of the tenant and the first k tokens
  std::uint64_t floor = 0;
  for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
    const request& r = t.requests[i];
    m.prompt(i, tokens);
    const std::size_t length = tokens.size();
    materializer::append_output(i, r.output_tokens, tokens);
    prefix.resize(tokens.size() + 1);
    prefix[0] = mix(0x9e3779b97f4a7c15ULL + r.tenant);
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::uint64_t h = mix(prefix[k] ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(tokens[k])) + 1));
      prefix[k + 1] = h == 0 ? 1 : h;
    }
    // Every prefix of a seen sequence was inserted, so "prefix of length k is covered" is monotone in k.
    std::size_t lo = 0, hi = length == 0 ? 0 : length - 1;
    while (lo < hi) {
      const std::size_t mid = (lo + hi + 1) / 2;
      if (seen.contains(prefix[mid])) lo = mid;
      else hi = mid - 1;
    }
    floor += length - lo;
    for (std::size_t k = 1; k < prefix.size(); ++k) seen.insert(prefix[k]);
  }
  return floor;
}

replay_report simulate(const trace& t, replay_config c, const replay_limits& limits, progress* bar) {
  std::string note;
  std::string error = check_config(t, c, limits, note);
  if (!error.empty()) {
    replay_report r;
    r.model = c.model.name;
    r.policy = std::string(to_string(c.policy));
    r.block_size = c.model.config.block_size();
    r.alignment = c.model.config.alignment();
    r.kv_budget_bytes = c.kv_budget_bytes;
    r.bytes_per_kv_block = c.model.config.bytes_per_kv_block();
    r.error = std::move(error);
    return r;
  }
  replay_report r = replay(t, c, bar);
  if (!note.empty()) r.warnings.push_back(std::move(note));
  if (r.error.empty()) r.floor_tokens = prefill_floor(t).value_or(0);
  return r;
}

const char* affinity_name(const replay_report& r) noexcept {
  return r.state_aware ? "state" : r.affinity ? "on" : "off";
}

std::string format_report(const replay_report& r) {
  const cache_metrics& m = r.metrics;
  std::string s;
  char buf[256];
  auto line = [&](const char* key, const std::string& value) {
    std::snprintf(buf, sizeof buf, "  %-34s %s\n", key, value.c_str());
    s += buf;
  };
  auto pct = [](double v) {
    char b[32];
    std::snprintf(b, sizeof b, "%.2f %%", 100 * v);
    return std::string(b);
  };
  auto count = [](std::uint64_t v) { return std::to_string(v); };
  auto bytes = [](double v) { return format_bytes(v); };
  auto fixed = [](double v, int digits) {
    char b[32];
    std::snprintf(b, sizeof b, "%.*f", digits, v);
    return std::string(b);
  };
  s += r.model + " / " + r.policy + "\n";
  line("block size / alignment", std::to_string(r.block_size) + " / " + std::to_string(r.alignment) + " tokens");
  if (r.snapshot_interval) line("snapshot interval", std::to_string(r.snapshot_interval) + " tokens");
  line("KV budget", bytes(static_cast<double>(r.kv_budget_bytes)) + " (" + count(r.kv_blocks) + " blocks of " +
                        bytes(static_cast<double>(r.bytes_per_kv_block)) + ")");
  if (r.snapshot_budget_bytes)
    line("snapshot budget", bytes(static_cast<double>(r.snapshot_budget_bytes)) + " (" + count(r.snapshot_slots) +
                                " slots of " + bytes(static_cast<double>(r.bytes_per_snapshot)) + ")");
  if (r.host_kv_budget_bytes)
    line("host KV budget", bytes(static_cast<double>(r.host_kv_budget_bytes)) + " (" + count(r.host_kv_units) + " blocks)");
  if (r.host_snapshot_budget_bytes)
    line("host snapshot budget",
         bytes(static_cast<double>(r.host_snapshot_budget_bytes)) + " (" + count(r.host_snapshot_units) + " slots)");
  if (r.engines > 1) {
    const char* how = r.state_aware ? " (routed by state: the engine whose cache holds the most usable tokens)"
                      : r.affinity  ? " (affinity: a conversation stays on its first engine)"
                                    : " (round robin)";
    line("engines", count(r.engines) + how + ", budgets per engine");
    if (r.state_aware)
      line("load", "busiest engine served " + fixed(r.max_engine_load_ratio, 2) + "x its share (cap at each request: " +
                       fixed(1 + r.load_slack, 2) + "x of (requests so far + 1) / engines), " +
                       count(r.requests_redirected_by_load) + " requests sent past the deepest state by the cap");
  }
  for (const std::string& w : r.warnings) s += "  warning: " + w + "\n";
  if (!r.error.empty()) {
    s += "  error: " + r.error + "\n";
    return s;
  }
  line("requests", count(r.requests) + (r.requests_rejected ? " (+" + count(r.requests_rejected) + " rejected)" : ""));
  if (r.decode_truncated) line("decodes cut short (KV full)", count(r.decode_truncated));
  line("request hit rate (skipped > 0)", pct(r.hit_rate()) + " (" + count(r.hits) + ")");
  line("KV hit rate (matched > 0)", pct(r.kv_hit_rate()) + " (" + count(r.kv_hits) + ")");
  line("prompt tokens", count(r.prompt_tokens));
  line("KV-matched tokens", count(r.kv_matched_tokens));
  const bool host = r.host_kv_budget_bytes != 0;
  if (host)
    line("  in GPU memory / from host", count(r.gpu_kv_hit_tokens()) + " / " + count(r.host_kv_hit_tokens) + " (" +
                                            count(m.host_blocks_onboarded) + " blocks + " +
                                            count(m.host_tails_onboarded) + " partial blocks onboarded)");
  line("usable (skipped) tokens", count(r.usable_tokens) + " (" + pct(r.skipped_fraction()) + " of prompt tokens)");
  line("tokens lost to missing snapshots", count(r.tokens_lost));
  line("prefill tokens computed", count(r.prefill_tokens));
  if (r.floor_tokens) {
    std::snprintf(buf, sizeof buf, "%llu (computed / floor %.2fx)", static_cast<unsigned long long>(r.floor_tokens),
                  r.computed_over_floor());
    line("prefill floor", buf);
  }
  std::snprintf(buf, sizeof buf, "%.3g PFLOP", r.flops_saved / 1e15);
  line("prefill FLOPs saved (2 * params)", buf);
  line("KV bytes peak / mean", bytes(r.peak_kv_bytes) + " / " + bytes(r.mean_kv_bytes));
  if (r.snapshot_budget_bytes)
    line("snapshot bytes peak / mean", bytes(r.peak_snapshot_bytes) + " / " + bytes(r.mean_snapshot_bytes));
  line("blocks shared", count(m.blocks_shared));
  line("KV evictions", count(m.kv_evictions));
  if (r.snapshot_budget_bytes) {
    line("snapshot hits / misses", count(m.snapshot_hits) + " / " + count(m.snapshot_misses));
    line("captures planned / written / refused",
         count(m.captures_planned) + " / " + count(m.captures_written) + " / " + count(m.captures_refused));
    line("snapshot evictions LRU / TTL / KV", count(m.snapshot_evictions_capacity) + " / " + count(m.snapshot_evictions_ttl) +
                                                  " / " + count(m.snapshot_evictions_invalidated));
  }
  if (host) {
    if (r.snapshot_budget_bytes)
      line("snapshot hits in GPU / from host", count(r.gpu_snapshot_hits()) + " / " + count(m.host_snapshot_hits));
    line("offloaded blocks / snapshots", count(m.host_blocks_offloaded) + " / " + count(m.host_snapshots_offloaded));
    line("bytes device->host / host->device",
         bytes(static_cast<double>(m.host_bytes_offloaded)) + " / " + bytes(static_cast<double>(m.host_bytes_onboarded)));
    line("host evictions blocks / snapshots", count(m.host_block_evictions) + " / " + count(m.host_snapshot_evictions));
    line("host bytes peak KV / snapshots", bytes(r.peak_host_kv_bytes) + " / " + bytes(r.peak_host_snapshot_bytes));
    line("steps with transfers", count(r.transfer_steps));
  }
  if (r.remote_tier) {
    line("remote tier", r.remote_store + (r.remote_write_through ? ", write-through" : ", write-back") +
                            (r.remote_probe ? ", probed" : ", unprobed") + (r.remote_turn_ends ? ", turn ends" : ""));
    if (r.remote_probe)
      line("keys probed / found", count(r.remote_probed_keys) + " / " + count(r.remote_probed_found));
    line("store puts", count(m.remote_puts) + " (" + bytes(static_cast<double>(m.remote_bytes_put)) + ")");
    line("fetches planned / kept", count(m.remote_fetches) + " / " + count(r.remote_block_hits) + " blocks + " +
                                       count(r.remote_snapshot_hits) + " snapshots (" +
                                       bytes(static_cast<double>(m.remote_bytes_fetched)) + ")");
    if (r.remote_turn_ends)
      line("turn ends put / lost / kept", count(m.remote_turn_ends_put) + " / " + count(m.remote_turn_ends_lost) + " / " +
                                              count(r.remote_turn_end_hits));
    line("fetch misses / rejected", count(m.remote_misses) + " / " + count(m.remote_rejected));
    if (r.remote_budget_bytes || r.peak_remote_bytes > 0)
      line("store evictions / peak bytes", count(r.remote_store_evictions) + " / " + bytes(r.peak_remote_bytes));
    if (r.remote_failures) line("store failures (timeouts, errors)", count(r.remote_failures));
  }
  if (r.engines > 1) {
    std::snprintf(buf, sizeof buf, "  %-10s %9s %9s %12s %16s\n", "engine", "requests", "hit rate", "KV hit rate",
                  "computed tokens");
    s += buf;
    for (std::size_t e = 0; e < r.per_engine.size(); ++e) {
      const replay_report::engine_share& x = r.per_engine[e];
      std::snprintf(buf, sizeof buf, "  %-10zu %9llu %7.2f %% %10.2f %% %16llu\n", e,
                    static_cast<unsigned long long>(x.requests), 100 * x.hit_rate(), 100 * x.kv_hit_rate(),
                    static_cast<unsigned long long>(x.prefill_tokens()));
      s += buf;
    }
  }
  std::snprintf(buf, sizeof buf, "%.0f ns (%.2f s in all)", r.cache_ns_per_request(), r.cache_seconds);
  line("cache time per request", buf);
  std::snprintf(buf, sizeof buf, "%.0f requests/s (%.2f s wall)", r.requests_per_second(), r.wall_seconds);
  line("replay throughput", buf);
  return s;
}

std::string format_summary(std::span<const replay_report> reports) {
  std::string s;
  char buf[512];
  // The host tier's column appears only when some replay has one, so other tables read as they always have.
  const bool host = std::any_of(reports.begin(), reports.end(), [](const replay_report& r) { return r.host_kv_budget_bytes != 0; });
  const bool remote = std::any_of(reports.begin(), reports.end(), [](const replay_report& r) { return r.remote_tier; });
  std::snprintf(buf, sizeof buf, "%-22s %9s %16s %9s %9s %16s %12s", "policy", "hit rate", "computed tokens",
                "computed", "/ floor", "lost tokens", "peak bytes");
  s += buf;
  s += host ? "   KV from host" : "";
  s += remote ? "  KV from store\n" : "\n";
  for (const replay_report& r : reports) {
    if (!r.error.empty()) {
      std::snprintf(buf, sizeof buf, "%-22s error: %s\n", r.policy.c_str(), r.error.c_str());
      s += buf;
      continue;
    }
    const double computed = r.prompt_tokens ? static_cast<double>(r.prefill_tokens) / static_cast<double>(r.prompt_tokens) : 0;
    // Tokens lost to a missing snapshot only exist for policies that restore snapshots.
    const std::string lost = restores_snapshots(*parse_policy(r.policy)) ? std::to_string(r.tokens_lost) : "n/a";
    char over_floor[32] = "n/a";
    if (r.floor_tokens) std::snprintf(over_floor, sizeof over_floor, "%.2fx", r.computed_over_floor());
    std::snprintf(buf, sizeof buf, "%-22s %7.2f %% %16llu %7.2f %% %9s %16s %12s", r.policy.c_str(),
                  100 * r.hit_rate(), static_cast<unsigned long long>(r.prefill_tokens), 100 * computed, over_floor,
                  lost.c_str(), format_bytes(r.peak_kv_bytes + r.peak_snapshot_bytes).c_str());
    s += buf;
    if (host) {
      const double from_host = r.kv_matched_tokens ? static_cast<double>(r.host_kv_hit_tokens) /
                                                         static_cast<double>(r.kv_matched_tokens) : 0;
      std::snprintf(buf, sizeof buf, " %12.2f %%", 100 * from_host);
      s += buf;
    }
    if (remote) {
      const std::uint64_t store_tokens = r.metrics.remote_blocks_onboarded * r.block_size;
      const double from_store =
          r.kv_matched_tokens ? static_cast<double>(store_tokens) / static_cast<double>(r.kv_matched_tokens) : 0;
      std::snprintf(buf, sizeof buf, " %12.2f %%", 100 * from_store);
      s += buf;
    }
    s += "\n";
  }
  s += "(computed: prefill tokens computed, also as % of prompt tokens; / floor: computed over the tokens no earlier\n"
       " prompt + reply covers; peak bytes: KV + snapshots";
  s += host ? " in GPU memory; KV from host: KV-matched tokens onboarded from the host tier" : "";
  s += remote ? ", of which KV from store: onboarded from units fetched from the fleet's store" : "";
  s += ")\n";
  return s;
}

namespace {

using u64 = std::uint64_t;

/// One CSV column: its header and how a report fills it.
struct column {
  std::string_view name;
  void (*write)(csv_writer&, const replay_report&);
};

/// The column of cache counter `M`, summed over the engines (`replay_report::metrics`): named as the metric.
template <metric M>
constexpr column metric_column() {
  return {metric_info_of(M).name, [](csv_writer& w, const replay_report& r) { w.cell(metric_value(r.metrics, M)); }};
}

/// Per engine, space-separated in engine order.
template <class F>
std::string per_engine(const replay_report& r, F&& value) {
  std::string s;
  for (const replay_report::engine_share& e : r.per_engine) s += (s.empty() ? "" : " ") + value(e);
  return s;
}

// Columns are only ever added at the end, so readers of older files keep working.
constexpr column columns[] = {
    {"model", [](csv_writer& w, const replay_report& r) { w.cell(r.model); }},
    {"policy", [](csv_writer& w, const replay_report& r) { w.cell(r.policy); }},
    {"block_size", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.block_size}); }},
    {"alignment", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.alignment}); }},
    {"snapshot_interval", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.snapshot_interval}); }},
    {"concurrency", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.concurrency}); }},
    {"kv_budget_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.kv_budget_bytes); }},
    {"snapshot_budget_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.snapshot_budget_bytes); }},
    {"kv_blocks", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.kv_blocks}); }},
    {"snapshot_slots", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.snapshot_slots}); }},
    {"requests", [](csv_writer& w, const replay_report& r) { w.cell(r.requests); }},
    {"requests_rejected", [](csv_writer& w, const replay_report& r) { w.cell(r.requests_rejected); }},
    {"decode_truncated", [](csv_writer& w, const replay_report& r) { w.cell(r.decode_truncated); }},
    {"hits", [](csv_writer& w, const replay_report& r) { w.cell(r.hits); }},
    {"hit_rate", [](csv_writer& w, const replay_report& r) { w.cell(r.hit_rate()); }},
    {"kv_hits", [](csv_writer& w, const replay_report& r) { w.cell(r.kv_hits); }},
    {"kv_hit_rate", [](csv_writer& w, const replay_report& r) { w.cell(r.kv_hit_rate()); }},
    {"prompt_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.prompt_tokens); }},
    {"kv_matched_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.kv_matched_tokens); }},
    {"usable_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.usable_tokens); }},
    {"tokens_lost", [](csv_writer& w, const replay_report& r) { w.cell(r.tokens_lost); }},
    {"prefill_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.prefill_tokens); }},
    {"floor_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.floor_tokens); }},
    {"output_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.output_tokens); }},
    {"flops_saved", [](csv_writer& w, const replay_report& r) { w.cell(r.flops_saved); }},
    {"peak_kv_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.peak_kv_bytes); }},
    {"mean_kv_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.mean_kv_bytes); }},
    {"peak_snapshot_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.peak_snapshot_bytes); }},
    {"mean_snapshot_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.mean_snapshot_bytes); }},
    metric_column<metric::blocks_shared>(),
    metric_column<metric::kv_evictions>(),
    metric_column<metric::snapshot_hits>(),
    metric_column<metric::snapshot_misses>(),
    metric_column<metric::captures_planned>(),
    metric_column<metric::captures_written>(),
    metric_column<metric::captures_refused>(),
    metric_column<metric::snapshot_evictions_capacity>(),
    metric_column<metric::snapshot_evictions_ttl>(),
    metric_column<metric::snapshot_evictions_invalidated>(),
    {"cache_ns_per_request", [](csv_writer& w, const replay_report& r) { w.cell(r.cache_ns_per_request()); }},
    {"error", [](csv_writer& w, const replay_report& r) { w.cell(r.error); }},
    {"warnings",
     [](csv_writer& w, const replay_report& r) {
       std::string warnings;
       for (const std::string& s : r.warnings) warnings += (warnings.empty() ? "" : "; ") + s;
       w.cell(warnings);
     }},
    // Added with the host tier and fleets, after the columns older readers know.
    {"host_kv_budget_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.host_kv_budget_bytes); }},
    {"host_snapshot_budget_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.host_snapshot_budget_bytes); }},
    {"host_kv_units", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.host_kv_units}); }},
    {"host_snapshot_units", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.host_snapshot_units}); }},
    {"gpu_kv_hit_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.gpu_kv_hit_tokens()); }},
    {"host_kv_hit_tokens", [](csv_writer& w, const replay_report& r) { w.cell(r.host_kv_hit_tokens); }},
    metric_column<metric::host_blocks_onboarded>(),
    metric_column<metric::host_tails_onboarded>(),
    {"gpu_snapshot_hits", [](csv_writer& w, const replay_report& r) { w.cell(r.gpu_snapshot_hits()); }},
    metric_column<metric::host_snapshot_hits>(),
    metric_column<metric::host_blocks_offloaded>(),
    metric_column<metric::host_snapshots_offloaded>(),
    metric_column<metric::host_bytes_offloaded>(),
    metric_column<metric::host_bytes_onboarded>(),
    metric_column<metric::host_block_evictions>(),
    metric_column<metric::host_snapshot_evictions>(),
    {"peak_host_kv_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.peak_host_kv_bytes); }},
    {"peak_host_snapshot_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.peak_host_snapshot_bytes); }},
    {"transfer_steps", [](csv_writer& w, const replay_report& r) { w.cell(r.transfer_steps); }},
    {"engines", [](csv_writer& w, const replay_report& r) { w.cell(u64{r.engines}); }},
    {"affinity", [](csv_writer& w, const replay_report& r) { w.cell(affinity_name(r)); }},
    {"engine_requests",
     [](csv_writer& w, const replay_report& r) {
       w.cell(per_engine(r, [](const replay_report::engine_share& e) { return std::to_string(e.requests); }));
     }},
    {"engine_hit_rates",
     [](csv_writer& w, const replay_report& r) {
       w.cell(per_engine(r, [](const replay_report::engine_share& e) {
         char buf[32];
         std::snprintf(buf, sizeof buf, "%.6g", e.hit_rate());
         return std::string(buf);
       }));
     }},
    {"engine_prefill_tokens",
     [](csv_writer& w, const replay_report& r) {
       w.cell(per_engine(r, [](const replay_report::engine_share& e) { return std::to_string(e.prefill_tokens()); }));
     }},
    // Added with the remote tier.
    {"remote_tier", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_tier ? "on" : "off"); }},
    {"remote_store", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_store); }},
    {"remote_budget_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_budget_bytes); }},
    metric_column<metric::remote_puts>(),
    metric_column<metric::remote_bytes_put>(),
    metric_column<metric::remote_fetches>(),
    {"remote_block_hits", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_block_hits); }},
    {"remote_snapshot_hits", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_snapshot_hits); }},
    metric_column<metric::remote_misses>(),
    metric_column<metric::remote_rejected>(),
    metric_column<metric::remote_bytes_fetched>(),
    {"remote_store_evictions", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_store_evictions); }},
    {"peak_remote_bytes", [](csv_writer& w, const replay_report& r) { w.cell(r.peak_remote_bytes); }},
    {"remote_failures", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_failures); }},
    {"remote_write",
     [](csv_writer& w, const replay_report& r) {
       w.cell(!r.remote_tier ? "" : r.remote_write_through ? "through" : "back");
     }},
    // Added with the probe.
    {"remote_probe",
     [](csv_writer& w, const replay_report& r) { w.cell(!r.remote_tier ? "" : r.remote_probe ? "on" : "off"); }},
    {"remote_probed_keys", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_probed_keys); }},
    {"remote_probed_found", [](csv_writer& w, const replay_report& r) { w.cell(r.remote_probed_found); }},
    metric_column<metric::remote_blocks_onboarded>(),
    // Added with turn ends in the store.
    {"remote_turn_ends",
     [](csv_writer& w, const replay_report& r) { w.cell(!r.remote_tier ? "" : r.remote_turn_ends ? "on" : "off"); }},
    metric_column<metric::remote_turn_ends_put>(),
    metric_column<metric::remote_turn_ends_lost>(),
    metric_column<metric::remote_turn_end_hits>(),
};

} // namespace

std::vector<std::string> report_columns() {
  std::vector<std::string> names;
  for (const column& c : columns) names.emplace_back(c.name);
  return names;
}

void write_report_row(csv_writer& w, const replay_report& r) {
  for (const column& c : columns) c.write(w, r);
  w.end_row();
}

} // namespace reprise::sim
