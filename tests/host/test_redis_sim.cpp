// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim's remote tier on a live redis-server: a fleet replayed against the server gets exactly the
// results of the unlimited modelled store (every value read back with the bytes that were put), and a server
// that is not there costs misses, never a wrong value or a stalled replay.
#include "sim/fleet_store.hpp"
#include "sim/replay.hpp"
#include "sim/workload.hpp"
#include "support/sim_testing.hpp"
#include "support/redis_testing.hpp"

#include <reprise/remote/redis_store.hpp>

#include <doctest/doctest.h>

#include <algorithm>

using namespace reprise::sim;
using namespace reprise::testing;

namespace {

replay_config fleet() {
  replay_config c = remote_fleet(policy_kind::strict, 3, /*affinity=*/false);
  c.remote_write_through = true;
  return c;
}

} // namespace

TEST_CASE("a fleet on a live redis-server gets the results of the unlimited modelled store") {
  require_redis_server();
  REQUIRE(has_redis_fleet_store());
  redis_server server;
  const trace t = generate({.kind = workload_kind::chat, .requests = 200, .seed = 9, .active_sessions = 12});
  replay_config c = fleet();
  const replay_report modelled = simulate(t, c);
  REQUIRE(modelled.error.empty());
  REQUIRE(modelled.remote_block_hits > 0);
  REQUIRE(modelled.remote_snapshot_hits > 0);

  c.remote_redis = server.endpoint();
  c.remote_stand_in_bytes = 512;
  const replay_report live = simulate(t, c);
  REQUIRE(live.error.empty());
  CHECK(live.remote_store.find("redis at " + server.endpoint()) == 0);
  CHECK(live.remote_failures == 0);
  CHECK(live.remote_wrong_payloads == 0);
  CHECK(live.metrics.remote_puts == modelled.metrics.remote_puts);
  CHECK(live.metrics.remote_fetches == modelled.metrics.remote_fetches);
  CHECK(live.remote_block_hits == modelled.remote_block_hits);
  CHECK(live.remote_snapshot_hits == modelled.remote_snapshot_hits);
  CHECK(live.metrics.remote_rejected == 0);
  CHECK(live.prefill_tokens == modelled.prefill_tokens);
}

TEST_CASE("chat with turn ends in a live redis-server gets the counts of the modelled store") {
  require_redis_server();
  REQUIRE(has_redis_fleet_store());
  redis_server server;
  const trace t = generate({.kind = workload_kind::chat, .requests = 200, .seed = 9, .active_sessions = 12});
  replay_config c = remote_fleet(policy_kind::chat, 3, /*affinity=*/false);
  c.remote_write_through = true;
  c.remote_turn_ends = true;
  const replay_report modelled = simulate(t, c);
  REQUIRE(modelled.error.empty());
  REQUIRE(modelled.remote_turn_end_hits > 0);

  c.remote_redis = server.endpoint();
  c.remote_stand_in_bytes = 512;
  const replay_report live = simulate(t, c);
  REQUIRE(live.error.empty());
  CHECK(live.remote_failures == 0);
  CHECK(live.remote_wrong_payloads == 0);
  CHECK(live.metrics.remote_puts == modelled.metrics.remote_puts);
  CHECK(live.metrics.remote_turn_ends_put == modelled.metrics.remote_turn_ends_put);
  CHECK(live.metrics.remote_fetches == modelled.metrics.remote_fetches);
  CHECK(live.remote_turn_end_hits == modelled.remote_turn_end_hits);
  CHECK(live.metrics.remote_misses == modelled.metrics.remote_misses);
  CHECK(live.metrics.remote_rejected == modelled.metrics.remote_rejected);
  CHECK(live.prefill_tokens == modelled.prefill_tokens);
}

TEST_CASE("a fleet whose redis-server is gone fetches nothing, and the replay completes") {
  require_redis_server();
  const trace t = generate({.kind = workload_kind::chat, .requests = 60, .seed = 9, .active_sessions = 6});
  replay_config c = fleet();
  {
    redis_server server;
    c.remote_redis = server.endpoint();
  } // stopped: nothing listens on the port any more
  replay_config none = c;
  none.remote_tier = false;
  none.remote_redis.clear();
  const replay_report without = simulate(t, none);

  // Probing (the default): every probe fails, so nothing is fetched and nothing reserved: the same prefill
  // as no remote tier at all.
  const replay_report probed = simulate(t, c);
  REQUIRE(probed.error.empty());
  CHECK(probed.remote_failures > 0);
  CHECK(probed.metrics.remote_fetches == 0);
  CHECK(probed.remote_probed_found == 0);
  CHECK(probed.prefill_tokens == without.prefill_tokens);
  CHECK(std::any_of(probed.warnings.begin(), probed.warnings.end(),
                    [](const std::string& w) { return w.find("failed") != std::string::npos; }));

  // Unprobed: every fetch misses; a little more prefill than no remote tier, as the host units reserved for
  // the fetches that missed evicted what they held.
  c.remote_probe = false;
  const replay_report r = simulate(t, c);
  REQUIRE(r.error.empty());
  CHECK(r.remote_failures > 0);
  CHECK(r.remote_block_hits + r.remote_snapshot_hits == 0);
  CHECK(r.metrics.remote_misses == r.metrics.remote_fetches);
  CHECK(r.metrics.remote_fetches > 0);
  CHECK(r.prefill_tokens >= without.prefill_tokens);
  CHECK(static_cast<double>(r.prefill_tokens) <= 1.05 * static_cast<double>(without.prefill_tokens));
}
