// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// What a cache tells a fleet router (cache_options::state_events, cache/state_events.hpp): its KV blocks and
// snapshots stored and removed, by content key. Fed to a routing::state_router, the usable tokens the router
// scores for an engine are the ones that engine's admit then skips, turn ends off the block grid included, as
// state comes and goes with eviction.
#include "support/cache_testing.hpp"
#include "support/chat_turns.hpp"

#include <reprise/keys/content_key.hpp>
#include <reprise/routing/fleet_keys.hpp>
#include <reprise/routing/state_router.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <span>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

using cache_type = prefix_cache<small_hybrid, policy::chat>;

template <class T>
T ok(result<T> r) {
  REQUIRE(r.has_value());
  return std::move(*r);
}

routing::fleet_keys make_keys() {
  const model_config m = model_config::of<small_hybrid>();
  return ok(routing::fleet_keys::make({7, ok(model_fingerprint::make(m, "test-weights"))}, m));
}

cache_type make_cache(const routing::fleet_keys& keys, std::uint32_t kv_blocks, std::uint32_t slots) {
  return ok(cache_type::create({.kv_blocks = kv_blocks,
                                .snapshot_budget_bytes = slots * small_hybrid::bytes_per_snapshot,
                                .hasher_seed = 3,
                                .state_events = &keys}));
}

/// Delivers every engine's events since the last call to the router.
template <class Router>
void deliver(Router& router, std::span<cache_type> engines) {
  for (std::uint32_t e = 0; e < engines.size(); ++e)
    for (const state_event& ev : engines[e].take_state_events()) REQUIRE(router.apply(e, ev).has_value());
}

std::vector<token_id> tokens_from(std::mt19937& rng, std::size_t n) {
  std::uniform_int_distribution<token_id> d(1, 50000);
  std::vector<token_id> v(n);
  for (token_id& t : v) t = d(rng);
  return v;
}

} // namespace

TEST_CASE("a turn end off the block grid is routed to, and the router's usable tokens are admit's") {
  const routing::fleet_keys keys = make_keys();
  std::vector<cache_type> engines;
  engines.push_back(make_cache(keys, 64, 8));
  engines.push_back(make_cache(keys, 64, 8));
  auto router = ok(routing::state_router<routing::fleet_keys>::make(
      routing::router_options::for_model(model_config::of<small_hybrid>(), 2, true), keys));

  std::vector<token_id> tokens = iota_tokens(150, 1000);
  const turn_result first = chat_turn(engines[0], 1, tokens, iota_tokens(20, 5000)); // turn end at 169
  REQUIRE(first.finished.capture.slot != no_slot);
  REQUIRE(first.finished.capture.position % small_hybrid::block_size != 0);
  deliver(router, engines);

  const std::vector<token_id> next = concat(tokens, iota_tokens(30, 7000));
  const routing::route_choice choice = ok(router.route(next, {}, std::vector<double>{0, 0}));
  CHECK(choice.engine == 0);
  CHECK(router.usable_tokens()[1] == 0);
  const admit_plan plan = ok(engines[0].admit(2, next));
  CHECK(plan.usable_tokens == first.finished.capture.position);
  CHECK(choice.usable_tokens == plan.usable_tokens);
  REQUIRE(engines[0].release(2).has_value());

  SUBCASE("evicted, it is reported removed, and the router agrees with admit again") {
    for (token_id k = 0; k < 6; ++k) {
      std::vector<token_id> other = iota_tokens(200, 100000 * (k + 1));
      (void)chat_turn(engines[0], 10 + k, other, iota_tokens(5, 900000 + 100 * k));
    }
    deliver(router, engines);
    const routing::route_choice again = ok(router.route(next, {}, std::vector<double>{0, 0}));
    const admit_plan replan = ok(engines[0].admit(3, next));
    CHECK(replan.usable_tokens < plan.usable_tokens);
    CHECK(router.usable_tokens()[0] == replan.usable_tokens);
    CHECK(again.usable_tokens == replan.usable_tokens);
  }
  for (cache_type& c : engines) CHECK(c.check_invariants().has_value());
}

TEST_CASE("without the option a cache reports nothing") {
  auto c = ok(cache_type::create({.kv_blocks = 64, .snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot}));
  std::vector<token_id> tokens = iota_tokens(100);
  (void)chat_turn(c, 1, tokens, iota_tokens(10, 500));
  CHECK(c.take_state_events().empty());
}

TEST_CASE("randomized chat traffic routed by state: the router's usable tokens equal the chosen engine's admit") {
  const routing::fleet_keys keys = make_keys();
  std::mt19937 rng(11);
  constexpr std::uint32_t n_engines = 3, conversations = 8, turns = 5;
  std::vector<cache_type> engines;
  for (std::uint32_t e = 0; e < n_engines; ++e) engines.push_back(make_cache(keys, 48, 3));
  auto router = ok(routing::state_router<routing::fleet_keys>::make(
      routing::router_options::for_model(model_config::of<small_hybrid>(), n_engines, true), keys));
  std::vector<std::vector<token_id>> history(conversations);
  const std::vector<token_id> system = tokens_from(rng, 70);
  std::vector<double> load(n_engines, 0);
  std::uint32_t hits = 0, routed_to_state = 0;
  seq_id next_seq = 1;
  for (std::uint32_t t = 0; t < turns; ++t) {
    for (std::uint32_t c = 0; c < conversations; ++c) {
      std::vector<token_id>& h = history[c];
      if (h.empty()) h = system;
      const std::vector<token_id> user = tokens_from(rng, 5 + rng() % 40);
      h.insert(h.end(), user.begin(), user.end());
      const routing::route_choice choice = ok(router.route(h, {}, load));
      REQUIRE(choice.engine < n_engines);
      const std::uint64_t expected = router.usable_tokens()[choice.engine];
      const turn_result r = chat_turn(engines[choice.engine], next_seq++, h, tokens_from(rng, 3 + rng() % 30));
      CHECK(r.admitted.usable_tokens == expected);
      hits += r.admitted.usable_tokens > 0;
      routed_to_state += choice.usable_tokens > 0;
      load[choice.engine] += 1;
      deliver(router, engines);
    }
  }
  for (cache_type& e : engines) CHECK(e.check_invariants().has_value());
  // The traffic evicts (48 blocks, 3 snapshot slots an engine) and still finds state.
  std::uint64_t evictions = 0;
  for (cache_type& e : engines) evictions += e.metrics().kv_evictions + e.metrics().snapshot_evictions_lru;
  CHECK(evictions > 0);
  CHECK(hits > conversations);
  CHECK(routed_to_state == hits);
}
