// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Policy packs: options in any order, defaults, and a placement written outside the library plugging into
// the capture planner (adding a placement is adding one type).
#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <type_traits>

using namespace reprise;
using namespace reprise::testing;

namespace {

/// A user placement: a snapshot every third alignment unit, counted from the prompt's start.
struct every_third_unit {
  template <class Add>
  static void positions(const policy::capture_context& c, Add&& add) {
    for (std::uint64_t p = 3 * c.alignment; p <= c.length; p += 3 * c.alignment) add(p);
  }
};
static_assert(policy::capture_placement<every_third_unit>);
static_assert(!policy::capture_placement<int>);

using exact_then_capture = policy::snapshot_restore<policy::accept_prefill_exact, policy::capture<policy::every<64>>>;
using capture_then_exact = policy::snapshot_restore<policy::capture<policy::every<64>>, policy::accept_prefill_exact>;
static_assert(std::is_same_v<exact_then_capture::capture_type, capture_then_exact::capture_type>);
static_assert(std::is_same_v<exact_then_capture::accept_type, capture_then_exact::accept_type>);
static_assert(std::is_same_v<policy::snapshot_restore<>::capture_type,
                             policy::capture<policy::last_aligned, policy::branch_point, policy::end_of_turn>>);
static_assert(std::is_same_v<policy::snapshot_restore<>::accept_type, policy::accept_any>);
static_assert(!policy::policy_traits<exact_then_capture>::accepts_decode_continuation);
static_assert(policy::policy_traits<policy::chat>::accepts_decode_continuation);
static_assert(policy::policy_traits<policy::chat>::capture::at_turn_end);
static_assert(!policy::policy_traits<policy::strict>::accepts_decode_continuation);
static_assert(!policy::policy_traits<policy::strict>::capture::at_turn_end);
static_assert(policy::policy_traits<policy::snapshot_restore<policy::capture<policy::end_of_turn>>>::capture::at_turn_end);
static_assert(!policy::policy_traits<policy::snapshot_restore<policy::capture<policy::end_of_turn>>>::capture::plans_at_admit);

} // namespace

TEST_CASE("options in either order plan the same captures") {
  const cache_options o{.kv_blocks = 32, .snapshot_budget_bytes = 8 * small_hybrid::bytes_per_snapshot, .hasher_seed = 1};
  auto a = prefix_cache<small_hybrid, exact_then_capture>::create(o);
  auto b = prefix_cache<small_hybrid, capture_then_exact>::create(o);
  REQUIRE(a.has_value());
  REQUIRE(b.has_value());
  auto pa = a->admit(1, iota_tokens(300));
  auto pb = b->admit(1, iota_tokens(300));
  REQUIRE(pa.has_value());
  REQUIRE(pb.has_value());
  REQUIRE(pa->captures.size() == 4); // 64, 128, 192, 256
  CHECK(std::equal(pa->captures.begin(), pa->captures.end(), pb->captures.begin(), pb->captures.end()));
}

TEST_CASE("a placement defined outside the library plans its positions") {
  using custom = policy::snapshot_restore<policy::capture<every_third_unit>, policy::accept_prefill_exact>;
  auto c = runtime_prefix_cache<custom>::create(
      model_config::of<small_hybrid>(),
      {.kv_blocks = 64, .snapshot_budget_bytes = 8 * small_hybrid::bytes_per_snapshot, .hasher_seed = 1});
  REQUIRE(c.has_value());
  auto plan = c->admit(1, iota_tokens(600));
  REQUIRE(plan.has_value());
  REQUIRE(plan->captures.size() == 3);
  CHECK(plan->captures[0].position == 192);
  CHECK(plan->captures[1].position == 384);
  CHECK(plan->captures[2].position == 576);
  const std::uint32_t written[] = {192, 384, 576};
  REQUIRE(c->commit(1, 600, written).has_value());
  REQUIRE(c->release(1).has_value());
  REQUIRE(c->step_complete(c->current_epoch()).has_value());
  auto again = c->admit(2, iota_tokens(500));
  REQUIRE(again.has_value());
  CHECK(again->usable_tokens == 384);
}
