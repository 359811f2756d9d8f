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
#include <span>
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
  /// snapshots deepest first, with nothing reserved and nothing changed. An engine asks the store which of
  /// them it has (one pipelined round trip: `redis_store::probe`) and passes those to `prefetch`, so that
  /// a prompt's new content, which no engine computed yet, reserves no host unit. Lists at most as many
  /// blocks as the host tier has KV units past the prompt's local match (no more could be fetched).
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
                                       .extras = &p.extras});
      remote.host_block(u) = {{p.key, p.parent, true}, true};
      c.metrics.remote_bytes_fetched += c.geometry.bytes_per_kv_block;
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
      const std::uint32_t on_gpu = c.template lookup<B>(r, prompt);
      const std::uint32_t matched = on_gpu + tiers.hits();
      const std::uint32_t local_usable = c.template choose_restore<B>(r, matched, prompt).usable;
      auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
      // Fetched blocks need a host unit each, so a walk past the matched blocks plus every host KV unit could
      // never be fetched: bounding it there bounds the work and memory of a call (keys hashed, the key memo,
      // the keys listed) by the tiers' sizes, whatever the prompt's length.
      limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(limit, std::uint64_t{matched} + ledger.blocks().size()));
      if constexpr (restores) {
        // Recurrent layers use KV only up to the restored snapshot, and the store holds snapshots on the
        // alignment grid only: blocks past the prompt's last grid position would never be onboarded.
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
        token_id* remembered = memo_tokens.data() + std::size_t{i} * B;
        if (memo_parents[i] == parent && !is_zero(memo_keys[i]) && std::equal(tokens.begin(), tokens.end(), remembered))
          return memo_keys[i];
        const content_key k = remote.keyer->chain(parent, tokens);
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

      if (probing) {
        for (const content_key& k : walked) probes.push_back({remote_item::block, k});
        for (const snapshot_candidate& s : candidates) probes.push_back({remote_item::snapshot, s.key});
        return fetch_plan{};
      }

      // Blocks to fetch: all walked; given what the store has, a model with recurrent layers fetches them only
      // up to its deepest snapshot (KV past the restore point is recomputed).
      auto wanted = static_cast<std::uint32_t>(walked.size());
      if constexpr (restores) {
        if (walk == walk_mode::present)
          wanted = candidates.empty() ? 0 : std::min(wanted, candidates.front().position / B > matched
                                                                 ? candidates.front().position / B - matched
                                                                 : 0);
      }
      if (wanted == 0 && candidates.empty()) return fetch_plan{fetches, 0}; // nothing to fetch, nothing touched
      // The matched host blocks stay while units are reserved (the fetched chain hangs under them).
      for (const host_unit u : tiers.hit_units) ledger.hold_block(u);
      // A fetch may miss: it may push a host unit down to the store (written back, or there already), never
      // drop one the store cannot hold (a turn end, a decode-filled or partial block).
      auto store_can_hold_block = [&](host_unit u) noexcept { return remote.store_can_hold_block(u, ledger); };
      auto store_can_hold_snapshot = [&](host_unit u) noexcept { return remote.store_can_hold_snapshot(u, ledger); };
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
        p.chain_key = c.hasher.chain(chain, block_tokens(i));
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
      for (const host_unit u : tiers.hit_units) ledger.unhold_block(u);
      c.metrics.remote_fetches += fetches.size();
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
};

/// A cache without a remote tier plans no fetch.
struct no_fetch_planner {};

} // namespace reprise::detail
