// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim with a remote tier shared by a fleet: the modelled store is an LRU bounded by bytes, a prefix
// pushed out of one engine's GPU and host memory comes back from the store, write-through lets round-robin
// engines find each other's prefixes, every count adds up, and misuses are clear errors.
#include "sim/cli.hpp"
#include "sim/fleet_store.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/workload.hpp"
#include "support/sim_testing.hpp"

#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

using namespace reprise::sim;
using reprise::content_key;

namespace {

content_key key_of(std::uint8_t k) {
  content_key c;
  c.bytes[0] = k;
  c.bytes[31] = static_cast<std::uint8_t>(k * 7);
  return c;
}

std::vector<std::byte> header_of(std::uint8_t k, std::size_t n = 16) { return std::vector<std::byte>(n, std::byte{k}); }

replay_config fleet(policy_kind p, std::uint32_t engines, bool affinity) {
  return reprise::testing::remote_fleet(p, engines, affinity);
}

/// The remote counts agree with each other and with the host tier's.
void check_remote_adds_up(const replay_report& r) {
  CAPTURE(r.policy);
  REQUIRE(r.error.empty());
  CHECK(r.remote_tier);
  CHECK(r.remote_block_hits + r.remote_snapshot_hits + r.remote_turn_end_hits + r.metrics.remote_misses +
            r.metrics.remote_rejected ==
        r.metrics.remote_fetches);
  const std::uint64_t units = r.remote_block_hits * r.bytes_per_kv_block + r.remote_snapshot_hits * r.bytes_per_snapshot;
  if (r.remote_turn_end_hits == 0) CHECK(r.metrics.remote_bytes_fetched == units);
  else CHECK(r.metrics.remote_bytes_fetched >= units + r.remote_turn_end_hits * (r.bytes_per_kv_block + r.bytes_per_snapshot));
  // The modelled store returns what was put; only a turn end may be refused (the reader's own blocks are
  // another computation).
  if (!r.remote_turn_ends) CHECK(r.metrics.remote_rejected == 0);
  CHECK(r.metrics.remote_bytes_put >= r.metrics.remote_puts * r.bytes_per_kv_block);
  CHECK(r.gpu_kv_hit_tokens() + r.host_kv_hit_tokens == r.kv_matched_tokens);
  // A fetched unit may be onboarded many times.
  CHECK(r.metrics.remote_blocks_onboarded <= r.metrics.host_blocks_onboarded);
}

} // namespace

TEST_CASE("modelled store: an LRU bounded by the values' bytes") {
  modelled_store s(300); // header 16 + payload 84 = 100 bytes a value: three fit
  for (std::uint8_t k = 1; k <= 3; ++k) s.put(key_of(k), header_of(k), 84);
  CHECK(s.stats().values_held == 3);
  CHECK(s.stats().bytes_held == 300);
  std::vector<std::byte> h;
  CHECK(s.get(key_of(1), 84, h)); // 1 is now the most recent
  CHECK(h == header_of(1));
  s.put(key_of(4), header_of(4), 84); // evicts 2, the least recently used
  CHECK(s.stats().evictions == 1);
  CHECK(!s.get(key_of(2), 84, h));
  CHECK(h.empty());
  CHECK(s.get(key_of(1), 84, h));
  CHECK(s.get(key_of(3), 84, h));
  CHECK(s.get(key_of(4), 84, h));
  CHECK(!s.get(key_of(4), 85, h)); // another payload size: not this value
  s.put(key_of(4), header_of(9), 84); // replaced in place
  CHECK(s.get(key_of(4), 84, h));
  CHECK(h == header_of(9));
  CHECK(s.stats().values_held == 3);
  s.put(key_of(5), header_of(5), 1000); // larger than the whole store: not kept, nothing evicted for it
  CHECK(!s.get(key_of(5), 1000, h));
  CHECK(s.stats().values_held == 3);
  CHECK(s.stats().peak_bytes_held == 300);
  CHECK(s.stats().puts == 6);
  CHECK(s.stats().hits == 5);

  modelled_store unlimited(0);
  for (std::uint8_t k = 0; k < 200; ++k) unlimited.put(key_of(k), header_of(k), 1 << 20);
  CHECK(unlimited.stats().evictions == 0);
  CHECK(unlimited.stats().values_held == 200);
  CHECK(unlimited.describe() == "modelled, unlimited");
  CHECK(s.describe() == "modelled, 300 B LRU");
}

TEST_CASE("one engine: a conversation pushed out of GPU and host memory comes back from the store") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 600, .seed = 5, .active_sessions = 24});
  replay_config c = fleet(policy_kind::strict, 1, true);
  c.host_kv_budget_bytes = 2 * c.kv_budget_bytes;
  c.host_snapshot_budget_bytes = 2 * c.snapshot_budget_bytes;
  c.check_invariants = true;
  const replay_report with = simulate(t, c);
  check_remote_adds_up(with);
  CHECK(with.metrics.remote_puts > 0);
  CHECK(with.remote_block_hits > 0);
  CHECK(with.remote_snapshot_hits > 0);
  c.remote_tier = false;
  const replay_report without = simulate(t, c);
  REQUIRE(without.error.empty());
  CHECK(with.prefill_tokens < without.prefill_tokens);
  CHECK(without.metrics.remote_fetches == 0);
  CHECK(format_report(with).find("remote tier                        modelled, unlimited, write-back") != std::string::npos);
}

TEST_CASE("fleet: write-through lets round-robin engines reuse each other's prefixes; a small store holds less") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 7, .active_sessions = 24});
  replay_config c = fleet(policy_kind::strict, 4, /*affinity=*/false);
  c.remote_tier = false;
  const replay_report none = simulate(t, c);
  c.remote_tier = true;
  const replay_report back = simulate(t, c);
  c.remote_write_through = true;
  const replay_report through = simulate(t, c);
  REQUIRE(none.error.empty());
  check_remote_adds_up(back);
  check_remote_adds_up(through);
  CHECK(through.remote_write_through);
  CHECK(!back.remote_write_through);
  CHECK(through.remote_block_hits > back.remote_block_hits);
  CHECK(through.prefill_tokens < back.prefill_tokens);
  CHECK(back.prefill_tokens <= none.prefill_tokens);
  CHECK(through.floor_tokens == none.floor_tokens);

  // A store of a few snapshots' bytes evicts, and restores less.
  c.remote_budget_bytes = 4 * c.model.config.bytes_per_snapshot();
  const replay_report small = simulate(t, c);
  check_remote_adds_up(small);
  CHECK(small.remote_store_evictions > 0);
  CHECK(small.peak_remote_bytes <= static_cast<double>(c.remote_budget_bytes));
  CHECK(small.remote_snapshot_hits < through.remote_snapshot_hits);
  CHECK(small.prefill_tokens > through.prefill_tokens);
  CHECK(format_report(small).find("store evictions / peak bytes") != std::string::npos);
}

TEST_CASE("probing: a fleet fetches only what the store has, and a store with nothing costs nothing") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 7, .active_sessions = 24});
  for (const policy_kind p : {policy_kind::strict, policy_kind::chat}) {
    CAPTURE(to_string(p));
    replay_config c = fleet(p, 4, /*affinity=*/false);
    c.remote_write_through = true;
    c.remote_probe = false;
    const replay_report unprobed = simulate(t, c);
    c.remote_probe = true;
    const replay_report probed = simulate(t, c);
    check_remote_adds_up(unprobed);
    check_remote_adds_up(probed);
    CHECK(probed.remote_probe);
    CHECK(!unprobed.remote_probe);
    CHECK(unprobed.remote_probed_keys == 0);
    CHECK(probed.remote_probed_keys > probed.remote_probed_found);
    CHECK(probed.metrics.remote_fetches <= probed.remote_probed_found);
    CHECK(probed.metrics.remote_misses == 0); // an unlimited store loses nothing between the probe and the get
    CHECK(unprobed.metrics.remote_misses > 0);
    CHECK(probed.metrics.remote_fetches < unprobed.metrics.remote_fetches);
    CHECK(probed.prefill_tokens <= unprobed.prefill_tokens);
  }

  // One engine, chat: the store holds no turn end, and probing, it costs nothing against no store at all.
  replay_config c = fleet(policy_kind::chat, 1, true);
  c.remote_tier = false;
  const replay_report none = simulate(t, c);
  c.remote_tier = true;
  const replay_report probed = simulate(t, c);
  REQUIRE(none.error.empty());
  check_remote_adds_up(probed);
  CHECK(probed.prefill_tokens <= none.prefill_tokens);
  CHECK(format_report(probed).find("keys probed / found") != std::string::npos);
}

TEST_CASE("turn ends in the store: chat continues a conversation on any engine of a round-robin fleet") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 7, .active_sessions = 24});
  replay_config c = fleet(policy_kind::chat, 4, /*affinity=*/false);
  c.remote_write_through = true;
  c.check_invariants = true;
  const replay_report without = simulate(t, c);
  c.remote_turn_ends = true;
  const replay_report with = simulate(t, c);
  check_remote_adds_up(without);
  check_remote_adds_up(with);
  CHECK(!without.remote_turn_ends);
  CHECK(with.remote_turn_ends);
  CHECK(without.metrics.remote_turn_ends_put == 0);
  CHECK(with.metrics.remote_turn_ends_put > 0);
  CHECK(with.remote_turn_end_hits > 0);
  CHECK(with.remote_turn_end_hits == with.metrics.remote_turn_end_hits);
  CHECK(with.prefill_tokens < without.prefill_tokens);
  CHECK(with.floor_tokens == without.floor_tokens);
  CHECK(format_report(with).find("turn ends put / lost / kept") != std::string::npos);

  // Only a policy that keeps turn ends puts them: strict runs as without the option.
  c = fleet(policy_kind::strict, 4, false);
  c.remote_write_through = true;
  const replay_report strict_without = simulate(t, c);
  c.remote_turn_ends = true;
  const replay_report strict_with = simulate(t, c);
  REQUIRE(strict_with.error.empty());
  CHECK(!strict_with.remote_turn_ends);
  CHECK(strict_with.metrics.remote_turn_ends_put == 0);
  CHECK(strict_with.prefill_tokens == strict_without.prefill_tokens);
}

TEST_CASE("remote tier misuses are clear errors") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 50, .seed = 1, .active_sessions = 4});
  replay_config c = fleet(policy_kind::strict, 2, true);
  c.host_kv_budget_bytes = 0;
  c.host_snapshot_budget_bytes = 0;
  CHECK(simulate(t, c).error.find("a remote tier needs a host KV budget") == 0);
  c = fleet(policy_kind::strict, 2, true);
  c.remote_snapshot_candidates = 0;
  CHECK(simulate(t, c).error.find("at least one snapshot") != std::string::npos);
  c = fleet(policy_kind::strict, 2, true);
  c.remote_tier = false;
  c.remote_redis = "127.0.0.1:1";
  CHECK(simulate(t, c).error.find("turn the remote tier on") != std::string::npos);
  c = fleet(policy_kind::memory_only, 2, true);
  CHECK(simulate(t, c).error.find("takes no host tier") != std::string::npos);
  c = fleet(policy_kind::strict, 2, true);
  c.remote_budget_bytes = 1024; // less than one KV block: the store could hold nothing
  CHECK(simulate(t, c).error.find("is below one KV block") != std::string::npos);
  if (!has_redis_fleet_store()) {
    c = fleet(policy_kind::strict, 1, true);
    c.remote_redis = "127.0.0.1:6379";
    CHECK(simulate(t, c).error.find("built without the Redis client") != std::string::npos);
  }

  auto parse = [](std::vector<const char*> args) {
    args.insert(args.begin(), "reprise-sim");
    return parse_command_line(static_cast<int>(args.size()), args.data());
  };
  const cli_parse no_host = parse({"replay", "--workload", "chat", "--remote-tier"});
  CHECK(!no_host.run);
  CHECK(no_host.exit_code == 2);
  CHECK(no_host.text.find("needs --host-kv-budget") != std::string::npos);
  const cli_parse budget_alone = parse({"replay", "--workload", "chat", "--host-kv-budget", "1GiB", "--remote-budget", "1GiB"});
  CHECK(!budget_alone.run);
  CHECK(budget_alone.text.find("--remote-budget requires --remote-tier") != std::string::npos);
  const cli_parse bad_write =
      parse({"replay", "--workload", "chat", "--host-kv-budget", "1GiB", "--remote-tier", "--remote-write", "sideways"});
  CHECK(!bad_write.run);
  CHECK(bad_write.text.find("--remote-write") != std::string::npos);
  const cli_parse ok = parse({"replay", "--workload", "chat", "--host-kv-budget", "1GiB", "--remote-tier", "--remote-write",
                              "through", "--remote-budget", "8GiB", "--remote-candidates", "3"});
  REQUIRE(ok.run);
  CHECK(ok.options.cache.remote_tier);
  CHECK(ok.options.cache.remote_write_through);
  CHECK(ok.options.cache.remote_budget_bytes == std::uint64_t{8} << 30);
  CHECK(ok.options.cache.remote_snapshot_candidates == 3);
  const cli_parse turn_ends_unprobed = parse({"replay", "--workload", "chat", "--host-kv-budget", "1GiB", "--remote-tier",
                                              "--remote-turn-ends", "on", "--remote-probe", "off"});
  CHECK(!turn_ends_unprobed.run);
  CHECK(turn_ends_unprobed.text.find("needs --remote-probe on") != std::string::npos);
  const cli_parse turn_ends =
      parse({"replay", "--workload", "chat", "--host-kv-budget", "1GiB", "--remote-tier", "--remote-turn-ends", "on"});
  REQUIRE(turn_ends.run);
  CHECK(turn_ends.options.cache.remote_turn_ends);
  // Along a host axis the remote tier may be asked for without a host budget: the 0 point has neither.
  const cli_parse axis = parse({"sweep", "--workload", "chat", "--remote-tier", "--axis", "host_scale"});
  CHECK(axis.run);
}

TEST_CASE("a sweep along engines writes one row per fleet size with the remote columns") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 300, .seed = 4, .active_sessions = 12});
  replay_config base = fleet(policy_kind::strict, 1, false);
  base.remote_write_through = true;
  const sweep_result s = run_sweep(t, base, {policy_kind::strict}, sweep_axis::engines, {1, 2, 4}, false);
  REQUIRE(s.points.size() == 3);
  for (const sweep_point& p : s.points) {
    check_remote_adds_up(p.report);
    CHECK(p.report.engines == p.value);
    CHECK(p.report.per_engine.size() == p.value);
  }
  CHECK(parse_sweep_axis("engines") == sweep_axis::engines);
  CHECK(default_sweep_values(sweep_axis::engines, base) == std::vector<std::uint64_t>{1, 2, 4, 8, 16});

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "reprise-sim-remote-sweep";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string error;
  const std::vector<std::string> files = write_sweep(s, dir.string(), "fleet", "", error);
  REQUIRE(error.empty());
  CHECK(files.size() == 5); // CSV and four charts: engines is not a host axis
  std::ifstream in(files.front());
  std::string header;
  std::getline(in, header);
  CHECK(header.rfind("engines,model,policy,", 0) == 0);
  CHECK(header.find(",remote_tier,remote_store,remote_budget_bytes,remote_puts,") != std::string::npos);
  CHECK(header.ends_with(",remote_write,remote_probe,remote_probed_keys,remote_probed_found,remote_blocks_onboarded,"
                         "remote_turn_ends,remote_turn_ends_put,remote_turn_ends_lost,remote_turn_end_hits"));
  std::string row;
  std::getline(in, row);
  CHECK(row.find(",through,on,") != std::string::npos);
  std::filesystem::remove_all(dir);
}
