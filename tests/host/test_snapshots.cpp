// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Hybrid prefix caching: snapshot_restore (hit rule, capture planning, budget, LRU, TTL, invalidation) and
// memory_only, on a small hybrid model (B = 16, Q = 64: alignment 64) and Nemotron-H-8B.
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <set>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {
constexpr std::size_t snap = small_hybrid::bytes_per_snapshot;

template <class Capture, class Accept = policy::accept_any>
using hybrid_cache = prefix_cache<small_hybrid, policy::snapshot_restore<Capture, Accept>>;
using offsets_cache = hybrid_cache<policy::capture<policy::caller_offsets>>;

template <class Cache>
Cache make(cache_options o) {
  if (o.kv_blocks == 0) o.kv_blocks = 128;
  if (o.snapshot_budget_bytes == 0) o.snapshot_budget_bytes = 16 * snap;
  o.hasher_seed = 2;
  auto c = Cache::create(o);
  REQUIRE(c.has_value());
  return std::move(*c);
}

std::vector<std::uint32_t> positions(std::span<const capture_point> cs) {
  std::vector<std::uint32_t> v;
  for (const capture_point& c : cs) v.push_back(c.position);
  return v;
}

/// Admits `prompt` as `s` with captures at `at`, computes it all, reports the captures in `written`.
template <class Cache>
admit_plan run_prompt(Cache& c, seq_id s, const std::vector<token_id>& prompt, std::vector<std::uint32_t> at,
                      std::vector<std::uint32_t> written) {
  auto plan = c.admit(s, prompt, {}, at);
  REQUIRE(plan.has_value());
  const admit_plan copy = *plan;
  REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size()), written).has_value());
  REQUIRE(c.release(s).has_value());
  REQUIRE(c.check_invariants().has_value());
  return copy;
}
} // namespace

TEST_CASE("hit rule: usable = deepest snapshot at or below the KV match, never past L - 1") {
  auto c = make<offsets_cache>({});
  const auto prompt = iota_tokens(200); // KV match of a repeat: (199 / 16) * 16 = 192

  SUBCASE("KV hit without a snapshot skips nothing and counts the lost tokens") {
    run_prompt(c, 1, prompt, {}, {});
    auto p = c.admit(2, prompt);
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 192);
    CHECK(p->usable_tokens == 0);
    CHECK(p->tokens_lost_to_missing_snapshot == 192);
    CHECK(p->restore_slot == no_slot);
    CHECK(c.metrics().snapshot_misses == 1);
    CHECK(c.metrics().tokens_lost_to_missing_snapshot == 192);
  }
  SUBCASE("several snapshots on the path: the deepest usable one") {
    const auto first = run_prompt(c, 1, prompt, {64, 128, 192}, {64, 128, 192});
    CHECK(positions(first.captures) == std::vector<std::uint32_t>{64, 128, 192});
    CHECK(c.metrics().captures_written == 3);
    CHECK(c.metrics().snapshots_held == 3);
    CHECK(c.metrics().snapshot_bytes_held == 3 * snap);
    auto p = c.admit(2, prompt);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens == 192);
    CHECK(p->tokens_lost_to_missing_snapshot == 0);
    CHECK(p->restore_slot == first.captures[2].slot);
    CHECK(p->restore_exactness == exactness::prefill_exact);
    CHECK(c.metrics().snapshot_hits == 1);
  }
  SUBCASE("only captures the engine reports written are published") {
    const auto first = run_prompt(c, 1, prompt, {64, 128, 192}, {64, 128});
    CHECK(c.metrics().captures_written == 2);
    CHECK(c.metrics().captures_refused == 1);
    auto p = c.admit(2, prompt);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens == 128);
    CHECK(p->restore_slot == first.captures[1].slot);
    CHECK(p->tokens_lost_to_missing_snapshot == 64);
  }
  SUBCASE("a snapshot beyond the KV match is not used") {
    run_prompt(c, 1, prompt, {64, 128}, {64, 128});
    auto other = prompt;
    other[100] = -1; // KV match 96
    auto p = c.admit(2, other);
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 96);
    CHECK(p->usable_tokens == 64);
    CHECK(p->tokens_lost_to_missing_snapshot == 32);
  }
  SUBCASE("a prompt ending exactly on a snapshot position cannot use it (L - 1 rule)") {
    run_prompt(c, 1, prompt, {128, 192}, {128, 192});
    auto p = c.admit(2, iota_tokens(192));
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 176);
    CHECK(p->usable_tokens == 128);
    auto q = c.admit(3, iota_tokens(193));
    REQUIRE(q.has_value());
    CHECK(q->usable_tokens == 192);
  }
  SUBCASE("a restore skips as the plan says and captures start after it") {
    run_prompt(c, 1, prompt, {64}, {64});
    auto p = c.admit(2, concat(prompt, iota_tokens(100, 5000)), {}, std::vector<std::uint32_t>{64, 128, 256});
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens == 64);
    CHECK(positions(p->captures) == std::vector<std::uint32_t>{128, 256}); // 64 is restored, not recaptured
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("capture placement policies") {
  const auto prompt = iota_tokens(300);
  SUBCASE("every<I> at absolute multiples of I") {
    auto c = make<hybrid_cache<policy::capture<policy::every<128>>>>({});
    auto p = c.admit(1, prompt);
    REQUIRE(p.has_value());
    CHECK(positions(p->captures) == std::vector<std::uint32_t>{128, 256});
    std::set<slot_id> slots;
    for (const capture_point& cp : p->captures) slots.insert(cp.slot);
    CHECK(slots.size() == 2);
    CHECK(c.metrics().captures_planned == 2);
  }
  SUBCASE("every_interval reads the interval from the options, checked at construction") {
    using cache = hybrid_cache<policy::capture<policy::every_interval>>;
    CHECK(cache::create({.kv_blocks = 64, .snapshot_budget_bytes = 4 * snap, .capture_interval = 96}).error() ==
          errc::misaligned);
    CHECK(cache::create({.kv_blocks = 64, .snapshot_budget_bytes = 4 * snap}).error() == errc::misaligned);
    auto c = make<cache>({.capture_interval = 192});
    auto p = c.admit(1, prompt);
    REQUIRE(p.has_value());
    CHECK(positions(p->captures) == std::vector<std::uint32_t>{192});
  }
  SUBCASE("last_aligned: the deepest position a repeat of the prompt can use") {
    auto c = make<hybrid_cache<policy::capture<policy::last_aligned>>>({});
    auto p = c.admit(1, prompt);
    REQUIRE(p.has_value());
    CHECK(positions(p->captures) == std::vector<std::uint32_t>{256});
    auto q = c.admit(2, iota_tokens(257, 1000));
    REQUIRE(q.has_value());
    CHECK(positions(q->captures) == std::vector<std::uint32_t>{256});
  }
  SUBCASE("a cap on snapshots per path keeps the deepest captures") {
    auto c = make<hybrid_cache<policy::capture<policy::every<64>>>>({.max_snapshots_per_path = 2});
    auto p = c.admit(1, prompt);
    REQUIRE(p.has_value());
    CHECK(positions(p->captures) == std::vector<std::uint32_t>{192, 256});
    CHECK(c.metrics().captures_refused == 2);
    std::vector<std::uint32_t> written{192, 256};
    REQUIRE(c.commit(1, 300, written).has_value());
    REQUIRE(c.release(1).has_value());
    // The path already holds 2: a longer prompt on it gets no more.
    auto q = c.admit(2, concat(prompt, iota_tokens(100, 9000)));
    REQUIRE(q.has_value());
    CHECK(q->usable_tokens == 256);
    CHECK(q->captures.empty());
  }
  SUBCASE("caller offsets must sit on the alignment grid inside the prompt") {
    auto c = offsets_cache::create({.kv_blocks = 64, .snapshot_budget_bytes = 4 * snap});
    REQUIRE(c.has_value());
    const observable<offsets_cache> before(*c, {});
    CHECK(c->admit(1, prompt, {}, std::vector<std::uint32_t>{100}).error() == errc::misaligned);
    // On the KV block grid but off the alignment grid: only a policy that also captures off the alignment
    // grid (chat) takes it.
    CHECK(c->admit(1, prompt, {}, std::vector<std::uint32_t>{small_hybrid::block_size * 5}).error() == errc::misaligned);
    CHECK(c->admit(1, prompt, {}, std::vector<std::uint32_t>{320}).error() == errc::out_of_range);
    CHECK(c->admit(1, prompt, {}, std::vector<std::uint32_t>{0}).error() == errc::out_of_range);
    CHECK(observable<offsets_cache>(*c, {}) == before);
    CHECK(c->check_invariants().has_value());
  }
}

TEST_CASE("branch point: conversations sharing a system prompt hit where they diverge") {
  auto c = make<hybrid_cache<policy::capture<policy::branch_point>>>({});
  const auto system = iota_tokens(300);
  const auto a = concat(system, iota_tokens(200, 10000));
  const auto b = concat(system, iota_tokens(150, 20000));
  const auto d = concat(system, iota_tokens(180, 30000));

  auto pa = c.admit(1, a);
  REQUIRE(pa.has_value());
  CHECK(pa->captures.empty()); // nothing cached yet: no branch
  REQUIRE(c.commit(1, static_cast<std::uint32_t>(a.size())).has_value());

  auto pb = c.admit(2, b);
  REQUIRE(pb.has_value());
  CHECK(pb->kv_matched_tokens == 288);
  CHECK(pb->usable_tokens == 0);
  REQUIRE(positions(pb->captures) == std::vector<std::uint32_t>{256}); // 288 aligned down to 64
  std::vector<std::uint32_t> written{256};
  REQUIRE(c.commit(2, static_cast<std::uint32_t>(b.size()), written).has_value());

  auto pd = c.admit(3, d);
  REQUIRE(pd.has_value());
  CHECK(pd->kv_matched_tokens == 288);
  CHECK(pd->usable_tokens == 256);
  CHECK(pd->restore_slot == pb->captures[0].slot);
  CHECK(pd->tokens_lost_to_missing_snapshot == 32);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE_TEMPLATE("multi-turn: turn 2 restores the end of turn 1 only if decode_continuation is accepted", Accept,
                   policy::accept_any, policy::accept_prefill_exact) {
  using cache = hybrid_cache<policy::capture<policy::last_aligned, policy::end_of_turn>, Accept>;
  auto c = make<cache>({});
  const auto turn1 = iota_tokens(200);
  auto p1 = c.admit(1, turn1);
  REQUIRE(p1.has_value());
  REQUIRE(positions(p1->captures) == std::vector<std::uint32_t>{192});
  std::vector<std::uint32_t> written{192};
  REQUIRE(c.commit(1, 200, written).has_value());
  // Decode 40 tokens one at a time; the last sampled token is not yet folded into the state.
  std::vector<token_id> reply;
  for (std::uint32_t k = 0; k < 40; ++k) {
    const token_id t = static_cast<token_id>(70000 + k);
    reply.push_back(t);
    REQUIRE(c.extend(1, std::vector<token_id>{t}).has_value());
    if (k < 39) REQUIRE(c.commit(1, 201 + k).has_value());
  }
  auto f = c.finish(1); // committed position 239: off a block boundary, the partial block is kept with it
  REQUIRE(f.has_value());
  CHECK(f->capture.slot != no_slot);
  CHECK(f->capture.position == 239);
  CHECK(c.metrics().tail_blocks == 1);

  // Another reply to the same prompt (sampled differently), committing the last token too: position 240 is a
  // block boundary. (The same reply again would find its decode-filled blocks already published by
  // sequence 1, and no turn end is published over another session's decode_continuation blocks.)
  std::vector<token_id> reply2 = reply;
  for (token_id& t : reply2) t += 5000;
  auto p2 = c.admit(2, turn1);
  REQUIRE(p2.has_value());
  REQUIRE(c.commit(2, 200).has_value());
  REQUIRE(c.extend(2, reply2).has_value());
  REQUIRE(c.commit(2, 240).has_value());
  const epoch_t turn_epoch = c.current_epoch();
  auto f2 = c.finish(2);
  REQUIRE(f2.has_value());
  REQUIRE(f2->capture.slot != no_slot);
  CHECK(f2->capture.position == 240);
  CHECK(c.check_invariants().has_value());

  const auto turn2 = concat(concat(turn1, reply2), iota_tokens(30, 80000));
  // Before the step that copies the end-of-turn state completes, the snapshot is not restorable.
  auto early = c.admit(3, turn2);
  REQUIRE(early.has_value());
  // Blocks holding decoded tokens ([192, 240): the prompt ended at 200) are decode_continuation-exact: a
  // prefill-exact policy does not reuse them. Neither does a prompt restoring the prefill-exact snapshot at
  // 192: it recomputes [192, L) by prefill, and decode-filled KV there would mix two computations.
  const std::uint32_t matched = Accept::accepts_decode_continuation ? 240 : 192;
  CHECK(early->kv_matched_tokens == 192);
  CHECK(early->usable_tokens == 192);
  REQUIRE(c.release(3).has_value());

  REQUIRE(c.step_complete(turn_epoch));
  auto later = c.admit(4, turn2);
  REQUIRE(later.has_value());
  CHECK(later->kv_matched_tokens == matched);
  if constexpr (Accept::accepts_decode_continuation) {
    CHECK(later->usable_tokens == 240);
    CHECK(later->restore_slot == f2->capture.slot);
    CHECK(later->restore_exactness == exactness::decode_continuation);
  } else {
    CHECK(later->usable_tokens == 192);
    CHECK(later->restore_exactness == exactness::prefill_exact);
  }
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("snapshot budget, LRU and TTL") {
  using cache = offsets_cache;
  SUBCASE("a budget below one snapshot is a construction error, not a silent 0 % hit rate") {
    CHECK(cache::create({.kv_blocks = 64, .snapshot_budget_bytes = snap - 1}).error() == errc::budget_too_small);
    using nemotron = prefix_cache<presets::nemotron_h_8b, policy::snapshot_restore<>>;
    const std::size_t half_gib = std::size_t{512} << 20;
    CHECK(nemotron::create({.kv_blocks = 64, .snapshot_budget_bytes = 64u << 20}).error() == errc::budget_too_small);
    auto ok = nemotron::create({.kv_blocks = 64, .snapshot_budget_bytes = half_gib});
    REQUIRE(ok.has_value());
    CHECK(ok->snapshot_slots() == half_gib / presets::nemotron_h_8b::bytes_per_snapshot);
  }
  SUBCASE("LRU: with two slots the least recently used snapshot goes first") {
    auto c = make<cache>({.snapshot_budget_bytes = 2 * snap + snap / 2});
    REQUIRE(c.snapshot_slots() == 2);
    const auto p1 = iota_tokens(100, 0), p2 = iota_tokens(100, 1000), p3 = iota_tokens(100, 2000);
    run_prompt(c, 1, p1, {64}, {64});
    run_prompt(c, 2, p2, {64}, {64});
    REQUIRE(c.step_complete(c.current_epoch()));
    // use p1's snapshot: p2's becomes the least recently used
    auto r = c.admit(3, p1);
    REQUIRE(r.has_value());
    CHECK(r->usable_tokens == 64);
    REQUIRE(c.commit(3, 100).has_value());
    REQUIRE(c.release(3).has_value());
    REQUIRE(c.step_complete(c.current_epoch()));
    run_prompt(c, 4, p3, {64}, {64});
    CHECK(c.metrics().snapshot_evictions_capacity == 1);
    CHECK(c.admit(5, p1)->usable_tokens == 64);
    CHECK(c.admit(6, p2)->usable_tokens == 0);
    CHECK(c.admit(7, p3)->usable_tokens == 64);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("a snapshot being restored is never evicted for a capture") {
    auto c = make<cache>({.snapshot_budget_bytes = snap});
    const auto p1 = iota_tokens(100, 0);
    run_prompt(c, 1, p1, {64}, {64});
    REQUIRE(c.step_complete(c.current_epoch()));
    auto r = c.admit(2, p1); // holds the only slot until its first commit
    REQUIRE(r.has_value());
    CHECK(r->usable_tokens == 64);
    auto other = c.admit(3, iota_tokens(100, 500), {}, std::vector<std::uint32_t>{64});
    REQUIRE(other.has_value());
    CHECK(other->captures.empty());
    CHECK(c.metrics().captures_refused == 1);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("TTL: snapshots idle for more than the TTL are evicted at step completion") {
    auto c = make<cache>({.snapshot_ttl_steps = 2});
    run_prompt(c, 1, iota_tokens(100), {64}, {64});
    REQUIRE(c.step_complete(0));
    REQUIRE(c.step_complete(1));
    CHECK(c.metrics().snapshots_held == 1);
    REQUIRE(c.step_complete(2));
    CHECK(c.metrics().snapshots_held == 0);
    CHECK(c.metrics().snapshot_evictions_ttl == 1);
    CHECK(c.admit(2, iota_tokens(100))->usable_tokens == 0);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("evicting a KV block invalidates the snapshot at its end") {
    auto c = make<cache>({.kv_blocks = 8, .snapshot_budget_bytes = snap});
    run_prompt(c, 1, iota_tokens(100), {64}, {64}); // 6 full blocks + 1 partial, snapshot at 64 (block 3)
    REQUIRE(c.step_complete(c.current_epoch()));
    CHECK(c.metrics().snapshots_held == 1);
    // 8 fresh blocks: 2 free + evicts all 6 cached ones, including block 3.
    run_prompt(c, 2, iota_tokens(128, 5000), {}, {});
    CHECK(c.metrics().snapshot_evictions_invalidated == 1);
    CHECK(c.metrics().snapshots_held == 0);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("state-only eviction: a capture takes the LRU snapshot's slot and leaves the KV blocks cached") {
    auto c = make<cache>({.kv_blocks = 64, .snapshot_budget_bytes = snap});
    const auto a = iota_tokens(70, 9000), b = iota_tokens(70, 7000);
    run_prompt(c, 1, a, {64}, {64});
    REQUIRE(c.step_complete(c.current_epoch()));
    const auto cached_before = c.metrics().blocks_cached;
    auto q = c.admit(2, b, {}, std::vector<std::uint32_t>{64});
    REQUIRE(q.has_value());
    CHECK(q->captures.size() == 1);
    CHECK(c.metrics().snapshot_evictions_capacity == 1);
    CHECK(c.metrics().kv_evictions == 0);
    CHECK(c.metrics().blocks_cached == cached_before);
    REQUIRE(c.release(2).has_value());
    auto again = c.admit(3, a);
    REQUIRE(again.has_value());
    CHECK(again->kv_matched_tokens == 64);
    CHECK(again->usable_tokens == 0);
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("commit validates reported captures and changes nothing on error") {
  auto c = make<offsets_cache>({});
  const auto prompt = iota_tokens(200);
  REQUIRE(c.admit(1, prompt, {}, std::vector<std::uint32_t>{64, 128}).has_value());
  const std::vector<seq_id> live{1};
  const observable<offsets_cache> before(c, live);
  const std::uint32_t beyond[] = {128}, unplanned[] = {192}, twice[] = {64, 64};
  CHECK(c.commit(1, 100, beyond).error() == errc::invalid_argument);
  CHECK(c.commit(1, 200, unplanned).error() == errc::invalid_argument);
  CHECK(c.commit(1, 200, twice).error() == errc::invalid_argument);
  CHECK(observable<offsets_cache>(c, live) == before);
  CHECK(c.check_invariants().has_value());
  const std::uint32_t first[] = {64};
  REQUIRE(c.commit(1, 100, first).has_value()); // 128 stays planned
  const std::uint32_t second[] = {128};
  REQUIRE(c.commit(1, 200, second).has_value());
  CHECK(c.metrics().captures_written == 2);
  auto f = c.fork(1, 2);
  REQUIRE(f.has_value());
  CHECK(f->copy_recurrent_state);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("memory_only: the Megatron-LM scenario shares blocks and skips nothing") {
  using cache = prefix_cache<presets::nemotron_h_8b, policy::memory_only>;
  auto made = cache::create({.kv_blocks = 1024});
  REQUIRE(made.has_value());
  cache& c = *made;
  CHECK(c.snapshot_slots() == 0);
  const auto prompt = iota_tokens(644, 3);
  std::set<block_id> held;
  for (seq_id s = 0; s < 10; ++s) {
    auto p = c.admit(s, prompt);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens == 0);
    CHECK(p->restore_slot == no_slot);
    CHECK(p->captures.empty());
    CHECK(p->kv_matched_tokens == (s == 0 ? 0u : 640u));
    CHECK(p->tokens_lost_to_missing_snapshot == 0);
    REQUIRE(c.commit(s, 644).has_value());
    for (block_id b : c.block_table(s)) held.insert(b);
  }
  CHECK(held.size() == 40 + 10);
  CHECK(c.metrics().usable_tokens == 0);
  CHECK(c.metrics().blocks_shared == 9 * 40);
  // 1 - 50 / (10 * 41) fewer blocks than without sharing
  CHECK(static_cast<double>(held.size()) / (10.0 * 41.0) == doctest::Approx(50.0 / 410.0));
  CHECK(c.check_invariants().has_value());
}
