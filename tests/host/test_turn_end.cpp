// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Turn-end snapshots at any position: the partial last block is kept with the snapshot (a tail), and the next
// turn restores there, copies the partial block (copy-on-write) and prefills only what is new.
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

constexpr std::size_t snap = small_hybrid::bytes_per_snapshot;

using chat = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::end_of_turn>, policy::accept_any>;
using strict = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::end_of_turn>,
                                        policy::accept_prefill_exact>;

template <class Policy>
prefix_cache<small_hybrid, Policy> make(std::uint32_t kv_blocks = 128, std::size_t slots = 16) {
  auto c = prefix_cache<small_hybrid, Policy>::create(
      {.kv_blocks = kv_blocks, .snapshot_budget_bytes = slots * snap, .hasher_seed = 2});
  REQUIRE(c.has_value());
  return std::move(*c);
}

/// One turn as an engine runs it: admit, commit the prefill, complete its step, feed `reply.size() - 1` decoded
/// tokens (the last sampled one is never fed), finish. Returns the finish plan; `tokens` becomes prompt + reply.
template <class Cache>
finish_plan run_turn(Cache& c, seq_id s, std::vector<token_id>& tokens, const std::vector<token_id>& reply,
                     const extra_keys& keys = {}, std::span<const std::uint32_t> capture_offsets = {}) {
  auto plan = c.admit(s, tokens, keys, capture_offsets);
  REQUIRE(plan.has_value());
  std::vector<std::uint32_t> written;
  for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  auto n = static_cast<std::uint32_t>(tokens.size());
  REQUIRE(c.commit(s, n, written).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value()); // the prefill's step; decode steps follow
  for (std::size_t k = 0; k + 1 < reply.size(); ++k) {
    REQUIRE(c.extend(s, std::vector<token_id>{reply[k]}).has_value());
    REQUIRE(c.commit(s, ++n).has_value());
  }
  auto f = c.finish(s);
  REQUIRE(f.has_value());
  tokens.insert(tokens.end(), reply.begin(), reply.end());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  return *f;
}

} // namespace

TEST_CASE("turn 2 restores turn 1's end off a block boundary and prefills only the new tokens") {
  auto c = make<chat>();
  std::vector<token_id> tokens = iota_tokens(200);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(37, 70000)); // state at 200 + 36 = 236
  REQUIRE(f1.capture.slot != no_slot);
  CHECK(f1.capture.position == 236);
  CHECK(c.metrics().tail_blocks == 1);
  CHECK(c.check_invariants().has_value());

  const std::vector<token_id> turn2 = concat(tokens, iota_tokens(20, 90000)); // L = 257
  auto p2 = c.admit(2, turn2);
  REQUIRE(p2.has_value());
  CHECK(p2->shared_blocks == 14);          // [0, 224): prompt and decode-filled blocks
  CHECK(p2->kv_matched_tokens == 236);     // plus the kept partial block [224, 236)
  CHECK(p2->usable_tokens == 236);         // prefill computes the last sampled token and the 20 new ones
  CHECK(p2->tokens_lost_to_missing_snapshot == 0);
  CHECK(p2->restore_slot == f1.capture.slot);
  CHECK(p2->restore_exactness == exactness::decode_continuation);
  REQUIRE(p2->copy_src != no_block);
  CHECK(p2->copy_dst == p2->block_table[14]);
  CHECK(p2->copy_src != p2->copy_dst);
  const block_id kept = p2->copy_src;
  // The kept block is held until the copy has run: not evictable, and the engine's table does not name it.
  CHECK(c.check_invariants().has_value());
  REQUIRE(c.commit(2, 257).has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(c.check_invariants().has_value());

  // An edited turn 2 (another message after the same reply) restores the same kept block again: it stays
  // cached after the copy.
  auto p3 = c.admit(3, concat(tokens, iota_tokens(20, 95000)));
  REQUIRE(p3.has_value());
  CHECK(p3->copy_src == kept);
  CHECK(p3->usable_tokens == 236);
  REQUIRE(c.release(3).has_value());
}

TEST_CASE("a prefill-exact policy never restores a turn end or copies a decode-filled partial block") {
  auto c = make<strict>();
  std::vector<token_id> tokens = iota_tokens(200);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(37, 70000));
  CHECK(f1.capture.slot != no_slot); // captured (the placement asks for it) but never restorable here
  auto p2 = c.admit(2, concat(tokens, iota_tokens(20, 90000)));
  REQUIRE(p2.has_value());
  CHECK(p2->copy_src == no_block);
  CHECK(p2->kv_matched_tokens == 192); // blocks from 192 on hold decoded tokens
  CHECK(p2->usable_tokens == 192);
  CHECK(p2->restore_exactness == exactness::prefill_exact);
}

TEST_CASE("short prompts (under one block) restore at their turn end too") {
  auto c = make<chat>();
  std::vector<token_id> tokens = iota_tokens(5, 100);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(3, 70000)); // state at 5 + 2 = 7
  REQUIRE(f1.capture.slot != no_slot);
  CHECK(f1.capture.position == 7);
  auto p2 = c.admit(2, concat(tokens, iota_tokens(4, 90000))); // L = 12
  REQUIRE(p2.has_value());
  CHECK(p2->shared_blocks == 0);
  CHECK(p2->usable_tokens == 7);
  CHECK(p2->copy_dst == p2->block_table[0]);
  REQUIRE(c.release(2).has_value());

  SUBCASE("another tenant's identical prompt never sees it") {
    auto p3 = c.admit(3, concat(tokens, iota_tokens(4, 90000)), {.tenant_salt = 9});
    REQUIRE(p3.has_value());
    CHECK(p3->usable_tokens == 0);
    CHECK(p3->copy_src == no_block);
  }
  SUBCASE("a prompt that diverges inside the kept block does not use it") {
    std::vector<token_id> other = tokens;
    other[6] = 12345;
    auto p3 = c.admit(3, concat(other, iota_tokens(4, 90000)));
    REQUIRE(p3.has_value());
    CHECK(p3->usable_tokens == 0);
  }
  SUBCASE("a prompt that ends at the kept position keeps one token to compute") {
    auto p3 = c.admit(3, std::vector<token_id>(tokens.begin(), tokens.begin() + 7));
    REQUIRE(p3.has_value());
    CHECK(p3->usable_tokens == 0);
    CHECK(p3->copy_src == no_block);
  }
}

TEST_CASE("every turn of a chat with random lengths computes only its new tokens") {
  auto c = make<chat>(512, 8);
  std::vector<token_id> tokens = iota_tokens(93, 1);
  std::uint32_t fed = 0;
  const std::uint32_t replies[] = {1, 16, 17, 31, 2, 64, 9};
  for (std::uint32_t turn = 0; turn < std::size(replies); ++turn) {
    CAPTURE(turn);
    const std::uint32_t before = static_cast<std::uint32_t>(tokens.size());
    if (turn > 0) {
      auto plan = c.admit(100 + turn, tokens);
      REQUIRE(plan.has_value());
      CHECK(plan->usable_tokens == fed); // everything the previous turn folded into its state
      REQUIRE(c.release(100 + turn).has_value());
    }
    run_turn(c, turn + 1, tokens, iota_tokens(replies[turn], 1000 * (turn + 2)));
    fed = static_cast<std::uint32_t>(tokens.size()) - 1;
    tokens.insert(tokens.end(), {static_cast<token_id>(7 + turn), static_cast<token_id>(8 + turn)});
    CHECK(before <= fed);
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("evicting a kept partial block drops its snapshot: never a restore without its KV") {
  auto c = make<chat>(16, 4); // 16 blocks: the next prompts evict everything idle
  std::vector<token_id> tokens = iota_tokens(40, 1);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(5, 70000)); // tail [32, 44)
  REQUIRE(f1.capture.slot != no_slot);
  CHECK(c.metrics().tail_blocks == 1);
  for (seq_id s = 2; s < 6; ++s) {
    auto p = c.admit(s, iota_tokens(200, static_cast<token_id>(10000 * s)));
    REQUIRE(p.has_value());
    REQUIRE(c.commit(s, 200).has_value()); // published: later admits evict them and the kept block
    REQUIRE(c.release(s).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
  }
  CHECK(c.metrics().tail_blocks == 0);
  CHECK(c.metrics().snapshot_evictions_invalidated >= 1);
  auto again = c.admit(9, concat(tokens, iota_tokens(3, 5)));
  REQUIRE(again.has_value());
  CHECK(again->usable_tokens == 0);
  CHECK(again->copy_src == no_block);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("an equal turn end is kept once") {
  auto c = make<chat>();
  std::vector<token_id> a = iota_tokens(50, 1), b = a;
  const std::vector<token_id> reply = iota_tokens(4, 70000);
  const finish_plan fa = run_turn(c, 1, a, reply);
  const finish_plan fb = run_turn(c, 2, b, reply);
  CHECK(fa.capture.slot != no_slot);
  CHECK(fb.capture.slot == no_slot); // the same tokens are already kept with a snapshot
  CHECK(c.metrics().tail_blocks == 1);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a turn end superseded by the next turn's is evicted before other conversations' turn ends") {
  auto c = make<chat>(256, 3); // three snapshot slots
  std::vector<token_id> a = iota_tokens(40, 1), b = iota_tokens(40, 5000), d = iota_tokens(40, 9000);
  const finish_plan a1 = run_turn(c, 1, a, iota_tokens(5, 70000));
  const finish_plan b1 = run_turn(c, 2, b, iota_tokens(5, 71000));
  REQUIRE(a1.capture.slot != no_slot);
  REQUIRE(b1.capture.slot != no_slot);
  a.insert(a.end(), {11, 12, 13});
  const finish_plan a2 = run_turn(c, 3, a, iota_tokens(6, 72000)); // restores a1, then supersedes it
  REQUIRE(a2.capture.slot != no_slot);
  CHECK(c.metrics().snapshots_held == 3);
  // A third conversation's turn end needs a slot: a1 goes, b1 stays.
  const finish_plan d1 = run_turn(c, 4, d, iota_tokens(5, 73000));
  CHECK(d1.capture.slot == a1.capture.slot);
  b.insert(b.end(), {21, 22});
  auto b2 = c.admit(5, b);
  REQUIRE(b2.has_value());
  CHECK(b2->restore_slot == b1.capture.slot);
  CHECK(b2->usable_tokens == 44);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("with the pool full, a turn end reuses the slot of the turn end it supersedes") {
  auto c = make<chat>(256, 2); // two slots: one per conversation
  std::vector<token_id> a = iota_tokens(40, 1), b = iota_tokens(40, 5000);
  const finish_plan a1 = run_turn(c, 1, a, iota_tokens(5, 70000));
  const finish_plan b1 = run_turn(c, 2, b, iota_tokens(5, 71000));
  REQUIRE(a1.capture.slot != no_slot);
  REQUIRE(b1.capture.slot != no_slot);
  // Turn 2 of a restores a1 (which moves a1 behind b1 in the LRU queue), then captures its own end: the
  // superseded a1 must give its slot, not b1, the other conversation's only turn end.
  a.insert(a.end(), {11, 12, 13});
  const finish_plan a2 = run_turn(c, 3, a, iota_tokens(6, 72000));
  CHECK(a2.capture.slot == a1.capture.slot);
  b.insert(b.end(), {21, 22});
  auto b2 = c.admit(4, b);
  REQUIRE(b2.has_value());
  CHECK(b2->restore_slot == b1.capture.slot);
  CHECK(b2->usable_tokens == 44);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a turn end restored a second time is a branch point: no later turn end supersedes it") {
  auto c = make<chat>(256, 3); // three snapshot slots
  std::vector<token_id> a = iota_tokens(40, 1), b = iota_tokens(40, 5000);
  const finish_plan a1 = run_turn(c, 1, a, iota_tokens(5, 70000)); // a's turn end at 44
  const finish_plan b1 = run_turn(c, 2, b, iota_tokens(5, 71000));
  REQUIRE(a1.capture.slot != no_slot);
  REQUIRE(b1.capture.slot != no_slot);
  const std::vector<token_id> turn1 = a;
  // Turn 2 restores a1 and supersedes it with its own end (a linear conversation so far).
  a.insert(a.end(), {11, 12, 13});
  const finish_plan a2 = run_turn(c, 3, a, iota_tokens(6, 72000));
  REQUIRE(a2.capture.slot != no_slot);
  REQUIRE(a2.capture.slot != a1.capture.slot);
  // An admission released before it commits (an engine's matched-token query, a request not scheduled)
  // restores nothing, so it does not count.
  std::vector<token_id> sibling = concat(turn1, std::vector<token_id>{31, 32});
  auto ps = c.admit(4, sibling);
  REQUIRE(ps.has_value());
  CHECK(ps->restore_slot == a1.capture.slot);
  c.release(4).value();
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  // A sibling of turn 2 (a fanned-out step, a regeneration) restores a1 again: a1 is now a branch point, so
  // the sibling's own end takes another slot (the least recently used: b1) and a1 stays.
  std::vector<token_id> sibling2 = concat(turn1, std::vector<token_id>{41, 42});
  const finish_plan s2 = run_turn(c, 5, sibling2, iota_tokens(3, 73000));
  REQUIRE(s2.capture.slot != no_slot);
  CHECK(s2.capture.slot != a1.capture.slot);
  CHECK(s2.capture.slot == b1.capture.slot);
  // A third sibling still finds a1.
  auto p3 = c.admit(6, concat(turn1, std::vector<token_id>{51}));
  REQUIRE(p3.has_value());
  CHECK(p3->restore_slot == a1.capture.slot);
  CHECK(p3->usable_tokens == 44);
  CHECK(c.check_invariants().has_value());
}

// ----- policy::chat: the branch block of a shared system prompt -----

TEST_CASE("chat: a second conversation captures at the last block it shares with the first, off the grid") {
  auto c = make<policy::chat>(256, 8);
  const std::vector<token_id> system = iota_tokens(90, 1); // 5 full blocks + 10 tokens; alignment 64
  std::vector<token_id> a = concat(system, iota_tokens(30, 5000));
  const finish_plan a1 = run_turn(c, 1, a, iota_tokens(4, 70000));
  REQUIRE(a1.capture.slot != no_slot);

  // b shares [0, 90) with a: blocks [0, 80) match, the block holding 80..95 differs. There is no snapshot
  // below 80 (chat takes none on the grid), so b computes everything, and captures at 80 for later prompts.
  std::vector<token_id> b = concat(system, iota_tokens(25, 6000));
  auto pb = c.admit(2, b);
  REQUIRE(pb.has_value());
  CHECK(pb->kv_matched_tokens == 80);
  CHECK(pb->usable_tokens == 0);
  REQUIRE(pb->captures.size() == 1);
  CHECK(pb->captures[0].position == 80); // 80 % 64 != 0: a split of b's prefill, not a chunk boundary
  // b's prefill is split at 80, so its outputs continue a session that prefilled [0, 80) first.
  CHECK(pb->restore_exactness == exactness::decode_continuation);
  const slot_id branch = pb->captures[0].slot;
  REQUIRE(c.commit(2, static_cast<std::uint32_t>(b.size()), std::vector<std::uint32_t>{80}).has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());

  // A third conversation restores there: it recomputes only [80, L).
  const std::vector<token_id> d = concat(system, iota_tokens(12, 7000));
  auto pd = c.admit(3, d);
  REQUIRE(pd.has_value());
  CHECK(pd->usable_tokens == 80);
  CHECK(pd->restore_slot == branch);
  CHECK(pd->restore_exactness == exactness::decode_continuation);
  CHECK(pd->tokens_lost_to_missing_snapshot == 0);
  CHECK(pd->captures.empty()); // the branch block already holds its snapshot
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("chat: no branch capture where the cached path simply ends, or on a turn-end restore") {
  auto c = make<policy::chat>(256, 8);
  std::vector<token_id> a = iota_tokens(90, 1);
  auto pa = c.admit(1, a);
  REQUIRE(pa.has_value());
  REQUIRE(c.commit(1, 90).has_value());
  REQUIRE(c.release(1).has_value()); // no turn end: the cached path [0, 80) ends in a leaf
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto pb = c.admit(2, concat(a, iota_tokens(40, 5000)));
  REQUIRE(pb.has_value());
  CHECK(pb->kv_matched_tokens == 80);
  CHECK(pb->captures.empty()); // extending a leaf is no branch: a later turn end supersedes such a capture
  CHECK(pb->restore_exactness == exactness::prefill_exact);
  REQUIRE(c.release(2).has_value());

  // A turn restored from its predecessor's end plans nothing either.
  std::vector<token_id> t = iota_tokens(50, 9000);
  REQUIRE(run_turn(c, 3, t, iota_tokens(7, 71000)).capture.slot != no_slot);
  t.insert(t.end(), {5, 6, 7});
  auto p2 = c.admit(4, t);
  REQUIRE(p2.has_value());
  CHECK(p2->usable_tokens == 56);
  CHECK(p2->captures.empty());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("chat: a shared prefix's branch snapshot is never demoted as a superseded turn end") {
  auto c = make<policy::chat>(256, 2); // two slots
  const std::vector<token_id> system = iota_tokens(90, 1);
  std::vector<token_id> a = concat(system, iota_tokens(30, 5000));
  run_turn(c, 1, a, iota_tokens(4, 70000)); // slot 1: a's turn end
  std::vector<token_id> b = concat(system, iota_tokens(25, 6000));
  auto pb = c.admit(2, b);
  REQUIRE(pb.has_value());
  REQUIRE(pb->captures.size() == 1);
  const slot_id branch = pb->captures[0].slot; // slot 2: the branch block at 80
  REQUIRE(c.commit(2, static_cast<std::uint32_t>(b.size()), std::vector<std::uint32_t>{80}).has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());

  // d restores the branch snapshot (a decode_continuation one) and captures its own turn end: that must
  // not treat the branch snapshot as the turn end it continues (every later conversation needs it).
  std::vector<token_id> d = concat(system, iota_tokens(12, 7000));
  const finish_plan d1 = run_turn(c, 3, d, iota_tokens(3, 72000));
  REQUIRE(d1.capture.slot != no_slot);
  CHECK(d1.capture.slot != branch);
  auto pe = c.admit(4, concat(system, iota_tokens(20, 8000)));
  REQUIRE(pe.has_value());
  CHECK(pe->restore_slot == branch);
  CHECK(pe->usable_tokens == 80);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("chat: a capture offset at a system prompt's end serves the second conversation over it at once") {
  constexpr std::uint32_t B = small_hybrid::block_size;
  const std::vector<token_id> system = iota_tokens(90, 1); // its end rounded down to the block grid: 80
  const std::uint32_t system_end = 90 / B * B;
  REQUIRE(system_end % small_hybrid::alignment != 0); // off the alignment grid: a decode_continuation capture
  const std::vector<std::uint32_t> offsets{system_end};
  // Conversation a, then b over the same system prompt (different first messages); returns b's plan.
  const auto second_meeting = [&](auto& c, std::span<const std::uint32_t> a_offsets) {
    std::vector<token_id> a = concat(system, iota_tokens(30, 5000));
    run_turn(c, 1, a, iota_tokens(4, 70000), {}, a_offsets);
    auto pb = c.admit(2, concat(system, iota_tokens(25, 6000)));
    REQUIRE(pb.has_value());
    CHECK(c.check_invariants().has_value());
    return *pb;
  };

  SUBCASE("without the offset the second conversation recomputes the system prompt (branch_block captures it then)") {
    auto c = make<policy::chat>(256, 4);
    const admit_plan pb = second_meeting(c, {});
    CHECK(pb.kv_matched_tokens == system_end);
    CHECK(pb.usable_tokens == 0);
    REQUIRE(pb.captures.size() == 1);
    CHECK(pb.captures[0].position == system_end);
  }
  SUBCASE("with it the first conversation's prefill is split and captured there") {
    auto c = make<policy::chat>(256, 4);
    auto pa = c.admit(1, concat(system, iota_tokens(30, 5000)), {}, offsets);
    REQUIRE(pa.has_value());
    REQUIRE(pa->captures.size() == 1);
    CHECK(pa->captures[0].position == system_end);
    CHECK(pa->restore_exactness == exactness::decode_continuation); // the same session, split at 80
  }
  SUBCASE("and the second conversation restores there at its first meeting") {
    auto c = make<policy::chat>(256, 4);
    const admit_plan pb = second_meeting(c, offsets);
    CHECK(pb.kv_matched_tokens == system_end);
    CHECK(pb.usable_tokens == system_end);
    CHECK(pb.restore_slot != no_slot);
    CHECK(pb.restore_exactness == exactness::decode_continuation);
    CHECK(pb.captures.empty()); // the block ending at 80 holds a snapshot already
  }
  SUBCASE("an offset off the block grid, outside the prompt, or given to a policy that reads none is refused, "
          "and the cache is unchanged") {
    auto c = make<policy::chat>(256, 4);
    std::vector<token_id> a = concat(system, iota_tokens(30, 5000));
    run_turn(c, 1, a, iota_tokens(4, 70000));
    const observable<decltype(c)> before(c, {});
    const std::vector<token_id> b = concat(system, iota_tokens(25, 6000));
    CHECK(c.admit(2, b, {}, std::vector<std::uint32_t>{90}).error() == errc::misaligned);
    CHECK(c.admit(2, b, {}, std::vector<std::uint32_t>{0}).error() == errc::out_of_range);
    CHECK(c.admit(2, b, {}, std::vector<std::uint32_t>{static_cast<std::uint32_t>(b.size()) / B * B + B}).error() ==
          errc::out_of_range);
    CHECK(observable<decltype(c)>(c, {}) == before);
    CHECK(c.check_invariants().has_value());

    auto s = make<policy::strict>(256, 4);
    const observable<decltype(s)> strict_before(s, {});
    CHECK(s.admit(2, b, {}, std::vector<std::uint32_t>{64}).error() == errc::invalid_argument);
    CHECK(observable<decltype(s)>(s, {}) == strict_before);
  }
}

// ----- policy::decode_checkpoints -----

namespace {
template <class Policy = policy::chat>
prefix_cache<small_hybrid, Policy> make_checkpointing(std::uint32_t per_sequence, std::size_t slots = 8) {
  auto c = prefix_cache<small_hybrid, Policy>::create({.kv_blocks = 128,
                                                       .snapshot_budget_bytes = slots * snap,
                                                       .hasher_seed = 2,
                                                       .decode_checkpoint_interval = 64,
                                                       .decode_checkpoints_per_sequence = per_sequence});
  REQUIRE(c.has_value());
  return std::move(*c);
}

/// Decodes `reply` one token per step as an engine does, writing every planned checkpoint; returns the
/// checkpoint positions in order.
template <class Cache>
std::vector<std::int64_t> decode_with_checkpoints(Cache& c, seq_id s, std::vector<token_id>& tokens,
                                                  const std::vector<token_id>& reply) {
  std::vector<std::int64_t> at;
  auto n = static_cast<std::uint32_t>(tokens.size());
  for (const token_id t : reply) {
    auto e = c.extend(s, std::vector<token_id>{t});
    REQUIRE(e.has_value());
    ++n;
    std::vector<std::uint32_t> written;
    for (const capture_point& p : e->captures) {
      CHECK(p.position == n); // the state after this step's decode
      at.push_back(p.position);
      written.push_back(static_cast<std::uint32_t>(p.position));
    }
    REQUIRE(c.commit(s, n, written).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    tokens.push_back(t);
  }
  return at;
}
} // namespace

TEST_CASE("decode checkpoints: a prompt that departs from the reply restores at the last one before it") {
  auto c = make_checkpointing(2);
  std::vector<token_id> tokens = iota_tokens(40, 1);
  REQUIRE(c.admit(1, tokens).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(decode_with_checkpoints(c, 1, tokens, iota_tokens(100, 5000)) == std::vector<std::int64_t>{64, 128});
  REQUIRE(c.finish(1).has_value()); // turn end at 140
  REQUIRE(c.step_complete(c.current_epoch()).has_value());

  // The next prompt keeps the reply only up to 100 (a template that drops the end of a reasoning section,
  // an edited reply): the turn end at 140 does not apply, the checkpoint at 64 does.
  const std::vector<token_id> edited = concat(std::vector<token_id>(tokens.begin(), tokens.begin() + 100), iota_tokens(30, 9000));
  auto p = c.admit(2, edited);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 64);
  CHECK(p->restore_exactness == exactness::decode_continuation);
  // [64, 96) is cached, but as decode steps wrote it: the prompt recomputes it by prefill from the
  // checkpoint, so it shares nothing past 64 (reusing that KV would match no session).
  CHECK(p->kv_matched_tokens == 64);
  CHECK(c.check_invariants().has_value());

  // Without decode checkpoints (interval 0) the same prompt restores nothing.
  auto off = prefix_cache<small_hybrid, policy::chat>::create({.kv_blocks = 128, .snapshot_budget_bytes = 8 * snap, .hasher_seed = 2});
  REQUIRE(off.has_value());
  std::vector<token_id> t2 = iota_tokens(40, 1);
  REQUIRE(off->admit(1, t2).has_value());
  REQUIRE(off->commit(1, 40).has_value());
  REQUIRE(off->step_complete(off->current_epoch()).has_value());
  CHECK(decode_with_checkpoints(*off, 1, t2, iota_tokens(100, 5000)).empty());
  REQUIRE(off->finish(1).has_value());
  REQUIRE(off->step_complete(off->current_epoch()).has_value());
  auto q = off->admit(2, edited);
  REQUIRE(q.has_value());
  CHECK(q->usable_tokens == 0);
}

TEST_CASE("decode checkpoints are bounded per sequence: the newest are kept") {
  auto c = make_checkpointing(1);
  std::vector<token_id> tokens = iota_tokens(40, 1);
  REQUIRE(c.admit(1, tokens).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  CHECK(decode_with_checkpoints(c, 1, tokens, iota_tokens(100, 5000)) == std::vector<std::int64_t>{64, 128});
  CHECK(c.metrics().snapshots_held == 1); // 64 dropped when 128 was published
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto at_100 = c.admit(2, concat(std::vector<token_id>(tokens.begin(), tokens.begin() + 100), iota_tokens(9, 9000)));
  REQUIRE(at_100.has_value());
  CHECK(at_100->usable_tokens == 0);
  auto at_135 = c.admit(3, concat(std::vector<token_id>(tokens.begin(), tokens.begin() + 135), iota_tokens(9, 9000)));
  REQUIRE(at_135.has_value());
  CHECK(at_135->usable_tokens == 128);
  CHECK(c.check_invariants().has_value());
}

// An empty extend used to plan the checkpoint at the sequence's length again, once per call: each took a
// snapshot slot (evicting other conversations' snapshots) and the commit listing them failed.
TEST_CASE("decode checkpoints: an empty extend plans nothing, and each position is planned once") {
  auto c = make_checkpointing(2, 4);
  std::vector<token_id> tokens = iota_tokens(60, 1);
  REQUIRE(c.admit(1, tokens).has_value());
  REQUIRE(c.commit(1, 60).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  std::vector<std::uint32_t> planned;
  for (token_id t = 0; t < 4; ++t) { // one token per call, no commit between: the checkpoint at 64 is planned
    auto e = c.extend(1, std::vector<token_id>{t});
    REQUIRE(e.has_value());
    for (const capture_point& p : e->captures) planned.push_back(static_cast<std::uint32_t>(p.position));
  }
  CHECK(planned == std::vector<std::uint32_t>{64});
  for (int k = 0; k < 3; ++k) {
    auto e = c.extend(1, std::span<const token_id>{});
    REQUIRE(e.has_value());
    CHECK(e->captures.empty());
    CHECK(e->new_blocks.empty());
  }
  CHECK(c.metrics().captures_planned == 1);
  CHECK(c.commit(1, 64, planned).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(c.metrics().snapshots_held == 1);
  auto e = c.extend(1, std::span<const token_id>{}); // after the commit too
  REQUIRE(e.has_value());
  CHECK(e->captures.empty());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("decode checkpoints: bad input is an error and changes nothing") {
  SUBCASE("configuration") {
    auto off_grid = prefix_cache<small_hybrid, policy::chat>::create(
        {.kv_blocks = 16, .snapshot_budget_bytes = 4 * snap, .decode_checkpoint_interval = 96});
    REQUIRE_FALSE(off_grid.has_value());
    CHECK(off_grid.error() == errc::misaligned);
    auto none_kept = prefix_cache<small_hybrid, policy::chat>::create(
        {.kv_blocks = 16, .snapshot_budget_bytes = 4 * snap, .decode_checkpoint_interval = 64,
         .decode_checkpoints_per_sequence = 0});
    REQUIRE_FALSE(none_kept.has_value());
    CHECK(none_kept.error() == errc::invalid_argument);
  }
  SUBCASE("a checkpoint written past the committed length, or one never planned") {
    auto c = make_checkpointing(2);
    std::vector<token_id> tokens = iota_tokens(60, 1);
    REQUIRE(c.admit(1, tokens).has_value());
    REQUIRE(c.commit(1, 60).has_value());
    auto e = c.extend(1, iota_tokens(4, 5000)); // 64: a checkpoint at the end of this step
    REQUIRE(e.has_value());
    REQUIRE(e->captures.size() == 1);
    CHECK(e->captures[0].position == 64);
    const seq_id live[] = {1};
    const observable before(c, live);
    CHECK(c.commit(1, 63, std::vector<std::uint32_t>{64}).error() == errc::invalid_argument); // past n
    CHECK(c.commit(1, 64, std::vector<std::uint32_t>{62}).error() == errc::invalid_argument); // not planned
    CHECK(c.commit(1, 64, std::vector<std::uint32_t>{64, 64}).error() == errc::invalid_argument); // twice
    CHECK(observable(c, live) == before);
    REQUIRE(c.commit(1, 64, std::vector<std::uint32_t>{64}).has_value());
    CHECK(c.metrics().captures_written == 1);
    CHECK(c.check_invariants().has_value());
  }
}

// ----- bad input around turn ends -----

TEST_CASE("finish refuses a turn end whose live state is not at the committed position, and changes nothing") {
  auto c = make<chat>();
  std::vector<token_id> tokens = iota_tokens(200);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(37, 70000)); // turn end at 236, partial block kept
  REQUIRE(f1.capture.slot != no_slot);
  const std::vector<token_id> turn2 = concat(tokens, iota_tokens(20, 90000));

  SUBCASE("the prompt was never committed (the restore, the partial block's copy and the prefill may not have run)") {
    auto p = c.admit(2, turn2);
    REQUIRE(p.has_value());
    REQUIRE(p->copy_src != no_block);
    const seq_id live[] = {2};
    const observable before(c, live);
    CHECK(c.finish(2).error() == errc::invalid_argument);
    CHECK(observable(c, live) == before);
    CHECK(c.check_invariants().has_value());
    REQUIRE(c.release(2).has_value()); // what the engine does instead
  }
  SUBCASE("decoded tokens were extended but not committed") {
    REQUIRE(c.admit(2, turn2).has_value());
    REQUIRE(c.commit(2, static_cast<std::uint32_t>(turn2.size())).has_value());
    REQUIRE(c.extend(2, iota_tokens(3, 95000)).has_value());
    REQUIRE(c.commit(2, static_cast<std::uint32_t>(turn2.size()) + 1).has_value()); // 2 of 3 unfed
    const seq_id live[] = {2};
    const observable before(c, live);
    CHECK(c.finish(2).error() == errc::invalid_argument);
    CHECK(observable(c, live) == before);
    REQUIRE(c.commit(2, static_cast<std::uint32_t>(turn2.size()) + 2).has_value()); // only the last sampled unfed
    auto f2 = c.finish(2);
    REQUIRE(f2.has_value());
    CHECK(f2->capture.position == static_cast<std::int64_t>(turn2.size()) + 2);
  }
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a planned partial-block copy keeps its source until the copy has run, whatever the pressure") {
  auto c = make<chat>(32, 4); // 32 blocks: tight
  std::vector<token_id> tokens = iota_tokens(100, 1);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(9, 70000)); // turn end at 108 = 6 blocks + 12
  REQUIRE(f1.capture.slot != no_slot);
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto p = c.admit(2, concat(tokens, iota_tokens(4, 90000)));
  REQUIRE(p.has_value());
  REQUIRE(p->copy_src != no_block);
  const block_id src = p->copy_src;
  // Other prompts take every block they can; none may be the copy's source (or one of the shared blocks).
  std::vector<block_id> taken;
  for (seq_id s = 10; s < 40; ++s) {
    auto q = c.admit(s, iota_tokens(40, static_cast<token_id>(100000 + 1000 * s)));
    if (!q.has_value()) {
      CHECK(q.error() == errc::pool_exhausted);
      break;
    }
    taken.insert(taken.end(), q->block_table.begin(), q->block_table.end());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
  }
  CHECK(std::find(taken.begin(), taken.end(), src) == taken.end());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("finish with last_turn captures nothing and lets the conversation's snapshots go first") {
  auto c = make<chat>(256, 2); // two slots
  std::vector<token_id> a = iota_tokens(40, 1), b = iota_tokens(40, 5000), d = iota_tokens(40, 9000);
  const finish_plan a1 = run_turn(c, 1, a, iota_tokens(5, 70000));
  const finish_plan b1 = run_turn(c, 2, b, iota_tokens(5, 71000));
  REQUIRE(a1.capture.slot != no_slot);
  REQUIRE(b1.capture.slot != no_slot);
  // a's second turn is its last: it restores a1, captures nothing, and a1 goes first.
  a.insert(a.end(), {11, 12, 13});
  auto p = c.admit(3, a);
  REQUIRE(p.has_value());
  CHECK(p->restore_slot == a1.capture.slot);
  REQUIRE(c.commit(3, static_cast<std::uint32_t>(a.size())).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto last = c.finish(3, {.last_turn = true});
  REQUIRE(last.has_value());
  CHECK(last->capture.slot == no_slot);
  CHECK(c.metrics().snapshots_held == 2);
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  // A new conversation's turn end takes a1's slot, not b1's (b1 is older in the LRU queue).
  const finish_plan d1 = run_turn(c, 4, d, iota_tokens(5, 73000));
  CHECK(d1.capture.slot == a1.capture.slot);
  b.insert(b.end(), {21, 22});
  auto b2 = c.admit(5, b);
  REQUIRE(b2.has_value());
  CHECK(b2->restore_slot == b1.capture.slot);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a sequence that recomputes another session's decode-filled tokens publishes its own chain") {
  // Sequence 1 decodes [40, 100): blocks [48, 96) hold decode-step KV; a checkpoint sits at 64. Sequence 2
  // continues the same tokens: it restores the checkpoint and recomputes [64, 120) by prefill (other bits
  // than sequence 1's decode steps). Its blocks [64, 96) are blocks of their own beside sequence 1's, not
  // merged with them, so its turn end is published on its own KV and a restore of it shares only that.
  auto c = make_checkpointing(2);
  std::vector<token_id> tokens = iota_tokens(40, 1);
  REQUIRE(c.admit(1, tokens).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(decode_with_checkpoints(c, 1, tokens, iota_tokens(60, 5000)) == std::vector<std::int64_t>{64});
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());

  const std::vector<token_id> next = concat(tokens, iota_tokens(20, 9000));
  auto p = c.admit(2, next);
  REQUIRE(p.has_value());
  REQUIRE(p->usable_tokens == 64);
  REQUIRE(p->restore_exactness == exactness::decode_continuation);
  const std::vector<block_id> own(p->block_table.begin(), p->block_table.end());
  REQUIRE(c.commit(2, 120).has_value());
  CHECK(c.metrics().duplicate_blocks == 0);
  auto f = c.finish(2);
  REQUIRE(f.has_value());
  CHECK(f->capture.slot != no_slot);
  CHECK(f->capture.position == 120);
  REQUIRE(c.step_complete(c.current_epoch()).has_value());

  auto q = c.admit(3, concat(next, iota_tokens(5, 9500)));
  REQUIRE(q.has_value());
  CHECK(q->usable_tokens == 120);
  CHECK(q->restore_slot == f->capture.slot);
  REQUIRE(q->shared_blocks == 7);
  for (std::size_t i = 0; i < 7; ++i) CHECK(q->block_table[i] == own[i]); // sequence 2's KV, never sequence 1's
  CHECK(q->copy_src == own[7]);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("chat: another conversation that decodes the same opening never costs a conversation its turn ends") {
  // A: prompt P (54 tokens: 3 blocks + 6), a 10-token reply R: turn end at 63, a partial block [48, 63) kept
  // under block 2. B: the same P (it captures the branch block at 48) and a reply beginning with R, so B's
  // decode-filled block [48, 64) holds exactly A's next prompt's block 3. A's next turns must restore at its
  // own turn ends (63, then each later one) and capture new ones, as they do without B.
  for (const bool with_b : {false, true}) {
    CAPTURE(with_b);
    auto c = make<policy::chat>(256, 16);
    std::vector<token_id> a = iota_tokens(54, 1);
    const std::vector<token_id> reply = iota_tokens(10, 70000);
    std::uint32_t end = run_turn(c, 1, a, reply).capture.position;
    REQUIRE(end == 63);
    if (with_b) {
      std::vector<token_id> b = iota_tokens(54, 1);
      const finish_plan b1 = run_turn(c, 2, b, concat(reply, iota_tokens(30, 71000)));
      CHECK(b1.capture.position == 93);
    }
    const std::uint32_t messages[] = {20, 10, 8, 5}, replies[] = {26, 15, 7, 15};
    for (std::size_t t = 0; t < 4; ++t) {
      CAPTURE(t);
      a = concat(a, iota_tokens(messages[t], static_cast<token_id>(80000 + 1000 * t)));
      auto p = c.admit(static_cast<seq_id>(10 + t), a);
      REQUIRE(p.has_value());
      CHECK(p->usable_tokens == end);
      REQUIRE(c.release(static_cast<seq_id>(10 + t)).has_value());
      const finish_plan f = run_turn(c, static_cast<seq_id>(20 + t), a, iota_tokens(replies[t], static_cast<token_id>(90000 + 1000 * t)));
      CHECK(f.capture.slot != no_slot);
      CHECK(f.capture.position == a.size() - 1);
      end = f.capture.position;
    }
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE_TEMPLATE("media items: a turn end and its partial block are reused only under the same items before it", H,
                   xxh3_hasher, constant_hasher) {
  // With constant_hasher every block, tail and snapshot candidate shares one key: only verification (tokens,
  // media digests, parents) tells twins apart.
  auto made = prefix_cache<small_hybrid, chat, H>::create(
      {.kv_blocks = 128, .snapshot_budget_bytes = 16 * snap, .hasher_seed = 2});
  REQUIRE(made.has_value());
  auto& c = *made;
  const std::array<std::byte, 3> cat{std::byte{1}, std::byte{2}, std::byte{3}};
  const std::array<std::byte, 3> dog{std::byte{1}, std::byte{2}, std::byte{4}};
  const media_item cat_at_226[] = {{.position = 226, .digest = cat}}; // inside block 14, [224, 240)
  const media_item cat_at_227[] = {{.position = 227, .digest = cat}};
  const media_item dog_at_226[] = {{.position = 226, .digest = dog}};
  // Turn 1: 230 prompt tokens with an image at 226, 7 decoded: its turn end at 236 keeps the partial block
  // [224, 236), which holds the image; its last aligned snapshot at 192 lies before it.
  std::vector<token_id> tokens = iota_tokens(230);
  const finish_plan f1 = run_turn(c, 1, tokens, iota_tokens(7, 70000), {.media = cat_at_226});
  REQUIRE(f1.capture.slot != no_slot);
  REQUIRE(f1.capture.position == 236);
  REQUIRE(c.metrics().tail_blocks == 1);
  const std::vector<token_id> turn2 = concat(tokens, iota_tokens(20, 90000));
  auto next = [&](seq_id s, const extra_keys& keys) {
    auto p = c.admit(s, turn2, keys);
    REQUIRE(p.has_value());
    const admit_plan plan = *p;
    REQUIRE(c.release(s).has_value());
    REQUIRE(c.check_invariants().has_value());
    return plan;
  };
  SUBCASE("the same image at the same position restores the turn end, copying its partial block") {
    const admit_plan p = next(2, {.media = cat_at_226});
    CHECK(p.usable_tokens == 236);
    CHECK(p.restore_slot == f1.capture.slot);
    CHECK(p.copy_src != no_block);
  }
  for (const std::span<const media_item> other :
       {std::span<const media_item>(cat_at_227), std::span<const media_item>(dog_at_226), std::span<const media_item>{}}) {
    // Another image, the same one a token later, or none: the blocks and the snapshot before the image's
    // block are shared; the partial block and the turn end are not.
    const admit_plan p = next(3, {.media = other});
    CHECK(p.kv_matched_tokens == 224);
    CHECK(p.usable_tokens == 192);
    CHECK(p.restore_slot != f1.capture.slot);
    CHECK(p.copy_src == no_block);
  }
}

TEST_CASE("media items: a snapshot past an image serves only the same image at the same position") {
  auto c = make<strict>();
  const std::array<std::byte, 3> cat{std::byte{1}, std::byte{2}, std::byte{3}};
  const media_item cat_at_100[] = {{.position = 100, .digest = cat}}; // block 6, after the snapshot at 64
  const media_item cat_at_140[] = {{.position = 140, .digest = cat}}; // block 8, after the snapshot at 128
  const auto prompt = iota_tokens(200);
  auto serve = [&](seq_id s, const extra_keys& keys) {
    auto p = c.admit(s, prompt, keys, std::vector<std::uint32_t>{});
    REQUIRE(p.has_value());
    std::vector<std::uint32_t> written;
    for (const capture_point& q : p->captures) written.push_back(static_cast<std::uint32_t>(q.position));
    REQUIRE(c.commit(s, 200, written).has_value());
    REQUIRE(c.release(s).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    REQUIRE(c.check_invariants().has_value());
    return p->usable_tokens;
  };
  CHECK(serve(1, {.media = cat_at_100}) == 0); // captures its last aligned position, 192
  CHECK(serve(2, {.media = cat_at_100}) == 192);
  CHECK(serve(3, {}) == 0);                    // 192 lies past the image; the text prompt captures its own
  CHECK(serve(4, {}) == 192);
  CHECK(serve(5, {.media = cat_at_140}) == 0); // neither chain's 192 is keyed by an image at 140
}
