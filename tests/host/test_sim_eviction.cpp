// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim's snapshot eviction rules (sim/eviction.hpp): the command line, every rule replaying a trace
// under a tight budget with check_invariants after every request, the oracle as a bound, the long-context
// workload, and the pressure sweep's budgets.
#include "sim/cli.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/workload.hpp"
#include "support/sim_testing.hpp"

#include <doctest/doctest.h>

#include <map>
#include <string>
#include <vector>

using namespace reprise;
using namespace reprise::sim;

namespace {
cli_parse parse(std::vector<const char*> args) {
  args.insert(args.begin(), "reprise-sim");
  return parse_command_line(static_cast<int>(args.size()), args.data());
}
} // namespace

TEST_CASE("--snapshot-eviction and --evictions parse into the rules, with errors naming the option") {
  auto p = parse({"replay", "--workload", "chat", "--snapshot-eviction", "marconi", "--marconi-alpha", "2"});
  REQUIRE(p.run);
  CHECK(p.options.cache.snapshot_eviction == eviction_kind::marconi);
  CHECK(p.options.cache.marconi_alpha == 2.0);
  CHECK(parse({"replay", "--workload", "chat"}).options.cache.snapshot_eviction == eviction_kind::lru);
  CHECK_FALSE(parse({"replay", "--workload", "chat", "--snapshot-eviction", "fifo"}).run);
  auto s = parse({"sweep", "--workload", "long_context", "--axis", "snapshot_budget", "--policy", "chat",
                  "--evictions", "lru,oracle", "--working-set-fractions", "4,1"});
  REQUIRE(s.run);
  CHECK(s.options.evictions == std::vector<eviction_kind>{eviction_kind::lru, eviction_kind::oracle});
  CHECK(s.options.working_set_fractions == std::vector<std::uint64_t>{4, 1});
  const auto two = parse({"sweep", "--workload", "chat", "--axis", "snapshot_budget", "--evictions", "lru"});
  CHECK_FALSE(two.run); // one policy needed
  CHECK(two.text.find("--evictions") != std::string::npos);
  for (eviction_kind k : all_evictions) CHECK(parse_eviction(name_of(k)) == k);
}

TEST_CASE("every eviction rule replays a chat trace under pressure without an error or a broken invariant") {
  const trace t = generate({.kind = workload_kind::chat, .requests = 120, .seed = 4, .active_sessions = 12});
  std::map<eviction_kind, std::uint64_t> computed;
  for (eviction_kind k : all_evictions) {
    replay_config c = testing::nemotron(policy_kind::chat, 1u << 13, 4);
    c.snapshot_eviction = k;
    c.check_invariants = true;
    const replay_report r = simulate(t, c);
    CAPTURE(std::string(name_of(k)));
    CHECK(r.error.empty());
    CHECK(r.metrics.snapshot_evictions_capacity > 0);
    computed[k] = r.prompt_tokens - r.usable_tokens;
  }
  // The oracle knows the future: it computes no more than LRU here.
  CHECK(computed[eviction_kind::oracle] <= computed[eviction_kind::lru]);
}

TEST_CASE("the long-context workload: documents of 32K..128K tokens, questions branching at their end") {
  const trace t = generate({.kind = workload_kind::long_context, .requests = 10, .seed = 2, .active_sessions = 2});
  CHECK(t.requests.size() == 10);
  for (const auto& pool : t.pools) {
    CHECK(pool.tokens.size() >= 32768);
    CHECK(pool.tokens.size() <= 131072);
  }
  const eviction_sweep_result s =
      run_eviction_sweep(t, testing::nemotron(policy_kind::chat, 1u << 16, 1), {eviction_kind::lru, eviction_kind::cost_aware},
                         {4, 1}, false);
  REQUIRE(s.points.size() == 4);
  CHECK(s.working_set_bytes > 0);
  const std::uint64_t per = s.points[0].report.bytes_per_snapshot;
  CHECK(s.points[1].value == s.working_set_bytes / per * per); // all of it, in whole snapshots
  for (const sweep_point& pt : s.points) CHECK(pt.report.error.empty());
}
