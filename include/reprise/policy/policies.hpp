// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The compile-time cache policies, as small tag types composed like Boost.Intrusive options:
///
/// \code
/// reprise::prefix_cache<llama3_8b, policy::block_sharing>                        // attention only
/// reprise::prefix_cache<nemotron_h_8b, policy::snapshot_restore<>>               // hybrid, skip via snapshots
/// reprise::prefix_cache<nemotron_h_8b, policy::snapshot_restore<
///     policy::accept_any, policy::capture<policy::every<1024>, policy::end_of_turn>>> // options in any order
/// reprise::prefix_cache<nemotron_h_8b, policy::memory_only>                      // share KV, skip nothing
/// \endcode
///
/// Policies check themselves where they are used: an option that is neither a `capture<...>` nor an accept
/// policy, a placement that computes no positions, or a bare placement given without `capture<...>` is a
/// `static_assert` naming what is valid. They are checked against a model where the cache is instantiated
/// (`block_sharing` on a recurrent model, an `every<I>` off the alignment unit); with a runtime model the
/// same checks are `errc`s of `create`.
///
/// This header sits below the cache: it knows positions and counts, never the cache's types.

#include <reprise/errc.hpp>
#include <reprise/ids.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <type_traits>

namespace reprise::policy {

// ----- capture placement -----

/// What a placement sees when it plans the captures of one admitted prompt. Positions are 64-bit so that
/// arithmetic near the 2^32-token limit cannot wrap.
struct capture_context {
  std::uint64_t usable = 0;     ///< prefill starts here: planned positions must be > usable
  std::uint64_t kv_matched = 0; ///< tokens whose KV was found cached
  std::uint64_t length = 0;     ///< prompt length: planned positions must be <= length
  std::uint64_t alignment = 1;  ///< the model's alignment unit: positions off it are dropped (see `off_grid`)
  std::uint64_t block_size = 1; ///< the KV block size (`kv_matched` is a multiple of it unless a tail matched)
  /// Whether the cached tree continues past `kv_matched` with other tokens than this prompt's: the last
  /// matched block has cached children (another prompt shared the prefix and went on differently).
  bool diverges = false;
  std::uint64_t interval = 0;   ///< `cache_options::capture_interval`
  std::span<const std::uint32_t> offsets{}; ///< offsets the caller passed to `admit`
  /// The grid a capture may sit on: `alignment`, or `block_size` when a placement of the policy captures off
  /// the alignment grid (those captures are `decode_continuation`).
  std::uint64_t capture_grid = 1;
};

namespace detail {
/// The sink a placement's `positions` is probed with (any callable taking a position works at run time).
struct position_probe {
  void operator()(std::uint64_t) const noexcept {}
};
/// Calls `add(p)` for p = k * interval in (c.usable, c.length], k >= 1. Cannot wrap: p <= length < 2^33.
template <class Add>
constexpr void add_multiples(const capture_context& c, std::uint64_t interval, Add&& add) {
  if (interval == 0) return;
  for (std::uint64_t p = (c.usable / interval + 1) * interval; p <= c.length; p += interval) add(p);
}
} // namespace detail

/// A capture placement: a type with `static void positions(const capture_context&, Add&& add)` that calls
/// `add(position)` for each position it wants a snapshot at (the planner drops positions outside
/// (usable, length] or off the alignment grid, and duplicates). It may also define
/// `static errc validate(const capture_context&)` (checked by `admit` before anything changes),
/// `static constexpr std::uint32_t fixed_interval` (checked against the model's alignment unit), and
/// `static constexpr bool off_grid = true`: then positions on the KV block grid are kept too, as
/// `decode_continuation` captures (the engine ends a prefill piece there), which needs `accept_any`.
template <class P>
concept capture_placement = requires(const capture_context& c, detail::position_probe add) {
  { P::positions(c, add) } -> std::same_as<void>;
};

/// A placement that `finish` serves instead of `admit` (`end_of_turn`).
template <class P>
concept turn_end_placement = requires { requires P::at_turn_end; };

/// A placement that `extend` serves (`decode_checkpoints`).
template <class P>
concept decode_placement = requires { requires P::at_decode; };

/// Capture every `Interval` tokens (at absolute multiples of it). `Interval` must be a multiple of the
/// model's alignment unit.
template <std::uint32_t Interval>
struct every {
  static_assert(Interval > 0, "policy::every<I>: I must be positive");
  static constexpr std::uint32_t fixed_interval = Interval;
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    detail::add_multiples(c, Interval, add);
  }
};

/// `every` with the interval read from `cache_options::capture_interval` (checked by `create`: positive
/// and a multiple of the alignment unit).
struct every_interval {
  static constexpr bool reads_interval = true;
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    detail::add_multiples(c, c.interval, add);
  }
};

/// Capture at the last aligned position before the prompt end: floor((L - 1) / A) * A, the deepest snapshot
/// a repeat of the same prompt can use.
struct last_aligned {
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    if (c.length != 0) add((c.length - 1) / c.alignment * c.alignment);
  }
};

/// Capture where the prompt leaves the cached tree, aligned down (SGLang's `mamba_branching_seqlen`): the
/// next prompt that shares the prefix and then diverges elsewhere restores there.
struct branch_point {
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    add(c.kv_matched / c.alignment * c.alignment);
  }
};

/// Capture at the end of the last KV block the prompt shares with the cached tree, when the tree goes on
/// there with other tokens: the block-granular branch point. Where `branch_point` rounds down to the
/// alignment grid (up to A - 1 shared tokens recomputed by every later prompt, 255 for A = 256), this loses
/// at most B - 1. The position is off the alignment grid, which no chunked prefill passes as a chunk
/// boundary: the engine ends a prefill piece there (the live state after it is the snapshot) and continues
/// from it, so everything this prompt computes after it, and every prompt that restores it, continues that
/// session rather than equal a cold prefill (`decode_continuation`; needs `accept_any`). A shared system
/// prompt followed by different first messages is the case it serves.
struct branch_block {
  static constexpr bool off_grid = true;
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    if (c.diverges) add(c.kv_matched);
  }
};

/// Capture at offsets the caller passes to `admit`, where the application knows its prompt's structure: a
/// system prompt's end, where each message starts. A second conversation over the same system prompt then
/// restores at its end from the first one's snapshot, where `branch_block` alone captures only once the
/// prompts have met twice. Each offset is in (0, L] and on the capture grid: a multiple of the alignment unit,
/// or, in a policy that also captures off that grid (`chat`), of the KV block size (the engine ends a prefill
/// piece there: a `decode_continuation` snapshot). An engine rounds a message boundary down to the grid.
struct caller_offsets {
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    for (std::uint32_t p : c.offsets) add(p);
  }
  /// Errors: `misaligned` (an offset off the capture grid), `out_of_range` (an offset outside (0, L]).
  static constexpr errc validate(const capture_context& c) noexcept {
    for (std::uint32_t p : c.offsets) {
      if (p % c.capture_grid != 0) return errc::misaligned;
      if (p == 0 || p > c.length) return errc::out_of_range;
    }
    return errc{};
  }
};

/// `finish` captures the live state at the end of a turn as a `decode_continuation` snapshot.
struct end_of_turn {
  static constexpr bool at_turn_end = true;
};

/// `extend` plans a `decode_continuation` snapshot of the live state whenever decoding reaches a multiple
/// of `cache_options::decode_checkpoint_interval` (0: none; else a multiple of the alignment unit), keeping
/// the newest `cache_options::decode_checkpoints_per_sequence` of each sequence. A next prompt that departs
/// from the reply (an edited or regenerated message, a template that drops a reasoning section) restores
/// at the last checkpoint before it departs instead of at the previous turn end. Once the turn end is
/// captured, the turn's checkpoints go first when slots are short.
struct decode_checkpoints {
  static constexpr bool at_decode = true;
};

namespace detail {
template <class P>
inline constexpr bool valid_placement = capture_placement<P> || turn_end_placement<P> || decode_placement<P>;
} // namespace detail

/// A set of capture placements; the planned positions are the union of theirs.
template <class... Placements>
struct capture {
  static_assert((detail::valid_placement<Placements> && ...),
                "policy::capture<...>: every argument must be a capture placement: policy::every<I>, "
                "policy::every_interval, policy::last_aligned, policy::branch_point, policy::branch_block, "
                "policy::caller_offsets, policy::end_of_turn, policy::decode_checkpoints, or your own type with `template <class Add> static void "
                "positions(const policy::capture_context&, Add&& add)`");
};

// ----- which snapshots and KV blocks a hit may reuse -----

/// Only `prefill_exact` state: a hit is bitwise-equal to a cold prefill.
struct accept_prefill_exact {
  static constexpr bool accepts_decode_continuation = false;
};
/// `decode_continuation` state too: multi-turn chats resume where the previous turn ended, bitwise-equal to
/// the same session continuing.
struct accept_any {
  static constexpr bool accepts_decode_continuation = true;
};

/// An accept policy: `accept_prefill_exact`, `accept_any`, or a type with the same constant.
template <class A>
concept accept_policy = requires {
  { A::accepts_decode_continuation } -> std::convertible_to<bool>;
};

// ----- which idle snapshot goes when the snapshot budget is full -----

/// The victim rules a cache ships (cache/snapshot_eviction.hpp has the rule and its complexity). Under any
/// rule a superseded snapshot (a turn end its conversation moved past, `finish_options::last_turn`) goes
/// first, and only a slot whose last use ended in a completed step is reused.
enum class snapshot_eviction : std::uint8_t {
  policy_default = 0, ///< `cache_options` only: the policy's eviction option (`lru_eviction` unless given)
  lru = 1,            ///< the least recently published or restored idle snapshot
  cost_aware = 2,     ///< of the oldest idle snapshots, the one saving the fewest prefill FLOPs per slot-step
};

/// What recomputing a prefix of p tokens costs, in FLOPs: `linear * p + quadratic * p * p`. The linear term
/// is the weights every token passes through (about 2 FLOPs per parameter, recurrent scans included); the
/// quadratic term is causal attention's scores and weighted sums (about 2 * query width FLOPs per layer for
/// each of the p^2 / 2 token pairs, both products together). `prefix_cache::create` derives one from the
/// model's layer shapes when it is left zero (snapshot_eviction.hpp, `prefill_cost_of`); an engine that
/// knows its model's exact costs sets it.
struct prefill_cost {
  double linear = 0;
  double quadratic = 0;
  constexpr double flops(std::uint64_t p) const noexcept {
    const auto x = static_cast<double>(p);
    return linear * x + quadratic * x * x;
  }
  constexpr bool empty() const noexcept { return linear == 0 && quadratic == 0; }
};

/// One idle snapshot a victim chooser may evict: the oldest first, at most the eviction window of them,
/// each one whose slot may be reused now.
struct snapshot_candidate {
  slot_id slot = no_slot;
  std::uint64_t position = 0;     ///< tokens folded into the state
  /// The deepest position at or before `position` on the same chain where another snapshot sits (0: none
  /// found within the walk's bound, or none at all): a prompt through `position` would restore there instead.
  std::uint64_t fallback = 0;
  double saved_flops = 0;         ///< cost.flops(position) - cost.flops(fallback)
  epoch_t last_use = 0;           ///< step of its publication or of its last restore
  std::uint32_t restores = 0;     ///< restores run since its publication
  bool superseded = false;
};

/// A victim chooser supplied at run time (a simulator's peer policies, an offline bound): `choose` returns
/// the index in `candidates` (never empty, oldest first) of the snapshot to evict; an index out of range
/// evicts the oldest. Called on the scheduler thread; must not call into the cache.
struct snapshot_chooser {
  std::size_t (*choose)(void* context, std::span<const snapshot_candidate> candidates, epoch_t now) noexcept = nullptr;
  void* context = nullptr;
  explicit operator bool() const noexcept { return choose != nullptr; }
};

/// Eviction options of `snapshot_restore<...>`: `lru_eviction` (the default) or `cost_aware_eviction<W>`,
/// which examines the `W` oldest idle snapshots (1 <= W <= 64) and evicts the cheapest to recompute.
struct lru_eviction {
  static constexpr snapshot_eviction kind = snapshot_eviction::lru;
  static constexpr std::uint32_t window = 1;
};
inline constexpr std::uint32_t max_eviction_window = 64;
template <std::uint32_t Window = 8>
struct cost_aware_eviction {
  static_assert(Window >= 1 && Window <= max_eviction_window,
                "policy::cost_aware_eviction<W>: W, the idle snapshots examined per eviction, is in [1, 64]");
  static constexpr snapshot_eviction kind = snapshot_eviction::cost_aware;
  static constexpr std::uint32_t window = Window;
};

/// An eviction option: a type with a `snapshot_eviction kind` and a `window`.
template <class E>
concept eviction_policy = requires {
  { E::kind } -> std::convertible_to<snapshot_eviction>;
  { E::window } -> std::convertible_to<std::uint32_t>;
};

// ----- the three policies -----

/// Attention-only models: share KV blocks and skip their prefill.
struct block_sharing {};

/// Hybrid models without a snapshot budget (Megatron-LM's mode): share matched KV blocks to save memory,
/// skip nothing, because the recurrent layers must see every token.
struct memory_only {};

namespace detail {
template <class T>
inline constexpr bool is_capture_v = false;
template <class... P>
inline constexpr bool is_capture_v<capture<P...>> = true;

template <class T>
inline constexpr bool is_bare_placement_v = !is_capture_v<T> && valid_placement<T>;

template <class T>
inline constexpr bool is_restore_option_v = is_capture_v<T> || accept_policy<T> || eviction_policy<T>;

/// The first option of `Options` satisfying `Pred`, or `Default`.
template <template <class> class Pred, class Default, class... Options>
struct find_option {
  using type = Default;
};
template <template <class> class Pred, class Default, class First, class... Rest>
struct find_option<Pred, Default, First, Rest...> {
  using type = std::conditional_t<Pred<First>::value, First, typename find_option<Pred, Default, Rest...>::type>;
};
template <class T>
struct is_capture_pred : std::bool_constant<is_capture_v<T>> {};
template <class T>
struct is_accept_pred : std::bool_constant<accept_policy<T> && !is_capture_v<T>> {};
template <class T>
struct is_eviction_pred : std::bool_constant<eviction_policy<T>> {};
} // namespace detail

/// Hybrid models: share KV blocks and skip prefill up to the deepest position where a snapshot of every
/// recurrent layer exists, restoring it. Options, in any order, each at most once:
///   - `capture<Placements...>`: where snapshots are taken (default: last_aligned, branch_point, end_of_turn);
///   - an accept policy: which snapshots and blocks a hit may reuse (default: accept_any);
///   - an eviction option: which idle snapshot goes when the budget is full (default: lru_eviction;
///     `cache_options::snapshot_eviction` overrides it at run time).
template <class... Options>
struct snapshot_restore {
  static_assert(!(detail::is_bare_placement_v<Options> || ...),
                "policy::snapshot_restore<...>: wrap capture placements in policy::capture<...>, e.g. "
                "snapshot_restore<policy::capture<policy::last_aligned>>");
  static_assert((detail::is_restore_option_v<Options> && ...),
                "policy::snapshot_restore<...>: unknown option; valid options are policy::capture<...>, "
                "policy::accept_prefill_exact / policy::accept_any and policy::lru_eviction / "
                "policy::cost_aware_eviction<W>");
  static_assert((std::size_t{detail::is_capture_v<Options>} + ... + 0) <= 1,
                "policy::snapshot_restore<...>: give at most one policy::capture<...> (list every placement in it)");
  static_assert((std::size_t{accept_policy<Options>} + ... + 0) <= 1,
                "policy::snapshot_restore<...>: give at most one accept policy");
  static_assert((std::size_t{eviction_policy<Options>} + ... + 0) <= 1,
                "policy::snapshot_restore<...>: give at most one eviction option");

  using capture_type = typename detail::find_option<detail::is_capture_pred,
                                                    capture<last_aligned, branch_point, end_of_turn>, Options...>::type;
  using accept_type = typename detail::find_option<detail::is_accept_pred, accept_any, Options...>::type;
  using eviction_type = typename detail::find_option<detail::is_eviction_pred, lru_eviction, Options...>::type;
};

// ----- presets named for what engines do -----

/// Multi-turn chat: a snapshot at every turn end (the partial last block kept with it), at the last KV
/// block a prompt shares with a different cached continuation (a shared system prompt, `branch_block`) and
/// at the offsets the caller passes to `admit` (a system prompt's end, before a second prompt meets it);
/// `decode_continuation` state accepted, so a next turn restores exactly where the previous one stopped and
/// a new conversation at most B - 1 tokens before the end of the prefix it shares. A hit is bitwise the same
/// session continuing (not a cold prefill of the same tokens). No `last_aligned`: inside a conversation the
/// turn end supersedes it, and under a tight snapshot budget those captures would evict other
/// conversations' turn ends. Decode checkpoints are on when `cache_options::decode_checkpoint_interval` is
/// set. Measured figures: docs/chat.md.
using chat = snapshot_restore<capture<branch_block, end_of_turn, decode_checkpoints, caller_offsets>, accept_any>;

/// Every hit bitwise equal to a cold prefill of the same tokens: prefill-exact snapshots and blocks only
/// (turn ends restore only as far as the last aligned position before them).
using strict = snapshot_restore<capture<last_aligned, branch_point>, accept_prefill_exact>;

// ----- traits the cache reads -----

namespace detail {
template <class P>
constexpr errc validate_placement(const capture_context& c) noexcept {
  if constexpr (requires { P::validate(c); }) return P::validate(c);
  else return errc{};
}
template <class P>
constexpr bool interval_aligned(std::uint64_t alignment) noexcept {
  if constexpr (requires { P::fixed_interval; }) return P::fixed_interval % alignment == 0;
  else return true;
}
template <class P>
constexpr bool reads_interval() noexcept {
  if constexpr (requires { P::reads_interval; }) return P::reads_interval;
  else return false;
}
template <class P>
constexpr bool off_grid() noexcept {
  if constexpr (requires { P::off_grid; }) return P::off_grid;
  else return false;
}
template <class P, class Add>
constexpr void placement_positions(const capture_context& c, Add& add) {
  if constexpr (capture_placement<P>) P::positions(c, add);
}

template <class Capture>
struct capture_traits;
template <class... Placements>
struct capture_traits<capture<Placements...>> {
  static constexpr bool at_turn_end = (turn_end_placement<Placements> || ...);
  static constexpr bool at_decode = (decode_placement<Placements> || ...);
  static constexpr bool reads_interval = (detail::reads_interval<Placements>() || ...);
  /// Some placement captures off the alignment grid (on the block grid), as decode_continuation.
  static constexpr bool off_grid = (detail::off_grid<Placements>() || ...);
  static constexpr bool plans_at_admit = (capture_placement<Placements> || ...);
  /// `admit` reads the caller's capture offsets (`caller_offsets`).
  static constexpr bool reads_offsets = (std::is_same_v<Placements, caller_offsets> || ...);
  /// Whether every `fixed_interval` is a multiple of `alignment`.
  static constexpr bool intervals_aligned(std::uint64_t alignment) noexcept {
    return (detail::interval_aligned<Placements>(alignment) && ...);
  }
  /// The first error of any placement's `validate`, or `errc{}`.
  static constexpr errc validate(const capture_context& c) noexcept {
    errc e{};
    ((e == errc{} ? (e = detail::validate_placement<Placements>(c), 0) : 0), ...);
    return e;
  }
  /// Calls `add(p)` for every position of every placement.
  template <class Add>
  static constexpr void positions(const capture_context& c, Add&& add) {
    (detail::placement_positions<Placements>(c, add), ...);
  }
};
} // namespace detail

template <class P>
struct policy_traits; // only the three policies above are policies

template <>
struct policy_traits<block_sharing> {
  static constexpr bool restores_snapshots = false;
  static constexpr bool reads_capture_offsets = false;
  static constexpr bool skips_prefill = true;
  static constexpr bool accepts_decode_continuation = false;
  using eviction = lru_eviction;
};
template <>
struct policy_traits<memory_only> {
  static constexpr bool restores_snapshots = false;
  static constexpr bool reads_capture_offsets = false;
  static constexpr bool skips_prefill = false;
  /// Shared KV feeds every recomputed token's attention: only prefill-exact blocks keep it bit-exact.
  static constexpr bool accepts_decode_continuation = false;
  using eviction = lru_eviction;
};
template <class... Options>
struct policy_traits<snapshot_restore<Options...>> {
  using capture = detail::capture_traits<typename snapshot_restore<Options...>::capture_type>;
  static constexpr bool restores_snapshots = true;
  /// `admit` takes capture offsets (else offsets given to it are an error).
  static constexpr bool reads_capture_offsets = capture::reads_offsets;
  static constexpr bool skips_prefill = true;
  static constexpr bool accepts_decode_continuation =
      snapshot_restore<Options...>::accept_type::accepts_decode_continuation;
  using eviction = typename snapshot_restore<Options...>::eviction_type;
  static_assert(!capture::off_grid || accepts_decode_continuation,
                "policy::snapshot_restore<...>: a placement that captures off the alignment grid "
                "(policy::branch_block) takes decode_continuation snapshots: use policy::accept_any");
  static_assert(!capture::at_decode || accepts_decode_continuation,
                "policy::snapshot_restore<...>: policy::decode_checkpoints takes decode_continuation snapshots, "
                "which only policy::accept_any restores");
};

/// A cache policy: `block_sharing`, `snapshot_restore<...>` or `memory_only`.
template <class P>
concept cache_policy = requires {
  { policy_traits<P>::restores_snapshots } -> std::convertible_to<bool>;
};

} // namespace reprise::policy
