// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `prefix_cache<Model, Policy, Hasher>`: the façade an engine's scheduler calls. One class serves the three
/// policies (`policy::block_sharing`, `policy::snapshot_restore<...>`, `policy::memory_only`) and two ways
/// of knowing the model:
///
/// \code
/// // The model known at run time (read from a checkpoint's config): the checks are errcs of `create`.
/// auto model = reprise::model_config::make({...});
/// auto cache = reprise::prefix_cache<reprise::dynamic_model, reprise::policy::snapshot_restore<>>::create(
///     *model, {.kv_blocks = 4096, .snapshot_budget_bytes = 8ull << 30});
/// // The model known at compile time: the same checks are static_asserts.
/// auto typed = reprise::prefix_cache<reprise::presets::nemotron_h_8b, reprise::policy::snapshot_restore<>>::create(
///     {.kv_blocks = 4096, .snapshot_budget_bytes = 8ull << 30});
/// \endcode
///
/// Both run the same core (cache_core.hpp); the policy is always a compile-time parameter.
///
/// Engine-facing flow, all from the scheduler thread while it plans step n:
///   1. `admit(seq, prompt, keys)` -> block table (shared + fresh blocks), usable skip u, restore slot,
///      capture list (position -> slot) for the prefill kernels.
///   2. The engine runs step n: restore (slot -> live state), chunked prefill of [u, L) writing captures,
///      KV writes into the sequence's own blocks.
///   3. `commit(seq, n, written)` publishes the blocks that became full and the captures the engine wrote;
///      `extend(seq, tokens)` appends decode tokens (maybe a new block); `finish(seq)` optionally captures
///      an end-of-turn snapshot and releases; `release(seq)` drops references (blocks stay cached).
///   4. `step_complete(n)` once step n's kernels are done: blocks and slots given up during step n become
///      reusable (kernels of step n may still read them until then).
///
/// Threading: not thread-safe. Drive one cache from one thread (the scheduler), as vLLM and SGLang do;
/// `metrics()` and `check_invariants()` read the same state and need the same thread.
///
/// Errors: every fallible call returns `result<...>` carrying a `reprise::errc`; a call that fails has
/// changed nothing, metrics included. Nothing throws except `create`, which allocates every pool up front
/// (`std::bad_alloc`); after it the hot path allocates nothing except when a sequence's block table first
/// outgrows the capacity its record kept from earlier use.
///
/// A moved-from cache is empty: it has no pools and no sequences, `admit` and `fork` report
/// `pool_exhausted`, the calls naming a sequence `unknown_sequence`, and its metrics are zero.

#include <reprise/cache/cache_core.hpp>
#include <reprise/cache/config_rules.hpp>
#include <reprise/cache/invariants.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/xxh3_hasher.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/model_config.hpp>

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <limits>
#include <memory>
#include <new>
#include <random>
#include <span>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise {

/// The model parameter of a cache whose model is known only at run time (`create` takes a `model_config`).
struct dynamic_model {};

/// What a cache may be built over: a `hybrid_model<...>` type or `dynamic_model`.
template <class M>
concept cache_model = model<M> || std::same_as<M, dynamic_model>;

/// The geometry of a validated runtime model.
inline cache_geometry geometry_of(const model_config& m) noexcept {
  return {m.block_size(), m.alignment(), m.bytes_per_kv_block(), m.bytes_per_snapshot(), m.has_recurrent()};
}
/// The geometry of a compile-time model.
template <model Model>
constexpr cache_geometry geometry_of() noexcept {
  return {Model::block_size, Model::alignment, Model::bytes_per_kv_block, Model::bytes_per_snapshot,
          Model::has_recurrent};
}


namespace detail {
/// The configuration rules a typed cache breaks whatever its options, as `static_assert`s: the tiers' with any
/// model, the model's too when it is a compile-time one.
template <class Model, class Policy, class Tiers>
constexpr bool typed_config_checks() noexcept {
  static_assert(tier_config_checks<Policy, Tiers>::ok);
  if constexpr (model<Model>) return model_config_checks<Policy, geometry_of<Model>()>::ok;
  else return true;
}
} // namespace detail

template <cache_model Model, policy::cache_policy Policy, hasher Hasher = xxh3_hasher,
          policy::tier_list Tiers = policy::tiers<>>
class prefix_cache {
  // The rules the types decide fail here, with the words `check` reports at run time (config_rules.hpp).
  static_assert(detail::typed_config_checks<Model, Policy, Tiers>());
  using core = detail::cache_core<Policy, Hasher, Tiers>;

public:
  using model_type = Model;
  using policy_type = Policy;
  using hasher_type = Hasher;
  using tiers_type = Tiers;

  /// Creates a cache for the compile-time model `Model`. See the runtime overload for effects and errors
  /// (those the model type already rules out cannot occur).
  static result<prefix_cache> create(const cache_options& options)
    requires model<Model>
  {
    return make(geometry_of<Model>(), with_prefill_cost(options, model_config::of<Model>()));
  }

  /// Creates a cache for the runtime model `m`.
  ///
  /// Effects: allocates every pool (blocks and their stored tokens, index buckets, sequence records,
  /// snapshot slots); throws `std::bad_alloc` when they do not fit in memory.
  /// Errors: `to_errc(check(m, options))`, the first `config_rule` broken (config_rules.hpp lists them in
  /// order, with the message each prints): `invalid_argument` (`kv_blocks` or `max_sequences` is 0; a
  /// snapshot policy on a model whose snapshot has no bytes; `decode_checkpoints_per_sequence` 0 with `policy::decode_checkpoints`; with a
  /// host tier, a model whose KV block has no bytes; with a remote tier, no `remote_keys` or
  /// `remote_snapshot_candidates` 0); `out_of_range` (`kv_blocks` or `max_sequences` above `max_pool_ids`);
  /// `unsupported_config` (a block size outside `supported_block_sizes`, `block_sharing` on a model with
  /// recurrent layers, `snapshot_restore` on an attention-only one, `share_in_step` with a policy other
  /// than `block_sharing` or with a host tier, a host tier under `memory_only`, host snapshot budget under
  /// a policy that restores none, host budgets without a host tier, `remote_keys` or
  /// `remote_write_through` without a remote tier); `budget_too_small` (a `snapshot_restore` budget below
  /// one snapshot, a host KV budget below one block, a non-zero host snapshot budget below one snapshot);
  /// `misaligned` (an alignment that is not a multiple of the block size, an `every<I>` or
  /// `cache_options::capture_interval` that is 0 or off the alignment unit, a `decode_checkpoint_interval`
  /// off it).
  /// Complexity: linear in the pool sizes.
  static result<prefix_cache> create(const model_config& m, const cache_options& options)
    requires std::same_as<Model, dynamic_model>
  {
    return make(geometry_of(m), with_prefill_cost(options, m));
  }

  /// The first configuration rule the compile-time model `Model` and `options` break with this policy and
  /// these tiers, or `config_rule::ok`: what `create` would fail with (`to_errc`), and why
  /// (`rule_message`). Allocates nothing. Complexity: O(1).
  static constexpr config_rule check(const cache_options& options) noexcept
    requires model<Model>
  {
    return check_config<Policy, Tiers>(geometry_of<Model>(), options);
  }

  /// As above, for the runtime model `m`.
  static config_rule check(const model_config& m, const cache_options& options) noexcept
    requires std::same_as<Model, dynamic_model>
  {
    return check_config<Policy, Tiers>(geometry_of(m), options);
  }

  prefix_cache(prefix_cache&&) noexcept = default;
  prefix_cache& operator=(prefix_cache&&) noexcept = default;

  /// Admits a new sequence with prompt `prompt` and plans its prefill.
  ///
  /// Effects: looks up the longest verified chain of cached full blocks for the prompt (at most
  /// floor((L - 1) / B) blocks, so at least one token is computed; with a prefill-exact policy only blocks
  /// whose KV was computed prefill-exactly), references them, allocates fresh blocks for the rest (evicting
  /// least-recently-used unreferenced cached blocks, leaf first, when the free queue holds no reusable
  /// block), and with `snapshot_restore` picks the deepest usable snapshot (usable = largest u <= KV match
  /// with a snapshot at exactly u the accept policy allows) and plans captures. `capture_offsets` is read
  /// only with `policy::caller_offsets` (in `policy::chat`): positions on the capture grid (the alignment
  /// unit, or the KV block size where the policy captures off the alignment grid) where the caller wants
  /// snapshots, e.g. its system prompt's end rounded down. With `cache_options::share_in_step` the chain continues into the full
  /// blocks that sequences admitted earlier in the current step compute and have not committed yet (see
  /// the option for the engine's precondition). Media items in `keys.media` key the blocks and snapshots from
  /// their positions on (block_key.hpp): the blocks before the first one are shared with text prompts.
  /// Errors: `duplicate_sequence` (s is live); `invalid_argument` (empty prompt; media items not in strictly
  /// increasing position order, or a media digest over `max_multimodal_digest_bytes`; capture offsets given
  /// to a policy without `caller_offsets`); `out_of_range` (a prompt over `max_sequence_tokens(B)`, a media
  /// item at or past the prompt's end, or a caller offset outside (0, L]); `misaligned` (a caller offset off
  /// the capture grid); `pool_exhausted` (no free sequence record, or not enough reusable blocks).
  /// Complexity: O(L) hashing plus O(1) expected per block.
  result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys = {},
                           std::span<const std::uint32_t> capture_offsets = {}) {
    if (!st_) return errc::pool_exhausted;
    return st_->admit(s, prompt, keys, capture_offsets);
  }

  /// Declares that the sequence's first `n_computed` tokens are computed (absolute, non-decreasing):
  /// publishes every block that became full, and the captures listed in `captures_written` (positions).
  /// Planned captures at positions <= n_computed that are not listed are dropped and their slots freed.
  /// Also ends the sequence's hold on its restore slot (the restore copy has run).
  ///
  /// Errors: `unknown_sequence`; `out_of_range` (n_computed > tokens known); `invalid_argument`
  /// (n_computed below an earlier commit, or a written position that is not a planned capture
  /// <= n_computed, or listed twice); `unwritten_blocks` (`share_in_step`: a block the sequence shares
  /// within its step is not written yet, as its writer has not committed; or never will be, as the writer's
  /// first commit stopped short of it, the writer ended first or the step completed first: release it).
  /// Complexity: O(B) per newly full block plus O(written x log captures + captures).
  result<void> commit(seq_id s, std::uint32_t n_computed, std::span<const std::uint32_t> captures_written = {}) {
    if (!st_) return errc::unknown_sequence;
    return st_->commit(s, n_computed, captures_written);
  }

  /// `commit` given the written captures as the plans hand them out (`admit_plan::captures`,
  /// `extend_plan::captures`, or the subset the engine wrote): their positions, with no narrowing at the call.
  ///
  /// Errors: those of `commit`, and `invalid_argument` for a position outside [0, 2^32) (never one a plan
  /// hands out). Complexity: that of `commit`, plus one copy of the positions (on the stack up to 32).
  result<void> commit(seq_id s, std::uint32_t n_computed, std::span<const capture_point> captures_written) {
    constexpr std::size_t on_stack = 32;
    std::array<std::uint32_t, on_stack> small{};
    std::vector<std::uint32_t> large;
    std::span<std::uint32_t> positions(small.data(), captures_written.size());
    if (captures_written.size() > on_stack) {
      large.resize(captures_written.size());
      positions = large;
    }
    for (std::size_t i = 0; i < captures_written.size(); ++i) {
      const std::int64_t p = captures_written[i].position;
      if (p < 0 || p > std::int64_t{std::numeric_limits<std::uint32_t>::max()}) return errc::invalid_argument;
      positions[i] = static_cast<std::uint32_t>(p);
    }
    return commit(s, n_computed, std::span<const std::uint32_t>(positions));
  }

  /// Appends decode tokens to a live sequence; allocates the blocks they need. In a model with recurrent
  /// layers the KV of decoded tokens is `decode_continuation`-exact: blocks holding it are published as
  /// such and reused only under a policy that accepts it.
  ///
  /// Errors: `unknown_sequence`; `pool_exhausted` (not enough reusable blocks); `out_of_range` (the
  /// sequence would exceed `max_sequence_tokens(B)` tokens).
  /// Complexity: O(new tokens).
  result<extend_plan> extend(seq_id s, std::span<const token_id> new_tokens) {
    if (!st_) return errc::unknown_sequence;
    return st_->extend(s, new_tokens);
  }

  /// Ends a turn: with `policy::end_of_turn` plans a `decode_continuation` capture of the live state at the
  /// committed position p (off a block boundary the partial block [floor(p / B) B, p) is kept with it) when
  /// no equal snapshot exists and a slot is reusable; then releases the sequence as `release` does.
  ///
  /// Errors: as `release`; with `policy::end_of_turn`, `invalid_argument` when the live state is not known
  /// to be at p: the prompt was never committed whole (its restore, copy or prefill may not have run), or
  /// more than one extended token is uncommitted (the last sampled token, never fed, is the one allowed).
  /// Call `release` to end such a sequence. With `o.last_turn` nothing is captured (and nothing refused):
  /// the turn end this turn restored from and its decode checkpoints go first when a slot is needed.
  /// Complexity: as `release`.
  result<finish_plan> finish(seq_id s, finish_options o = {}) {
    if (!st_) return errc::unknown_sequence;
    return st_->finish(s, o);
  }

  /// Drops the sequence's references. Its blocks stay cached (unreferenced ones join the LRU queue);
  /// blocks never published and planned capture slots are freed, reusable after the current step completes.
  /// With `share_in_step`, released before its first commit, the sequence writes none of its blocks: the
  /// sequences that share them can no longer commit (`unwritten_blocks`).
  ///
  /// Errors: `double_release` (s was released recently), `unknown_sequence` (otherwise not live).
  /// Complexity: O(blocks of the sequence).
  result<void> release(seq_id s) {
    if (!st_) return errc::unknown_sequence;
    return st_->release(s);
  }

  /// Copy-on-write fork: `dst` shares every full block of `src`; the partial last block, if any, gets a
  /// fresh block that the engine fills with its copy kernel. Both sequences then continue independently.
  ///
  /// Errors: `unknown_sequence` (src); `duplicate_sequence` (dst live); `invalid_argument` (src has
  /// uncomputed tokens: fork after commit); `pool_exhausted` (no record or no block for the copy).
  /// Complexity: O(blocks of src).
  result<fork_plan> fork(seq_id src, seq_id dst) {
    if (!st_) return errc::unknown_sequence;
    return st_->fork(src, dst);
  }

  /// Reports that every kernel of step `n` has finished: blocks and slots given up while step n (or an
  /// earlier one) was scheduled become reusable, end-of-turn snapshots captured in it become restorable,
  /// and snapshots idle past the TTL are evicted. The current epoch becomes at least n + 1. Completing a
  /// step completes every earlier one; completing an old step again changes nothing. With
  /// `share_in_step`, advancing the current epoch ends its sharing: blocks not committed in it are offered
  /// no more, and their sharers can no longer commit.
  ///
  /// Errors: `out_of_range` (n > `max_epoch`: the step after it could not be numbered).
  /// Complexity: amortized O(1) per node that becomes reusable, plus O(evicted snapshots).
  result<void> step_complete(epoch_t n) noexcept {
    if (!st_) return n > max_epoch ? result<void>(errc::out_of_range) : result<void>();
    return st_->step_complete(n);
  }

  /// `policy::host_tier`: the moves between GPU and host memory that the calls since the previous
  /// `take_transfers` planned (offloads of what the GPU pools evicted, onboards of host hits). Call it once
  /// per step, after the step's admit / extend / fork / finish calls, and issue the moves before that step's
  /// other work (types.hpp, `transfer_plan`). The spans stay valid until the next call. Empty without a
  /// host tier.
  transfer_plan take_transfers() noexcept { return st_ ? st_->take_transfers() : transfer_plan{}; }

  /// `policy::remote_tier`: fetches from the fleet's store of what `prompt` would reuse and the GPU and host
  /// tiers lack (prefill-exact blocks and snapshots), each into a reserved host unit. Call it when a request
  /// arrives; run the puts of the next `take_transfers` before starting the fetches; report each with
  /// `fetched`. The spans stay valid until the next `prefetch`. Without a remote tier: an empty plan.
  /// Errors: `invalid_argument` (empty prompt, media items as `admit` refuses them), `out_of_range` (too long,
  /// a media item past the prompt).
  result<fetch_plan> prefetch(std::span<const token_id> prompt, const extra_keys& keys = {}) {
    if (!st_) return errc::pool_exhausted;
    return st_->prefetch(prompt, keys);
  }

  /// `policy::remote_tier`: as above, fetching only the values in `in_store`, the keys a `probe` of this
  /// prompt found in the store: blocks up to the first one absent and, for a model with recurrent layers,
  /// only up to the deepest snapshot found. A prompt's new content then reserves no host unit.
  result<fetch_plan> prefetch(std::span<const token_id> prompt, const extra_keys& keys,
                              std::span<const content_key> in_store) {
    if (!st_) return errc::pool_exhausted;
    return st_->prefetch(prompt, keys, &in_store);
  }

  /// `policy::remote_tier`: the content keys a `prefetch` of `prompt` could fetch now (blocks in chain
  /// order, then snapshots deepest first, then with `remote_turn_ends` turn ends and the continuation blocks
  /// they link to), for the engine to ask the store which it has (`redis_store::probe`)
  /// before `prefetch(prompt, keys, in_store)`. Reserves and changes nothing. The span stays valid until the
  /// next `probe`. Without a remote tier: empty. Errors: as `prefetch`'s.
  result<probe_plan> probe(std::span<const token_id> prompt, const extra_keys& keys = {}) {
    if (!st_) return errc::pool_exhausted;
    return st_->probe(prompt, keys);
  }

  /// `policy::remote_tier`: the fetch into host unit `unit` finished; `header` is the header the store
  /// returned with the value (its payload already in the unit), empty for a miss. The value is used only
  /// if the header equals the one the prompt implies. Errors: `invalid_argument` when no fetch into that unit
  /// is pending (nothing changes).
  result<void> fetched(remote_item item, std::uint32_t unit, std::span<const std::byte> header) {
    if (!st_) return errc::invalid_argument;
    return st_->fetched(item, unit, header);
  }

  /// `cache_options::state_events`: what this cache stored and removed since the previous call (full KV blocks
  /// and snapshots in GPU memory or the host tier, by content key, class and position), for a fleet router
  /// (`routing::state_router::apply`). Call it once per step. The span stays valid until the next call;
  /// empty without the option.
  std::span<const state_event> take_state_events() noexcept {
    return st_ ? st_->events.take() : std::span<const state_event>{};
  }

  /// The step being scheduled now (starts at 0).
  epoch_t current_epoch() const noexcept { return st_ ? st_->clock.current : 0; }

  const cache_metrics& metrics() const noexcept { return st_ ? st_->metrics : empty_metrics; }

  /// The five numbers the cache uses from its model.
  cache_geometry geometry() const noexcept { return st_ ? st_->geometry : cache_geometry{}; }
  std::uint32_t block_size() const noexcept { return geometry().block_size; }
  std::uint32_t alignment() const noexcept { return geometry().alignment; }

  /// Snapshot slots the engine must provide (0 unless `snapshot_restore`).
  std::uint32_t snapshot_slots() const noexcept { return st_ ? st_->slots.size() : 0; }
  /// The idle snapshots the next eviction would choose among, oldest first (at most `out.size()` and the
  /// eviction window; snapshot_eviction.hpp), with the value the cost-aware rule gives each; returns how many.
  /// Changes nothing. Complexity: O(window * 64).
  std::size_t snapshot_eviction_candidates(std::span<policy::snapshot_candidate> out) const noexcept {
    return st_ ? st_->slots.candidates(out) : 0;
  }
  std::uint32_t kv_blocks() const noexcept { return st_ ? st_->blocks.size() : 0; }
  /// Units of the host tier's KV pool and snapshot pool (`policy::host_tier`; 0 without).
  std::uint32_t host_kv_units() const noexcept { return st_ ? st_->tiers.kv_units() : 0; }
  std::uint32_t host_snapshot_units() const noexcept { return st_ ? st_->tiers.snapshot_units() : 0; }
  std::uint64_t hasher_seed() const noexcept { return st_ ? st_->seed : 0; }

  /// The block table of a live sequence (empty if unknown). Valid until the next non-const call.
  std::span<const block_id> block_table(seq_id s) const noexcept {
    const detail::sequence_record* r = st_ ? st_->sequences.find(s) : nullptr;
    return r ? std::span<const block_id>(r->blocks) : std::span<const block_id>{};
  }

  /// Recomputes every refcount, queue membership, index entry, parent/child count, LRU order, snapshot
  /// attachment and gauge from scratch and compares. For tests and debugging.
  /// Errors: `invariant_violated`. Complexity: O(blocks + slots + table entries).
  result<void> check_invariants() const {
    if (!st_) return {};
    return detail::check_invariants(*st_);
  }

private:
  static constexpr cache_metrics empty_metrics{};

  static result<prefix_cache> make(const cache_geometry& g, const cache_options& options) {
    if (const errc e = core::validate(g, options); e != errc{}) return e;
    const std::uint64_t seed = options.hasher_seed ? *options.hasher_seed : random_seed();
    cache_options o = options;
    if (o.remote_turn_ends && o.remote_writer_id == 0) o.remote_writer_id = random_seed() | 1; // never 0
    return prefix_cache(std::make_unique<core>(g, o, seed));
  }

  /// `options` with the prefill cost model cost-aware snapshot eviction reads, derived from `m` unless given.
  static cache_options with_prefill_cost(const cache_options& options, const model_config& m) noexcept {
    cache_options o = options;
    if (o.prefill_cost.empty()) o.prefill_cost = prefill_cost_of(m);
    return o;
  }

  static std::uint64_t random_seed() {
    std::random_device device;
    return (std::uint64_t{device()} << 32) ^ device();
  }

  explicit prefix_cache(std::unique_ptr<core> s) noexcept : st_(std::move(s)) {}

  std::unique_ptr<core> st_;
};

/// A cache whose model is known at run time: `runtime_prefix_cache<Policy>::create(model_config, options)`.
template <policy::cache_policy Policy, hasher Hasher = xxh3_hasher, policy::tier_list Tiers = policy::tiers<>>
using runtime_prefix_cache = prefix_cache<dynamic_model, Policy, Hasher, Tiers>;

} // namespace reprise
