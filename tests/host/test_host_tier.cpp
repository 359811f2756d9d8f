// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The host tier (policy::host_tier): what the GPU pools evict is offloaded into host units, found again by a
// verified lookup (key, parent serial, tokens, class, extra keys) and onboarded; the cache plans every move
// in `take_transfers` and the engine runs them before the step's other work.
#include "support/cache_testing.hpp"
#include "support/chat_turns.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

using host_tiers = policy::tiers<policy::host_tier>;
constexpr std::uint32_t B = 16;
constexpr std::size_t kv_bytes = attn_model::bytes_per_kv_block;
constexpr std::size_t hybrid_kv_bytes = small_hybrid::bytes_per_kv_block;
constexpr std::size_t snap = small_hybrid::bytes_per_snapshot;

template <class Hasher = xxh3_hasher>
auto make_attention(std::uint32_t kv_blocks, std::uint32_t host_blocks) {
  auto c = prefix_cache<attn_model, policy::block_sharing, Hasher, host_tiers>::create(
      {.kv_blocks = kv_blocks, .hasher_seed = 5, .host_kv_budget_bytes = host_blocks * kv_bytes});
  REQUIRE(c.has_value());
  return std::move(*c);
}

/// Admits, commits the whole prompt, releases and completes the step.
template <class Cache>
admit_plan serve(Cache& c, seq_id s, const std::vector<token_id>& prompt) {
  auto plan = c.admit(s, prompt);
  REQUIRE(plan.has_value());
  const admit_plan p = *plan;
  REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size())).has_value());
  REQUIRE(c.release(s).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  return p;
}

bool contains(std::span<const unit_move> moves, unit_move m) {
  return std::find(moves.begin(), moves.end(), m) != moves.end();
}

} // namespace

TEST_CASE("evicted blocks go to the host tier and come back on the next hit, verified") {
  auto c = make_attention(8, 32);
  CHECK(c.host_kv_units() == 32);
  const std::vector<token_id> first = iota_tokens(4 * B + 1);
  const admit_plan p1 = serve(c, 1, first);
  CHECK(c.take_transfers().empty());
  const std::vector<block_id> first_blocks(p1.block_table.begin(), p1.block_table.begin() + 4);

  // Eight new blocks: the four cached ones are evicted, and offloaded.
  serve(c, 2, iota_tokens(8 * B, 5000));
  const transfer_plan taken2 = c.take_transfers();
  const std::vector<unit_move> offloaded2(taken2.kv_offload.begin(), taken2.kv_offload.end());
  struct { std::span<const unit_move> kv_offload, kv_onboard; } t2{offloaded2, taken2.kv_onboard};
  REQUIRE(t2.kv_offload.size() == 4);
  for (const unit_move& m : t2.kv_offload)
    CHECK(std::find(first_blocks.begin(), first_blocks.end(), static_cast<block_id>(m.src)) != first_blocks.end());
  CHECK(t2.kv_onboard.empty());
  CHECK(c.metrics().host_blocks_offloaded == 4);
  CHECK(c.metrics().host_blocks_held == 4);
  CHECK(c.metrics().host_bytes_offloaded == 4 * kv_bytes);
  CHECK(c.take_transfers().empty()); // taken once

  // The first prompt again: the GPU has none of it; the host tier has all four blocks.
  auto p3 = c.admit(3, first);
  REQUIRE(p3.has_value());
  CHECK(p3->shared_blocks == 4);
  CHECK(p3->kv_matched_tokens == 4 * B);
  CHECK(p3->usable_tokens == 4 * B);
  const transfer_plan t3 = c.take_transfers();
  REQUIRE(t3.kv_onboard.size() == 4);
  for (std::uint32_t i = 0; i < 4; ++i) {
    CHECK(t3.kv_onboard[i].dst == static_cast<std::uint32_t>(p3->block_table[i]));
    // Each comes from the host unit its block was offloaded into.
    const unit_move offloaded{static_cast<std::uint32_t>(first_blocks[i]), t3.kv_onboard[i].src};
    CHECK(contains(t2.kv_offload, offloaded));
  }
  CHECK(t3.kv_offload.size() == 5); // the blocks taken for it evict the second prompt's, leaf first
  CHECK(c.metrics().host_blocks_onboarded == 4);
  CHECK(c.metrics().blocks_shared == 0); // none of it was in GPU memory
  CHECK(c.check_invariants().has_value());

  // Admitted in the same step, an equal prompt shares the onboarded blocks in GPU memory.
  auto p4 = c.admit(4, first);
  REQUIRE(p4.has_value());
  CHECK(p4->shared_blocks == 4);
  CHECK(std::equal(p4->block_table.begin(), p4->block_table.begin() + 4, p3->block_table.begin()));
  CHECK(c.take_transfers().kv_onboard.empty());
  CHECK(c.metrics().blocks_shared == 4);
  CHECK(c.check_invariants().has_value());

  // Evicted again, an onboarded block moves no bytes: its host copy is still there.
  REQUIRE(c.commit(3, 4 * B + 1).has_value());
  REQUIRE(c.release(3).has_value());
  REQUIRE(c.release(4).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  const std::uint64_t offloaded_before = c.metrics().host_blocks_offloaded;
  serve(c, 5, iota_tokens(8 * B, 9000));
  const transfer_plan t5 = c.take_transfers();
  for (const unit_move& m : t5.kv_offload)
    CHECK(std::find(p3->block_table.begin(), p3->block_table.begin() + 4, static_cast<block_id>(m.src)) ==
          p3->block_table.begin() + 4);
  CHECK(c.metrics().host_blocks_offloaded == offloaded_before + t5.kv_offload.size());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a host block is verified by its parent's serial: equal tokens under another parent never match") {
  // Every key collides: only verification tells blocks apart.
  auto c = make_attention<constant_hasher>(6, 32);
  const std::vector<token_id> x = iota_tokens(4 * B + 1);
  std::vector<token_id> y = x; // another first block, then x's blocks 1 .. 3
  for (std::uint32_t k = 0; k < B; ++k) y[k] = 40000 + static_cast<token_id>(k);
  serve(c, 1, std::vector<token_id>(y.begin(), y.begin() + B + 1)); // y's first block only
  serve(c, 2, x);
  serve(c, 3, iota_tokens(6 * B, 7000)); // evicts both to the host
  (void)c.take_transfers();
  CHECK(c.metrics().host_blocks_held == 5);
  // y's first block is found; x's second block holds y's next tokens and has the same key, but its parent
  // is x's first block: no match.
  auto p = c.admit(4, y);
  REQUIRE(p.has_value());
  CHECK(p->shared_blocks == 1);
  CHECK(c.take_transfers().kv_onboard.size() == 1);
  REQUIRE(c.release(4).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  // x itself comes back whole; another tenant matches nothing.
  auto q = c.admit(5, x);
  REQUIRE(q.has_value());
  CHECK(q->shared_blocks == 4);
  REQUIRE(c.release(5).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  auto t = c.admit(6, x, {.tenant_salt = 9});
  REQUIRE(t.has_value());
  CHECK(t->shared_blocks == 0);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE_TEMPLATE("host blocks keep their media digests: twins of equal tokens and other media never match", H,
                   xxh3_hasher, constant_hasher) {
  auto c = make_attention<H>(6, 32);
  const std::array<std::byte, 2> cat{std::byte{1}, std::byte{2}}, dog{std::byte{1}, std::byte{3}};
  const media_item cat_at_20[] = {{.position = 20, .digest = cat}}; // block 1
  const media_item dog_at_20[] = {{.position = 20, .digest = dog}};
  const media_item cat_at_21[] = {{.position = 21, .digest = cat}};
  const std::vector<token_id> x = iota_tokens(4 * B + 1);
  auto admit = [&](seq_id s, const extra_keys& keys) {
    auto plan = c.admit(s, x, keys);
    REQUIRE(plan.has_value());
    return *plan;
  };
  const admit_plan first = admit(1, {.media = cat_at_20});
  REQUIRE(c.commit(1, 4 * B + 1).has_value());
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(first.shared_blocks == 0);
  serve(c, 2, iota_tokens(6 * B, 7000)); // evicts the image prompt's blocks to the host
  (void)c.take_transfers();
  CHECK(c.metrics().host_blocks_held == 4);
  for (const std::span<const media_item> other :
       {std::span<const media_item>(dog_at_20), std::span<const media_item>(cat_at_21), std::span<const media_item>{}}) {
    // Block 0 holds no media: it is onboarded for any of them; block 1 and later only for the same image.
    const admit_plan p = admit(3, {.media = other});
    CHECK(p.shared_blocks == 1);
    CHECK(p.kv_matched_tokens == B);
    CHECK(c.take_transfers().kv_onboard.size() <= 1); // block 0 stays on the GPU after the first
    REQUIRE(c.release(3).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    REQUIRE(c.check_invariants().has_value());
  }
  const admit_plan same = admit(4, {.media = cat_at_20});
  CHECK(same.shared_blocks == 4);
  CHECK(same.kv_matched_tokens == 4 * B);
  CHECK(c.take_transfers().kv_onboard.size() >= 3); // blocks 1 .. 3 come from the host tier
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a turn end, partial block and snapshot, is offloaded and restored from the host tier") {
  auto made = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, host_tiers>::create(
      {.kv_blocks = 24,
       .snapshot_budget_bytes = 2 * snap,
       .hasher_seed = 2,
       .host_kv_budget_bytes = 64 * hybrid_kv_bytes,
       .host_snapshot_budget_bytes = 8 * snap});
  REQUIRE(made.has_value());
  auto& c = *made;
  CHECK(c.host_snapshot_units() == 8);

  // Turn 1: 200 prompt tokens and a 37-token reply; the turn end sits at 236 (a tail of 12 tokens).
  std::vector<token_id> tokens = iota_tokens(200);
  REQUIRE(chat_turn(c, 1, tokens, iota_tokens(37, 70000)).finished.capture.position == 236);

  // Another conversation fills GPU memory: the turn end's blocks, its partial block and its snapshot leave.
  auto b = c.admit(2, iota_tokens(23 * B, 100000));
  REQUIRE(b.has_value());
  const transfer_plan evicted = c.take_transfers();
  CHECK(evicted.kv_offload.size() == 14); // the partial block and full blocks 13 .. 1, leaf first
  CHECK(evicted.snapshot_offload.size() >= 1);
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(c.metrics().snapshots_held == 0);
  CHECK(c.check_invariants().has_value());

  // Turn 2 restores the turn end from the host: the state, blocks 1 .. 13 and the partial block come back
  // (block 0 stayed in GPU memory).
  const std::vector<token_id> turn2 = concat(tokens, iota_tokens(20, 90000));
  auto p = c.admit(3, turn2);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 236);
  CHECK(p->kv_matched_tokens == 236);
  CHECK(p->shared_blocks == 14);
  CHECK(p->restore_from_host);
  CHECK(p->copy_src == no_block); // the partial block comes with the transfers
  CHECK(p->restore_exactness == exactness::decode_continuation);
  const transfer_plan back = c.take_transfers();
  REQUIRE(back.kv_onboard.size() == 14);
  CHECK(back.kv_onboard.back().dst == static_cast<std::uint32_t>(p->block_table[14]));
  CHECK(c.metrics().host_snapshot_hits == 1);
  CHECK(c.metrics().host_tails_onboarded == 1);
  CHECK(c.metrics().host_blocks_onboarded == 13);
  CHECK(c.metrics().blocks_shared == 1);
  CHECK(c.check_invariants().has_value()); // the snapshot and partial block are held until the first commit
  REQUIRE(c.commit(3, static_cast<std::uint32_t>(turn2.size())).has_value());
  CHECK(c.check_invariants().has_value());
  REQUIRE(c.release(3).has_value());
}

TEST_CASE("host tier options: every misuse is a clear error") {
  using plain = prefix_cache<attn_model, policy::block_sharing>;
  CHECK(plain::create({.kv_blocks = 8, .host_kv_budget_bytes = 8 * kv_bytes}).error() == errc::unsupported_config);
  CHECK(plain::create({.kv_blocks = 8, .host_snapshot_budget_bytes = 1}).error() == errc::unsupported_config);
  using tiered = prefix_cache<attn_model, policy::block_sharing, xxh3_hasher, host_tiers>;
  CHECK(tiered::create({.kv_blocks = 8}).error() == errc::budget_too_small);
  CHECK(tiered::create({.kv_blocks = 8, .host_kv_budget_bytes = kv_bytes - 1}).error() == errc::budget_too_small);
  CHECK(tiered::create({.kv_blocks = 8, .host_kv_budget_bytes = kv_bytes}).has_value());
  // Snapshots on the host need a policy that restores them.
  CHECK(tiered::create({.kv_blocks = 8, .host_kv_budget_bytes = kv_bytes, .host_snapshot_budget_bytes = 64}).error() ==
        errc::unsupported_config);
  CHECK(tiered::create({.kv_blocks = 8, .share_in_step = true, .host_kv_budget_bytes = kv_bytes}).error() ==
        errc::unsupported_config);
  using hybrid = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, host_tiers>;
  const cache_options ok{.kv_blocks = 8, .snapshot_budget_bytes = snap, .host_kv_budget_bytes = hybrid_kv_bytes};
  CHECK(hybrid::create(ok).has_value());
  cache_options small_snapshots = ok;
  small_snapshots.host_snapshot_budget_bytes = snap - 1;
  CHECK(hybrid::create(small_snapshots).error() == errc::budget_too_small);
  // Runtime-configured: the same checks.
  using runtime = runtime_prefix_cache<policy::chat, xxh3_hasher, host_tiers>;
  CHECK(runtime::create(model_config::of<small_hybrid>(), small_snapshots).error() == errc::budget_too_small);
  CHECK(runtime::create(model_config::of<small_hybrid>(), ok).has_value());
}

namespace {

using chat_cache = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, host_tiers>;

chat_cache make_chat(std::uint32_t gpu_slots, std::uint32_t host_snapshots) {
  auto c = chat_cache::create({.kv_blocks = 48,
                               .snapshot_budget_bytes = gpu_slots * snap,
                               .hasher_seed = 2,
                               .host_kv_budget_bytes = 96 * hybrid_kv_bytes,
                               .host_snapshot_budget_bytes = host_snapshots * snap});
  REQUIRE(c.has_value());
  return std::move(*c);
}


} // namespace

TEST_CASE("a superseded turn end is not offloaded: only the conversation's newest goes to the host") {
  auto c = make_chat(/*gpu_slots=*/2, /*host_snapshots=*/4);
  std::vector<token_id> a = iota_tokens(40);
  chat_turn(c, 1, a, iota_tokens(5, 1000));        // turn end at 44
  a = concat(a, iota_tokens(9, 2000));
  const turn_result t2 = chat_turn(c, 2, a, iota_tokens(6, 3000)); // restores 44, its end at 59 supersedes it
  REQUIRE(t2.admitted.usable_tokens == 44);
  CHECK(c.metrics().snapshots_held == 2);
  // Another prompt takes every GPU block: both turn ends' partial blocks are evicted.
  auto big = c.admit(3, iota_tokens(47 * B, 50000));
  REQUIRE(big.has_value());
  (void)c.take_transfers();
  CHECK(c.metrics().host_snapshots_offloaded == 1); // the turn end at 59, not the superseded one at 44
  CHECK(c.metrics().host_snapshots_held == 1);
  REQUIRE(c.release(3).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  // The next turn still restores where the conversation stopped, from the host.
  a = concat(a, iota_tokens(7, 4000));
  auto p = c.admit(4, a);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 59);
  CHECK(p->restore_from_host);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a turn end restored from the host is the first to go there once its conversation moved on") {
  auto c = make_chat(/*gpu_slots=*/1, /*host_snapshots=*/2);
  std::vector<token_id> a = iota_tokens(40), b = iota_tokens(40, 10000), x = iota_tokens(40, 20000);
  chat_turn(c, 1, b, iota_tokens(5, 1000));                        // B's turn end on the GPU
  const turn_result ta = chat_turn(c, 2, a, iota_tokens(5, 2000)); // A's takes the slot: B's goes to the host
  REQUIRE(ta.finish_snapshot_offload.size() == 1);
  const turn_result tx = chat_turn(c, 3, x, iota_tokens(5, 3000)); // X's: A's goes to the host
  REQUIRE(tx.finish_snapshot_offload.size() == 1);
  const std::uint32_t a_unit = tx.finish_snapshot_offload[0].dst;
  // A's second turn restores its turn end from the host; its own end supersedes it there, so X's turn end,
  // evicted from the GPU by it, takes A's old unit rather than B's.
  a = concat(a, iota_tokens(9, 4000));
  const turn_result ta2 = chat_turn(c, 4, a, iota_tokens(6, 5000));
  REQUIRE(ta2.admitted.restore_from_host);
  REQUIRE(ta2.finish_snapshot_offload.size() == 1);
  CHECK(ta2.finish_snapshot_offload[0].dst == a_unit);
  // B's turn end is still there.
  b = concat(b, iota_tokens(3, 6000));
  auto p = c.admit(5, b);
  REQUIRE(p.has_value());
  CHECK(p->restore_from_host);
  CHECK(p->usable_tokens == 44);
  CHECK(c.check_invariants().has_value());
}
