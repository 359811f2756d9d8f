// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `cache_core<Policy, Hasher, Tiers>`: the engine-facing flow behind `prefix_cache`, configured at run time by a
/// `cache_geometry` (block size, alignment, byte sizes). It composes the block ledger, the snapshot ledger,
/// the capture planner and the sequence table, and calls its components beside it at a few fixed points:
/// `in_step_sharing` (in_step_sharing.hpp) and the tiers below the GPU (`tiers`: `no_tiers`, or the host
/// tier with the remote tier below it, host_tier.hpp and remote_tier.hpp, whose hooks tier_hooks.hpp lists;
/// `prefetch` / `probe` / `fetched` are remote_fetch.hpp). The façade in prefix_cache.hpp only forwards.
///
/// The hot loops (hashing, verifying and copying full blocks) are instantiated for every supported block
/// size with B as a compile-time constant, and each call dispatches once on the runtime block size.

#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/capture_planner.hpp>
#include <reprise/cache/config_rules.hpp>
#include <reprise/cache/host_tier.hpp>
#include <reprise/cache/in_step_sharing.hpp>
#include <reprise/cache/remote_fetch.hpp>
#include <reprise/cache/remote_tier.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
#include <reprise/cache/state_events.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/policy/policies.hpp>
#include <reprise/policy/tiers.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

namespace reprise::detail {

template <class Policy, class Hasher, class Tiers = policy::tiers<>>
struct cache_core {
  using policy_type = Policy;
  using traits = policy::policy_traits<Policy>;
  static constexpr bool restores = traits::restores_snapshots;
  static constexpr bool has_host = policy::tier_traits<Tiers>::host;
  static constexpr bool has_remote = policy::tier_traits<Tiers>::remote;
  static constexpr bool accepts_continuation = traits::accepts_decode_continuation;
  /// `cache_options::share_in_step` applies to attention-only models only (`validate`).
  static constexpr bool can_share_in_step = std::is_same_v<Policy, policy::block_sharing>;

  /// Positions and lengths are 32-bit; "no bound yet" for `sequence_record::exact_until`.
  static constexpr std::uint32_t unbounded = std::numeric_limits<std::uint32_t>::max();

  /// Checks `g` and `o` against the policy and tiers (`check_config`, config_rules.hpp). Errors as
  /// `prefix_cache::create`.
  static errc validate(const cache_geometry& g, const cache_options& o) noexcept {
    return to_errc(check_config<Policy, Tiers>(g, o));
  }

  static std::uint32_t slot_count(const cache_geometry& g, const cache_options& o) noexcept {
    if constexpr (!restores) return 0;
    const std::size_t count = o.snapshot_budget_bytes / g.bytes_per_snapshot;
    return static_cast<std::uint32_t>(std::min<std::size_t>(count, max_pool_ids));
  }

  /// The component of the tiers below the GPU: nothing, the host tier, or the host tier over the remote tier.
  using tier_component =
      std::conditional_t<!has_host, no_tiers,
                         host_tier<restores, std::conditional_t<has_remote, remote_tier<restores>, no_lower_tier>>>;

  /// Precondition: validate(g, o) succeeded. Throws `std::bad_alloc`.
  cache_core(const cache_geometry& g, const cache_options& o, std::uint64_t hasher_seed)
      : options(o), geometry(g), seed(hasher_seed), hasher(hasher_seed), blocks(o.kv_blocks, g.block_size, clock, metrics),
        slots(slot_count(g, o), g.bytes_per_snapshot, blocks.pool(), clock, metrics), sequences(o.max_sequences),
        in_step(can_share_in_step && o.share_in_step, blocks.pool(), o.max_sequences),
        tiers(tier_context{blocks, slots, sequences, geometry, options, clock, metrics}),
        events(o.state_events, blocks, slots, sequences, tiers) {
    if constexpr (restores)
      slots.set_eviction(eviction_rule::resolve<typename traits::eviction>(o.snapshot_eviction, o.eviction_window,
                                                                           o.prefill_cost, o.snapshot_chooser));
  }
  cache_core(const cache_core&) = delete; // its components point into it
  cache_core& operator=(const cache_core&) = delete;

  bool share_in_step() const noexcept {
    if constexpr (can_share_in_step) return options.share_in_step;
    else return false;
  }

  // ------------------------------------------------------------------------------------------------------
  // block-size dispatch

  /// Calls `f(std::integral_constant<std::uint32_t, B>{})` for the block size `block_size` == B.
  template <class F>
  static decltype(auto) with_block_size(std::uint32_t block_size, F&& f) {
    switch (block_size) {
    case 8: return f(std::integral_constant<std::uint32_t, 8>{});
    case 16: return f(std::integral_constant<std::uint32_t, 16>{});
    case 32: return f(std::integral_constant<std::uint32_t, 32>{});
    case 64: return f(std::integral_constant<std::uint32_t, 64>{});
    case 128: return f(std::integral_constant<std::uint32_t, 128>{});
    default: return f(std::integral_constant<std::uint32_t, 256>{}); // `validate` admits nothing else
    }
  }
  static_assert(std::size(supported_block_sizes) == 6, "with_block_size: one case per supported block size");

  /// Evicting a block drops its snapshots; a tier below the GPU copies both first (telling `events` which
  /// host units took them), then a router hears of what left without a copy.
  auto on_evict() noexcept {
    return [this](block_node& n) {
      tiers.block_evicted(n);
      events.block_evicted(n);
      if constexpr (restores) slots.invalidate(n);
    };
  }

  /// The moves between GPU and host memory planned since the previous call (`policy::host_tier`), with the
  /// store's puts (`policy::remote_tier`); the spans stay valid until the next call.
  transfer_plan take_transfers() noexcept { return tiers.take_transfers(); }

  // ------------------------------------------------------------------------------------------------------
  // the remote tier: prefetch into reserved host units, verified when reported (remote_fetch.hpp)

  /// `policy::remote_tier` (remote_fetch.hpp has what each plans and its complexity; prefix_cache.hpp the
  /// engine's view). Errors: as `admit`'s checks of the prompt; `fetched`: `invalid_argument` when no fetch
  /// into that unit is pending. Without a remote tier: empty plans.
  result<fetch_plan> prefetch(std::span<const token_id> prompt, const extra_keys& keys,
                              const std::span<const content_key>* in_store = nullptr) {
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
    if constexpr (!has_remote) return fetch_plan{};
    else return fetch.prefetch(*this, prompt, keys, in_store);
  }
  result<probe_plan> probe(std::span<const token_id> prompt, const extra_keys& keys) {
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
    if constexpr (!has_remote) return probe_plan{};
    else return fetch.probe(*this, prompt, keys);
  }
  result<void> fetched(remote_item item, std::uint32_t unit, std::span<const std::byte> header) {
    if constexpr (!has_remote) return errc::invalid_argument;
    else return fetch.fetched(*this, item, unit, header);
  }

  /// Matched position i of a prompt being admitted: GPU block r.blocks[i], then the host hits.
  exactness matched_kind(const sequence_record& r, std::uint32_t i) const noexcept {
    if (i < r.blocks.size()) return blocks.node(r.blocks[i]).kind;
    return tiers.hit_kind(i - static_cast<std::uint32_t>(r.blocks.size()));
  }

  // ------------------------------------------------------------------------------------------------------
  // step_complete

  result<void> step_complete(epoch_t n) noexcept {
    if (n > max_epoch) return errc::out_of_range;
    const epoch_t scheduled = clock.current;
    clock.safe_before = std::max(clock.safe_before, n + 1);
    clock.current = std::max(clock.current, n + 1);
    if (share_in_step() && clock.current != scheduled) in_step.step_completed(blocks, sequences);
    blocks.advance(clock.safe_before);
    tiers.step_completed(clock.safe_before);
    if constexpr (restores) {
      slots.advance(clock.safe_before);
      slots.expire(options.snapshot_ttl_steps);
    }
    return {};
  }

  // ------------------------------------------------------------------------------------------------------
  // admit: check, look up (no change), choose the restore (no change), apply

  /// The checks of a prompt that `admit`, `prefetch` and `probe` share: not empty (`invalid_argument`), media
  /// items `check_media` accepts (sorted, distinct positions, digests the cache can store: `invalid_argument`;
  /// positions inside the prompt: `out_of_range`), not longer than positions can number (`out_of_range`).
  errc check_prompt(std::span<const token_id> prompt, const extra_keys& keys) const noexcept {
    if (prompt.empty()) return errc::invalid_argument;
    if (const errc e = check_media(keys.media, prompt.size()); e != errc{}) return e;
    if (prompt.size() > max_sequence_tokens(geometry.block_size)) return errc::out_of_range;
    return errc{};
  }

  /// The key of block `i` of `prompt` chained from `parent`, with the prompt's media in it.
  template <std::uint32_t B>
  block_key prompt_key(const sequence_record& r, const block_key& parent, std::span<const token_id> prompt,
                       std::uint32_t i) const noexcept {
    return chain_block(hasher, parent, prompt_block<B>(prompt, i), r.media_of_block(i));
  }
  /// The key of stored block `b` chained from `parent`: its tokens and media digest.
  template <std::uint32_t B>
  block_key stored_key(const block_key& parent, block_id b) const noexcept {
    return chain_block(hasher, parent, blocks.pool().template tokens_of<B>(b), blocks.pool().media_or_null(b));
  }

  result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys,
                           std::span<const std::uint32_t> offsets) {
    if (sequences.find(s) != nullptr) return errc::duplicate_sequence;
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
    if (!traits::reads_capture_offsets && !offsets.empty()) return errc::invalid_argument; // never silently ignored
    const auto length = static_cast<std::uint32_t>(prompt.size());
    if constexpr (restores) {
      if (const errc e = traits::capture::validate(context_for(0, 0, length, offsets)); e != errc{}) return e;
    }
    if (sequences.full()) return errc::pool_exhausted;
    return with_block_size(geometry.block_size, [&](auto b) -> result<admit_plan> {
      constexpr std::uint32_t B = decltype(b)::value;
      sequence_record& r = sequences.prepare(s); // not live until `apply`: filling it changes nothing
      r.root = hasher.root(keys);
      r.extras = stored_extra_keys::from(keys);
      r.set_media(keys.media, B);
      tiers.sequence_prepared(r, keys);
      events.sequence_prepared(r, keys);
      const std::uint32_t published = lookup<B>(r, prompt);
      // Past the published blocks, those that sequences admitted in this step compute (share_in_step), or
      // those the host tier holds (`policy::host_tier`; the two never combine).
      std::uint32_t matched =
          share_in_step() ? in_step.template lookup<B>(r, prompt, blocks, hasher) : published + tiers.hits();
      const restore_choice choice = choose_restore<B>(r, matched, prompt);
      if constexpr (restores && accepts_continuation) matched = shareable<B>(r, matched, choice);
      matched = tiers.onboard_count(published, matched, choice, restores);
      if constexpr ((restores && accepts_continuation) || tier_component::enabled) {
        r.blocks.resize(std::min(matched, published));
      }
      const std::uint32_t total = (length - 1) / B + 1;
      const block_id held_tail[] = {choice.tail};
      if (blocks.available_excluding(r.blocks, choice.tail != no_block ? std::span(held_tail) : std::span<const block_id>{}) <
          total - static_cast<std::uint32_t>(r.blocks.size()))
        return errc::pool_exhausted;
      admit_plan plan = apply<B>(r, prompt, matched, choice, offsets);
      if (share_in_step()) in_step.template admitted<B>(r, published, matched, blocks, hasher, sequences, metrics);
      return plan;
    });
  }

  /// The verified chain of cached full blocks for `prompt` (at most floor((L - 1) / B) blocks, so at least
  /// one token is computed), appended to `r.blocks`: the longest one of prefill-computed blocks, or under a
  /// policy that accepts decode continuations the one `continuation_lookup` picks. Changes nothing.
  template <std::uint32_t B>
  std::uint32_t lookup(sequence_record& r, std::span<const token_id> prompt) noexcept {
    tiers.lookup_started();
    if constexpr (accepts_continuation) return continuation_lookup<B>(r, prompt);
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    block_id parent = no_block;
    // One key ahead: block i + 1's bucket loads while block i is verified.
    block_key key = limit != 0 ? prompt_key<B>(r, r.root, prompt, 0) : block_key{};
    for (std::uint32_t i = 0; i < limit; ++i) {
      block_key next{};
      if (i + 1 < limit) {
        next = prompt_key<B>(r, key, prompt, i + 1);
        blocks.prefetch(next);
      }
      block_node* hit = blocks.find(
          {key, parent, prompt_block<B>(prompt, i), &r.extras, r.media_of_block(i), exactness::prefill_exact});
      if (hit == nullptr) {
        tiers.template lookup_continue<B>(r, i, key, exactness::prefill_exact, false, prompt, hasher);
        break;
      }
      parent = blocks.id_of(*hit);
      r.blocks.push_back(parent);
      key = next;
    }
    return static_cast<std::uint32_t>(r.blocks.size());
  }

  template <std::uint32_t B>
  static std::span<const token_id, B> prompt_block(std::span<const token_id> prompt, std::uint32_t i) noexcept {
    return prompt.subspan(std::size_t{i} * B).template first<B>();
  }

  /// `lookup` under a policy that accepts decode continuations. Past a prefix, the cache may hold the
  /// prompt's next tokens several times: computed by a prefill, and decoded by other conversations (or
  /// computed after their snapshots), each a block of its own (`block_probe::origin`) with the snapshots
  /// and partial blocks its own computation left under it. The matching blocks form a tree; of its paths
  /// the one whose restore point (`restore_at`) is deepest is taken, then the one with the most
  /// prefill-computed blocks (shareable past a prefill-exact restore), then the longest. A depth-first walk
  /// over the matching blocks: usually one path, then O(path) probes and no restore is evaluated; where it
  /// branches, a second walk scores every matching block (one tail and one snapshot probe each). No
  /// allocation once the scratch vectors have grown. The host tier continues from the path's end, in the
  /// class of its last block.
  template <std::uint32_t B>
  std::uint32_t continuation_lookup(sequence_record& r, std::span<const token_id> prompt) noexcept {
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    if (limit == 0) return 0;
    walk_keys.assign(1, prompt_key<B>(r, r.root, prompt, 0)); // block d's chain key, when needed
    auto key_at = [&](std::uint32_t d) -> const block_key& {
      while (walk_keys.size() <= d) {
        const auto j = static_cast<std::uint32_t>(walk_keys.size());
        walk_keys.push_back(prompt_key<B>(r, walk_keys.back(), prompt, j));
      }
      return walk_keys[d];
    };
    struct best_path {
      block_id end = no_block;
      std::uint32_t restore = 0, exact = 0, length = 0;
      bool worse_than(std::uint32_t u, std::uint32_t e, std::uint32_t l) const noexcept {
        return end == no_block || std::tie(restore, exact, length) < std::tie(u, e, l);
      }
    };
    auto walk = [&](bool scoring) {
      bool branched = false;
      best_path best;
      walk_stack.clear();
      auto push_children = [&](std::uint32_t d, block_id parent, std::uint32_t exact, std::uint32_t restore) {
        if (d + 1 < limit) blocks.prefetch(key_at(d + 1));
        std::size_t found = 0;
        const block_probe probe{key_at(d), parent, prompt_block<B>(prompt, d), &r.extras, r.media_of_block(d)};
        blocks.for_each_alike(probe, [&](block_node& n) {
          const bool prefilled = n.kind == exactness::prefill_exact && exact == d;
          walk_stack.push_back({d, blocks.id_of(n), prefilled ? d + 1 : exact, restore});
          ++found;
        });
        branched |= found > 1;
      };
      push_children(0, no_block, 0, 0);
      while (!walk_stack.empty()) {
        const walk_entry e = walk_stack.back();
        walk_stack.pop_back();
        // The deepest restore along the path: a path always runs on to the last block matching the prompt
        // (choose_restore finds a restore point below its end; the host tier continues only past it).
        const std::uint32_t restore =
            scoring ? std::max(e.restore, restore_at<B>(r, e.depth + 1, e.block, prompt).usable) : 0;
        if (best.worse_than(restore, e.exact, e.depth + 1)) best = {e.block, restore, e.exact, e.depth + 1};
        if (e.depth + 1 < limit) push_children(e.depth + 1, e.block, e.exact, restore);
      }
      return std::pair{best, branched};
    };
    auto [best, branched] = walk(false);
    if (branched) best = walk(true).first;
    if (best.end != no_block) {
      r.blocks.resize(best.length);
      block_id b = best.end;
      for (std::uint32_t j = best.length; j-- > 0; b = blocks.node(b).parent) r.blocks[j] = b;
    }
    const auto matched = static_cast<std::uint32_t>(r.blocks.size());
    if (matched < limit) {
      const exactness wanted = matched == 0 ? exactness::prefill_exact : blocks.node(r.blocks.back()).kind;
      tiers.template lookup_continue<B>(r, matched, key_at(matched), wanted, true, prompt, hasher);
    }
    return matched;
  }

  /// The deepest GPU restore whose chain ends with cached block `b`, the `end`-th of the prompt's chain: a
  /// partial block kept under `b` whose tokens the prompt continues, with its snapshot, or else a snapshot
  /// at `b`'s end (off the alignment grid only an end-of-turn, decode_continuation one). Changes nothing.
  template <std::uint32_t B>
  restore_choice restore_at(const sequence_record& r, std::uint32_t end, block_id b,
                            std::span<const token_id> prompt) noexcept {
    if (const restore_choice tail = gpu_tail<B>(r, end, b, prompt); tail.has_tail()) return tail;
    return gpu_snapshot_at<B>(end, b);
  }

  /// A GPU snapshot at the end of cached block `b`, the `end`-th of a chain, usable now. Off the alignment
  /// grid only an end-of-turn (decode_continuation) snapshot can sit.
  template <std::uint32_t B>
  restore_choice gpu_snapshot_at(std::uint32_t end, block_id b) const noexcept {
    const block_node& n = blocks.node(b);
    if (end * B % geometry.alignment == 0 || n.snapshot[static_cast<int>(exactness::decode_continuation)] != no_slot) {
      if (const slot_id s = slots.usable(n, accepts_continuation); s != no_slot)
        return restore_choice{.usable = end * B, .slot = s, .kind = slots.node(s).kind};
    }
    return {};
  }

  /// The deepest partial block kept on the GPU under `parent` (the `depth`-th block of the prompt's chain;
  /// no_block at depth 0) whose tokens the prompt continues, keeping one token to compute, with a snapshot
  /// usable now or held by the host tier. Nothing without turn-end snapshots.
  template <std::uint32_t B>
  restore_choice gpu_tail(const sequence_record& r, std::uint32_t depth, block_id parent,
                          std::span<const token_id> prompt) noexcept {
    restore_choice best{};
    if constexpr (accepts_continuation && traits::capture::at_turn_end) {
      const std::size_t begin = std::size_t{depth} * B;
      const std::size_t room = std::min<std::size_t>(B - 1, prompt.size() - 1 - begin); // keep one token
      if (room == 0) return best;
      const block_key& start = parent == no_block ? r.root : blocks.node(parent).key;
      auto media_of = [&](std::uint32_t fill) { return r.media_in(begin, begin + fill); };
      blocks.for_each_tail(start, parent, r.extras, prompt.subspan(begin, room), media_of, [&](block_node& n) {
        if (n.fill + begin <= best.usable) return;
        if (const slot_id s = slots.usable(n, true); s != no_slot) {
          best = restore_choice{
              .usable = static_cast<std::uint32_t>(begin) + n.fill, .slot = s, .kind = slots.node(s).kind, .tail = blocks.id_of(n)};
        } else if (const host_unit u = tiers.tail_snapshot(blocks.id_of(n)); u != no_host_unit) {
          best = restore_choice{.usable = static_cast<std::uint32_t>(begin) + n.fill,
                                .host_snapshot = u,
                                .kind = exactness::decode_continuation,
                                .tail = blocks.id_of(n)};
        }
      });
    }
    return best;
  }

  /// The usable skip: the largest u <= KV match with a snapshot at exactly u the accept policy allows
  /// (`snapshot_restore`), the whole match (`block_sharing`), or nothing (`memory_only`). Under a policy
  /// that accepts decode continuations, a partial block kept at a turn's end under any matched block (or
  /// at the root) extends the match to its end when the prompt continues its tokens: under the last matched
  /// block it is the deepest restore; under an earlier one it lies between that block's end snapshot and
  /// the next (the prompt's next block may be cached as well, decode-filled by another conversation that
  /// decoded the same tokens). With a host tier the match runs on through the host hits, and a snapshot or
  /// partial block may come from either tier (the GPU's first at equal depth). Changes nothing.
  template <std::uint32_t B>
  restore_choice choose_restore(const sequence_record& r, std::uint32_t matched,
                                std::span<const token_id> prompt) noexcept {
    if constexpr (std::is_same_v<Policy, policy::block_sharing>) {
      return restore_choice{.usable = matched * B};
    } else if constexpr (restores) {
      const auto on_gpu = static_cast<std::uint32_t>(r.blocks.size());
      auto parent_at = [&](std::uint32_t d) { return d == 0 ? no_block : r.blocks[d - 1]; }; // d <= on_gpu
      if constexpr (accepts_continuation && traits::capture::at_turn_end) {
        const std::size_t begin = std::size_t{matched} * B;
        const std::size_t room = std::min<std::size_t>(B - 1, prompt.size() - 1 - begin); // keep one token
        if (room != 0) {
          restore_choice best = matched <= on_gpu ? gpu_tail<B>(r, matched, parent_at(matched), prompt) : restore_choice{};
          if (best.has_tail()) best.usable -= static_cast<std::uint32_t>(begin); // the host tier compares fills
          tiers.host_tails(r, matched, prompt.subspan(begin, room), best);
          if (best.has_tail()) {
            best.usable += static_cast<std::uint32_t>(begin);
            return best;
          }
        }
      }
      for (std::uint32_t i = matched; i-- > 0;) {
        const bool on_grid = (i + 1) * B % geometry.alignment == 0;
        if (i < on_gpu) {
          if (const restore_choice at = gpu_snapshot_at<B>(i + 1, r.blocks[i]); at.restores()) return at;
        }
        if (const restore_choice below = tiers.snapshot_at(r, i, on_grid, accepts_continuation); below.restores())
          return below;
        if (i <= on_gpu) {
          if (const restore_choice tail = gpu_tail<B>(r, i, parent_at(i), prompt); tail.has_tail()) return tail;
        }
      }
    }
    return {};
  }

  /// How many of the `matched` blocks a prompt restoring `choice` may share. Past the restore point, cached
  /// KV is reusable only if it was computed the way this prompt computes those positions: from the restored
  /// state by a prefill. After a decode_continuation restore nothing past it is (decode steps, or a cold
  /// prefill that never held that state, wrote it); after a prefill-exact restore, or none, prefill-exact
  /// blocks are (a cold prefill on the chunk grid), up to the first decode-filled one. Changes nothing.
  template <std::uint32_t B>
  std::uint32_t shareable(const sequence_record& r, std::uint32_t matched, const restore_choice& choice) const noexcept {
    if (choice.has_tail()) return choice.usable / B; // the tail's depth: the restore point is past its parent
    const std::uint32_t restored = choice.usable / B; // a block end
    if (choice.restores() && choice.kind == exactness::decode_continuation) return restored;
    for (std::uint32_t i = restored; i < matched; ++i)
      if (matched_kind(r, i) != exactness::prefill_exact) return i;
    return matched;
  }

  /// From here on the call succeeds: references the shared blocks, takes fresh ones, makes the sequence
  /// live, holds the restore slot and plans captures.
  template <std::uint32_t B>
  admit_plan apply(sequence_record& r, std::span<const token_id> prompt, std::uint32_t matched,
                   const restore_choice& choice, std::span<const std::uint32_t> offsets) {
    const auto length = static_cast<std::uint32_t>(prompt.size());
    const std::uint32_t total = (length - 1) / B + 1;
    const std::uint32_t full = length / B;
    r.exact_until = unbounded;
    r.origin = draw_origin(); // before the host tier publishes what it onboards
    const auto on_gpu = static_cast<std::uint32_t>(r.blocks.size());
    for (std::uint32_t i = 0; i < on_gpu; ++i) blocks.reference(blocks.node(r.blocks[i]));
    if (choice.tail != no_block) { // held until the copy has run (first commit)
      block_node& tail = blocks.node(choice.tail);
      blocks.reference(tail);
      r.copy_src = choice.tail;
      if (tail.kind != exactness::prefill_exact) r.exact_until = std::min(r.exact_until, matched * B);
    }
    const onboarded_blocks onboarded =
        tiers.template onboard<B>(r, matched, choice, [this] { return blocks.take(on_evict()); });
    for (std::uint32_t i = on_gpu; i < r.blocks.size(); ++i) events.block_published(r.blocks[i], r); // onboarded
    for (std::uint32_t i = 0; i < matched; ++i) {
      if (blocks.node(r.blocks[i]).kind != exactness::prefill_exact) {
        r.exact_until = std::min(r.exact_until, i * B);
        break;
      }
    }
    auto ahead = blocks.prefetch_victims();
    for (std::uint32_t i = matched; i < total; ++i) {
      blocks.prefetch_next_victim(ahead);
      const block_id b = blocks.take(on_evict());
      const std::size_t begin = std::size_t{i} * B;
      // Full blocks copy a compile-time byte count (inlined vector moves instead of a memmove call).
      if (i < full) std::memcpy(blocks.pool().template tokens_of<B>(b).data(), prompt.data() + begin, B * sizeof(token_id));
      else std::copy_n(prompt.data() + begin, prompt.size() - begin, blocks.pool().tokens(b).data());
      if (const media_digest* m = r.media_of_block(i)) blocks.pool().set_media(b, *m);
      r.blocks.push_back(b);
    }
    r.tokens = length;
    r.prompt = length;
    r.computed = choice.usable;
    r.chain.assign(r.blocks.begin(), r.blocks.begin() + matched);
    sequences.insert(r);

    const std::uint32_t kv_matched = choice.has_tail() ? choice.usable : matched * B;
    admit_plan plan;
    plan.kv_matched_tokens = kv_matched;
    plan.host_blocks_onboarded = onboarded.blocks;
    plan.store_blocks_onboarded = onboarded.from_store;
    if (choice.tail != no_block) {
      plan.copy_src = choice.tail;
      plan.copy_dst = r.blocks[matched];
      ++metrics.partial_blocks_copied;
    } else if (tiers.tail_onboarded(choice, r.blocks[matched])) { // copied by the step's transfers, before the prefill
      ++metrics.partial_blocks_copied;
    }
    plan.usable_tokens = choice.usable;
    plan.shared_blocks = matched;
    // Reusing a decode_continuation snapshot, or a decode_continuation block before the skip, makes what
    // follows a continuation of that session rather than a cold prefill.
    const bool restores_continuation = choice.restores() && choice.kind == exactness::decode_continuation;
    if (restores_continuation) r.exact_until = std::min(r.exact_until, choice.usable);
    if constexpr (restores) {
      plan.tokens_lost_to_missing_snapshot = kv_matched - choice.usable;
      if (choice.host_snapshot != no_host_unit) { // held since `onboard`
        tiers.restoring(r, choice, restores_continuation);
        // The engine's plan names the unit of its host snapshot pool in the same field, with the flag.
        plan.restore_slot = static_cast<slot_id>(unit_index(choice.host_snapshot));
        plan.restore_from_host = true;
        ++metrics.snapshot_hits;
      } else if (choice.slot != no_slot) {
        slots.hold(choice.slot);
        r.restore_slot = choice.slot;
        plan.restore_slot = choice.slot;
        if (restores_continuation) {
          r.turn_restore = choice.slot;
          r.turn_restore_block = slots.node(choice.slot).block;
        }
        ++metrics.snapshot_hits;
      } else if (kv_matched != 0) {
        ++metrics.snapshot_misses;
      }
      if constexpr (traits::capture::plans_at_admit) {
        policy::capture_context c = context_for(choice.usable, kv_matched, length, offsets);
        // A branch point: the cached tree goes on past the match with other tokens; or the fleet's does: the
        // match ends in blocks the remote store filled (another engine computed this prefix, and the store's
        // chain of it ends there) and nothing restores it.
        c.diverges = matched != 0 && choice.tail == no_block &&
                     (blocks.node(r.blocks[matched - 1]).cached_children != 0 ||
                      (onboarded.from_store != 0 && matched > on_gpu && choice.usable < matched * B));
        plan_captures<typename traits::capture>(r, c, B, options.max_snapshots_per_path, blocks, slots, metrics);
      }
      plan.captures = r.captures;
    }
    // What the prompt's outputs equal: a cold prefill, unless decode_continuation state is reused or the
    // prefill is split at an off-grid capture (then the same session continuing).
    plan.restore_exactness = r.exact_until < length ? exactness::decode_continuation : exactness::prefill_exact;
    plan.block_table = r.blocks;

    ++metrics.lookups;
    ++metrics.live_sequences;
    metrics.prompt_tokens += length;
    metrics.kv_matched_tokens += kv_matched;
    metrics.usable_tokens += choice.usable;
    metrics.tokens_lost_to_missing_snapshot += plan.tokens_lost_to_missing_snapshot;
    metrics.blocks_shared += on_gpu;
    metrics.bytes_saved += std::uint64_t{on_gpu} * geometry.bytes_per_kv_block;
    return plan;
  }

  policy::capture_context context_for(std::uint32_t usable, std::uint32_t kv_matched, std::uint32_t length,
                                          std::span<const std::uint32_t> offsets) const noexcept {
    return {.usable = usable,
            .kv_matched = kv_matched,
            .length = length,
            .alignment = geometry.alignment,
            .block_size = geometry.block_size,
            .interval = options.capture_interval,
            .offsets = offsets,
            .capture_grid = traits::capture::off_grid ? geometry.block_size : geometry.alignment};
  }

  // ------------------------------------------------------------------------------------------------------
  // commit

  result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> written) {
    sequence_record* r = sequences.find(s);
    if (r == nullptr) return errc::unknown_sequence;
    if (n > r->tokens) return errc::out_of_range;
    if (n < r->computed) return errc::invalid_argument;
    // Each written position must be a planned capture <= n, listed once: one binary search each in the
    // sorted capture list, with a mark per capture for duplicates (O(written log captures + captures)).
    r->written.assign(r->captures.size(), 0);
    for (const std::uint32_t p : written) {
      const auto it = std::lower_bound(r->captures.begin(), r->captures.end(), std::int64_t{p},
                                       [](const capture_point& c, std::int64_t q) { return c.position < q; });
      if (p > n || it == r->captures.end() || it->position != p) return errc::invalid_argument;
      std::uint8_t& mark = r->written[static_cast<std::size_t>(it - r->captures.begin())];
      if (mark != 0) return errc::invalid_argument;
      mark = 1;
    }

    if (share_in_step()) {
      if (const errc e = in_step.check_commit(*r, blocks, sequences); e != errc{}) return e;
      in_step.committed(*r, n, geometry.block_size, blocks, sequences);
    }
    r->computed = n;
    with_block_size(geometry.block_size, [&](auto b) { publish_blocks<decltype(b)::value>(*r); });
    if constexpr (restores) {
      resolve_captures(*r, n, geometry, options.decode_checkpoints_per_sequence, blocks, slots, metrics,
                       [this](slot_id slot, block_id b, exactness kind) {
                         tiers.snapshot_published(slot, b, kind);
                         events.snapshot_published(slot, b, kind);
                       });
      unhold_restore(*r, true);
    }
    return {};
  }

  /// Publishes the sequence's blocks that are full and computed, in chain order.
  ///
  /// Keys are computed one block ahead: key i + 1 depends only on key i and the stored tokens (a block and
  /// the published block equal to it, or a block a fork sibling already published, have the same key), so
  /// block i + 1's hash and the prefetch of its index bucket run before block i's probe, which on large
  /// pools misses the caches.
  template <std::uint32_t B>
  void publish_blocks(sequence_record& r) noexcept {
    const std::uint32_t full = r.computed / B;
    auto i = static_cast<std::uint32_t>(r.chain.size());
    if (i >= full) return;
    const block_pool& pool = blocks.pool();
    block_id parent = i == 0 ? no_block : r.chain[i - 1];
    block_key key = stored_key<B>(i == 0 ? r.root : blocks.node(parent).key, r.blocks[i]);
    for (; i < full; ++i) {
      const block_id b = r.blocks[i];
      block_key next{};
      if (i + 1 < full) {
        next = stored_key<B>(key, r.blocks[i + 1]);
        blocks.prefetch(next);
      }
      if (blocks.node(b).state == block_state::cached) { // published by a fork sibling
        parent = b;
      } else {
        // An equal block published first (two equal prompts in flight) is referenced and continues the
        // chain; ours stays private (the engine's table points at it). A decode_continuation block is equal
        // only to one this sequence's own computation wrote (`block_probe::origin`): the same tokens that
        // another conversation decoded, or computed after another state, are other bits and a block of
        // their own, so the chain, and every snapshot published on it, is this computation's KV.
        const exactness kind = r.kv_kind(std::uint64_t{i + 1} * B);
        if (kind == exactness::decode_continuation && r.origin == 0) break; // no origin left: kept private
        const block_probe probe{key, parent, pool.template tokens_of<B>(b), &r.extras, pool.media_or_null(b), kind,
                                r.origin};
        parent = blocks.publish(b, probe, i, r.extras);
        if (parent == b) {
          tiers.block_published(b, r);
          events.block_published(b, r);
        }
      }
      r.chain.push_back(parent);
      key = next;
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // extend / fork / finish / release

  result<extend_plan> extend(seq_id s, std::span<const token_id> tokens) {
    sequence_record* r = sequences.find(s);
    if (r == nullptr) return errc::unknown_sequence;
    const std::uint32_t B = geometry.block_size;
    if (tokens.size() > max_sequence_tokens(B) - r->tokens) return errc::out_of_range;
    const auto new_total = static_cast<std::uint32_t>(r->tokens + tokens.size());
    const std::uint32_t needed = new_total / B + (new_total % B != 0 ? 1 : 0);
    const auto have = static_cast<std::uint32_t>(r->blocks.size());
    if (needed > have && blocks.available() < needed - have) return errc::pool_exhausted;

    extend_plan plan;
    plan.first_new_block = have;
    for (std::uint32_t i = have; i < needed; ++i) r->blocks.push_back(blocks.take(on_evict()));
    for (std::size_t k = 0; k < tokens.size(); ++k) {
      const std::uint32_t pos = r->tokens + static_cast<std::uint32_t>(k);
      blocks.pool().tokens(r->blocks[pos / B])[pos % B] = tokens[k];
    }
    // Decoded tokens pass through the recurrent layers' decode step: their KV, and every state after them,
    // continue this session rather than equal a cold prefill (attention-only models compute the same).
    if (geometry.has_recurrent && !tokens.empty()) r->exact_until = std::min(r->exact_until, r->tokens);
    r->tokens = new_total;
    plan.new_blocks = std::span<const block_id>(r->blocks).subspan(have);
    if constexpr (restores) {
      if constexpr (traits::capture::at_decode) {
        // An empty extend reaches no new position.
        if (!tokens.empty())
          plan.captures = plan_checkpoint(*r, options.decode_checkpoint_interval, options.max_snapshots_per_path,
                                          blocks, slots, metrics);
      }
    }
    return plan;
  }

  result<fork_plan> fork(seq_id src, seq_id dst) {
    sequence_record* a = sequences.find(src);
    if (a == nullptr) return errc::unknown_sequence;
    if (sequences.find(dst) != nullptr) return errc::duplicate_sequence;
    if (a->computed != a->tokens) return errc::invalid_argument;
    if (sequences.full()) return errc::pool_exhausted;
    const std::uint32_t B = geometry.block_size;
    const bool partial = a->tokens % B != 0;
    if (partial && blocks.available() == 0) return errc::pool_exhausted;

    sequence_record& b = sequences.prepare(dst);
    b.media = a->media; // may allocate: before anything is referenced
    b.block_media = a->block_media;
    const std::size_t full = a->tokens / B;
    for (std::size_t i = 0; i < full; ++i) {
      blocks.reference(blocks.node(a->blocks[i]));
      b.blocks.push_back(a->blocks[i]);
    }
    for (std::size_t i = 0; i < a->chain.size(); ++i) {
      if (a->chain[i] != a->blocks[i]) blocks.reference(blocks.node(a->chain[i]));
      b.chain.push_back(a->chain[i]);
    }
    fork_plan plan;
    if (partial) {
      const block_id copy = blocks.take(on_evict());
      const block_id from = a->blocks[full];
      std::copy_n(blocks.pool().tokens(from).data(), B, blocks.pool().tokens(copy).data());
      if (blocks.node(from).has_media) blocks.pool().set_media(copy, blocks.pool().media(from));
      b.blocks.push_back(copy);
      plan.copy_src = from;
      plan.copy_dst = copy;
    }
    b.root = a->root;
    b.extras = a->extras;
    tiers.sequence_forked(*a, b);
    events.sequence_forked(*a, b);
    b.tokens = a->tokens;
    b.computed = a->computed;
    b.exact_until = a->exact_until;
    b.prompt = a->prompt;
    b.origin = draw_origin(); // its own computation from here on
    sequences.insert(b);
    ++metrics.live_sequences;
    plan.block_table = b.blocks;
    plan.copy_recurrent_state = geometry.has_recurrent;
    return plan;
  }

  result<finish_plan> finish(seq_id s, finish_options o) {
    sequence_record* r = sequences.find(s);
    if (r == nullptr) return sequences.recently_released(s) ? errc::double_release : errc::unknown_sequence;
    finish_plan plan;
    if constexpr (restores) {
      if (o.last_turn) {
        supersede_decode_snapshots(*r); // nothing of this conversation will be continued
      } else if constexpr (traits::capture::at_turn_end) {
        // The capture copies the live state, which must have folded in exactly the committed tokens.
        if (r->computed < r->prompt || r->tokens - r->computed > 1) return errc::invalid_argument;
        finish_capture(*r, plan);
      }
    }
    end(*r);
    return plan;
  }

  /// `policy::end_of_turn`: a decode_continuation snapshot of the live state at the committed position p.
  /// At a block boundary it attaches to the cached block ending there; elsewhere the sequence's partial block
  /// (tokens [floor(p / B) B, p), KV written) is kept as a tail under the last full block and the snapshot
  /// attaches to it. Nothing when the block already holds a snapshot (or an equal tail exists), or no slot is
  /// reusable (counted as refused).
  void finish_capture(sequence_record& r, finish_plan& plan) noexcept {
    const std::uint32_t B = geometry.block_size;
    const std::uint32_t p = r.computed;
    const std::uint32_t k = p / B, fill = p % B;
    if (p == 0 || k > r.chain.size()) return;
    block_node* target = nullptr;
    if (fill == 0) {
      target = &blocks.node(r.chain[k - 1]);
      if (target->snapshot[0] != no_slot || target->snapshot[1] != no_slot) return;
    } else {
      if (k != r.chain.size() || blocks.node(r.blocks[k]).state != block_state::owned) return;
      const block_id parent = k == 0 ? no_block : r.chain[k - 1];
      const block_key start = k == 0 ? r.root : blocks.node(parent).key;
      bool equal_kept = false;
      // Every media item of the sequence lies before its prompt's end, so before p: the partial block's
      // digest covers its first `fill` tokens.
      const media_digest mine = blocks.pool().media(r.blocks[k]);
      blocks.for_each_tail(start, parent, r.extras, blocks.pool().tokens(r.blocks[k]).first(fill),
                           [&](std::uint32_t) { return mine; }, [&](block_node& n) { equal_kept |= n.fill == fill; });
      if (equal_kept) return;
    }
    // The turn end this turn started from is superseded by this one (only a regeneration of this turn would
    // use it again): it goes first when a slot is needed, ahead of other conversations' turn ends, and
    // before this capture takes its slot, so a full pool reuses it rather than evict another chat's.
    supersede_decode_snapshots(r);
    slot_node* n = slots.take();
    if (n == nullptr) {
      ++metrics.captures_refused;
      return;
    }
    if (fill != 0) {
      const block_id parent = k == 0 ? no_block : r.chain[k - 1];
      blocks.keep_tail(r.blocks[k], k == 0 ? r.root : blocks.node(parent).key, parent, k, fill, r.kv_kind(p),
                       r.extras);
      tiers.block_published(r.blocks[k], r);
      events.block_published(r.blocks[k], r);
      target = &blocks.node(r.blocks[k]);
    }
    // Written by the engine in the current step: restorable once that step completes.
    slots.attach(*n, *target, exactness::decode_continuation, clock.release_tag(), true);
    tiers.snapshot_published(slots.id_of(*n), blocks.id_of(*target), exactness::decode_continuation);
    events.snapshot_published(slots.id_of(*n), blocks.id_of(*target), exactness::decode_continuation);
    plan.capture = {.sequence = 0, .position = p, .slot = slots.id_of(*n)};
    ++metrics.captures_planned;
    ++metrics.captures_written;
  }

  /// Moves the snapshots `r`'s conversation took while decoding to the front of the LRU queue: its decode
  /// checkpoints, then (at the very front) the turn end it restored from. Called when this turn's own end
  /// supersedes them, or when the conversation ends.
  void supersede_decode_snapshots(const sequence_record& r) noexcept {
    for (const auto& [s, b] : r.checkpoints) slots.demote(s, b);
    if (r.turn_restore != no_slot) slots.demote(r.turn_restore, r.turn_restore_block);
    tiers.supersede(r);
  }

  /// Lets go of what a sequence held until its restore and copy had run (its first commit: `restored`, or
  /// its end).
  void unhold_restore(sequence_record& r, bool restored) noexcept {
    if (r.restore_slot != no_slot) {
      slots.unhold(r.restore_slot, restored);
      r.restore_slot = no_slot;
    }
    if (r.copy_src != no_block) {
      blocks.unreference(blocks.node(r.copy_src));
      r.copy_src = no_block;
    }
    tiers.restore_done(r);
  }

  result<void> release(seq_id s) {
    sequence_record* r = sequences.find(s);
    if (r == nullptr) return sequences.recently_released(s) ? errc::double_release : errc::unknown_sequence;
    end(*r);
    return {};
  }

  void end(sequence_record& r) noexcept {
    if (share_in_step()) in_step.ended(r, blocks, sequences);
    if constexpr (restores) {
      unhold_restore(r, false);
      for (const capture_point& c : r.captures) slots.release(slots.node(c.slot));
    }
    // Deepest first, so in the LRU queue every block precedes its parent (leaf-first eviction).
    for (std::size_t i = r.blocks.size(); i-- > 0;) {
      if (i < r.chain.size() && r.chain[i] != r.blocks[i]) blocks.unreference(blocks.node(r.chain[i]));
      blocks.unreference(blocks.node(r.blocks[i]));
    }
    tiers.sequence_ended(r);
    sequences.erase(r);
    --metrics.live_sequences;
  }

  /// A fresh `sequence_record::origin`, or 0 once 2^64 - 1 were drawn (then the sequence publishes no
  /// decode_continuation block: never two computations under one origin).
  std::uint64_t draw_origin() noexcept { return next_origin == 0 ? 0 : next_origin++; }

  cache_options options;
  cache_geometry geometry;
  std::uint64_t seed;
  Hasher hasher;
  epoch_clock clock{};
  cache_metrics metrics{};
  block_ledger blocks;
  snapshot_ledger slots;
  sequence_table sequences;
  in_step_sharing in_step;
  tier_component tiers; ///< the tiers below the GPU (`no_tiers` with `policy::tiers<>`)
  state_events events;  ///< what a fleet router hears (`cache_options::state_events`; off by default)
  /// `prefetch` / `probe` / `fetched` (`policy::remote_tier`).
  [[no_unique_address]] std::conditional_t<has_remote, remote_fetch_planner, no_fetch_planner> fetch;
  std::uint64_t next_origin = 1;
  /// `continuation_lookup`'s scratch: the walk's pending blocks and the chain keys it hashed.
  struct walk_entry {
    std::uint32_t depth;
    block_id block;
    std::uint32_t exact;   ///< prefill-computed blocks from the root on its path
    std::uint32_t restore; ///< the deepest restore point on its path above it (scoring walk)
  };
  std::vector<walk_entry> walk_stack;
  std::vector<block_key> walk_keys;
};

} // namespace reprise::detail
