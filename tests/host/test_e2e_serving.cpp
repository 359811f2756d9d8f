// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// End to end: the example hybrid decoder served through prefix_cache by the example engine must decode
// bitwise what it decodes with caching off, under every policy, with evictions, forks and end-of-turn
// snapshots; and the equality checks must be able to fail.
#include "hybrid/config.hpp"
#include "hybrid/decoder.hpp"
#include "hybrid/kept_alive.hpp"
#include "hybrid/run.hpp"
#include "hybrid/uncached.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/ops/state_copy.hpp>
#include <reprise/policy/policies.hpp>

#include <doctest/doctest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <optional>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::example;
using presets::tiny_attention;
using presets::tiny_hybrid;

/// Three conversations of three turns. The system prompt is 1 more than a multiple of the block size and a
/// user message plus a reply is a multiple of it, so every turn ends (after its last fed token) exactly on a
/// block boundary, where `end_of_turn` may capture.
workload test_workload(std::uint32_t vocab) {
  return workload::make({.conversations = 3, .turns = 3, .system_tokens = 65, .user_tokens = 23, .reply_tokens = 9,
                         .seed = 11},
                        vocab);
}

const decoder& model_of(const decoder_config& c) {
  static std::map<std::string, decoder> models;
  auto it = models.find(c.pattern);
  if (it == models.end()) {
    result<decoder> m = decoder::make(c);
    REQUIRE(m.has_value());
    it = models.emplace(c.pattern, std::move(m).value()).first;
  }
  return it->second;
}

/// The caching-off run of `w` (memoized: several test cases compare against the same one).
template <class Preset>
const workload_result& cold_run(const workload& w) {
  static std::map<std::uint64_t, workload_result> runs;
  auto it = runs.find(w.config.seed);
  if (it == runs.end()) {
    uncached off(256, Preset::cache_model::block_size);
    it = runs.emplace(w.config.seed, run_workload(model_of(Preset::config()), off, w)).first;
  }
  return it->second;
}

template <class Preset, class Policy>
auto make_cache(std::uint32_t kv_blocks = 256, std::size_t snapshots = 64) {
  cache_options o{.kv_blocks = kv_blocks, .max_sequences = 8,
                  .snapshot_budget_bytes = snapshots * Preset::cache_model::bytes_per_snapshot, .hasher_seed = 1};
  auto c = prefix_cache<typename Preset::cache_model, Policy>::create(o);
  REQUIRE(c.has_value());
  return std::move(*c);
}

/// Every turn's tokens and final logits, compared bit for bit, with a readable failure.
void check_same(const workload_result& warm, const workload_result& cold) {
  REQUIRE(warm.turns.size() == cold.turns.size());
  for (std::size_t c = 0; c < cold.turns.size(); ++c) {
    REQUIRE(warm.turns[c].size() == cold.turns[c].size());
    for (std::size_t t = 0; t < cold.turns[c].size(); ++t) {
      CAPTURE(c);
      CAPTURE(t);
      CHECK(warm.turns[c][t].generated == cold.turns[c][t].generated);
      REQUIRE(warm.turns[c][t].last_logits.size() == cold.turns[c][t].last_logits.size());
      CHECK(std::memcmp(warm.turns[c][t].last_logits.data(), cold.turns[c][t].last_logits.data(),
                        cold.turns[c][t].last_logits.size() * sizeof(float)) == 0);
    }
  }
  CHECK(same_outputs(warm, cold));
}

using exact_restore = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::branch_point>,
                                               policy::accept_prefill_exact>;

} // namespace

TEST_CASE("block_sharing on the attention-only model decodes bitwise what caching off decodes") {
  const workload w = test_workload(tiny_attention::config().vocab);
  const workload_result& cold = cold_run<tiny_attention>(w);
  auto cache = make_cache<tiny_attention, policy::block_sharing>();
  const workload_result warm = run_workload(model_of(tiny_attention::config()), cache, w);
  check_same(warm, cold);
  CHECK(warm.stats.skipped_tokens > warm.stats.prompt_tokens / 2); // the system prompt and earlier turns hit
  CHECK(warm.stats.lost_tokens == 0);
  CHECK(warm.stats.prefill_tokens + warm.stats.skipped_tokens == cold.stats.prefill_tokens);
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("share_in_step: prompts admitted in one step read an earlier one's blocks in the same pass, bitwise") {
  // All three first turns are admitted in one step and prefilled in one forward call, which writes every
  // layer's new KV before any query reads: the second and third prompt read the system prompt's blocks
  // that the first one writes in that call.
  const workload w = test_workload(tiny_attention::config().vocab);
  const workload_result& cold = cold_run<tiny_attention>(w);
  using cache_t = prefix_cache<tiny_attention::cache_model, policy::block_sharing>;
  const engine<cache_t>::options batched{.max_running = 3, .max_admit_per_step = 3};
  auto run = [&](bool share) {
    auto cache = cache_t::create({.kv_blocks = 256, .max_sequences = 8, .hasher_seed = 1, .share_in_step = share});
    REQUIRE(cache.has_value());
    workload_result r = run_workload(model_of(tiny_attention::config()), *cache, w, batched);
    CHECK(cache->check_invariants().has_value());
    return r;
  };
  const workload_result shared = run(true), alone = run(false);
  check_same(shared, cold);
  check_same(alone, cold);
  CHECK(shared.metrics.blocks_shared_in_step == 2 * (65 / tiny_attention::cache_model::block_size));
  CHECK(alone.metrics.blocks_shared_in_step == 0);
  CHECK(shared.stats.skipped_tokens ==
        alone.stats.skipped_tokens + shared.metrics.blocks_shared_in_step * tiny_attention::cache_model::block_size);
}

TEST_CASE("snapshot_restore with prefill-exact snapshots decodes bitwise what caching off decodes") {
  const workload w = test_workload(tiny_hybrid::config().vocab);
  const workload_result& cold = cold_run<tiny_hybrid>(w);
  auto cache = make_cache<tiny_hybrid, exact_restore>();
  const workload_result warm = run_workload(model_of(tiny_hybrid::config()), cache, w);
  check_same(warm, cold);
  CHECK(warm.stats.skipped_tokens > 0);
  CHECK(warm.metrics.snapshot_hits > 0);
  CHECK(warm.stats.prefill_tokens + warm.stats.skipped_tokens == cold.stats.prefill_tokens);
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("memory_only shares KV blocks, skips nothing, and decodes bitwise what caching off decodes") {
  const workload w = test_workload(tiny_hybrid::config().vocab);
  const workload_result& cold = cold_run<tiny_hybrid>(w);
  auto cache = make_cache<tiny_hybrid, policy::memory_only>();
  const workload_result warm = run_workload(model_of(tiny_hybrid::config()), cache, w);
  check_same(warm, cold);
  CHECK(warm.stats.skipped_tokens == 0);
  CHECK(warm.stats.prefill_tokens == cold.stats.prefill_tokens);
  CHECK(warm.stats.kv_matched_tokens > 0);                        // shared blocks were read, not rewritten
  CHECK(warm.stats.peak_kv_blocks < cold.stats.peak_kv_blocks);   // and that saved memory
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("skipped and KV-matched token counts equal the numbers derived from the prompts alone") {
  // With a capture every alignment unit and nothing evicted, a prompt P can restore at the deepest multiple
  // u of the alignment unit A with u <= L - 1 that some earlier prompt P' shares and had prefilled:
  //   u(P) = max over earlier P' of floor(min(lcp(P, P'), |P'|, |P| - 1) / A) * A,
  // and its KV match is the same with the block size B for A (only prompt blocks are published: decode
  // blocks of a hybrid model are decode_continuation-exact). Computed here from the token lists alone.
  using every_unit = policy::snapshot_restore<policy::capture<policy::every<tiny_hybrid::cache_model::alignment>>,
                                              policy::accept_prefill_exact>;
  const workload w = test_workload(tiny_hybrid::config().vocab);
  auto cache = make_cache<tiny_hybrid, every_unit>();
  const workload_result warm = run_workload(model_of(tiny_hybrid::config()), cache, w);
  check_same(warm, cold_run<tiny_hybrid>(w));

  const std::uint32_t A = tiny_hybrid::cache_model::alignment, B = tiny_hybrid::cache_model::block_size;
  auto prompt_of = [&](seq_id id) -> const std::vector<token>& {
    return warm.prompts[(id - 1) / w.config.turns][(id - 1) % w.config.turns];
  };
  std::vector<const std::vector<token>*> earlier;
  std::uint64_t skipped = 0;
  REQUIRE(warm.admissions.size() == std::size_t{w.config.conversations} * w.config.turns);
  for (const admission& a : warm.admissions) {
    const std::vector<token>& p = prompt_of(a.id);
    std::uint32_t usable = 0, matched = 0;
    for (const std::vector<token>* q : earlier) {
      const auto lcp = static_cast<std::uint32_t>(
          std::mismatch(p.begin(), p.end(), q->begin(), q->end()).first - p.begin());
      const std::uint32_t reach = std::min({lcp, static_cast<std::uint32_t>(q->size()),
                                            static_cast<std::uint32_t>(p.size() - 1)});
      usable = std::max(usable, reach / A * A);
      matched = std::max(matched, reach / B * B);
    }
    CAPTURE(a.id);
    CHECK(a.prompt_tokens == p.size());
    CHECK(a.usable_tokens == usable);
    CHECK(a.kv_matched_tokens == matched);
    CHECK(a.lost_tokens == matched - usable);
    skipped += usable;
    earlier.push_back(&p);
  }
  CHECK(warm.stats.skipped_tokens == skipped);
  CHECK(skipped > 0);
}

TEST_CASE("tiny budgets force KV and snapshot evictions mid-workload and outputs still equal caching off") {
  const workload w = test_workload(tiny_hybrid::config().vocab);
  const workload_result& cold = cold_run<tiny_hybrid>(w);
  // One running sequence needs at most ceil(152 / 16) + 1 = 11 blocks; 14 blocks leave room for only a few
  // cached ones, and two snapshot slots for far fewer snapshots than the workload captures.
  auto cache = make_cache<tiny_hybrid, exact_restore>(/*kv_blocks=*/14, /*snapshots=*/2);
  const workload_result warm = run_workload(model_of(tiny_hybrid::config()), cache, w,
                                            engine<decltype(cache)>::options{.max_running = 1});
  check_same(warm, cold);
  CHECK(warm.metrics.kv_evictions > 0);
  CHECK(warm.metrics.snapshot_evictions_capacity + warm.metrics.snapshot_evictions_invalidated > 0);
  CHECK(warm.metrics.snapshot_hits > 0); // some hits survive the pressure
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("corrupting one value of a restored snapshot changes the output, and the comparison notices") {
  const workload w = test_workload(tiny_hybrid::config().vocab);
  const workload_result& cold = cold_run<tiny_hybrid>(w);
  auto cache = make_cache<tiny_hybrid, exact_restore>();
  std::uint32_t tampered = 0;
  engine<decltype(cache)>::options o{.max_running = w.config.conversations};
  o.before_restore = [&](state_memory& states, slot_id slot) {
    if (tampered++ != 0) return; // only the first restore
    const gated_delta_shape& d = tiny_hybrid::config().delta;
    states.delta(0)[static_cast<std::size_t>(slot) * d.value_heads * d.key_dim * d.value_dim + 5] += 0.25f;
  };
  const workload_result warm = run_workload(model_of(tiny_hybrid::config()), cache, w, o);
  REQUIRE(tampered > 0);
  CHECK_FALSE(same_outputs(warm, cold));
}

namespace {

using continuation = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::branch_point, policy::end_of_turn>,
                                              policy::accept_any>;

/// Checks `warm` against the kept-alive session (hybrid/kept_alive.hpp), the reference for decode_continuation
/// hits, and that every later turn was admitted exactly where the session resumed: where the previous turn's
/// live state stopped.
void check_against_kept_alive_session(const decoder& model, const workload& w, const workload_result& warm,
                                      std::span<const std::optional<std::uint32_t>> splits = {}) {
  const workload_result session = run_kept_alive(model, w, splits);
  check_same(warm, session);
  for (const admission& a : session.admissions) {
    if (turn_of(a.id, w.config.turns) == 0) continue;
    CAPTURE(a.id);
    const auto it = std::find_if(warm.admissions.begin(), warm.admissions.end(),
                                 [&](const admission& x) { return x.id == a.id; });
    REQUIRE(it != warm.admissions.end());
    CHECK(it->usable_tokens == a.usable_tokens);
  }
}

} // namespace

TEST_CASE("a decode_continuation snapshot resumes bitwise like the same session continuing, at any turn length") {
  // Turn ends on a block boundary (65 + 23 + 9 - 1 = 96), one past and one before it, 1-token replies, replies
  // ending exactly on and one past a boundary, and prompts shorter than the alignment unit (64) and than a block.
  const workload_config shapes[] = {
      {.conversations = 1, .turns = 3, .system_tokens = 65, .user_tokens = 23, .reply_tokens = 9, .seed = 5},
      {.conversations = 2, .turns = 4, .system_tokens = 40, .user_tokens = 7, .reply_tokens = 1, .seed = 6},
      {.conversations = 2, .turns = 3, .system_tokens = 50, .user_tokens = 11, .reply_tokens = 17, .seed = 7},
      {.conversations = 2, .turns = 3, .system_tokens = 47, .user_tokens = 3, .reply_tokens = 15, .seed = 8},
      {.conversations = 2, .turns = 3, .system_tokens = 46, .user_tokens = 3, .reply_tokens = 15, .seed = 9},
      {.conversations = 1, .turns = 4, .system_tokens = 5, .user_tokens = 3, .reply_tokens = 4, .seed = 10},
      // Lengths drawn per conversation and turn: turn ends fall anywhere in a block.
      {.conversations = 2, .turns = 4, .system_tokens = 45, .user_tokens = 3, .user_tokens_max = 30,
       .reply_tokens = 1, .reply_tokens_max = 20, .seed = 12},
  };
  const decoder& model = model_of(tiny_hybrid::config());
  for (const workload_config& shape : shapes) {
    CAPTURE(shape.system_tokens);
    CAPTURE(shape.user_tokens);
    CAPTURE(shape.reply_tokens);
    const workload w = workload::make(shape, model.config().vocab);
    auto cache = make_cache<tiny_hybrid, continuation>();
    const workload_result warm = run_workload(model, cache, w);
    check_against_kept_alive_session(model, w, warm);
    CHECK(warm.metrics.snapshot_hits == shape.conversations * (shape.turns - 1));
    CHECK(cache.check_invariants().has_value());
  }
}

namespace {
/// Where policy::chat splits or resumes a conversation's first prefill, from the tokens alone: at the end of
/// the last full KV block its first prompt shares with an earlier conversation's (the branch block), if any.
/// Holds when, as the engine admits one request per step, each earlier first prompt fills the block after
/// the shared prefix (so the cache sees that the prefix branches there).
std::vector<std::optional<std::uint32_t>> branch_block_splits(const workload& w, std::uint32_t block_size) {
  auto first_prompt = [&](std::uint32_t conv) {
    std::vector<token> p = w.system_prompt;
    p.insert(p.end(), w.user[conv][0].begin(), w.user[conv][0].end());
    return p;
  };
  std::vector<std::optional<std::uint32_t>> split(w.config.conversations);
  for (std::uint32_t conv = 1; conv < w.config.conversations; ++conv) {
    const std::vector<token> p = first_prompt(conv);
    std::size_t shared = 0;
    for (std::uint32_t e = 0; e < conv; ++e) {
      const std::vector<token> q = first_prompt(e);
      shared = std::max<std::size_t>(shared, static_cast<std::size_t>(
                                                 std::mismatch(p.begin(), p.end(), q.begin(), q.end()).first - p.begin()));
    }
    const std::size_t at = std::min(shared, p.size() - 1) / block_size * block_size;
    if (at != 0) split[conv] = static_cast<std::uint32_t>(at);
  }
  return split;
}
} // namespace

TEST_CASE("policy::chat decodes bitwise what kept-alive sessions decode, with turn lengths drawn per turn") {
  // Conversations share a system prompt of 90 tokens: the second captures at the end of the last block it
  // shares with the first (80, off the alignment grid 64: its prefill is split there) and the third restores
  // there; every later turn restores its turn end (often with a partial block). The reference: kept-alive
  // sessions whose first prefill is split at that block, found from the tokens alone.
  const decoder& model = model_of(tiny_hybrid::config());
  constexpr std::uint32_t A = tiny_hybrid::cache_model::alignment, B = tiny_hybrid::cache_model::block_size;
  const workload w = workload::make({.conversations = 3, .turns = 4, .system_tokens = 90, .user_tokens = 8,
                                     .user_tokens_max = 27, .reply_tokens = 1, .reply_tokens_max = 13, .seed = 13},
                                    model.config().vocab);
  const std::vector<std::optional<std::uint32_t>> splits = branch_block_splits(w, B);
  REQUIRE(splits[1].has_value());
  REQUIRE(*splits[1] % A != 0);
  auto cache = make_cache<tiny_hybrid, policy::chat>();
  const workload_result warm = run_workload(model, cache, w);
  check_against_kept_alive_session(model, w, warm, splits);
  CHECK(first_turn_splits(warm, w.config) == splits); // where the engine split or resumed: the same positions
  CHECK(warm.metrics.partial_blocks_copied > 0);
  CHECK(cache.check_invariants().has_value());
  // The split is what makes them equal: unsplit sessions differ in the last bits.
  CHECK_FALSE(same_outputs(warm, run_kept_alive(model, w)));
}

TEST_CASE("policy::chat with decode checkpoints decodes bitwise what kept-alive sessions decode") {
  // Replies long enough to cross the checkpoint grid (every 64 tokens): the checkpoints are written during
  // decode and kept per sequence, and nothing they do may change a bit of the outputs.
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = workload::make({.conversations = 2, .turns = 3, .system_tokens = 40, .user_tokens = 5,
                                     .user_tokens_max = 20, .reply_tokens = 40, .reply_tokens_max = 90, .seed = 15},
                                    model.config().vocab);
  cache_options o{.kv_blocks = 256, .max_sequences = 8,
                  .snapshot_budget_bytes = 16 * tiny_hybrid::cache_model::bytes_per_snapshot, .hasher_seed = 1,
                  .decode_checkpoint_interval = tiny_hybrid::cache_model::alignment};
  auto made = prefix_cache<tiny_hybrid::cache_model, policy::chat>::create(o);
  REQUIRE(made.has_value());
  auto cache = std::move(*made);
  const workload_result warm = run_workload(model, cache, w);
  // (The first conversation's prompt ends inside the block after the shared prefix, so that block is not
  // cached when the second is admitted: no branch capture. The splits come from what the engine did.)
  check_against_kept_alive_session(model, w, warm, first_turn_splits(warm, w.config));
  CHECK(warm.metrics.captures_written > warm.metrics.snapshot_hits); // checkpoints were written too
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("a kept-alive session's first prefill split on the chunk grid equals the unsplit one") {
  // Chunked prefill state at a chunk boundary is bitwise the unsplit prefill's, so a split there must change
  // nothing: a check of the split path itself.
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = workload::make({.conversations = 2, .turns = 2, .system_tokens = 75, .user_tokens = 9,
                                     .reply_tokens = 5, .seed = 14},
                                    model.config().vocab);
  const std::optional<std::uint32_t> split[] = {std::nullopt, tiny_hybrid::cache_model::alignment};
  const workload_result whole = run_kept_alive(model, w), parts = run_kept_alive(model, w, split);
  check_same(parts, whole);
  CHECK(parts.stats.prefill_tokens == whole.stats.prefill_tokens);
}

TEST_CASE("a corrupted turn-end snapshot off a block boundary is noticed (the equality can fail)") {
  const decoder& model = model_of(tiny_hybrid::config());
  const workload w = workload::make(
      {.conversations = 1, .turns = 3, .system_tokens = 50, .user_tokens = 11, .reply_tokens = 17, .seed = 7},
      model.config().vocab);
  auto reference_cache = make_cache<tiny_hybrid, continuation>();
  const workload_result reference = run_workload(model, reference_cache, w);
  REQUIRE(reference.metrics.partial_blocks_copied > 0);
  auto cache = make_cache<tiny_hybrid, continuation>();
  std::uint32_t tampered = 0;
  engine<decltype(cache)>::options o{.max_running = 1};
  o.before_restore = [&](state_memory& states, slot_id slot) {
    if (tampered++ != 0) return;
    const mamba2_shape& m = tiny_hybrid::config().ssm;
    states.ssm(0)[static_cast<std::size_t>(slot) * m.heads * m.head_dim * m.state_dim + 3] += 0.25f;
  };
  const workload_result warm = run_workload(model, cache, w, o);
  REQUIRE(tampered > 0);
  CHECK_FALSE(same_outputs(warm, reference));
}

TEST_CASE_TEMPLATE("a copy-on-write fork gives two continuations equal to two cold runs", Preset, tiny_hybrid,
                   tiny_attention) {
  using cache_policy = std::conditional_t<Preset::cache_model::has_recurrent, exact_restore, policy::block_sharing>;
  const decoder& model = model_of(Preset::config());
  const workload w = test_workload(model.config().vocab);
  std::vector<token> prompt = w.system_prompt;
  prompt.insert(prompt.end(), w.user[0][0].begin(), w.user[0][0].end()); // 88 tokens: a partial last block
  REQUIRE(prompt.size() % Preset::cache_model::block_size != 0);
  constexpr std::uint32_t reply = 6;

  // Cold: two independent requests, the second forced to a different first token.
  uncached off(64, Preset::cache_model::block_size);
  engine<uncached> cold(model, off, {.max_running = 2});
  cold.submit({1, prompt, reply, {}});
  std::vector<completion> cold_done;
  while (!cold.idle())
    for (completion& c : cold.step()) cold_done.push_back(std::move(c));
  REQUIRE(cold_done.size() == 1);
  const token other = cold_done[0].generated[0] == 1 ? 2 : 1;
  cold.submit({2, prompt, reply, other});
  while (!cold.idle())
    for (completion& c : cold.step()) cold_done.push_back(std::move(c));

  // Warm: one prefill, then a fork right after it; the fork copies the partial block and the live state.
  auto cache = make_cache<Preset, cache_policy>();
  engine<decltype(cache)> warm(model, cache, {.max_running = 2});
  warm.submit({1, prompt, reply, {}});
  CHECK(warm.step().empty());
  REQUIRE(warm.fork(1, 2, other, reply).has_value());
  CHECK(warm.blocks_of(2).size() == warm.blocks_of(1).size());
  CHECK(warm.blocks_of(2).back() != warm.blocks_of(1).back());                      // the partial block: copied
  CHECK(warm.blocks_of(2)[0] == warm.blocks_of(1)[0]);                              // full blocks: shared
  std::map<seq_id, completion> warm_done;
  while (!warm.idle())
    for (completion& c : warm.step()) warm_done[c.id] = std::move(c);
  REQUIRE(warm_done.size() == 2);
  for (const completion& c : cold_done) {
    CAPTURE(c.id);
    CHECK(warm_done[c.id].generated == c.generated);
    CHECK(std::memcmp(warm_done[c.id].last_logits.data(), c.last_logits.data(), c.last_logits.size() * sizeof(float)) == 0);
  }
  CHECK(warm_done[1].generated != warm_done[2].generated);
  CHECK(cache.check_invariants().has_value());
}

TEST_CASE("KV read through a block table with shared blocks equals the cold run's, gathered contiguously") {
  // Attention reads paged blocks directly; the opt-in gather kernel materializes the same view. A warm
  // sequence whose first blocks were written by another sequence must see exactly the KV a cold sequence
  // wrote into its own blocks.
  const decoder& model = model_of(tiny_attention::config());
  const decoder_config& cfg = model.config();
  const workload w = test_workload(cfg.vocab);
  std::vector<token> first = w.system_prompt, second = w.system_prompt;
  first.insert(first.end(), w.user[0][0].begin(), w.user[0][0].end());
  second.insert(second.end(), w.user[1][0].begin(), w.user[1][0].end());

  uncached off(64, cfg.attention.block_size);
  engine<uncached> cold(model, off, {.max_running = 1});
  cold.submit({1, second, 4, {}});
  cold.step();
  auto cache = make_cache<tiny_attention, policy::block_sharing>();
  engine<decltype(cache)> warm(model, cache, {.max_running = 2});
  warm.submit({1, first, 4, {}});
  warm.step();
  warm.submit({2, second, 4, {}});
  warm.step();
  REQUIRE(warm.admissions().back().usable_tokens == 64); // the system prompt's full blocks were shared

  auto gather = [&](auto& e, seq_id id, std::uint32_t layer, bool values) {
    const auto table = e.blocks_of(id);
    std::vector<std::int32_t> row(table.begin(), table.end());
    const std::int32_t len = static_cast<std::int32_t>(second.size());
    std::vector<float> out(std::size_t(len) * e.kv().token_width());
    const ops::kv_gather_args args{
        .pool = values ? e.kv().values(layer, 0) : e.kv().keys(layer, 0),
        .layout = {.blocks = e.kv().blocks(), .block_size = cfg.attention.block_size,
                   .kv_heads = cfg.attention.kv_heads, .head_dim = cfg.attention.head_dim, .element_bytes = 4},
        .block_table = ops::tensor<const std::int32_t, 2>(row.data(), 1, static_cast<std::int64_t>(row.size())),
        .seq_lens = {&len, 1},
        .out = out.data(),
        .out_tokens = len};
    REQUIRE(ops::gather_kv_host(args).has_value());
    return out;
  };
  for (std::uint32_t layer = 0; layer < cfg.count(layer_kind::attention); ++layer)
    for (bool values : {false, true}) {
      CAPTURE(layer);
      CAPTURE(values);
      CHECK(gather(warm, 2, layer, values) == gather(cold, 1, layer, values));
    }
}

namespace {
/// Serves `first` (decoding `replies` tokens) and then `second` through one engine; returns both completions.
template <class Cache>
std::pair<completion, completion> serve_two(const decoder& model, Cache& cache, std::vector<token> first,
                                            std::uint32_t replies, std::vector<token> second,
                                            std::uint32_t second_replies) {
  engine<Cache> e(model, cache, {.max_running = 2});
  std::vector<completion> done;
  e.submit({1, std::move(first), replies, {}});
  while (!e.idle())
    for (completion& c : e.step()) done.push_back(std::move(c));
  e.submit({2, std::move(second), second_replies, {}});
  while (!e.idle())
    for (completion& c : e.step()) done.push_back(std::move(c));
  REQUIRE(done.size() == 2);
  return {done[0], done[1]};
}

/// A session that prefills `prompt`, feeds `fed` one decode step each, then prefills `rest` and decodes
/// `replies` tokens greedily: what a prompt restoring the state at prompt + fed and computing `rest` must equal.
completion session(const decoder& model, const std::vector<token>& prompt, std::span<const token> fed,
                   const std::vector<token>& rest, std::uint32_t replies) {
  const decoder_config& cfg = model.config();
  const auto blocks = static_cast<std::uint32_t>((prompt.size() + fed.size() + rest.size() + replies) /
                                                     cfg.attention.block_size + 2);
  kv_memory kv(cfg, blocks);
  state_memory states(cfg, 1);
  states.zero(0);
  std::vector<block_id> table(blocks);
  for (std::uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<block_id>(i);
  std::vector<float> logits(cfg.vocab);
  std::uint32_t position = 0;
  auto run = [&](pass p, std::span<const token> t) {
    const sequence_step step{position, static_cast<std::uint32_t>(t.size()), table, 0, {}, position};
    model.forward(p, t, {&step, 1}, kv, states, logits);
    position += static_cast<std::uint32_t>(t.size());
  };
  run(pass::prefill, prompt);
  for (const token t : fed) run(pass::decode, {&t, 1});
  run(pass::prefill, rest);
  completion out{2, {static_cast<token>(math::argmax(logits))}, {}};
  while (out.generated.size() < replies) {
    run(pass::decode, {&out.generated.back(), 1});
    out.generated.push_back(static_cast<token>(math::argmax(logits)));
  }
  out.last_logits = logits;
  return out;
}
} // namespace

TEST_CASE("a prompt that departs from a reply restores a decode checkpoint, bitwise the session continuing there") {
  // A 40-token prompt decodes 100 tokens: checkpoints at 64 and 128 (interval 64), turn end at 139. The next
  // prompt keeps the conversation only up to 100 and continues differently (an edited reply): it restores
  // the checkpoint at 64 and must equal the session that decoded to 64 and was then fed the rest.
  const decoder& model = model_of(tiny_hybrid::config());
  cache_options o{.kv_blocks = 256, .max_sequences = 8,
                  .snapshot_budget_bytes = 16 * tiny_hybrid::cache_model::bytes_per_snapshot, .hasher_seed = 1,
                  .decode_checkpoint_interval = tiny_hybrid::cache_model::alignment};
  auto made = prefix_cache<tiny_hybrid::cache_model, policy::chat>::create(o);
  REQUIRE(made.has_value());
  auto cache = std::move(*made);
  std::vector<token> prompt(40);
  for (std::size_t i = 0; i < prompt.size(); ++i) prompt[i] = static_cast<token>(1 + (i * 7) % 60);
  // The engine feeds every decoded token but the last; the reply's first 60 tokens are the same whatever
  // follows, so run the first request once to learn them.
  auto [a, unused] = serve_two(model, cache, prompt, 100, prompt, 1);
  std::vector<token> conversation = prompt;
  conversation.insert(conversation.end(), a.generated.begin(), a.generated.end());
  std::vector<token> edited(conversation.begin(), conversation.begin() + 100);
  for (token t = 0; t < 9; ++t) edited.push_back(static_cast<token>(3 + t));

  auto fresh = prefix_cache<tiny_hybrid::cache_model, policy::chat>::create(o);
  REQUIRE(fresh.has_value());
  auto [first, second] = serve_two(model, *fresh, prompt, 100, edited, 5);
  CHECK(first.generated == a.generated);
  CHECK(fresh->metrics().snapshot_hits == 1);
  const std::vector<token> rest(edited.begin() + 64, edited.end());
  const completion want =
      session(model, prompt, std::span<const token>(conversation).subspan(40, 24), rest, 5);
  CHECK(second.generated == want.generated);
  REQUIRE(second.last_logits.size() == want.last_logits.size());
  CHECK(std::memcmp(second.last_logits.data(), want.last_logits.data(), want.last_logits.size() * sizeof(float)) == 0);
}
