// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// prefix_cache with policy::block_sharing on an attention-only model (issue: attention prefix cache).
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <array>
#include <map>
#include <set>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {
using cache = prefix_cache<attn_model, policy::block_sharing>;

cache make(std::uint32_t blocks, std::uint32_t max_sequences = 64) {
  auto c = cache::create({.kv_blocks = blocks, .max_sequences = max_sequences, .hasher_seed = 1});
  REQUIRE(c.has_value());
  return std::move(*c);
}

std::vector<block_id> table(const cache& c, seq_id s) {
  auto t = c.block_table(s);
  return {t.begin(), t.end()};
}
} // namespace

TEST_CASE("a repeated prompt shares its full blocks and skips their prefill, leaving one token to compute") {
  cache c = make(64);
  const auto prompt = iota_tokens(100); // 6 full blocks + 4 tokens
  auto first = c.admit(1, prompt);
  REQUIRE(first.has_value());
  CHECK(first->block_table.size() == 7);
  CHECK(first->kv_matched_tokens == 0);
  CHECK(first->usable_tokens == 0);
  CHECK(first->shared_blocks == 0);
  CHECK(first->restore_slot == no_slot);
  const auto first_table = table(c, 1);
  REQUIRE(c.commit(1, 100).has_value());
  CHECK(c.metrics().blocks_published == 6);

  auto second = c.admit(2, prompt);
  REQUIRE(second.has_value());
  CHECK(second->kv_matched_tokens == 96);
  CHECK(second->usable_tokens == 96);
  CHECK(second->tokens_lost_to_missing_snapshot == 0);
  CHECK(second->shared_blocks == 6);
  const auto second_table = table(c, 2);
  CHECK(std::equal(first_table.begin(), first_table.begin() + 6, second_table.begin()));
  CHECK(second_table[6] != first_table[6]);
  CHECK(c.metrics().blocks_shared == 6);
  CHECK(c.metrics().bytes_saved == 6 * attn_model::bytes_per_kv_block);
  CHECK(c.metrics().lookups == 2);
  CHECK(c.check_invariants().has_value());

  SUBCASE("a prompt ending on a block boundary recomputes its last block (L - 1 rule)") {
    const auto exact = iota_tokens(96);
    auto p = c.admit(3, exact);
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 80);
    CHECK(p->usable_tokens == 80);
    CHECK(p->block_table.size() == 6);
  }
  SUBCASE("a prompt that diverges inside block 3 shares blocks 0..2") {
    auto other = prompt;
    other[50] = -7;
    auto p = c.admit(3, other);
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 48);
  }
  SUBCASE("a prompt shorter than a block shares nothing") {
    auto p = c.admit(3, iota_tokens(16));
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 0);
    CHECK(p->block_table.size() == 1);
  }
}

TEST_CASE("Megatron-LM scenario: 10 identical 644-token requests hold unique full blocks + one partial each") {
  cache c = make(1024);
  const auto prompt = iota_tokens(644, 1000);
  for (seq_id s = 0; s < 10; ++s) {
    auto p = c.admit(s, prompt);
    REQUIRE(p.has_value());
    REQUIRE(c.commit(s, 644).has_value());
  }
  std::set<block_id> held;
  for (seq_id s = 0; s < 10; ++s)
    for (block_id b : c.block_table(s)) held.insert(b);
  CHECK(held.size() == 644 / 16 + 10); // 40 unique full blocks + 10 partial blocks
  CHECK(c.metrics().blocks_referenced == 50);
  CHECK(c.metrics().blocks_shared == 9 * 40);
  CHECK(c.metrics().usable_tokens == 9 * 640);
  CHECK(c.check_invariants().has_value());
  for (seq_id s = 0; s < 10; ++s) REQUIRE(c.release(s).has_value());
  CHECK(c.metrics().blocks_referenced == 0);
  CHECK(c.metrics().blocks_cached == 40);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a hasher that returns one constant never yields a wrong block") {
  auto made = prefix_cache<attn_model, policy::block_sharing, constant_hasher>::create({.kv_blocks = 256});
  REQUIRE(made.has_value());
  auto& c = *made;
  // Prompts that share prefixes of different lengths; what each committed block holds is recorded.
  std::map<block_id, std::vector<token_id>> content; // block -> the prefix ending at its end
  std::vector<std::vector<token_id>> prompts;
  for (int i = 0; i < 12; ++i) {
    auto p = iota_tokens(40 + 7 * i);
    p[static_cast<std::size_t>(3 * i)] = -i; // diverge at a different place each time
    prompts.push_back(p);
  }
  seq_id next = 0;
  for (int round = 0; round < 3; ++round) {
    for (const auto& prompt : prompts) {
      const seq_id s = next++;
      auto plan = c.admit(s, prompt, {.tenant_salt = static_cast<std::uint64_t>(round % 2)});
      REQUIRE(plan.has_value());
      for (std::uint32_t i = 0; i < plan->shared_blocks; ++i) {
        const std::vector<token_id> want(prompt.begin(), prompt.begin() + (i + 1) * 16);
        REQUIRE(content.count(plan->block_table[i]) == 1);
        CHECK(content[plan->block_table[i]] == want);
      }
      // with tenant salt 1 nothing of tenant 0 may be shared and vice versa: prefixes record the tenant
      for (std::uint32_t i = 0; i < plan->block_table.size(); ++i)
        if (i >= plan->shared_blocks && (i + 1) * 16 <= prompt.size())
          content[plan->block_table[i]] = std::vector<token_id>(prompt.begin(), prompt.begin() + (i + 1) * 16);
      REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size())).has_value());
      REQUIRE(c.release(s).has_value());
      REQUIRE(c.check_invariants().has_value());
    }
    REQUIRE(c.step_complete(c.current_epoch()));
  }
  CHECK(c.metrics().blocks_shared > 0);
}

TEST_CASE("different tenant salts or extra keys never share a block") {
  cache c = make(64);
  const auto prompt = iota_tokens(64);
  const std::array<std::byte, 2> digest{std::byte{7}, std::byte{8}};
  // Media items are positional: one at position 0 keys every block (one later keys only the blocks from its
  // own on, "media items key blocks from their position on").
  const media_item at_start[] = {{.position = 0, .digest = digest}};
  REQUIRE(c.admit(1, prompt, {.tenant_salt = 1}).has_value());
  REQUIRE(c.commit(1, 64).has_value());
  for (const extra_keys& other : {extra_keys{.tenant_salt = 2}, extra_keys{.model_revision = 1, .tenant_salt = 1},
                                  extra_keys{.lora_id = 3, .tenant_salt = 1},
                                  extra_keys{.tenant_salt = 1, .media = at_start}}) {
    auto p = c.admit(2, prompt, other);
    REQUIRE(p.has_value());
    CHECK(p->kv_matched_tokens == 0);
    REQUIRE(c.release(2).has_value());
  }
  auto same = c.admit(2, prompt, {.tenant_salt = 1});
  REQUIRE(same.has_value());
  CHECK(same->kv_matched_tokens == 48);
}

TEST_CASE("media items key blocks from their position on") {
  cache c = make(64);
  // A 64-token system prompt (blocks 0-3), then 40 tokens of a user turn: an image's placeholders at 70
  // (block 4).
  const auto prompt = iota_tokens(104);
  const std::array<std::byte, 4> cat{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  const std::array<std::byte, 4> dog{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{5}};
  const media_item cat_at_70[] = {{.position = 70, .digest = cat}};
  auto serve = [&](seq_id s, const extra_keys& keys) {
    auto plan = c.admit(s, prompt, keys);
    REQUIRE(plan.has_value());
    const std::uint32_t shared = plan->kv_matched_tokens;
    REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size())).has_value());
    REQUIRE(c.release(s).has_value());
    REQUIRE(c.check_invariants().has_value());
    return shared;
  };
  REQUIRE(serve(1, {}) == 0); // the text request
  SUBCASE("an image request shares the text request's blocks before the image, none from its block on") {
    CHECK(serve(2, {.media = cat_at_70}) == 64);
    SUBCASE("the same image at the same position shares past it") { CHECK(serve(3, {.media = cat_at_70}) == 96); }
    SUBCASE("another digest at the same position shares nothing past the block before it") {
      const media_item dog_at_70[] = {{.position = 70, .digest = dog}};
      CHECK(serve(3, {.media = dog_at_70}) == 64);
    }
    SUBCASE("the same digest elsewhere in that block shares nothing past it either") {
      const media_item cat_at_75[] = {{.position = 75, .digest = cat}};
      CHECK(serve(3, {.media = cat_at_75}) == 64);
    }
    SUBCASE("the same digest a block later shares one block more, with the text request") {
      const media_item cat_at_90[] = {{.position = 90, .digest = cat}};
      CHECK(serve(3, {.media = cat_at_90}) == 80);
    }
    SUBCASE("a second item past the first: the first image's blocks are shared, up to the second's block") {
      const media_item two[] = {{.position = 70, .digest = cat}, {.position = 90, .digest = dog}};
      CHECK(serve(3, {.media = two}) == 80);
    }
    SUBCASE("the text request still shares every block after the image request") { CHECK(serve(3, {}) == 96); }
  }
  SUBCASE("an image at the very start shares nothing with text") {
    const media_item cat_at_0[] = {{.position = 0, .digest = cat}};
    CHECK(serve(2, {.media = cat_at_0}) == 0);
    CHECK(serve(3, {.media = cat_at_0}) == 96);
  }
}

TEST_CASE("a constant hasher never confuses blocks that differ only in their media items") {
  auto made = prefix_cache<attn_model, policy::block_sharing, constant_hasher>::create({.kv_blocks = 256});
  REQUIRE(made.has_value());
  auto& c = *made;
  // Hostile twins: equal tokens, media items at different positions or with different digests. What every
  // committed block holds is recorded as (prefix tokens, the items before its end), and every block a later
  // admit shares must hold exactly the prompt's.
  using identity = std::pair<std::uint32_t, std::vector<std::pair<std::uint32_t, int>>>; // end, items before it
  std::map<block_id, identity> content;
  const std::array<std::array<std::byte, 2>, 3> digests{{{std::byte{1}, std::byte{1}},
                                                         {std::byte{1}, std::byte{2}},
                                                         {std::byte{2}, std::byte{1}}}};
  struct variant {
    std::vector<std::pair<std::uint32_t, int>> items; // position, digest index
  };
  const std::vector<variant> variants{{{}},
                                      {{{40, 0}}},
                                      {{{40, 1}}},
                                      {{{41, 0}}},
                                      {{{20, 0}, {40, 0}}},
                                      {{{20, 0}, {40, 2}}},
                                      {{{70, 0}}},
                                      {{{0, 0}}},
                                      {{{0, 1}}}};
  const auto prompt = iota_tokens(90);
  seq_id next = 0;
  std::uint64_t shared_total = 0;
  for (int round = 0; round < 3; ++round) {
    for (const variant& v : variants) {
      std::vector<media_item> items;
      for (const auto& [at, d] : v.items) items.push_back({.position = at, .digest = digests[static_cast<std::size_t>(d)]});
      const seq_id s = next++;
      auto plan = c.admit(s, prompt, {.media = items});
      REQUIRE(plan.has_value());
      auto identity_of = [&](std::uint32_t i) {
        identity id{(i + 1) * 16, {}};
        for (const auto& item : v.items)
          if (item.first < (i + 1) * 16) id.second.push_back(item);
        return id;
      };
      for (std::uint32_t i = 0; i < plan->shared_blocks; ++i) {
        REQUIRE(content.count(plan->block_table[i]) == 1);
        CHECK(content[plan->block_table[i]] == identity_of(i));
      }
      shared_total += plan->shared_blocks;
      for (std::uint32_t i = plan->shared_blocks; (i + 1) * 16 <= prompt.size(); ++i)
        content[plan->block_table[i]] = identity_of(i);
      REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size())).has_value());
      REQUIRE(c.release(s).has_value());
      REQUIRE(c.check_invariants().has_value());
    }
    REQUIRE(c.step_complete(c.current_epoch()));
  }
  CHECK(shared_total > 0); // twins do share the blocks before their first difference
}

TEST_CASE("eviction is least-recently-used among unreferenced blocks, leaf first") {
  cache c = make(5);
  const auto a = iota_tokens(65, 0); // 4 full blocks + 1 token
  REQUIRE(c.admit(1, a).has_value());
  REQUIRE(c.commit(1, 65).has_value());
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.step_complete(0));
  CHECK(c.metrics().blocks_cached == 4);

  // Two fresh blocks: the freed partial block plus one eviction, which must take chain a's deepest block.
  const auto b = iota_tokens(17, 5000);
  REQUIRE(c.admit(2, b).has_value());
  CHECK(c.metrics().kv_evictions == 1);
  CHECK(c.check_invariants().has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(1));

  auto again = c.admit(3, a);
  REQUIRE(again.has_value());
  CHECK(again->kv_matched_tokens == 48); // blocks 0..2 survived, block 3 (the leaf) went first
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("the least recently released chain is evicted before a more recent one") {
  cache c = make(6);
  const auto older = iota_tokens(33, 0), newer = iota_tokens(33, 100); // 2 full + partial each
  REQUIRE(c.admit(1, older).has_value());
  REQUIRE(c.commit(1, 33).has_value());
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.admit(2, newer).has_value());
  REQUIRE(c.commit(2, 33).has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(0));
  // 2 free + 4 cached; a 4-block prompt evicts 2: both of `older`.
  REQUIRE(c.admit(3, iota_tokens(64, 7000)).has_value());
  CHECK(c.metrics().kv_evictions == 2);
  REQUIRE(c.release(3).has_value());
  REQUIRE(c.step_complete(1));
  auto n = c.admit(4, newer);
  REQUIRE(n.has_value());
  CHECK(n->kv_matched_tokens == 32);
  REQUIRE(c.release(4).has_value());
  auto o = c.admit(5, older);
  REQUIRE(o.has_value());
  CHECK(o->kv_matched_tokens == 0);
}

TEST_CASE("blocks given up in step n are not reused before step n completes") {
  cache c = make(2);
  REQUIRE(c.admit(1, iota_tokens(20)).has_value());
  REQUIRE(c.release(1).has_value()); // never committed: both blocks go to the free queue, tagged step 0
  const observable<cache> before(c, {});
  auto r = c.admit(2, iota_tokens(20, 500));
  CHECK(r.error() == errc::pool_exhausted);
  CHECK(observable<cache>(c, {}) == before);
  REQUIRE(c.step_complete(0));
  CHECK(c.current_epoch() == 1);
  CHECK(c.admit(2, iota_tokens(20, 500)).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("decode: extend appends tokens and blocks, commit publishes blocks that became full") {
  cache c = make(16);
  auto prompt = iota_tokens(30);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.commit(1, 30).has_value());
  CHECK(c.metrics().blocks_published == 1);
  auto e1 = c.extend(1, std::vector<token_id>{30});
  REQUIRE(e1.has_value());
  CHECK(e1->new_blocks.empty());
  REQUIRE(c.commit(1, 31).has_value());
  auto e2 = c.extend(1, std::vector<token_id>{31, 32, 33});
  REQUIRE(e2.has_value());
  CHECK(e2->new_blocks.size() == 1);
  CHECK(e2->first_new_block == 2);
  REQUIRE(c.commit(1, 34).has_value());
  CHECK(c.metrics().blocks_published == 2);
  REQUIRE(c.release(1).has_value());
  auto again = c.admit(2, iota_tokens(40));
  REQUIRE(again.has_value());
  CHECK(again->kv_matched_tokens == 32);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("fork shares full blocks and copies the partial last block") {
  cache c = make(16);
  REQUIRE(c.admit(1, iota_tokens(40)).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  auto f = c.fork(1, 2);
  REQUIRE(f.has_value());
  const auto src = table(c, 1);
  CHECK(f->block_table.size() == 3);
  CHECK(f->block_table[0] == src[0]);
  CHECK(f->block_table[1] == src[1]);
  CHECK(f->copy_src == src[2]);
  CHECK(f->copy_dst == f->block_table[2]);
  CHECK(f->copy_dst != src[2]);
  CHECK_FALSE(f->copy_recurrent_state);
  CHECK(c.check_invariants().has_value());
  // both continue independently
  REQUIRE(c.extend(1, iota_tokens(8, 100)).has_value());
  REQUIRE(c.extend(2, iota_tokens(8, 200)).has_value());
  REQUIRE(c.commit(1, 48).has_value());
  REQUIRE(c.commit(2, 48).has_value());
  CHECK(c.metrics().blocks_published == 4);
  REQUIRE(c.release(1).has_value());
  REQUIRE(c.release(2).has_value());
  auto hit = c.admit(3, concat(iota_tokens(40), iota_tokens(9, 200)));
  REQUIRE(hit.has_value());
  CHECK(hit->kv_matched_tokens == 48);
  CHECK(c.check_invariants().has_value());

  SUBCASE("fork on a block boundary copies nothing") {
    REQUIRE(c.extend(3, iota_tokens(15, 300)).has_value());
    REQUIRE(c.commit(3, 64).has_value());
    auto g = c.fork(3, 4);
    REQUIRE(g.has_value());
    CHECK(g->copy_src == no_block);
    CHECK(g->block_table.size() == 4);
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("two equal prompts in flight: the first commit publishes, the second keeps its blocks private") {
  cache c = make(16);
  const auto prompt = iota_tokens(40);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  REQUIRE(c.commit(2, 40).has_value());
  CHECK(c.metrics().blocks_published == 2);
  CHECK(c.metrics().duplicate_blocks == 2);
  CHECK(c.check_invariants().has_value());
  // The second sequence's chain continues through the published blocks: its next full block publishes.
  REQUIRE(c.extend(2, iota_tokens(8, 40)).has_value());
  REQUIRE(c.commit(2, 48).has_value());
  CHECK(c.metrics().blocks_published == 3);
  CHECK(c.check_invariants().has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.release(1).has_value());
  auto p = c.admit(3, iota_tokens(49));
  REQUIRE(p.has_value());
  CHECK(p->kv_matched_tokens == 48);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("every error returns an errc and leaves the cache unchanged") {
  cache c = make(8, 3);
  REQUIRE(c.admit(1, iota_tokens(40)).has_value());
  REQUIRE(c.commit(1, 20).has_value());
  REQUIRE(c.admit(2, iota_tokens(20, 300)).has_value());
  REQUIRE(c.release(2).has_value());
  const std::vector<seq_id> live{1};
  const observable<cache> before(c, live);
  auto unchanged = [&] {
    CHECK(observable<cache>(c, live) == before);
    CHECK(c.check_invariants().has_value());
  };
  const std::array<std::byte, 33> long_digest{};
  const std::array<std::byte, 32> digest{};
  const media_item oversized[] = {{.position = 2, .digest = long_digest}};
  const media_item unsorted[] = {{.position = 5, .digest = digest}, {.position = 2, .digest = digest}};
  const media_item duplicate[] = {{.position = 2, .digest = digest}, {.position = 2, .digest = digest}};
  const media_item past_end[] = {{.position = 2, .digest = digest}, {.position = 10, .digest = digest}};

  CHECK(c.admit(1, iota_tokens(10)).error() == errc::duplicate_sequence);
  unchanged();
  CHECK(c.admit(5, {}).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.admit(5, iota_tokens(10), {.media = oversized}).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.admit(5, iota_tokens(10), {.media = unsorted}).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.admit(5, iota_tokens(10), {.media = duplicate}).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.admit(5, iota_tokens(10), {.media = past_end}).error() == errc::out_of_range);
  unchanged();
  // Over tokens the cache holds (sequence 1's), so an item wrongly accepted would share or take blocks.
  const media_item at_end[] = {{.position = 16, .digest = digest}};
  CHECK(c.admit(5, iota_tokens(16), {.media = at_end}).error() == errc::out_of_range);
  unchanged();
  CHECK(c.admit(5, iota_tokens(16), {.media = unsorted}).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.admit(5, iota_tokens(200, 900)).error() == errc::pool_exhausted); // 13 blocks > 8
  unchanged();
  CHECK(c.commit(9, 1).error() == errc::unknown_sequence);
  unchanged();
  CHECK(c.commit(1, 41).error() == errc::out_of_range);
  unchanged();
  CHECK(c.commit(1, 19).error() == errc::invalid_argument);
  unchanged();
  const std::uint32_t not_planned[] = {16};
  CHECK(c.commit(1, 30, not_planned).error() == errc::invalid_argument);
  unchanged();
  CHECK(c.extend(9, iota_tokens(1)).error() == errc::unknown_sequence);
  unchanged();
  CHECK(c.extend(1, iota_tokens(200)).error() == errc::pool_exhausted);
  unchanged();
  CHECK(c.release(2).error() == errc::double_release);
  unchanged();
  CHECK(c.release(77).error() == errc::unknown_sequence);
  unchanged();
  CHECK(c.finish(2).error() == errc::double_release);
  unchanged();
  CHECK(c.fork(9, 10).error() == errc::unknown_sequence);
  unchanged();
  CHECK(c.fork(1, 1).error() == errc::duplicate_sequence);
  unchanged();
  CHECK(c.fork(1, 10).error() == errc::invalid_argument); // 20 of 40 tokens computed
  unchanged();
  REQUIRE(c.admit(3, iota_tokens(5, 7000)).has_value());
  REQUIRE(c.admit(4, iota_tokens(5, 8000)).has_value());
  const std::vector<seq_id> live3{1, 3, 4};
  const observable<cache> full(c, live3);
  CHECK(c.admit(5, iota_tokens(5, 9000)).error() == errc::pool_exhausted); // no sequence record left
  CHECK(observable<cache>(c, live3) == full);
  REQUIRE(c.commit(1, 40).has_value());
  CHECK(c.fork(1, 6).error() == errc::pool_exhausted);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("construction errors are reported") {
  CHECK(cache::create({.kv_blocks = 0}).error() == errc::invalid_argument);
  CHECK(cache::create({.kv_blocks = 4, .max_sequences = 0}).error() == errc::invalid_argument);
  auto a = cache::create({.kv_blocks = 4});
  auto b = cache::create({.kv_blocks = 4});
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  CHECK(a->hasher_seed() != b->hasher_seed()); // a random seed per cache unless fixed
  CHECK(cache::create({.kv_blocks = 4, .hasher_seed = 5})->hasher_seed() == 5);
}
