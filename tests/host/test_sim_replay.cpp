// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim replay through the real prefix_cache: hand-computed hit counts on small traces for every
// policy, budget errors and warnings, the runtime-configured cache equivalent to the typed one, other block
// sizes with real byte figures, determinism, and the
// sweep's CSV and plot files.
#include "sim/cache_replay.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace reprise::sim;

namespace {

replay_config config_for(const char* model, policy_kind p) {
  replay_config c;
  c.model = *find_preset(model);
  c.policy = p;
  // 512 blocks: room for every small trace here, and check_invariants() (which walks the pool) stays fast.
  c.kv_budget_bytes = 512 * c.model.config.bytes_per_kv_block();
  c.snapshot_budget_bytes = std::uint64_t{8} << 30;
  c.check_invariants = true;
  return c;
}

trace parse_ok(const char* text) {
  parse_result r = parse_trace(text);
  REQUIRE(r.ok());
  return std::move(r.t);
}

struct expected {
  std::uint64_t hits, kv_hits, kv_matched, usable, lost;
};

void check(const replay_report& r, const expected& e) {
  CAPTURE(r.policy);
  REQUIRE(r.error.empty());
  CHECK(r.hits == e.hits);
  CHECK(r.kv_hits == e.kv_hits);
  CHECK(r.kv_matched_tokens == e.kv_matched);
  CHECK(r.usable_tokens == e.usable);
  CHECK(r.tokens_lost == e.lost);
  CHECK(r.prefill_tokens == r.prompt_tokens - r.usable_tokens);
}

/// Compares everything but the timings.
void check_same(const replay_report& a, const replay_report& b) {
  CHECK(a.requests == b.requests);
  CHECK(a.requests_rejected == b.requests_rejected);
  CHECK(a.hits == b.hits);
  CHECK(a.kv_hits == b.kv_hits);
  CHECK(a.kv_matched_tokens == b.kv_matched_tokens);
  CHECK(a.usable_tokens == b.usable_tokens);
  CHECK(a.tokens_lost == b.tokens_lost);
  CHECK(a.peak_kv_bytes == b.peak_kv_bytes);
  CHECK(a.mean_kv_bytes == b.mean_kv_bytes);
  CHECK(a.peak_snapshot_bytes == b.peak_snapshot_bytes);
  CHECK(a.mean_snapshot_bytes == b.mean_snapshot_bytes);
  CHECK(a.metrics.kv_evictions == b.metrics.kv_evictions);
  CHECK(a.metrics.captures_planned == b.metrics.captures_planned);
  CHECK(a.metrics.captures_written == b.metrics.captures_written);
  CHECK(a.metrics.captures_refused == b.metrics.captures_refused);
  CHECK(a.metrics.snapshot_evictions_capacity == b.metrics.snapshot_evictions_capacity);
  CHECK(a.metrics.snapshot_evictions_invalidated == b.metrics.snapshot_evictions_invalidated);
  CHECK(a.snapshot_slots == b.snapshot_slots);
}

} // namespace

TEST_CASE("block_sharing on Llama-3-8B (B = 16): hand-computed hits") {
  // r0: 100 system tokens + 10 own, 20 output tokens: 129 tokens fed, 8 full blocks published.
  // r1: same system prompt: blocks 0..5 (96 tokens) match, block 6 differs at token 100.
  // r2: continues r0 (130 tokens) + 5: 8 blocks = 128 tokens match (floor(134 / 16) = 8 allows them all).
  // r3: r1's prompt under another tenant: never shares.
  const trace t = parse_ok(R"({"pool":"sys","random":100,"seed":3}
{"id":0,"segments":[{"pool":"sys"},{"fresh":10}],"output":20}
{"id":1,"segments":[{"pool":"sys"},{"fresh":20}]}
{"id":2,"segments":[{"from":0},{"fresh":5}]}
{"id":3,"tenant":"other","segments":[{"pool":"sys"},{"fresh":20}]}
)");
  const replay_report r = replay(t, config_for("llama-3-8b", policy_kind::block_sharing));
  check(r, {.hits = 2, .kv_hits = 2, .kv_matched = 96 + 128, .usable = 96 + 128, .lost = 0});
  CHECK(r.requests == 4);
  CHECK(r.prompt_tokens == 110 + 120 + 135 + 120);
  CHECK(r.flops_saved == doctest::Approx(2 * 8.0e9 * 224));
}

TEST_CASE("the policies on Nemotron-H-8B (B = 16, A = 128): hand-computed hits") {
  // r0: 600 system tokens + 50 own (L = 650), 7 output tokens: 656 tokens fed = 41 full blocks, so an
  //     end-of-turn capture lands at 656. Captures at admit: last aligned floor(649 / 128) * 128 = 640; the
  //     interval (4 x 128 = 512) places one at 512.
  // r1: the system prompt + 70 own (L = 670): KV matches 37 blocks = 592 tokens (token 600 differs, block
  //     37 spans 592..607). The deepest snapshot at or below 592 is the interval's 512 (80 tokens lost);
  //     without the interval (snapshot_turns) the only snapshots are at 640 and 656: nothing usable.
  // r2: continues r0 (657 tokens) + 40 (L = 697): r0's 41 blocks = 656 tokens match, but block 40 (640..655)
  //     holds decoded tokens (r0's prompt ended at 650): it is decode_continuation-exact, so the policies
  //     that accept only prefill-exact state (and memory_only) match 640 tokens. Prefill-exact snapshots
  //     reach 640 with last_aligned (none lost), 512 with the interval alone (128 lost); accepting decode
  //     continuations reaches 656 (none lost).
  // r3: r1's prompt under another tenant: nothing shared.
  const trace t = parse_ok(R"({"pool":"sys","random":600,"seed":4}
{"id":0,"segments":[{"pool":"sys"},{"fresh":50}],"output":7}
{"id":1,"segments":[{"pool":"sys"},{"fresh":70}]}
{"id":2,"segments":[{"from":0},{"fresh":40}]}
{"id":3,"tenant":"other","segments":[{"pool":"sys"},{"fresh":70}]}
)");
  const std::uint64_t kv = 592 + 656, kv_exact = 592 + 640;
  check(replay(t, config_for("nemotron-h-8b", policy_kind::memory_only)),
        {.hits = 0, .kv_hits = 2, .kv_matched = kv_exact, .usable = 0, .lost = 0});
  check(replay(t, config_for("nemotron-h-8b", policy_kind::snapshot_interval)),
        {.hits = 2, .kv_hits = 2, .kv_matched = kv_exact, .usable = 512 + 512, .lost = 80 + 128});
  check(replay(t, config_for("nemotron-h-8b", policy_kind::snapshot_prefix_tree)),
        {.hits = 2, .kv_hits = 2, .kv_matched = kv_exact, .usable = 512 + 640, .lost = 80});
  check(replay(t, config_for("nemotron-h-8b", policy_kind::snapshot_turns)),
        {.hits = 1, .kv_hits = 2, .kv_matched = kv, .usable = 656, .lost = 592});
  const replay_report all = replay(t, config_for("nemotron-h-8b", policy_kind::snapshot_all));
  check(all, {.hits = 2, .kv_hits = 2, .kv_matched = kv, .usable = 512 + 656, .lost = 80});
  // r0: 512 and 640 at admit, 656 at its end of turn; r1 (restored at 512): 640 at admit; r3: 512 and 640 at
  // admit; and every other turn end off a block boundary keeps its partial block: r1 at 670, r2 at 697, r3 at
  // 670.
  CHECK(all.metrics.captures_written == 9);
  CHECK(all.metrics.snapshot_hits == 2);

  SUBCASE("an interval of 256 places a capture at 256 and 512 for r0") {
    replay_config c = config_for("nemotron-h-8b", policy_kind::snapshot_interval);
    c.snapshot_interval = 256;
    const replay_report r = replay(t, c);
    check(r, {.hits = 2, .kv_hits = 2, .kv_matched = kv_exact, .usable = 512 + 512, .lost = 80 + 128});
    // r0 writes 256 and 512; r3 (its own tenant) writes its own 256 and 512.
    CHECK(r.metrics.captures_written == 4);
  }
  SUBCASE("one snapshot slot: each admit keeps its deepest capture, and each evicts the one before") {
    // Every request restores nothing and plans 512 (interval) and 640 (last aligned): the slot takes 640 and
    // 512 is refused. r1 (KV 592) finds only r0's 640, too deep; its own 640 evicts r0's, so r2 (KV 640)
    // finds only r1's, on another chain; r2's and r3's captures evict in turn.
    replay_config c = config_for("nemotron-h-8b", policy_kind::snapshot_prefix_tree);
    c.snapshot_budget_bytes = c.model.config.bytes_per_snapshot();
    const replay_report r = replay(t, c);
    CHECK(r.snapshot_slots == 1);
    check(r, {.hits = 0, .kv_hits = 2, .kv_matched = kv_exact, .usable = 0, .lost = kv_exact});
    CHECK(r.peak_snapshot_bytes == doctest::Approx(static_cast<double>(c.model.config.bytes_per_snapshot())));
    CHECK(r.metrics.captures_planned == 4);
    CHECK(r.metrics.captures_refused == 4);
    CHECK(r.metrics.snapshot_evictions_capacity == 3);
  }
}

TEST_CASE("configurations that can never hit are errors or warnings, not silent zeros") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 50, .seed = 1});
  SUBCASE("a snapshot budget below one snapshot") {
    replay_config c = config_for("nemotron-h-8b", policy_kind::snapshot_all);
    c.snapshot_budget_bytes = std::uint64_t{64} << 20;
    const replay_report r = replay(t, c);
    CHECK(r.error.find("below one snapshot") != std::string::npos);
    REQUIRE_FALSE(r.warnings.empty());
    CHECK(r.warnings[0].starts_with("never hits"));
    CHECK(format_report(r).find("error: snapshot budget 64 MiB is below one snapshot (97.4 MiB)") != std::string::npos);
  }
  SUBCASE("an interval off the alignment grid") {
    replay_config c = config_for("nemotron-h-8b", policy_kind::snapshot_interval);
    c.snapshot_interval = 100;
    CHECK(replay(t, c).error.find("not a positive multiple of the alignment unit 128") != std::string::npos);
  }
  SUBCASE("block_sharing on a hybrid, and a block size the cache does not support") {
    CHECK(replay(t, config_for("nemotron-h-8b", policy_kind::block_sharing)).error.find("does not apply") !=
          std::string::npos);
    replay_config c = config_for("llama-3-8b", policy_kind::block_sharing);
    c.model.config = *with_block_size(c.model.config, 512);
    CHECK(replay(t, c).error.find("block size 512 is not supported by the cache (8, 16, 32, 64, 128, 256)") !=
          std::string::npos);
  }
  SUBCASE("a KV budget too small for the longest prompt rejects those requests") {
    replay_config c = config_for("llama-3-8b", policy_kind::block_sharing);
    c.kv_budget_bytes = std::uint64_t{64} << 20; // 32 blocks of 2 MiB = 512 tokens
    const replay_report r = replay(t, c);
    CHECK(r.error.empty());
    CHECK(r.requests_rejected > 0);
    CHECK(r.requests + r.requests_rejected == 50);
    bool warned = false;
    for (const std::string& w : r.warnings) warned |= w.find("rejected") != std::string::npos;
    CHECK(warned);
  }
}

TEST_CASE("Nemotron-H-8B replays at block sizes 8, 32 and 128 with real byte figures") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 120, .seed = 5});
  for (std::uint32_t b : {8u, 32u, 128u}) {
    CAPTURE(b);
    replay_config c = config_for("nemotron-h-8b", policy_kind::snapshot_all);
    c.model.config = *with_block_size(c.model.config, b);
    c.kv_budget_bytes = 4096 * c.model.config.bytes_per_kv_block();
    c.check_invariants = false;
    const replay_report r = replay(t, c);
    REQUIRE(r.error.empty());
    CHECK(r.block_size == b);
    CHECK(r.alignment == 128);
    CHECK(r.hits > 0);
    // Real bytes: a whole number of 102137856-byte snapshots (97.4 MiB), not a stand-in model's size.
    CHECK(r.bytes_per_snapshot == 102137856);
    CHECK(r.peak_snapshot_bytes >= 102137856.0);
    CHECK(std::fmod(r.peak_snapshot_bytes, 102137856.0) == 0.0);
    CHECK(r.peak_kv_bytes >= static_cast<double>(c.model.config.bytes_per_kv_block()));
  }
}

TEST_CASE("the runtime-configured cache gives the same report as the typed cache over the preset types") {
  const trace t = generate({.kind = workload_kind::agentic, .requests = 150, .seed = 11});
  for (policy_kind p : {policy_kind::memory_only, policy_kind::snapshot_interval, policy_kind::snapshot_prefix_tree,
                        policy_kind::snapshot_turns, policy_kind::snapshot_all}) {
    CAPTURE(to_string(p));
    replay_config c = config_for("nemotron-h-8b", p);
    c.snapshot_budget_bytes = std::uint64_t{1} << 30; // 10 slots: evictions happen
    c.kv_budget_bytes = 1024 * c.model.config.bytes_per_kv_block(); // KV evictions happen
    c.concurrency = 4;
    c.check_invariants = false; // quadratic in the pool; the hand-computed cases above run it
    const replay_report runtime = replay(t, c);
    const replay_report typed = replay_with_preset_type(t, c);
    REQUIRE(runtime.error.empty());
    REQUIRE(typed.error.empty());
    check_same(runtime, typed);
    CHECK(runtime.kv_hits > 0);
    CHECK((runtime.hits > 0) == restores_snapshots(p));
  }
  replay_config c = config_for("llama-3-8b", policy_kind::block_sharing);
  c.kv_budget_bytes = 1024 * c.model.config.bytes_per_kv_block();
  c.check_invariants = false;
  check_same(replay(t, c), replay_with_preset_type(t, c));
}

TEST_CASE("same seed, same report; concurrency keeps every request") {
  const workload_options w{.kind = workload_kind::chat, .requests = 400, .seed = 77, .tenants = 2};
  replay_config c = config_for("qwen3-next-80b-a3b", policy_kind::snapshot_all);
  c.concurrency = 8;
  c.snapshot_budget_bytes = std::uint64_t{2} << 30;
  c.kv_budget_bytes = 2048 * c.model.config.bytes_per_kv_block();
  c.check_invariants = false;
  const replay_report a = replay(generate(w), c);
  const replay_report b = replay(generate(w), c);
  REQUIRE(a.error.empty());
  check_same(a, b);
  CHECK(a.requests == 400);
  CHECK(a.hits > 0);
  CHECK(a.hits <= a.kv_hits);
  CHECK(a.usable_tokens + a.tokens_lost == a.kv_matched_tokens);
}

TEST_CASE("a sweep writes a CSV with one row per (policy, value) and four plots") {
  const trace t = generate({.kind = workload_kind::system_prompt, .requests = 60, .seed = 3, .system_prompt_tokens = 1200});
  replay_config base = config_for("nemotron-h-8b", policy_kind::snapshot_all);
  base.check_invariants = false;
  const std::vector<std::uint64_t> budgets = {std::uint64_t{64} << 20, std::uint64_t{256} << 20, std::uint64_t{1} << 30};
  const std::vector<policy_kind> policies = policies_for(base.model.config);
  const sweep_result s = run_sweep(t, base, policies, sweep_axis::snapshot_budget, budgets, false);
  REQUIRE(s.points.size() == policies.size() * budgets.size());

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "reprise_sim_sweep_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string error;
  const auto files = write_sweep(s, dir.string(), "budget", "test", error);
  REQUIRE(error.empty());
  REQUIRE(files.size() == 5);
  for (const std::string& f : files) CHECK(std::filesystem::file_size(f) > 200);

  std::ifstream csv(files[0]);
  std::string header, line;
  std::getline(csv, header);
  std::vector<std::string> columns = report_columns();
  columns.insert(columns.begin(), "snapshot_budget");
  std::string want;
  for (const std::string& col : columns) want += (want.empty() ? "" : ",") + col;
  CHECK(header == want);
  std::size_t rows = 0, errors = 0;
  while (std::getline(csv, line)) {
    ++rows;
    errors += line.find("below one snapshot") != std::string::npos;
  }
  CHECK(rows == s.points.size());
  CHECK(errors == static_cast<std::size_t>(std::count_if(policies.begin(), policies.end(), restores_snapshots))); // at 64 MiB

  std::ifstream svg(files[1]);
  std::stringstream text;
  text << svg.rdbuf();
  CHECK(text.str().find("Request hit rate vs snapshot budget") != std::string::npos);
  CHECK(text.str().find("64 MiB: snapshot budget 64 MiB is below one snapshot") != std::string::npos);
  for (policy_kind p : policies) CHECK(text.str().find(std::string(describe(p))) != std::string::npos);
  std::filesystem::remove_all(dir);
}
