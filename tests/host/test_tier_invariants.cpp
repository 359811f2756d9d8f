// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The invariant checks of the tier components (host_tier.hpp, remote_tier.hpp), called from
// check_invariants: each corruption of a side table is reported, and undoing it makes the check pass again.
// The cores are built directly (detail::cache_core) so the test can reach the components' tables.
#include "support/cache_testing.hpp"
#include "support/content_keys.hpp"

#include <reprise/keys/content_key.hpp>

#include <doctest/doctest.h>

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

constexpr std::uint32_t B = small_hybrid::block_size;
constexpr std::uint32_t A = small_hybrid::alignment;

template <class Tiers>
using core_of = detail::cache_core<policy::strict, xxh3_hasher, Tiers>;

cache_options host_options(std::uint32_t kv_blocks, std::uint32_t host_blocks) {
  return {.kv_blocks = kv_blocks,
          .snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
          .hasher_seed = 3,
          .host_kv_budget_bytes = host_blocks * small_hybrid::bytes_per_kv_block,
          .host_snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot};
}

/// Serves `prompt` as sequence `s` to the end: admit, commit with every capture written, release, step.
template <class Core>
void serve(Core& c, seq_id s, const std::vector<token_id>& prompt) {
  auto plan = c.admit(s, prompt, {}, {});
  REQUIRE(plan.has_value());
  std::vector<std::uint32_t> written;
  for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  REQUIRE(c.commit(s, static_cast<std::uint32_t>(prompt.size()), written).has_value());
  REQUIRE(c.release(s).has_value());
  c.take_transfers();
  REQUIRE(c.step_complete(c.clock.current).has_value());
}

/// `check_invariants(c)` fails while `corrupt` is applied and passes again once `undo` ran.
template <class Core, class Corrupt, class Undo>
void reported(const Core& c, Corrupt&& corrupt, Undo&& undo) {
  REQUIRE(detail::check_invariants(c).has_value());
  corrupt();
  CHECK(detail::check_invariants(c).error() == errc::invariant_violated);
  undo();
  CHECK(detail::check_invariants(c).has_value());
}

} // namespace

TEST_CASE("host tier: a corrupted hold, serial or side-table entry is reported") {
  using core = core_of<policy::tiers<policy::host_tier>>;
  const cache_options o = host_options(2 * A / B, 8);
  REQUIRE(core::validate(geometry_of<small_hybrid>(), o) == errc{});
  core c(geometry_of<small_hybrid>(), o, 3);
  // Two prompts of A + 1 tokens in a pool of 2A / B blocks: the second evicts the first into the host tier.
  serve(c, 1, iota_tokens(A + 1, 100));
  serve(c, 2, iota_tokens(A + 1, 5000));
  auto& h = c.tiers;
  REQUIRE(h.ledger.blocks().index().size() != 0);
  detail::host_unit cached = detail::no_host_unit;
  for (std::uint32_t i = 0; i < h.ledger.blocks().size() && cached == detail::no_host_unit; ++i)
    if (h.ledger.block(detail::host_unit{i}).state == detail::host_state::cached) cached = detail::host_unit{i};
  REQUIRE(cached != detail::no_host_unit);

  SUBCASE("a hold no sequence accounts for") {
    reported(c, [&] { ++h.ledger.block(cached).holds; }, [&] { --h.ledger.block(cached).holds; });
  }
  SUBCASE("a GPU block's serial not after its parent's") {
    block_id child = no_block;
    for (block_id b = 0; b < static_cast<block_id>(c.blocks.size()); ++b)
      if (c.blocks.node(b).state == detail::block_state::cached && c.blocks.node(b).parent != no_block) child = b;
    REQUIRE(child != no_block);
    const std::uint64_t kept = h.serial[static_cast<std::size_t>(child)];
    reported(
        c, [&] { h.serial[static_cast<std::size_t>(child)] = h.serial_of(c.blocks.node(child).parent); },
        [&] { h.serial[static_cast<std::size_t>(child)] = kept; });
  }
  SUBCASE("a live sequence's host restore that holds nothing") {
    auto plan = c.admit(3, iota_tokens(A + 1, 9000), {}, {});
    REQUIRE(plan.has_value());
    detail::sequence_record& r = *c.sequences.find(3);
    reported(c, [&] { h.member_of(r).restore = cached; }, [&] { h.member_of(r).restore = detail::no_host_unit; });
  }
}

TEST_CASE("remote tier: reserved units against pending fetches, and stored content keys, are checked") {
  using core = core_of<policy::tiers<policy::host_tier, policy::remote_tier>>;
  const content_keyer keyer = make_keyer();
  cache_options o = host_options(4 * A / B, 8);
  o.remote_keys = &keyer;
  REQUIRE(core::validate(geometry_of<small_hybrid>(), o) == errc{});
  core c(geometry_of<small_hybrid>(), o, 3);
  auto& remote = c.tiers.below;
  serve(c, 1, iota_tokens(A + 1, 100));
  // Every prefill-exact GPU block of the served prompt carries its content key.
  const block_id keyed = 0;
  REQUIRE(!detail::is_zero(remote.gpu_block(keyed).key));

  SUBCASE("a GPU block's content key") {
    reported(c, [&] { remote.gpu_blocks[0].key.bytes[3] ^= 1; }, [&] { remote.gpu_blocks[0].key.bytes[3] ^= 1; });
  }

  // A prompt nothing local holds: prefetch (without a probe) reserves a host unit per block it could fetch.
  const std::vector<token_id> other = iota_tokens(2 * A + 1, 7000);
  auto fetches = c.prefetch(other, {}, nullptr);
  REQUIRE(fetches.has_value());
  REQUIRE(fetches->blocks != 0);
  const remote_fetch first = fetches->fetches[0];
  REQUIRE(first.item == remote_item::block);
  auto& pending = remote.kv_pending[first.unit];

  SUBCASE("a reserved unit without its pending fetch") {
    reported(c, [&] { pending.active = false; }, [&] { pending.active = true; });
  }
  SUBCASE("a pending fetch's key") {
    reported(c, [&] { pending.key.bytes[0] ^= 1; }, [&] { pending.key.bytes[0] ^= 1; });
  }
  SUBCASE("a host unit's stored content key, once the fetch is kept") {
    const std::vector<std::byte> header = pending.header;
    REQUIRE(c.fetched(remote_item::block, first.unit, header).has_value());
    auto& entry = remote.host_block(detail::host_unit{first.unit});
    REQUIRE(entry.keys.in_store);
    reported(c, [&] { entry.keys.key.bytes[31] ^= 1; }, [&] { entry.keys.key.bytes[31] ^= 1; });
    reported(c, [&] { entry.keys.parent.bytes[0] ^= 1; }, [&] { entry.keys.parent.bytes[0] ^= 1; });
  }
  SUBCASE("a fetch reported as a miss leaves nothing reserved") {
    REQUIRE(c.fetched(remote_item::block, first.unit, {}).has_value());
    CHECK(!pending.active);
    CHECK(detail::check_invariants(c).has_value());
  }
}
