// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `prefix_cache<Model, Policy, Hasher>`: the façade an engine's scheduler calls. One class serves the three
/// policies (`policy::block_sharing`, `policy::snapshot_restore<capture, accept>`, `policy::memory_only`).
///
/// Engine-facing flow (DESIGN.md section 5), all from the scheduler thread while it plans step n:
///   1. `admit(seq, prompt, keys)` -> block table (shared + fresh blocks), usable skip u, restore slot,
///      capture list (position -> slot) for the prefill kernels.
///   2. The engine runs step n: restore (slot -> live state), chunked prefill of [u, L) writing captures,
///      KV writes into the sequence's own blocks.
///   3. `commit(seq, n, written)` publishes the blocks that became full and the captures the engine wrote;
///      `extend(seq, tokens)` appends decode tokens (maybe a new block); `finish(seq)` optionally captures
///      an end-of-turn snapshot and releases; `release(seq)` drops references (blocks stay cached).
///   4. `step_complete(n)` once step n's kernels are done: blocks and slots given up during step n become
///      reusable (DESIGN.md invariant 6).
///
/// Threading: not thread-safe. Drive one cache from one thread (the scheduler), as vLLM and SGLang do;
/// `metrics()` and `check_invariants()` read the same state and need the same thread.
///
/// Errors: every fallible call returns `result<...>` carrying a `reprise::errc`; a call that fails has
/// changed nothing, metrics included (DESIGN.md invariant 7). Nothing throws except construction, which
/// allocates every pool up front (`std::bad_alloc`); after construction the hot path allocates nothing
/// except when a sequence's block table first outgrows the capacity its record kept from earlier use.

#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_pool.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/xxh3_hasher.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/state/hybrid_model.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <span>
#include <type_traits>
#include <utility>

namespace reprise {

template <model Model, policy::cache_policy Policy, hasher Hasher = xxh3_hasher>
class prefix_cache {
  using traits = policy::policy_traits<Policy>;

  static_assert(!(std::is_same_v<Policy, policy::block_sharing> && Model::has_recurrent),
                "prefix_cache: policy::block_sharing skips prefill, but this model has recurrent (Mamba2 / "
                "gated-delta) layers whose state depends on every token. Use policy::snapshot_restore<...> "
                "(skip up to a recurrent-state snapshot) or policy::memory_only (share KV, skip nothing).");
  static_assert(!traits::restores_snapshots || Model::has_recurrent,
                "prefix_cache: policy::snapshot_restore needs recurrent layers to snapshot; an attention-only "
                "model uses policy::block_sharing.");

  static constexpr bool restores = traits::restores_snapshots;

  template <class P>
  static constexpr bool places() noexcept {
    if constexpr (restores) return traits::template places<P>;
    else return false;
  }
  static constexpr bool intervals_aligned() noexcept {
    if constexpr (restores) {
      for (std::uint32_t i : traits::intervals)
        if (i % Model::alignment != 0) return false;
    }
    return true;
  }
  static_assert(intervals_aligned(),
                "prefix_cache: a policy::every<I> capture interval must be a multiple of the model's alignment "
                "unit Model::alignment = lcm(block size, every chunk size); snapshots elsewhere would not be "
                "bit-exact with a cold chunked prefill. Round I to a multiple of Model::alignment.");

public:
  using model_type = Model;
  using policy_type = Policy;
  using hasher_type = Hasher;

  static constexpr std::uint32_t block_size = Model::block_size;
  static constexpr std::uint32_t alignment = Model::alignment;

  /// Creates a cache.
  ///
  /// Effects: allocates every pool (blocks, index buckets, sequence records, snapshot slots).
  /// Errors: `invalid_argument` if `kv_blocks` or `max_sequences` is 0; `budget_too_small` if a
  /// `snapshot_restore` cache's budget cannot hold one snapshot of the model; `misaligned` if
  /// `policy::every_interval` is used and `capture_interval` is 0 or not a multiple of `alignment`.
  /// Complexity: linear in the pool sizes.
  static result<prefix_cache> create(const cache_options& options) {
    if (options.kv_blocks == 0 || options.max_sequences == 0) return errc::invalid_argument;
    std::uint32_t slots = 0;
    if constexpr (restores) {
      const std::size_t count = options.snapshot_budget_bytes / Model::bytes_per_snapshot;
      if (count == 0) return errc::budget_too_small;
      slots = static_cast<std::uint32_t>(std::min<std::size_t>(count, no_slot - 1));
      if constexpr (places<policy::every_interval>())
        if (options.capture_interval == 0 || options.capture_interval % alignment != 0) return errc::misaligned;
    }
    const std::uint64_t seed = options.hasher_seed ? *options.hasher_seed : random_seed();
    return prefix_cache(std::make_unique<state>(options, slots, seed));
  }

  prefix_cache(prefix_cache&&) noexcept = default;
  prefix_cache& operator=(prefix_cache&&) noexcept = default;

  /// Admits a new sequence with prompt `prompt` and plans its prefill.
  ///
  /// Effects: looks up the longest verified chain of cached full blocks for the prompt (at most
  /// floor((L - 1) / B) blocks, so at least one token is computed), references them, allocates fresh blocks
  /// for the rest (evicting least-recently-used unreferenced cached blocks, leaf first, when the free queue
  /// holds no reusable block), and with `snapshot_restore` picks the deepest usable snapshot
  /// (usable = largest u <= KV match with a snapshot at exactly u, DESIGN.md invariant 1) and plans captures.
  /// `capture_offsets` is read only with `policy::caller_offsets`.
  /// Errors: `duplicate_sequence` (s is live); `invalid_argument` (empty prompt, or a multimodal digest over
  /// `max_multimodal_digest_bytes`); `misaligned` / `out_of_range` (a caller offset off the alignment grid
  /// or outside (0, L]); `pool_exhausted` (no free sequence record, or not enough reusable blocks).
  /// Complexity: O(L) hashing plus O(1) expected per block.
  result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys = {},
                           std::span<const std::uint32_t> capture_offsets = {}) {
    return st_->admit(s, prompt, keys, capture_offsets);
  }

  /// Declares that the sequence's first `n_computed` tokens are computed (absolute, non-decreasing):
  /// publishes every block that became full, and the captures listed in `captures_written` (positions).
  /// Planned captures at positions <= n_computed that are not listed are dropped and their slots freed.
  /// Also ends the sequence's hold on its restore slot (the restore copy has run).
  ///
  /// Errors: `unknown_sequence`; `out_of_range` (n_computed > tokens known); `invalid_argument`
  /// (n_computed below an earlier commit, or a written position that is not a planned capture
  /// <= n_computed, or listed twice).
  /// Complexity: O(B) per newly full block plus O(captures).
  result<void> commit(seq_id s, std::uint32_t n_computed, std::span<const std::uint32_t> captures_written = {}) {
    return st_->commit(s, n_computed, captures_written);
  }

  /// Appends decode tokens to a live sequence; allocates the blocks they need.
  ///
  /// Errors: `unknown_sequence`; `pool_exhausted` (not enough reusable blocks); `out_of_range` (the
  /// sequence would exceed 2^32 - 1 tokens).
  /// Complexity: O(new tokens).
  result<extend_plan> extend(seq_id s, std::span<const token_id> new_tokens) { return st_->extend(s, new_tokens); }

  /// Ends a turn: with `policy::end_of_turn` plans a `decode_continuation` capture of the live state at the
  /// committed position p when p is a multiple of B whose block is cached and holds no snapshot yet, and a
  /// slot is free; then releases the sequence as `release` does.
  ///
  /// Errors: as `release`. Complexity: as `release`.
  result<finish_plan> finish(seq_id s) { return st_->finish(s); }

  /// Drops the sequence's references. Its blocks stay cached (unreferenced ones join the LRU queue);
  /// blocks never published and planned capture slots are freed, reusable after the current step completes.
  ///
  /// Errors: `double_release` (s was released recently), `unknown_sequence` (otherwise not live).
  /// Complexity: O(blocks of the sequence).
  result<void> release(seq_id s) { return st_->release(s); }

  /// Copy-on-write fork: `dst` shares every full block of `src`; the partial last block, if any, gets a
  /// fresh block that the engine fills with its copy kernel. Both sequences then continue independently.
  ///
  /// Errors: `unknown_sequence` (src); `duplicate_sequence` (dst live); `invalid_argument` (src has
  /// uncomputed tokens: fork after commit); `pool_exhausted` (no record or no block for the copy).
  /// Complexity: O(blocks of src).
  result<fork_plan> fork(seq_id src, seq_id dst) { return st_->fork(src, dst); }

  /// Reports that every kernel of step `n` has finished: blocks and slots given up while step n (or an
  /// earlier one) was scheduled become reusable, end-of-turn snapshots captured in it become restorable,
  /// and snapshots idle past the TTL are evicted. The current epoch becomes at least n + 1.
  /// Complexity: amortized O(1) per node that becomes reusable, plus O(evicted snapshots).
  void step_complete(epoch_t n) noexcept { st_->step_complete(n); }

  /// The step being scheduled now (starts at 0).
  epoch_t current_epoch() const noexcept { return st_->current_; }

  const cache_metrics& metrics() const noexcept { return st_->metrics_; }

  /// Snapshot slots the engine must provide (0 unless `snapshot_restore`).
  std::uint32_t snapshot_slots() const noexcept { return st_->slots_.size(); }
  std::uint32_t kv_blocks() const noexcept { return st_->blocks_.size(); }
  std::uint64_t hasher_seed() const noexcept { return st_->seed_; }

  /// The block table of a live sequence (empty if unknown). Valid until the next non-const call.
  std::span<const block_id> block_table(seq_id s) const noexcept {
    const detail::sequence_record* r = st_->sequences_.find(s);
    return r ? std::span<const block_id>(r->blocks) : std::span<const block_id>{};
  }

  /// Recomputes every refcount, queue membership, index entry, parent/child count, LRU order, snapshot
  /// attachment and gauge from scratch and compares. For tests and debugging.
  /// Errors: `invariant_violated`. Complexity: O(blocks + slots + table entries).
  result<void> check_invariants() const { return st_->check_invariants(); }

private:
  static std::uint64_t random_seed() {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }

  struct state {
    /// LRU victims whose index buckets admit prefetches ahead of evicting them.
    static constexpr std::uint32_t eviction_lookahead = 8;

    state(const cache_options& o, std::uint32_t slots, std::uint64_t seed)
        : options_(o), seed_(seed), hasher_(seed), blocks_(o.kv_blocks, block_size), index_(blocks_),
          slots_(slots), sequences_(o.max_sequences) {
      metrics_.blocks_free = o.kv_blocks;
    }

    // ----------------------------------------------------------------------------------------------------
    // epochs
    epoch_t current_ = 0;     // the step being scheduled
    epoch_t safe_before_ = 0; // nodes with tag <= safe_before_ are reusable
    epoch_t release_tag() const noexcept { return current_ + 1; }

    void step_complete(epoch_t n) noexcept {
      safe_before_ = std::max(safe_before_, n + 1);
      current_ = std::max(current_, n + 1);
      blocks_.advance(safe_before_);
      slots_.advance(safe_before_);
      if (options_.snapshot_ttl_steps != 0) {
        while (detail::slot_node* head = slots_.lru().front()) {
          if (current_ - head->last_use <= options_.snapshot_ttl_steps) break;
          ++metrics_.snapshot_evictions_ttl;
          drop_published(*head, /*reusable_now=*/false);
        }
      }
    }

    // ----------------------------------------------------------------------------------------------------
    // blocks

    /// The B tokens stored for block `b`, with B a constant the hasher and copies can inline.
    std::span<const token_id, block_size> block_tokens(block_id b) const noexcept {
      return std::span<const token_id, block_size>(blocks_.tokens(b).data(), block_size);
    }

    /// Takes a reusable block: a safe free one, else evicts the LRU head. Precondition: available() > 0.
    block_id take_block() noexcept {
      detail::block_node* n = blocks_.free().front_safe();
      if (n != nullptr) {
        blocks_.free().erase(*n, safe_before_);
        --metrics_.blocks_free;
      } else {
        n = blocks_.lru().front_safe();
        evict(*n);
      }
      n->state = detail::block_state::owned;
      n->refcount = 1;
      ++metrics_.blocks_referenced;
      return blocks_.id_of(*n);
    }

    /// Evicts an unreferenced cached block (leaf): leaves the index, invalidates its snapshots.
    void evict(detail::block_node& n) noexcept {
      blocks_.lru().erase(n, safe_before_);
      index_.erase(n);
      if (n.parent != no_block) --blocks_.node(n.parent).cached_children;
      if constexpr (restores) { // only snapshot_restore publishes snapshots
        for (slot_id& s : n.snapshot) {
          if (s == no_slot) continue;
          ++metrics_.snapshot_evictions_invalidated;
          drop_published(slots_.node(s), /*reusable_now=*/false);
        }
      }
      n.parent = no_block;
      n.key = {};
      n.state = detail::block_state::free;
      ++metrics_.kv_evictions;
      --metrics_.blocks_cached;
    }

    void reference(detail::block_node& n) noexcept {
      if (n.refcount++ == 0) {
        blocks_.lru().erase(n, safe_before_);
        ++metrics_.blocks_referenced;
      }
    }

    void unreference(detail::block_node& n) noexcept {
      if (--n.refcount != 0) return;
      --metrics_.blocks_referenced;
      if (n.state == detail::block_state::cached) {
        blocks_.lru().push_back(n, release_tag(), safe_before_);
      } else {
        n.state = detail::block_state::free;
        blocks_.free().push_back(n, release_tag(), safe_before_);
        ++metrics_.blocks_free;
      }
    }

    /// Reusable blocks if the `held` blocks (about to be referenced) are taken out of the LRU queue.
    std::size_t available_excluding(std::span<const block_id> held) const noexcept {
      std::size_t in_lru_safe = 0;
      for (block_id b : held) {
        const detail::block_node& n = blocks_.node(b);
        if (n.refcount == 0 && n.tag <= safe_before_) ++in_lru_safe;
      }
      return blocks_.available() - in_lru_safe;
    }

    // ----------------------------------------------------------------------------------------------------
    // snapshots

    /// Takes a slot for a capture: a safe free one, else evicts the LRU snapshot. Null when none is reusable.
    detail::slot_node* take_slot() noexcept {
      detail::slot_node* n = slots_.free().front_safe();
      if (n != nullptr) {
        slots_.free().erase(*n, safe_before_);
      } else {
        n = slots_.lru().front_safe();
        if (n == nullptr) return nullptr;
        ++metrics_.snapshot_evictions_lru;
        detach(*n);
        slots_.lru().erase(*n, safe_before_);
      }
      n->state = detail::slot_state::pending;
      return n;
    }

    void detach(detail::slot_node& n) noexcept {
      detail::block_node& b = blocks_.node(n.block);
      b.snapshot[static_cast<int>(n.kind)] = no_slot;
      n.block = no_block;
      --metrics_.snapshots_held;
      metrics_.snapshot_bytes_held -= Model::bytes_per_snapshot;
    }

    /// Unpublishes an unreferenced published snapshot and frees its slot.
    void drop_published(detail::slot_node& n, bool reusable_now) noexcept {
      detach(n);
      slots_.lru().erase(n, safe_before_);
      free_slot(n, reusable_now);
    }

    void free_slot(detail::slot_node& n, bool reusable_now) noexcept {
      n.state = detail::slot_state::free;
      n.refcount = 0;
      if (reusable_now) slots_.free().push_front_safe(n);
      else slots_.free().push_back(n, release_tag(), safe_before_);
    }

    void publish_slot(detail::slot_node& n, detail::block_node& b, exactness kind, epoch_t ready) noexcept {
      n.state = detail::slot_state::published;
      n.block = blocks_.id_of(b);
      n.kind = kind;
      n.ready_tag = ready;
      n.last_use = current_;
      n.refcount = 0;
      b.snapshot[static_cast<int>(kind)] = slots_.id_of(n);
      slots_.lru().push_back(n, release_tag(), safe_before_);
      ++metrics_.snapshots_held;
      metrics_.snapshot_bytes_held += Model::bytes_per_snapshot;
    }

    void unreference_slot(detail::slot_node& n) noexcept {
      if (--n.refcount != 0) return;
      n.last_use = current_;
      slots_.lru().push_back(n, release_tag(), safe_before_);
    }

    /// A snapshot the accept policy allows at block `b`'s end, or no_slot.
    slot_id usable_snapshot(const detail::block_node& b) const noexcept {
      if constexpr (restores) {
        const slot_id exact = b.snapshot[static_cast<int>(exactness::prefill_exact)];
        if (exact != no_slot && ready(exact)) return exact;
        if constexpr (traits::accepts_decode_continuation) {
          const slot_id cont = b.snapshot[static_cast<int>(exactness::decode_continuation)];
          if (cont != no_slot && ready(cont)) return cont;
        }
      }
      return no_slot;
    }
    bool ready(slot_id s) const noexcept { return slots_.node(s).ready_tag <= safe_before_; }

    // ----------------------------------------------------------------------------------------------------
    // admit

    result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys,
                             std::span<const std::uint32_t> offsets) {
      if (sequences_.find(s) != nullptr) return errc::duplicate_sequence;
      if (prompt.empty() || keys.multimodal_digest.size() > max_multimodal_digest_bytes)
        return errc::invalid_argument;
      if (prompt.size() >= std::size_t{UINT32_MAX}) return errc::out_of_range;
      const auto length = static_cast<std::uint32_t>(prompt.size());
      if constexpr (places<policy::caller_offsets>()) {
        for (std::uint32_t p : offsets) {
          if (p % alignment != 0) return errc::misaligned;
          if (p == 0 || p > length) return errc::out_of_range;
        }
      }
      if (sequences_.full()) return errc::pool_exhausted;

      // Lookup (no change to the cache): the record is not live yet, so filling it is invisible.
      detail::sequence_record& r = sequences_.prepare(s);
      r.root = hasher_.root(keys);
      r.extras = stored_extra_keys::from(keys);
      const std::uint32_t limit = (length - 1) / block_size;
      block_key key = r.root;
      block_id parent = no_block;
      for (std::uint32_t i = 0; i < limit; ++i) {
        const auto tokens = prompt.subspan(std::size_t{i} * block_size, block_size);
        key = hasher_.chain(key, tokens);
        detail::block_node* hit = index_.find({key, parent, tokens, &r.extras});
        if (hit == nullptr) break;
        parent = blocks_.id_of(*hit);
        r.blocks.push_back(parent);
      }
      const auto matched = static_cast<std::uint32_t>(r.blocks.size());
      const std::uint32_t total = (length + block_size - 1) / block_size;
      if (available_excluding(r.blocks) < total - matched) return errc::pool_exhausted;

      // Usable skip (DESIGN.md invariant 1).
      const std::uint32_t kv_matched = matched * block_size;
      std::uint32_t usable = 0;
      slot_id restore = no_slot;
      if constexpr (std::is_same_v<Policy, policy::block_sharing>) {
        usable = kv_matched;
      } else if constexpr (restores) {
        for (std::uint32_t i = matched; i-- > 0;) {
          if ((i + 1) * block_size % alignment != 0 &&
              blocks_.node(r.blocks[i]).snapshot[static_cast<int>(exactness::decode_continuation)] == no_slot)
            continue;
          restore = usable_snapshot(blocks_.node(r.blocks[i]));
          if (restore != no_slot) {
            usable = (i + 1) * block_size;
            break;
          }
        }
      }

      // From here on the call succeeds: change the cache.
      for (block_id b : r.blocks) reference(blocks_.node(b));
      const std::uint32_t full = length / block_size;
      // Evictions take LRU heads in order and each one unlinks its block from a random index bucket: start
      // loading the buckets a few victims ahead. Only the head is ever erased, so `ahead` stays valid.
      auto ahead = blocks_.lru().begin();
      for (std::uint32_t k = 0; k < eviction_lookahead && ahead != blocks_.lru().end(); ++k, ++ahead)
        index_.prefetch(ahead->key);
      for (std::uint32_t i = matched; i < total; ++i) {
        if (ahead != blocks_.lru().end()) index_.prefetch((ahead++)->key);
        const block_id b = take_block();
        const std::size_t begin = std::size_t{i} * block_size;
        // Full blocks copy a compile-time byte count (inlined vector moves instead of a memmove call).
        if (i < full) std::memcpy(blocks_.tokens(b).data(), prompt.data() + begin, block_size * sizeof(token_id));
        else std::copy_n(prompt.data() + begin, prompt.size() - begin, blocks_.tokens(b).data());
        r.blocks.push_back(b);
      }
      r.tokens = length;
      r.computed = usable;
      r.chain.assign(r.blocks.begin(), r.blocks.begin() + matched);
      sequences_.insert(r);

      admit_plan plan;
      plan.kv_matched_tokens = kv_matched;
      plan.usable_tokens = usable;
      const std::uint32_t lost = restores ? kv_matched - usable : 0;
      plan.tokens_lost_to_missing_snapshot = lost;
      plan.shared_blocks = matched;
      if constexpr (restores) {
        if (restore != no_slot) {
          detail::slot_node& n = slots_.node(restore);
          if (n.refcount++ == 0) slots_.lru().erase(n, safe_before_);
          r.restore_slot = restore;
          plan.restore_slot = restore;
          plan.restore_exactness = n.kind;
          ++metrics_.snapshot_hits;
        } else if (kv_matched != 0) {
          ++metrics_.snapshot_misses;
        }
        plan_captures(r, usable, kv_matched, length, offsets);
        plan.captures = r.captures;
      }
      plan.block_table = r.blocks;

      ++metrics_.lookups;
      ++metrics_.live_sequences;
      metrics_.prompt_tokens += length;
      metrics_.kv_matched_tokens += kv_matched;
      metrics_.usable_tokens += usable;
      metrics_.tokens_lost_to_missing_snapshot += lost;
      metrics_.blocks_shared += matched;
      metrics_.bytes_saved += std::uint64_t{matched} * Model::bytes_per_kv_block;
      return plan;
    }

    /// Fills r.captures with (position, slot) for positions in (usable, length] on the alignment grid.
    void plan_captures(detail::sequence_record& r, std::uint32_t usable, std::uint32_t kv_matched,
                       std::uint32_t length, std::span<const std::uint32_t> offsets) {
      auto& c = r.captures;
      auto add = [&](std::uint32_t p) {
        if (p > usable && p <= length && p % alignment == 0) c.push_back({p, no_slot});
      };
      auto add_every = [&](std::uint32_t interval) {
        for (std::uint32_t p = (usable / interval + 1) * interval; p <= length; p += interval) add(p);
      };
      if constexpr (restores) {
        for (std::uint32_t interval : traits::intervals)
          if (interval != 0) add_every(interval);
      }
      if constexpr (places<policy::every_interval>()) add_every(options_.capture_interval);
      if constexpr (places<policy::last_aligned>()) add((length - 1) / alignment * alignment);
      if constexpr (places<policy::branch_point>()) add(kv_matched / alignment * alignment);
      if constexpr (places<policy::caller_offsets>())
        for (std::uint32_t p : offsets) add(p);
      std::sort(c.begin(), c.end(), [](const capture_point& a, const capture_point& b) { return a.position < b.position; });
      c.erase(std::unique(c.begin(), c.end()), c.end());
      // A cached block that already holds a prefill-exact snapshot needs no second one.
      std::erase_if(c, [&](const capture_point& p) {
        const std::uint32_t i = p.position / block_size - 1;
        return i < r.chain.size() &&
               blocks_.node(r.chain[i]).snapshot[static_cast<int>(exactness::prefill_exact)] != no_slot;
      });
      std::size_t keep_from = 0;
      if (options_.max_snapshots_per_path != 0) {
        std::uint32_t existing = 0;
        for (const block_id id : r.chain) {
          const detail::block_node& b = blocks_.node(id);
          existing += (b.snapshot[0] != no_slot || b.snapshot[1] != no_slot) ? 1 : 0;
        }
        const std::size_t room = options_.max_snapshots_per_path > existing ? options_.max_snapshots_per_path - existing : 0;
        if (c.size() > room) keep_from = c.size() - room; // keep the deepest
      }
      metrics_.captures_refused += keep_from;
      c.erase(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(keep_from));
      // Slots, deepest first, so a short pool serves the most useful captures.
      std::size_t planned = 0;
      for (std::size_t i = c.size(); i-- > 0;) {
        detail::slot_node* n = take_slot();
        if (n == nullptr) break;
        c[i].slot = slots_.id_of(*n);
        ++planned;
      }
      metrics_.captures_refused += c.size() - planned;
      metrics_.captures_planned += planned;
      c.erase(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(c.size() - planned));
    }

    // ----------------------------------------------------------------------------------------------------
    // commit / extend / fork / finish / release

    result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> written) {
      detail::sequence_record* r = sequences_.find(s);
      if (r == nullptr) return errc::unknown_sequence;
      if (n > r->tokens) return errc::out_of_range;
      if (n < r->computed) return errc::invalid_argument;
      for (std::size_t i = 0; i < written.size(); ++i) {
        const std::uint32_t p = written[i];
        if (p > n || std::find(written.begin(), written.begin() + static_cast<std::ptrdiff_t>(i), p) !=
                         written.begin() + static_cast<std::ptrdiff_t>(i))
          return errc::invalid_argument;
        if (std::none_of(r->captures.begin(), r->captures.end(),
                         [p](const capture_point& c) { return c.position == p; }))
          return errc::invalid_argument;
      }

      r->computed = n;
      publish_blocks(*r);
      if constexpr (restores) {
        std::size_t kept = 0;
        for (const capture_point& c : r->captures) {
          if (c.position > n) {
            r->captures[kept++] = c;
            continue;
          }
          detail::slot_node& slot = slots_.node(c.slot);
          const std::uint32_t i = c.position / block_size - 1;
          const bool was_written = std::find(written.begin(), written.end(), c.position) != written.end();
          detail::block_node* b = i < r->chain.size() ? &blocks_.node(r->chain[i]) : nullptr;
          if (was_written && b != nullptr && b->snapshot[static_cast<int>(exactness::prefill_exact)] == no_slot) {
            publish_slot(slot, *b, exactness::prefill_exact, 0);
            ++metrics_.captures_written;
          } else {
            ++metrics_.captures_refused;
            free_slot(slot, /*reusable_now=*/false);
          }
        }
        r->captures.resize(kept);
        if (r->restore_slot != no_slot) {
          unreference_slot(slots_.node(r->restore_slot));
          r->restore_slot = no_slot;
        }
      }
      return {};
    }

    /// Publishes the sequence's blocks that are full and computed, in chain order.
    ///
    /// Keys are computed one block ahead: key i + 1 depends only on key i and the stored tokens (a block and
    /// the published block equal to it, or a block a fork sibling already published, have the same key), so
    /// block i + 1's hash and the prefetch of its index bucket run before block i's probe, which on large
    /// pools misses the caches.
    void publish_blocks(detail::sequence_record& r) noexcept {
      const std::uint32_t full = r.computed / block_size;
      auto i = static_cast<std::uint32_t>(r.chain.size());
      if (i >= full) return;
      block_id parent = i == 0 ? no_block : r.chain[i - 1];
      block_key key = hasher_.chain(i == 0 ? r.root : blocks_.node(parent).key, block_tokens(r.blocks[i]));
      for (; i < full; ++i) {
        const block_id b = r.blocks[i];
        block_key next{};
        if (i + 1 < full) {
          next = hasher_.chain(key, block_tokens(r.blocks[i + 1]));
          index_.prefetch(next);
        }
        detail::block_node& n = blocks_.node(b);
        detail::block_index::insert_commit_data data;
        if (n.state == detail::block_state::cached) { // published by a fork sibling
          r.chain.push_back(b);
          parent = b;
        } else if (detail::block_node* equal = index_.insert_check({key, parent, block_tokens(b), &r.extras}, data)) {
          // An equal block was published first (two equal prompts in flight). Ours stays private (the
          // engine's table points at it); the chain continues through the published one, which the sequence
          // now also holds.
          reference(*equal);
          parent = blocks_.id_of(*equal);
          r.chain.push_back(parent);
          ++metrics_.duplicate_blocks;
        } else {
          n.key = key;
          n.parent = parent;
          n.depth = i;
          n.state = detail::block_state::cached;
          if (i == 0) blocks_.root_extras(b) = r.extras;
          else ++blocks_.node(parent).cached_children;
          index_.insert_commit(n, data);
          r.chain.push_back(b);
          parent = b;
          ++metrics_.blocks_published;
          ++metrics_.blocks_cached;
        }
        key = next;
      }
    }

    result<extend_plan> extend(seq_id s, std::span<const token_id> tokens) {
      detail::sequence_record* r = sequences_.find(s);
      if (r == nullptr) return errc::unknown_sequence;
      if (tokens.size() >= std::size_t{UINT32_MAX} - r->tokens) return errc::out_of_range;
      const auto new_total = static_cast<std::uint32_t>(r->tokens + tokens.size());
      const std::uint32_t needed = (new_total + block_size - 1) / block_size;
      const auto have = static_cast<std::uint32_t>(r->blocks.size());
      if (needed > have && blocks_.available() < needed - have) return errc::pool_exhausted;

      extend_plan plan;
      plan.first_new_block = have;
      for (std::uint32_t i = have; i < needed; ++i) r->blocks.push_back(take_block());
      for (std::size_t k = 0; k < tokens.size(); ++k) {
        const std::uint32_t pos = r->tokens + static_cast<std::uint32_t>(k);
        blocks_.tokens(r->blocks[pos / block_size])[pos % block_size] = tokens[k];
      }
      r->tokens = new_total;
      plan.new_blocks = std::span<const block_id>(r->blocks).subspan(have);
      return plan;
    }

    result<fork_plan> fork(seq_id src, seq_id dst) {
      detail::sequence_record* a = sequences_.find(src);
      if (a == nullptr) return errc::unknown_sequence;
      if (sequences_.find(dst) != nullptr) return errc::duplicate_sequence;
      if (a->computed != a->tokens) return errc::invalid_argument;
      if (sequences_.full()) return errc::pool_exhausted;
      const bool partial = a->tokens % block_size != 0;
      if (partial && blocks_.available() == 0) return errc::pool_exhausted;

      detail::sequence_record& b = sequences_.prepare(dst);
      const std::size_t full = a->tokens / block_size;
      for (std::size_t i = 0; i < full; ++i) {
        reference(blocks_.node(a->blocks[i]));
        b.blocks.push_back(a->blocks[i]);
      }
      for (std::size_t i = 0; i < a->chain.size(); ++i) {
        if (a->chain[i] != a->blocks[i]) reference(blocks_.node(a->chain[i]));
        b.chain.push_back(a->chain[i]);
      }
      fork_plan plan;
      if (partial) {
        const block_id copy = take_block();
        const block_id from = a->blocks[full];
        std::copy_n(blocks_.tokens(from).data(), block_size, blocks_.tokens(copy).data());
        b.blocks.push_back(copy);
        plan.copy_src = from;
        plan.copy_dst = copy;
      }
      b.root = a->root;
      b.extras = a->extras;
      b.tokens = a->tokens;
      b.computed = a->computed;
      sequences_.insert(b);
      ++metrics_.live_sequences;
      plan.block_table = b.blocks;
      plan.copy_recurrent_state = Model::has_recurrent;
      return plan;
    }

    result<finish_plan> finish(seq_id s) {
      detail::sequence_record* r = sequences_.find(s);
      if (r == nullptr) return sequences_.recently_released(s) ? errc::double_release : errc::unknown_sequence;
      finish_plan plan;
      if constexpr (places<policy::end_of_turn>()) {
        const std::uint32_t p = r->computed;
        if (p != 0 && p % block_size == 0 && p / block_size <= r->chain.size()) {
          detail::block_node& b = blocks_.node(r->chain[p / block_size - 1]);
          if (b.snapshot[0] == no_slot && b.snapshot[1] == no_slot) {
            if (detail::slot_node* n = take_slot()) {
              // Written by the engine in the current step: restorable once that step completes.
              publish_slot(*n, b, exactness::decode_continuation, release_tag());
              plan.capture = {p, slots_.id_of(*n)};
              ++metrics_.captures_planned;
              ++metrics_.captures_written;
            } else {
              ++metrics_.captures_refused;
            }
          }
        }
      }
      end(*r);
      return plan;
    }

    result<void> release(seq_id s) {
      detail::sequence_record* r = sequences_.find(s);
      if (r == nullptr) return sequences_.recently_released(s) ? errc::double_release : errc::unknown_sequence;
      end(*r);
      return {};
    }

    void end(detail::sequence_record& r) noexcept {
      if constexpr (restores) {
        if (r.restore_slot != no_slot) unreference_slot(slots_.node(r.restore_slot));
        for (const capture_point& c : r.captures) free_slot(slots_.node(c.slot), /*reusable_now=*/false);
      }
      // Deepest first, so in the LRU queue every block precedes its parent (leaf-first eviction).
      for (std::size_t i = r.blocks.size(); i-- > 0;) {
        if (i < r.chain.size() && r.chain[i] != r.blocks[i]) unreference(blocks_.node(r.chain[i]));
        unreference(blocks_.node(r.blocks[i]));
      }
      sequences_.erase(r);
      --metrics_.live_sequences;
    }

    // ----------------------------------------------------------------------------------------------------
    // invariants

    result<void> check_invariants() const {
      auto fail = [] { return result<void>(errc::invariant_violated); };
      const std::uint32_t nblocks = blocks_.size();
      std::vector<std::uint32_t> refs(nblocks, 0), children(nblocks, 0);
      std::vector<std::uint32_t> slot_refs(slots_.size(), 0), slot_pending(slots_.size(), 0);
      for (const detail::sequence_record& r : sequences_) {
        if (r.blocks.size() != (std::size_t{r.tokens} + block_size - 1) / block_size) return fail();
        if (r.computed > r.tokens || r.chain.size() > r.tokens / block_size) return fail();
        for (block_id b : r.blocks) {
          if (b >= nblocks) return fail();
          ++refs[b];
        }
        for (std::uint32_t i = 0; i < r.chain.size(); ++i) {
          if (r.chain[i] >= nblocks) return fail();
          if (r.chain[i] != r.blocks[i]) {
            ++refs[r.chain[i]];
            if (blocks_.node(r.blocks[i]).state == detail::block_state::cached) return fail();
          }
          const detail::block_node& n = blocks_.node(r.chain[i]);
          if (n.state != detail::block_state::cached || n.depth != i) return fail();
          if (n.parent != (i == 0 ? no_block : r.chain[i - 1])) return fail();
        }
        if (r.restore_slot != no_slot) ++slot_refs[r.restore_slot];
        for (const capture_point& c : r.captures) {
          if (c.slot >= slots_.size() || c.position % alignment != 0 || c.position > r.tokens) return fail();
          ++slot_pending[c.slot];
        }
      }
      std::uint32_t referenced = 0, cached = 0;
      for (block_id b = 0; b < nblocks; ++b) {
        const detail::block_node& n = blocks_.node(b);
        if (n.refcount != refs[b]) return fail();
        referenced += n.refcount != 0;
        const bool in_index = index_.contains(n);
        if (in_index != (n.state == detail::block_state::cached)) return fail();
        const bool queued = n.queue_link.is_linked();
        if (n.state == detail::block_state::free && (n.refcount != 0 || !queued)) return fail();
        if (n.state == detail::block_state::owned && (n.refcount == 0 || queued)) return fail();
        if (n.state == detail::block_state::cached) {
          ++cached;
          if (queued != (n.refcount == 0)) return fail();
          if (n.parent != no_block) {
            if (blocks_.node(n.parent).state != detail::block_state::cached) return fail();
            if (blocks_.node(n.parent).depth + 1 != n.depth) return fail();
            ++children[n.parent];
          } else if (n.depth != 0) {
            return fail();
          }
        } else if (n.snapshot[0] != no_slot || n.snapshot[1] != no_slot) {
          return fail();
        }
      }
      for (block_id b = 0; b < nblocks; ++b)
        if (blocks_.node(b).cached_children != children[b]) return fail();
      if (index_.size() != cached) return fail();
      if (blocks_.free().size() + blocks_.lru().size() + referenced != nblocks) return fail();
      // LRU order: every block precedes its parent, so the head is always a leaf.
      std::vector<std::uint8_t> seen(nblocks, 0);
      for (const detail::block_node& n : blocks_.lru()) {
        if (n.state != detail::block_state::cached || n.refcount != 0) return fail();
        const block_id b = blocks_.id_of(n);
        if (children[b] != 0) {
          // a cached child is either referenced (then so would be this block) or already seen
          for (block_id c = 0; c < nblocks; ++c)
            if (blocks_.node(c).state == detail::block_state::cached && blocks_.node(c).parent == b && !seen[c])
              return fail();
        }
        seen[b] = 1;
      }
      for (const detail::block_node& n : blocks_.free())
        if (n.state != detail::block_state::free) return fail();
      // Snapshots.
      std::uint32_t held = 0;
      for (slot_id s = 0; s < slots_.size(); ++s) {
        const detail::slot_node& n = slots_.node(s);
        if (slot_pending[s] > 1) return fail();
        switch (n.state) {
        case detail::slot_state::free:
          if (slot_pending[s] != 0 || slot_refs[s] != 0 || !n.queue_link.is_linked()) return fail();
          break;
        case detail::slot_state::pending:
          if (slot_pending[s] != 1 || slot_refs[s] != 0 || n.queue_link.is_linked()) return fail();
          break;
        case detail::slot_state::published: {
          ++held;
          if (slot_pending[s] != 0 || n.refcount != slot_refs[s]) return fail();
          if (n.queue_link.is_linked() != (n.refcount == 0)) return fail();
          if (n.block >= nblocks) return fail();
          const detail::block_node& b = blocks_.node(n.block);
          if (b.state != detail::block_state::cached || b.snapshot[static_cast<int>(n.kind)] != s) return fail();
          const std::uint32_t position = (b.depth + 1) * block_size;
          if (n.kind == exactness::prefill_exact && position % alignment != 0) return fail();
          if (n.refcount != 0 && b.refcount == 0) return fail(); // a restorer holds the block too
          break;
        }
        }
      }
      for (block_id b = 0; b < nblocks; ++b)
        for (slot_id s : blocks_.node(b).snapshot)
          if (s != no_slot && (s >= slots_.size() || slots_.node(s).block != b)) return fail();
      std::size_t free_slots = 0, idle_snapshots = 0;
      for (const detail::slot_node& n : slots_.free()) free_slots += n.state == detail::slot_state::free;
      for (const detail::slot_node& n : slots_.lru()) idle_snapshots += n.state == detail::slot_state::published;
      if (free_slots != slots_.free().size() || idle_snapshots != slots_.lru().size()) return fail();
      // Gauges.
      if (metrics_.live_sequences != sequences_.size() || metrics_.blocks_referenced != referenced ||
          metrics_.blocks_cached != cached || metrics_.blocks_free != blocks_.free().size() ||
          metrics_.snapshots_held != held ||
          metrics_.snapshot_bytes_held != std::uint64_t{held} * (restores ? Model::bytes_per_snapshot : 0))
        return fail();
      return {};
    }

    cache_options options_;
    std::uint64_t seed_;
    Hasher hasher_;
    detail::block_pool blocks_;
    detail::block_index index_;
    detail::snapshot_pool slots_;
    detail::sequence_table sequences_;
    cache_metrics metrics_{};
  };

  explicit prefix_cache(std::unique_ptr<state> s) noexcept : st_(std::move(s)) {}

  std::unique_ptr<state> st_;
};

} // namespace reprise
