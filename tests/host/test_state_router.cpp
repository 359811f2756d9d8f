// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The state-aware router (reprise/routing/state_router.hpp): usable tokens rather than KV-matched ones, the
// accept policy, turn-end snapshots off the block grid, the bounded LRU index, lost / duplicated / reordered
// events, the load cap, errors, and a randomized comparison with a brute-force recomputation.
#include <reprise/keys/content_key.hpp>
#include <reprise/routing/fleet_keys.hpp>
#include <reprise/routing/state_router.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <random>
#include <span>
#include <tuple>
#include <vector>

using namespace reprise;
using namespace reprise::routing;

namespace {

constexpr std::uint32_t B = 8;        // the test models' block size
constexpr std::uint32_t aligned = 32; // the hybrid model's alignment unit (its gated-delta chunk)
constexpr exactness prefill = exactness::prefill_exact;
constexpr exactness decode = exactness::decode_continuation;

template <class T>
T ok(result<T> r) {
  REQUIRE(r);
  return std::move(*r);
}

model_config small_hybrid() {
  return ok(model_config::make({{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = B}, 1},
                                {gated_delta_shape{.key_heads = 1, .value_heads = 1, .key_dim = 16, .value_dim = 16,
                                                   .conv_width = 4, .chunk = aligned},
                                 1}}));
}
model_config small_attention() {
  return ok(model_config::make({{kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = B}, 2}}));
}

/// A model with its fleet's keys, computed here with the functions of content_key.hpp (not the router's).
struct fleet {
  model_config model;
  content_key_context context;
  fleet_keys keys;

  explicit fleet(model_config m)
      : model(m), context{0x5eed, ok(model_fingerprint::make(m, "router-test"))},
        keys(ok(fleet_keys::make(context, m))) {}

  std::vector<content_key> blocks(std::span<const token_id> tokens) const {
    return ok(block_keys(context, {}, tokens, B));
  }
  content_key root() const { return ok(root_key(context, {})); }
  /// key_{floor(p/B)-1} of `tokens`, the parent of a snapshot at p.
  content_key parent(std::span<const token_id> tokens, std::uint64_t p) const {
    return p < B ? root() : blocks(tokens.first(p / B * B)).back();
  }
  content_key snapshot(std::span<const token_id> tokens, std::uint64_t p, exactness x) const {
    const std::size_t start = p / B * B;
    return ok(snapshot_key(context, parent(tokens, p), tokens.subspan(start, p - start), p, x,
                           ok(snapshot_dtypes::of(model))));
  }

  state_event block(std::span<const token_id> tokens, std::uint32_t i, exactness x = prefill,
                    state_change c = state_change::stored) const {
    return state_event::block(c, blocks(tokens.first((i + 1) * B)).back(), (i + 1) * B, x);
  }
  state_event snap(std::span<const token_id> tokens, std::uint64_t p, exactness x,
                   state_change c = state_change::stored) const {
    return state_event::snapshot(c, snapshot(tokens, p, x), parent(tokens, p), p, x);
  }
};

router_options options_for(const fleet& f, std::uint32_t engines, bool chat = false) {
  return router_options::for_model(f.model, engines, chat);
}

std::vector<token_id> tokens_from(std::uint32_t n, token_id first) {
  std::vector<token_id> t(n);
  for (std::uint32_t i = 0; i < n; ++i) t[i] = first + static_cast<token_id>(i);
  return t;
}

template <class Router>
void apply(Router& r, engine_id e, const state_event& ev) {
  REQUIRE(r.apply(e, ev));
}
template <class Router>
void store_blocks(Router& r, const fleet& f, engine_id e, std::span<const token_id> t, std::uint32_t n,
                  exactness x = prefill) {
  for (std::uint32_t i = 0; i < n; ++i) apply(r, e, f.block(t, i, x));
}

std::vector<std::uint64_t> as_vector(std::span<const std::uint64_t> s) { return {s.begin(), s.end()}; }

template <class Router>
route_choice route(Router& r, std::span<const token_id> prompt, std::vector<double> loads) {
  return ok(r.route(prompt, {}, loads));
}

} // namespace

TEST_CASE("usable tokens, not KV-matched tokens, on a hybrid model; the same on attention only") {
  const auto t = tokens_from(100, 1); // 12 full blocks; positions up to 99 may be skipped
  SUBCASE("hybrid: every block without a snapshot scores below fewer blocks with one") {
    const fleet f(small_hybrid());
    auto r = ok(state_router<fleet_keys>::make(options_for(f, 2), f.keys));
    store_blocks(r, f, 0, t, 12);
    store_blocks(r, f, 1, t, 4);
    apply(r, 1, f.snap(t, 32, prefill));
    const route_choice c = route(r, t, {0, 0});
    CHECK(c == route_choice{.engine = 1, .usable_tokens = 32, .best_engine = 1, .best_usable_tokens = 32});
    CHECK(r.matched_tokens()[0] == 96);
    CHECK(r.usable_tokens()[0] == 0);
    CHECK(r.matched_tokens()[1] == 32);
    CHECK(r.usable_tokens()[1] == 32);
    // A snapshot without its blocks counts for nothing.
    apply(r, 0, f.snap(t, 64, prefill));
    CHECK(route(r, t, {0, 0}).engine == 0);
    REQUIRE(r.apply(0, f.block(t, 3, prefill, state_change::removed)));
    CHECK(route(r, t, {0, 0}).engine == 1);
    CHECK(r.usable_tokens()[0] == 0);
    CHECK(r.matched_tokens()[0] == 24);
  }
  SUBCASE("attention only: every matched block") {
    const fleet f(small_attention());
    auto r = ok(state_router<fleet_keys>::make(options_for(f, 2), f.keys));
    store_blocks(r, f, 0, t, 12);
    store_blocks(r, f, 1, t, 4);
    const route_choice c = route(r, t, {0, 0});
    CHECK(c.engine == 0);
    CHECK(c.usable_tokens == 96);
    for (engine_id e : {0u, 1u}) CHECK(r.usable_tokens()[e] == r.matched_tokens()[e]);
    // A prompt of 96 tokens may skip at most 95: 11 blocks.
    CHECK(route(r, std::span(t).first(96), {0, 0}).usable_tokens == 88);
  }
}

TEST_CASE("strict counts prefill-exact state only; chat counts decode-continuation blocks and snapshots") {
  const fleet f(small_hybrid());
  const auto t = tokens_from(100, 1);
  auto strict = ok(state_router<fleet_keys>::make(options_for(f, 3, false), f.keys));
  auto chat = ok(state_router<fleet_keys>::make(options_for(f, 3, true), f.keys));
  for (auto* r : {&strict, &chat}) {
    // Engine 0: prefill-exact blocks, a decode-continuation snapshot at an aligned position.
    store_blocks(*r, f, 0, t, 8);
    apply(*r, 0, f.snap(t, 64, decode));
    // Engine 1: prefill-exact blocks and snapshot at 32.
    store_blocks(*r, f, 1, t, 4);
    apply(*r, 1, f.snap(t, 32, prefill));
    // Engine 2: the same at 32, then decode-filled blocks and a turn end two tokens into block 8.
    store_blocks(*r, f, 2, t, 4);
    apply(*r, 2, f.snap(t, 32, prefill));
    for (std::uint32_t i = 4; i < 8; ++i) apply(*r, 2, f.block(t, i, decode));
    apply(*r, 2, f.snap(t, 66, decode));
  }
  const route_choice s = route(strict, t, {0, 0, 0});
  CHECK(s.engine == 1); // 32 at engines 1 and 2: the lower id
  CHECK(s.usable_tokens == 32);
  CHECK(as_vector(strict.usable_tokens()) == std::vector<std::uint64_t>{0, 32, 32});
  CHECK(strict.matched_tokens()[2] == 32);

  const route_choice c = route(chat, t, {0, 0, 0});
  CHECK(c.engine == 2);
  CHECK(c.usable_tokens == 66);
  CHECK(as_vector(chat.usable_tokens()) == std::vector<std::uint64_t>{64, 32, 66});
  CHECK(chat.matched_tokens()[2] == 64);
}

TEST_CASE("a turn-end snapshot off the block grid counts only for a prompt that continues its tail tokens") {
  const fleet f(small_hybrid());
  auto r = ok(state_router<fleet_keys>::make(options_for(f, 2, true), f.keys));
  const auto conversation = tokens_from(69, 1); // the turn ended at 69, five tokens into block 8
  store_blocks(r, f, 0, conversation, 8);
  apply(r, 0, f.snap(conversation, 64, prefill));
  apply(r, 0, f.snap(conversation, 69, decode));

  auto next = conversation;
  next.insert(next.end(), {500, 501, 502, 503, 504, 505, 506, 507, 508, 509});
  CHECK(route(r, next, {0, 0}).usable_tokens == 69);
  CHECK(r.matched_tokens()[0] == 64);

  SUBCASE("one tail token differs: back to the aligned snapshot") {
    auto other = next;
    other[66] = 900;
    CHECK(route(r, other, {0, 0}).usable_tokens == 64);
  }
  SUBCASE("the prompt ends at the snapshot: at least one token is computed") {
    CHECK(route(r, conversation, {0, 0}).usable_tokens == 64);
    CHECK(route(r, std::span(next).first(70), {0, 0}).usable_tokens == 69);
  }
  SUBCASE("a turn end inside the first block hangs from the root") {
    const auto short_talk = tokens_from(5, 700);
    apply(r, 1, f.snap(short_talk, 5, decode));
    auto longer = short_talk;
    longer.push_back(3);
    const route_choice c = route(r, longer, {0, 0});
    CHECK(c.engine == 1);
    CHECK(c.usable_tokens == 5);
    longer[4] = 4;
    CHECK(route(r, longer, {0, 0}).usable_tokens == 0);
  }
}

TEST_CASE("the index keeps entries_per_engine entries per engine, least recently reported first out") {
  const fleet f(small_hybrid());
  router_options o = options_for(f, 2);
  o.entries_per_engine = 8;
  auto r = ok(state_router<fleet_keys>::make(o, f.keys));
  const std::size_t bytes = r.memory_bytes();
  CHECK(bytes > 0);
  const auto t = tokens_from(20 * B, 1);
  const auto keys = f.blocks(t);
  store_blocks(r, f, 0, t, 20);
  CHECK(r.entries(0) == 8);
  CHECK(r.entries(1) == 0);
  for (std::uint32_t i = 0; i < 20; ++i) CHECK(r.holds(0, state_kind::kv_block, keys[i], prefill) == (i >= 12));
  CHECK(r.memory_bytes() == bytes);

  // A duplicate `stored` is a touch: block 12 outlives block 13.
  apply(r, 0, f.block(t, 12));
  apply(r, 0, f.snap(t, 32, prefill));
  CHECK(r.entries(0) == 8);
  CHECK(r.holds(0, state_kind::kv_block, keys[12], prefill));
  CHECK(!r.holds(0, state_kind::kv_block, keys[13], prefill));
  CHECK(r.holds(0, state_kind::snapshot, f.snapshot(t, 32, prefill), prefill));

  // An evicted snapshot is gone from the lookup by parent too: blocks 0..3 and the snapshot at 32 are five
  // entries, one more than the index keeps.
  o.entries_per_engine = 4;
  auto small = ok(state_router<fleet_keys>::make(o, f.keys));
  apply(small, 0, f.snap(t, 32, prefill));
  store_blocks(small, f, 0, t, 4);
  CHECK(small.entries(0) == 4);
  CHECK(route(small, t, {0, 0}).usable_tokens == 0);
  CHECK(small.matched_tokens()[0] == 32);
  // Reported again, it evicts block 0 instead, and the chain is broken at its start.
  apply(small, 0, f.snap(t, 32, prefill));
  CHECK(route(small, t, {0, 0}).usable_tokens == 0);
  CHECK(small.matched_tokens()[0] == 0);
  CHECK(small.memory_bytes() < r.memory_bytes());

  REQUIRE(r.clear(0));
  CHECK(r.entries(0) == 0);
  store_blocks(r, f, 0, t, 3);
  CHECK(r.entries(0) == 3);
}

TEST_CASE("lost, duplicated and reordered events cost accuracy, never validity") {
  const fleet f(small_hybrid());
  const auto t = tokens_from(100, 1);
  std::vector<state_event> events;
  for (std::uint32_t i = 0; i < 8; ++i) events.push_back(f.block(t, i));
  events.push_back(f.snap(t, 32, prefill));
  events.push_back(f.snap(t, 64, prefill));

  SUBCASE("a lost `removed`: the router still names engine 0, a valid engine; its cache will miss") {
    auto r = ok(state_router<fleet_keys>::make(options_for(f, 3), f.keys));
    for (const auto& e : events) apply(r, 0, e);
    // Engine 0 evicted all of it; none of the `removed` events arrived.
    const route_choice c = route(r, t, {0, 0, 0});
    CHECK(c.engine == 0);
    CHECK(c.usable_tokens == 64);
    // Other prompts and engines go on as before.
    const auto other = tokens_from(50, 1000);
    store_blocks(r, f, 1, other, 4);
    apply(r, 1, f.snap(other, 32, prefill));
    CHECK(route(r, other, {0, 0, 0}).engine == 1);
    // Engine 0 reconnects and is cleared: it scores nothing until it reports again.
    REQUIRE(r.clear(0));
    const route_choice after = route(r, t, {3, 1, 2});
    CHECK(after.engine == 1);
    CHECK(after.usable_tokens == 0);
  }
  SUBCASE("every event twice, removals twice: the same index") {
    auto once = ok(state_router<fleet_keys>::make(options_for(f, 1), f.keys));
    auto twice = ok(state_router<fleet_keys>::make(options_for(f, 1), f.keys));
    for (const auto& e : events) {
      apply(once, 0, e);
      apply(twice, 0, e);
      apply(twice, 0, e);
    }
    CHECK(once.entries(0) == twice.entries(0));
    CHECK(route(once, t, {0}) == route(twice, t, {0}));
    auto removal = events.back();
    removal.change = state_change::removed;
    for (int i = 0; i < 2; ++i) {
      apply(once, 0, removal);
      apply(twice, 0, removal);
      apply(twice, 0, removal);
    }
    CHECK(once.entries(0) == events.size() - 1);
    CHECK(twice.entries(0) == events.size() - 1);
    CHECK(route(twice, t, {0}).usable_tokens == 32);
    // A removal of what was never stored changes nothing.
    apply(twice, 0, f.block(tokens_from(16, 5000), 1, prefill, state_change::removed));
    CHECK(twice.entries(0) == events.size() - 1);
  }
  SUBCASE("reordered: stores in any order give the same route; a removal overtaken by its store leaves a stale entry") {
    auto in_order = ok(state_router<fleet_keys>::make(options_for(f, 2), f.keys));
    for (const auto& e : events) apply(in_order, 1, e);
    std::mt19937 rng(7);
    for (int round = 0; round < 4; ++round) {
      auto shuffled = events;
      std::shuffle(shuffled.begin(), shuffled.end(), rng);
      auto r = ok(state_router<fleet_keys>::make(options_for(f, 2), f.keys));
      for (const auto& e : shuffled) apply(r, 1, e);
      CHECK(route(r, t, {0, 0}) == route(in_order, t, {0, 0}));
    }
    auto r = ok(state_router<fleet_keys>::make(options_for(f, 2), f.keys));
    for (const auto& e : events) apply(r, 0, e);
    apply(r, 0, f.snap(t, 64, prefill, state_change::removed));
    apply(r, 0, f.snap(t, 64, prefill)); // the store the removal followed, delivered late
    const route_choice c = route(r, t, {0, 0});
    CHECK(c.engine == 0);
    CHECK(c.usable_tokens == 64);
  }
}

TEST_CASE("the load cap: an engine over its share is passed over for the next best, and the result says so") {
  const fleet f(small_hybrid());
  const auto t = tokens_from(100, 1);
  auto r = ok(state_router<fleet_keys>::make(options_for(f, 3), f.keys)); // load_slack 0.25
  store_blocks(r, f, 0, t, 8);
  apply(r, 0, f.snap(t, 64, prefill));
  store_blocks(r, f, 1, t, 4);
  apply(r, 1, f.snap(t, 32, prefill));

  // Sum 10: the cap is 11 / 3 x 1.25 = 4.58.
  CHECK(route(r, t, {10, 0, 0}) == route_choice{.engine = 1,
                                                 .usable_tokens = 32,
                                                 .best_engine = 0,
                                                 .best_usable_tokens = 64,
                                                 .redirected_by_load = true});
  // Sum 4: the cap is 2.08; engine 0 at 2 is under it.
  CHECK(route(r, t, {2, 1, 1}) ==
        route_choice{.engine = 0, .usable_tokens = 64, .best_engine = 0, .best_usable_tokens = 64});
  // Engine 1 hot too: nothing usable is left under the cap, so the least loaded.
  const route_choice c = route(r, t, {10, 10, 0});
  CHECK(c.engine == 2);
  CHECK(c.usable_tokens == 0);
  CHECK(c.redirected_by_load);
  // More slack lets engine 0 through.
  router_options loose = options_for(f, 3);
  loose.load_slack = 2;
  auto l = ok(state_router<fleet_keys>::make(loose, f.keys));
  store_blocks(l, f, 0, t, 8);
  apply(l, 0, f.snap(t, 64, prefill));
  CHECK(route(l, t, {10, 0, 0}).engine == 0); // cap 11

  SUBCASE("ties: the lower load, then the lower id; nothing usable: the least loaded") {
    apply(r, 2, f.block(t, 0));
    for (std::uint32_t i = 1; i < 8; ++i) apply(r, 2, f.block(t, i));
    apply(r, 2, f.snap(t, 64, prefill));
    CHECK(route(r, t, {1, 1, 0.5}).engine == 2);
    CHECK(route(r, t, {1, 1, 1}).engine == 0);
    const auto cold = tokens_from(40, 9000);
    CHECK(route(r, cold, {3, 2, 2}) == route_choice{.engine = 1, .best_engine = 1});
    CHECK(route(r, std::span<const token_id>{}, {3, 2, 2}).engine == 1);
    CHECK(route(r, std::span(t).first(1), {0, 0, 0}).engine == 0);
  }
}

TEST_CASE("the prompt is read up to max_prompt_tokens") {
  const fleet f(small_hybrid());
  router_options o = options_for(f, 2);
  o.max_prompt_tokens = 40;
  auto r = ok(state_router<fleet_keys>::make(o, f.keys));
  const auto t = tokens_from(100, 1);
  store_blocks(r, f, 0, t, 8);
  apply(r, 0, f.snap(t, 64, prefill));
  store_blocks(r, f, 1, t, 4);
  apply(r, 1, f.snap(t, 32, prefill));
  const route_choice c = route(r, t, {0, 0});
  CHECK(c.engine == 1);
  CHECK(c.usable_tokens == 32);
  CHECK(r.matched_tokens()[0] == 40);
}

TEST_CASE("bad options, events and route arguments return errc and change nothing") {
  const fleet f(small_hybrid());
  const router_options good = options_for(f, 2);
  CHECK(good.validate() == errc{});
  const auto refused = [&](auto change, errc expected) {
    router_options o = good;
    change(o);
    CHECK(o.validate() == expected);
    CHECK(state_router<fleet_keys>::make(o, f.keys).error() == expected);
  };
  refused([](router_options& o) { o.engines = 0; }, errc::invalid_argument);
  refused([](router_options& o) { o.engines = max_engines + 1; }, errc::invalid_argument);
  refused([](router_options& o) { o.block_size = 0; }, errc::invalid_argument);
  refused([](router_options& o) { o.alignment = 0; }, errc::invalid_argument);
  refused([](router_options& o) { o.alignment = 12; }, errc::misaligned);
  refused([](router_options& o) { o.entries_per_engine = 0; }, errc::invalid_argument);
  refused([](router_options& o) { o.engines = 4, o.entries_per_engine = max_pool_ids / 2; }, errc::invalid_argument);
  refused([](router_options& o) { o.load_slack = -0.5; }, errc::invalid_argument);
  refused([](router_options& o) { o.load_slack = std::numeric_limits<double>::quiet_NaN(); }, errc::invalid_argument);
  refused([](router_options& o) { o.load_slack = std::numeric_limits<double>::infinity(); }, errc::invalid_argument);
  refused([](router_options& o) { o.max_prompt_tokens = 0; }, errc::invalid_argument);
  refused([](router_options& o) { o.max_prompt_tokens = std::uint64_t{1} << 32; }, errc::invalid_argument);

  CHECK(fleet_keys::make(content_key_context{}, f.model).error() == errc::invalid_argument);

  auto r = ok(state_router<fleet_keys>::make(good, f.keys));
  const auto t = tokens_from(40, 1);
  const auto event_refused = [&](engine_id e, state_event ev, errc expected) {
    if (e < 2) CHECK(r.validate(ev) == expected); // what a batch is checked with before any of it applies
    CHECK(r.apply(e, ev).error() == expected);
    CHECK(r.entries(0) + r.entries(1) == 0);
  };
  event_refused(2, f.block(t, 0), errc::out_of_range);
  CHECK(r.clear(2).error() == errc::out_of_range);
  CHECK(!r.holds(2, state_kind::kv_block, f.blocks(t)[0], prefill));
  state_event ev = f.block(t, 0);
  ev.position = 0;
  event_refused(0, ev, errc::invalid_argument);
  ev.position = 7;
  event_refused(0, ev, errc::misaligned);
  ev = f.block(t, 0);
  ev.kind = static_cast<state_kind>(7);
  event_refused(0, ev, errc::invalid_argument);
  ev = f.block(t, 0);
  ev.exact = static_cast<exactness>(9);
  event_refused(0, ev, errc::invalid_argument);
  ev = f.block(t, 0);
  ev.change = static_cast<state_change>(2);
  event_refused(0, ev, errc::invalid_argument);
  event_refused(0, f.snap(t, 24, prefill), errc::misaligned); // prefill-exact off the alignment unit
  CHECK(r.validate(f.snap(t, 24, decode)) == errc{});
  CHECK(r.entries(0) == 0); // validating applies nothing
  CHECK(r.apply(0, f.snap(t, 24, decode)));                    // decode continuation: anywhere
  CHECK(r.entries(0) == 1);

  const fleet a(small_attention());
  auto attention = ok(state_router<fleet_keys>::make(options_for(a, 1), a.keys));
  CHECK(attention.apply(0, f.snap(t, 32, prefill)).error() == errc::invalid_argument);

  const std::array<double, 2> loads{0, 0};
  CHECK(r.route(t, {}, std::span(loads).first(1)).error() == errc::size_mismatch);
  for (double bad : {-1.0, std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    const std::array<double, 2> l{0, bad};
    CHECK(r.route(t, {}, l).error() == errc::invalid_argument);
  }
  const std::array<std::byte, max_multimodal_digest_bytes + 1> digest{};
  const media_item oversized[] = {{.position = 1, .digest = digest}};
  const media_item unsorted[] = {{.position = 3, .digest = std::span(digest).first(2)}, {.position = 1, .digest = {}}};
  const media_item past_end[] = {{.position = static_cast<std::uint32_t>(t.size()), .digest = {}}};
  CHECK(r.route(t, extra_keys{.media = oversized}, loads).error() == errc::invalid_argument);
  CHECK(r.route(t, extra_keys{.media = unsorted}, loads).error() == errc::invalid_argument);
  CHECK(r.route(t, extra_keys{.media = past_end}, loads).error() == errc::out_of_range);
}

namespace {

/// The reference: each engine's entries in LRU order, and usable tokens recomputed position by position.
struct reference_engine {
  struct entry {
    state_event event;
    bool same(const state_event& e) const {
      return event.kind == e.kind && event.exact == e.exact && event.key == e.key;
    }
  };
  std::vector<entry> lru; // front: least recently reported
  std::size_t cap;

  void apply(const state_event& e) {
    const auto it = std::find_if(lru.begin(), lru.end(), [&](const entry& x) { return x.same(e); });
    if (e.change == state_change::removed) {
      if (it != lru.end()) lru.erase(it);
      return;
    }
    if (it != lru.end()) lru.erase(it);
    else if (lru.size() == cap) lru.erase(lru.begin());
    lru.push_back({e});
  }
  bool holds(state_kind kind, const content_key& key, exactness x) const {
    return std::any_of(lru.begin(), lru.end(), [&](const entry& e) {
      return e.event.kind == kind && e.event.key == key && e.event.exact == x;
    });
  }
  bool holds_accepted(state_kind kind, const content_key& key, bool chat) const {
    return holds(kind, key, prefill) || (chat && holds(kind, key, decode));
  }

  /// The leading blocks of the prompt's first L - 1 tokens held in an accepted class.
  std::uint64_t held_blocks(const fleet& f, std::span<const token_id> prompt, bool chat) const {
    if (prompt.size() < 2) return 0;
    const auto keys = f.blocks(prompt.first(prompt.size() - 1));
    std::uint64_t held = 0;
    while (held < keys.size() && holds_accepted(state_kind::kv_block, keys[held], chat)) ++held;
    return held;
  }
  /// Straight from the definition: the deepest p <= L - 1 with blocks 0 .. floor(p/B) - 1 and a snapshot at p.
  std::uint64_t usable(const fleet& f, std::span<const token_id> prompt, bool chat) const {
    if (prompt.size() < 2) return 0;
    const std::uint64_t limit = prompt.size() - 1;
    const std::uint64_t held = held_blocks(f, prompt, chat);
    for (std::uint64_t p = limit; p >= 1; --p) {
      if (p / B > held) continue;
      for (exactness x : {prefill, decode}) {
        if (x == decode && !chat) continue;
        if (holds(state_kind::snapshot, f.snapshot(prompt, p, x), x)) return p;
      }
    }
    return 0;
  }
};

route_choice reference_choice(std::span<const std::uint64_t> usable, std::span<const double> loads, double slack) {
  double total = 0;
  for (double l : loads) total += l;
  const double cap = (total + 1) / static_cast<double>(loads.size()) * (1 + slack);
  const auto key = [&](std::size_t e) { return std::tuple(-static_cast<double>(usable[e]), loads[e], e); };
  std::size_t best = 0, chosen = loads.size();
  for (std::size_t e = 0; e < loads.size(); ++e) {
    if (key(e) < key(best)) best = e;
    if (loads[e] <= cap && (chosen == loads.size() || key(e) < key(chosen))) chosen = e;
  }
  return {static_cast<engine_id>(chosen), usable[chosen], static_cast<engine_id>(best), usable[best], chosen != best};
}

} // namespace

TEST_CASE("randomized: usable tokens and choices equal a brute-force recomputation") {
  const fleet f(small_hybrid());
  constexpr std::uint32_t engines = 4;
  constexpr std::uint32_t cap = 40;
  constexpr std::uint32_t doc_tokens = 90;
  std::mt19937 rng(20261126);
  const auto uniform = [&](std::uint32_t lo, std::uint32_t hi) {
    return std::uniform_int_distribution<std::uint32_t>(lo, hi)(rng);
  };

  // Documents that share prefixes, as conversations and system prompts do.
  std::vector<std::vector<token_id>> docs;
  for (int d = 0; d < 8; ++d) {
    std::vector<token_id> doc;
    if (d > 0) {
      const auto& from = docs[uniform(0, static_cast<std::uint32_t>(d - 1))];
      doc.assign(from.begin(), from.begin() + uniform(0, doc_tokens));
    }
    while (doc.size() < doc_tokens) doc.push_back(static_cast<token_id>(uniform(0, 40)));
    docs.push_back(doc);
  }

  for (bool chat : {false, true}) {
    CAPTURE(chat);
    router_options o = options_for(f, engines, chat);
    o.entries_per_engine = cap;
    auto r = ok(state_router<fleet_keys>::make(o, f.keys));
    std::vector<reference_engine> ref(engines, reference_engine{{}, cap});
    const auto deliver = [&](engine_id e, state_event ev) { // by value: `ev` may be one of ref's entries
      REQUIRE(r.apply(e, ev));
      ref[e].apply(ev);
    };

    for (int step = 0; step < 400; ++step) {
      const engine_id e = uniform(0, engines - 1);
      const auto& doc = docs[uniform(0, static_cast<std::uint32_t>(docs.size() - 1))];
      const std::uint32_t op = uniform(0, 5);
      CAPTURE(step);
      CAPTURE(op);
      switch (op) {
      case 0:
      case 1: { // blocks: prefill-exact ones, then a decode-filled run
        const std::uint32_t n = uniform(1, doc_tokens / B);
        const std::uint32_t exact_blocks = uniform(0, n);
        for (std::uint32_t i = 0; i < n; ++i) deliver(e, f.block(doc, i, i < exact_blocks ? prefill : decode));
        break;
      }
      case 2: { // a snapshot: prefill-exact on the alignment grid, or a turn end anywhere
        if (uniform(0, 1) == 0) deliver(e, f.snap(doc, aligned * uniform(1, doc_tokens / aligned), prefill));
        else deliver(e, f.snap(doc, uniform(1, doc_tokens), decode));
        break;
      }
      case 3: { // a removal of something held, or of something never stored
        if (!ref[e].lru.empty() && uniform(0, 3) != 0) {
          state_event ev = ref[e].lru[uniform(0, static_cast<std::uint32_t>(ref[e].lru.size() - 1))].event;
          ev.change = state_change::removed;
          deliver(e, ev);
        } else {
          deliver(e, f.block(doc, uniform(0, doc_tokens / B - 1), decode, state_change::removed));
        }
        break;
      }
      case 4: { // a duplicate
        if (ref[e].lru.empty()) break;
        const state_event again = ref[e].lru[uniform(0, static_cast<std::uint32_t>(ref[e].lru.size() - 1))].event;
        deliver(e, again);
        break;
      }
      default: { // a route: a document's prefix, sometimes continued or changed
        std::vector<token_id> prompt(doc.begin(), doc.begin() + uniform(0, doc_tokens));
        if (uniform(0, 2) == 0)
          for (std::uint32_t k = uniform(1, 12); k > 0; --k) prompt.push_back(static_cast<token_id>(uniform(0, 40)));
        if (!prompt.empty() && uniform(0, 3) == 0)
          prompt[uniform(0, static_cast<std::uint32_t>(prompt.size() - 1))] = 77;
        std::vector<double> loads(engines);
        for (double& l : loads) l = uniform(0, 3) == 0 ? 0.0 : uniform(0, 8);
        const route_choice c = ok(r.route(prompt, {}, loads));
        std::vector<std::uint64_t> expected(engines), matched(engines);
        for (engine_id x = 0; x < engines; ++x) {
          expected[x] = ref[x].usable(f, prompt, chat);
          matched[x] = ref[x].held_blocks(f, prompt, chat) * B;
        }
        CHECK(as_vector(r.usable_tokens()) == expected);
        CHECK(as_vector(r.matched_tokens()) == matched);
        CHECK(c == reference_choice(expected, loads, o.load_slack));
      }
      }
      for (engine_id x = 0; x < engines; ++x) REQUIRE(r.entries(x) == ref[x].lru.size());
    }
    for (engine_id x = 0; x < engines; ++x)
      for (const auto& entry : ref[x].lru) CHECK(r.holds(x, entry.event.kind, entry.event.key, entry.event.exact));
  }
}
