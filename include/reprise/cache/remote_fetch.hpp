// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `remote_fetch_planner`: what `prefetch`, `probe` and `fetched` plan and verify for a cache with a remote
/// tier (`policy::remote_tier`). It walks a prompt past its match in GPU and host memory (the core's own
/// lookup and restore choice), names what the store could hold by content key, reserves host units for
/// fetches (the remote tier keeps them pending, remote_tier.hpp) and, when a fetch is reported, keeps the
/// value only if its header equals the one the prompt implies. Its calls take the core, whose parts it
/// reads; it owns only its scratch.

#include <reprise/cache/block_pool.hpp>
#include <reprise/cache/config_rules.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/remote_tier.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/tier_hooks.hpp>
#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <utility>
#include <vector>

namespace reprise::detail {

class remote_fetch_planner {
public:
  /// What `prefetch` and `probe` walk: the chain of prefill-exact blocks past the prompt's local match and the
  /// snapshot candidates on the alignment grid past its local restore point.
  enum class walk_mode : std::uint8_t {
    probe,   ///< list every key (`probes`), reserve nothing
    all,     ///< fetch every candidate
    present, ///< fetch the candidates in `present` (sorted)
  };

  /// Plans fetches from the remote store of what `prompt` would reuse and the GPU and host tiers lack: the
  /// prefill-exact blocks past its match (continuing a prefill-exact chain), and snapshots at the deepest
  /// `remote_snapshot_candidates` positions on the alignment grid past what the local tiers restore, each
  /// into a reserved host unit. Changes no GPU state; host units it reserves may evict others (their puts
  /// come with the next `take_transfers`, which the engine runs before starting the fetches).
  ///
  /// With `in_store` (the keys a `probe` of this prompt found in the store), only those are fetched: the
  /// blocks up to the first one absent and, for a model with recurrent layers, only up to the deepest
  /// snapshot found (KV past it would be recomputed anyway). Without it every candidate is fetched, and
  /// those the store lacks cost a reserved unit each until reported.
  ///
  /// Complexity: the prompt's lookup (as `admit`'s, up to its first miss), then at most as many block keys
  /// as the host tier has KV units, and memory of the same order: a prompt of any length costs no more.
  /// Precondition: the prompt passed the core's checks.
  template <class Core>
  result<fetch_plan> prefetch(Core& c, std::span<const token_id> prompt, const extra_keys& keys,
                              const std::span<const content_key>* in_store) {
    present.clear();
    if (in_store != nullptr) {
      present.assign(in_store->begin(), in_store->end());
      std::sort(present.begin(), present.end());
    }
    return plan(c, prompt, keys, in_store != nullptr ? walk_mode::present : walk_mode::all);
  }

  /// The content keys a `prefetch` of `prompt` could ask the store for now, blocks in chain order then
  /// snapshots deepest first, then (`remote_turn_ends`) turn ends deepest first and the continuation blocks
  /// they may link to, with nothing reserved and nothing changed. An engine asks the store which of them it
  /// has (one pipelined round trip: `redis_store::probe`) and passes those to `prefetch`, so that a prompt's
  /// new content, which no engine computed yet, reserves no host unit. Lists at most as many blocks of a
  /// chain, and as many continuation blocks, as the host tier has KV units past the prompt's local match (no
  /// more could be fetched).
  /// Complexity: as `prefetch`'s. Precondition: the prompt passed the core's checks.
  template <class Core>
  result<probe_plan> probe(Core& c, std::span<const token_id> prompt, const extra_keys& keys) {
    if (auto walked_ok = plan(c, prompt, keys, walk_mode::probe); !walked_ok) return walked_ok.error();
    return probe_plan{probes};
  }

  /// Reports the fetch into `unit` of `item`: `header` as the store returned it, empty for a miss (absent,
  /// corrupt, timed out). A header equal to the one `prefetch` expected makes the unit a host-tier block or
  /// snapshot (its bytes already written by the engine); anything else frees it, counted as rejected.
  /// Errors: `invalid_argument` when no fetch into that unit is pending (nothing changes).
  template <class Core>
  result<void> fetched(Core& c, remote_item item, std::uint32_t unit, std::span<const std::byte> header) {
    auto& remote = c.tiers.below;
    host_ledger& ledger = c.tiers.ledger;
    auto same = [&](const std::vector<std::byte>& expected) {
      return !header.empty() && header.size() == expected.size() &&
             std::memcmp(header.data(), expected.data(), header.size()) == 0;
    };
    if (item == remote_item::block && unit < remote.turn_end_of_block.size() && remote.turn_end_of_block[unit] != no_unit) {
      link_fetched(c, unit, header);
      return {};
    }
    if (item == remote_item::block) {
      if (unit >= remote.kv_pending.size() || !remote.kv_pending[unit].active) return errc::invalid_argument;
      const host_unit u{unit};
      pending_block_fetch& p = remote.kv_pending[unit];
      p.active = false;
      if (!same(p.header)) {
        ++(header.empty() ? c.metrics.remote_misses : c.metrics.remote_rejected);
        ledger.release_reserved_block(u);
        return {};
      }
      ++c.metrics.remote_hits;
      ledger.commit_reserved_block(u, {.key = p.chain_key,
                                       .serial = p.serial,
                                       .parent_serial = p.parent_serial,
                                       .depth = p.index,
                                       .fill = c.geometry.block_size,
                                       .kind = exactness::prefill_exact,
                                       .tokens = p.tokens,
                                       .extras = &p.extras,
                                       .media = p.media.empty() ? nullptr : &p.media});
      remote.host_block(u) = {{p.key, p.parent, true}, true};
      c.metrics.remote_bytes_fetched += c.geometry.bytes_per_kv_block;
      return {};
    }
    if (item == remote_item::turn_end) {
      if (unit >= remote.turn_end_pending.size() || !remote.turn_end_pending[unit].active ||
          remote.turn_end_pending[unit].turn_end_state != 0)
        return errc::invalid_argument;
      turn_end_fetched(c, unit, header);
      return {};
    }
    if (item != remote_item::snapshot || unit >= remote.snapshot_pending.size() || !remote.snapshot_pending[unit].active)
      return errc::invalid_argument;
    const host_unit u{unit};
    pending_snapshot_fetch& p = remote.snapshot_pending[unit];
    p.active = false;
    if (!same(p.header)) {
      ++(header.empty() ? c.metrics.remote_misses : c.metrics.remote_rejected);
      ledger.release_reserved_snapshot(u);
      return {};
    }
    ++c.metrics.remote_hits;
    ledger.commit_reserved_snapshot(u, p.serial, exactness::prefill_exact);
    remote.host_snapshot(u) = {p.key, p.block, p.position, true};
    c.metrics.remote_bytes_fetched += c.geometry.bytes_per_snapshot;
    return {};
  }

private:
  /// `cache_options::remote_turn_ends` under a policy that captures turn ends and accepts decode continuations.
  template <class Core>
  static bool turn_ends_on(const Core& c) noexcept {
    return takes_turn_ends<typename Core::policy_type> && c.options.remote_turn_ends;
  }

  /// Where a turn end's blocks start: block `first` (its chain key_{first-1} is `anchor`), and the block
  /// the fetched ones hang under (the last of `turn_end_own`, or first - 1): its serial and in-process key.
  struct turn_end_start {
    std::uint32_t first = 0;
    content_key anchor{};
    std::uint64_t parent_serial = 0;
    block_key start{};
  };

  /// Reserves the units of the chosen turn end (`turn_end_boundary`, `turn_end_key`) starting at `at`: one
  /// per block past those this engine matched (`turn_end_own`), one for a partial block and one for the
  /// snapshot, and lists the fetches: the continuation block of each block it reserved a unit for (its links),
  /// then the turn end itself (its partial block and snapshot). Reserves nothing when a unit is missing.
  /// Returns the number of links listed.
  template <class Core, class HoldBlock, class HoldSnapshot>
  std::size_t reserve_turn_end(Core& c, std::span<const token_id> prompt, const stored_extra_keys& extras,
                        const turn_end_start& at, std::span<const content_key> chain_keys,
                        HoldBlock&& store_can_hold_block, HoldSnapshot&& store_can_hold_snapshot) {
    auto& remote = c.tiers.below;
    host_ledger& ledger = c.tiers.ledger;
    const std::uint32_t B = c.geometry.block_size;
    const std::uint32_t k = turn_end_boundary;
    const auto own = static_cast<std::uint32_t>(turn_end_own.size());
    if (at.first + own != 0 && at.parent_serial == 0) return 0;
    std::vector<host_unit>& units = turn_end_reserved;
    units.clear();
    for (std::uint32_t i = at.first + own; i <= k; ++i) { // the blocks, and one for the partial block
      const host_unit u = ledger.reserve_block(store_can_hold_block);
      if (u == no_host_unit) break;
      units.push_back(u);
    }
    const host_unit snapshot =
        units.size() == k - at.first - own + 1 ? ledger.reserve_snapshot(store_can_hold_snapshot) : no_host_unit;
    if (snapshot == no_host_unit) {
      for (const host_unit u : units) ledger.release_reserved_block(u);
      return 0;
    }
    pending_turn_end_fetch& t = remote.turn_end_pending[unit_index(snapshot)];
    t.active = true;
    t.key = turn_end_key;
    t.anchor = at.anchor;
    t.first = at.first;
    t.boundary = k * B;
    t.own = own;
    t.origins.assign(turn_end_own.begin(), turn_end_own.end());
    t.parent_serial = at.parent_serial;
    t.start = at.start;
    t.units.assign(units.begin(), units.end());
    t.serials.clear();
    for (std::size_t j = 0; j < units.size(); ++j) t.serials.push_back(c.tiers.draw_serial());
    const std::size_t end = std::min<std::size_t>(std::size_t{k} * B + B - 1, prompt.size() - 1);
    t.tokens.assign(prompt.begin() + std::size_t{at.first} * B, prompt.begin() + static_cast<std::ptrdiff_t>(end));
    t.media.clear();
    for (std::uint32_t j = at.first; j < k; ++j) {
      const media_digest* m = scratch.media_of_block(j);
      t.media.push_back(m != nullptr ? *m : media_digest{});
    }
    t.media_from = std::numeric_limits<std::uint32_t>::max();
    for (const stored_media_item& x : scratch.media)
      if (x.position >= std::uint64_t{k} * B) {
        t.media_from = x.position;
        break;
      }
    t.extras = extras;
    t.chain.assign(chain_keys.begin(), chain_keys.end());
    // The links: the continuation block of every block past those this engine holds, fetched beside the turn
    // end (which carries only its partial block and its snapshot) and kept only together with it.
    const std::size_t links = units.size() - 1;
    t.block_state.assign(links, 0);
    t.block_origins.assign(links, block_origin{});
    t.header.clear();
    t.turn_end_state = 0;
    t.any_rejected = false;
    t.waiting = static_cast<std::uint32_t>(links) + 1;
    constexpr auto link_header = static_cast<std::uint32_t>(remote_header_fixed_bytes + block_origin_bytes);
    for (std::size_t j = 0; j < links; ++j) {
      const std::size_t i = own + j; // its index among blocks first ..
      remote.turn_end_of_block[unit_index(units[j])] = unit_index(snapshot);
      fetches.push_back({remote_item::block, unit_index(units[j]), continuation_key(remote.keyer, t.chain[i]),
                         link_header + 4 * B});
    }
    turn_end_units.assign(1, unit_index(units.back()));
    const std::size_t header =
        remote_header_fixed_bytes + 4 * t.tokens.size() + block_origin_bytes * (k - at.first + 1);
    fetches.push_back({remote_item::turn_end, unit_index(snapshot), turn_end_key, static_cast<std::uint32_t>(header),
                       std::span<const std::uint32_t>(turn_end_units)});
    return links;
  }

  /// A host KV unit a fetched turn end filled: no content key (its block is not prefill-exact), the origin
  /// its writer gave it, from the store.
  template <class Entry>
  static void mark_from_store(Entry& e, const block_origin& origin, bool link) noexcept {
    e = Entry{};
    e.keys.origin = origin;
    e.keys.in_store = link; // a continuation block is in the store: a later turn end does not put it again
    e.from_store = true;
  }

  /// Reports the turn end's own value (into snapshot unit `unit`): well formed when `header` is the one the
  /// prompt implies for the position it names (its blocks' tokens, its partial block's, its chain's key and
  /// class) and the blocks this engine holds are the turn end's own computation. Kept until every link has
  /// reported (`turn_end_done`).
  template <class Core>
  void turn_end_fetched(Core& c, std::uint32_t unit, std::span<const std::byte> header) {
    auto& remote = c.tiers.below;
    const std::uint32_t B = c.geometry.block_size;
    pending_turn_end_fetch& t = remote.turn_end_pending[unit];
    // The position it names: in [boundary, boundary + B), within the prompt's tokens, past the chain's start.
    auto read_u32 = [&](std::size_t at) {
      std::uint32_t v = 0;
      for (std::size_t i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(header[at + i]) << (8 * i);
      return v;
    };
    bool ok = header.size() >= remote_header_fixed_bytes;
    std::uint32_t position = 0;
    if (ok) {
      position = read_u32(12);
      ok = position >= t.boundary && position < t.boundary + B && position != 0 &&
           position - std::size_t{t.first} * B <= t.tokens.size() && position <= t.media_from;
    }
    const std::uint32_t parts = t.boundary / B - t.first + 1; // blocks first .. k - 1, and the partial block
    if (ok) {
      expected_header.clear();
      append_remote_header(expected_header, remote_item::turn_end, exactness::decode_continuation, position, t.key, t.anchor,
                           std::span<const token_id>(t.tokens).first(position - std::size_t{t.first} * B));
      ok = header.size() == expected_header.size() + block_origin_bytes * parts &&
           std::memcmp(header.data(), expected_header.data(), expected_header.size()) == 0;
    }
    // The blocks this engine matched must be the turn end's own computation.
    for (std::uint32_t j = 0; ok && j < t.own; ++j)
      ok = read_origin(header.subspan(expected_header.size() + block_origin_bytes * j)) == t.origins[j];
    t.turn_end_state = ok ? 1 : 2;
    t.any_rejected = t.any_rejected || (!ok && !header.empty());
    if (ok) t.header.assign(header.begin(), header.end());
    if (--t.waiting == 0) turn_end_done(c, unit);
  }

  /// Reports the continuation block fetched into KV unit `unit` for a pending turn end: well formed when its
  /// header is the block header the prompt implies (its index, key_{i-1}, its tokens, decode_continuation)
  /// followed by an origin, which must then be the one the turn end lists (checked by `turn_end_done`).
  template <class Core>
  void link_fetched(Core& c, std::uint32_t unit, std::span<const std::byte> header) {
    auto& remote = c.tiers.below;
    const std::uint32_t B = c.geometry.block_size;
    const std::uint32_t owner = std::exchange(remote.turn_end_of_block[unit], no_unit);
    pending_turn_end_fetch& t = remote.turn_end_pending[owner];
    const auto at = static_cast<std::size_t>(
        std::find(t.units.begin(), t.units.end() - 1, host_unit{unit}) - t.units.begin()); // its index among the links
    const std::size_t i = t.own + at; // among blocks first ..
    expected_header.clear();
    append_remote_header(expected_header, remote_item::block, exactness::decode_continuation,
                         static_cast<std::uint32_t>((t.first + i + 1) * B), continuation_key(remote.keyer, t.chain[i]),
                         i == 0 ? t.anchor : t.chain[i - 1], std::span<const token_id>(t.tokens).subspan(i * B, B));
    const bool ok = header.size() == expected_header.size() + block_origin_bytes &&
                    std::memcmp(header.data(), expected_header.data(), expected_header.size()) == 0;
    t.block_state[at] = ok ? 1 : 2;
    if (ok) t.block_origins[at] = read_origin(header.subspan(expected_header.size()));
    t.any_rejected = t.any_rejected || (!ok && !header.empty());
    if (--t.waiting == 0) turn_end_done(c, owner);
  }

  /// Every part of turn-end fetch `unit` has reported: kept when each one was well formed and each fetched
  /// block's origin is the one the turn end lists (the same computation as its snapshot), each unit then a
  /// host-tier block, partial block or decode-continuation snapshot under the prompt's chain; all freed
  /// otherwise, counted as one miss (a part absent) or one rejected value (a part wrong).
  template <class Core>
  void turn_end_done(Core& c, std::uint32_t unit) {
    auto& remote = c.tiers.below;
    host_ledger& ledger = c.tiers.ledger;
    const std::uint32_t B = c.geometry.block_size;
    pending_turn_end_fetch& t = remote.turn_end_pending[unit];
    t.active = false;
    const host_unit snapshot{unit};
    const std::uint32_t parts = t.boundary / B - t.first + 1;
    const std::size_t origins_at = t.header.size() - block_origin_bytes * parts;
    auto origin = [&](std::uint32_t j) {
      return read_origin(std::span<const std::byte>(t.header).subspan(origins_at + block_origin_bytes * j));
    };
    bool ok = t.turn_end_state == 1, other_computation = false;
    for (std::size_t j = 0; ok && j < t.block_state.size(); ++j) {
      ok = t.block_state[j] == 1 && t.block_origins[j] == origin(t.own + static_cast<std::uint32_t>(j));
      other_computation = t.block_state[j] == 1 && !ok;
    }
    if (!ok) {
      ++(t.any_rejected || other_computation ? c.metrics.remote_rejected : c.metrics.remote_misses);
      for (const host_unit u : t.units) ledger.release_reserved_block(u);
      ledger.release_reserved_snapshot(snapshot);
      return;
    }
    std::uint32_t position = 0;
    for (std::size_t i = 0; i < 4; ++i) position |= static_cast<std::uint32_t>(t.header[12 + i]) << (8 * i);
    const std::uint32_t blocks = t.boundary / B - t.first, fill = position % B;
    block_key key = t.start;
    std::uint64_t parent = t.parent_serial;
    for (std::uint32_t j = t.own; j < blocks; ++j) {
      const auto tokens = std::span<const token_id>(t.tokens).subspan(std::size_t{j} * B, B);
      const media_digest* media = t.media[j].empty() ? nullptr : &t.media[j];
      const block_key next = chain_block(c.hasher, key, tokens, media);
      const host_unit u = t.units[j - t.own];
      ledger.commit_reserved_block(u, {.key = next,
                                       .serial = t.serials[j - t.own],
                                       .parent_serial = parent,
                                       .depth = t.first + j,
                                       .fill = B,
                                       .kind = exactness::decode_continuation,
                                       .tokens = tokens,
                                       .extras = &t.extras,
                                       .media = media});
      mark_from_store(remote.host_block(u), origin(j), true);
      key = next;
      parent = t.serials[j - t.own];
    }
    const host_unit partial = t.units.back();
    if (fill != 0) { // a partial block starts from the chain key before it, as one the GPU pool kept
      ledger.commit_reserved_block(partial, {.key = key,
                                             .serial = t.serials.back(),
                                             .parent_serial = parent,
                                             .depth = t.boundary / B,
                                             .fill = fill,
                                             .kind = exactness::decode_continuation,
                                             .tokens = std::span<const token_id>(t.tokens).subspan(std::size_t{blocks} * B, fill),
                                             .extras = &t.extras});
      mark_from_store(remote.host_block(partial), origin(parts - 1), false);
      parent = t.serials.back();
    } else {
      ledger.release_reserved_block(partial);
    }
    ledger.commit_reserved_snapshot(snapshot, parent, exactness::decode_continuation, /*from_decode=*/true);
    remote.host_snapshot(snapshot) = {};
    ++c.metrics.remote_hits;
    ++c.metrics.remote_turn_end_hits;
    // The bytes kept: the links fetched, then the turn end's payload (its partial block and its snapshot).
    c.metrics.remote_bytes_fetched +=
        t.block_state.size() * c.geometry.bytes_per_kv_block +
        remote_payload_bytes(remote_item::turn_end, 1, c.geometry.bytes_per_kv_block, c.geometry.bytes_per_snapshot);
  }

  /// A snapshot `prefetch` may fetch: its position, its block's content key and its own.
  struct snapshot_candidate {
    std::uint32_t position = 0;
    content_key block{}, key{};
  };

  template <class Core>
  result<fetch_plan> plan(Core& c, std::span<const token_id> prompt, const extra_keys& keys, walk_mode walk) {
    return Core::with_block_size(c.geometry.block_size, [&](auto b) -> result<fetch_plan> {
      constexpr std::uint32_t B = decltype(b)::value;
      constexpr bool restores = Core::restores;
      auto& tiers = c.tiers;
      auto& remote = tiers.below;
      host_ledger& ledger = tiers.ledger;
      const bool probing = walk == walk_mode::probe;
      auto in_store = [&](const content_key& k) {
        return walk != walk_mode::present || std::binary_search(present.begin(), present.end(), k);
      };
      if (probing) probes.clear();
      else fetches.clear();
      sequence_record& r = scratch;
      r.reset(0);
      r.root = c.hasher.root(keys);
      r.extras = stored_extra_keys::from(keys);
      r.set_media(keys.media, B);
      const std::uint32_t on_gpu = c.template lookup<B>(r, prompt);
      const std::uint32_t matched = on_gpu + tiers.hits();
      const std::uint32_t local_usable = c.template choose_restore<B>(r, matched, prompt).usable;
      auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
      // Fetched blocks need a host unit each, so a walk past the matched blocks plus every host KV unit could
      // never be fetched: bounding it there bounds the work and memory of a call (keys hashed, the key memo,
      // the keys listed) by the tiers' sizes, whatever the prompt's length.
      limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(limit, std::uint64_t{matched} + ledger.blocks().size()));
      // `remote_turn_ends`, given what the store has (or listing it): a turn end anywhere past the local restore
      // point may be fetched, with the blocks up to it.
      const bool turn_ends = turn_ends_on<Core>(c) && walk != walk_mode::all;
      if constexpr (restores) {
        // Recurrent layers use KV only up to the restored snapshot, and the store holds prefill-exact snapshots
        // on the alignment grid only: blocks past the prompt's last grid position would never be onboarded
        // (unless a turn end past them is).
        if (!turn_ends)
          limit = std::min(limit, static_cast<std::uint32_t>((prompt.size() - 1) / c.geometry.alignment *
                                                             c.geometry.alignment / B));
      }
      auto block_tokens = [&](std::uint32_t i) { return prompt.subspan(std::size_t{i} * B).template first<B>(); };
      // The content key of matched block i: GPU block r.blocks[i], then the host hits.
      auto matched_key = [&](std::uint32_t i) -> const content_key& {
        return i < on_gpu ? remote.gpu_block(r.blocks[i]).key : remote.host_block(tiers.hit_units[i - on_gpu]).keys.key;
      };

      // The chain the fetched blocks continue: keys, serial, in-process key of the last matched block.
      content_key key = remote.keyer->root(keys);
      std::uint64_t serial = 0;
      block_key chain = r.root;
      bool chain_ok = true;
      if (matched != 0) {
        const std::uint32_t i = matched - 1;
        chain_ok = c.matched_kind(r, i) == exactness::prefill_exact;
        serial = tiers.matched_serial(r, i);
        key = matched_key(i);
        chain = i < on_gpu ? c.blocks.node(r.blocks[i]).key : ledger.block(tiers.hit_units[i - on_gpu]).key;
        chain_ok = chain_ok && serial != 0;
      }
      const content_key parent_of_walk = key;

      // The content keys of blocks matched + 0, 1, ...: as far as the chain goes (and, given what the
      // store has, up to the first block it lacks).
      walked.clear();
      memo_parents.resize(limit);
      memo_keys.resize(limit);
      memo_tokens.resize(std::size_t{limit} * B);
      auto chain_key = [&](std::uint32_t i, const content_key& parent) {
        const std::span<const token_id> tokens = block_tokens(i);
        // Blocks with media are rare and never remembered (the memo names blocks by parent and tokens alone).
        if (const media_digest* m = r.media_of_block(i)) return remote.keyer->chain(parent, tokens, *m);
        token_id* remembered = memo_tokens.data() + std::size_t{i} * B;
        if (memo_parents[i] == parent && !is_zero(memo_keys[i]) && std::equal(tokens.begin(), tokens.end(), remembered))
          return memo_keys[i];
        const content_key k = remote.keyer->chain(parent, tokens, media_digest{});
        memo_parents[i] = parent;
        memo_keys[i] = k;
        std::copy(tokens.begin(), tokens.end(), remembered);
        return k;
      };
      for (std::uint32_t i = matched; chain_ok && i < limit && !is_zero(key); ++i) {
        const content_key next = chain_key(i, key);
        if (is_zero(next) || !in_store(next)) break;
        walked.push_back(next);
        key = next;
      }

      // Snapshot candidates, deepest first: grid positions past the local restore point at block ends the
      // prompt has (matched) or walked, whose block is prefill-exact and whose snapshot the host lacks.
      candidates.clear();
      if constexpr (restores) {
        const std::uint32_t A = c.geometry.alignment;
        const std::uint32_t reach = (matched + static_cast<std::uint32_t>(walked.size())) * B;
        for (std::uint32_t p = reach / A * A; p > local_usable && p != 0; p -= A) {
          const std::uint32_t i = p / B - 1;
          content_key block_key{};
          if (i >= matched) {
            block_key = walked[i - matched];
          } else if (c.matched_kind(r, i) == exactness::prefill_exact) {
            const std::uint64_t block_serial = tiers.matched_serial(r, i);
            if (block_serial == 0 || ledger.find_snapshot(block_serial, exactness::prefill_exact) != no_host_unit)
              continue;
            block_key = matched_key(i);
          }
          if (is_zero(block_key)) continue;
          const content_key snapshot_key = remote.keyer->snapshot(block_key, p);
          if (is_zero(snapshot_key) || !in_store(snapshot_key)) continue;
          candidates.push_back({p, block_key, snapshot_key});
        }
      }

      // Turn ends, deepest boundary first: at block boundaries k B from the one where the prompt's match in this
      // engine ends (that one included: a short follow-up's turn end sits in the block after the match) up to
      // its last full block, where one could restore more than the local tiers. Each is keyed by the chain of
      // the prompt's own tokens from its prefill-exact lead (the blocks a block key names: matched, then walked
      // in the store), since no store names the blocks past it under block keys. Listed all when probing;
      // given what the store has, the deepest it has is fetched. A prompt that matched decode-filled blocks
      // here takes a turn end only if they are the turn end's own (their origins, checked by `fetched`).
      turn_end_chosen = false;
      if (turn_ends) {
        std::uint32_t lead = matched; // the prefill-exact lead among the matched blocks
        if (!chain_ok)
          for (lead = 0; lead < matched && c.matched_kind(r, lead) == exactness::prefill_exact;) ++lead;
        turn_end_lead_index = lead;
        const bool usable = chain_ok || (lead < matched && tiers.matched_serial(r, matched - 1) != 0);
        // The chain keys of blocks [lead, limit), from key_{lead-1}: the walked ones, then the prompt's tokens.
        // None when the lead already reaches the prompt's last full block (a short follow-up): the anchor alone
        // then names the turn end at the lead's boundary.
        const content_key anchor = chain_ok ? parent_of_walk : lead == 0 ? remote.keyer->root(keys) : matched_key(lead - 1);
        const bool anchored = usable && !is_zero(anchor);
        chained.clear();
        if (anchored) {
          chained.assign(walked.begin(), walked.end());
          for (std::uint32_t i = lead + static_cast<std::uint32_t>(walked.size()); i < limit; ++i) {
            const content_key next = chain_key(i, chained.empty() ? anchor : chained.back());
            if (is_zero(next)) break;
            chained.push_back(next);
          }
        }
        const auto reach = matched + static_cast<std::uint32_t>(walked.size());
        const std::uint32_t lowest = probing || !chain_ok ? matched : reach;
        const auto top = lead + static_cast<std::uint32_t>(chained.size());
        for (std::uint32_t k = top + 1; anchored && k-- > lowest;) {
          if (std::uint64_t{k} * B + B - 1 <= local_usable) break; // no deeper than the local restore
          const content_key& parent = k == lead ? anchor : chained[k - 1 - lead];
          const content_key named = remote.keyer->turn_end(parent, k * B);
          if (is_zero(named)) continue;
          // The links a turn end at k needs: the continuation blocks of [reach, k), which the store must have too.
          auto links_present = [&] {
            for (std::uint32_t i = reach; i < k; ++i)
              if (!in_store(continuation_key(remote.keyer, chained[i - lead]))) return false;
            return true;
          };
          if (probing) {
            turn_end_keys.push_back(named);
          } else if (in_store(named) && links_present()) {
            turn_end_chosen = true;
            turn_end_boundary = k;
            turn_end_key = named;
            break;
          }
        }
        // A lead past which this engine matched decode-filled blocks: the turn end must have them as its own.
        turn_end_own.clear();
        if (turn_end_chosen && !chain_ok) {
          for (std::uint32_t i = lead; i < matched; ++i) {
            const block_origin o =
                i < on_gpu ? remote.gpu_block(r.blocks[i]).origin : remote.host_block(tiers.hit_units[i - on_gpu]).keys.origin;
            if (o == block_origin{}) turn_end_chosen = false; // unknown: nothing to check against
            turn_end_own.push_back(o);
          }
          const std::uint32_t i = matched - 1;
          turn_end_lead = {lead, anchor, tiers.matched_serial(r, i),
                           i < on_gpu ? c.blocks.node(r.blocks[i]).key : ledger.block(tiers.hit_units[i - on_gpu]).key};
        }
      }

      if (probing) {
        for (const content_key& k : walked) probes.push_back({remote_item::block, k});
        for (const snapshot_candidate& s : candidates) probes.push_back({remote_item::snapshot, s.key});
        for (const content_key& k : turn_end_keys) probes.push_back({remote_item::turn_end, k});
        // The continuation blocks past the local match that a listed turn end may link to.
        if (!turn_end_keys.empty())
          for (std::uint32_t i = matched; i < turn_end_lead_index + chained.size(); ++i)
            if (const content_key k = continuation_key(remote.keyer, chained[i - turn_end_lead_index]); !is_zero(k))
              probes.push_back({remote_item::block, k});
        turn_end_keys.clear();
        return fetch_plan{};
      }

      // Blocks to fetch: all walked; given what the store has, a model with recurrent layers fetches them only
      // up to its deepest snapshot (KV past the restore point is recomputed).
      auto wanted = static_cast<std::uint32_t>(walked.size());
      if constexpr (restores) {
        if (turn_end_chosen) candidates.clear(); // the turn end is deeper than any of them
        else if (walk == walk_mode::present)
          wanted = candidates.empty() ? 0 : std::min(wanted, candidates.front().position / B > matched
                                                                 ? candidates.front().position / B - matched
                                                                 : 0);
      }
      if (wanted == 0 && candidates.empty() && !turn_end_chosen) return fetch_plan{fetches, 0}; // nothing touched
      // The matched host blocks stay while units are reserved (the fetched chain hangs under them).
      for (const host_unit u : tiers.hit_units) ledger.hold_block(u);
      // A fetch may miss: it may push a host unit down to the store (written back, or there already), never
      // drop one the store cannot hold (a turn end, a decode-filled or partial block).
      // A turn end the store has (by the probe) should be fetched, with the blocks under it, even at the cost of
      // units it does not hold: what that evicts of this engine's turn ends went to the store as theirs.
      auto store_can_hold_block = [&](host_unit u) noexcept {
        return turn_end_chosen || remote.store_can_hold_block(u, ledger);
      };
      auto store_can_hold_snapshot = [&](host_unit u) noexcept {
        return turn_end_chosen || remote.store_can_hold_snapshot(u, ledger);
      };
      // The serial of every fetched block, for the snapshots that hang under it.
      walked_serials.clear();
      key = parent_of_walk;
      for (std::uint32_t k = 0; k < wanted; ++k) {
        const std::uint32_t i = matched + k;
        const content_key next = walked[k];
        const host_unit u = ledger.reserve_block(store_can_hold_block);
        if (u == no_host_unit) break;
        pending_block_fetch& p = remote.kv_pending[unit_index(u)];
        p.active = true;
        p.key = next;
        p.parent = key;
        const media_digest* media = r.media_of_block(i);
        p.chain_key = chain_block(c.hasher, chain, block_tokens(i), media);
        p.media = media != nullptr ? *media : media_digest{};
        p.serial = tiers.draw_serial();
        p.parent_serial = serial;
        p.index = i;
        p.tokens.assign(block_tokens(i).begin(), block_tokens(i).end());
        p.extras = r.extras;
        p.header.clear();
        append_remote_header(p.header, remote_item::block, exactness::prefill_exact, (i + 1) * B, next, key,
                             block_tokens(i));
        fetches.push_back({remote_item::block, unit_index(u), next, static_cast<std::uint32_t>(p.header.size())});
        walked_serials.push_back(p.serial);
        key = next;
        chain = p.chain_key;
        serial = p.serial;
      }
      const auto fetched_blocks = static_cast<std::uint32_t>(walked_serials.size());
      if constexpr (restores) {
        const std::uint32_t reach = (matched + fetched_blocks) * B;
        std::uint32_t asked = 0;
        for (const snapshot_candidate& s : candidates) {
          if (s.position > reach) continue;
          if (asked == c.options.remote_snapshot_candidates) break;
          const std::uint32_t i = s.position / B - 1;
          const std::uint64_t block_serial = i >= matched ? walked_serials[i - matched] : tiers.matched_serial(r, i);
          const host_unit u = ledger.reserve_snapshot(store_can_hold_snapshot);
          if (u == no_host_unit) break;
          pending_snapshot_fetch& f = remote.snapshot_pending[unit_index(u)];
          f.active = true;
          f.key = s.key;
          f.block = s.block;
          f.serial = block_serial;
          f.position = s.position;
          f.header.clear();
          append_remote_header(f.header, remote_item::snapshot, exactness::prefill_exact, s.position, s.key, s.block, {});
          fetches.push_back({remote_item::snapshot, unit_index(u), s.key, static_cast<std::uint32_t>(f.header.size())});
          ++asked;
        }
      }
      std::size_t links = 0; // the links listed with the turn end
      if (turn_end_chosen && fetched_blocks == wanted) {
        // Its blocks continue the chain fetched (or matched) so far, or hang under the matched ones.
        const turn_end_start at = turn_end_own.empty() ? turn_end_start{matched + fetched_blocks, key, serial, chain}
                                                       : turn_end_lead;
        // The chain keys of blocks at.first .. boundary - 1, for their continuation blocks.
        const std::span<const content_key> chain_keys =
            std::span<const content_key>(chained).subspan(at.first - turn_end_lead_index, turn_end_boundary - at.first);
        links = reserve_turn_end(c, prompt, r.extras, at, chain_keys, store_can_hold_block, store_can_hold_snapshot);
      }
      for (const host_unit u : tiers.hit_units) ledger.unhold_block(u);
      // A turn end and its links are one fetch, as the cache counts its outcome once (kept, missed or rejected).
      c.metrics.remote_fetches += fetches.size() - links;
      return fetch_plan{fetches, fetched_blocks};
    });
  }

  std::vector<remote_fetch> fetches;
  std::vector<remote_probe> probes;
  /// Scratch: the lookup of the prompt walked, the keys the store has (sorted), the walked chain's block
  /// keys and the serials drawn for the fetched ones, the snapshot candidates.
  sequence_record scratch;
  std::vector<content_key> present, walked;
  std::vector<std::uint64_t> walked_serials;
  std::vector<snapshot_candidate> candidates;
  /// The block keys of recent walks, by block index, with the parent each chained from and the block's tokens:
  /// a key is a function of those alone, so one is reused when both match, and a `prefetch` after the `probe`
  /// of its prompt does not hash the prompt again. Sized to the latest walk.
  std::vector<content_key> memo_parents, memo_keys;
  std::vector<token_id> memo_tokens;
  /// Turn ends: the chain keys past the walk, the keys a probe lists, the one chosen (its boundary in blocks)
  /// and the units reserved for it, the header a fetched one must equal.
  std::vector<content_key> chained, turn_end_keys;
  bool turn_end_chosen = false;
  std::uint32_t turn_end_boundary = 0;
  content_key turn_end_key{};
  std::vector<host_unit> turn_end_reserved;
  std::vector<std::uint32_t> turn_end_units;
  std::vector<block_origin> turn_end_own; ///< the origins of the decode-filled blocks the prompt matched here
  turn_end_start turn_end_lead;           ///< ... and where the fetched ones hang
  std::uint32_t turn_end_lead_index = 0;  ///< the block `chained` starts at

  std::vector<std::byte> expected_header;
};

/// A cache without a remote tier plans no fetch.
struct no_fetch_planner {};

} // namespace reprise::detail
