// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A minimal inference engine that uses Reprise the way a real one does: the integration example.
///
/// One `step()` is one scheduler iteration with continuous batching:
///   1. decode: `cache.extend` by the token each running sequence feeds next, one forward call for all,
///      `cache.commit`;
///   2. admit waiting requests -> `cache.admit` plans shared blocks, the skip u, a restore slot, captures;
///   3. restore: one batched slot copy (snapshot slot -> the sequence's live slot) for every admitted request;
///   4. prefill: one forward call over the non-skipped tokens [u, L) of every admitted request, writing KV
///      into the planned blocks and snapshots into the planned capture slots (a capture off the alignment
///      grid splits the call there); then `cache.commit`;
///   5. finish sequences that have generated enough: `cache.finish` (copy the live state into the slot of an
///      end-of-turn capture when the policy plans one), free the live slot;
///   6. `cache.step_complete(epoch)`: this host engine runs synchronously, so step n is complete here.
///
/// With a host tier (`policy::tiers<policy::host_tier>`) the engine also owns host pools shaped like its
/// GPU pools and runs `cache.take_transfers()` after every cache call that can take units (extend, admit,
/// fork, finish), before any copy or forward pass that call planned: offloads, then onboards. A restore
/// from the host copies a host snapshot unit into the live slot.
///
/// `Cache` is `reprise::prefix_cache<Model, Policy>` for any of the three policies, or `uncached` (the
/// caching-off baseline). The engine owns the memory (KV blocks, recurrent slots); Reprise owns the ids.

#include "hybrid/decoder.hpp"
#include "hybrid/math.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>
#include <reprise/ops/state_copy.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <functional>
#include <optional>
#include <span>
#include <vector>

namespace reprise::example {

/// One turn: a prompt, how many tokens to decode greedily, and optionally a forced first token.
struct request {
  seq_id id = 0;
  std::vector<token> prompt;
  std::uint32_t max_new_tokens = 1;
  std::optional<token> first_token{}; ///< decode this instead of the greedy choice (tests of forks)
  bool last_turn = false;             ///< the conversation ends with this turn (`finish_options::last_turn`)
};

/// A finished request: the decoded tokens and the logits that chose the last one.
struct completion {
  seq_id id = 0;
  std::vector<token> generated;
  std::vector<float> last_logits;
};

/// What `admit` planned for one request, in admission order (tests recompute these independently).
struct admission {
  seq_id id = 0;
  std::uint32_t prompt_tokens = 0;
  std::uint32_t usable_tokens = 0;
  std::uint32_t kv_matched_tokens = 0;
  std::uint32_t lost_tokens = 0;
  /// The first capture off the alignment grid (`policy::branch_block`): the prefill was split there. 0: none.
  std::uint32_t split_at = 0;
};

/// What the engine computed and what the cache saved it, summed over admissions.
struct engine_stats {
  std::uint64_t prompt_tokens = 0;
  std::uint64_t prefill_tokens = 0; ///< computed by prefill (L - u summed)
  std::uint64_t skipped_tokens = 0; ///< u summed
  std::uint64_t kv_matched_tokens = 0;
  std::uint64_t lost_tokens = 0;    ///< KV-matched but recomputed: no snapshot at a usable position
  std::uint64_t decode_tokens = 0;
  std::uint32_t peak_kv_blocks = 0; ///< blocks referenced by live sequences, at the peak
  std::uint64_t peak_snapshot_bytes = 0;
  std::uint64_t steps = 0;
};

[[noreturn]] inline void fail(const char* what, errc e) {
  std::fprintf(stderr, "reprise example engine: %s failed: %.*s\n", what, static_cast<int>(to_string(e).size()),
               to_string(e).data());
  std::abort();
}

/// Whether `Cache` is a `prefix_cache` with a host tier.
template <class Cache>
constexpr bool has_host_tier() {
  if constexpr (requires { typename Cache::tiers_type; }) return policy::tier_traits<typename Cache::tiers_type>::host;
  else return false;
}

template <class Cache>
class engine {
  static constexpr bool host_tier = has_host_tier<Cache>();

public:
  struct options {
    std::uint32_t max_running = 8;        ///< live sequences at most (one live recurrent slot each)
    std::uint32_t max_admit_per_step = 1; ///< admissions per step: later ones then hit earlier ones' blocks
    /// Called with the snapshot slot just before each restore copy (the host pools' for a restore from the
    /// host tier). Tests use it to tamper with a snapshot and prove that the equality checks can fail.
    std::function<void(state_memory&, slot_id slot)> before_restore{};
  };

  /// The KV pool has `cache.kv_blocks()` blocks; the slot pool holds the cache's snapshot slots followed by
  /// one live slot per running sequence.
  /// Precondition: with a `prefix_cache`, its `Model` describes the decoder's state (checked: a mismatch
  /// would make the cache's byte and alignment arithmetic wrong).
  engine(const decoder& model, Cache& cache, options o)
      : model_(model), cache_(cache), opt_(std::move(o)), kv_(model.config(), cache.kv_blocks()),
        states_(model.config(), cache.snapshot_slots() + opt_.max_running) {
    if constexpr (requires { typename Cache::model_type; }) {
      const model_facts expected = Cache::model_type::facts;
      const auto actual = model.config().validate();
      if (!actual || actual->bytes_per_snapshot() != expected.bytes_per_snapshot ||
          actual->bytes_per_kv_block() != expected.bytes_per_kv_block || actual->alignment() != expected.alignment ||
          actual->block_size() != expected.block_size)
        fail("engine: the cache's model type does not describe the decoder", errc::invalid_argument);
    }
    for (std::uint32_t i = 0; i < opt_.max_running; ++i)
      free_live_.push_back(static_cast<slot_id>(cache.snapshot_slots() + i));
    if constexpr (host_tier) {
      host_kv_.emplace(model.config(), cache.host_kv_units());
      if (cache.host_snapshot_units() != 0) host_states_.emplace(model.config(), cache.host_snapshot_units());
    }
    if constexpr (requires { cache.alignment(); }) alignment_ = cache.alignment();
  }

  void submit(request r) { waiting_.push_back(std::move(r)); }
  bool idle() const noexcept { return waiting_.empty() && running_.empty(); }
  const engine_stats& stats() const noexcept { return stats_; }
  const std::vector<admission>& admissions() const noexcept { return admissions_; }
  /// The block table of a running sequence (empty if it is not running).
  std::span<const block_id> blocks_of(seq_id id) const noexcept {
    for (const sequence& s : running_)
      if (s.id == id) return s.blocks;
    return {};
  }
  kv_memory& kv() noexcept { return kv_; }
  state_memory& states() noexcept { return states_; }

  /// Runs one scheduler step (see the file comment) and returns the requests that finished in it.
  std::vector<completion> step() {
    decode(); // before admitting, so that sequences admitted in this step are not decoded in it
    admit_and_prefill();
    note_peaks(); // before finishing releases blocks: the step's peak occupancy
    std::vector<completion> done = finish();
    if (auto r = cache_.step_complete(cache_.current_epoch()); !r) fail("step_complete", r.error());
    ++stats_.steps;
    return done;
  }

  /// Copy-on-write fork of a running sequence between steps: `dst` continues from `src`'s position with
  /// `first_token` as its next token (where `src` feeds its own greedy choice).
  /// Errors: those of `cache.fork`; `pool_exhausted` when no live slot is free.
  result<void> fork(seq_id src, seq_id dst, token first_token, std::uint32_t max_new_tokens) {
    auto it = std::find_if(running_.begin(), running_.end(), [&](const sequence& s) { return s.id == src; });
    if (it == running_.end()) return errc::unknown_sequence;
    if (free_live_.empty()) return errc::pool_exhausted;
    auto plan = cache_.fork(src, dst);
    if (!plan) return plan.error();
    run_transfers();
    sequence copy = *it;
    copy.id = dst;
    copy.blocks.assign(plan->block_table.begin(), plan->block_table.end());
    copy.live_slot = take_live();
    copy.generated.back() = first_token;
    copy.max_new_tokens = max_new_tokens;
    if (plan->copy_src != no_block) copy_kv_block(plan->copy_src, plan->copy_dst);
    if (plan->copy_recurrent_state) copy_slot(it->live_slot, copy.live_slot);
    running_.push_back(std::move(copy));
    return {};
  }

private:
  struct sequence {
    seq_id id;
    std::vector<token> tokens; ///< prompt, then every decoded token fed so far
    std::uint32_t prompt_length;
    std::vector<block_id> blocks;
    slot_id live_slot;
    std::uint32_t max_new_tokens;
    std::vector<token> generated;
    std::vector<float> logits;
    bool last_turn = false;
  };

  slot_id take_live() {
    const slot_id s = free_live_.back();
    free_live_.pop_back();
    return s;
  }

  void copy_slots(std::span<const ops::copy_pair> pairs) {
    if (pairs.empty()) return;
    std::vector<ops::pool_view> pools;
    states_.for_each_pool([&](float* base, std::size_t bytes) {
      pools.push_back({base, bytes, static_cast<std::int64_t>(states_.slots())});
    });
    if (auto r = ops::copy_units_host(pools, pairs); !r) fail("slot copy", r.error());
  }

  void copy_slot(slot_id src, slot_id dst) {
    const ops::copy_pair pair{src, dst};
    copy_slots({&pair, 1});
  }

  void copy_kv_block(block_id src, block_id dst) {
    const ops::copy_pair pair{src, dst};
    if (auto r = ops::copy_units_host(kv_pools(kv_), {&pair, 1}); !r) fail("KV block copy", r.error());
  }

  /// The K and V pools of every attention layer of `m`, one unit per block.
  std::vector<ops::pool_view> kv_pools(kv_memory& m) const {
    std::vector<ops::pool_view> pools;
    const std::size_t bytes = m.block_floats() * sizeof(float);
    for (std::uint32_t l = 0; l < model_.config().count(layer_kind::attention); ++l) {
      pools.push_back({m.keys(l, 0), bytes, m.blocks()});
      pools.push_back({m.values(l, 0), bytes, m.blocks()});
    }
    return pools;
  }
  static std::vector<ops::pool_view> state_pools(state_memory& m) {
    std::vector<ops::pool_view> pools;
    m.for_each_pool([&](float* base, std::size_t bytes) { pools.push_back({base, bytes, static_cast<std::int64_t>(m.slots())}); });
    return pools;
  }

  /// Units `moves[i].src` of `from` into units `moves[i].dst` of `to`, pool by pool (the two lists have the
  /// same layers in the same order).
  static void move_units(std::span<const ops::pool_view> from, std::span<const ops::pool_view> to,
                         std::span<const unit_move> moves, const char* what) {
    if (moves.empty()) return;
    std::vector<ops::pool_pair_view> layers;
    for (std::size_t i = 0; i < from.size(); ++i) layers.push_back({from[i], to[i]});
    std::vector<ops::copy_pair> pairs;
    for (const unit_move& m : moves) pairs.push_back({static_cast<std::int32_t>(m.src), static_cast<std::int32_t>(m.dst)});
    if (auto r = ops::transfer_units_host(layers, pairs); !r) fail(what, r.error());
  }

  /// The host tier's moves planned by the cache calls since the last run: offloads (device to host) before
  /// onboards (host to device), as `transfer_plan` orders them.
  void run_transfers() {
    if constexpr (host_tier) {
      const transfer_plan t = cache_.take_transfers();
      if (t.empty()) return;
      const std::vector<ops::pool_view> gpu_kv = kv_pools(kv_), host_kv = kv_pools(*host_kv_);
      move_units(gpu_kv, host_kv, t.kv_offload, "KV offload");
      if (!t.snapshot_offload.empty()) move_units(state_pools(states_), state_pools(*host_states_), t.snapshot_offload, "snapshot offload");
      move_units(host_kv, gpu_kv, t.kv_onboard, "KV onboard");
    }
  }

  void admit_and_prefill() {
    std::vector<sequence*> admitted;
    std::vector<sequence_step> steps;
    std::vector<ops::copy_pair> restores;
    std::vector<unit_move> host_restores; // host snapshot unit -> live slot
    std::vector<std::vector<capture_point>> captures;
    for (std::uint32_t n = 0; n < opt_.max_admit_per_step && !waiting_.empty() && !free_live_.empty(); ++n) {
      request& r = waiting_.front();
      auto plan = cache_.admit(r.id, r.prompt);
      if (!plan) {
        if (plan.error() == errc::pool_exhausted) break; // retry once running sequences finish
        fail("admit", plan.error());
      }
      run_transfers(); // before the copies and the prefill below read or write the units it moved
      const auto length = static_cast<std::uint32_t>(r.prompt.size());
      sequence& s = running_.emplace_back(sequence{r.id, std::move(r.prompt), length, {}, take_live(),
                                                   r.max_new_tokens, {}, {}, r.last_turn});
      if (r.first_token) s.generated.push_back(*r.first_token);
      waiting_.pop_front();
      s.blocks.assign(plan->block_table.begin(), plan->block_table.end());
      const std::uint32_t u = plan->usable_tokens;
      if (plan->restore_slot != no_slot && plan->restore_from_host)
        host_restores.push_back({static_cast<std::uint32_t>(plan->restore_slot), static_cast<std::uint32_t>(s.live_slot)});
      else if (plan->restore_slot != no_slot)
        restores.push_back({plan->restore_slot, s.live_slot});
      captures.emplace_back(plan->captures.begin(), plan->captures.end());
      steps.push_back(sequence_step{u, length - u, {}, s.live_slot, {}, plan->kv_matched_tokens});
      admitted.push_back(&s);
      stats_.prompt_tokens += length;
      stats_.prefill_tokens += length - u;
      stats_.skipped_tokens += u;
      stats_.kv_matched_tokens += plan->kv_matched_tokens;
      stats_.lost_tokens += plan->tokens_lost_to_missing_snapshot;
      const auto off_grid = std::find_if(plan->captures.begin(), plan->captures.end(),
                                         [&](const capture_point& c) { return splits_prefill(c); });
      admissions_.push_back({s.id, length, u, plan->kv_matched_tokens, plan->tokens_lost_to_missing_snapshot,
                             off_grid == plan->captures.end() ? 0u : static_cast<std::uint32_t>(off_grid->position)});
      if (plan->restore_slot != no_slot && opt_.before_restore) {
        if constexpr (host_tier) {
          if (plan->restore_from_host) opt_.before_restore(*host_states_, plan->restore_slot);
          else opt_.before_restore(states_, plan->restore_slot);
        } else {
          opt_.before_restore(states_, plan->restore_slot);
        }
      }
      // A turn end kept off a block boundary: its partial block is copied into the sequence's own (copy on
      // write) before the prefill appends to it.
      if (plan->copy_src != no_block) copy_kv_block(plan->copy_src, plan->copy_dst);
    }
    if (admitted.empty()) return;
    copy_slots(restores); // restore before any prefill reads the live slots
    if constexpr (host_tier) {
      if (!host_restores.empty()) move_units(state_pools(*host_states_), state_pools(states_), host_restores, "restore from the host");
    }
    for (std::size_t i = 0; i < admitted.size(); ++i) steps[i].blocks = admitted[i]->blocks;
    const std::vector<float> logits = prefill(admitted, steps, captures);
    for (std::size_t i = 0; i < admitted.size(); ++i) {
      sequence& s = *admitted[i];
      std::vector<std::uint32_t> written;
      for (const capture_point& c : captures[i]) written.push_back(static_cast<std::uint32_t>(c.position));
      if (auto r = cache_.commit(s.id, s.prompt_length, written); !r) fail("commit", r.error());
      take_logits(s, std::span<const float>(logits).subspan(i * model_.config().vocab, model_.config().vocab));
    }
  }

  /// Runs the prefill of the admitted sequences and returns each one's last logits. A capture off the
  /// alignment grid (`policy::branch_block`) is no chunk boundary: the sequence's prefill ends a piece there,
  /// the live state after it is copied into the capture slot, and the next piece continues from it. Pieces
  /// run in rounds (round k computes every sequence's k-th piece), so without such captures this is one
  /// forward call.
  std::vector<float> prefill(std::span<sequence* const> admitted, std::span<const sequence_step> steps,
                             std::span<const std::vector<capture_point>> captures) {
    const std::uint32_t vocab = model_.config().vocab;
    std::vector<std::vector<std::uint32_t>> ends(admitted.size()); // each sequence's piece ends, the last = L
    std::vector<std::vector<capture_point>> on_grid(admitted.size());
    for (std::size_t i = 0; i < admitted.size(); ++i) {
      for (const capture_point& c : captures[i]) {
        if (splits_prefill(c)) ends[i].push_back(static_cast<std::uint32_t>(c.position));
        else on_grid[i].push_back(c);
      }
      ends[i].push_back(admitted[i]->prompt_length);
    }
    std::vector<float> logits(admitted.size() * vocab);
    for (std::size_t round = 0;; ++round) {
      std::vector<sequence_step> pieces;
      std::vector<token> tokens;
      std::vector<std::size_t> who;
      for (std::size_t i = 0; i < admitted.size(); ++i) {
        if (round >= ends[i].size()) continue;
        sequence_step piece = steps[i];
        piece.start = round == 0 ? steps[i].start : ends[i][round - 1];
        piece.count = ends[i][round] - piece.start;
        const auto in_piece = [&](const capture_point& c) {
          return c.position > piece.start && c.position <= piece.start + piece.count;
        };
        const auto first = std::find_if(on_grid[i].begin(), on_grid[i].end(), in_piece);
        const auto last = std::find_if_not(first, on_grid[i].end(), in_piece);
        piece.captures = std::span<const capture_point>(on_grid[i]).subspan(
            static_cast<std::size_t>(first - on_grid[i].begin()), static_cast<std::size_t>(last - first));
        tokens.insert(tokens.end(), admitted[i]->tokens.begin() + piece.start,
                      admitted[i]->tokens.begin() + piece.start + piece.count);
        pieces.push_back(piece);
        who.push_back(i);
      }
      if (pieces.empty()) return logits;
      std::vector<float> out(pieces.size() * vocab);
      model_.forward(pass::prefill, tokens, pieces, kv_, states_, out);
      for (std::size_t j = 0; j < pieces.size(); ++j) {
        const std::size_t i = who[j];
        if (round + 1 < ends[i].size()) { // the piece ended at an off-grid capture: snapshot the live state
          const auto c = std::find_if(captures[i].begin(), captures[i].end(),
                                      [&](const capture_point& p) { return p.position == ends[i][round]; });
          copy_slot(admitted[i]->live_slot, c->slot);
        } else {
          std::copy_n(out.begin() + static_cast<std::ptrdiff_t>(j * vocab), vocab,
                      logits.begin() + static_cast<std::ptrdiff_t>(i * vocab));
        }
      }
    }
  }

  /// A capture off the alignment grid is no chunk boundary: the prefill ends a piece there.
  bool splits_prefill(const capture_point& c) const noexcept {
    return static_cast<std::uint64_t>(c.position) % alignment_ != 0;
  }

  void take_logits(sequence& s, std::span<const float> logits) {
    s.logits.assign(logits.begin(), logits.end());
    if (s.generated.empty()) s.generated.push_back(static_cast<token>(math::argmax(logits)));
  }

  void decode() {
    std::vector<sequence*> batch;
    std::vector<sequence_step> steps;
    std::vector<token> tokens;
    std::vector<capture_point> checkpoints; // per batch entry: a decode checkpoint, or slot == no_slot
    for (sequence& s : running_) {
      // Each running sequence feeds its last decoded token unless it has decoded enough.
      if (s.generated.size() >= s.max_new_tokens) continue;
      const token next = s.generated.back();
      auto plan = cache_.extend(s.id, {&next, 1});
      if (!plan) fail("extend", plan.error());
      run_transfers(); // a block it took may have been offloaded: before the forward pass writes it
      s.blocks.insert(s.blocks.end(), plan->new_blocks.begin(), plan->new_blocks.end());
      s.tokens.push_back(next);
      const auto pos = static_cast<std::uint32_t>(s.tokens.size() - 1);
      steps.push_back(sequence_step{pos, 1, s.blocks, s.live_slot, {}, 0});
      tokens.push_back(next);
      batch.push_back(&s);
      checkpoints.push_back(plan->captures.empty() ? capture_point{} : plan->captures.front());
    }
    if (batch.empty()) return;
    std::vector<float> logits(batch.size() * model_.config().vocab);
    model_.forward(pass::decode, tokens, steps, kv_, states_, logits);
    for (std::size_t i = 0; i < batch.size(); ++i) {
      sequence& s = *batch[i];
      // A decode checkpoint: the live state has now folded in exactly the checkpoint's position.
      std::vector<std::uint32_t> written;
      if (checkpoints[i].slot != no_slot) {
        copy_slot(s.live_slot, checkpoints[i].slot);
        written.push_back(static_cast<std::uint32_t>(checkpoints[i].position));
      }
      // Decode-filled blocks are published too: in a model with recurrent layers the cache marks them
      // decode_continuation-exact, and only a policy that accepts that reuses them.
      if (auto r = cache_.commit(s.id, static_cast<std::uint32_t>(s.tokens.size()), written); !r)
        fail("commit", r.error());
      const auto row = std::span<const float>(logits).subspan(i * model_.config().vocab, model_.config().vocab);
      s.logits.assign(row.begin(), row.end());
      s.generated.push_back(static_cast<token>(math::argmax(row)));
      ++stats_.decode_tokens;
    }
  }

  std::vector<completion> finish() {
    std::vector<completion> done;
    for (auto it = running_.begin(); it != running_.end();) {
      if (it->generated.size() < it->max_new_tokens) {
        ++it;
        continue;
      }
      // A conversation's last turn captures nothing: no later turn would restore it.
      auto plan = cache_.finish(it->id, {.last_turn = it->last_turn});
      if (!plan) fail("finish", plan.error());
      run_transfers(); // the slot it took may have been offloaded: before the capture overwrites it
      if (plan->capture.slot != no_slot) // end-of-turn snapshot of the live state (decode_continuation)
        copy_slot(it->live_slot, plan->capture.slot);
      free_live_.push_back(it->live_slot);
      done.push_back({it->id, std::move(it->generated), std::move(it->logits)});
      it = running_.erase(it);
    }
    return done;
  }

  void note_peaks() {
    const cache_metrics& m = cache_.metrics();
    stats_.peak_kv_blocks = std::max(stats_.peak_kv_blocks, m.blocks_referenced);
    stats_.peak_snapshot_bytes = std::max(stats_.peak_snapshot_bytes, m.snapshot_bytes_held);
  }

  const decoder& model_;
  Cache& cache_;
  options opt_;
  kv_memory kv_;
  state_memory states_;
  std::optional<kv_memory> host_kv_;         ///< host tier: pinned host memory in a real engine
  std::optional<state_memory> host_states_;
  std::deque<request> waiting_;
  std::deque<sequence> running_;
  std::vector<slot_id> free_live_;
  engine_stats stats_;
  std::vector<admission> admissions_;
  std::uint32_t alignment_ = 1; ///< the cache's alignment unit: captures off it split the prefill
};

} // namespace reprise::example
