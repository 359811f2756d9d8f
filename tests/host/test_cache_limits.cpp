// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The cache at its limits: prompts and extensions at the 2^32-token edge, capture placement near it, the
// epoch domain's end, a release of id 2^64 - 1, commit with very many captures, and a moved-from cache.
// Every limit is an error with the cache unchanged, never a wrap.
#include "support/cache_testing.hpp"
#include "support/huge_tokens.hpp"

#include <doctest/doctest.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <span>
#include <utility>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

constexpr std::uint64_t two_to_32 = std::uint64_t{1} << 32;

using attn_cache = prefix_cache<attn_model, policy::block_sharing>;

} // namespace

TEST_CASE("a prompt beyond max_sequence_tokens is out_of_range before any token is read") {
  static_assert(max_sequence_tokens(16) == two_to_32 - 16);
  auto c = attn_cache::create({.kv_blocks = 64, .hasher_seed = 1});
  REQUIRE(c.has_value());
  REQUIRE(c->admit(1, iota_tokens(40)).has_value());
  const seq_id live[] = {1};
  const observable before(*c, live);
  huge_tokens huge(two_to_32);
  // 2^32 - B + 1 .. 2^32 - 2 tokens once wrapped the block count to 0 and returned an empty table.
  for (std::uint64_t length : {two_to_32 - 16 + 1, two_to_32 - 8, two_to_32 - 2, two_to_32 - 1, two_to_32}) {
    CAPTURE(length);
    CHECK(c->admit(2, huge.first(length)).error() == errc::out_of_range);
    CHECK(observable(*c, live) == before);
  }
  CHECK(c->check_invariants().has_value());
}

TEST_CASE("extend to beyond max_sequence_tokens is out_of_range with the sequence unchanged") {
  auto c = attn_cache::create({.kv_blocks = 64, .hasher_seed = 1});
  REQUIRE(c.has_value());
  REQUIRE(c->admit(1, iota_tokens(40)).has_value());
  REQUIRE(c->commit(1, 40).has_value());
  const seq_id live[] = {1};
  const observable before(*c, live);
  huge_tokens huge(two_to_32);
  // 40 + n reaching 2^32 - 2 once wrote tokens past the block table.
  for (std::uint64_t total : {two_to_32 - 15, two_to_32 - 2, two_to_32 - 1, two_to_32 + 5}) {
    CAPTURE(total);
    CHECK(c->extend(1, huge.first(total - 40)).error() == errc::out_of_range);
    CHECK(observable(*c, live) == before);
  }
  // The largest valid total still fails only for want of blocks, and changes nothing either.
  CHECK(c->extend(1, huge.first(max_sequence_tokens(16) - 40)).error() == errc::pool_exhausted);
  CHECK(observable(*c, live) == before);
  CHECK(c->check_invariants().has_value());
}

TEST_CASE("capture placements near the 2^32-token edge end and stay in range") {
  // A 32-bit `p += interval` wrapped past 2^32 - I and never ended.
  const policy::capture_context ctx{.usable = two_to_32 - 1000, .kv_matched = two_to_32 - 1000,
                                    .length = two_to_32 - 16, .alignment = 64, .interval = 256};
  std::vector<std::uint64_t> every, interval, last;
  policy::every<512>::positions(ctx, [&](std::uint64_t p) { every.push_back(p); });
  policy::every_interval::positions(ctx, [&](std::uint64_t p) { interval.push_back(p); });
  policy::last_aligned::positions(ctx, [&](std::uint64_t p) { last.push_back(p); });
  CHECK(every == std::vector<std::uint64_t>{two_to_32 - 512});
  CHECK(interval == std::vector<std::uint64_t>{two_to_32 - 768, two_to_32 - 512, two_to_32 - 256});
  CHECK(last == std::vector<std::uint64_t>{two_to_32 - 64});
  std::uint64_t count = 0;
  const policy::capture_context wide{.usable = 0, .length = two_to_32 - 1, .alignment = 1, .interval = 1u << 31};
  policy::every<(1u << 31)>::positions(wide, [&](std::uint64_t p) {
    CHECK(p <= wide.length);
    ++count;
  });
  CHECK(count == 1);
}

TEST_CASE("the epoch domain ends at max_epoch: beyond it step_complete fails and nothing wraps") {
  auto c = attn_cache::create({.kv_blocks = 2, .hasher_seed = 1});
  REQUIRE(c.has_value());
  REQUIRE(c->step_complete(max_epoch - 1).has_value());
  CHECK(c->current_epoch() == max_epoch);
  // A block given up while the last numbered step is scheduled is reusable only after that step completes
  // (a release tag of 2^64 - 2 + 1 once wrapped to 0 and made it reusable at once).
  REQUIRE(c->admit(1, iota_tokens(20)).has_value());
  REQUIRE(c->release(1).has_value());
  CHECK(c->admit(2, iota_tokens(20, 500)).error() == errc::pool_exhausted);
  const observable before(*c, {});
  CHECK(c->step_complete(max_epoch + 1).error() == errc::out_of_range);
  CHECK(c->step_complete(std::numeric_limits<epoch_t>::max()).error() == errc::out_of_range);
  CHECK(observable(*c, {}) == before);
  CHECK(c->current_epoch() == max_epoch);
  REQUIRE(c->step_complete(max_epoch).has_value());
  CHECK(c->current_epoch() == max_epoch + 1);
  CHECK(c->admit(2, iota_tokens(20, 500)).has_value());
  CHECK(c->check_invariants().has_value());
}

TEST_CASE("release of id 2^64 - 1 that was never admitted is unknown_sequence; after a release, double") {
  auto c = attn_cache::create({.kv_blocks = 8, .max_sequences = 2, .hasher_seed = 1});
  REQUIRE(c.has_value());
  constexpr seq_id last = std::numeric_limits<seq_id>::max();
  // The released-ids ring stored id + 1 with 0 as "empty": id 2^64 - 1 matched every empty entry.
  CHECK(c->release(last).error() == errc::unknown_sequence);
  CHECK(c->finish(last).error() == errc::unknown_sequence);
  REQUIRE(c->admit(last, iota_tokens(20)).has_value());
  REQUIRE(c->release(last).has_value());
  CHECK(c->release(last).error() == errc::double_release);
  CHECK(c->release(0).error() == errc::unknown_sequence);
  REQUIRE(c->admit(0, iota_tokens(20)).has_value());
  REQUIRE(c->release(0).has_value());
  CHECK(c->release(0).error() == errc::double_release);
}

TEST_CASE("commit with 100000 captures written stays linear" * doctest::timeout(60)) {
  // Capturing every 64 tokens of a 6.4M-token prompt: quadratic bookkeeping (a scan of the written list per
  // capture) would take on the order of 10^10 steps here; linear takes milliseconds.
  using every64 = policy::snapshot_restore<policy::capture<policy::every<64>>, policy::accept_prefill_exact>;
  constexpr std::uint32_t captures = 100000, length = captures * 64;
  auto c = prefix_cache<small_hybrid, every64>::create({.kv_blocks = length / 16 + 1,
                                                       .max_sequences = 1,
                                                       .snapshot_budget_bytes = (captures + 1) * small_hybrid::bytes_per_snapshot,
                                                       .hasher_seed = 1});
  REQUIRE(c.has_value());
  auto plan = c->admit(1, iota_tokens(length));
  REQUIRE(plan.has_value());
  REQUIRE(plan->captures.size() == captures);
  std::vector<std::uint32_t> written;
  for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  REQUIRE(c->commit(1, length, written).has_value());
  CHECK(c->metrics().captures_written == captures);
  CHECK(c->metrics().snapshots_held == captures);
  CHECK(c->check_invariants().has_value());
}

TEST_CASE("commit refuses duplicate and unplanned written positions without change") {
  using every64 = policy::snapshot_restore<policy::capture<policy::every<64>>, policy::accept_prefill_exact>;
  auto c = prefix_cache<small_hybrid, every64>::create(
      {.kv_blocks = 64, .snapshot_budget_bytes = 8 * small_hybrid::bytes_per_snapshot, .hasher_seed = 1});
  REQUIRE(c.has_value());
  REQUIRE(c->admit(1, iota_tokens(300)).has_value());
  const seq_id live[] = {1};
  const observable before(*c, live);
  const std::uint32_t duplicate[] = {128, 64, 128};
  CHECK(c->commit(1, 300, duplicate).error() == errc::invalid_argument);
  const std::uint32_t unplanned[] = {64, 96};
  CHECK(c->commit(1, 300, unplanned).error() == errc::invalid_argument);
  const std::uint32_t beyond[] = {256};
  CHECK(c->commit(1, 200, beyond).error() == errc::invalid_argument);
  CHECK(observable(*c, live) == before);
  const std::uint32_t unsorted[] = {256, 64, 192, 128};
  REQUIRE(c->commit(1, 300, unsorted).has_value());
  CHECK(c->metrics().captures_written == 4);
  CHECK(c->check_invariants().has_value());
}

TEST_CASE("a moved-from cache is empty: every call reports an error, nothing crashes") {
  auto made = prefix_cache<small_hybrid, policy::snapshot_restore<>>::create(
      {.kv_blocks = 16, .snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot, .hasher_seed = 1});
  REQUIRE(made.has_value());
  auto& from = *made;
  REQUIRE(from.admit(1, iota_tokens(100)).has_value());
  auto to = std::move(from);
  CHECK(to.block_table(1).size() == 7);
  CHECK(from.admit(2, iota_tokens(10)).error() == errc::pool_exhausted);
  CHECK(from.commit(1, 10).error() == errc::unknown_sequence);
  CHECK(from.extend(1, iota_tokens(3)).error() == errc::unknown_sequence);
  CHECK(from.finish(1).error() == errc::unknown_sequence);
  CHECK(from.release(1).error() == errc::unknown_sequence);
  CHECK(from.fork(1, 3).error() == errc::unknown_sequence);
  CHECK(from.step_complete(0).has_value());
  CHECK(from.step_complete(max_epoch + 1).error() == errc::out_of_range);
  CHECK(from.current_epoch() == 0);
  CHECK(from.metrics() == cache_metrics{});
  CHECK(from.kv_blocks() == 0);
  CHECK(from.snapshot_slots() == 0);
  CHECK(from.block_table(1).empty());
  CHECK(from.check_invariants().has_value());
  // Assigning a live cache to it makes it whole again.
  from = std::move(to);
  CHECK(from.block_table(1).size() == 7);
  CHECK(from.check_invariants().has_value());
}
