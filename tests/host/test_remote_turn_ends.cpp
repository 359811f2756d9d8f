// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Turn ends in the remote store (cache_options::remote_turn_ends): a conversation's turn end (its
// decode-continuation snapshot and its partial block, linked to the decode-filled blocks before it, each put
// once) goes to the store under a key any engine derives from its own prompt, and another engine continues
// the conversation from it bitwise as the writer would have, had the session stayed alive there.
//
// Two or three caches stand for processes, with a store in memory and engine pools whose bytes are a
// function of how they were computed: the state restored (its bytes), the tokens since, and whether a
// prefill, a decode step or a turn-end capture wrote them. So "the same computation" is checkable bitwise,
// and a reader that mixed two computations, or recomputed, shows different bytes.
#include "support/cache_testing.hpp"
#include "support/computed_bytes.hpp"
#include "support/content_keys.hpp"

#include <reprise/keys/content_key.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

using namespace reprise;
using namespace reprise::testing;

namespace {

using tiers = policy::tiers<policy::host_tier, policy::remote_tier>;
using cache_type = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, tiers>;
constexpr std::uint32_t B = small_hybrid::block_size;
constexpr std::size_t unit_bytes = 32; // the test's stand-in for a block's or a snapshot's bytes
using bytes = std::vector<std::byte>;

bytes computed(std::uint64_t base, std::span<const token_id> tokens, std::uint32_t from, std::uint32_t end, char who) {
  return testing::computed(base, tokens, from, end, who, unit_bytes);
}

struct stored_value {
  bytes header, payload;
};
using store_map = std::map<content_key, stored_value>;

/// What one turn left: the bytes of every KV block of the conversation (full blocks, then the partial one)
/// and of its turn-end snapshot, as the engine's pools held them when it finished.
struct turn_bytes {
  admit_plan admitted;
  std::vector<bytes> kv;
  bytes turn_end;
};

/// One process: a chat cache with host and remote tiers, and the pools an engine would own.
struct process {
  explicit process(const content_keyer& keys, bool turn_ends = true, std::uint32_t kv_blocks = 48)
      : cache(make(keys, turn_ends, kv_blocks)), gpu_kv(kv_blocks), gpu_slots(cache.snapshot_slots()),
        host_kv(cache.host_kv_units()), host_slots(cache.host_snapshot_units()) {}

  static cache_type make(const content_keyer& keys, bool turn_ends, std::uint32_t kv_blocks) {
    auto c = cache_type::create({.kv_blocks = kv_blocks,
                                 .snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot,
                                 .hasher_seed = 5,
                                 .host_kv_budget_bytes = 40 * small_hybrid::bytes_per_kv_block,
                                 .host_snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot,
                                 .remote_keys = &keys,
                                 .remote_write_through = true,
                                 .remote_turn_ends = turn_ends});
    REQUIRE(c.has_value());
    return std::move(*c);
  }

  /// Takes the step's transfers: puts go to `store` (a turn end's payload gathered from its GPU units).
  void run_transfers(store_map& store) {
    const transfer_plan t = cache.take_transfers();
    for (const remote_put& p : t.remote_puts) {
      bytes payload;
      if (p.item == remote_item::turn_end) {
        REQUIRE(p.device);
        for (const std::uint32_t u : p.kv_units) {
          const bytes part = u == no_unit ? bytes(unit_bytes) : gpu_kv[u];
          payload.insert(payload.end(), part.begin(), part.end());
        }
        payload.insert(payload.end(), gpu_slots[p.unit].begin(), gpu_slots[p.unit].end());
        ++turn_end_puts;
      } else {
        const bool block = p.item == remote_item::block;
        payload = p.device ? (block ? gpu_kv : gpu_slots)[p.unit] : (block ? host_kv : host_slots)[p.unit];
        link_puts += block && p.header.size() > 9 && p.header[9] == std::byte{1}; // a continuation block
      }
      store[p.key] = {{p.header.begin(), p.header.end()}, payload};
    }
    for (const unit_move& m : t.kv_offload) host_kv[m.dst] = gpu_kv[m.src];
    for (const unit_move& m : t.snapshot_offload) host_slots[m.dst] = gpu_slots[m.src];
    for (const unit_move& m : t.kv_onboard) gpu_kv[m.dst] = host_kv[m.src];
  }

  /// Probes `prompt`, prefetches what `store` has and answers every fetch (its header passed through
  /// `tamper` first).
  /// `reverse`: report the fetches last first, as a store answering out of order would.
  fetch_plan prefetch(const std::vector<token_id>& prompt, store_map& store, void (*tamper)(bytes&) = nullptr,
                      const extra_keys& keys = {}, bool reverse = false) {
    auto probe = cache.probe(prompt, keys);
    REQUIRE(probe.has_value());
    std::vector<content_key> present;
    for (const remote_probe& k : probe->keys) {
      probed_turn_ends += k.item == remote_item::turn_end;
      if (store.contains(k.key)) present.push_back(k.key);
    }
    auto plan = cache.prefetch(prompt, keys, present);
    REQUIRE(plan.has_value());
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    std::vector<std::vector<std::uint32_t>> units;
    for (const remote_fetch& f : fetches) units.emplace_back(f.kv_units.begin(), f.kv_units.end());
    run_transfers(store); // the puts of what the reservations evicted, before the fetches write the units
    for (std::size_t n = 0; n < fetches.size(); ++n) {
      const std::size_t i = reverse ? fetches.size() - 1 - n : n;
      const remote_fetch& f = fetches[i];
      auto it = store.find(f.key);
      if (it == store.end()) {
        REQUIRE(cache.fetched(f.item, f.unit, {}).has_value());
        continue;
      }
      const bytes& payload = it->second.payload;
      if (f.item == remote_item::turn_end) {
        REQUIRE(payload.size() == (units[i].size() + 1) * unit_bytes);
        for (std::size_t j = 0; j < units[i].size(); ++j)
          if (units[i][j] != no_unit)
            host_kv[units[i][j]].assign(payload.begin() + j * unit_bytes, payload.begin() + (j + 1) * unit_bytes);
        host_slots[f.unit].assign(payload.end() - unit_bytes, payload.end());
      } else {
        (f.item == remote_item::block ? host_kv : host_slots)[f.unit] = payload;
      }
      bytes header = it->second.header;
      if (tamper != nullptr) tamper(header);
      REQUIRE(cache.fetched(f.item, f.unit, header).has_value());
    }
    return *plan;
  }

  /// A prompt's prefill as an engine runs it: admit `tokens` (restoring what the plan says, computing the
  /// rest), write the captures, commit and complete the step. Returns the plan, the block table and what
  /// the computation started from (the restored state's hash and position).
  struct prefilled {
    admit_plan admitted;
    std::vector<block_id> table;
    std::uint64_t base = 0;
    std::uint32_t from = 0;
  };
  prefilled prefill(seq_id s, const std::vector<token_id>& tokens, store_map& store, const extra_keys& keys = {}) {
    auto plan = cache.admit(s, tokens, keys);
    REQUIRE(plan.has_value());
    const admit_plan p = *plan;
    run_transfers(store);
    std::vector<block_id> table(p.block_table.begin(), p.block_table.end());
    // The restored state's bytes seed every position computed past it (hashed in place: no copy).
    const std::vector<bytes>& restored_from = p.restore_from_host ? host_slots : gpu_slots;
    const std::uint64_t base =
        p.restore_slot == no_slot ? 0 : hash_of(restored_from[static_cast<std::size_t>(p.restore_slot)]);
    const std::uint32_t from = p.usable_tokens;
    if (p.copy_src != no_block) gpu_kv[static_cast<std::size_t>(p.copy_dst)] = gpu_kv[static_cast<std::size_t>(p.copy_src)];
    const auto n = static_cast<std::uint32_t>(tokens.size());
    for (std::uint32_t i = p.shared_blocks; i < table.size(); ++i)
      gpu_kv[static_cast<std::size_t>(table[i])] = computed(base, tokens, from, std::min((i + 1) * B, n), 'P');
    std::vector<std::uint32_t> written;
    for (const capture_point& c : p.captures) {
      gpu_slots[static_cast<std::size_t>(c.slot)] = computed(base, tokens, from, static_cast<std::uint32_t>(c.position), 'S');
      written.push_back(static_cast<std::uint32_t>(c.position));
    }
    REQUIRE(cache.commit(s, n, written).has_value());
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    run_transfers(store);
    return {p, std::move(table), base, from};
  }

  /// One turn as an engine runs it: the prompt's prefill (`prefill`), then decode `reply` (all but its last
  /// token fed), finish with the turn-end capture, and complete the step. `tokens` becomes prompt + reply.
  /// `end_step`: complete the step that captured the turn end (and run its put); without, the caller does.
  turn_bytes turn(seq_id s, std::vector<token_id>& tokens, const std::vector<token_id>& reply, store_map& store,
                  bool end_step = true, const extra_keys& keys = {}) {
    auto [p, table, base, from] = prefill(s, tokens, store, keys);
    const auto n = static_cast<std::uint32_t>(tokens.size());
    // Decode: each step writes its token's KV into the block it falls in, as a decode computes it.
    std::uint32_t at = n;
    for (std::size_t k = 0; k + 1 < reply.size(); ++k) {
      tokens.push_back(reply[k]);
      auto e = cache.extend(s, std::vector<token_id>{reply[k]});
      REQUIRE(e.has_value());
      table.insert(table.end(), e->new_blocks.begin(), e->new_blocks.end());
      ++at;
      gpu_kv[static_cast<std::size_t>(table[(at - 1) / B])] = computed(base, tokens, from, at, 'D');
      REQUIRE(cache.commit(s, at).has_value());
      REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
      run_transfers(store);
    }
    tokens.push_back(reply.back());
    auto finished = cache.finish(s);
    REQUIRE(finished.has_value());
    turn_bytes out{p, {}, {}};
    if (finished->capture.slot != no_slot) {
      REQUIRE(finished->capture.position == at);
      const std::span<const token_id> folded(tokens.data(), at);
      gpu_slots[static_cast<std::size_t>(finished->capture.slot)] = computed(base, folded, from, at, 'E');
      out.turn_end = gpu_slots[static_cast<std::size_t>(finished->capture.slot)];
    }
    for (std::uint32_t i = 0; i * B < at; ++i) out.kv.push_back(gpu_kv[static_cast<std::size_t>(table[i])]);
    if (!end_step) return out;
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    run_transfers(store); // the turn end's put, now that its step completed
    return out;
  }

  cache_type cache;
  std::vector<bytes> gpu_kv, gpu_slots, host_kv, host_slots;
  std::uint64_t turn_end_puts = 0, link_puts = 0, probed_turn_ends = 0;
};

std::vector<token_id> turn_tokens(std::size_t n, token_id first) { return iota_tokens(n, first); }

} // namespace

TEST_CASE("a turn end one engine wrote is continued by another bitwise as if the session had stayed alive") {
  const content_keyer keys = make_keyer();
  store_map store;
  process writer(keys), reader(keys), alive(keys);
  // Turn 1: 200 prompt tokens, a 37-token reply; its turn end sits at 236 (blocks 0 .. 11 prefill-exact,
  // 12 and 13 decode-filled, a partial block of 12 tokens).
  std::vector<token_id> tokens = turn_tokens(200, 1), alive_tokens = tokens;
  const turn_bytes t1 = writer.turn(1, tokens, turn_tokens(37, 70000), store);
  REQUIRE(!t1.turn_end.empty());
  CHECK(writer.turn_end_puts == 1);
  CHECK(writer.link_puts == 2); // blocks 12 and 13, each a continuation block of its own
  CHECK(writer.cache.metrics().remote_turn_ends_put == 1);
  CHECK(writer.cache.metrics().remote_turn_ends_lost == 0);
  // The session kept alive: the same turn on its own engine, then turn 2 there.
  store_map alive_store;
  const turn_bytes a1 = alive.turn(1, alive_tokens, turn_tokens(37, 70000), alive_store);
  CHECK(a1.kv == t1.kv);
  CHECK(a1.turn_end == t1.turn_end);

  // Turn 2 on an engine that never saw the conversation: 20 new tokens, a 9-token reply.
  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(20, 90000), reply = turn_tokens(9, 95000);
  next.insert(next.end(), user.begin(), user.end());
  const fetch_plan f = reader.prefetch(next, store);
  CHECK(f.blocks == 12); // the prefill-exact chain; the turn end's own blocks 12 and 13 are its links
  CHECK(reader.probed_turn_ends > 0);
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  CHECK(reader.cache.metrics().remote_rejected == 0);
  CHECK(reader.cache.check_invariants().has_value());
  const turn_bytes r2 = reader.turn(2, next, reply, store);
  CHECK(r2.admitted.usable_tokens == 236);
  CHECK(r2.admitted.restore_from_host);
  CHECK(r2.admitted.restore_exactness == exactness::decode_continuation);
  CHECK(r2.admitted.kv_matched_tokens == 236);
  // Every block it reused is the writer's, bitwise, the partial one included.
  REQUIRE(r2.kv.size() >= t1.kv.size());
  for (std::size_t i = 0; i + 1 < t1.kv.size(); ++i) CHECK(r2.kv[i] == t1.kv[i]);

  alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
  const turn_bytes a2 = alive.turn(2, alive_tokens, reply, alive_store);
  CHECK(a2.admitted.usable_tokens == 236);
  CHECK(r2.kv == a2.kv);             // every KV block of the conversation, as the session kept alive has it
  CHECK(r2.turn_end == a2.turn_end); // and the next turn end
  CHECK(reader.cache.check_invariants().has_value());
  CHECK(writer.cache.check_invariants().has_value());
}

TEST_CASE("media items: a turn end in the store is continued only under the same items") {
  const content_keyer keys = make_keyer();
  const std::array<std::byte, 3> cat{std::byte{1}, std::byte{2}, std::byte{3}};
  const media_item cat_at_100[] = {{.position = 100, .digest = cat}};
  const media_item cat_at_101[] = {{.position = 101, .digest = cat}};
  SUBCASE("an image before the turn end's block: its key is the image prompt's chain") {
    store_map store;
    process writer(keys);
    std::vector<token_id> tokens = turn_tokens(200, 1);
    (void)writer.turn(1, tokens, turn_tokens(37, 70000), store, true, {.media = cat_at_100}); // turn end at 236
    CHECK(writer.cache.metrics().remote_turn_ends_put == 1);
    const std::vector<token_id> next = concat(tokens, turn_tokens(20, 90000));
    process same(keys);
    same.prefetch(next, store, nullptr, {.media = cat_at_100});
    CHECK(same.cache.metrics().remote_turn_end_hits == 1);
    std::vector<token_id> same_next = next;
    const turn_bytes r = same.turn(2, same_next, turn_tokens(9, 95000), store, true, {.media = cat_at_100});
    CHECK(r.admitted.usable_tokens == 236);
    for (const std::span<const media_item> other : {std::span<const media_item>{}, std::span<const media_item>(cat_at_101)}) {
      process reader(keys);
      reader.prefetch(next, store, nullptr, {.media = other});
      CHECK(reader.cache.metrics().remote_turn_end_hits == 0);
      std::vector<token_id> other_next = next;
      const turn_bytes o = reader.turn(2, other_next, turn_tokens(9, 95000), store, true, {.media = other});
      CHECK(o.admitted.usable_tokens < 100); // nothing past the image is another prompt's
      CHECK(reader.cache.check_invariants().has_value());
    }
  }
  SUBCASE("an image inside the turn end's partial block: it stays in its engine") {
    store_map store;
    process writer(keys);
    std::vector<token_id> tokens = turn_tokens(230, 1);
    const media_item cat_at_226[] = {{.position = 226, .digest = cat}}; // block 14, [224, 240)
    const turn_bytes t = writer.turn(1, tokens, turn_tokens(7, 70000), store, true, {.media = cat_at_226});
    REQUIRE(!t.turn_end.empty()); // at 236, its partial block [224, 236) holding the image
    CHECK(writer.cache.metrics().remote_turn_ends_put == 0);
    CHECK(writer.cache.metrics().remote_turn_ends_lost == 1);
    CHECK(writer.cache.check_invariants().has_value());
  }
}

TEST_CASE("the equality can fail: without turn ends in the store the reader recomputes, and its bytes differ") {
  const content_keyer keys = make_keyer();
  store_map store, alive_store;
  process writer(keys, /*turn_ends=*/false), reader(keys, false), alive(keys, false);
  std::vector<token_id> tokens = turn_tokens(200, 1), alive_tokens = tokens;
  writer.turn(1, tokens, turn_tokens(37, 70000), store);
  alive.turn(1, alive_tokens, turn_tokens(37, 70000), alive_store);
  CHECK(writer.turn_end_puts == 0);
  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(20, 90000), reply = turn_tokens(9, 95000);
  next.insert(next.end(), user.begin(), user.end());
  reader.prefetch(next, store);
  CHECK(reader.probed_turn_ends == 0);
  const turn_bytes r2 = reader.turn(2, next, reply, store);
  CHECK(r2.admitted.usable_tokens == 0); // chat captures no prefill-exact snapshot without a branch
  alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
  const turn_bytes a2 = alive.turn(2, alive_tokens, reply, alive_store);
  CHECK(a2.admitted.usable_tokens == 236);
  CHECK(r2.turn_end != a2.turn_end); // a recomputation is not the session kept alive
  CHECK(r2.kv[13] != a2.kv[13]);     // the reply's decode-filled block, recomputed by a prefill
}

TEST_CASE("a tampered turn end, or one whose tokens differ from the prompt, is rejected and never used") {
  const content_keyer keys = make_keyer();
  store_map store;
  process writer(keys);
  std::vector<token_id> tokens = turn_tokens(200, 1);
  writer.turn(1, tokens, turn_tokens(37, 70000), store);
  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(20, 90000);
  next.insert(next.end(), user.begin(), user.end());

  SUBCASE("a header byte changed") {
    process reader(keys);
    reader.prefetch(next, store, [](bytes& h) {
      if (h.size() > 84 && h[8] == std::byte{2}) h[84] ^= std::byte{1}; // a turn end's first token
    });
    CHECK(reader.cache.metrics().remote_turn_end_hits == 0);
    CHECK(reader.cache.metrics().remote_rejected == 1);
    CHECK(reader.cache.check_invariants().has_value());
    auto p = reader.cache.admit(2, next);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens == 0); // nothing else restores this prompt
    CHECK(p->restore_exactness == exactness::prefill_exact);
  }
  SUBCASE("a position claimed past the prompt's tokens") {
    process reader(keys);
    reader.prefetch(next, store, [](bytes& h) {
      if (h.size() > 8 && h[8] == std::byte{2}) h[12] = std::byte{0xff}; // p = 255: past the block boundary
    });
    CHECK(reader.cache.metrics().remote_rejected == 1);
    CHECK(reader.cache.check_invariants().has_value());
  }
  SUBCASE("a prompt that continues the turn's blocks but not its partial block") {
    process reader(keys);
    std::vector<token_id> other(tokens.begin(), tokens.begin() + 230); // diverges at 230 < 236
    const std::vector<token_id> more = turn_tokens(30, 40000);
    other.insert(other.end(), more.begin(), more.end());
    reader.prefetch(other, store);
    CHECK(reader.cache.metrics().remote_turn_end_hits == 0);
    CHECK(reader.cache.metrics().remote_rejected == 1); // its key matched (boundary 224), its tokens did not
    auto p = reader.cache.admit(2, other);
    REQUIRE(p.has_value());
    CHECK(p->restore_exactness == exactness::prefill_exact);
    CHECK(p->usable_tokens == 0);
    CHECK(reader.cache.check_invariants().has_value());
  }
}

TEST_CASE("a turn end at a block boundary travels without a partial block") {
  const content_keyer keys = make_keyer();
  store_map store;
  process writer(keys), reader(keys);
  std::vector<token_id> tokens = turn_tokens(200, 1);
  writer.turn(1, tokens, turn_tokens(25, 70000), store); // the turn end at 224 = 14 B
  CHECK(writer.cache.metrics().remote_turn_ends_put == 1);
  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(7, 90000);
  next.insert(next.end(), user.begin(), user.end());
  reader.prefetch(next, store);
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  CHECK(reader.cache.check_invariants().has_value());
  auto p = reader.cache.admit(2, next);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 224);
  CHECK(p->copy_src == no_block);
  CHECK(p->restore_exactness == exactness::decode_continuation);
}

TEST_CASE("a short follow-up finds the turn end at the block boundary its own match reaches") {
  // The writer: a 200-token prompt P, 4 tokens decoded; its turn end at 204, boundary 192 = 12 B (its partial
  // block holds 192 .. 203). The reader computed P itself: blocks 0 .. 11 prefill-exact and a partial block of
  // 8 tokens. A follow-up of a few tokens has its last full block at 12, where the reader's match ends: no
  // block past that match is chained, and the turn end keyed by the chain of those 12 blocks (key_11) must
  // still be probed, fetched and restored.
  const content_keyer keys = make_keyer();
  store_map store, alive_store;
  const std::vector<token_id> prompt = turn_tokens(200, 1), reply1 = turn_tokens(5, 70000);

  enum class holds : std::uint8_t { gpu, some_on_host, all_on_host, own_turn_end };
  holds where = holds::gpu;
  std::size_t user_tokens = 3; // 208 tokens: the follow-up ends on a block boundary
  SUBCASE("3 user tokens, the reader's match in GPU memory") {}
  SUBCASE("1 user token") { user_tokens = 1; }
  SUBCASE("the reader's match in GPU memory, then the host tier") { where = holds::some_on_host; }
  SUBCASE("the reader's match in the host tier") { where = holds::all_on_host; }
  SUBCASE("the reader's own turn end at 200, below the writer's") { where = holds::own_turn_end; }
  CAPTURE(user_tokens);
  CAPTURE(static_cast<int>(where));
  // The reader first: its own turn end at 200 would go to the store under the same key as the writer's.
  const bool on_host = where == holds::some_on_host || where == holds::all_on_host;
  process reader(keys, /*turn_ends=*/true, /*kv_blocks=*/on_host ? 24 : 48);
  if (where == holds::own_turn_end) {
    std::vector<token_id> own = prompt;
    reader.turn(1, own, turn_tokens(1, 80000), store); // no token decoded: its turn end at 200
  } else {
    reader.prefill(1, prompt, store);
    REQUIRE(reader.cache.release(1).has_value());
  }
  REQUIRE(reader.cache.step_complete(reader.cache.current_epoch()).has_value());
  // Another prompt takes 20 or all 24 of the GPU blocks: P's deepest 8, or all 12, go to the host tier.
  const std::uint32_t taken = where == holds::all_on_host ? 24 : 20;
  if (on_host) {
    reader.prefill(3, turn_tokens(std::size_t{taken} * B, 500000), store);
    REQUIRE(reader.cache.release(3).has_value());
    REQUIRE(reader.cache.step_complete(reader.cache.current_epoch()).has_value());
    reader.run_transfers(store);
  }

  process writer(keys), alive(keys);
  std::vector<token_id> tokens = prompt, alive_tokens = prompt;
  writer.turn(1, tokens, reply1, store); // 4 tokens fed: the turn end at 204
  alive.turn(1, alive_tokens, reply1, alive_store);
  REQUIRE(writer.cache.metrics().remote_turn_ends_put == 1);

  std::vector<token_id> next = tokens; // P and the writer's 5 reply tokens
  const std::vector<token_id> user = turn_tokens(user_tokens, 90000), reply2 = turn_tokens(6, 95000);
  next.insert(next.end(), user.begin(), user.end());
  const std::uint64_t fetched_before = reader.cache.metrics().remote_bytes_fetched;
  const fetch_plan f = reader.prefetch(next, store);
  CHECK(reader.probed_turn_ends == 1); // boundary 192 alone: the prompt's last full block ends there
  CHECK(f.blocks == 0);                // the reader holds the chain under it
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  CHECK(reader.cache.metrics().remote_rejected == 0);
  CHECK(reader.cache.metrics().remote_bytes_fetched - fetched_before ==
        small_hybrid::bytes_per_kv_block + small_hybrid::bytes_per_snapshot); // the partial block and the snapshot
  CHECK(reader.cache.check_invariants().has_value());
  const turn_bytes r2 = reader.turn(2, next, reply2, store);
  CHECK(r2.admitted.usable_tokens == 204);
  CHECK(r2.admitted.restore_from_host);
  CHECK(r2.admitted.restore_exactness == exactness::decode_continuation);
  CHECK(r2.admitted.host_blocks_onboarded == (on_host ? taken - 12 : 0));

  alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
  const turn_bytes a2 = alive.turn(2, alive_tokens, reply2, alive_store);
  CHECK(a2.admitted.usable_tokens == 204);
  CHECK(r2.kv == a2.kv); // every KV block, the writer's partial block included, as the session kept alive has it
  CHECK(r2.turn_end == a2.turn_end);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("a turn end at a block boundary where the reader's own prefill-exact match ends is fetched") {
  // The writer's prompt fills 13 blocks and its turn end sits at its end, 208 = 13 B, with no partial block
  // (d = 13: the value is the snapshot alone). The reader computed the same prompt; a follow-up of one reply
  // and one user token ends inside block 13, so the reader's 13 blocks are the whole walk and the turn end is
  // keyed by their chain (key_12).
  const content_keyer keys = make_keyer();
  store_map store, alive_store;
  process writer(keys), reader(keys), alive(keys);
  const std::vector<token_id> prompt = turn_tokens(13 * B, 1), reply1 = turn_tokens(1, 70000);
  std::vector<token_id> tokens = prompt, alive_tokens = prompt;
  const turn_bytes t1 = writer.turn(1, tokens, reply1, store);
  REQUIRE(!t1.turn_end.empty());
  alive.turn(1, alive_tokens, reply1, alive_store);
  REQUIRE(writer.cache.metrics().remote_turn_ends_put == 1);
  reader.prefill(1, prompt, store);
  REQUIRE(reader.cache.release(1).has_value());

  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(1, 90000), reply2 = turn_tokens(6, 95000);
  next.insert(next.end(), user.begin(), user.end());
  reader.prefetch(next, store);
  CHECK(reader.probed_turn_ends == 1);
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  CHECK(reader.cache.metrics().remote_rejected == 0);
  CHECK(reader.cache.check_invariants().has_value());
  const turn_bytes r2 = reader.turn(2, next, reply2, store);
  CHECK(r2.admitted.usable_tokens == 13 * B);
  CHECK(r2.admitted.copy_src == no_block);
  CHECK(r2.admitted.restore_exactness == exactness::decode_continuation);
  alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
  const turn_bytes a2 = alive.turn(2, alive_tokens, reply2, alive_store);
  CHECK(a2.admitted.usable_tokens == 13 * B);
  CHECK(r2.kv == a2.kv);
  CHECK(r2.turn_end == a2.turn_end);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("a turn end inside the first block is found by a follow-up with no full block") {
  // A 5-token prompt and 3 tokens decoded: the turn end at 8, keyed by the root (key_{-1}) and boundary 0. The
  // follow-up (11 tokens) has no full block to match or chain.
  const content_keyer keys = make_keyer();
  store_map store, alive_store;
  process writer(keys), reader(keys), alive(keys);
  const std::vector<token_id> prompt = turn_tokens(5, 1), reply1 = turn_tokens(4, 70000);
  std::vector<token_id> tokens = prompt, alive_tokens = prompt;
  writer.turn(1, tokens, reply1, store);
  alive.turn(1, alive_tokens, reply1, alive_store);
  REQUIRE(writer.cache.metrics().remote_turn_ends_put == 1);
  std::vector<token_id> next = tokens;
  const std::vector<token_id> user = turn_tokens(2, 90000), reply2 = turn_tokens(6, 95000);
  next.insert(next.end(), user.begin(), user.end());
  reader.prefetch(next, store);
  CHECK(reader.probed_turn_ends == 1);
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  CHECK(reader.cache.check_invariants().has_value());
  const turn_bytes r2 = reader.turn(2, next, reply2, store);
  CHECK(r2.admitted.usable_tokens == 8);
  CHECK(r2.admitted.restore_from_host);
  alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
  const turn_bytes a2 = alive.turn(2, alive_tokens, reply2, alive_store);
  CHECK(a2.admitted.usable_tokens == 8);
  CHECK(r2.kv == a2.kv);
  CHECK(r2.turn_end == a2.turn_end);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("a conversation continues across three engines, each turn from the last writer's turn end") {
  const content_keyer keys = make_keyer();
  store_map store;
  process a(keys), b(keys), c(keys), alive(keys); // a sees turn 4 too, holding its own turn-1 blocks
  store_map alive_store;
  std::vector<token_id> tokens = turn_tokens(150, 1), alive_tokens = tokens;
  process* engines[] = {&a, &b, &c, &a};
  for (int turn = 0; turn < 4; ++turn) {
    const std::vector<token_id> reply = turn_tokens(11 + 7 * turn, 70000 + 1000 * turn);
    if (turn != 0) {
      const std::vector<token_id> user = turn_tokens(13 + turn, 90000 + 1000 * turn);
      tokens.insert(tokens.end(), user.begin(), user.end());
      alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
      engines[turn]->prefetch(tokens, store);
    }
    const auto before = static_cast<std::uint32_t>(tokens.size());
    const turn_bytes t = engines[turn]->turn(static_cast<seq_id>(turn + 1), tokens, reply, store);
    const turn_bytes k = alive.turn(static_cast<seq_id>(turn + 1), alive_tokens, reply, alive_store);
    CAPTURE(turn);
    CHECK(t.admitted.usable_tokens == k.admitted.usable_tokens);
    if (turn != 0) CHECK(t.admitted.usable_tokens + 14 + turn == before);
    CHECK(t.turn_end == k.turn_end);
    CHECK(t.kv == k.kv);
  }
  for (process* p : {&a, &b, &c}) CHECK(p->cache.check_invariants().has_value());
}

TEST_CASE("turn ends: fetched of a unit no turn-end fetch is pending for is refused and changes nothing") {
  const content_keyer keys = make_keyer();
  process reader(keys);
  const observable<cache_type> before(reader.cache, {});
  CHECK(reader.cache.fetched(remote_item::turn_end, 0, {}).error() == errc::invalid_argument);
  CHECK(reader.cache.fetched(remote_item::turn_end, 1u << 20, {}).error() == errc::invalid_argument);
  CHECK(observable<cache_type>(reader.cache, {}) == before);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("a turn end whose blocks are another computation than those the reader holds is rejected") {
  // Engines a and b both ran turn 1 (same tokens, each its own decode): b's turn end replaced a's in the
  // store, c continued from it. Engine a, holding its own turn-1 blocks, must not hang c's turn end under
  // them: equal tokens, but not the same computation (origins differ), so a keeps to its own turn end.
  const content_keyer keys = make_keyer();
  store_map store;
  process a(keys), b(keys), c(keys);
  std::vector<token_id> tokens = turn_tokens(150, 1), copy = tokens;
  a.turn(1, tokens, turn_tokens(11, 70000), store);
  b.turn(1, copy, turn_tokens(11, 70000), store);
  REQUIRE(copy == tokens);
  const std::vector<token_id> user2 = turn_tokens(14, 90000), user3 = turn_tokens(15, 91000);
  tokens.insert(tokens.end(), user2.begin(), user2.end());
  c.prefetch(tokens, store);
  CHECK(c.cache.metrics().remote_turn_end_hits == 1);
  const turn_bytes t2 = c.turn(2, tokens, turn_tokens(18, 71000), store);
  CHECK(t2.admitted.usable_tokens == 160);
  tokens.insert(tokens.end(), user3.begin(), user3.end());
  a.prefetch(tokens, store);
  CHECK(a.cache.metrics().remote_turn_end_hits == 0);
  CHECK(a.cache.metrics().remote_rejected == 1);
  CHECK(a.cache.check_invariants().has_value());
  auto p = a.cache.admit(3, tokens);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 160); // its own turn end
  CHECK(p->restore_exactness == exactness::decode_continuation);
  CHECK(a.cache.check_invariants().has_value());
}

TEST_CASE("a turn end whose blocks are reused before its step completed is not put, and is counted lost") {
  const content_keyer keys = make_keyer();
  store_map store;
  process writer(keys, /*turn_ends=*/true, /*kv_blocks=*/24);
  std::vector<token_id> tokens = turn_tokens(200, 1);
  // The turn end at 224, a block boundary: its blocks were all written in steps that completed, and only its
  // snapshot in this one.
  writer.turn(1, tokens, turn_tokens(25, 70000), store, /*end_step=*/false);
  // The step completes, and before the engine takes its transfers (which would put the turn end) another
  // prompt takes 20 of the 24 GPU blocks: the conversation's blocks are evicted (offloaded to the host tier,
  // the snapshot with the block it ends) and handed out again.
  REQUIRE(writer.cache.step_complete(writer.cache.current_epoch()).has_value());
  auto other = writer.cache.admit(2, turn_tokens(20 * B, 500000));
  REQUIRE(other.has_value());
  writer.run_transfers(store);
  CHECK(writer.turn_end_puts == 0);
  CHECK(writer.cache.metrics().remote_turn_ends_put == 0);
  CHECK(writer.cache.metrics().remote_turn_ends_lost == 1);
  CHECK(writer.cache.check_invariants().has_value());
}

namespace {

/// The position a stored header names.
std::uint32_t header_position(const bytes& h) {
  std::uint32_t v = 0;
  for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(h[12 + i]) << (8 * i);
  return v;
}

/// A continuation block in the store (a block header of class decode_continuation): a turn end's link.
bool is_link(const stored_value& v) {
  return v.header.size() > 9 && v.header[8] == std::byte{0} && v.header[9] == std::byte{1};
}

/// `turns` turns of one conversation (a 150-token prompt, then 20 user and 30 reply tokens a turn), turn t
/// on engine t % 2 of `engines`: what each turn put and fetched, with the session kept alive on `alive`.
struct flat_run {
  std::vector<std::uint64_t> put, fetched;
};
flat_run alternate(process& a, process& b, process& alive, store_map& store, int turns) {
  store_map alive_store;
  std::vector<token_id> tokens = turn_tokens(150, 1), alive_tokens = tokens;
  flat_run out;
  for (int turn = 0; turn < turns; ++turn) {
    process& p = turn % 2 == 0 ? a : b;
    const std::uint64_t put_before = a.cache.metrics().remote_bytes_put + b.cache.metrics().remote_bytes_put;
    const std::uint64_t fetched_before = p.cache.metrics().remote_bytes_fetched;
    const std::vector<token_id> reply = turn_tokens(30, 70000 + 1000 * static_cast<token_id>(turn));
    if (turn != 0) {
      const std::vector<token_id> user = turn_tokens(20, 90000 + 1000 * static_cast<token_id>(turn));
      tokens.insert(tokens.end(), user.begin(), user.end());
      alive_tokens.insert(alive_tokens.end(), user.begin(), user.end());
      p.prefetch(tokens, store);
    }
    const auto before = static_cast<std::uint32_t>(tokens.size());
    const turn_bytes t = p.turn(static_cast<seq_id>(turn + 1), tokens, reply, store);
    const turn_bytes k = alive.turn(static_cast<seq_id>(turn + 1), alive_tokens, reply, alive_store);
    CAPTURE(turn);
    if (turn != 0) CHECK(t.admitted.usable_tokens + 21 == before); // from the previous turn's end
    CHECK(t.turn_end == k.turn_end);
    CHECK(t.kv == k.kv);
    out.put.push_back(a.cache.metrics().remote_bytes_put + b.cache.metrics().remote_bytes_put - put_before);
    out.fetched.push_back(p.cache.metrics().remote_bytes_fetched - fetched_before);
  }
  return out;
}

} // namespace

TEST_CASE("a turn end puts and fetches only what the previous one lacks: flat in the conversation's length") {
  // Each turn adds 50 tokens (3 or 4 blocks). A turn end puts the blocks its own turn computed (those of
  // earlier turns are in the store as continuation blocks already), not the 3 t blocks and more since the
  // first prompt's end, and a reader that served the turn before last fetches the blocks of the last turn only.
  const content_keyer keys = make_keyer();
  store_map store;
  process a(keys, true, 64), b(keys, true, 64), alive(keys, true, 64);
  const flat_run r = alternate(a, b, alive, store, 8);
  const std::uint64_t block = small_hybrid::bytes_per_kv_block, snapshot = small_hybrid::bytes_per_snapshot;
  for (int turn = 1; turn < 8; ++turn) {
    CAPTURE(turn);
    CHECK(r.put[turn] <= snapshot + 5 * block); // at most 4 new full blocks and the partial one
    CHECK(r.put[turn] <= r.put[1] + block);
    if (turn < 2) continue; // turn 2's reader never saw the conversation: it fetches all of it
    CHECK(r.fetched[turn] <= r.fetched[2] + block);
    CHECK(r.fetched[turn] <= snapshot + 5 * block);
  }
  CHECK(r.put[7] <= r.put[1] + block); // turn 8's put is no larger than turn 2's, give or take a block
  for (process* p : {&a, &b}) {
    CHECK(p->cache.metrics().remote_rejected == 0);
    CHECK(p->cache.metrics().remote_misses == 0);
    CHECK(p->cache.check_invariants().has_value());
  }
  CHECK(b.cache.metrics().remote_turn_end_hits == 4);
  CHECK(a.cache.metrics().remote_turn_end_hits == 3);
  // Every continuation block was put once: as many puts as the store holds of them, one per decode-continuation
  // full block of the conversation.
  std::size_t links = 0;
  for (const auto& [key, v] : store) links += is_link(v) ? 1 : 0;
  CHECK(links >= 7 * 3);
  CHECK(a.link_puts + b.link_puts == links);
}

TEST_CASE("a turn end with a missing, corrupt or foreign link is a miss, never wrong data") {
  // Turns 1 and 2 on engines a and b; engine c, which never saw the conversation, continues turn 3 and needs
  // the links of both turns.
  const content_keyer keys = make_keyer();
  store_map store;
  process a(keys, true, 64), b(keys, true, 64), alive(keys, true, 64);
  (void)alternate(a, b, alive, store, 2);
  std::vector<token_id> tokens = turn_tokens(150, 1);
  for (int turn = 0; turn < 2; ++turn) {
    if (turn != 0) tokens = concat(tokens, turn_tokens(20, 90000 + 1000 * static_cast<token_id>(turn)));
    tokens = concat(tokens, turn_tokens(30, 70000 + 1000 * static_cast<token_id>(turn)));
  }
  const std::vector<token_id> next = concat(tokens, turn_tokens(20, 92000));
  const std::uint32_t turn_end = static_cast<std::uint32_t>(tokens.size()) - 1;

  SUBCASE("every link present, reported in any order: the turn end is kept") {
    for (const bool reverse : {false, true}) {
      process c(keys, true, 64);
      c.prefetch(next, store, nullptr, {}, reverse);
      CHECK(c.cache.metrics().remote_turn_end_hits == 1);
      CHECK(c.cache.check_invariants().has_value());
      auto p = c.cache.admit(3, next);
      REQUIRE(p.has_value());
      CHECK(p->usable_tokens == turn_end);
    }
  }
  auto refused = [&](store_map& damaged, void (*tamper)(bytes&), bool rejected) {
    process c(keys, true, 64);
    c.prefetch(next, damaged, tamper);
    CHECK(c.cache.metrics().remote_turn_end_hits == 0);
    CHECK((rejected ? c.cache.metrics().remote_rejected : c.cache.metrics().remote_misses) == 1);
    CHECK(c.cache.check_invariants().has_value());
    auto p = c.cache.admit(3, next);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens < turn_end); // nothing of the turn end is used
    CHECK(p->restore_exactness == exactness::prefill_exact);
    CHECK(c.cache.check_invariants().has_value());
  };
  SUBCASE("a link absent from the store: the probe shows it, and the turn end past it is not fetched") {
    store_map damaged = store;
    std::size_t erased = 0;
    for (auto it = damaged.begin(); it != damaged.end(); ++it)
      if (is_link(it->second) && header_position(it->second.header) > 200) { // one of turn 2's blocks
        damaged.erase(it);
        ++erased;
        break;
      }
    REQUIRE(erased == 1);
    process c(keys, true, 64);
    c.prefetch(next, damaged);
    CHECK(c.cache.metrics().remote_rejected == 0);
    CHECK(c.cache.check_invariants().has_value());
    auto p = c.cache.admit(3, next);
    REQUIRE(p.has_value());
    CHECK(p->usable_tokens < turn_end); // at most turn 1's end, whose links are all there
    CHECK(c.cache.check_invariants().has_value());
  }
  SUBCASE("a link lost between the probe and the fetch") {
    refused(store, [](bytes& h) {
      if (h.size() > 84 && h[8] == std::byte{0} && h[9] == std::byte{1}) h.clear();
    }, false);
  }
  SUBCASE("a link's token changed") {
    refused(store, [](bytes& h) {
      if (h.size() > 84 && h[8] == std::byte{0} && h[9] == std::byte{1}) h[84] ^= std::byte{1};
    }, true);
  }
  SUBCASE("a link of another computation (its origin differs from the one the turn end lists)") {
    refused(store, [](bytes& h) {
      if (h.size() > 84 && h[8] == std::byte{0} && h[9] == std::byte{1}) h.back() ^= std::byte{1};
    }, true);
  }
}
