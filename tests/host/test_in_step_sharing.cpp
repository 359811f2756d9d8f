// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// cache_options::share_in_step: prompts admitted in one step share the full blocks an earlier admission of
// the same step computes, before its commit (attention-only models, policy::block_sharing). A sharer commits
// only once its writer's first commit wrote what it shares; a writer released first, a commit that stops
// short and the end of the step leave blocks unwritten and break their sharers.
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <array>
#include <cstdint>
#include <map>
#include <random>
#include <utility>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

using cache = prefix_cache<attn_model, policy::block_sharing>;
constexpr std::uint32_t B = attn_model::block_size; // 16

cache make(std::uint32_t blocks = 64, std::uint32_t max_sequences = 16) {
  auto c = cache::create(
      {.kv_blocks = blocks, .max_sequences = max_sequences, .hasher_seed = 1, .share_in_step = true});
  REQUIRE(c.has_value());
  return std::move(*c);
}

std::vector<block_id> table(const cache& c, seq_id s) {
  auto t = c.block_table(s);
  return {t.begin(), t.end()};
}

/// Checks that a failing call changed nothing a caller can observe, and the invariants.
struct unchanged_guard {
  const cache& c;
  std::vector<seq_id> live;
  observable<cache> before;
  unchanged_guard(const cache& cc, std::vector<seq_id> l) : c(cc), live(std::move(l)), before(cc, live) {}
  void check() const {
    CHECK(observable<cache>(c, live) == before);
    CHECK(c.check_invariants().has_value());
  }
};

} // namespace

TEST_CASE("a prompt admitted after another one in the same step shares its full blocks before its commit") {
  cache c = make();
  const auto prompt = iota_tokens(100); // 6 full blocks + 4 tokens
  auto a = c.admit(1, prompt);
  REQUIRE(a.has_value());
  CHECK(a->shared_blocks == 0);
  const auto writer = table(c, 1);

  auto b = c.admit(2, concat(prompt, iota_tokens(30, 500)));
  REQUIRE(b.has_value());
  CHECK(b->shared_blocks == 6);
  CHECK(b->kv_matched_tokens == 96);
  CHECK(b->usable_tokens == 96);
  CHECK(b->tokens_lost_to_missing_snapshot == 0);
  const auto sharer = table(c, 2);
  CHECK(std::equal(writer.begin(), writer.begin() + 6, sharer.begin()));
  CHECK(c.metrics().blocks_shared == 6);
  CHECK(c.metrics().blocks_shared_in_step == 6);
  CHECK(c.metrics().kv_matched_tokens == 96);
  CHECK(c.metrics().blocks_published == 0);
  CHECK(c.check_invariants().has_value());

  // The engine runs both in one forward pass, then commits in admission order.
  REQUIRE(c.commit(1, 100).has_value());
  CHECK(c.metrics().blocks_published == 6);
  REQUIRE(c.commit(2, 130).has_value());
  CHECK(c.metrics().blocks_published == 8); // the sharer's chain continues through the writer's blocks
  CHECK(c.metrics().duplicate_blocks == 0);
  CHECK(c.check_invariants().has_value());

  SUBCASE("the shared blocks are cached like any published block") {
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    REQUIRE(c.release(1).has_value());
    REQUIRE(c.release(2).has_value());
    auto again = c.admit(3, concat(prompt, iota_tokens(30, 500)));
    REQUIRE(again.has_value());
    CHECK(again->kv_matched_tokens == 128);
    CHECK(c.metrics().blocks_shared_in_step == 6);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("a fork of the sharer after its commit shares the writer's blocks") {
    auto f = c.fork(2, 3);
    REQUIRE(f.has_value());
    CHECK(std::equal(writer.begin(), writer.begin() + 6, f->block_table.begin()));
    REQUIRE(c.release(1).has_value());
    REQUIRE(c.release(2).has_value());
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("without share_in_step two prompts of one step both compute their common prefix") {
  auto made = cache::create({.kv_blocks = 64, .hasher_seed = 1});
  REQUIRE(made.has_value());
  cache& c = *made;
  REQUIRE(c.admit(1, iota_tokens(100)).has_value());
  auto b = c.admit(2, iota_tokens(100));
  REQUIRE(b.has_value());
  CHECK(b->shared_blocks == 0);
  CHECK(c.metrics().blocks_shared_in_step == 0);
}

TEST_CASE("share_in_step is refused by every policy but block_sharing") {
  using snap = policy::snapshot_restore<>;
  const std::size_t budget = 4 * small_hybrid::bytes_per_snapshot;
  CHECK(prefix_cache<small_hybrid, policy::memory_only>::create({.kv_blocks = 8, .share_in_step = true}).error() ==
        errc::unsupported_config);
  CHECK(prefix_cache<small_hybrid, snap>::create(
            {.kv_blocks = 8, .snapshot_budget_bytes = budget, .share_in_step = true})
            .error() == errc::unsupported_config);
  CHECK(prefix_cache<small_hybrid, snap>::create({.kv_blocks = 8, .snapshot_budget_bytes = budget}).has_value());
  CHECK(runtime_prefix_cache<policy::memory_only>::create(model_config::of<attn_model>(),
                                                          {.kv_blocks = 8, .share_in_step = true})
            .error() == errc::unsupported_config);
  CHECK(runtime_prefix_cache<policy::block_sharing>::create(model_config::of<small_hybrid>(),
                                                            {.kv_blocks = 8, .share_in_step = true})
            .error() == errc::unsupported_config);
  CHECK(runtime_prefix_cache<policy::block_sharing>::create(model_config::of<attn_model>(),
                                                            {.kv_blocks = 8, .share_in_step = true})
            .has_value());
}

TEST_CASE("sharing within a step lets a prompt in that would not fit computing its prefix again") {
  cache c = make(8);
  const auto prompt = iota_tokens(100); // 7 blocks
  REQUIRE(c.admit(1, prompt).has_value());
  auto b = c.admit(2, prompt); // 6 shared + 1 own: fits in the one block left
  REQUIRE(b.has_value());
  CHECK(b->shared_blocks == 6);
  CHECK(c.metrics().blocks_referenced == 8);
  CHECK(c.admit(3, iota_tokens(20, 900)).error() == errc::pool_exhausted);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("sharing within a step follows the same verification as published blocks") {
  cache c = make();
  const auto prompt = iota_tokens(100);
  REQUIRE(c.admit(1, prompt, {.tenant_salt = 7}).has_value());
  const auto writer = table(c, 1);

  SUBCASE("another tenant or extra key shares nothing") {
    const std::array<std::byte, 2> digest{std::byte{1}, std::byte{2}};
    const media_item at_start[] = {{.position = 0, .digest = digest}}; // positional: it keys every block
    seq_id s = 10;
    for (const extra_keys& other : {extra_keys{}, extra_keys{.tenant_salt = 8},
                                    extra_keys{.lora_id = 1, .tenant_salt = 7},
                                    extra_keys{.tenant_salt = 7, .media = at_start}}) {
      auto p = c.admit(s++, prompt, other);
      REQUIRE(p.has_value());
      CHECK(p->shared_blocks == 0);
    }
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("a media item inside block 3 shares blocks 0..2, and the same item at the same position more") {
    const std::array<std::byte, 2> digest{std::byte{1}, std::byte{2}};
    const media_item at_50[] = {{.position = 50, .digest = digest}};
    const media_item at_51[] = {{.position = 51, .digest = digest}};
    auto image = c.admit(2, prompt, {.tenant_salt = 7, .media = at_50});
    REQUIRE(image.has_value());
    CHECK(image->shared_blocks == 3);
    CHECK(table(c, 2)[3] != writer[3]);
    auto same = c.admit(3, prompt, {.tenant_salt = 7, .media = at_50}); // shares the image writer's blocks
    REQUIRE(same.has_value());
    CHECK(same->shared_blocks == 6);
    CHECK(table(c, 3)[3] == table(c, 2)[3]);
    auto moved = c.admit(4, prompt, {.tenant_salt = 7, .media = at_51});
    REQUIRE(moved.has_value());
    CHECK(moved->shared_blocks == 3);
    CHECK(c.check_invariants().has_value());
  }
  SUBCASE("a prompt that diverges inside block 3 shares blocks 0..2") {
    auto other = prompt;
    other[50] = -5;
    auto p = c.admit(2, other, {.tenant_salt = 7});
    REQUIRE(p.has_value());
    CHECK(p->shared_blocks == 3);
    CHECK(table(c, 2)[3] != writer[3]);
  }
  SUBCASE("a prompt ending on a block boundary computes its last block (L - 1 rule)") {
    auto p = c.admit(2, iota_tokens(96), {.tenant_salt = 7});
    REQUIRE(p.has_value());
    CHECK(p->shared_blocks == 5);
    CHECK(p->usable_tokens == 80);
    // Its last block equals the writer's, which is offered already: the later prompt still finds the writer's.
    auto q = c.admit(3, iota_tokens(97), {.tenant_salt = 7});
    REQUIRE(q.has_value());
    CHECK(q->shared_blocks == 6);
    CHECK(table(c, 3)[5] == writer[5]);
    REQUIRE(c.commit(1, 100).has_value());
    REQUIRE(c.commit(2, 96).has_value());
    REQUIRE(c.commit(3, 97).has_value());
    CHECK(c.metrics().duplicate_blocks == 1);
    CHECK(c.check_invariants().has_value());
  }
}

TEST_CASE("a chain through several writers: each sharer registers the blocks it computes in turn") {
  cache c = make();
  const auto base = iota_tokens(40);                     // 2 full blocks + 8
  const auto longer = concat(base, iota_tokens(40, 40)); // 5 full blocks
  const auto longest = concat(longer, iota_tokens(40, 80));
  REQUIRE(c.admit(1, base).has_value());
  auto b = c.admit(2, longer);
  REQUIRE(b.has_value());
  CHECK(b->shared_blocks == 2);
  auto d = c.admit(3, longest); // the first writer's 2 blocks, then the second's 3
  REQUIRE(d.has_value());
  CHECK(d->shared_blocks == 5);
  CHECK(c.metrics().blocks_shared_in_step == 7);
  const auto t1 = table(c, 1), t2 = table(c, 2), t3 = table(c, 3);
  CHECK(t3[1] == t1[1]);
  CHECK(t3[4] == t2[4]);
  CHECK(c.check_invariants().has_value());

  // Commits must follow the writers: the last sharer waits for both.
  const unchanged_guard g(c, {1, 2, 3});
  CHECK(c.commit(3, 120).error() == errc::unwritten_blocks);
  g.check();
  CHECK(c.commit(2, 80).error() == errc::unwritten_blocks);
  g.check();
  REQUIRE(c.commit(1, 40).has_value());
  CHECK(c.commit(3, 120).error() == errc::unwritten_blocks); // the second writer's blocks still pending
  REQUIRE(c.commit(2, 80).has_value());
  REQUIRE(c.commit(3, 120).has_value());
  CHECK(c.metrics().blocks_published == 7);
  CHECK(c.metrics().duplicate_blocks == 0);
  CHECK(c.check_invariants().has_value());
}

namespace {
/// A writer and a sharer of all its full blocks; the writer ends (`finish` or `release`) before committing.
void writer_ends_first(bool finish) {
  cache c = make();
  const auto prompt = iota_tokens(100);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());
  if (finish) REQUIRE(c.finish(1).has_value());
  else REQUIRE(c.release(1).has_value());
  CHECK(c.check_invariants().has_value());

  // Its blocks are no longer offered: a prompt admitted later in the step computes them.
  auto late = c.admit(3, prompt);
  REQUIRE(late.has_value());
  CHECK(late->shared_blocks == 0);

  // The sharer's KV was computed from blocks nobody writes: it never commits, whatever follows.
  {
    const unchanged_guard g(c, {2, 3});
    CHECK(c.commit(2, 100).error() == errc::unwritten_blocks);
    g.check();
    CHECK(c.commit(2, 96).error() == errc::unwritten_blocks);
    g.check();
  }
  REQUIRE(c.commit(3, 100).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  {
    const unchanged_guard g(c, {2, 3});
    CHECK(c.commit(2, 100).error() == errc::unwritten_blocks);
    g.check();
    CHECK(c.fork(2, 9).error() == errc::invalid_argument); // uncommitted tokens
    g.check();
  }
  const auto published = c.metrics().blocks_published;
  REQUIRE(c.extend(2, iota_tokens(3, 7000)).has_value()); // a broken sharer still extends and releases
  REQUIRE(c.release(2).has_value());
  CHECK(c.metrics().blocks_published == published);
  CHECK(c.metrics().blocks_referenced == 7); // the third sequence's; the unwritten blocks went free
  CHECK(c.check_invariants().has_value());
}
} // namespace

TEST_CASE("a writer released before its commit breaks its sharers") {
  SUBCASE("release") { writer_ends_first(false); }
  SUBCASE("finish") { writer_ends_first(true); }
}

TEST_CASE("a writer whose first commit stops short of a shared block breaks the sharers of that block only") {
  cache c = make();
  const auto prompt = iota_tokens(100);
  auto diverging = prompt;
  diverging[40] = -1; // shares blocks 0 and 1
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());
  auto short_sharer = c.admit(3, diverging);
  REQUIRE(short_sharer.has_value());
  CHECK(short_sharer->shared_blocks == 2);
  const auto t1 = table(c, 1);

  REQUIRE(c.commit(1, 40).has_value()); // a chunked prefill: blocks 0 and 1 written
  CHECK(c.metrics().blocks_published == 2);
  CHECK(c.check_invariants().has_value());
  REQUIRE(c.commit(3, 100).has_value()); // what it shares is written
  {
    const unchanged_guard g(c, {1, 2, 3});
    CHECK(c.commit(2, 100).error() == errc::unwritten_blocks);
    g.check();
  }

  // The blocks the commit did not cover are offered no more: a later prompt of the step shares the two
  // published blocks, not the writer's unwritten ones.
  auto late = c.admit(4, prompt);
  REQUIRE(late.has_value());
  CHECK(late->shared_blocks == 2);
  CHECK(table(c, 4)[2] != t1[2]);

  // The writer goes on in later steps and publishes its blocks; the broken sharer still cannot commit.
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  REQUIRE(c.commit(1, 100).has_value());
  REQUIRE(c.commit(4, 100).has_value());
  {
    const unchanged_guard g(c, {1, 2, 3, 4});
    CHECK(c.commit(2, 100).error() == errc::unwritten_blocks);
    g.check();
  }
  REQUIRE(c.release(2).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("breaking is transitive: a broken sharer's own blocks are offered no more, their sharers break") {
  cache c = make();
  const auto base = iota_tokens(40);
  const auto longer = concat(base, iota_tokens(40, 40));
  REQUIRE(c.admit(1, base).has_value());
  REQUIRE(c.admit(2, longer).has_value()); // shares 1's two blocks, writes three
  auto third = c.admit(3, longer);         // shares 1's two and 2's first two (L - 1 rule)
  REQUIRE(third.has_value());
  CHECK(third->shared_blocks == 4);
  REQUIRE(c.release(1).has_value()); // 2 breaks, and 3 through 2's blocks as well as 1's
  CHECK(c.check_invariants().has_value());
  auto late = c.admit(4, longer);
  REQUIRE(late.has_value());
  CHECK(late->shared_blocks == 0);
  const unchanged_guard g(c, {2, 3, 4});
  CHECK(c.commit(2, 80).error() == errc::unwritten_blocks);
  g.check();
  CHECK(c.commit(3, 80).error() == errc::unwritten_blocks);
  g.check();
}

TEST_CASE("step_complete ends the window: blocks not committed in the step are offered no more") {
  cache c = make();
  const auto prompt = iota_tokens(100);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());

  // The writer commits after the step completed: its sharer is broken, it is not.
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  CHECK(c.check_invariants().has_value());
  auto next = c.admit(3, prompt);
  REQUIRE(next.has_value());
  CHECK(next->shared_blocks == 0);
  REQUIRE(c.commit(1, 100).has_value());
  CHECK(c.metrics().blocks_published == 6);
  const unchanged_guard g(c, {1, 2, 3});
  CHECK(c.commit(2, 100).error() == errc::unwritten_blocks);
  g.check();
  REQUIRE(c.release(2).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("completing an older step (n < current_epoch()) leaves the window open") {
  cache c = make();
  REQUIRE(c.step_complete(4).has_value());
  REQUIRE(c.admit(1, iota_tokens(50)).has_value());
  REQUIRE(c.step_complete(2).has_value());
  auto b = c.admit(2, iota_tokens(50));
  REQUIRE(b.has_value());
  CHECK(b->shared_blocks == 3);

  SUBCASE("commits in the step succeed") {
    REQUIRE(c.step_complete(3).has_value());
    REQUIRE(c.commit(1, 50).has_value());
    REQUIRE(c.commit(2, 50).has_value());
  }
  SUBCASE("completing the current step ends it") {
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    CHECK(c.commit(2, 50).error() == errc::unwritten_blocks);
  }
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("extend and commit interplay: a sharer extends before its commit, a writer commits with decode tokens") {
  cache c = make();
  const auto prompt = iota_tokens(40);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());
  REQUIRE(c.extend(1, iota_tokens(8, 40)).has_value()); // the writer's block 2 becomes full
  REQUIRE(c.extend(2, iota_tokens(30, 90)).has_value());
  CHECK(c.check_invariants().has_value());
  // Blocks that extend fills are not offered: only the admitted prompt's full blocks are.
  auto late = c.admit(3, concat(prompt, iota_tokens(9, 40)));
  REQUIRE(late.has_value());
  CHECK(late->shared_blocks == 2);
  REQUIRE(c.commit(1, 48).has_value());
  REQUIRE(c.commit(2, 70).has_value());
  REQUIRE(c.commit(3, 49).has_value());
  CHECK(c.metrics().blocks_published == 5); // 1's three, 2's block 2 and 3
  CHECK(c.check_invariants().has_value());
  for (seq_id s : {1, 2, 3}) REQUIRE(c.release(s).has_value());
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a sharer released before its commit leaves its writer whole, and breaks its own sharers") {
  cache c = make();
  const auto base = iota_tokens(40), longer = concat(base, iota_tokens(40, 40));
  REQUIRE(c.admit(1, base).has_value());
  REQUIRE(c.admit(2, longer).has_value());
  REQUIRE(c.admit(3, concat(longer, iota_tokens(5, 900))).has_value());
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.commit(1, 40).has_value());
  CHECK(c.metrics().blocks_published == 2);
  CHECK(c.commit(3, 85).error() == errc::unwritten_blocks);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("a hasher that returns one constant never yields a wrong block within a step") {
  auto made = prefix_cache<attn_model, policy::block_sharing, constant_hasher>::create(
      {.kv_blocks = 512, .max_sequences = 32, .share_in_step = true});
  REQUIRE(made.has_value());
  auto& c = *made;
  std::mt19937 rng(11);
  using content = std::vector<token_id>; // tenant, then the prefix a block holds
  std::map<block_id, content> planned;   // what each block holds, or will once its writer commits
  auto prefix = [](token_id tenant, const std::vector<token_id>& p, std::size_t n) {
    content c{tenant};
    c.insert(c.end(), p.begin(), p.begin() + static_cast<std::ptrdiff_t>(n));
    return c;
  };
  seq_id next = 0;
  std::uint64_t shared_in_step = 0;
  for (int step = 0; step < 40; ++step) {
    std::vector<std::pair<seq_id, std::uint32_t>> admitted;
    const int count = 2 + static_cast<int>(rng() % 6);
    for (int k = 0; k < count; ++k) {
      // Prompts of 1..120 tokens, from a family seen in every step or one of this step's, often with one
      // token changed somewhere, under one of two tenants.
      const auto family = static_cast<token_id>(rng() % 3 == 0 ? 0 : 10000 * (step + 1) + 1000 * (rng() % 2));
      auto p = iota_tokens(1 + rng() % 120, family);
      if (rng() % 2 == 0) p[rng() % p.size()] = -static_cast<token_id>(rng() % 3);
      const auto tenant = static_cast<token_id>(rng() % 2);
      const seq_id s = next++;
      auto plan = c.admit(s, p, {.tenant_salt = static_cast<std::uint64_t>(tenant)});
      REQUIRE(plan.has_value());
      for (std::uint32_t i = 0; i < plan->block_table.size(); ++i) {
        const block_id b = plan->block_table[i];
        if (i < plan->shared_blocks) {
          REQUIRE(planned.count(b) == 1);
          CHECK(planned[b] == prefix(tenant, p, (i + 1) * B));
        } else if ((i + 1) * B <= p.size()) {
          planned[b] = prefix(tenant, p, (i + 1) * B);
        } else {
          planned.erase(b);
        }
      }
      admitted.emplace_back(s, static_cast<std::uint32_t>(p.size()));
      REQUIRE(c.check_invariants().has_value());
    }
    for (const auto& [s, n] : admitted) REQUIRE(c.commit(s, n).has_value()); // writers first
    for (const auto& [s, n] : admitted) REQUIRE(c.release(s).has_value());
    REQUIRE(c.step_complete(c.current_epoch()).has_value());
    REQUIRE(c.check_invariants().has_value());
    shared_in_step = c.metrics().blocks_shared_in_step;
  }
  CHECK(shared_in_step > 20);
  CHECK(c.metrics().blocks_shared > shared_in_step); // published blocks are shared too
}

TEST_CASE("every new error returns its errc and leaves the cache unchanged") {
  cache c = make(32, 4);
  const auto prompt = iota_tokens(70);
  REQUIRE(c.admit(1, prompt).has_value());
  REQUIRE(c.admit(2, prompt).has_value());
  const unchanged_guard pending(c, {1, 2});
  CHECK(c.commit(2, 70).error() == errc::unwritten_blocks); // its writer has not committed
  pending.check();
  CHECK(c.commit(2, 64).error() == errc::unwritten_blocks); // at the skip already
  pending.check();
  CHECK(c.commit(2, 63).error() == errc::invalid_argument); // below the skip: the argument is checked first
  pending.check();
  REQUIRE(c.commit(1, 32).has_value()); // stops short of blocks 2 and 3
  const unchanged_guard broken(c, {1, 2});
  CHECK(c.commit(2, 70).error() == errc::unwritten_blocks);
  broken.check();
  CHECK(c.fork(2, 5).error() == errc::invalid_argument);
  broken.check();
}
