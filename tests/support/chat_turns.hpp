// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// A conversation's turn as an engine runs it, for the tests of caches that keep turn ends (policy::chat).

#include "support/cache_testing.hpp"

#include <doctest/doctest.h>

#include <cstdint>
#include <vector>

namespace reprise::testing {

struct turn_result {
  admit_plan admitted;
  finish_plan finished;
  std::vector<unit_move> finish_snapshot_offload; ///< the host tier's snapshot offloads of the finish
};

/// One turn: admit `tokens`, commit it (its captures written), decode `reply` (all but its last token fed),
/// finish; the transfers are taken after every call. `tokens` becomes prompt + reply; `keys` are the prompt's.
template <class Cache>
turn_result chat_turn(Cache& c, seq_id s, std::vector<token_id>& tokens, const std::vector<token_id>& reply,
                      const extra_keys& keys = {}) {
  auto plan = c.admit(s, tokens, keys);
  REQUIRE(plan.has_value());
  turn_result out{*plan, {}, {}};
  (void)c.take_transfers();
  std::vector<std::uint32_t> written;
  for (const capture_point& p : plan->captures) written.push_back(static_cast<std::uint32_t>(p.position));
  auto n = static_cast<std::uint32_t>(tokens.size());
  REQUIRE(c.commit(s, n, written).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  for (std::size_t k = 0; k + 1 < reply.size(); ++k) {
    REQUIRE(c.extend(s, std::vector<token_id>{reply[k]}).has_value());
    REQUIRE(c.commit(s, ++n).has_value());
    (void)c.take_transfers();
  }
  auto finished = c.finish(s);
  REQUIRE(finished.has_value());
  out.finished = *finished;
  const transfer_plan t = c.take_transfers();
  out.finish_snapshot_offload.assign(t.snapshot_offload.begin(), t.snapshot_offload.end());
  tokens.insert(tokens.end(), reply.begin(), reply.end());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  return out;
}

} // namespace reprise::testing
