// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim with a host tier and with fleets: the host tier brings back what a GPU budget too small for the
// working set evicts (and its per-tier counts add up), its misuses are clear errors, a fleet of one engine
// replays exactly as the single-engine replay always has (figures pinned from before fleets existed),
// conversation affinity beats round robin on a multi-turn chat, and routing by state, which sees host-held
// state too, stays close to affinity.
#include "sim/cli.hpp"
#include "sim/csv.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"
#include "support/sim_testing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace reprise::sim;
using reprise::testing::nemotron;

namespace {

trace parse_ok(const char* text) {
  parse_result r = parse_trace(text);
  REQUIRE(r.ok());
  return std::move(r.t);
}

/// The per-tier counts add up to the totals, the bytes to the units moved, the engines to the fleet.
void check_tiers_add_up(const replay_report& r) {
  CAPTURE(r.policy);
  REQUIRE(r.error.empty());
  const std::uint64_t kv = r.bytes_per_kv_block, snapshot = r.bytes_per_snapshot;
  CHECK(r.gpu_kv_hit_tokens() + r.host_kv_hit_tokens == r.kv_matched_tokens);
  CHECK(r.host_kv_hit_tokens <= (r.metrics.host_blocks_onboarded + r.metrics.host_tails_onboarded) * r.block_size);
  CHECK(r.host_kv_hit_tokens >= r.metrics.host_blocks_onboarded * r.block_size);
  CHECK(r.gpu_snapshot_hits() + r.metrics.host_snapshot_hits == r.metrics.snapshot_hits);
  // take_transfers listed every move the counters count (the replay checks it; an error otherwise).
  CHECK(r.kv_offload_moves == r.metrics.host_blocks_offloaded);
  CHECK(r.snapshot_offload_moves == r.metrics.host_snapshots_offloaded);
  CHECK(r.kv_onboard_moves == r.metrics.host_blocks_onboarded + r.metrics.host_tails_onboarded);
  CHECK(r.metrics.host_bytes_offloaded ==
        r.metrics.host_blocks_offloaded * kv + r.metrics.host_snapshots_offloaded * snapshot);
  CHECK(r.metrics.host_bytes_onboarded == r.kv_onboard_moves * kv + r.metrics.host_snapshot_hits * snapshot);
  REQUIRE(r.per_engine.size() == r.engines);
  replay_report::engine_share sum;
  for (const replay_report::engine_share& e : r.per_engine) {
    sum.requests += e.requests;
    sum.hits += e.hits;
    sum.kv_hits += e.kv_hits;
    sum.prompt_tokens += e.prompt_tokens;
    sum.kv_matched_tokens += e.kv_matched_tokens;
    sum.usable_tokens += e.usable_tokens;
    sum.host_kv_hit_tokens += e.host_kv_hit_tokens;
  }
  CHECK(sum.requests == r.requests);
  CHECK(sum.hits == r.hits);
  CHECK(sum.kv_hits == r.kv_hits);
  CHECK(sum.prompt_tokens == r.prompt_tokens);
  CHECK(sum.kv_matched_tokens == r.kv_matched_tokens);
  CHECK(sum.usable_tokens == r.usable_tokens);
  CHECK(sum.host_kv_hit_tokens == r.host_kv_hit_tokens);
}

} // namespace

TEST_CASE("host tier: a turn end evicted from the GPU comes back from host memory, tail and snapshot included") {
  // r0: 300 fresh tokens, 40 output tokens: the turn end is at 339 (21 full blocks and a 3-token tail).
  // r1: 1000 unrelated tokens (63 blocks of the 64): evicts r0's blocks but its first, leaf first, and its
  //     own turn end takes the one snapshot slot from r0's. Both go to the host tier.
  // r2: r0's prompt and reply, then 20 new tokens: matches 339 tokens, block 0 in GPU memory and the rest
  //     from the host, and restores r0's turn end from the host.
  const trace t = parse_ok(R"({"id":0,"segments":[{"fresh":300}],"output":40}
{"id":1,"segments":[{"fresh":1000}]}
{"id":2,"segments":[{"from":0},{"fresh":20}]}
)");
  replay_config c = nemotron(policy_kind::chat, 64, 1);
  c.check_invariants = true;
  const replay_report without = replay(t, c);
  REQUIRE(without.error.empty());
  CHECK(without.usable_tokens == 0); // no snapshot left for r2
  CHECK(without.host_kv_hit_tokens == 0);

  c.host_kv_budget_bytes = 64 * c.model.config.bytes_per_kv_block();
  c.host_snapshot_budget_bytes = 2 * c.model.config.bytes_per_snapshot();
  const replay_report r = replay(t, c);
  check_tiers_add_up(r);
  CHECK(r.host_kv_units == 64);
  CHECK(r.host_snapshot_units == 2);
  CHECK(r.kv_matched_tokens == 339);
  CHECK(r.usable_tokens == 339);
  CHECK(r.metrics.host_snapshot_hits == 1);
  CHECK(r.metrics.snapshot_hits == 1);
  CHECK(r.metrics.host_tails_onboarded == 1);
  CHECK(r.metrics.host_blocks_onboarded == 20);
  CHECK(r.metrics.blocks_shared == 1); // block 0 never left the GPU
  CHECK(r.host_kv_hit_tokens == 20 * 16 + 3);
  CHECK(r.gpu_kv_hit_tokens() == 16);
  CHECK(r.transfer_steps > 0);
  const std::string text = format_report(r);
  CHECK(text.find("in GPU memory / from host        16 / 323 (20 blocks + 1 partial blocks onboarded)") !=
        std::string::npos);
  CHECK(text.find("snapshot hits in GPU / from host   0 / 1") != std::string::npos);
}

TEST_CASE("host tier: with a working set larger than the GPU budget it computes less, and the tiers add up") {
  // 16 live conversations over 8 system prompts; the GPU holds 512 blocks (8192 tokens) and 4 snapshots.
  const trace t = generate({.kind = workload_kind::chat, .requests = 600, .seed = 11, .active_sessions = 16});
  for (policy_kind p : {policy_kind::chat, policy_kind::snapshot_all, policy_kind::strict}) {
    CAPTURE(to_string(p));
    replay_config c = nemotron(p, 512, 4);
    const replay_report gpu_only = simulate(t, c);
    REQUIRE(gpu_only.error.empty());
    c.host_kv_budget_bytes = 10 * c.kv_budget_bytes;
    c.host_snapshot_budget_bytes = 10 * c.snapshot_budget_bytes;
    const replay_report tiered = simulate(t, c);
    check_tiers_add_up(tiered);
    CHECK(tiered.floor_tokens == gpu_only.floor_tokens);
    CHECK(tiered.computed_over_floor() < gpu_only.computed_over_floor());
    CHECK(tiered.metrics.host_blocks_onboarded > 0);
    CHECK(tiered.metrics.host_snapshot_hits > 0);
    CHECK(tiered.metrics.host_bytes_offloaded > 0);
    CHECK(tiered.metrics.host_bytes_onboarded > 0);
    CHECK(tiered.kv_matched_tokens > gpu_only.kv_matched_tokens);
    // Without a host tier nothing is counted for one.
    CHECK(gpu_only.host_kv_hit_tokens == 0);
    CHECK(gpu_only.transfer_steps == 0);
    CHECK(gpu_only.host_kv_units == 0);
  }
  SUBCASE("in flight, with invariants checked") {
    const trace small = generate({.kind = workload_kind::chat, .requests = 150, .seed = 2, .active_sessions = 8});
    replay_config c = nemotron(policy_kind::chat, 256, 2);
    c.concurrency = 3;
    c.check_invariants = true;
    c.host_kv_budget_bytes = 4 * c.kv_budget_bytes;
    c.host_snapshot_budget_bytes = 4 * c.snapshot_budget_bytes;
    const replay_report r = simulate(small, c);
    check_tiers_add_up(r);
    CHECK(r.metrics.host_blocks_onboarded > 0);
  }
}

TEST_CASE("host tier: misuses are clear errors") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 30, .seed = 1});
  SUBCASE("memory_only skips no prefill: it takes no host tier") {
    replay_config c = nemotron(policy_kind::memory_only, 512, 4);
    c.host_kv_budget_bytes = std::uint64_t{1} << 30;
    CHECK(simulate(t, c).error ==
          "policy memory_only takes no host tier: it skips no prefill, so a block brought back from host memory "
          "would save nothing");
  }
  SUBCASE("a host budget below one unit") {
    replay_config c = nemotron(policy_kind::chat, 512, 4);
    c.host_kv_budget_bytes = 100 << 10;
    const replay_report r = simulate(t, c);
    CHECK(r.error == "host KV budget 100 KiB is below one block (256 KiB)");
    CHECK(format_report(r).find("error: host KV budget 100 KiB is below one block") != std::string::npos);
    c.host_kv_budget_bytes = std::uint64_t{1} << 30;
    c.host_snapshot_budget_bytes = 1 << 20;
    CHECK(simulate(t, c).error == "host snapshot budget 1 MiB is below one snapshot (97.4 MiB)");
  }
  SUBCASE("a host snapshot budget without a host KV budget") {
    replay_config c = nemotron(policy_kind::chat, 512, 4);
    c.host_snapshot_budget_bytes = std::uint64_t{1} << 30;
    CHECK(simulate(t, c).error.starts_with("a host snapshot budget needs a host KV budget"));
  }
  SUBCASE("an attention-only model takes a host KV budget and ignores a host snapshot budget") {
    replay_config c;
    c.model = *find_preset("llama-3-8b");
    c.policy = policy_kind::block_sharing;
    c.kv_budget_bytes = 64 * c.model.config.bytes_per_kv_block();
    c.host_kv_budget_bytes = 640 * c.model.config.bytes_per_kv_block();
    c.host_snapshot_budget_bytes = std::uint64_t{1} << 30;
    const replay_report r = simulate(t, c);
    check_tiers_add_up(r);
    CHECK(r.host_snapshot_budget_bytes == 0);
  }
  SUBCASE("the command line") {
    auto parse = [](std::vector<std::string> args) {
      args.insert(args.begin(), "reprise-sim");
      std::vector<const char*> argv;
      for (const std::string& a : args) argv.push_back(a.c_str());
      return parse_command_line(static_cast<int>(argv.size()), argv.data());
    };
    const cli_parse ok = parse({"replay", "--workload", "chat", "--host-kv-budget", "8GiB", "--host-snapshot-budget",
                                "4GiB", "--engines", "4", "--affinity", "off"});
    REQUIRE(ok.run);
    CHECK(ok.options.cache.host_kv_budget_bytes == std::uint64_t{8} << 30);
    CHECK(ok.options.cache.host_snapshot_budget_bytes == std::uint64_t{4} << 30);
    CHECK(ok.options.cache.engines == 4);
    CHECK_FALSE(ok.options.cache.affinity);
    CHECK(parse({"replay", "--workload", "chat"}).options.cache.affinity);
    const cli_parse state = parse({"replay", "--workload", "chat", "--engines", "4", "--affinity", "state",
                                   "--load-slack", "0.5"});
    REQUIRE(state.run);
    CHECK(state.options.cache.state_aware);
    CHECK(state.options.cache.load_slack == 0.5);
    CHECK_FALSE(parse({"replay", "--workload", "chat"}).options.cache.state_aware);
    for (const auto& [args, what] : std::vector<std::pair<std::vector<std::string>, std::string>>{
             {{"replay", "--workload", "chat", "--engines", "0"}, "--engines"},
             {{"replay", "--workload", "chat", "--affinity", "sometimes"}, "--affinity"},
             {{"replay", "--workload", "chat", "--load-slack", "-1"}, "--load-slack"},
             {{"replay", "--workload", "chat", "--host-kv-budget", "lots"}, "--host-kv-budget"},
             {{"sweep", "--workload", "chat", "--axis", "host_memory"}, "--axis"},
             {{"sweep", "--workload", "chat", "--axis", "kv_budget", "--values", "0,1GiB"}, "--values"}}) {
      const cli_parse p = parse(args);
      CAPTURE(p.text);
      CHECK_FALSE(p.run);
      CHECK(p.exit_code == 2);
      CHECK(p.text.find(what) != std::string::npos);
    }
    const cli_parse sweep = parse({"sweep", "--workload", "chat", "--axis", "host-kv-budget", "--values", "0,1GiB,2GiB"});
    REQUIRE(sweep.run);
    CHECK(*sweep.options.axis == sweep_axis::host_kv_budget);
    CHECK(sweep.options.values == std::vector<std::uint64_t>{0, std::uint64_t{1} << 30, std::uint64_t{2} << 30});
    CHECK(*parse({"sweep", "--workload", "chat", "--axis", "host_scale"}).options.axis == sweep_axis::host_scale);
  }
}

TEST_CASE("a fleet of one engine replays as the single-engine replay did before fleets existed") {
  // Pinned from `reprise-sim replay --workload chat --requests 400 --seed 7 --active-sessions 16 --kv-budget 192MiB
  // --snapshot-budget 1GiB --concurrency 4 --policy chat,snapshot_all,memory_only --csv ...` as built before
  // fleets and host tiers were added (KV evictions, snapshot evictions and four requests in flight). The preset
  // then ran Mamba2 at chunk 256 (alignment 256); the checkpoint's chunk is 128 (presets.hpp). The pinned figures
  // are replayed on that earlier layout, which differs from today's preset in the chunk alone. The chat and
  // snapshot_all rows were pinned again once decode-filled blocks of equal tokens stopped merging (each keeps
  // the computation that wrote it): no snapshot is refused over another conversation's blocks any more (chat:
  // 67 refused -> 0), and the prefill skipped grows (chat 188,554 -> 195,046 tokens, snapshot_all 224,006 ->
  // 233,600). The snapshot_all row was pinned again when a snapshot restored twice became a branch point that
  // no next turn supersedes (snapshot_eviction.hpp): one hit fewer here (a kept branch point outlived a turn end
  // that a later turn would have restored: 233,600 -> 232,832 tokens skipped).
  auto layout_then = reprise::model_config::make(
      {{reprise::kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}, 4},
       {reprise::mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8, .conv_width = 4, .chunk = 256},
        24}});
  REQUIRE(layout_then.has_value());
  REQUIRE(layout_then->bytes_per_snapshot() == find_preset("nemotron-h-8b")->config.bytes_per_snapshot());
  const trace t = generate({.kind = workload_kind::chat, .requests = 400, .seed = 7, .active_sessions = 16});
  struct pinned {
    policy_kind policy;
    std::uint64_t decode_truncated, hits, kv_hits, kv_matched, usable, lost, output, blocks_shared, kv_evictions;
    std::uint64_t snapshot_hits, snapshot_misses, planned, written, refused, lru, invalidated;
    double mean_kv, mean_snapshot;
  };
  const pinned before[] = {
      {policy_kind::chat, 6, 160, 250, 314054, 195046, 119008, 135093, 19591, 44786, 160, 90, 474, 474, 0, 36, 431,
       197846616.42643923, 473231473.53518122},
      {policy_kind::snapshot_all, 6, 153, 253, 350976, 232832, 118144, 135093, 21914, 42463, 153, 100, 1181, 1181, 94,
       834, 337, 197828150.9356223, 879130773.42489266},
      {policy_kind::memory_only, 7, 0, 253, 339216, 0, 0, 134882, 21201, 42786, 0, 0, 0, 0, 0, 0, 0,
       197792167.72413793, 0},
  };
  for (const pinned& want : before) {
    for (bool affinity : {true, false}) {
      CAPTURE(to_string(want.policy));
      CAPTURE(affinity);
      replay_config c;
      c.model = *find_preset("nemotron-h-8b");
      c.model.config = *layout_then;
      c.model.preset = std::nullopt;
      c.policy = want.policy;
      c.kv_budget_bytes = std::uint64_t{192} << 20;
      c.snapshot_budget_bytes = std::uint64_t{1} << 30;
      c.concurrency = 4;
      c.engines = 1;
      c.affinity = affinity;
      const replay_report r = simulate(t, c);
      REQUIRE(r.error.empty());
      CHECK(r.requests == 400);
      CHECK(r.requests_rejected == 0);
      CHECK(r.prompt_tokens == 904640);
      CHECK(r.floor_tokens == 62602);
      CHECK(r.decode_truncated == want.decode_truncated);
      CHECK(r.hits == want.hits);
      CHECK(r.kv_hits == want.kv_hits);
      CHECK(r.kv_matched_tokens == want.kv_matched);
      CHECK(r.usable_tokens == want.usable);
      CHECK(r.tokens_lost == want.lost);
      CHECK(r.output_tokens == want.output);
      CHECK(r.metrics.blocks_shared == want.blocks_shared);
      CHECK(r.metrics.kv_evictions == want.kv_evictions);
      CHECK(r.metrics.snapshot_hits == want.snapshot_hits);
      CHECK(r.metrics.snapshot_misses == want.snapshot_misses);
      CHECK(r.metrics.captures_planned == want.planned);
      CHECK(r.metrics.captures_written == want.written);
      CHECK(r.metrics.captures_refused == want.refused);
      CHECK(r.metrics.snapshot_evictions_capacity == want.lru);
      CHECK(r.metrics.snapshot_evictions_invalidated == want.invalidated);
      CHECK(r.peak_kv_bytes == 201326592.0);
      CHECK(r.mean_kv_bytes == doctest::Approx(want.mean_kv).epsilon(1e-12));
      CHECK(r.mean_snapshot_bytes == doctest::Approx(want.mean_snapshot).epsilon(1e-12));
      // A single engine's report has no fleet or host-tier lines.
      const std::string text = format_report(r);
      CHECK(text.find("engines") == std::string::npos);
      CHECK(text.find("host") == std::string::npos);
    }
  }
}

TEST_CASE("routing: affinity keeps a conversation on one engine, round robin spreads it") {
  // Sessions a and b; c's first request continues a's (a new session id over the same context); d has no
  // session id and continues b's second request.
  const trace t = parse_ok(R"({"id":0,"session":"a","tokens":[1,2,3]}
{"id":1,"session":"b","tokens":[4,5,6]}
{"id":2,"session":"a","segments":[{"from":0},{"fresh":4}]}
{"id":3,"session":"b","segments":[{"fresh":4}]}
{"id":4,"session":"c","segments":[{"from":2},{"fresh":4}]}
{"id":5,"session":"c","segments":[{"fresh":4}]}
{"id":6,"segments":[{"from":3},{"fresh":4}]}
)");
  const std::vector<std::uint32_t> on = route_requests(t, 8, true);
  CHECK(on[2] == on[0]);
  CHECK(on[3] == on[1]);
  CHECK(on[4] == on[0]);
  CHECK(on[5] == on[0]);
  CHECK(on[6] == on[1]);
  for (std::uint32_t e : on) CHECK(e < 8);
  CHECK(route_requests(t, 8, true) == on); // a fixed hash, not a per-process seed
  CHECK(route_requests(t, 3, false) == std::vector<std::uint32_t>{0, 1, 2, 0, 1, 2, 0});
  CHECK(route_requests(t, 1, true) == std::vector<std::uint32_t>(7, 0));
}

TEST_CASE("fleet: affinity on beats round robin on a multi-turn chat with 4 engines") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 5, .active_sessions = 24});
  replay_config c = nemotron(policy_kind::chat, 16384, 64);
  c.engines = 4;
  c.affinity = true;
  const replay_report on = simulate(t, c);
  c.affinity = false;
  const replay_report off = simulate(t, c);
  check_tiers_add_up(on);
  check_tiers_add_up(off);
  CHECK(on.floor_tokens == off.floor_tokens); // a property of the trace
  CHECK(on.computed_over_floor() < off.computed_over_floor());
  CHECK(on.hit_rate() > off.hit_rate());
  for (const replay_report::engine_share& e : on.per_engine) CHECK(e.requests > 0);
  for (const replay_report::engine_share& e : off.per_engine) CHECK(e.requests == 200);
  const std::string text = format_report(on);
  CHECK(text.find("4 (affinity: a conversation stays on its first engine), budgets per engine") != std::string::npos);

  SUBCASE("with a host tier per engine") {
    replay_config h = nemotron(policy_kind::chat, 256, 2);
    h.engines = 4;
    h.host_kv_budget_bytes = 8 * h.kv_budget_bytes;
    h.host_snapshot_budget_bytes = 8 * h.snapshot_budget_bytes;
    const replay_report r = simulate(t, h);
    check_tiers_add_up(r);
    CHECK(r.metrics.host_blocks_onboarded > 0);
  }
}

TEST_CASE("fleet: routing by state, without session ids, beats round robin and keeps every engine under its cap") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 5, .active_sessions = 24});
  for (const policy_kind p : {policy_kind::chat, policy_kind::strict}) {
    CAPTURE(to_string(p));
    replay_config c = nemotron(p, 16384, 64);
    c.engines = 4;
    c.affinity = false;
    const replay_report round_robin = simulate(t, c);
    c.affinity = true;
    const replay_report session = simulate(t, c);
    c.state_aware = true;
    c.load_slack = 0.25;
    const replay_report state = simulate(t, c);
    REQUIRE(state.error.empty());
    check_tiers_add_up(state);
    CHECK(state.floor_tokens == round_robin.floor_tokens);
    CHECK(state.computed_over_floor() < round_robin.computed_over_floor());
    CHECK(state.computed_over_floor() < 1.1 * session.computed_over_floor());
    // The cap holds at every decision: (requests so far + 1) / engines x (1 + slack).
    CHECK(state.max_engine_load_ratio <= 1.25 * (800.0 + 4) / 800.0);
    std::uint64_t served = 0;
    for (const replay_report::engine_share& e : state.per_engine) {
      CHECK(e.requests > 0);
      served += e.requests;
    }
    CHECK(served == 800);
    const std::string text = format_report(state);
    CHECK(text.find("4 (routed by state: the engine whose cache holds the most usable tokens)") != std::string::npos);
    CHECK(text.find("x its share (cap at each request: 1.25x of (requests so far + 1) / engines)") !=
          std::string::npos);
  }
}

TEST_CASE("fleet: routing by state sees what the host tiers hold, and stays within 1.1x of session affinity") {
  // GPU pools far smaller than the working set (512 blocks, 3 snapshots an engine), host tiers 10x: most
  // turn ends sit in host memory. Reported as removed when the GPU offloaded them, the router would see
  // little and balance load alone (3.56x of the floor against affinity's 1.32x here).
  const trace t = generate({.kind = workload_kind::chat, .requests = 800, .seed = 5, .active_sessions = 24});
  replay_config c = nemotron(policy_kind::chat, 512, 3);
  c.host_kv_budget_bytes = 10 * c.kv_budget_bytes;
  c.host_snapshot_budget_bytes = 10 * c.snapshot_budget_bytes;
  c.engines = 4;
  c.affinity = true;
  const replay_report session = simulate(t, c);
  c.state_aware = true;
  const replay_report state = simulate(t, c);
  REQUIRE(session.error.empty());
  check_tiers_add_up(state);
  CHECK(state.metrics.host_blocks_onboarded > 0);
  CHECK(state.metrics.host_snapshot_hits > 0);
  CHECK(state.computed_over_floor() < 1.1 * session.computed_over_floor());
  CHECK(state.max_engine_load_ratio <= 1.25 * (800.0 + 4) / 800.0);
}

TEST_CASE("a sweep along host_scale writes the host columns and a from-host chart; older columns keep their order") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 200, .seed = 4, .active_sessions = 12});
  const replay_config base = nemotron(policy_kind::chat, 512, 3);
  const std::vector<std::uint64_t> scales = default_sweep_values(sweep_axis::host_scale, base);
  CHECK(scales == std::vector<std::uint64_t>{0, 1, 2, 5, 10});
  CHECK(default_sweep_values(sweep_axis::host_kv_budget, base)[4] == 10 * base.kv_budget_bytes);
  const sweep_result s = run_sweep(t, base, {policy_kind::chat, policy_kind::strict}, sweep_axis::host_scale, scales, false);
  REQUIRE(s.points.size() == 10);
  for (const sweep_point& p : s.points) {
    CAPTURE(p.value);
    check_tiers_add_up(p.report);
    CHECK(p.report.host_kv_budget_bytes == p.value * base.kv_budget_bytes);
    CHECK((p.report.host_kv_hit_tokens > 0) == (p.value > 0));
  }
  CHECK(s.points[4].report.computed_over_floor() < s.points[0].report.computed_over_floor());

  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "reprise_sim_tiers_sweep_test";
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  std::string error;
  const auto files = write_sweep(s, dir.string(), "host", "test", error);
  REQUIRE(error.empty());
  REQUIRE(files.size() == 6);
  CHECK(files.back().ends_with("host-from-host.svg"));
  std::ifstream svg(files.back());
  std::stringstream text;
  text << svg.rdbuf();
  CHECK(text.str().find("KV hits from the host tier vs host memory") != std::string::npos);

  // The columns of files written before the host tier, in their order, then the new ones.
  const std::vector<std::string> older = {
      "model", "policy", "block_size", "alignment", "snapshot_interval", "concurrency", "kv_budget_bytes",
      "snapshot_budget_bytes", "kv_blocks", "snapshot_slots", "requests", "requests_rejected", "decode_truncated",
      "hits", "hit_rate", "kv_hits", "kv_hit_rate", "prompt_tokens", "kv_matched_tokens", "usable_tokens",
      "tokens_lost", "prefill_tokens", "floor_tokens", "output_tokens", "flops_saved", "peak_kv_bytes", "mean_kv_bytes",
      "peak_snapshot_bytes", "mean_snapshot_bytes", "blocks_shared", "kv_evictions", "snapshot_hits",
      "snapshot_misses", "captures_planned", "captures_written", "captures_refused", "snapshot_evictions_capacity",
      "snapshot_evictions_ttl", "snapshot_evictions_invalidated", "cache_ns_per_request", "error", "warnings"};
  const std::vector<std::string> columns = report_columns();
  REQUIRE(columns.size() > older.size());
  CHECK(std::equal(older.begin(), older.end(), columns.begin()));
  std::ifstream csv(files.front());
  std::string header, row;
  std::getline(csv, header);
  CHECK(header.starts_with("host_scale,model,policy,"));
  CHECK(header.find(",engines,affinity,engine_requests,engine_hit_rates,engine_prefill_tokens,remote_tier,") !=
        std::string::npos); // the remote tier's columns come after
  std::getline(csv, row);
  CHECK(row.starts_with("0,nemotron-h-8b,chat,"));
  // No host tier at 0: every host column but the GPU hits (KV tokens, then snapshots) is 0.
  const replay_report& first = s.points[0].report;
  CHECK(row.find(",0,0,0,0," + std::to_string(first.kv_matched_tokens) + ",0,0,0," +
                 std::to_string(first.metrics.snapshot_hits) + ",0,0,0,0,0,0,0,0,0,0,1,on,") != std::string::npos);
  std::filesystem::remove_all(dir);
}
