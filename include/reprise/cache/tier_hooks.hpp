// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What the core and the tiers below the GPU share: the core's parts a tier component reads and writes
/// (`tier_context`), the restore a lookup chose (`restore_choice`), and `no_tiers`, the component of a cache
/// without lower tiers (`policy::tiers<>`), whose hooks do nothing.
///
/// The hooks, in the order of the engine-facing flow. A tier component (`host_tier`, host_tier.hpp, with the
/// remote tier below it, remote_tier.hpp) provides each; the core calls nothing else of it:
///
///   sequence_prepared / sequence_forked / sequence_ended   a sequence record's side-table entry
///   lookup_started / lookup_continue / hits / hit_kind / matched_serial   a lookup continuing past the GPU
///   tail_snapshot / host_tails / snapshot_at               restore candidates below the GPU
///   onboard_count / onboard / tail_onboarded / restoring   bringing a hit back (admit)
///   block_published / snapshot_published                   a block or snapshot published on the GPU
///   block_evicted                                          a GPU block evicted (its snapshots with it)
///   supersede / restore_done                               a turn end superseded; a restore has run
///   take_transfers / step_completed                        the moves planned; a step complete
///   check                                                  the component's own invariants
///
/// And one for a component beside the core, called once when it is built: `set_listener` names the
/// `host_listener` (below; `state_events`, state_events.hpp) that hears which host units hold what GPU memory
/// held, and when they stop.

#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <cstdint>
#include <span>

namespace reprise::detail {

/// The core's parts a tier component uses. The core outlives its components and never moves (it lives
/// behind the façade's `unique_ptr`), so the references stay valid.
struct tier_context {
  block_ledger& blocks;
  snapshot_ledger& slots;
  sequence_table& sequences;
  const cache_geometry& geometry;
  const cache_options& options;
  const epoch_clock& clock;
  cache_metrics& metrics;
};

/// What a prompt restores: the usable skip and where its state comes from. One meaning per field: a GPU
/// snapshot slot, or a host snapshot unit, never one in the other's field.
struct restore_choice {
  std::uint32_t usable = 0;
  slot_id slot = no_slot;                 ///< a GPU snapshot slot to restore from
  host_unit host_snapshot = no_host_unit; ///< or a host snapshot unit (`policy::host_tier`)
  exactness kind = exactness::prefill_exact; ///< of the snapshot restored
  block_id tail = no_block;               ///< a kept partial block to copy (its snapshot sits at `usable`)
  host_unit host_tail = no_host_unit;     ///< or one to onboard from the host tier
  bool has_tail() const noexcept { return tail != no_block || host_tail != no_host_unit; }
  bool restores() const noexcept { return slot != no_slot || host_snapshot != no_host_unit; }
};

/// What `onboard` brought back for one prompt: full KV blocks copied from host units, and of those the
/// blocks whose units the remote store filled.
struct onboarded_blocks {
  std::uint32_t blocks = 0;
  std::uint32_t from_store = 0;
};

/// What a component beside the core hears of the host tier (`state_events` listens, state_events.hpp).
///
/// - `block_offloaded(b, u)`: host unit `u` of the KV pool now holds what GPU block `b` holds (a fresh copy,
///   or the copy `b` was onboarded from, still cached); `snapshot_offloaded(s, u)`: host unit `u` of the
///   snapshot pool holds what GPU slot `s` holds (a fresh copy, or one of the same block and class). Both are
///   called while `b` or `s` still holds it, before the GPU ledgers drop it.
/// - `host_unit_dropped(pool, u)`: cached unit `u` of `pool` is about to be reused (the host LRU evicts it).
class host_listener {
public:
  virtual void block_offloaded(block_id from, host_unit to) noexcept = 0;
  virtual void snapshot_offloaded(slot_id from, host_unit to) noexcept = 0;
  virtual void host_unit_dropped(host_pool_kind pool, host_unit u) noexcept = 0;

protected:
  ~host_listener() = default;
};

/// `policy::tiers<>`: nothing below the GPU. Every hook is empty, so the core compiles none of the tiers.
struct no_tiers {
  static constexpr bool enabled = false;

  explicit no_tiers(const tier_context&) noexcept {}
  void set_listener(host_listener*) noexcept {}

  void sequence_prepared(const sequence_record&, const extra_keys&) noexcept {}
  void sequence_forked(const sequence_record&, const sequence_record&) noexcept {}
  void sequence_ended(const sequence_record&) noexcept {}

  void lookup_started() noexcept {}
  template <std::uint32_t B, class Hasher>
  void lookup_continue(const sequence_record&, std::uint32_t, block_key, exactness, bool, std::span<const token_id>,
                       const Hasher&) noexcept {}
  std::uint32_t hits() const noexcept { return 0; }
  exactness hit_kind(std::uint32_t) const noexcept { return exactness::prefill_exact; }
  std::uint64_t matched_serial(const sequence_record&, std::uint32_t) const noexcept { return 0; }

  host_unit tail_snapshot(block_id) const noexcept { return no_host_unit; }
  void host_tails(const sequence_record&, std::uint32_t, std::span<const token_id>, restore_choice&) const noexcept {}
  restore_choice snapshot_at(const sequence_record&, std::uint32_t, bool, bool) const noexcept { return {}; }

  std::uint32_t onboard_count(std::uint32_t, std::uint32_t matched, const restore_choice&, bool) noexcept {
    return matched;
  }
  template <std::uint32_t B, class TakeBlock>
  onboarded_blocks onboard(sequence_record&, std::uint32_t, const restore_choice&, TakeBlock&&) noexcept {
    return {};
  }
  bool tail_onboarded(const restore_choice&, block_id) noexcept { return false; }
  void restoring(sequence_record&, const restore_choice&, bool) noexcept {}

  void block_published(block_id, const sequence_record&) noexcept {}
  void snapshot_published(slot_id, block_id, exactness) noexcept {}
  void block_evicted(const block_node&) noexcept {}

  void supersede(const sequence_record&) noexcept {}
  void restore_done(sequence_record&) noexcept {}

  transfer_plan take_transfers() noexcept { return {}; }
  void step_completed(epoch_t) noexcept {}

  std::uint32_t kv_units() const noexcept { return 0; }
  std::uint32_t snapshot_units() const noexcept { return 0; }
};

} // namespace reprise::detail
