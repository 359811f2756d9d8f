// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// What a cache tells a fleet router (cache_options::state_events, cache/state_events.hpp): its KV blocks and
// snapshots stored and removed, by content key. Fed to a routing::state_router, the usable tokens the router
// scores for an engine are the ones that engine's admit then skips, turn ends off the block grid included, as
// state comes and goes with eviction. With a host tier, what the GPU offloads stays reported until the host
// tier drops it, an onboard reports nothing twice, and the events replayed equal, after every turn, what the
// GPU ledgers and the host ledger hold.
#include "support/cache_testing.hpp"
#include "support/chat_turns.hpp"
#include "support/content_keys.hpp"

#include <reprise/keys/content_key.hpp>
#include <reprise/routing/fleet_keys.hpp>
#include <reprise/routing/state_router.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <set>
#include <span>
#include <tuple>
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

using host_tiers = policy::tiers<policy::host_tier>;
using host_cache_type = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, host_tiers>;

host_cache_type make_host_cache(const routing::fleet_keys& keys, std::uint32_t kv_blocks, std::uint32_t slots,
                                std::uint32_t host_blocks, std::uint32_t host_snapshots) {
  return ok(host_cache_type::create({.kv_blocks = kv_blocks,
                                     .snapshot_budget_bytes = slots * small_hybrid::bytes_per_snapshot,
                                     .hasher_seed = 3,
                                     .host_kv_budget_bytes = host_blocks * small_hybrid::bytes_per_kv_block,
                                     .host_snapshot_budget_bytes = host_snapshots * small_hybrid::bytes_per_snapshot,
                                     .state_events = &keys}));
}

/// Delivers every engine's events since the last call to the router.
template <class Router>
void deliver(Router& router, std::span<cache_type> engines) {
  for (std::uint32_t e = 0; e < engines.size(); ++e)
    for (const state_event& ev : engines[e].take_state_events()) REQUIRE(router.apply(e, ev).has_value());
}

/// An entry as the router names it.
using identity = std::tuple<state_kind, content_key, exactness>;
identity identity_of(const state_event& e) { return {e.kind, e.key, e.exact}; }

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

TEST_CASE("media items: the router keys blocks and snapshots by position, as admit does") {
  const routing::fleet_keys keys = make_keys();
  std::vector<cache_type> engines;
  engines.push_back(make_cache(keys, 64, 8));
  engines.push_back(make_cache(keys, 64, 8));
  auto router = ok(routing::state_router<routing::fleet_keys>::make(
      routing::router_options::for_model(model_config::of<small_hybrid>(), 2, true), keys));
  const std::array<std::byte, 3> cat{std::byte{1}, std::byte{2}, std::byte{3}};
  const media_item cat_at_140[] = {{.position = 140, .digest = cat}}; // block 8, past a 128-token system prompt
  const media_item cat_at_141[] = {{.position = 141, .digest = cat}};
  const std::vector<token_id> system = iota_tokens(128, 1000);
  std::vector<token_id> text = concat(system, iota_tokens(40, 2000));
  (void)chat_turn(engines[0], 1, text, iota_tokens(10, 4000)); // a text conversation over the system prompt
  deliver(router, engines);
  // An image conversation over the same system prompt: the router sees its first 128 tokens on engine 0
  // (the image's block and later are other content), and admit shares them and captures where they branch.
  std::vector<token_id> image = concat(system, iota_tokens(40, 3000));
  const routing::route_choice first_choice = ok(router.route(image, {.media = cat_at_140}, std::vector<double>{0, 0}));
  CHECK(first_choice.engine == 0);
  CHECK(first_choice.usable_tokens == 0); // nothing restores there yet: the text conversation captured no branch
  CHECK(router.matched_tokens()[0] == 128);
  CHECK(router.matched_tokens()[1] == 0);
  const turn_result first = chat_turn(engines[0], 2, image, iota_tokens(10, 5000), {.media = cat_at_140});
  CHECK(first.admitted.kv_matched_tokens == 128);
  REQUIRE(first.finished.capture.slot != no_slot);
  deliver(router, engines);
  auto route_and_admit = [&](seq_id s, const std::vector<token_id>& prompt, const extra_keys& x) {
    const routing::route_choice choice = ok(router.route(prompt, x, std::vector<double>{0, 0}));
    const admit_plan plan = ok(engines[choice.engine].admit(s, prompt, x));
    REQUIRE(engines[choice.engine].release(s).has_value());
    CHECK(choice.usable_tokens == plan.usable_tokens);
    return std::pair{choice, plan};
  };
  // The image conversation's next turn restores its turn end; with the image a token later, only the
  // snapshot where the conversations branched, before the image's block; a text request the same.
  const std::vector<token_id> next = concat(image, iota_tokens(20, 9000));
  const auto [same_choice, same_plan] = route_and_admit(3, next, {.media = cat_at_140});
  CHECK(same_choice.engine == 0);
  CHECK(same_plan.usable_tokens == first.finished.capture.position);
  const auto [moved_choice, moved_plan] = route_and_admit(4, next, {.media = cat_at_141});
  CHECK(moved_plan.usable_tokens == 128);
  const auto [text_choice, text_plan] = route_and_admit(5, next, {});
  CHECK(text_plan.usable_tokens == 128);
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
  for (cache_type& e : engines) evictions += e.metrics().kv_evictions + e.metrics().snapshot_evictions_capacity;
  CHECK(evictions > 0);
  CHECK(hits > conversations);
  CHECK(routed_to_state == hits);
}

TEST_CASE("host tier: an offloaded turn end stays reported and is routed to; the onboard reports nothing twice") {
  const routing::fleet_keys keys = make_keys();
  std::vector<host_cache_type> engines;
  // 24 GPU blocks and 3 snapshot slots; the host tier holds 64 blocks and 8 snapshots.
  engines.push_back(make_host_cache(keys, 24, 3, 64, 8));
  engines.push_back(make_host_cache(keys, 24, 3, 64, 8));
  auto router = ok(routing::state_router<routing::fleet_keys>::make(
      routing::router_options::for_model(model_config::of<small_hybrid>(), 2, true), keys));
  host_cache_type& c = engines[0];

  std::vector<token_id> tokens = iota_tokens(150, 1000);
  const turn_result first = chat_turn(c, 1, tokens, iota_tokens(20, 5000)); // turn end at 169
  REQUIRE(first.finished.capture.slot != no_slot);
  const std::uint32_t turn_end = first.finished.capture.position;
  REQUIRE(turn_end % small_hybrid::block_size != 0);
  std::set<identity> reported; // what the first conversation's turn left reported
  for (const state_event& e : c.take_state_events()) {
    REQUIRE(e.change == state_change::stored);
    reported.insert(identity_of(e));
    REQUIRE(router.apply(0, e).has_value());
  }
  REQUIRE(reported.size() > 10);
  const std::vector<token_id> next = concat(tokens, iota_tokens(30, 7000));

  // Two other conversations push the first out of GPU memory into the host tier.
  const std::uint64_t offloaded_before = c.metrics().host_blocks_offloaded;
  for (token_id k = 0; k < 2; ++k) {
    std::vector<token_id> other = iota_tokens(200, 100000 * (k + 1));
    (void)chat_turn(c, 10 + k, other, iota_tokens(5, 900000 + 100 * k));
  }
  REQUIRE(c.metrics().host_blocks_offloaded > offloaded_before);
  REQUIRE(c.metrics().host_snapshots_offloaded > 0);
  for (const state_event& e : c.take_state_events()) {
    // Offloaded, not removed: the engine can still onboard it.
    if (e.change == state_change::removed) CHECK(reported.count(identity_of(e)) == 0);
    REQUIRE(router.apply(0, e).has_value());
  }

  SUBCASE("the router scores the host-held turn end, and admit restores it from the host tier") {
    const routing::route_choice choice = ok(router.route(next, {}, std::vector<double>{0, 0}));
    CHECK(choice.engine == 0);
    CHECK(choice.usable_tokens == turn_end);
    const std::uint64_t onboarded_before = c.metrics().host_blocks_onboarded;
    const admit_plan plan = ok(c.admit(20, next));
    CHECK(plan.usable_tokens == choice.usable_tokens);
    CHECK(plan.restore_from_host);
    CHECK(c.metrics().host_blocks_onboarded > onboarded_before);
    // Its blocks came back from host units that keep their copies: nothing is reported again.
    for (const state_event& e : c.take_state_events()) CHECK(reported.count(identity_of(e)) == 0);
    REQUIRE(c.commit(20, static_cast<std::uint32_t>(next.size())).has_value());
    REQUIRE(c.release(20).has_value());
    (void)c.take_transfers();
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    for (const state_event& e : c.take_state_events()) {
      if (e.change == state_change::stored) CHECK(reported.count(identity_of(e)) == 0);
      REQUIRE(router.apply(0, e).has_value());
    }
    // Evicted from the GPU again, onto the copies they came from: still reported.
    for (token_id k = 0; k < 2; ++k) {
      std::vector<token_id> other = iota_tokens(200, 300000 * (k + 1));
      (void)chat_turn(c, 30 + k, other, iota_tokens(5, 800000 + 100 * k));
    }
    for (const state_event& e : c.take_state_events()) {
      if (e.change == state_change::removed) CHECK(reported.count(identity_of(e)) == 0);
      REQUIRE(router.apply(0, e).has_value());
    }
    CHECK(ok(router.route(next, {}, std::vector<double>{0, 0})).usable_tokens == turn_end);
  }
  SUBCASE("the host tier evicts it: reported removed, and the router agrees with admit again") {
    const std::uint64_t host_evictions = c.metrics().host_block_evictions;
    for (token_id k = 0; k < 8; ++k) {
      std::vector<token_id> other = iota_tokens(200, 1000000 * (k + 1));
      (void)chat_turn(c, 40 + k, other, iota_tokens(5, 700000 + 100 * k));
    }
    REQUIRE(c.metrics().host_block_evictions > host_evictions);
    std::set<identity> removed;
    for (const state_event& e : c.take_state_events()) {
      if (e.change == state_change::removed) removed.insert(identity_of(e));
      REQUIRE(router.apply(0, e).has_value());
    }
    for (const identity& i : reported) CHECK(removed.count(i) == 1);
    const routing::route_choice again = ok(router.route(next, {}, std::vector<double>{0, 0}));
    const admit_plan replan = ok(c.admit(50, next));
    CHECK(replan.usable_tokens < turn_end);
    CHECK(router.usable_tokens()[0] == replan.usable_tokens);
    CHECK(again.usable_tokens == replan.usable_tokens);
  }
  for (host_cache_type& e : engines) CHECK(e.check_invariants().has_value());
}

namespace {

/// A cache core driven like a `prefix_cache` (for chat_turn) that, after every call that may publish, notes
/// each GPU block's content key by serial, derived from the block pool itself: what a block held, named
/// as the router names it, is known after it left the GPU.
template <class Core>
struct observed_core {
  Core& c;
  const routing::fleet_keys& keys;
  /// By serial (a tier-less core: by GPU block, forgotten on eviction): the chain key the block continues,
  /// its own (0 for a turn end's partial block), and the tail tokens and media digest of a partial block.
  struct block_names {
    content_key before{}, key{};
    std::vector<token_id> tail;
    media_digest tail_media{};
    std::uint64_t end = 0; ///< its last position: a full block's end, a tail's turn end
  };
  std::map<std::uint64_t, block_names> names;

  std::uint64_t serial_of(block_id b) const {
    if constexpr (Core::tier_component::enabled) return c.tiers.serial_of(b);
    else return static_cast<std::uint64_t>(b) + 1;
  }
  content_key key_of(block_id b) {
    const detail::block_node& n = c.blocks.node(b);
    const auto it = names.find(serial_of(b));
    if (it != names.end() && n.state == detail::block_state::cached) return it->second.key;
    const content_key before = n.parent == no_block ? keys.root({}) : key_of(n.parent);
    block_names& e = names[serial_of(b)];
    const std::uint32_t B = c.geometry.block_size;
    e.before = before;
    if (n.state == detail::block_state::tail) {
      const auto t = c.blocks.pool().tokens(b).first(n.fill);
      e.tail.assign(t.begin(), t.end());
      e.tail_media = c.blocks.pool().media(b);
      e.end = std::uint64_t{n.depth} * B + n.fill;
    } else {
      e.key = keys.chain(before, c.blocks.pool().tokens(b), c.blocks.pool().media(b));
      e.end = std::uint64_t{n.depth + 1} * B;
    }
    return e.key;
  }
  void note() {
    if constexpr (!Core::tier_component::enabled) names.clear(); // GPU block ids are reused
    for (block_id b = 0; b < static_cast<block_id>(c.blocks.size()); ++b) {
      const detail::block_node& n = c.blocks.node(b);
      if (n.state == detail::block_state::cached || n.state == detail::block_state::tail) (void)key_of(b);
    }
  }
  identity snapshot_of(std::uint64_t serial, exactness kind) const {
    const block_names& e = names.at(serial);
    const content_key parent = e.tail.empty() ? e.key : e.before;
    return {state_kind::snapshot, keys.snapshot(parent, e.tail, e.end, kind, e.tail_media), kind};
  }

  /// What GPU memory and the host tier hold, named as the events name it.
  std::set<identity> held() {
    note();
    std::set<identity> out;
    for (block_id b = 0; b < static_cast<block_id>(c.blocks.size()); ++b) {
      const detail::block_node& n = c.blocks.node(b);
      if (n.state == detail::block_state::cached) out.insert({state_kind::kv_block, key_of(b), n.kind});
    }
    for (std::uint32_t i = 0; i < c.slots.size(); ++i) {
      const detail::slot_node& n = c.slots.node(static_cast<slot_id>(i));
      if (n.state == detail::slot_state::published) out.insert(snapshot_of(serial_of(n.block), n.kind));
    }
    if constexpr (Core::tier_component::enabled) {
      const detail::host_ledger& l = c.tiers.ledger;
      for (std::uint32_t i = 0; i < l.blocks().size(); ++i) {
        const detail::host_block_node& n = l.block(detail::host_unit{i});
        if (n.state == detail::host_state::cached && n.fill == c.geometry.block_size)
          out.insert({state_kind::kv_block, names.at(n.serial).key, n.kind});
      }
      for (std::uint32_t i = 0; i < l.snapshots().size(); ++i) {
        const detail::host_snapshot_node& n = l.snapshot(detail::host_unit{i});
        if (n.state == detail::host_state::cached) out.insert(snapshot_of(n.serial, n.kind));
      }
    }
    return out;
  }

  result<admit_plan> admit(seq_id s, std::span<const token_id> t, const extra_keys& keys = {}) {
    auto r = c.admit(s, t, keys, {});
    note();
    return r;
  }
  result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> written = {}) {
    auto r = c.commit(s, n, written);
    note();
    return r;
  }
  result<extend_plan> extend(seq_id s, const std::vector<token_id>& t) { return c.extend(s, t); }
  result<finish_plan> finish(seq_id s) {
    auto r = c.finish(s, {});
    note();
    return r;
  }
  transfer_plan take_transfers() { return c.take_transfers(); }
  epoch_t current_epoch() const { return c.clock.current; }
  result<void> step_complete(epoch_t n) { return c.step_complete(n); }
};

} // namespace

TEST_CASE_TEMPLATE("randomized chat traffic: the events replayed equal what the GPU and the host tier hold", Tiers,
                   policy::tiers<>, host_tiers) {
  using core = detail::cache_core<policy::chat, xxh3_hasher, Tiers>;
  const routing::fleet_keys keys = make_keys();
  cache_options o{.kv_blocks = 40,
                  .snapshot_budget_bytes = 3 * small_hybrid::bytes_per_snapshot,
                  .hasher_seed = 3,
                  .state_events = &keys};
  if constexpr (core::tier_component::enabled) {
    o.host_kv_budget_bytes = 60 * small_hybrid::bytes_per_kv_block;
    o.host_snapshot_budget_bytes = 6 * small_hybrid::bytes_per_snapshot;
  }
  REQUIRE(core::validate(geometry_of<small_hybrid>(), o) == errc{});
  core c(geometry_of<small_hybrid>(), o, 3);
  observed_core<core> engine{c, keys, {}};

  std::mt19937 rng(5);
  constexpr std::uint32_t conversations = 10, turns = 6;
  std::vector<std::vector<token_id>> history(conversations);
  const std::vector<token_id> system = tokens_from(rng, 40);
  std::set<identity> replayed;
  seq_id next_seq = 1;
  std::uint64_t from_host = 0;
  for (std::uint32_t t = 0; t < turns; ++t) {
    for (std::uint32_t k = 0; k < conversations; ++k) {
      std::vector<token_id>& h = history[rng() % conversations];
      if (h.empty()) h = system;
      const std::vector<token_id> user = tokens_from(rng, 5 + rng() % 40);
      h.insert(h.end(), user.begin(), user.end());
      const turn_result r = chat_turn(engine, next_seq++, h, tokens_from(rng, 3 + rng() % 30));
      from_host += r.admitted.host_blocks_onboarded;
      for (const state_event& e : c.events.take()) {
        // Once per state: never stored twice, never removed unless stored.
        if (e.change == state_change::stored) CHECK(replayed.insert(identity_of(e)).second);
        else CHECK(replayed.erase(identity_of(e)) == 1);
      }
      REQUIRE(detail::check_invariants(c).has_value());
      CHECK(replayed == engine.held());
    }
  }
  CHECK(c.metrics.kv_evictions > 0);
  if constexpr (core::tier_component::enabled) {
    CHECK(from_host > 0);
    CHECK(c.metrics.host_block_evictions > 0);
    CHECK(c.metrics.host_snapshot_evictions > 0);
    // check() compares every reported host unit with what it holds: a unit that changed is caught.
    detail::host_ledger& l = c.tiers.ledger;
    const auto corrupted = [&](auto& field) {
      REQUIRE(c.events.check());
      const auto kept = field;
      ++field;
      CHECK(!c.events.check());
      field = kept;
      CHECK(c.events.check());
    };
    std::uint32_t units = 0, snapshots = 0;
    for (std::uint32_t i = 0; i < l.blocks().size(); ++i) {
      detail::host_block_node& n = l.block(detail::host_unit{i});
      if (n.state != detail::host_state::cached || n.fill != small_hybrid::block_size) continue;
      corrupted(n.serial);
      corrupted(n.depth);
      ++units;
    }
    for (std::uint32_t i = 0; i < l.snapshots().size(); ++i) {
      detail::host_snapshot_node& n = l.snapshot(detail::host_unit{i});
      if (n.state != detail::host_state::cached) continue;
      corrupted(n.serial);
      ++snapshots;
    }
    CHECK(units > 0);
    CHECK(snapshots > 0);
  }
}

TEST_CASE("remote tier: host units a prefetch reserves are reported removed as the host tier hands them out") {
  using core = detail::cache_core<policy::strict, xxh3_hasher, policy::tiers<policy::host_tier, policy::remote_tier>>;
  constexpr std::uint32_t A = small_hybrid::alignment, B = small_hybrid::block_size;
  const routing::fleet_keys keys = make_keys();
  const content_keyer keyer = make_keyer();
  cache_options o{.kv_blocks = 2 * A / B,
                  .snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                  .hasher_seed = 3,
                  .host_kv_budget_bytes = 8 * small_hybrid::bytes_per_kv_block,
                  .host_snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                  .state_events = &keys};
  o.remote_keys = &keyer;
  REQUIRE(core::validate(geometry_of<small_hybrid>(), o) == errc{});
  core c(geometry_of<small_hybrid>(), o, 3);
  // Two prompts of A + 1 tokens in a pool of 2A / B blocks: the second evicts the first into the host tier.
  std::set<identity> stored;
  for (seq_id s = 1; s <= 2; ++s) {
    const std::vector<token_id> prompt = iota_tokens(A + 1, 100 + 5000 * s);
    auto plan = c.admit(s, prompt, {}, {});
    REQUIRE(plan.has_value());
    std::vector<std::uint32_t> written;
    for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
    REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size()), written).has_value());
    REQUIRE(c.release(s).has_value());
    (void)c.take_transfers();
    REQUIRE(c.step_complete(c.clock.current).has_value());
  }
  for (const state_event& e : c.events.take()) {
    if (e.change == state_change::stored) stored.insert(identity_of(e));
    else stored.erase(identity_of(e));
  }
  REQUIRE(c.metrics.host_blocks_held != 0);
  const auto host_evictions = [&] { return c.metrics.host_block_evictions + c.metrics.host_snapshot_evictions; };
  const std::uint64_t evicted_before = host_evictions();
  // A prompt nothing local holds: without a probe, a unit is reserved for every block it could fetch, the
  // least recently used cached ones too.
  auto fetches = c.prefetch(iota_tokens(2 * A + 1, 70000), {}, nullptr);
  REQUIRE(fetches.has_value());
  REQUIRE(c.metrics.host_block_evictions != 0);
  std::uint64_t removed = 0;
  for (const state_event& e : c.events.take()) {
    REQUIRE(e.change == state_change::removed);
    CHECK(stored.count(identity_of(e)) == 1);
    ++removed;
  }
  CHECK(removed == host_evictions() - evicted_before);
  CHECK(detail::check_invariants(c).has_value());
}
