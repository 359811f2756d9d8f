// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The remote tier (policy::remote_tier): what the host tier evicts goes to a store shared by a fleet, named
// by content keys; another cache prefetches it into host units, verifies each value's header against what
// its own prompt implies, and restores from it. Two caches stand for two processes here, with a store in
// memory and engine pools whose bytes are a function of the prefix they hold, so "bitwise" is checkable.
#include "support/cache_testing.hpp"
#include "support/content_keys.hpp"
#include "support/chat_turns.hpp"
#include "support/huge_tokens.hpp"

#include <reprise/keys/content_key.hpp>

#include <doctest/doctest.h>

#include <sys/resource.h>

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
using cache_type = prefix_cache<small_hybrid, policy::strict, xxh3_hasher, tiers>;
constexpr std::uint32_t B = small_hybrid::block_size;
constexpr std::uint32_t A = small_hybrid::alignment;
constexpr std::size_t unit_bytes = 64; // the test's stand-in for a block's or a snapshot's bytes

/// The bytes a cold prefill would leave in a block ending at `end`, or in a snapshot at `end`, for `tokens`.
std::vector<std::byte> content_of(std::span<const token_id> tokens, std::uint32_t end, bool snapshot) {
  std::uint64_t h = snapshot ? 0x9e3779b97f4a7c15ULL : 0xc2b2ae3d27d4eb4fULL;
  for (std::uint32_t i = 0; i < end; ++i) h = (h ^ static_cast<std::uint64_t>(tokens[i])) * 0x100000001b3ULL;
  std::vector<std::byte> v(unit_bytes);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>(h >> (8 * (k % 8)));
  return v;
}

struct stored_value {
  std::vector<std::byte> header, payload;
};

/// One process: a cache and the pools an engine would own, moving bytes as the plans say.
struct process {
  explicit process(const content_keyer& keys, std::uint32_t host_blocks = 6, std::uint32_t kv_blocks = 12,
                   bool write_through = false)
      : cache(make(keys, host_blocks, kv_blocks, write_through)),
        gpu_kv(kv_blocks), gpu_slots(cache.snapshot_slots()), host_kv(cache.host_kv_units()),
        host_slots(cache.host_snapshot_units()) {}

  static cache_type make(const content_keyer& keys, std::uint32_t host_blocks, std::uint32_t kv_blocks, bool write_through) {
    auto c = cache_type::create({.kv_blocks = kv_blocks,
                                 .snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                                 .hasher_seed = 3,
                                 .host_kv_budget_bytes = host_blocks * small_hybrid::bytes_per_kv_block,
                                 .host_snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                                 .remote_keys = &keys,
                                 .remote_write_through = write_through});
    REQUIRE(c.has_value());
    return std::move(*c);
  }

  void run_transfers(std::map<content_key, stored_value>& store) {
    const transfer_plan t = cache.take_transfers();
    for (const remote_put& p : t.remote_puts) {
      const bool block = p.item == remote_item::block;
      const auto& unit = p.device ? (block ? gpu_kv : gpu_slots)[p.unit] : (block ? host_kv : host_slots)[p.unit];
      store[p.key] = {{p.header.begin(), p.header.end()}, unit};
      ++puts;
      ++puts_of[p.key];
      through += p.device;
    }
    for (const unit_move& m : t.kv_offload) host_kv[m.dst] = gpu_kv[m.src];
    for (const unit_move& m : t.snapshot_offload) host_slots[m.dst] = gpu_slots[m.src];
    for (const unit_move& m : t.kv_onboard) gpu_kv[m.dst] = host_kv[m.src];
  }

  /// Serves `prompt` to the end (prefill, captures written, released), as a cold prefill would compute it.
  admit_plan serve(seq_id s, const std::vector<token_id>& prompt, std::map<content_key, stored_value>& store,
                   const extra_keys& keys = {}) {
    auto plan = cache.admit(s, prompt, keys);
    REQUIRE(plan.has_value());
    run_transfers(store);
    shared.clear();
    const admit_plan p = *plan;
    restored = p.restore_slot == no_slot ? std::vector<std::byte>{}
               : p.restore_from_host      ? host_slots[static_cast<std::size_t>(p.restore_slot)]
                                          : gpu_slots[static_cast<std::size_t>(p.restore_slot)];
    for (std::uint32_t i = 0; i < p.shared_blocks; ++i) shared.push_back(gpu_kv[static_cast<std::size_t>(p.block_table[i])]);
    for (std::uint32_t i = p.shared_blocks; i < p.block_table.size(); ++i)
      gpu_kv[static_cast<std::size_t>(p.block_table[i])] =
          content_of(prompt, std::min<std::uint32_t>((i + 1) * B, static_cast<std::uint32_t>(prompt.size())), false);
    std::vector<std::uint32_t> written;
    for (const capture_point& c : p.captures) {
      gpu_slots[static_cast<std::size_t>(c.slot)] = content_of(prompt, static_cast<std::uint32_t>(c.position), true);
      written.push_back(static_cast<std::uint32_t>(c.position));
    }
    REQUIRE(cache.commit(s, static_cast<std::uint32_t>(prompt.size()), written).has_value());
    REQUIRE(cache.release(s).has_value());
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    return p;
  }

  /// Prefetches `prompt` and answers every fetch from `store` (a corrupted header where `corrupt` says).
  /// With `probed`, asks the store which keys it has first, and fetches only those.
  fetch_plan prefetch(const std::vector<token_id>& prompt, std::map<content_key, stored_value>& store,
                      bool corrupt = false, bool probed = false, const extra_keys& keys = {}) {
    std::vector<content_key> present;
    if (probed) {
      auto probe = cache.probe(prompt, keys);
      REQUIRE(probe.has_value());
      for (const remote_probe& k : probe->keys)
        if (store.contains(k.key)) present.push_back(k.key);
    }
    auto plan = probed ? cache.prefetch(prompt, keys, present) : cache.prefetch(prompt, keys);
    REQUIRE(plan.has_value());
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    run_transfers(store); // the puts of what the reservations evicted, before the fetches write the units
    for (const remote_fetch& f : fetches) {
      auto it = store.find(f.key);
      if (it == store.end()) {
        REQUIRE(cache.fetched(f.item, f.unit, {}).has_value());
        continue;
      }
      (f.item == remote_item::block ? host_kv : host_slots)[f.unit] = it->second.payload;
      std::vector<std::byte> header = it->second.header;
      if (corrupt) header.back() ^= std::byte{1};
      REQUIRE(cache.fetched(f.item, f.unit, header).has_value());
    }
    return *plan;
  }

  cache_type cache;
  std::vector<std::vector<std::byte>> gpu_kv, gpu_slots, host_kv, host_slots;
  std::vector<std::vector<std::byte>> shared; ///< bytes of the blocks the last admits shared
  std::vector<std::byte> restored;            ///< bytes of the last restore
  std::uint64_t puts = 0, through = 0;
  std::map<content_key, int> puts_of;
};

/// Fills the process's GPU and host tiers with other prompts until `prompt`'s blocks went to the store.
void push_out(process& p, std::map<content_key, stored_value>& store, seq_id first) {
  for (seq_id s = first; s < first + 6; ++s) p.serve(s, iota_tokens(6 * B + 1, static_cast<token_id>(10000 * s)), store);
}

} // namespace

TEST_CASE("a prefix one process computed is restored by another from the store, bitwise") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process writer(keys), reader(keys, /*host_blocks=*/16);
  const std::vector<token_id> prompt = iota_tokens(2 * A + 9); // a snapshot at 128 (last_aligned)
  writer.serve(1, prompt, store);
  push_out(writer, store, 100);
  CHECK(writer.cache.metrics().remote_puts > 0);
  CHECK(writer.cache.check_invariants().has_value());

  // The reader has never seen the prompt: a longer one that continues it.
  std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  const fetch_plan f = reader.prefetch(next, store);
  CHECK(f.blocks == 8); // up to the last grid position, 128: a block past it could never be used
  CHECK(reader.cache.metrics().remote_hits == 9); // the prompt's 8 full blocks and the snapshot at 128
  CHECK(reader.cache.metrics().remote_misses == 1); // no snapshot at 64
  CHECK(reader.cache.check_invariants().has_value());
  const admit_plan p = reader.serve(1, next, store);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(p.restore_from_host);
  CHECK(p.restore_exactness == exactness::prefill_exact);
  CHECK(reader.cache.metrics().remote_blocks_onboarded == 8); // the 8 blocks onboarded came from the store
  CHECK(reader.restored == content_of(next, 2 * A, true)); // the writer's bytes
  REQUIRE(p.shared_blocks >= 8);
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(reader.shared[i] == content_of(next, (i + 1) * B, false));
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("media items: the store serves blocks before an image to text prompts, and past it the same image only") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process writer(keys);
  const std::array<std::byte, 3> cat{std::byte{1}, std::byte{2}, std::byte{3}};
  const media_item cat_at_70[] = {{.position = 70, .digest = cat}}; // block 4, between the grid points 64 and 128
  const media_item cat_at_71[] = {{.position = 71, .digest = cat}};
  const std::vector<token_id> prompt = iota_tokens(2 * A + 9); // a snapshot at 128 (last_aligned)
  writer.serve(1, prompt, store, {.media = cat_at_70});
  push_out(writer, store, 100);
  CHECK(writer.cache.check_invariants().has_value());
  const std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));

  SUBCASE("the same image at the same position: every block and the snapshot at 128") {
    process reader(keys, 16);
    reader.prefetch(next, store, false, false, {.media = cat_at_70});
    CHECK(reader.cache.metrics().remote_hits == 9);
    const admit_plan p = reader.serve(1, next, store, {.media = cat_at_70});
    CHECK(p.usable_tokens == 2 * A);
    CHECK(p.restore_from_host);
    CHECK(reader.cache.check_invariants().has_value());
  }
  for (const std::span<const media_item> other : {std::span<const media_item>{}, std::span<const media_item>(cat_at_71)}) {
    // Text, or the image a token later: blocks 0 .. 3 are the writer's (fetched and verified); block 4 on,
    // and the snapshot at 128 past the image, are other content.
    process reader(keys, 16);
    const fetch_plan f = reader.prefetch(next, store, false, false, {.media = other});
    CHECK(f.blocks >= 4);
    CHECK(reader.cache.metrics().remote_hits == 4);
    CHECK(reader.cache.metrics().remote_misses > 0);
    const admit_plan p = reader.serve(1, next, store, {.media = other});
    CHECK(p.usable_tokens == 0); // no snapshot at 64 anywhere, and the one at 128 is the image's
    CHECK(reader.cache.check_invariants().has_value());
  }
}

TEST_CASE("a fetched value whose header differs, or a miss, is never used") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process writer(keys), reader(keys, 16);
  const std::vector<token_id> prompt = iota_tokens(2 * A + 9);
  writer.serve(1, prompt, store);
  push_out(writer, store, 100);

  reader.prefetch(prompt, store, /*corrupt=*/true);
  CHECK(reader.cache.metrics().remote_rejected > 0);
  CHECK(reader.cache.metrics().remote_hits == 0);
  CHECK(reader.cache.metrics().host_blocks_held == 0);
  auto p = reader.cache.admit(1, prompt);
  REQUIRE(p.has_value());
  CHECK(p->usable_tokens == 0);
  CHECK(p->shared_blocks == 0);
  REQUIRE(reader.cache.release(1).has_value());

  // Another fleet (another seed) names everything differently: every fetch misses.
  const content_keyer other = make_keyer(8);
  process stranger(other, 16);
  stranger.prefetch(prompt, store);
  CHECK(stranger.cache.metrics().remote_misses > 0);
  CHECK(stranger.cache.metrics().remote_hits == 0);
  CHECK(stranger.cache.check_invariants().has_value());
}

TEST_CASE("write-through: a prefix is in the store once its step completed, while its writer still holds it") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process writer(keys, 6, 12, /*write_through=*/true), reader(keys, 16);
  const std::vector<token_id> prompt = iota_tokens(2 * A + 9); // 8 full blocks, a snapshot at 128
  writer.serve(1, prompt, store);
  // serve() completed the step; the next step's transfers put what it computed, from GPU memory.
  writer.run_transfers(store);
  CHECK(writer.through == 9); // 8 blocks and the snapshot
  CHECK(writer.puts == 9);
  CHECK(writer.cache.metrics().host_blocks_offloaded == 0); // nothing was evicted
  CHECK(writer.cache.metrics().remote_puts == 9);

  std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  reader.prefetch(next, store);
  CHECK(reader.cache.metrics().remote_hits == 9);
  const admit_plan p = reader.serve(1, next, store);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(p.restore_from_host);
  CHECK(reader.restored == content_of(next, 2 * A, true)); // the writer's bytes
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(reader.shared[i] == content_of(next, (i + 1) * B, false));

  // What went through is not put again when the writer's tiers evict it (what they evict before its step's
  // put went out is written back instead, once).
  push_out(writer, store, 100);
  CHECK(writer.cache.metrics().host_blocks_offloaded > 0);
  CHECK(writer.cache.metrics().host_block_evictions > 0);
  CHECK(writer.puts > writer.through);
  for (const auto& [key, count] : writer.puts_of) CHECK(count == 1);
  CHECK(writer.cache.check_invariants().has_value());
}

TEST_CASE("write-through waits for the step, and drops a block reused before its put") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  // A GPU pool of 9 blocks: the second prompt takes the first one's blocks.
  process writer(keys, 6, 9, /*write_through=*/true);
  const std::vector<token_id> first = iota_tokens(4 * B + 1);
  auto plan = writer.cache.admit(1, first);
  REQUIRE(plan.has_value());
  for (std::uint32_t i = 0; i < plan->block_table.size(); ++i)
    writer.gpu_kv[static_cast<std::size_t>(plan->block_table[i])] =
        content_of(first, std::min<std::uint32_t>((i + 1) * B, static_cast<std::uint32_t>(first.size())), false);
  REQUIRE(writer.cache.commit(1, static_cast<std::uint32_t>(first.size())).has_value());
  REQUIRE(writer.cache.release(1).has_value());
  writer.run_transfers(store);
  CHECK(writer.through == 0); // the step has not completed: its blocks may still be being written
  REQUIRE(writer.cache.step_complete(writer.cache.current_epoch()).has_value());

  // The next step plans, and commits, a prompt that evicts and republishes those block ids before the
  // engine takes the step's transfers: the publications of the completed step are gone, and the new ones
  // are not computed yet. No put may carry them.
  const std::vector<token_id> second = iota_tokens(8 * B + 1, 7000);
  auto p2 = writer.cache.admit(2, second);
  REQUIRE(p2.has_value());
  REQUIRE(writer.cache.commit(2, static_cast<std::uint32_t>(second.size())).has_value());
  const transfer_plan t = writer.cache.take_transfers();
  for (const remote_put& put : t.remote_puts) {
    CHECK(!put.device);
    CHECK(put.unit < writer.host_kv.size());
  }
  CHECK(writer.cache.metrics().remote_puts == t.remote_puts.size());
  CHECK(writer.cache.check_invariants().has_value());
}

TEST_CASE("a prefetch's reservations never evict what the store cannot hold: a turn end stays restorable") {
  // chat keeps a conversation's turn end: a decode-continuation snapshot, the reply's decode-filled block and
  // the partial block at its end. None of that can go to the store, so a fetch (which may miss) must not
  // take its host units.
  using chat_remote = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, tiers>;
  const content_keyer keys = make_keyer();
  auto made = chat_remote::create({.kv_blocks = 24,
                                   .snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                                   .hasher_seed = 2,
                                   .host_kv_budget_bytes = 14 * small_hybrid::bytes_per_kv_block,
                                   .host_snapshot_budget_bytes = 8 * small_hybrid::bytes_per_snapshot,
                                   .remote_keys = &keys});
  REQUIRE(made.has_value());
  auto& c = *made;

  // Turn 1: 200 prompt tokens, a 37-token reply; the turn end sits at 236.
  std::vector<token_id> tokens = iota_tokens(200);
  REQUIRE(chat_turn(c, 1, tokens, iota_tokens(37, 70000)).finished.capture.position == 236);

  // Another prompt fills GPU memory: the partial block, blocks 13 .. 1 (leaf first: the partial block is
  // the host tier's least recently used unit) and the turn end fill the host tier.
  auto b = c.admit(2, iota_tokens(23 * B, 100000));
  REQUIRE(b.has_value());
  CHECK(c.take_transfers().kv_offload.size() == 14);
  REQUIRE(c.release(2).has_value());
  REQUIRE(c.step_complete(c.current_epoch()).has_value());
  REQUIRE(c.metrics().host_blocks_held == c.host_kv_units());

  // A prompt of new content: every fetch would miss. Its first block reservation meets the partial block.
  auto plan = c.prefetch(iota_tokens(3 * A + 5, 500000));
  REQUIRE(plan.has_value());
  for (const remote_fetch& f : plan->fetches) CHECK(f.item != remote_item::block);
  for (const remote_fetch& f : plan->fetches) REQUIRE(c.fetched(f.item, f.unit, {}).has_value());
  CHECK(c.take_transfers().remote_puts.empty());
  CHECK(c.metrics().host_block_evictions == 0);
  CHECK(c.metrics().host_blocks_held == c.host_kv_units());

  // Turn 2 restores the turn end from the host tier, with every block up to it.
  auto t2 = c.admit(3, concat(tokens, iota_tokens(20, 90000)));
  REQUIRE(t2.has_value());
  CHECK(t2->usable_tokens == 236);
  CHECK(t2->restore_from_host);
  CHECK(t2->restore_exactness == exactness::decode_continuation);
  CHECK(c.check_invariants().has_value());
}

TEST_CASE("probe: a prefetch given what the store has fetches only that, and reserves nothing for new content") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process writer(keys, 6, 12, /*write_through=*/true);
  const std::vector<token_id> prompt = iota_tokens(2 * A + 9); // 8 full blocks, a snapshot at 2A
  writer.serve(1, prompt, store);
  writer.run_transfers(store);
  REQUIRE(store.size() == 9);

  // The next turn: 3A new tokens. The last grid position is 5A: 20 blocks and 5 snapshot positions could be
  // fetched; the store has 8 blocks and one snapshot.
  const std::vector<token_id> next = concat(prompt, iota_tokens(3 * A, 5000));
  process reader(keys, 24, 24);
  const cache_metrics before = reader.cache.metrics();
  auto listed = reader.cache.probe(next);
  REQUIRE(listed.has_value());
  REQUIRE(listed->keys.size() == 25);
  for (std::size_t i = 0; i < listed->keys.size(); ++i)
    CHECK(listed->keys[i].item == (i < 20 ? remote_item::block : remote_item::snapshot));
  std::size_t known = 0;
  for (const remote_probe& k : listed->keys) known += store.contains(k.key);
  CHECK(known == 9);
  CHECK(reader.cache.metrics() == before); // a probe reserves and changes nothing
  CHECK(reader.cache.check_invariants().has_value());

  const fetch_plan f = reader.prefetch(next, store, false, /*probed=*/true);
  CHECK(f.blocks == 8);
  CHECK(f.fetches.size() == 9);
  CHECK(reader.cache.metrics().remote_misses == 0);
  CHECK(reader.cache.metrics().remote_hits == 9);
  const admit_plan p = reader.serve(1, next, store);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(p.restore_from_host);
  CHECK(reader.restored == content_of(next, 2 * A, true)); // the writer's bytes

  // Without the probe the same prompt reserves a unit for every candidate: 20 blocks and the 2 deepest
  // snapshots (5A, 4A), of which the store has 8 blocks and neither snapshot: nothing to restore.
  process optimist(keys, 24, 24);
  const fetch_plan all = optimist.prefetch(next, store);
  CHECK(all.blocks == 20);
  CHECK(all.fetches.size() == 22);
  CHECK(optimist.cache.metrics().remote_misses == 14);
  CHECK(optimist.cache.metrics().remote_hits == 8);

  // A store that lost a block in the middle: the chain stops there, and no snapshot is reachable, so a model
  // with recurrent layers fetches nothing (blocks without a snapshot past the local restore point are
  // recomputed anyway).
  std::map<content_key, stored_value> gap = store;
  gap.erase(listed->keys[3].key);
  process late(keys, 24, 24);
  const fetch_plan none = late.prefetch(next, gap, false, /*probed=*/true);
  CHECK(none.fetches.empty());
  CHECK(late.cache.metrics().host_blocks_held == 0);
  CHECK(late.cache.check_invariants().has_value());
}

TEST_CASE("probe: the keys of a prompt do not depend on the prompts probed before it") {
  // A walk reuses the keys of earlier walks where the parent key and the block's tokens match; a block
  // changed in the middle, another tenant or a shorter prompt must still get their own keys.
  const content_keyer keys = make_keyer();
  const std::vector<token_id> a = iota_tokens(5 * A + 9);
  const std::array<std::byte, 3> digest{std::byte{9}, std::byte{8}, std::byte{7}};
  const media_item image[] = {{.position = 2 * A + 5, .digest = digest}};
  const media_item image_later[] = {{.position = 3 * A + 5, .digest = digest}};
  std::vector<token_id> changed = a;
  changed[2 * A + 3] = 99999; // block 2A/B on differ, and so every key after it
  const std::vector<std::pair<std::vector<token_id>, extra_keys>> prompts{
      {a, {}}, {changed, {}}, {a, {.tenant_salt = 4}}, {std::vector<token_id>(a.begin(), a.begin() + 3 * A + 1), {}},
      {a, {.media = image}}, {a, {}}, {a, {.media = image_later}}, {a, {}}};
  process seasoned(keys, 24, 24);
  for (const auto& [prompt, extra] : prompts) {
    process fresh(keys, 24, 24);
    auto expected = fresh.cache.probe(prompt, extra);
    REQUIRE(expected.has_value());
    const std::vector<remote_probe> want(expected->keys.begin(), expected->keys.end());
    auto got = seasoned.cache.probe(prompt, extra);
    REQUIRE(got.has_value());
    REQUIRE(got->keys.size() == want.size());
    for (std::size_t i = 0; i < want.size(); ++i) {
      CHECK(got->keys[i].item == want[i].item);
      CHECK(got->keys[i].key == want[i].key);
    }
  }
}

TEST_CASE("fetched rejects a unit no fetch is pending for, and changes nothing") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process p(keys);
  const cache_metrics before = p.cache.metrics();
  CHECK(p.cache.fetched(remote_item::block, 0, {}).error() == errc::invalid_argument);
  CHECK(p.cache.fetched(remote_item::snapshot, 1000, {}).error() == errc::invalid_argument);
  CHECK(p.cache.fetched(static_cast<remote_item>(7), 0, {}).error() == errc::invalid_argument);
  CHECK(p.cache.metrics() == before);
  const fetch_plan f = p.prefetch(iota_tokens(A + 1), store); // all miss: the units are free again
  CHECK(!f.fetches.empty());
  CHECK(p.cache.fetched(f.fetches[0].item, f.fetches[0].unit, {}).error() == errc::invalid_argument); // reported
  CHECK(p.cache.prefetch({}).error() == errc::invalid_argument);
  // A bad prompt to probe, or to a prefetch given what the store has, changes nothing either.
  const cache_metrics after = p.cache.metrics();
  const std::vector<content_key> none;
  const std::array<std::byte, max_multimodal_digest_bytes + 1> digest{};
  const media_item oversized[] = {{.position = 1, .digest = digest}};
  const media_item past_end[] = {{.position = A, .digest = std::span(digest).first(4)}};
  CHECK(p.cache.probe({}).error() == errc::invalid_argument);
  CHECK(p.cache.probe(iota_tokens(A), {.media = oversized}).error() == errc::invalid_argument);
  CHECK(p.cache.probe(iota_tokens(A), {.media = past_end}).error() == errc::out_of_range);
  CHECK(p.cache.prefetch(iota_tokens(A), {.media = past_end}).error() == errc::out_of_range);
  CHECK(p.cache.prefetch({}, {}, none).error() == errc::invalid_argument);
  const huge_tokens huge(std::size_t{max_sequence_tokens(B)} + 1);
  CHECK(p.cache.probe(huge.first(std::size_t{max_sequence_tokens(B)} + 1)).error() == errc::out_of_range);
  CHECK(p.cache.prefetch(huge.first(std::size_t{max_sequence_tokens(B)} + 1), {}, none).error() == errc::out_of_range);
  CHECK(p.cache.metrics() == after);
  CHECK(p.cache.check_invariants().has_value());
}

// A probe or a prefetch of a prompt of 2^31 tokens (accepted: the limit is 2^32 - 16) used to hash every block
// of it and size its key memo to the whole prompt, gigabytes, while admit refuses it at once. The walk now
// stops where no host unit could take another block.
TEST_CASE("probe and prefetch of a 2^31-token prompt do work and take memory bounded by the host tier") {
  const content_keyer keys = make_keyer();
  std::map<content_key, stored_value> store;
  process p(keys);
  p.serve(1, iota_tokens(2 * A + 9), store); // something matched on the GPU, the rest new
  const std::size_t n = std::size_t{1} << 31;
  const huge_tokens huge(n);
  auto peak_kib = [] {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_maxrss;
  };
  const long before = peak_kib();
  for (int round = 0; round < 2; ++round) {
    auto listed = p.cache.probe(huge.first(n));
    REQUIRE(listed.has_value());
    std::size_t blocks_listed = 0;
    for (const remote_probe& k : listed->keys) blocks_listed += k.item == remote_item::block;
    CHECK(blocks_listed > 0);
    CHECK(blocks_listed <= p.cache.host_kv_units());
    auto plan = p.cache.prefetch(huge.first(n));
    REQUIRE(plan.has_value());
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    CAPTURE(round);
    CHECK(!fetches.empty());
    CHECK(plan->blocks <= p.cache.host_kv_units());
    for (const remote_fetch& f : fetches) REQUIRE(p.cache.fetched(f.item, f.unit, {}).has_value());
    REQUIRE(p.cache.step_complete(p.cache.current_epoch()).has_value()); // the units are free again
  }
  CHECK(peak_kib() - before < 64 * 1024); // the memo of the old walk alone took gigabytes
  CHECK(p.cache.admit(2, huge.first(n)).error() == errc::pool_exhausted);
  CHECK(p.cache.check_invariants().has_value());
}

TEST_CASE("remote tier options: keys are required with it and refused without it") {
  const content_keyer keys = make_keyer();
  const cache_options base{.kv_blocks = 8,
                           .snapshot_budget_bytes = small_hybrid::bytes_per_snapshot,
                           .host_kv_budget_bytes = 4 * small_hybrid::bytes_per_kv_block};
  CHECK(cache_type::create(base).error() == errc::invalid_argument);
  cache_options with_keys = base;
  with_keys.remote_keys = &keys;
  CHECK(cache_type::create(with_keys).has_value());
  with_keys.remote_snapshot_candidates = 0;
  CHECK(cache_type::create(with_keys).error() == errc::invalid_argument);
  with_keys.remote_snapshot_candidates = 2;
  CHECK(prefix_cache<small_hybrid, policy::strict, xxh3_hasher, policy::tiers<policy::host_tier>>::create(with_keys).error() ==
        errc::unsupported_config);
  // Write-through is the remote tier's: refused without one.
  cache_options through = base;
  through.remote_write_through = true;
  CHECK(prefix_cache<small_hybrid, policy::strict, xxh3_hasher, policy::tiers<policy::host_tier>>::create(through).error() ==
        errc::unsupported_config);
  through.remote_keys = &keys;
  CHECK(cache_type::create(through).has_value());
  // A keyer for another block size is refused where it is made.
  auto fingerprint = model_fingerprint::make(model_config::of<small_hybrid>(), "w");
  REQUIRE(fingerprint.has_value());
  CHECK(content_keyer::make({.fleet_seed = 1, .fingerprint = *fingerprint}, model_config::of<attn_model>()).has_value() ==
        (attn_model::block_size == small_hybrid::block_size));
  content_key_context blank{};
  CHECK(content_keyer::make(blank, model_config::of<small_hybrid>()).error() == errc::invalid_argument);
}
