// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim's command line and run-time checks: values out of range and unknown options are errors that
// name the option and its range (never truncated or ignored), policies that do not apply and KV pools too
// large for host memory are clear errors before any cache is built, and the readable outputs (summary
// table, models table, chart legends, paths).
#include "sim/cli.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <doctest/doctest.h>

#include <reprise/cache/config_rules.hpp>
#include <reprise/catalog.hpp>

#include <filesystem>
#include <fstream>
#include <span>
#include <sstream>

using namespace reprise::sim;

namespace {

cli_parse parse(std::vector<std::string> args) {
  args.insert(args.begin(), "reprise-sim");
  std::vector<const char*> argv;
  for (const std::string& a : args) argv.push_back(a.c_str());
  return parse_command_line(static_cast<int>(argv.size()), argv.data());
}

void check_error(std::vector<std::string> args, const std::string& option, const std::string& range) {
  const cli_parse p = parse(std::move(args));
  CAPTURE(p.text);
  CHECK_FALSE(p.run);
  CHECK(p.exit_code == 2);
  CHECK(p.text.find(option) != std::string::npos);
  CHECK(p.text.find(range) != std::string::npos);
}

trace small_chat(std::uint64_t requests = 200) {
  return generate({.kind = workload_kind::chat, .requests = requests, .seed = 3});
}

} // namespace

TEST_CASE("cli: valid command lines fill the options") {
  const cli_parse p = parse({"replay", "--workload", "rag", "--requests", "500", "--kv-budget", "2GiB", "--interval",
                             "512", "--policy", "snapshot_all,memory_only", "--no-progress"});
  REQUIRE(p.run);
  const cli_options& o = p.options;
  CHECK(o.command == command_kind::replay);
  CHECK(o.use_workload);
  CHECK(o.workload.kind == workload_kind::rag);
  CHECK(o.workload.requests == 500);
  CHECK(o.cache.kv_budget_bytes == std::uint64_t{2} << 30);
  CHECK(o.cache.snapshot_interval == 512);
  REQUIRE(o.policies.size() == 2);
  CHECK(o.policies[0] == policy_kind::snapshot_all);
  CHECK_FALSE(o.progress);

  const cli_parse help = parse({"replay", "--help"});
  CHECK_FALSE(help.run);
  CHECK(help.exit_code == 0);
  // --help lists the policies with the same words as the C++ enumerators and the charts.
  for (policy_kind k : all_policies) CHECK(help.text.find(std::string(to_string(k))) != std::string::npos);
}

TEST_CASE("cli: 64-bit values are range errors, never truncated to 32 bits") {
  check_error({"replay", "--workload", "chat", "--interval", "4294967296"}, "--interval", "4294967295");
  check_error({"replay", "--workload", "chat", "--block-size", "4294967312"}, "--block-size", "65536");
  check_error({"replay", "--workload", "chat", "--tenants", "4294967296"}, "--tenants", "1048576");
  check_error({"replay", "--workload", "chat", "--concurrency", "0"}, "--concurrency", "65536");
  check_error({"replay", "--workload", "chat", "--max-snapshots-per-path", "4294967296"}, "--max-snapshots-per-path",
              "4294967295");
  check_error({"replay", "--workload", "chat", "--kv-budget", "40XB"}, "--kv-budget", "byte size");
  check_error({"replay", "--workload", "chat", "--seed", "-1"}, "--seed", "18446744073709551615");
  check_error({"replay", "--workload", "chat", "--ttl", "18446744073709551616"}, "--ttl", "18446744073709551615");
  check_error({"replay", "--workload", "chat", "--requests", "1.5"}, "--requests", "16777216");
  check_error({"replay", "--workload", "chat", "--kv-budget", "0"}, "--kv-budget", "range");
  check_error({"sweep", "--workload", "chat", "--axis", "snapshot_interval", "--values", "256,4294967296"},
              "--values", "4294967295");
}

TEST_CASE("cli: generator sizes have documented maxima") {
  check_error({"generate", "--workload", "chat", "--requests", "1000000000", "-o", "x"}, "--requests", "16777216");
  check_error({"generate", "--workload", "chat", "--system-prompt-tokens", "4294967295", "-o", "x"},
              "--system-prompt-tokens", "4194304");
  check_error({"generate", "--workload", "rag", "--documents", "4294967295", "-o", "x"}, "--documents", "1048576");
  check_error({"replay", "--workload", "chat", "--active-sessions", "4294967295"}, "--active-sessions", "1048576");
  CHECK(parse({"generate", "--workload", "chat", "--requests", "16777216", "-o", "x"}).run);
}

TEST_CASE("cli: unknown options, unknown names and missing values are errors") {
  check_error({"replay", "--workload", "chat", "--kv-bugdet", "1GiB"}, "--kv-bugdet", "not expected");
  check_error({"replay", "--workload", "chat", "--policy", "snapshot_everything"}, "--policy", "snapshot_all");
  check_error({"replay", "--workload", "chat", "--model", "gpt-5"}, "--model", "llama-3-8b");
  check_error({"replay", "--workload", "chat", "--interval"}, "--interval", "missing");
  check_error({"replay"}, "--trace or --workload", "");
  check_error({"replay", "--trace", "a.jsonl", "--workload", "chat"}, "--trace", "");
  check_error({"frobnicate"}, "unknown command 'frobnicate'", "models, generate, replay, sweep");
}

TEST_CASE("a snapshot policy on an attention-only model is an error, not a division by zero") {
  replay_config c;
  c.model = *find_preset("llama-3-8b");
  c.policy = policy_kind::snapshot_all;
  const trace t = small_chat();
  CHECK_NOTHROW((void)configuration_warnings(t, c)); // divided by the zero snapshot size before the fix
  const replay_report r = simulate(t, c);
  CHECK(r.error.find("does not apply to llama-3-8b") != std::string::npos);
  CHECK(r.error.find("block_sharing") != std::string::npos);
}

TEST_CASE("KV and snapshot pools are bounded by the trace and by host memory") {
  const trace t = small_chat();
  replay_config c;
  c.policy = policy_kind::snapshot_all;
  SUBCASE("a budget beyond what the trace can fill runs with the blocks it can fill, same results") {
    c.kv_budget_bytes = 9'000'000'000'000'000'000ull;
    c.snapshot_budget_bytes = 9'000'000'000'000'000'000ull;
    const replay_report big = simulate(t, c);
    REQUIRE(big.error.empty());
    CHECK(big.kv_blocks == trace_block_bound(t, c.model.config.block_size()));
    CHECK(big.warnings.back().find("more than this trace can fill") != std::string::npos);
    replay_config exact = c;
    exact.kv_budget_bytes = big.kv_blocks * c.model.config.bytes_per_kv_block();
    exact.snapshot_budget_bytes = big.snapshot_slots * c.model.config.bytes_per_snapshot();
    const replay_report same = replay(t, exact);
    CHECK(same.hits == big.hits);
    CHECK(same.usable_tokens == big.usable_tokens);
    CHECK(same.tokens_lost == big.tokens_lost);
  }
  SUBCASE("tiny KV blocks at the default budget: an error naming the limit when the trace needs more") {
    // A model with 64-byte KV blocks (the budget's 40 GiB would be 671 M blocks).
    auto m = parse_model_file("name = tiny\nactive_params = 1e9\nattention = count=1 kv_heads=1 head_dim=1 block_size=16\n"
                              "mamba2 = count=1 heads=1 head_dim=1 state_dim=1 groups=1 conv_width=4 chunk=256\n");
    REQUIRE(std::holds_alternative<sim_model>(m));
    c.model = std::get<sim_model>(m);
    REQUIRE(c.model.config.bytes_per_kv_block() == 64);
    const replay_report bounded = simulate(t, c);
    CHECK(bounded.error.empty());
    CHECK(bounded.kv_blocks == trace_block_bound(t, 16));
    replay_limits small{.max_cache_bytes = 1 << 16};
    const replay_report refused = simulate(t, c, small);
    CHECK(refused.error.find("the simulator tracks at most 256 blocks") != std::string::npos);
    CHECK(refused.error.find("use a KV budget of at most") != std::string::npos);
  }
}

TEST_CASE("a model file model_config refuses is an error carrying model_config's reason") {
  const auto r = parse_model_file("name = x\nactive_params = 1e9\nmamba2 = count=1 heads=4 head_dim=8 state_dim=8 chunk=100\n");
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("model_config refused the layers (unsupported_config)") != std::string::npos);
}

// Byte counts that overflow 64 bits are model_config's to refuse; the simulator reports its error.
TEST_CASE("a model file whose byte counts overflow is refused") {
  const auto r = parse_model_file("name = big\nactive_params = 1e9\n"
                                  "attention = count=1 kv_heads=4294967295 head_dim=4294967295 block_size=16\n"
                                  "mamba2 = count=1 heads=1 head_dim=1 state_dim=1 groups=1 conv_width=4 chunk=256\n");
  REQUIRE(std::holds_alternative<std::string>(r));
  CHECK(std::get<std::string>(r).find("model_config refused the layers") != std::string::npos);
}

TEST_CASE("replay prints one summary table, policies as rows") {
  const trace t = small_chat();
  std::vector<replay_report> reports;
  for (policy_kind p : {policy_kind::memory_only, policy_kind::snapshot_all}) {
    replay_config c;
    c.policy = p;
    reports.push_back(simulate(t, c));
  }
  replay_config bad;
  bad.model = *find_preset("llama-3-8b");
  bad.policy = policy_kind::snapshot_turns;
  reports.push_back(simulate(t, bad));
  const std::string table = format_summary(reports);
  CAPTURE(table);
  for (const char* column : {"policy", "hit rate", "computed tokens", "lost tokens", "peak bytes"})
    CHECK(table.find(column) != std::string::npos);
  CHECK(table.find("memory_only") != std::string::npos);
  CHECK(table.find("n/a") != std::string::npos); // memory_only loses no token to a missing snapshot
  CHECK(table.find("snapshot_turns         error") != std::string::npos);
}

TEST_CASE("models table: mixture-of-experts models show active and total parameters") {
  const std::string table = models_table();
  CHECK(table.find("3.0B/80B") != std::string::npos);
  CHECK(table.find("active/total") != std::string::npos);
}

TEST_CASE("names: the policies and models are the catalog's, which the Python package offers too") {
  // A name in reprise-sim and not in <reprise/catalog.hpp> (or the other way round) fails here;
  // python/tests/test_catalog.py compares the package's names with this binary's.
  REQUIRE(all_policies.size() == reprise::catalog::policy_table.size());
  for (std::size_t i = 0; i < all_policies.size(); ++i) {
    CHECK(to_string(all_policies[i]) == reprise::catalog::policy_table[i].name);
    CHECK(parse_policy(reprise::catalog::policy_table[i].name) == all_policies[i]);
  }
  const std::span<const sim_model> presets = preset_models();
  REQUIRE(presets.size() == reprise::catalog::preset_table.size());
  const std::string table = models_table();
  for (std::size_t i = 0; i < presets.size(); ++i) {
    CHECK(presets[i].name == reprise::catalog::preset_table[i].name);
    CHECK(presets[i].preset == static_cast<preset_id>(i));
    CHECK(find_preset(presets[i].name) == &presets[i]);
    CHECK(table.find(presets[i].name) != std::string::npos);
  }
  // memory_only has no host tier: one fact (the catalog's), also what the cache's rule says.
  CHECK_FALSE(takes_host_tier(policy_kind::memory_only));
  CHECK(std::string(reprise::rule_message(reprise::config_rule::memory_only_host_tier)).find("memory_only") !=
        std::string::npos);
}

TEST_CASE("sweep: legends use the policy names, memory_only is not on the lost-tokens chart, paths have one /") {
  const trace t = small_chat(100);
  replay_config base;
  const std::vector<policy_kind> policies = {policy_kind::memory_only, policy_kind::snapshot_all};
  const sweep_result s = run_sweep(t, base, policies, sweep_axis::snapshot_budget, {std::uint64_t{1} << 30}, false);
  const auto dir = std::filesystem::temp_directory_path() / "reprise_sim_cli_sweep";
  std::filesystem::create_directories(dir);
  std::string error;
  const auto files = write_sweep(s, dir.string() + "/", "x", "t", error);
  REQUIRE(files.size() == 5);
  for (const std::string& f : files) CHECK(f.find("//") == std::string::npos);
  auto slurp = [](const std::string& path) {
    std::ifstream in(path);
    std::ostringstream ss;
    ss << in.rdbuf();
    return ss.str();
  };
  const std::string hit = slurp(files[1]), lost = slurp(files[2]);
  REQUIRE(files[2].find("lost-tokens") != std::string::npos);
  CHECK(hit.find(">memory_only</text>") != std::string::npos);
  CHECK(hit.find(">snapshot_all (") != std::string::npos);
  CHECK(lost.find(">memory_only</text>") == std::string::npos);
  CHECK(lost.find("memory_only: not plotted") != std::string::npos);
  std::filesystem::remove_all(dir);
}
