// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Snapshot eviction under a full budget: LRU (the default) against cost-aware eviction (the snapshot that
// saves the fewest prefill FLOPs of the oldest W goes), superseded snapshots first under both, a caller's
// chooser, the candidates' marginal values, the cost model, and no false hit whatever is evicted.
#include "fuzz/cache_fuzz_entry.hpp"
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <random>
#include <string>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {
constexpr std::size_t snap = small_hybrid::bytes_per_snapshot;

using offsets = policy::capture<policy::caller_offsets>;
using lru_cache = prefix_cache<small_hybrid, policy::snapshot_restore<offsets>>;
using cost_cache = prefix_cache<small_hybrid, policy::snapshot_restore<offsets, policy::cost_aware_eviction<4>>>;
using runtime_cache = runtime_prefix_cache<policy::snapshot_restore<offsets>>;
using colliding_cost_cache =
    prefix_cache<small_hybrid, policy::snapshot_restore<offsets, policy::cost_aware_eviction<>>, constant_hasher>;

static_assert(policy::eviction_policy<policy::lru_eviction>);
static_assert(policy::eviction_policy<policy::cost_aware_eviction<8>>);
static_assert(std::is_same_v<policy::policy_traits<policy::chat>::eviction, policy::lru_eviction>);
static_assert(policy::policy_traits<policy::snapshot_restore<policy::cost_aware_eviction<2>, policy::accept_any>>::
                  eviction::window == 2); // options in any order

template <class Cache>
Cache make(cache_options o, std::size_t slots) {
  o.kv_blocks = 256;
  o.snapshot_budget_bytes = slots * snap;
  o.hasher_seed = 3;
  auto c = Cache::create(o);
  REQUIRE(c.has_value());
  return std::move(*c);
}

/// Admits `prompt` as `s` with captures at `at`, computes and writes them all, releases; completes the step.
template <class Cache>
admit_plan run_prompt(Cache& c, seq_id s, const std::vector<token_id>& prompt, std::vector<std::uint32_t> at) {
  auto plan = c.admit(s, prompt, {}, at);
  REQUIRE(plan.has_value());
  const admit_plan copy = *plan;
  REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size()), at).has_value());
  REQUIRE(c.check_invariants().has_value());
  REQUIRE(c.release(s).has_value());
  REQUIRE(c.check_invariants().has_value());
  return copy;
}

/// Tokens of a prompt of `count` tokens that shares nothing with prompts of another `first`.
std::vector<token_id> prompt_of(std::size_t count, token_id first) { return iota_tokens(count, first); }

/// Fills a two-slot cache with a deep snapshot (1024, published first: the LRU victim) and a shallow one
/// (64), both in one step, then needs a third slot. Returns how deep each prompt restores afterwards.
template <class Cache>
std::array<std::uint32_t, 2> deep_then_shallow(Cache& c) {
  const auto deep = prompt_of(1100, 0), shallow = prompt_of(200, 100000);
  run_prompt(c, 1, deep, {1024});
  run_prompt(c, 2, shallow, {64});
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  run_prompt(c, 3, prompt_of(300, 200000), {256}); // needs a slot: one of the two goes
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  std::array<std::uint32_t, 2> usable{};
  auto a = c.admit(4, deep);
  REQUIRE(a.has_value());
  usable[0] = a->usable_tokens;
  auto b = c.admit(5, shallow);
  REQUIRE(b.has_value());
  usable[1] = b->usable_tokens;
  REQUIRE(c.release(4).has_value());
  REQUIRE(c.release(5).has_value());
  REQUIRE(c.check_invariants().has_value());
  return usable;
}
} // namespace

TEST_CASE("cost-aware eviction keeps the snapshot that saves more prefill where LRU evicts it") {
  SUBCASE("LRU (the default) evicts the oldest: the deep one") {
    auto c = make<lru_cache>({}, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{0, 64});
    CHECK(c.metrics().snapshot_evictions_capacity == 1);
  }
  SUBCASE("compile-time cost_aware_eviction evicts the shallow one") {
    auto c = make<cost_cache>({}, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{1024, 0});
    CHECK(c.metrics().snapshot_evictions_capacity == 1); // counted with the budget's evictions
  }
  SUBCASE("the runtime option does the same under an LRU policy") {
    cache_options o;
    o.snapshot_eviction = policy::snapshot_eviction::cost_aware;
    auto c = make<lru_cache>(o, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{1024, 0});
  }
  SUBCASE("and a runtime model, with the cost model derived from it") {
    cache_options o;
    o.kv_blocks = 256;
    o.snapshot_budget_bytes = 2 * snap;
    o.hasher_seed = 3;
    o.snapshot_eviction = policy::snapshot_eviction::cost_aware;
    auto c = runtime_cache::create(model_config::of<small_hybrid>(), o);
    REQUIRE(c.has_value());
    CHECK(deep_then_shallow(*c) == std::array<std::uint32_t, 2>{1024, 0});
  }
  SUBCASE("the runtime option can ask for LRU under a cost-aware policy") {
    cache_options o;
    o.snapshot_eviction = policy::snapshot_eviction::lru;
    auto c = make<cost_cache>(o, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{0, 64});
  }
  SUBCASE("a window of one is LRU") {
    cache_options o;
    o.snapshot_eviction = policy::snapshot_eviction::cost_aware;
    o.eviction_window = 1;
    auto c = make<lru_cache>(o, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{0, 64});
  }
}

TEST_CASE("a candidate's value is the prefill its fallback on the same chain would not save") {
  auto c = make<cost_cache>({}, 4);
  const auto p = prompt_of(700, 0);
  run_prompt(c, 1, p, {448, 512, 640});
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  std::array<policy::snapshot_candidate, 8> out{};
  const std::size_t k = c.snapshot_eviction_candidates(out);
  REQUIRE(k == 3);
  // Published in position order by one commit: oldest first.
  CHECK(out[0].position == 448);
  CHECK(out[0].fallback == 0);
  CHECK(out[1].position == 512);
  CHECK(out[1].fallback == 448);
  CHECK(out[2].position == 640);
  CHECK(out[2].fallback == 512);
  const policy::prefill_cost cost = prefill_cost_of(model_config::of<small_hybrid>());
  CHECK(cost.linear > 0);
  CHECK(cost.quadratic > 0);
  CHECK(out[0].saved_flops == doctest::Approx(cost.flops(448)));
  CHECK(out[1].saved_flops == doctest::Approx(cost.flops(512) - cost.flops(448)));
  CHECK(out[2].saved_flops == doctest::Approx(cost.flops(640) - cost.flops(512)));
  // The marginal saving, not the depth: 512 saves least over its fallback, so it goes, and 640 then falls
  // back to 448.
  run_prompt(c, 2, prompt_of(200, 300000), {64});  // the fourth slot, free
  run_prompt(c, 3, prompt_of(200, 400000), {128}); // evicts one
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  const std::size_t k2 = c.snapshot_eviction_candidates(out);
  REQUIRE(k2 == 4);
  CHECK(out[0].position == 448);
  CHECK(out[1].position == 640);
  CHECK(out[1].fallback == 448);
  auto a = c.admit(4, p);
  REQUIRE(a.has_value());
  CHECK(a->usable_tokens == 640);
  REQUIRE(c.release(4).has_value());
  auto b = c.admit(5, prompt_of(500, 0));
  REQUIRE(b.has_value());
  CHECK(b->usable_tokens == 448);
  REQUIRE(c.release(5).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("with no other snapshot within the walk a candidate is valued by its whole prefix") {
  auto c = make<cost_cache>({}, 4);
  // 1536 lies 80 blocks past 256 (B = 16): beyond the 64 blocks walked, so it falls back to 0, not to a
  // snapshot assumed just past the walk (1536 - 64 x 16 = 512), which would undervalue it.
  run_prompt(c, 1, prompt_of(1600, 0), {256, 1536});
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  std::array<policy::snapshot_candidate, 8> out{};
  REQUIRE(c.snapshot_eviction_candidates(out) == 2);
  const policy::prefill_cost cost = prefill_cost_of(model_config::of<small_hybrid>());
  CHECK(out[1].position == 1536);
  CHECK(out[1].fallback == 0);
  CHECK(out[1].saved_flops == doctest::Approx(cost.flops(1536)));
  // Within the walk the neighbour is found (1024 lies 32 blocks above 1536).
  run_prompt(c, 2, prompt_of(1100, 0), {1024}); // restores at 256, captures at 1024
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  REQUIRE(c.snapshot_eviction_candidates(out) == 3);
  const auto deep = std::find_if(out.begin(), out.begin() + 3, [](const auto& x) { return x.position == 1536; });
  REQUIRE(deep != out.begin() + 3);
  CHECK(deep->fallback == 1024);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a snapshot restored more often is worth more per step held") {
  auto c = make<cost_cache>({}, 2);
  const auto x = prompt_of(300, 0), y = prompt_of(300, 100000);
  run_prompt(c, 1, x, {256});
  run_prompt(c, 2, y, {256});
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  seq_id s = 10;
  auto restore = [&](const std::vector<token_id>& p, bool commits) {
    auto a = c.admit(s, p);
    REQUIRE(a.has_value());
    CHECK(a->usable_tokens == 256);
    if (commits) REQUIRE(c.commit(s, static_cast<std::uint32_t>(p.size())).has_value());
    REQUIRE(c.release(s++).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
  };
  restore(y, false); // released before it commits (a query): no restore ran, none counts
  std::array<policy::snapshot_candidate, 8> out{};
  REQUIRE(c.snapshot_eviction_candidates(out) == 2);
  CHECK(out[0].restores == 0); // x
  CHECK(out[1].restores == 0); // y
  for (int i = 0; i < 3; ++i) restore(x, true);
  restore(y, true); // y is the more recent, x the more often restored
  REQUIRE(c.snapshot_eviction_candidates(out) == 2);
  CHECK(out[0].restores == 3); // x, the older
  CHECK(out[1].restores == 1);
  // Equal savings: x scores 4 / (1 + its age), y 2 / (1 + its age); x's age is one step more, so y goes
  // (LRU, and a score without the restores, would evict x).
  run_prompt(c, 20, prompt_of(300, 200000), {256});
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto a = c.admit(21, x);
  REQUIRE(a.has_value());
  CHECK(a->usable_tokens == 256);
  auto b = c.admit(22, y);
  REQUIRE(b.has_value());
  CHECK(b->usable_tokens == 0);
  REQUIRE(c.release(21).has_value());
  REQUIRE(c.release(22).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("the cost model grows quadratically with attention and is zero at position 0") {
  const policy::prefill_cost cost = prefill_cost_of(model_config::of<small_hybrid>());
  CHECK(cost.flops(0) == 0);
  CHECK(cost.flops(2000) - cost.flops(1000) > cost.flops(1000) - cost.flops(0));
  const policy::prefill_cost given{.linear = 2, .quadratic = 0};
  CHECK(given.flops(10) == 20);
  CHECK(policy::prefill_cost{}.empty());
}

TEST_CASE("a superseded turn end goes first under every rule") {
  using chat_cost = prefix_cache<small_hybrid, policy::snapshot_restore<policy::capture<policy::end_of_turn>,
                                                                          policy::cost_aware_eviction<8>>>;
  auto c = make<chat_cost>({}, 2);
  // Two conversations end a turn each; the first conversation's next turn supersedes its old turn end.
  const auto a = prompt_of(900, 0), b = prompt_of(300, 500000);
  for (const auto& [s, p] : {std::pair{1, a}, std::pair{2, b}}) {
    REQUIRE(c.admit(s, p).has_value());
    REQUIRE(c.commit(s, static_cast<std::uint32_t>(p.size())).has_value());
    const auto f = c.finish(s);
    REQUIRE(f.has_value());
    CHECK(f->capture.slot != no_slot);
    REQUIRE(c.check_invariants().has_value());
  }
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto a2 = concat(a, prompt_of(100, 700000));
  auto p = c.admit(3, a2);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 900);
  REQUIRE(c.commit(3, static_cast<std::uint32_t>(a2.size())).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  const auto f = c.finish(3); // supersedes a's turn end (deep, valuable) and reuses its slot
  REQUIRE(f.has_value());
  CHECK(f->capture.slot != no_slot);
  REQUIRE(c.check_invariants().has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto q = c.admit(4, concat(b, prompt_of(10, 900000)));
  REQUIRE(q.has_value());
  CHECK(q->usable_tokens == 300); // b's turn end, shallower, survived
  REQUIRE(c.release(4).has_value());
  CHECK(c.check_invariants().has_value());
}

namespace {
/// Evicts the newest candidate (the opposite of LRU); counts its calls.
struct newest_chooser {
  int calls = 0;
  std::size_t last_size = 0;
  static std::size_t choose(void* self, std::span<const policy::snapshot_candidate> c, epoch_t) noexcept {
    auto* me = static_cast<newest_chooser*>(self);
    ++me->calls;
    me->last_size = c.size();
    return c.size() - 1;
  }
};
std::size_t out_of_range_chooser(void*, std::span<const policy::snapshot_candidate>, epoch_t) noexcept { return 99; }
} // namespace

TEST_CASE("a caller's chooser picks the victim among the window") {
  SUBCASE("its pick is evicted") {
    newest_chooser chooser;
    cache_options o;
    o.snapshot_chooser = {&newest_chooser::choose, &chooser};
    auto c = make<lru_cache>(o, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{1024, 0});
    CHECK(chooser.calls == 1);
    CHECK(chooser.last_size == 2);
  }
  SUBCASE("an index out of range evicts the oldest") {
    cache_options o;
    o.snapshot_chooser = {&out_of_range_chooser, nullptr};
    auto c = make<lru_cache>(o, 2);
    CHECK(deep_then_shallow(c) == std::array<std::uint32_t, 2>{0, 64});
  }
}

TEST_CASE("only snapshots whose step completed are candidates; none: the capture is refused") {
  auto c = make<cost_cache>({}, 1);
  run_prompt(c, 1, prompt_of(200, 0), {64});
  std::array<policy::snapshot_candidate, 4> out{};
  CHECK(c.snapshot_eviction_candidates(out) == 0); // published in the step still scheduled
  auto p = c.admit(2, prompt_of(200, 50000), {}, std::vector<std::uint32_t>{128});
  REQUIRE(p.has_value());
  CHECK(p->captures.empty());
  CHECK(c.metrics().captures_refused == 1);
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(c.snapshot_eviction_candidates(out) == 1);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("no false hit under cost-aware eviction with a colliding hasher") {
  auto c = make<colliding_cost_cache>({}, 2);
  // Many prompts of different tokens and captures: every key collides, evictions churn the slots.
  for (int i = 0; i < 24; ++i) {
    const auto p = prompt_of(static_cast<std::size_t>(130 + 64 * (i % 5)), 1000 * i);
    auto plan = c.admit(i + 1, p, {}, std::vector<std::uint32_t>{64, 128});
    REQUIRE(plan.has_value());
    CHECK(plan->usable_tokens == 0); // nothing of another prompt's tokens is ever reused
    REQUIRE(c.commit(i + 1, static_cast<std::uint32_t>(p.size()), std::vector<std::uint32_t>{64, 128}).has_value());
    REQUIRE(c.release(i + 1).has_value());
    REQUIRE(c.check_invariants().has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
  }
  // A repeat restores only its own tokens' snapshot, if it survived.
  const auto again = prompt_of(130 + 64 * 3, 1000 * 23);
  auto plan = c.admit(100, again);
  REQUIRE(plan.has_value());
  CHECK((plan->usable_tokens == 0 || plan->usable_tokens == 128 || plan->usable_tokens == 64));
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("random operation streams keep every oracle check and invariant under cost-aware eviction") {
  // First bytes 22..43 run fuzz/cache_fuzz_entry.hpp's configurations with cost-aware eviction: those that
  // restore snapshots (3, 4, 5, 7, 8, 9, 10), typed (B = 16) and runtime-configured (B = 8).
  std::uint64_t evictions = 0, hits = 0;
  for (const std::uint8_t policy : {3, 4, 5, 7, 8, 9, 10}) {
    for (const bool runtime : {false, true}) {
      for (std::uint32_t seed = 1; seed <= 4; ++seed) {
        std::mt19937 rng(seed * 104729 + policy * 2u + (runtime ? 1u : 0u));
        std::vector<std::uint8_t> bytes(10000);
        bytes[0] = static_cast<std::uint8_t>(2 * stream_policies + policy + (runtime ? stream_policies : 0));
        for (std::size_t i = 1; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(rng());
        CAPTURE(int{bytes[0]});
        CAPTURE(seed);
        const stream_outcome out = run_cache_operation_stream(bytes.data(), bytes.size());
        CHECK_MESSAGE(out.failure.empty(), out.failure);
        evictions += out.metrics.snapshot_evictions_capacity;
        hits += out.metrics.snapshot_hits;
      }
    }
  }
  MESSAGE("cost-aware streams: snapshot evictions ", evictions, ", snapshot hits ", hits);
  CHECK(evictions > 100); // the budget is full often enough for the rule to choose
  CHECK(hits > 100);
}
