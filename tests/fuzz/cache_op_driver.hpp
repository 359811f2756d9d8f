// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// An operation-stream driver for prefix_cache with an oracle written independently of the cache. It plays
// the engine: it "writes" KV blocks and snapshot slots (recording which token prefix each one holds) exactly
// when the cache's plans say the kernels would, and checks after every operation that
//   - no shared block or restored slot holds anything but the prompt's own prefix (no false hit),
//   - no block or slot is handed out while a live sequence holds it, or before the step that last touched
//     it completed (epoch deferral),
//   - failed calls change nothing observable,
//   - the hit rule holds (usable <= KV match <= L - 1, per policy) and check_invariants() passes;
//   - with cache_options::share_in_step, a block shared before its writer committed is one the writer will
//     write with the sharer's prefix, and a sharer's commit succeeds exactly when every such block was
//     written by its writer's first commit in the step it was admitted in;
//   - every restore comes from a slot written since it was last handed out, ready (its step completed),
//     not dropped as a sequence's surplus decode checkpoint, and of the exactness class it was written as;
//   - captures sit on the alignment grid, or on the block grid as a prefill split (`off_grid` placements,
//     whose split makes the rest of the prompt decode_continuation), and decode checkpoints sit at the
//     sequence's new length, a multiple of the interval;
//   - with policy::host_tier, the driver also keeps what every host unit holds, moving contents exactly as
//     the engine runs `take_transfers` (offloads, then onboards) after every call: a block onboarded, a
//     partial block copied from the host or a snapshot restored from it holds the prompt's own prefix, an
//     offloaded snapshot was a published one, and no host unit is overwritten while a sequence still holds
//     it or before the step that last read it completed;
//   - with policy::remote_tier, the driver keeps a store (content key -> header, contents): every put is a
//     prefill-exact block or snapshot, each admit is preceded by a prefetch whose fetches it answers from
//     the store, sometimes as a miss, sometimes with a corrupted header and another prefix's contents (which
//     must never be used).
// The same driver serves the randomized model-based test, the libFuzzer target and its corpus replay.

#include <reprise/reprise.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

namespace reprise::testing {

/// Reads the operation stream; yields zeros once exhausted.
class byte_source {
public:
  byte_source(const std::uint8_t* data, std::size_t size) : data_(data), size_(size) {}
  bool empty() const noexcept { return pos_ >= size_; }
  std::uint32_t next() noexcept { return pos_ < size_ ? data_[pos_++] : 0; }
  std::uint32_t below(std::uint32_t n) noexcept { return n == 0 ? 0 : next() % n; }

private:
  const std::uint8_t* data_;
  std::size_t size_;
  std::size_t pos_ = 0;
};

/// What the driver exercised, beyond the cache's own metrics (the oracle's view).
struct driver_stats {
  std::uint64_t off_grid_captures_written = 0; ///< captures off the alignment grid the engine wrote
  std::uint64_t checkpoints_planned = 0;       ///< decode checkpoints `extend` planned
  std::uint64_t checkpoints_written = 0;       ///< decode checkpoints the engine wrote (listed in `written`)
  std::uint64_t checkpoints_published = 0;     ///< of those, published (known from the commit's captures_written)
  std::uint64_t checkpoints_dropped = 0;       ///< a sequence's oldest checkpoint dropped for a newer one
  std::uint64_t restores_off_grid = 0;         ///< restores of a snapshot written at an off-grid capture
  std::uint64_t restores_checkpoint = 0;       ///< restores of a decode checkpoint
  std::uint64_t restores_turn_end = 0;         ///< restores of a turn end
  std::uint64_t restores_from_host = 0;        ///< restores of a snapshot in the host tier
  std::uint64_t host_offloads = 0;             ///< KV blocks moved to the host tier
  std::uint64_t host_onboards = 0;             ///< KV blocks (full or partial) moved back
  std::uint64_t remote_puts = 0;               ///< values written to the store
  std::uint64_t remote_puts_through = 0;       ///< of them, written through from GPU memory
  std::uint64_t remote_hits = 0;               ///< fetched values the cache kept
  std::uint64_t remote_probed = 0;             ///< prefetches given what a probe found in the store
  std::uint64_t remote_rejected = 0;           ///< fetched values with a corrupted header, dropped
};

template <class Cache>
class cache_op_driver {
  using model = typename Cache::model_type;
  using policy_type = typename Cache::policy_type;
  static constexpr bool restores = policy::policy_traits<policy_type>::restores_snapshots;
  /// The policy's capture placements may sit off the alignment grid (on the block grid): `branch_block`.
  static constexpr bool off_grid = [] {
    if constexpr (restores) return policy::policy_traits<policy_type>::capture::off_grid;
    else return false;
  }();
  /// `extend` may plan decode checkpoints (`decode_checkpoints`).
  static constexpr bool at_decode = [] {
    if constexpr (restores) return policy::policy_traits<policy_type>::capture::at_decode;
    else return false;
  }();
  using content = std::vector<token_id>; // tenant first, then the token prefix

  /// What wrote a slot's content last.
  enum class origin : std::uint8_t { none, prefill, off_grid, checkpoint, turn_end };

  struct pending_capture {
    capture_point point;
    bool checkpoint = false; // planned by `extend`
  };
  /// A decode checkpoint the cache published for a sequence, and the slot's hand-out count then: while it is
  /// unchanged the slot still holds that snapshot.
  struct published_checkpoint {
    slot_id slot;
    std::uint64_t generation;
  };

  struct oracle_seq {
    std::vector<token_id> tokens;
    token_id tenant = 0;
    std::uint32_t prompt = 0;    // the admitted prompt's length
    std::uint32_t computed = 0;
    std::uint32_t valid = 0;     // tokens whose KV the blocks hold (computed or shared)
    std::uint32_t own_from = 0;  // first block index this sequence writes
    std::vector<pending_capture> captures;
    slot_id restore = no_slot;
    // The sequence's published decode checkpoints, oldest first, as the cache keeps them (while `known`: a
    // commit whose published captures cannot be told apart from its refused ones makes it unknown).
    std::vector<published_checkpoint> checkpoints;
    bool checkpoints_known = true;
    // Positions from here on were computed from decoded tokens or decode_continuation state.
    std::uint32_t exact_until = std::numeric_limits<std::uint32_t>::max();
    // share_in_step: the blocks it shared while they were pending (not yet written) and the full prompt
    // blocks it computes, offered to later admissions of its step until its first commit.
    std::vector<block_id> shared_pending, own_pending;
    // policy::host_tier: the host snapshot restored and the host unit of a partial block copied, held until
    // the first commit.
    std::uint32_t host_restore = no_unit, host_copy = no_unit;
  };
  static constexpr std::uint32_t no_unit = std::numeric_limits<std::uint32_t>::max();
  static constexpr bool accepts_continuation = policy::policy_traits<policy_type>::accepts_decode_continuation;
  static constexpr bool host_tier = policy::tier_traits<typename Cache::tiers_type>::host;
  static constexpr bool remote_tier = policy::tier_traits<typename Cache::tiers_type>::remote;

public:
  std::string failure; // empty while every check passed
  std::uint64_t unwritten_refusals = 0; // sharer commits refused as the oracle predicted (share_in_step)
  driver_stats stats;

  /// Drives `cache`, typed or runtime-configured (the block size and alignment are read from it), created
  /// with `options` (share_in_step, the decode checkpoint interval and per-sequence bound, and the TTL are
  /// read from it).
  explicit cache_op_driver(Cache cache, const cache_options& options = {})
      : cache_(std::move(cache)), B(cache_.block_size()), A(cache_.alignment()),
        share_in_step_(options.share_in_step), interval_(at_decode ? options.decode_checkpoint_interval : 0),
        per_sequence_(options.decode_checkpoints_per_sequence),
        // A TTL can drop a checkpoint unseen: then the oracle does not model the per-sequence bound.
        model_checkpoint_bound_(options.snapshot_ttl_steps == 0) {
    blocks_.resize(cache_.kv_blocks());
    planned_.resize(cache_.kv_blocks());
    pending_.assign(cache_.kv_blocks(), 0);
    written_in_step_.assign(cache_.kv_blocks(), 0);
    block_continuation_.assign(cache_.kv_blocks(), 0);
    slot_continuation_.assign(cache_.snapshot_slots(), 0);
    block_touched_.assign(cache_.kv_blocks(), -1);
    block_written_.assign(cache_.kv_blocks(), -1);
    slots_.resize(cache_.snapshot_slots());
    slot_touched_.assign(cache_.snapshot_slots(), -1);
    slot_written_.assign(cache_.snapshot_slots(), -1);
    slot_published_.assign(cache_.snapshot_slots(), 0);
    slot_ready_.assign(cache_.snapshot_slots(), -1);
    slot_generation_.assign(cache_.snapshot_slots(), 0);
    slot_origin_.assign(cache_.snapshot_slots(), origin::none);
    host_blocks_.resize(cache_.host_kv_units());
    host_block_continuation_.assign(cache_.host_kv_units(), 0);
    host_block_read_.assign(cache_.host_kv_units(), -1);
    host_slots_.resize(cache_.host_snapshot_units());
    host_slot_continuation_.assign(cache_.host_snapshot_units(), 0);
    host_slot_valid_.assign(cache_.host_snapshot_units(), 0);
    host_slot_read_.assign(cache_.host_snapshot_units(), -1);
    for (int i = 0; i < 4; ++i) {
      std::vector<token_id> base(48 + 40 * static_cast<std::size_t>(i));
      for (std::size_t k = 0; k < base.size(); ++k) base[k] = static_cast<token_id>(k < 32 ? k : 1000 * i + k);
      bases_.push_back(base);
    }
  }

  const Cache& cache() const { return cache_; }

  /// Runs operations until the stream ends or a check fails. Returns false on failure.
  bool run(byte_source& in, std::size_t max_ops = 100000) {
    for (std::size_t op = 0; op < max_ops && !in.empty() && failure.empty(); ++op) step(in);
    return failure.empty();
  }

  void step(byte_source& in) {
    switch (in.below(9)) {
    case 0: case 1: admit(in); break;
    case 2: case 3: commit(in); break;
    case 4: extend(in); break;
    case 5: end(in, in.below(2) == 0); break;
    case 6: fork(in); break;
    case 7:
      expect(cache_.step_complete(cache_.current_epoch()).has_value(), "step_complete");
      safe_before_ = cache_.current_epoch();
      std::fill(pending_.begin(), pending_.end(), 0); // the step's windows close
      break;
    case 8: bad_call(in); break;
    }
    if constexpr (host_tier) {
      // Write-through puts of steps that completed come with whichever `take_transfers` follows; nothing
      // else may.
      if (failure.empty()) {
        const transfer_plan t = cache_.take_transfers();
        const bool only_through = std::all_of(t.remote_puts.begin(), t.remote_puts.end(), [](const remote_put& p) { return p.device; });
        if (!t.kv_offload.empty() || !t.snapshot_offload.empty() || !t.kv_onboard.empty() || !only_through)
          fail("transfers planned by a call the driver did not expect to move anything");
        else run_puts(t.remote_puts);
      }
    }
    if (failure.empty() && !cache_.check_invariants().has_value()) fail("check_invariants");
    if (failure.empty()) check_live_contents();
  }

private:
  void fail(const std::string& what) {
    if (failure.empty()) failure = what + " (op state: epoch " + std::to_string(cache_.current_epoch()) + ")";
  }
  void expect(bool ok, const char* what) {
    if (!ok) fail(what);
  }

  content prefix(const oracle_seq& s, std::uint32_t n) const {
    content c{s.tenant};
    c.insert(c.end(), s.tokens.begin(), s.tokens.begin() + n);
    return c;
  }
  /// Whether `c` is exactly s's tenant followed by its first n tokens (no allocation: this runs per block).
  static bool holds(const content& c, const oracle_seq& s, std::uint32_t n) {
    return c.size() == std::size_t{n} + 1 && c[0] == s.tenant && std::equal(c.begin() + 1, c.end(), s.tokens.begin());
  }
  bool held_by_live(block_id b) const {
    for (const auto& [id, s] : seqs_)
      if (std::find(cache_.block_table(id).begin(), cache_.block_table(id).end(), b) != cache_.block_table(id).end())
        return true;
    return false;
  }
  bool slot_held(slot_id slot) const {
    for (const auto& [id, s] : seqs_) {
      if (s.restore == slot) return true;
      for (const pending_capture& c : s.captures)
        if (c.point.slot == slot) return true;
    }
    return false;
  }
  bool slot_restoring(slot_id slot) const {
    for (const auto& [id, s] : seqs_)
      if (s.restore == slot) return true;
    return false;
  }
  /// The cache handed `slot` out for a capture: whatever it held is gone (evicted, or it was free).
  void hand_out(slot_id slot) {
    slot_published_[slot] = 0;
    ++slot_generation_[slot];
    slot_touched_[slot] = static_cast<std::int64_t>(cache_.current_epoch());
  }
  bool reusable(std::int64_t touched) const {
    return touched < 0 || static_cast<epoch_t>(touched) < safe_before_;
  }
  seq_id pick(byte_source& in) const {
    if (seqs_.empty()) return 999999;
    auto it = seqs_.begin();
    std::advance(it, in.below(static_cast<std::uint32_t>(seqs_.size())));
    return it->first;
  }

  struct observed {
    cache_metrics metrics;
    epoch_t epoch;
    std::vector<std::vector<block_id>> tables;
    bool operator==(const observed&) const = default;
  };
  observed observe() const {
    observed o{cache_.metrics(), cache_.current_epoch(), {}};
    for (const auto& [id, s] : seqs_) {
      auto t = cache_.block_table(id);
      o.tables.emplace_back(t.begin(), t.end());
    }
    return o;
  }

  /// Cuts `tokens` just past one of its last two multiples of the checkpoint interval (where a checkpoint
  /// may sit), keeping at least one token after it.
  void depart(byte_source& in, std::vector<token_id>& tokens) const {
    const auto size = static_cast<std::uint32_t>(tokens.size());
    std::uint32_t at = (size - 1) / interval_ * interval_; // the last multiple below the end
    if (at >= interval_ && in.below(2) == 0) at -= interval_;
    tokens.resize(at + 1 + in.below(size - at));
  }

  void admit(byte_source& in) {
    oracle_seq s;
    s.tenant = static_cast<token_id>(in.below(2));
    if (!history_.empty() && in.below(3) == 0) {
      // A next turn: an earlier sequence's prompt and decoded tokens, then a new message.
      const oracle_seq& earlier = history_[in.below(static_cast<std::uint32_t>(history_.size()))];
      s.tenant = earlier.tenant;
      s.tokens = earlier.tokens;
      // With decode checkpoints, sometimes a prompt that departs from the reply (an edited or regenerated
      // message): the previous turn's tokens only up to a point. (Other policies read no byte here, so
      // their streams, and the corpus, replay as before.)
      if (interval_ != 0 && in.below(2) == 0) depart(in, s.tokens);
    } else if (interval_ != 0 && !seqs_.empty() && in.below(3) == 0) {
      // A prompt that departs from a live sequence's reply (a regenerated message, another branch of it),
      // where its decode checkpoints are still kept.
      const oracle_seq& live = seqs_.at(pick(in));
      s.tenant = live.tenant;
      s.tokens = live.tokens;
      depart(in, s.tokens);
    } else {
      const auto& base = bases_[in.below(static_cast<std::uint32_t>(bases_.size()))];
      const std::uint32_t keep = 1 + in.below(static_cast<std::uint32_t>(base.size()));
      s.tokens.assign(base.begin(), base.begin() + keep);
    }
    const std::uint32_t suffix = in.below(3) == 0 ? in.below(40) : 0;
    for (std::uint32_t k = 0; k < suffix; ++k) s.tokens.push_back(static_cast<token_id>(50000 + in.below(4)));
    const seq_id id = next_id_++;
    if constexpr (remote_tier) prefetch(in, s);
    const observed before = observe();
    auto plan = cache_.admit(id, s.tokens, {.tenant_salt = static_cast<std::uint64_t>(s.tenant)});
    if (!plan.has_value()) {
      expect(plan.error() == errc::pool_exhausted, "admit: unexpected error");
      expect(observe() == before, "admit: failed call changed the cache");
      return;
    }
    const auto L = static_cast<std::uint32_t>(s.tokens.size());
    expect(plan->block_table.size() == (L + B - 1) / B, "admit: table size");
    // policy::host_tier: a partial block onboarded from the host instead of copied on the GPU.
    const std::uint32_t host_copy = apply_transfers(plan->copy_src == no_block && plan->kv_matched_tokens % B != 0
                                                        ? plan->block_table[plan->shared_blocks]
                                                        : no_block);
    if (host_copy != no_unit) s.host_copy = host_copy;
    const bool copies = plan->copy_src != no_block || host_copy != no_unit; // a turn end's partial block, copied
    if (copies) {
      expect(plan->kv_matched_tokens > plan->shared_blocks * B && plan->kv_matched_tokens < (plan->shared_blocks + 1) * B,
             "admit: a copied partial block must extend the match by 1 .. B - 1 tokens");
      expect(plan->kv_matched_tokens == plan->usable_tokens, "admit: a copied partial block comes with its snapshot");
      if (host_copy == no_unit) {
        expect(plan->copy_dst == plan->block_table[plan->shared_blocks], "admit: copy into the first own block");
        expect(holds(blocks_[plan->copy_src], s, plan->kv_matched_tokens), "admit: FALSE HIT, copied block holds another prefix");
        expect(!held_by_live(plan->copy_src), "admit: copied block is a live sequence's block");
      } else {
        expect(holds(blocks_[plan->block_table[plan->shared_blocks]], s, plan->kv_matched_tokens),
               "admit: FALSE HIT, partial block onboarded from the host holds another prefix");
        if (host_block_continuation_[host_copy]) s.exact_until = std::min(s.exact_until, plan->shared_blocks * B);
      }
    } else {
      expect(plan->kv_matched_tokens == plan->shared_blocks * B, "admit: kv_matched != shared blocks");
    }
    expect(plan->kv_matched_tokens <= (copies ? L - 1 : (L - 1) / B * B), "admit: KV match beyond L - 1");
    expect(plan->usable_tokens <= plan->kv_matched_tokens, "admit: usable beyond KV match");
    if constexpr (std::is_same_v<policy_type, policy::block_sharing>)
      expect(plan->usable_tokens == plan->kv_matched_tokens, "admit: block_sharing must skip the KV match");
    if constexpr (std::is_same_v<policy_type, policy::memory_only>)
      expect(plan->usable_tokens == 0, "admit: memory_only skips nothing");
    for (std::uint32_t i = 0; i < plan->block_table.size(); ++i) {
      const block_id b = plan->block_table[i];
      if (i < plan->shared_blocks && pending_[b]) {
        expect(share_in_step_, "admit: a pending block shared without share_in_step");
        expect(holds(planned_[b], s, (i + 1) * B), "admit: FALSE HIT, shared pending block will hold another prefix");
        s.shared_pending.push_back(b);
      } else if (i < plan->shared_blocks) {
        expect(s.shared_pending.empty(), "admit: a published block shared after a pending one");
        expect(holds(blocks_[b], s, (i + 1) * B), "admit: FALSE HIT, shared block holds another prefix");
        if (block_continuation_[b]) {
          expect(accepts_continuation, "admit: a decode-filled block reused under a prefill-exact policy");
          s.exact_until = std::min(s.exact_until, i * B);
        }
      } else {
        expect(!held_by_live(b), "admit: fresh block is held by a live sequence");
        expect(reusable(block_touched_[b]), "admit: fresh block reused before its step completed");
        if (share_in_step_ && (i + 1) * B <= L) { // offered to later admissions of the step
          pending_[b] = 1;
          written_in_step_[b] = 0;
          planned_[b] = prefix(s, (i + 1) * B);
          s.own_pending.push_back(b);
        }
      }
    }
    if constexpr (restores) {
      if (plan->usable_tokens != 0 && plan->restore_from_host) {
        expect(host_tier, "admit: a restore from the host without a host tier");
        const auto u = static_cast<std::uint32_t>(plan->restore_slot);
        expect(u < host_slots_.size(), "admit: host restore unit out of range");
        if (u < host_slots_.size()) {
          expect(holds(host_slots_[u], s, plan->usable_tokens), "admit: RESTORE from a host unit holding another prefix");
          expect(host_slot_valid_[u] != 0, "admit: RESTORE from a host unit no published snapshot was offloaded into");
          if (host_slot_continuation_[u]) {
            expect(accepts_continuation, "admit: a decode_continuation snapshot restored under a prefill-exact policy");
            s.exact_until = std::min(s.exact_until, plan->usable_tokens);
          }
          if (plan->restore_exactness == exactness::prefill_exact)
            expect(plan->usable_tokens % A == 0, "admit: prefill-exact restore off the alignment grid");
          s.host_restore = u;
          host_slot_read_[u] = static_cast<std::int64_t>(cache_.current_epoch());
          ++stats.restores_from_host;
        }
      } else if (plan->usable_tokens != 0) {
        expect(plan->restore_slot != no_slot, "admit: skip without restore slot");
        if (plan->restore_slot != no_slot) {
          expect(holds(slots_[plan->restore_slot], s, plan->usable_tokens),
                 "admit: RESTORE of a slot holding another prefix");
          expect(slot_published_[plan->restore_slot] != 0,
                 "admit: RESTORE of a slot not written since it was handed out, or dropped (a sequence's "
                 "surplus decode checkpoint)");
          expect(reusable(slot_ready_[plan->restore_slot]), "admit: RESTORE of a turn end before its step completed");
          switch (slot_origin_[plan->restore_slot]) {
          case origin::off_grid: ++stats.restores_off_grid; break;
          case origin::checkpoint: ++stats.restores_checkpoint; break;
          case origin::turn_end: ++stats.restores_turn_end; break;
          default: break;
          }
          if (slot_continuation_[plan->restore_slot]) {
            expect(accepts_continuation, "admit: a decode_continuation snapshot restored under a prefill-exact policy");
            s.exact_until = std::min(s.exact_until, plan->usable_tokens);
          }
          if constexpr (!policy::policy_traits<policy_type>::accepts_decode_continuation)
            expect(plan->restore_exactness == exactness::prefill_exact, "admit: decode snapshot not accepted");
          if (plan->restore_exactness == exactness::prefill_exact)
            expect(plan->usable_tokens % A == 0, "admit: prefill-exact restore off the alignment grid");
        }
      } else {
        expect(plan->restore_slot == no_slot && !plan->restore_from_host, "admit: restore slot without skip");
      }
      std::uint32_t last = plan->usable_tokens;
      for (const capture_point& c : plan->captures) {
        expect(c.position > last && c.position <= L, "admit: capture position outside (usable, L] or out of order");
        // Off the alignment grid only a placement that splits the prefill there (`branch_block`) may
        // capture, and only on the block grid.
        expect(c.position % A == 0 || (off_grid && c.position % B == 0), "admit: capture position off the grid");
        last = c.position;
        expect(!slot_held(c.slot) && reusable(slot_touched_[c.slot]), "admit: capture slot still in use");
        for (const capture_point& d : plan->captures)
          expect(&c == &d || c.slot != d.slot, "admit: capture slots not distinct");
      }
      if constexpr (std::is_same_v<policy_type, policy::chat>) {
        // chat's only placement `admit` serves is branch_block: the end of the last shared KV block.
        expect(plan->captures.size() <= 1, "admit: chat plans at most the branch_block capture");
        for (const capture_point& c : plan->captures)
          expect(c.position == plan->kv_matched_tokens && !copies, "admit: chat's capture is not at the shared blocks' end");
      }
      // The engine ends a prefill piece at an off-grid capture: what it computes after the first one
      // continues that split session rather than equal a cold prefill.
      for (const capture_point& c : plan->captures)
        if (c.position % A != 0) {
          s.exact_until = std::min(s.exact_until, static_cast<std::uint32_t>(c.position));
          break;
        }
      for (const capture_point& c : plan->captures) {
        s.captures.push_back({c, false});
        hand_out(c.slot);
      }
      s.restore = plan->restore_from_host ? no_slot : plan->restore_slot;
      if (s.restore != no_slot) slot_touched_[s.restore] = static_cast<std::int64_t>(cache_.current_epoch());
    }
    if (copies && host_copy == no_unit) { // the engine's copy kernel, before the prefill
      blocks_[plan->copy_dst] = blocks_[plan->copy_src];
      block_written_[plan->copy_dst] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[plan->copy_dst] = block_continuation_[plan->copy_src];
      if (block_continuation_[plan->copy_src]) s.exact_until = std::min(s.exact_until, plan->shared_blocks * B);
      block_touched_[plan->copy_src] = static_cast<std::int64_t>(cache_.current_epoch());
    }
    // The prompt's outputs continue a session as soon as anything decode_continuation feeds them: a restored
    // snapshot, a copied or shared decode-filled block (even past the restore: its KV is not recomputed), or
    // a prefill split at an off-grid capture.
    expect((plan->restore_exactness == exactness::decode_continuation) == (s.exact_until < L),
           "admit: restore_exactness disagrees with what was reused");
    s.computed = plan->usable_tokens;
    // Blocks shared while pending hold nothing yet.
    s.valid = plan->kv_matched_tokens - static_cast<std::uint32_t>(s.shared_pending.size()) * B;
    s.own_from = plan->shared_blocks;
    s.prompt = static_cast<std::uint32_t>(s.tokens.size());
    seqs_[id] = std::move(s);
  }

  void commit(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    const auto L = static_cast<std::uint32_t>(s.tokens.size());
    std::uint32_t n = s.computed + in.below(L - s.computed + 1);
    // With decode checkpoints, often the whole sequence, as a decode step commits. (Other policies read no
    // byte here.)
    if (interval_ != 0 && in.below(2) == 0) n = L;
    commit_to(in, id, n);
  }

  /// Commits sequence `id` up to `n` (>= its computed tokens), writing a random subset of the due captures.
  void commit_to(byte_source& in, seq_id id, std::uint32_t n) {
    oracle_seq& s = seqs_[id];
    // Prefill captures and decode checkpoints alike: the engine writes some, not others.
    std::vector<std::uint32_t> written;
    for (const pending_capture& c : s.captures)
      if (c.point.position <= n && in.below(4) != 0) written.push_back(static_cast<std::uint32_t>(c.point.position));
    // The engine computed [computed, n): it writes KV of its own blocks and the captured states.
    const auto table = std::vector<block_id>(cache_.block_table(id).begin(), cache_.block_table(id).end());
    // A sharer commits once what it shares is written by its writer's first commit within the step.
    const bool unwritten = std::any_of(s.shared_pending.begin(), s.shared_pending.end(),
                                       [&](block_id b) { return !written_in_step_[b]; });
    const observed before = observe();
    const std::uint64_t published_before = cache_.metrics().captures_written;
    auto r = cache_.commit(id, n, written);
    if (unwritten) {
      expect(!r.has_value() && r.error() == errc::unwritten_blocks, "commit: a sharer committed an unwritten block");
      expect(observe() == before, "commit: failed call changed the cache");
      unwritten_refusals += !r.has_value();
      return;
    }
    expect(r.has_value(), "commit: valid commit failed");
    if (!r.has_value()) return;
    s.shared_pending.clear();
    for (std::size_t k = 0; k < s.own_pending.size(); ++k) { // the window closes with what n covers written
      const block_id b = s.own_pending[k];
      if (pending_[b] && (s.own_from + k + 1) * B <= n) written_in_step_[b] = 1;
      pending_[b] = 0;
    }
    s.own_pending.clear();
    for (std::uint32_t i = s.own_from; i < table.size() && i * B < n; ++i) {
      blocks_[table[i]] = prefix(s, std::min(n, (i + 1) * B));
      block_written_[table[i]] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[table[i]] = std::min(n, (i + 1) * B) > s.exact_until;
    }
    // The cache publishes a written capture unless its block already holds a snapshot as good; the oracle
    // tells which from the count published: all, none, or (some of several refused) unknown.
    const std::uint64_t published = cache_.metrics().captures_written - published_before;
    expect(published <= written.size(), "commit: more captures published than written");
    const bool all = published == written.size(), none = published == 0;
    if (!all && !none) s.checkpoints_known = false;
    // In position order, as the cache resolves them (a checkpoint publishes after every earlier capture).
    for (const pending_capture& pc : s.captures) {
      const capture_point& c = pc.point;
      if (c.position > n) continue;
      const auto p = static_cast<std::uint32_t>(c.position);
      slot_touched_[c.slot] = static_cast<std::int64_t>(cache_.current_epoch());
      if (std::find(written.begin(), written.end(), p) == written.end()) {
        slot_published_[c.slot] = 0; // freed
        continue;
      }
      slots_[c.slot] = prefix(s, p);
      slot_written_[c.slot] = static_cast<std::int64_t>(cache_.current_epoch());
      // Off the alignment grid the prefill was split there; a checkpoint holds decoded tokens.
      slot_continuation_[c.slot] = pc.checkpoint || p % A != 0 || p > s.exact_until;
      slot_origin_[c.slot] = pc.checkpoint ? origin::checkpoint : p % A != 0 ? origin::off_grid : origin::prefill;
      slot_ready_[c.slot] = -1; // written by the steps this commit reports
      slot_published_[c.slot] = none ? 0 : 1;
      if (!pc.checkpoint) {
        stats.off_grid_captures_written += p % A != 0;
        continue;
      }
      ++stats.checkpoints_written;
      if (!all) continue;
      ++stats.checkpoints_published;
      // The sequence keeps its newest `decode_checkpoints_per_sequence`: publishing one more drops the
      // oldest, unless it is no longer that snapshot (evicted, its slot handed out since) or a sequence is
      // restoring it now.
      if (!model_checkpoint_bound_ || !s.checkpoints_known) continue;
      s.checkpoints.push_back({c.slot, slot_generation_[c.slot]});
      if (s.checkpoints.size() <= per_sequence_) continue;
      const published_checkpoint oldest = s.checkpoints.front();
      s.checkpoints.erase(s.checkpoints.begin());
      if (slot_generation_[oldest.slot] == oldest.generation && !slot_restoring(oldest.slot)) {
        slot_published_[oldest.slot] = 0;
        ++stats.checkpoints_dropped;
      }
    }
    std::erase_if(s.captures, [&](const pending_capture& c) { return c.point.position <= n; });
    if (s.restore != no_slot) {
      slot_touched_[s.restore] = static_cast<std::int64_t>(cache_.current_epoch());
      s.restore = no_slot;
    }
    release_host_holds(s);
    s.computed = n;
    s.valid = std::max(s.valid, n);
  }

  void extend(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    std::vector<token_id> more;
    if (interval_ != 0 && in.below(2) == 0) {
      // With decode checkpoints, often decode exactly up to the next multiple of the interval; one byte
      // picks the tokens (one of three patterns). Other policies read no byte here.
      const std::uint32_t pattern = in.below(3);
      more.resize(interval_ - s.tokens.size() % interval_);
      for (std::size_t k = 0; k < more.size(); ++k) more[k] = static_cast<token_id>(60000 + (pattern + k) % 3);
    } else {
      more.resize(1 + in.below(20));
      for (auto& t : more) t = static_cast<token_id>(60000 + in.below(3));
    }
    const observed before = observe();
    auto plan = cache_.extend(id, more);
    if (!plan.has_value()) {
      expect(plan.error() == errc::pool_exhausted, "extend: unexpected error");
      expect(observe() == before, "extend: failed call changed the cache");
      return;
    }
    apply_transfers();
    for (block_id b : plan->new_blocks) {
      expect(reusable(block_touched_[b]), "extend: block reused before its step completed");
      expect(std::count(cache_.block_table(id).begin(), cache_.block_table(id).end(), b) == 1 &&
                 [&] {
                   for (const auto& [other, o] : seqs_)
                     if (other != id && std::find(cache_.block_table(other).begin(), cache_.block_table(other).end(),
                                                  b) != cache_.block_table(other).end())
                       return false;
                   return true;
                 }(),
             "extend: new block held elsewhere");
    }
    // Decoded tokens of a model with recurrent layers: their KV continues this session only.
    if (cache_.geometry().has_recurrent)
      s.exact_until = std::min(s.exact_until, static_cast<std::uint32_t>(s.tokens.size()));
    s.tokens.insert(s.tokens.end(), more.begin(), more.end());
    const auto length = static_cast<std::uint32_t>(s.tokens.size());
    // A decode checkpoint: at most one, at the new length, a multiple of the interval, past what is
    // computed, in a slot no sequence holds and no unfinished step touched.
    expect(plan->captures.size() <= (interval_ != 0 ? 1u : 0u), "extend: a capture without decode checkpoints, or several");
    for (const capture_point& c : plan->captures) {
      expect(c.position == length && length % interval_ == 0 && c.position > s.computed,
             "extend: decode checkpoint position");
      expect(std::none_of(s.captures.begin(), s.captures.end(),
                          [&](const pending_capture& p) { return p.point.position == c.position; }),
             "extend: a checkpoint planned twice at one position");
      expect(!slot_held(c.slot) && reusable(slot_touched_[c.slot]), "extend: checkpoint slot still in use");
      s.captures.push_back({c, true});
      hand_out(c.slot);
      ++stats.checkpoints_planned;
    }
    // An engine may extend by nothing (a step that sampled no token for the sequence): that reaches no new
    // position, so it plans nothing and changes nothing (it once planned the checkpoint above again, once
    // per call, into fresh slots). Reads no byte: the streams replay as before.
    const observed extended = observe();
    auto empty = cache_.extend(id, std::span<const token_id>{});
    expect(empty.has_value() && empty->captures.empty() && empty->new_blocks.empty(),
           "extend: an empty extend planned a capture or took a block");
    expect(observe() == extended, "extend: an empty extend changed the cache");
  }

  void end(byte_source& in, bool finish) {
    if (seqs_.empty()) return;
    const seq_id id = pick(in);
    oracle_seq& s = seqs_[id];
    const auto table = std::vector<block_id>(cache_.block_table(id).begin(), cache_.block_table(id).end());
    const epoch_t now = cache_.current_epoch();
    // A turn-end capture copies the live state, which must be at the committed position: the prompt committed
    // whole, and at most the last sampled token extended but not fed.
    constexpr bool captures_turn_end = [] {
      if constexpr (restores) return policy::policy_traits<policy_type>::capture::at_turn_end;
      else return false;
    }();
    auto off_committed = [&] { return s.computed < s.prompt || s.tokens.size() - s.computed > 1; };
    // Usually the engine commits what it fed before ending the turn (all but the last sampled token).
    if (finish && captures_turn_end && off_committed() && in.below(2) == 0) {
      commit_to(in, id, std::max<std::uint32_t>(s.prompt, static_cast<std::uint32_t>(s.tokens.size()) - 1));
      if (!failure.empty() || seqs_.count(id) == 0) return;
    }
    if (finish && captures_turn_end && off_committed()) {
      const observed before = observe();
      auto refused = cache_.finish(id);
      expect(!refused.has_value() && refused.error() == errc::invalid_argument,
             "finish: a live state off the committed position must be refused");
      expect(observe() == before, "finish: refused but changed the cache");
      finish = false; // the engine releases it instead
    }
    if (finish) {
      auto plan = cache_.finish(id);
      expect(plan.has_value(), "finish failed");
      apply_transfers();
      if (plan.has_value() && plan->capture.slot != no_slot) {
        expect(plan->capture.position == s.computed, "finish: capture position");
        // Before taking its slot the cache demotes the turn end this sequence restored from and its decode
        // checkpoints (LRU order, not modelled): whichever slot it takes must be idle since a completed step.
        expect(reusable(slot_touched_[plan->capture.slot]) && !slot_held(plan->capture.slot),
               "finish: slot still in use");
        const slot_id slot = plan->capture.slot;
        hand_out(slot);
        slots_[slot] = prefix(s, plan->capture.position); // the engine copies its live state
        slot_written_[slot] = static_cast<std::int64_t>(cache_.current_epoch());
        slot_continuation_[slot] = 1;
        slot_origin_[slot] = origin::turn_end;
        slot_published_[slot] = 1;
        slot_ready_[slot] = static_cast<std::int64_t>(now); // written in this step: restorable once it completes
      }
    } else {
      expect(cache_.release(id).has_value(), "release failed");
    }
    for (const pending_capture& c : s.captures) { // freed
      slot_touched_[c.point.slot] = static_cast<std::int64_t>(now);
      slot_published_[c.point.slot] = 0;
    }
    if (s.restore != no_slot) slot_touched_[s.restore] = static_cast<std::int64_t>(now);
    release_host_holds(s);
    for (block_id b : s.own_pending) pending_[b] = 0; // its window closes with nothing written
    s.own_pending.clear();
    if (s.tokens.size() < 400) {
      history_.push_back(s);
      if (history_.size() > 8) history_.erase(history_.begin());
    }
    seqs_.erase(id);
    for (block_id b : table) block_touched_[b] = static_cast<std::int64_t>(now);
    expect(cache_.release(id).error() == errc::double_release, "second release must be double_release");
  }

  void fork(byte_source& in) {
    if (seqs_.empty()) return;
    const seq_id src = pick(in);
    const seq_id dst = next_id_++;
    const observed before = observe();
    auto plan = cache_.fork(src, dst);
    oracle_seq& s = seqs_[src];
    if (!plan.has_value()) {
      expect(plan.error() == (s.computed != s.tokens.size() ? errc::invalid_argument : errc::pool_exhausted),
             "fork: unexpected error");
      expect(observe() == before, "fork: failed call changed the cache");
      return;
    }
    apply_transfers();
    oracle_seq d = s;
    d.captures.clear();
    d.restore = no_slot;
    d.host_restore = d.host_copy = no_unit;
    d.shared_pending.clear(); // a fork source has committed: nothing it shares is pending, its window closed
    d.own_pending.clear();
    d.checkpoints.clear(); // the fork publishes its own
    d.checkpoints_known = true;
    d.own_from = static_cast<std::uint32_t>(s.tokens.size() / B);
    if (plan->copy_dst != no_block) {
      expect(reusable(block_touched_[plan->copy_dst]), "fork: copy block reused before its step completed");
      blocks_[plan->copy_dst] = blocks_[plan->copy_src]; // the engine's copy kernel
      block_written_[plan->copy_dst] = static_cast<std::int64_t>(cache_.current_epoch());
      block_continuation_[plan->copy_dst] = block_continuation_[plan->copy_src];
    }
    seqs_[dst] = d;
  }

  void bad_call(byte_source& in) {
    const observed before = observe();
    const seq_id unknown = next_id_ + 1000;
    switch (in.below(4)) {
    case 0: expect(cache_.commit(unknown, 0).error() == errc::unknown_sequence, "bad commit"); break;
    case 1:
      if (!seqs_.empty()) {
        const seq_id id = pick(in);
        expect(cache_.commit(id, static_cast<std::uint32_t>(seqs_[id].tokens.size()) + 1).error() == errc::out_of_range,
               "commit beyond tokens");
      }
      break;
    case 2:
      if (!seqs_.empty()) expect(cache_.admit(pick(in), bases_[0]).error() == errc::duplicate_sequence, "dup admit");
      break;
    case 3: expect(cache_.extend(unknown, bases_[0]).error() == errc::unknown_sequence, "bad extend"); break;
    }
    expect(observe() == before, "bad call changed the cache");
  }

  /// policy::remote_tier: writes each put's unit (a host unit, or with write-through a GPU unit whose
  /// writing step completed) into the store, checking that it holds a prefill-exact value.
  void run_puts(std::span<const remote_put> puts) {
    for (const remote_put& p : puts) {
      const bool block = p.item == remote_item::block;
      if (p.device) { // write-through, from GPU memory: written in a step that completed
        expect(p.unit < (block ? blocks_.size() : slots_.size()), "put: GPU unit out of range");
        if (!failure.empty()) return;
        if (block) {
          expect(reusable(block_written_[p.unit]), "put: a GPU block whose writing step has not completed");
          expect(blocks_[p.unit].size() > 1 && (blocks_[p.unit].size() - 1) % B == 0 && !block_continuation_[p.unit],
                 "put: a GPU block that is not a prefill-exact full block");
          store_[p.key] = {{p.header.begin(), p.header.end()}, blocks_[p.unit]};
        } else {
          expect(slot_published_[p.unit] != 0 && reusable(slot_written_[p.unit]),
                 "put: a GPU slot that holds no published snapshot whose step completed");
          expect(!slot_continuation_[p.unit] && (slots_[p.unit].size() - 1) % A == 0,
                 "put: a GPU snapshot that is not a prefill-exact one on the grid");
          store_[p.key] = {{p.header.begin(), p.header.end()}, slots_[p.unit]};
        }
        ++stats.remote_puts;
        ++stats.remote_puts_through;
        continue;
      }
      expect(p.unit < (block ? host_blocks_.size() : host_slots_.size()), "put: unit out of range");
      if (!failure.empty()) return;
      if (block) {
        expect(host_blocks_[p.unit].size() > 1 && (host_blocks_[p.unit].size() - 1) % B == 0 &&
                   !host_block_continuation_[p.unit],
               "put: a host block that is not a prefill-exact full block");
        store_[p.key] = {{p.header.begin(), p.header.end()}, host_blocks_[p.unit]};
      } else {
        expect(host_slot_valid_[p.unit] && !host_slot_continuation_[p.unit] && (host_slots_[p.unit].size() - 1) % A == 0,
               "put: a host snapshot that is not a prefill-exact one on the grid");
        store_[p.key] = {{p.header.begin(), p.header.end()}, host_slots_[p.unit]};
      }
      ++stats.remote_puts;
    }
  }

  /// policy::host_tier: runs the transfers the last call planned as the engine does, offloads first, checking
  /// each. `tail_dst`: the block a partial block may be onboarded into by this admit; returns the host unit
  /// it came from (`no_unit` if none). Without a host tier, checks that nothing is planned.
  std::uint32_t apply_transfers(block_id tail_dst = no_block) {
    const transfer_plan t = cache_.take_transfers();
    if constexpr (!host_tier) {
      expect(t.empty(), "transfers without a host tier");
      return no_unit;
    }
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    run_puts(t.remote_puts); // first: the offloads below may overwrite the units
    if (!failure.empty()) return no_unit;
    auto host_held = [&](std::uint32_t u, bool snapshot) {
      for (const auto& [id, q] : seqs_)
        if ((snapshot ? q.host_restore : q.host_copy) == u) return true;
      return false;
    };
    for (const unit_move& m : t.kv_offload) {
      expect(m.src < blocks_.size() && m.dst < host_blocks_.size(), "offload: unit out of range");
      if (!failure.empty()) return no_unit;
      expect(!host_held(m.dst, false), "offload: OVERWRITES a host unit a sequence still holds");
      expect(reusable(host_block_read_[m.dst]), "offload: OVERWRITES a host unit before the step that read it completed");
      expect(blocks_[m.src].size() > 1, "offload: a block that holds nothing");
      host_blocks_[m.dst] = blocks_[m.src];
      host_block_continuation_[m.dst] = block_continuation_[m.src];
      ++stats.host_offloads;
    }
    for (const unit_move& m : t.snapshot_offload) {
      expect(m.src < slots_.size() && m.dst < host_slots_.size(), "offload: snapshot unit out of range");
      if (!failure.empty()) return no_unit;
      expect(slot_published_[m.src] != 0 && reusable(slot_ready_[m.src]),
             "offload: a slot that holds no published, restorable snapshot");
      expect(!host_held(m.dst, true), "offload: OVERWRITES a host snapshot a sequence still holds");
      expect(reusable(host_slot_read_[m.dst]), "offload: OVERWRITES a host snapshot before the step that read it completed");
      host_slots_[m.dst] = slots_[m.src];
      host_slot_continuation_[m.dst] = slot_continuation_[m.src];
      host_slot_valid_[m.dst] = 1;
    }
    std::uint32_t tail_src = no_unit;
    for (const unit_move& m : t.kv_onboard) {
      expect(m.dst < blocks_.size() && m.src < host_blocks_.size(), "onboard: unit out of range");
      if (!failure.empty()) return no_unit;
      const auto b = static_cast<block_id>(m.dst);
      expect(reusable(block_touched_[b]), "onboard: into a block reused before its step completed");
      blocks_[b] = host_blocks_[m.src];
      block_written_[b] = now;
      block_continuation_[b] = host_block_continuation_[m.src];
      host_block_read_[m.src] = now;
      if (b == tail_dst) tail_src = m.src;
      ++stats.host_onboards;
    }
    return tail_src;
  }

  /// policy::remote_tier: prefetches `s`'s prompt, runs the puts the reservations caused, and answers every
  /// fetch from the store: usually as stored, one in eight as a miss, one in eight with a corrupted header
  /// and another prefix's contents written into the unit (the cache must drop it unused).
  ///
  /// Half the time it probes first: the probe must change nothing, and the prefetch then fetches only keys
  /// the store had.
  void prefetch(byte_source& in, const oracle_seq& s) {
    const extra_keys keys{.tenant_salt = static_cast<std::uint64_t>(s.tenant)};
    if (++prefetches_ % 8 == 0) long_prompt(s, keys); // reads no byte and changes nothing
    const cache_metrics before = cache_.metrics();
    std::vector<content_key> present;
    const bool probed = in.below(2) == 0;
    if (probed) {
      const observed unprobed = observe();
      auto listed = cache_.probe(s.tokens, keys);
      expect(listed.has_value(), "probe failed");
      if (!listed.has_value()) return;
      expect(observe() == unprobed && cache_.metrics() == before, "probe changed the cache");
      for (const remote_probe& k : listed->keys)
        if (store_.contains(k.key)) present.push_back(k.key);
      ++stats.remote_probed;
    }
    auto plan = probed ? cache_.prefetch(s.tokens, keys, present) : cache_.prefetch(s.tokens, keys);
    expect(plan.has_value(), "prefetch failed");
    if (!plan.has_value()) return;
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    if (probed)
      for (const remote_fetch& f : fetches)
        expect(std::find(present.begin(), present.end(), f.key) != present.end(),
               "prefetch: a key the probe did not find in the store is fetched");
    apply_transfers();
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    for (const remote_fetch& f : fetches) {
      const bool block = f.item == remote_item::block;
      auto& units = block ? host_blocks_ : host_slots_;
      expect(f.unit < units.size(), "prefetch: unit out of range");
      if (!failure.empty()) return;
      expect(reusable(block ? host_block_read_[f.unit] : host_slot_read_[f.unit]),
             "prefetch: a unit read in a step not yet complete is written by a fetch");
      auto it = store_.find(f.key);
      const std::uint32_t roll = in.below(8);
      if (it == store_.end() || roll == 0) {
        expect(cache_.fetched(f.item, f.unit, {}).has_value(), "fetched (miss) failed");
        continue;
      }
      std::vector<std::byte> header = it->second.header;
      units[f.unit] = it->second.contents;
      if (roll == 1) {
        header[header.size() / 2] ^= std::byte{0x40};
        units[f.unit] = content{s.tenant == 0 ? 1 : 0}; // contents that hold no prompt's prefix
      }
      if (block) {
        host_block_continuation_[f.unit] = 0;
        host_block_read_[f.unit] = now;
      } else {
        host_slot_continuation_[f.unit] = 0;
        host_slot_valid_[f.unit] = 1;
        host_slot_read_[f.unit] = now;
      }
      expect(cache_.fetched(f.item, f.unit, header).has_value(), "fetched failed");
    }
    const cache_metrics& after = cache_.metrics();
    stats.remote_hits += after.remote_hits - before.remote_hits;
    stats.remote_rejected += after.remote_rejected - before.remote_rejected;
  }

  /// `s`'s prompt followed by 2^18 more tokens: a probe lists no more blocks than the host tier has units,
  /// whatever the prompt's length (it once hashed every block of it and sized a key memo to it), and neither
  /// it nor a prefetch given that the store has none of them changes anything.
  void long_prompt(const oracle_seq& s, const extra_keys& keys) {
    std::vector<token_id> prompt = s.tokens;
    prompt.resize(prompt.size() + (std::size_t{1} << 18), static_cast<token_id>(50001));
    const observed before = observe();
    auto listed = cache_.probe(prompt, keys);
    expect(listed.has_value(), "long probe failed");
    if (!listed.has_value()) return;
    const auto blocks_listed = std::count_if(listed->keys.begin(), listed->keys.end(),
                                             [](const remote_probe& k) { return k.item == remote_item::block; });
    expect(static_cast<std::size_t>(blocks_listed) <= cache_.host_kv_units(), "long probe: more blocks than host units");
    const std::vector<content_key> none;
    auto plan = cache_.prefetch(prompt, keys, none);
    expect(plan.has_value() && plan->fetches.empty(), "long prefetch of nothing the store has fetched something");
    expect(observe() == before, "long probe or prefetch changed the cache");
  }

  /// The first commit, or the end, of a sequence: what it held in the host tier was read in this step.
  void release_host_holds(oracle_seq& s) {
    const auto now = static_cast<std::int64_t>(cache_.current_epoch());
    if (s.host_restore != no_unit) host_slot_read_[s.host_restore] = now;
    if (s.host_copy != no_unit) host_block_read_[s.host_copy] = now;
    s.host_restore = s.host_copy = no_unit;
  }

  /// Every live sequence's blocks still hold its own prefix over the range its KV is valid.
  void check_live_contents() {
    for (const auto& [id, s] : seqs_) {
      const auto table = cache_.block_table(id);
      for (std::uint32_t i = 0; i < table.size() && i * B < s.valid; ++i)
        if (!holds(blocks_[table[i]], s, std::min(s.valid, (i + 1) * B))) {
          fail("a live sequence's block was overwritten (seq " + std::to_string(id) + ", block index " +
               std::to_string(i) + ")");
          return;
        }
    }
  }

  Cache cache_;
  const std::uint32_t B; // block size
  const std::uint32_t A; // alignment unit
  const bool share_in_step_;
  std::uint64_t prefetches_ = 0;
  const std::uint32_t interval_;     // decode checkpoint interval (0: none)
  const std::uint32_t per_sequence_; // decode checkpoints a sequence keeps
  const bool model_checkpoint_bound_;
  std::vector<content> blocks_, slots_;
  // share_in_step: what a pending block will hold, whether it is pending (its writer admitted in this step
  // and not committed), and whether its writer's first commit in the step wrote it.
  std::vector<content> planned_;
  std::vector<std::uint8_t> pending_, written_in_step_;
  std::vector<std::uint8_t> block_continuation_, slot_continuation_; // what the engine wrote is decode_continuation
  std::vector<std::int64_t> block_touched_, slot_touched_;
  // The step that last wrote each GPU block and slot (a write-through put reads it once that step completed).
  std::vector<std::int64_t> block_written_, slot_written_;
  // Per slot: whether it may hold a published snapshot (written and committed or finished since it was
  // last handed out, not known to be dropped); the step that wrote a turn end (restorable once it
  // completes); how often it was handed out; what wrote it.
  std::vector<std::uint8_t> slot_published_;
  std::vector<std::int64_t> slot_ready_;
  std::vector<std::uint64_t> slot_generation_;
  std::vector<origin> slot_origin_;
  // policy::host_tier, per host unit: what it holds, whether that is decode_continuation, the step that
  // last read it (onboard, restore), and for snapshot units whether a published snapshot was offloaded
  // into it.
  std::vector<content> host_blocks_, host_slots_;
  std::vector<std::uint8_t> host_block_continuation_, host_slot_continuation_, host_slot_valid_;
  std::vector<std::int64_t> host_block_read_, host_slot_read_;
  // policy::remote_tier: the store the fleet shares, by content key.
  struct stored_value {
    std::vector<std::byte> header;
    content contents;
  };
  std::map<content_key, stored_value> store_;
  std::map<seq_id, oracle_seq> seqs_;
  std::vector<std::vector<token_id>> bases_;
  std::vector<oracle_seq> history_; // recently ended sequences, whose tokens later prompts may continue
  seq_id next_id_ = 1;
  epoch_t safe_before_ = 0;
};

} // namespace reprise::testing
