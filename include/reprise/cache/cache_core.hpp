// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `cache_core<Policy, Hasher, Tiers>`: the state and operations behind `prefix_cache`, configured at run time by a
/// `cache_geometry` (block size, alignment, byte sizes). It composes the block ledger, the snapshot ledger,
/// the capture planner, the sequence table and, with `policy::host_tier`, the host ledger; the façade in
/// prefix_cache.hpp only forwards.
///
/// The hot loops (hashing, verifying and copying full blocks) are instantiated for every supported block
/// size with B as a compile-time constant, and each call dispatches once on the runtime block size.

#include <reprise/cache/block_index.hpp>
#include <reprise/cache/block_ledger.hpp>
#include <reprise/cache/capture_planner.hpp>
#include <reprise/cache/config_rules.hpp>
#include <reprise/cache/host_ledger.hpp>
#include <reprise/cache/remote_state.hpp>
#include <reprise/cache/in_step_sharing.hpp>
#include <reprise/cache/sequence_table.hpp>
#include <reprise/cache/snapshot_ledger.hpp>
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
#include <memory>
#include <span>
#include <tuple>
#include <type_traits>
#include <utility>

namespace reprise::detail {

template <class Policy, class Hasher, class Tiers = policy::tiers<>>
struct cache_core {
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

  static std::uint32_t units_in(std::size_t budget, std::size_t unit_bytes) noexcept {
    return unit_bytes == 0 ? 0 : static_cast<std::uint32_t>(std::min<std::size_t>(budget / unit_bytes, max_pool_ids));
  }

  static std::uint32_t slot_count(const cache_geometry& g, const cache_options& o) noexcept {
    if constexpr (!restores) return 0;
    const std::size_t count = o.snapshot_budget_bytes / g.bytes_per_snapshot;
    return static_cast<std::uint32_t>(std::min<std::size_t>(count, max_pool_ids));
  }

  /// Precondition: validate(g, o) succeeded. Throws `std::bad_alloc`.
  cache_core(const cache_geometry& g, const cache_options& o, std::uint64_t hasher_seed)
      : options(o), geometry(g), seed(hasher_seed), hasher(hasher_seed), blocks(o.kv_blocks, g.block_size, clock, metrics),
        slots(slot_count(g, o), g.bytes_per_snapshot, blocks.pool(), clock, metrics), sequences(o.max_sequences),
        in_step(can_share_in_step && o.share_in_step, blocks.pool(), o.max_sequences) {
    if constexpr (has_host) {
      host = std::make_unique<host_tier_state>(o.kv_blocks, units_in(o.host_kv_budget_bytes, g.bytes_per_kv_block),
                                               units_in(o.host_snapshot_budget_bytes, g.bytes_per_snapshot),
                                               g.block_size, g.bytes_per_kv_block, g.bytes_per_snapshot, clock, metrics);
      slots.set_evict_hook(&snapshot_evicted, this);
    }
    if constexpr (has_remote) {
      remote = std::make_unique<remote_tier_state>(*o.remote_keys, o.kv_blocks, slots.size(), host->ledger.blocks().size(),
                                                   host->ledger.snapshots().size());
      host->ledger.set_evict_hook(&host_evicted, this);
    }
  }

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

  /// Evicting a block drops its snapshots first; with a host tier both are offloaded first.
  auto on_evict() noexcept {
    if constexpr (restores || has_host) {
      return [this](block_node& n) {
        if constexpr (has_host) offload_block(n);
        if constexpr (restores) slots.invalidate(n);
      };
    } else {
      return [](block_node&) {};
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // host tier: offload on eviction (write-back), serials, transfers

  /// Copies cached block `n`, which the GPU pool is evicting, into the host tier with its snapshots, unless
  /// its host copy (it was onboarded from) is still there. Complexity: O(B).
  void offload_block(const block_node& n) noexcept {
    host_tier_state& h = *host;
    const block_id b = blocks.id_of(n);
    const std::uint64_t serial = h.serial[static_cast<std::size_t>(b)];
    const std::uint64_t parent_serial = n.parent == no_block ? 0 : h.serial[static_cast<std::size_t>(n.parent)];
    h.serial[static_cast<std::size_t>(b)] = 0;
    const host_unit twin = std::exchange(h.twin[static_cast<std::size_t>(b)], no_host_unit);
    content_key key{}, parent_key{};
    std::uint8_t in_store = 0;
    if constexpr (has_remote) {
      key = std::exchange(remote->gpu_key[static_cast<std::size_t>(b)], content_key{});
      parent_key = std::exchange(remote->gpu_parent[static_cast<std::size_t>(b)], content_key{});
      in_store = std::exchange(remote->gpu_in_store[static_cast<std::size_t>(b)], 0);
    }
    // A block without a serial (2^64 drawn), or under one without, is never offloaded: its parent could not
    // be verified on the way back.
    if (serial == 0 || (n.parent != no_block && parent_serial == 0)) return;
    // A turn end's partial block is only ever used with its snapshot: without a live one (on the GPU, not
    // superseded, or already in the host tier) it is not worth a host unit.
    if (n.state == block_state::tail) {
      bool restorable = false;
      if constexpr (restores) {
        const slot_id s = n.snapshot[static_cast<int>(exactness::decode_continuation)];
        restorable = (s != no_slot && !slots.node(s).superseded && slots.ready(s)) ||
                     h.ledger.find_snapshot(serial, exactness::decode_continuation) != no_host_unit;
      }
      if (!restorable) return;
    }
    const host_block_node* copy = twin != no_host_unit ? &h.ledger.block(twin) : nullptr;
    if (copy != nullptr && copy->state == host_state::cached && copy->serial == serial) {
      h.ledger.touch_block(twin);
    } else {
      const std::uint32_t fill = n.state == block_state::tail ? n.fill : geometry.block_size;
      const host_block_desc d{.key = n.key,
                              .serial = serial,
                              .parent_serial = parent_serial,
                              .depth = n.depth,
                              .fill = fill,
                              .kind = n.kind,
                              .tokens = blocks.pool().tokens(b).first(fill),
                              .extras = n.parent == no_block ? &blocks.pool().root_extras(b) : nullptr};
      if (const host_unit u = h.ledger.store_block(d); u != no_host_unit) {
        h.kv_offload.push_back({static_cast<std::uint32_t>(b), u});
        if constexpr (has_remote) {
          remote->host_key[u] = key;
          remote->host_parent[u] = parent_key;
          remote->host_fetched[u] = in_store;
          remote->host_from_store[u] = 0;
        }
      }
    }
    if constexpr (restores) {
      for (const slot_id s : n.snapshot)
        if (s != no_slot) offload_snapshot(slots.node(s), serial, key);
    }
  }

  /// Copies published snapshot `n` (its block has serial `serial` and, with a remote tier, content key
  /// `block_key`) into the host tier, if it is restorable and the host holds none of that block and class.
  void offload_snapshot(const slot_node& n, std::uint64_t serial, const content_key& block_key) noexcept {
    if constexpr (restores) {
      const slot_id s = slots.id_of(n);
      // A superseded turn end (its conversation captured the next one, or ended) is not worth host memory.
      if (serial == 0 || !slots.ready(s) || n.superseded) return;
      if (const host_unit u = host->ledger.store_snapshot(serial, n.kind, n.from_decode); u != no_host_unit) {
        host->snapshot_offload.push_back({static_cast<std::uint32_t>(s), u});
        if constexpr (has_remote) {
          // Only a prefill-exact snapshot at a full block's end is writer-independent: the store may have it.
          const block_node& b = blocks.node(n.block);
          const bool shareable = n.kind == exactness::prefill_exact && b.state == block_state::cached && !is_zero(block_key);
          const std::uint32_t position = (b.depth + 1) * geometry.block_size;
          remote->snapshot_key[u] = shareable ? remote->keyer->snapshot(block_key, position) : content_key{};
          remote->snapshot_block[u] = shareable ? block_key : content_key{};
          remote->snapshot_position[u] = position;
          remote->snapshot_fetched[u] = remote->slot_in_store[static_cast<std::size_t>(s)];
        }
      }
    }
  }

  static void snapshot_evicted(void* self, const slot_node& n) noexcept {
    auto& c = *static_cast<cache_core*>(self);
    const auto b = static_cast<std::size_t>(n.block);
    content_key key{};
    if constexpr (has_remote) key = c.remote->gpu_key[b];
    c.offload_snapshot(n, c.host->serial[b], key);
  }

  /// `policy::remote_tier`: the host tier is handing out unit `u` again; a prefill-exact full block or
  /// snapshot that did not come from the store is written there (write-back). Its header is built now; the
  /// engine copies the unit's bytes before the transfers that overwrite it.
  static void host_evicted(void* self, remote_item item, host_unit u) noexcept {
    auto& c = *static_cast<cache_core*>(self);
    if constexpr (has_remote) {
      remote_tier_state& r = *c.remote;
      const std::size_t begin = r.header_bytes.size();
      if (item == remote_item::block) {
        const host_block_node& n = c.host->ledger.block(u);
        if (r.host_fetched[u] != 0 || is_zero(r.host_key[u]) || n.kind != exactness::prefill_exact ||
            n.fill != c.geometry.block_size)
          return;
        append_remote_header(r.header_bytes, item, n.kind, (n.depth + 1) * n.fill, r.host_key[u], r.host_parent[u],
                             c.host->ledger.tokens(u));
        r.puts.push_back({item, u, r.host_key[u], {}});
        c.metrics.remote_bytes_put += c.geometry.bytes_per_kv_block;
      } else {
        const host_snapshot_node& n = c.host->ledger.snapshot(u);
        if (r.snapshot_fetched[u] != 0 || is_zero(r.snapshot_key[u]) || n.kind != exactness::prefill_exact) return;
        append_remote_header(r.header_bytes, item, n.kind, r.snapshot_position[u], r.snapshot_key[u],
                             r.snapshot_block[u], {});
        r.puts.push_back({item, u, r.snapshot_key[u], {}});
        c.metrics.remote_bytes_put += c.geometry.bytes_per_snapshot;
      }
      r.put_headers.emplace_back(begin, r.header_bytes.size() - begin);
      ++c.metrics.remote_puts;
    }
  }

  /// A freshly published block (or kept tail) `b` of sequence `r` gets its serial and, with a remote tier and
  /// when it is a prefill-exact full block, its content key.
  void published(block_id b, const sequence_record& r) noexcept {
    if constexpr (has_host) {
      host->serial[static_cast<std::size_t>(b)] = host->draw_serial();
      host->twin[static_cast<std::size_t>(b)] = no_host_unit;
    }
    if constexpr (has_remote) {
      const block_node& n = blocks.node(b);
      const auto i = static_cast<std::size_t>(b);
      remote->gpu_key[i] = remote->gpu_parent[i] = content_key{};
      remote->gpu_in_store[i] = 0;
      if (n.state != block_state::cached || n.kind != exactness::prefill_exact) return;
      const content_key parent = n.parent == no_block ? r.content_root : remote->gpu_key[static_cast<std::size_t>(n.parent)];
      if (is_zero(parent)) return;
      remote->gpu_parent[i] = parent;
      remote->gpu_key[i] = remote->keyer->chain(parent, blocks.pool().tokens(b));
      if (options.remote_write_through && !is_zero(remote->gpu_key[i]))
        remote->through_blocks.push_back({b, b, host->serial[i], clock.current});
    }
  }

  /// Write-through: snapshot slot `s`, just published for block `b` as `kind` and written in the current
  /// step, is put once that step completes if it is a prefill-exact one at the end of a full block.
  void published_snapshot(slot_id s, block_id b, exactness kind) noexcept {
    if constexpr (has_remote) {
      const auto i = static_cast<std::size_t>(s);
      remote->slot_in_store[i] = 0;
      remote->slot_epoch[i] = clock.current;
      if (options.remote_write_through && kind == exactness::prefill_exact &&
          blocks.node(b).state == block_state::cached && !is_zero(remote->gpu_key[static_cast<std::size_t>(b)]))
        remote->through_snapshots.push_back({s, b, host->serial[static_cast<std::size_t>(b)], clock.current});
    }
  }

  /// Write-through: turns the publications whose step completed into puts from GPU memory, if each is still
  /// the publication it was (a block evicted since was offloaded, and goes to the store from the host tier;
  /// a slot reused since holds another snapshot). Publications of steps still running wait.
  void write_through() noexcept {
    if constexpr (has_remote) {
      remote_tier_state& rs = *remote;
      auto done = [&](const write_through_entry& e) { return e.epoch < clock.safe_before; };
      std::size_t kept = 0;
      for (const write_through_entry& e : rs.through_blocks) {
        if (!done(e)) {
          rs.through_blocks[kept++] = e;
          continue;
        }
        const auto i = static_cast<std::size_t>(e.unit);
        if (host->serial[i] != e.serial || e.serial == 0 || rs.gpu_in_store[i] != 0 || is_zero(rs.gpu_key[i])) continue;
        const block_node& n = blocks.node(e.block);
        const std::size_t begin = rs.header_bytes.size();
        append_remote_header(rs.header_bytes, remote_item::block, n.kind, (n.depth + 1) * geometry.block_size,
                             rs.gpu_key[i], rs.gpu_parent[i], blocks.pool().tokens(e.block));
        rs.puts.push_back({remote_item::block, static_cast<std::uint32_t>(e.unit), rs.gpu_key[i], {}, true});
        rs.put_headers.emplace_back(begin, rs.header_bytes.size() - begin);
        rs.gpu_in_store[i] = 1;
        ++metrics.remote_puts;
        metrics.remote_bytes_put += geometry.bytes_per_kv_block;
      }
      rs.through_blocks.resize(kept);
      if constexpr (restores) {
        kept = 0;
        for (const write_through_entry& e : rs.through_snapshots) {
          if (!done(e)) {
            rs.through_snapshots[kept++] = e;
            continue;
          }
          const auto s = static_cast<slot_id>(e.unit);
          const auto i = static_cast<std::size_t>(e.unit);
          const slot_node& n = slots.node(s);
          const auto b = static_cast<std::size_t>(e.block);
          if (n.state != slot_state::published || n.block != e.block || n.kind != exactness::prefill_exact ||
              rs.slot_epoch[i] != e.epoch || rs.slot_in_store[i] != 0 || host->serial[b] != e.serial || e.serial == 0 ||
              is_zero(rs.gpu_key[b]))
            continue;
          const std::uint32_t position = (blocks.node(e.block).depth + 1) * geometry.block_size;
          const content_key key = rs.keyer->snapshot(rs.gpu_key[b], position);
          if (is_zero(key)) continue;
          const std::size_t begin = rs.header_bytes.size();
          append_remote_header(rs.header_bytes, remote_item::snapshot, exactness::prefill_exact, position, key,
                               rs.gpu_key[b], {});
          rs.puts.push_back({remote_item::snapshot, static_cast<std::uint32_t>(e.unit), key, {}, true});
          rs.put_headers.emplace_back(begin, rs.header_bytes.size() - begin);
          rs.slot_in_store[i] = 1;
          ++metrics.remote_puts;
          metrics.remote_bytes_put += geometry.bytes_per_snapshot;
        }
        rs.through_snapshots.resize(kept);
      }
    }
  }

  /// The moves planned since the previous call; the spans stay valid until the next call.
  transfer_plan take_transfers() noexcept {
    if constexpr (has_host) {
      host_tier_state& h = *host;
      h.taken_kv_offload.swap(h.kv_offload);
      h.taken_snapshot_offload.swap(h.snapshot_offload);
      h.taken_kv_onboard.swap(h.kv_onboard);
      h.kv_offload.clear();
      h.snapshot_offload.clear();
      h.kv_onboard.clear();
      transfer_plan t{h.taken_kv_offload, h.taken_snapshot_offload, h.taken_kv_onboard};
      if constexpr (has_remote) {
        remote_tier_state& r = *remote;
        write_through();
        r.taken_puts.swap(r.puts);
        r.taken_header_bytes.swap(r.header_bytes);
        for (std::size_t k = 0; k < r.taken_puts.size(); ++k)
          r.taken_puts[k].header = std::span<const std::byte>(r.taken_header_bytes).subspan(r.put_headers[k].first,
                                                                                           r.put_headers[k].second);
        r.puts.clear();
        r.header_bytes.clear();
        r.put_headers.clear();
        t.remote_puts = r.taken_puts;
      }
      return t;
    } else {
      return {};
    }
  }

  // ------------------------------------------------------------------------------------------------------
  // remote tier: prefetch into reserved host units, verified when reported

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
  /// Errors: as `admit`'s checks of the prompt (`invalid_argument`, `out_of_range`).
  result<fetch_plan> prefetch(std::span<const token_id> prompt, const extra_keys& keys,
                              const std::span<const content_key>* in_store = nullptr) {
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
    if constexpr (!has_remote) {
      return fetch_plan{};
    } else {
      remote_tier_state& rs = *remote;
      rs.present.clear();
      if (in_store != nullptr) {
        rs.present.assign(in_store->begin(), in_store->end());
        std::sort(rs.present.begin(), rs.present.end());
      }
      return plan_remote(prompt, keys, in_store != nullptr ? remote_walk::present : remote_walk::all);
    }
  }

  /// The content keys a `prefetch` of `prompt` could ask the store for now, blocks in chain order then
  /// snapshots deepest first, with nothing reserved and nothing changed. An engine asks the store which of
  /// them it has (one pipelined round trip: `redis_store::probe`) and passes those to `prefetch`, so that
  /// a prompt's new content, which no engine computed yet, reserves no host unit. Lists at most as many
  /// blocks as the host tier has KV units past the prompt's local match (no more could be fetched).
  /// Complexity: as `prefetch`'s. Errors: as `prefetch`'s.
  result<probe_plan> probe(std::span<const token_id> prompt, const extra_keys& keys) {
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
    if constexpr (!has_remote) {
      return probe_plan{};
    } else {
      if (auto walked = plan_remote(prompt, keys, remote_walk::probe); !walked) return walked.error();
      return probe_plan{remote->probes};
    }
  }

  /// Reports the fetch into `unit` of `item`: `header` as the store returned it, empty for a miss (absent,
  /// corrupt, timed out). A header equal to the one `prefetch` expected makes the unit a host-tier block or
  /// snapshot (its bytes already written by the engine); anything else frees it, counted as rejected.
  /// Errors: `invalid_argument` when no fetch into that unit is pending (nothing changes).
  result<void> fetched(remote_item item, std::uint32_t unit, std::span<const std::byte> header) {
    if constexpr (!has_remote) {
      return errc::invalid_argument;
    } else {
      remote_tier_state& rs = *remote;
      host_ledger& ledger = host->ledger;
      const bool block = item == remote_item::block;
      std::vector<pending_fetch>& pending = block ? rs.kv_pending : rs.snapshot_pending;
      if ((item != remote_item::block && item != remote_item::snapshot) || unit >= pending.size() || !pending[unit].active)
        return errc::invalid_argument;
      pending_fetch& p = pending[unit];
      p.active = false;
      const bool ok = !header.empty() && header.size() == p.header.size() &&
                      std::memcmp(header.data(), p.header.data(), header.size()) == 0;
      if (!ok) {
        ++(header.empty() ? metrics.remote_misses : metrics.remote_rejected);
        if (block) ledger.release_reserved_block(unit);
        else ledger.release_reserved_snapshot(unit);
        return {};
      }
      ++metrics.remote_hits;
      if (block) {
        ledger.commit_reserved_block(unit, {.key = p.chain_key,
                                            .serial = p.serial,
                                            .parent_serial = p.parent_serial,
                                            .depth = p.depth,
                                            .fill = geometry.block_size,
                                            .kind = exactness::prefill_exact,
                                            .tokens = p.tokens,
                                            .extras = &p.extras});
        rs.host_key[unit] = p.key;
        rs.host_parent[unit] = p.parent;
        rs.host_fetched[unit] = 1;
        rs.host_from_store[unit] = 1;
        metrics.remote_bytes_fetched += geometry.bytes_per_kv_block;
      } else {
        ledger.commit_reserved_snapshot(unit, p.serial, exactness::prefill_exact);
        rs.snapshot_key[unit] = p.key;
        rs.snapshot_block[unit] = p.parent;
        rs.snapshot_position[unit] = p.depth;
        rs.snapshot_fetched[unit] = 1;
        metrics.remote_bytes_fetched += geometry.bytes_per_snapshot;
      }
      return {};
    }
  }

  /// What `prefetch` and `probe` walk: the chain of prefill-exact blocks past the prompt's local match and the
  /// snapshot candidates on the alignment grid past its local restore point.
  enum class remote_walk : std::uint8_t {
    probe,   ///< list every key (`remote->probes`), reserve nothing
    all,     ///< fetch every candidate
    present, ///< fetch the candidates in `remote->present` (sorted)
  };

  result<fetch_plan> plan_remote(std::span<const token_id> prompt, const extra_keys& keys, remote_walk walk) {
    return with_block_size(geometry.block_size, [&](auto b) -> result<fetch_plan> {
      constexpr std::uint32_t B = decltype(b)::value;
      remote_tier_state& rs = *remote;
      host_ledger& ledger = host->ledger;
      const bool probing = walk == remote_walk::probe;
      auto in_store = [&](const content_key& k) {
        return walk != remote_walk::present || std::binary_search(rs.present.begin(), rs.present.end(), k);
      };
      if (probing) rs.probes.clear();
      else rs.fetches.clear();
      sequence_record& r = rs.scratch;
      r.reset(0);
      r.root = hasher.root(keys);
      r.extras = stored_extra_keys::from(keys);
      const std::uint32_t on_gpu = lookup<B>(r, prompt);
      const std::uint32_t matched = on_gpu + host_hits();
      const std::uint32_t local_usable = choose_restore<B>(r, matched, prompt).usable;
      auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
      // Fetched blocks need a host unit each, so a walk past the matched blocks plus every host KV unit could
      // never be fetched: bounding it there bounds the work and memory of a call (keys hashed, the key memo,
      // the keys listed) by the tiers' sizes, whatever the prompt's length.
      limit = static_cast<std::uint32_t>(std::min<std::uint64_t>(limit, std::uint64_t{matched} + ledger.blocks().size()));
      if constexpr (restores) {
        // Recurrent layers use KV only up to the restored snapshot, and the store holds snapshots on the
        // alignment grid only: blocks past the prompt's last grid position would never be onboarded.
        limit = std::min(limit, static_cast<std::uint32_t>((prompt.size() - 1) / geometry.alignment * geometry.alignment / B));
      }
      auto block_tokens = [&](std::uint32_t i) { return prompt.subspan(std::size_t{i} * B).template first<B>(); };

      // The chain the fetched blocks continue: keys, serial, in-process key of the last matched block.
      content_key key = rs.keyer->root(keys);
      std::uint64_t serial = 0;
      block_key chain = r.root;
      bool chain_ok = true;
      if (matched != 0) {
        const std::uint32_t i = matched - 1;
        chain_ok = matched_kind(r, i) == exactness::prefill_exact;
        serial = matched_serial(r, i);
        if (i < on_gpu) {
          key = rs.gpu_key[static_cast<std::size_t>(r.blocks[i])];
          chain = blocks.node(r.blocks[i]).key;
        } else {
          key = rs.host_key[host->hits[i - on_gpu]];
          chain = ledger.block(host->hits[i - on_gpu]).key;
        }
        chain_ok = chain_ok && serial != 0;
      }
      const content_key parent_of_walk = key;

      // The content keys of blocks matched + 0, 1, ...: as far as the chain goes (and, given what the
      // store has, up to the first block it lacks).
      std::vector<content_key>& walked = rs.walked;
      walked.clear();
      rs.memo_parents.resize(limit);
      rs.memo_keys.resize(limit);
      rs.memo_tokens.resize(std::size_t{limit} * B);
      auto chain_key = [&](std::uint32_t i, const content_key& parent) {
        const std::span<const token_id> tokens = block_tokens(i);
        token_id* remembered = rs.memo_tokens.data() + std::size_t{i} * B;
        if (rs.memo_parents[i] == parent && !is_zero(rs.memo_keys[i]) && std::equal(tokens.begin(), tokens.end(), remembered))
          return rs.memo_keys[i];
        const content_key k = rs.keyer->chain(parent, tokens);
        rs.memo_parents[i] = parent;
        rs.memo_keys[i] = k;
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
      std::vector<snapshot_candidate>& candidates = rs.candidates;
      candidates.clear();
      if constexpr (restores) {
        const std::uint32_t A = geometry.alignment;
        const std::uint32_t reach = (matched + static_cast<std::uint32_t>(walked.size())) * B;
        for (std::uint32_t p = reach / A * A; p > local_usable && p != 0; p -= A) {
          const std::uint32_t i = p / B - 1;
          content_key block_key{};
          if (i >= matched) {
            block_key = walked[i - matched];
          } else if (matched_kind(r, i) == exactness::prefill_exact) {
            const std::uint64_t block_serial = matched_serial(r, i);
            if (block_serial == 0 || ledger.find_snapshot(block_serial, exactness::prefill_exact) != no_host_unit)
              continue;
            block_key = i < on_gpu ? rs.gpu_key[static_cast<std::size_t>(r.blocks[i])] : rs.host_key[host->hits[i - on_gpu]];
          }
          if (is_zero(block_key)) continue;
          const content_key snapshot_key = rs.keyer->snapshot(block_key, p);
          if (is_zero(snapshot_key) || !in_store(snapshot_key)) continue;
          candidates.push_back({p, block_key, snapshot_key});
        }
      }

      if (probing) {
        for (const content_key& k : walked) rs.probes.push_back({remote_item::block, k});
        for (const snapshot_candidate& c : candidates) rs.probes.push_back({remote_item::snapshot, c.key});
        return fetch_plan{};
      }

      // Blocks to fetch: all walked; given what the store has, a model with recurrent layers fetches them only
      // up to its deepest snapshot (KV past the restore point is recomputed).
      auto wanted = static_cast<std::uint32_t>(walked.size());
      if constexpr (restores) {
        if (walk == remote_walk::present)
          wanted = candidates.empty() ? 0 : std::min(wanted, candidates.front().position / B > matched
                                                                 ? candidates.front().position / B - matched
                                                                 : 0);
      }
      if (wanted == 0 && candidates.empty()) return fetch_plan{rs.fetches, 0}; // nothing to fetch, nothing touched
      // The matched host blocks stay while units are reserved (the fetched chain hangs under them).
      for (const host_unit u : host->hits) ledger.hold_block(u);
      // A fetch may miss: it may push a host unit down to the store (written back, or there already), never
      // drop one the store cannot hold (a turn end, a decode-filled or partial block).
      auto store_can_hold_block = [&](host_unit u) noexcept {
        const host_block_node& n = ledger.block(u);
        return rs.host_fetched[u] != 0 ||
               (!is_zero(rs.host_key[u]) && n.kind == exactness::prefill_exact && n.fill == geometry.block_size);
      };
      auto store_can_hold_snapshot = [&](host_unit u) noexcept {
        return rs.snapshot_fetched[u] != 0 ||
               (!is_zero(rs.snapshot_key[u]) && ledger.snapshot(u).kind == exactness::prefill_exact);
      };
      // The serial of every fetched block, for the snapshots that hang under it.
      std::vector<std::uint64_t>& serials = rs.walked_serials;
      serials.clear();
      key = parent_of_walk;
      for (std::uint32_t k = 0; k < wanted; ++k) {
        const std::uint32_t i = matched + k;
        const content_key next = walked[k];
        const host_unit u = ledger.reserve_block(store_can_hold_block);
        if (u == no_host_unit) break;
        pending_fetch& p = rs.kv_pending[u];
        p.active = true;
        p.key = next;
        p.parent = key;
        p.chain_key = hasher.chain(chain, block_tokens(i));
        p.serial = host->draw_serial();
        p.parent_serial = serial;
        p.depth = i;
        p.tokens.assign(block_tokens(i).begin(), block_tokens(i).end());
        p.extras = r.extras;
        p.header.clear();
        append_remote_header(p.header, remote_item::block, exactness::prefill_exact, (i + 1) * B, next, key,
                             block_tokens(i));
        rs.fetches.push_back({remote_item::block, u, next, static_cast<std::uint32_t>(p.header.size())});
        serials.push_back(p.serial);
        key = next;
        chain = p.chain_key;
        serial = p.serial;
      }
      const auto fetched_blocks = static_cast<std::uint32_t>(serials.size());
      if constexpr (restores) {
        const std::uint32_t reach = (matched + fetched_blocks) * B;
        std::uint32_t asked = 0;
        for (const snapshot_candidate& c : candidates) {
          if (c.position > reach) continue;
          if (asked == options.remote_snapshot_candidates) break;
          const std::uint32_t i = c.position / B - 1;
          const std::uint64_t block_serial = i >= matched ? serials[i - matched] : matched_serial(r, i);
          const host_unit u = ledger.reserve_snapshot(store_can_hold_snapshot);
          if (u == no_host_unit) break;
          pending_fetch& f = rs.snapshot_pending[u];
          f.active = true;
          f.key = c.key;
          f.parent = c.block;
          f.serial = block_serial;
          f.depth = c.position;
          f.header.clear();
          append_remote_header(f.header, remote_item::snapshot, exactness::prefill_exact, c.position, c.key, c.block, {});
          rs.fetches.push_back({remote_item::snapshot, u, c.key, static_cast<std::uint32_t>(f.header.size())});
          ++asked;
        }
      }
      for (const host_unit u : host->hits) ledger.unhold_block(u);
      metrics.remote_fetches += rs.fetches.size();
      return fetch_plan{rs.fetches, fetched_blocks};
    });
  }

  /// Matched position i of a prompt being admitted: GPU block r.blocks[i], then the host hits.
  exactness matched_kind(const sequence_record& r, std::uint32_t i) const noexcept {
    if (i < r.blocks.size()) return blocks.node(r.blocks[i]).kind;
    if constexpr (has_host) return host->ledger.block(host->hits[i - r.blocks.size()]).kind;
    return exactness::prefill_exact;
  }
  std::uint64_t matched_serial(const sequence_record& r, std::uint32_t i) const noexcept {
    if constexpr (has_host) {
      if (i < r.blocks.size()) return host->serial[static_cast<std::size_t>(r.blocks[i])];
      return host->ledger.block(host->hits[i - r.blocks.size()]).serial;
    }
    return 0;
  }
  std::uint32_t host_hits() const noexcept {
    if constexpr (has_host) return static_cast<std::uint32_t>(host->hits.size());
    return 0;
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
    if constexpr (has_host) host->ledger.advance(clock.safe_before);
    if constexpr (restores) {
      slots.advance(clock.safe_before);
      slots.expire(options.snapshot_ttl_steps);
    }
    return {};
  }

  // ------------------------------------------------------------------------------------------------------
  // admit: check, look up (no change), choose the restore (no change), apply

  /// The checks of a prompt that `admit`, `prefetch` and `probe` share: not empty, a multimodal digest the
  /// cache can store (`invalid_argument`), not longer than positions can number (`out_of_range`).
  errc check_prompt(std::span<const token_id> prompt, const extra_keys& keys) const noexcept {
    if (prompt.empty() || keys.multimodal_digest.size() > max_multimodal_digest_bytes) return errc::invalid_argument;
    if (prompt.size() > max_sequence_tokens(geometry.block_size)) return errc::out_of_range;
    return errc{};
  }

  result<admit_plan> admit(seq_id s, std::span<const token_id> prompt, const extra_keys& keys,
                           std::span<const std::uint32_t> offsets) {
    if (sequences.find(s) != nullptr) return errc::duplicate_sequence;
    if (const errc e = check_prompt(prompt, keys); e != errc{}) return e;
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
      if constexpr (has_remote) r.content_root = remote->keyer->root(keys);
      const std::uint32_t published = lookup<B>(r, prompt);
      // Past the published blocks, those that sequences admitted in this step compute (share_in_step), or
      // those the host tier holds (`policy::host_tier`; the two never combine).
      std::uint32_t matched =
          share_in_step() ? in_step.template lookup<B>(r, prompt, blocks, hasher) : published + host_hits();
      const restore_choice choice = choose_restore<B>(r, matched, prompt);
      if constexpr (restores && accepts_continuation) matched = shareable<B>(r, matched, choice);
      if constexpr (has_host && restores) {
        // Past the restore point the prompt recomputes its tokens: bringing their KV back moves bytes for
        // nothing, so host blocks are onboarded only up to it.
        if (!choice.has_tail()) matched = std::min(matched, std::max(published, choice.usable / B));
      }
      if constexpr (has_host) host->hits.resize(matched > published ? matched - published : 0);
      if constexpr ((restores && accepts_continuation) || has_host) {
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

  /// The longest verified chain of cached full blocks for `prompt` (at most floor((L - 1) / B) blocks, so
  /// at least one token is computed), appended to `r.blocks`: prefill-computed blocks, then (under a policy
  /// that accepts it) decode-filled ones. Changes nothing.
  template <std::uint32_t B>
  std::uint32_t lookup(sequence_record& r, std::span<const token_id> prompt) noexcept {
    if constexpr (has_host) host->hits.clear();
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    auto prompt_block = [&](std::uint32_t i) { return prompt.subspan(std::size_t{i} * B).template first<B>(); };
    block_id parent = no_block;
    exactness want = exactness::prefill_exact;
    // One key ahead: block i + 1's bucket loads while block i is verified.
    block_key key = limit != 0 ? hasher.chain(r.root, prompt_block(0)) : block_key{};
    for (std::uint32_t i = 0; i < limit; ++i) {
      block_key next{};
      if (i + 1 < limit) {
        next = hasher.chain(key, prompt_block(i + 1));
        blocks.prefetch(next);
      }
      block_node* hit = blocks.find({key, parent, prompt_block(i), &r.extras, want});
      [[maybe_unused]] const exactness wanted = want; // the host tier is searched from the same class
      if (hit == nullptr && accepts_continuation && want == exactness::prefill_exact) {
        // Past the prefill-computed prefix, a decode-filled continuation (whose descendants are all so).
        want = exactness::decode_continuation;
        hit = blocks.find({key, parent, prompt_block(i), &r.extras, want});
      }
      if (hit == nullptr) {
        if constexpr (has_host) lookup_host<B>(r, prompt, i, key, wanted);
        break;
      }
      parent = blocks.id_of(*hit);
      r.blocks.push_back(parent);
      key = next;
    }
    return static_cast<std::uint32_t>(r.blocks.size());
  }

  /// `policy::host_tier`: continues a lookup that stopped at block `i` (key `key`) in GPU memory into the
  /// host tier, verified like a GPU hit with the parent's serial for its id (host_ledger.hpp), into
  /// `host->hits`. Changes nothing.
  template <std::uint32_t B>
  void lookup_host(const sequence_record& r, std::span<const token_id> prompt, std::uint32_t i, block_key key,
                   exactness want) noexcept {
    host_tier_state& h = *host;
    const auto limit = static_cast<std::uint32_t>((prompt.size() - 1) / B);
    std::uint64_t parent_serial = i == 0 ? 0 : h.serial[static_cast<std::size_t>(r.blocks[i - 1])];
    if (i != 0 && parent_serial == 0) return;
    for (; i < limit; ++i) {
      const auto tokens = prompt.subspan(std::size_t{i} * B).template first<B>();
      host_unit u = h.ledger.find_block(key, parent_serial, tokens, r.extras, want);
      if (u == no_host_unit && accepts_continuation && want == exactness::prefill_exact) {
        want = exactness::decode_continuation;
        u = h.ledger.find_block(key, parent_serial, tokens, r.extras, want);
      }
      if (u == no_host_unit) return;
      h.hits.push_back(u);
      parent_serial = h.ledger.block(u).serial;
      if (i + 1 < limit) key = hasher.chain(key, prompt.subspan(std::size_t{i + 1} * B).template first<B>());
    }
  }

  struct restore_choice {
    std::uint32_t usable = 0;
    slot_id slot = no_slot;   ///< a GPU snapshot slot, or a host snapshot unit when `slot_on_host`
    bool slot_on_host = false;
    exactness kind = exactness::prefill_exact; ///< of the snapshot restored
    block_id tail = no_block; ///< a kept partial block to copy (its snapshot sits at `usable`)
    std::uint32_t host_tail = no_host_unit; ///< or one to onboard from the host tier
    bool has_tail() const noexcept { return tail != no_block || host_tail != no_host_unit; }
  };

  /// The usable skip: the largest u <= KV match with a snapshot at exactly u the accept policy allows
  /// (`snapshot_restore`), the whole match (`block_sharing`), or nothing (`memory_only`). Under a policy
  /// that accepts decode continuations, a partial block kept at a turn's end under the last matched block
  /// extends the match when the prompt continues its tokens: its snapshot is the deepest. With a host tier
  /// the match runs on through the host hits, and a snapshot or partial block may come from either tier
  /// (the GPU's first at equal depth). Changes nothing.
  template <std::uint32_t B>
  restore_choice choose_restore(const sequence_record& r, std::uint32_t matched,
                                std::span<const token_id> prompt) noexcept {
    if constexpr (std::is_same_v<Policy, policy::block_sharing>) {
      return restore_choice{matched * B, no_slot, false, exactness::prefill_exact, no_block, no_host_unit};
    } else if constexpr (restores) {
      const auto on_gpu = static_cast<std::uint32_t>(r.blocks.size());
      if constexpr (accepts_continuation && traits::capture::at_turn_end) {
        const std::size_t begin = std::size_t{matched} * B;
        const std::size_t room = std::min<std::size_t>(B - 1, prompt.size() - 1 - begin); // keep one token
        if (room != 0) {
          const auto tail_tokens = prompt.subspan(begin, room);
          restore_choice best{};
          if (matched <= on_gpu) {
            const block_id parent = matched == 0 ? no_block : r.blocks[matched - 1];
            const block_key& start = matched == 0 ? r.root : blocks.node(parent).key;
            blocks.for_each_tail(start, parent, r.extras, tail_tokens, [&](block_node& n) {
              if (n.fill <= best.usable) return;
              if (const slot_id s = slots.usable(n, true); s != no_slot) {
                best = restore_choice{n.fill, s, false, slots.node(s).kind, blocks.id_of(n), no_host_unit};
              } else if constexpr (has_host) {
                const host_unit u = host->ledger.find_snapshot(host->serial[static_cast<std::size_t>(blocks.id_of(n))], exactness::decode_continuation);
                if (u != no_host_unit)
                  best = restore_choice{n.fill, static_cast<slot_id>(u), true, exactness::decode_continuation, blocks.id_of(n),
                                        no_host_unit};
              }
            });
          }
          if constexpr (has_host) {
            const std::uint64_t parent_serial = matched == 0 ? 0 : matched_serial(r, matched - 1);
            const block_key start = matched == 0 ? r.root
                                    : matched <= on_gpu ? blocks.node(r.blocks[matched - 1]).key
                                                        : host->ledger.block(host->hits[matched - 1 - on_gpu]).key;
            if (matched == 0 || parent_serial != 0) {
              host->ledger.for_each_tail(start, parent_serial, r.extras, tail_tokens, [&](host_unit t) {
                const host_block_node& n = host->ledger.block(t);
                if (n.fill <= best.usable) return;
                const host_unit u = host->ledger.find_snapshot(n.serial, exactness::decode_continuation);
                if (u != no_host_unit)
                  best = restore_choice{n.fill, static_cast<slot_id>(u), true, exactness::decode_continuation, no_block, t};
              });
            }
          }
          if (best.has_tail()) {
            best.usable += static_cast<std::uint32_t>(begin);
            return best;
          }
        }
      }
      for (std::uint32_t i = matched; i-- > 0;) {
        const bool on_grid = (i + 1) * B % geometry.alignment == 0;
        if (i < on_gpu) {
          const block_node& n = blocks.node(r.blocks[i]);
          // Off the alignment grid only an end-of-turn (decode_continuation) snapshot can sit.
          if (on_grid || n.snapshot[static_cast<int>(exactness::decode_continuation)] != no_slot) {
            if (const slot_id s = slots.usable(n, accepts_continuation); s != no_slot)
              return restore_choice{(i + 1) * B, s, false, slots.node(s).kind, no_block, no_host_unit};
          }
        }
        if constexpr (has_host) {
          const std::uint64_t serial = matched_serial(r, i);
          if (serial == 0) continue;
          for (const exactness k : {exactness::prefill_exact, exactness::decode_continuation}) {
            if (k == exactness::decode_continuation && !accepts_continuation) break;
            if (k == exactness::prefill_exact && !on_grid) continue;
            if (const host_unit u = host->ledger.find_snapshot(serial, k); u != no_host_unit)
              return restore_choice{(i + 1) * B, static_cast<slot_id>(u), true, k, no_block, no_host_unit};
          }
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
    if (choice.has_tail()) return matched; // the restore point is past every matched block
    const std::uint32_t restored = choice.usable / B; // a block end
    if (choice.slot != no_slot && choice.kind == exactness::decode_continuation) return restored;
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
    const auto on_gpu = static_cast<std::uint32_t>(r.blocks.size());
    for (std::uint32_t i = 0; i < on_gpu; ++i) blocks.reference(blocks.node(r.blocks[i]));
    if (choice.tail != no_block) { // held until the copy has run (first commit)
      block_node& tail = blocks.node(choice.tail);
      blocks.reference(tail);
      r.copy_src = choice.tail;
      if (tail.kind != exactness::prefill_exact) r.exact_until = std::min(r.exact_until, matched * B);
    }
    if constexpr (has_host) onboard<B>(r, matched, choice);
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
    if (choice.tail != no_block) {
      plan.copy_src = choice.tail;
      plan.copy_dst = r.blocks[matched];
      ++metrics.partial_blocks_copied;
    } else if constexpr (has_host) {
      if (choice.host_tail != no_host_unit) { // copied by the step's transfers, before the prefill
        host->kv_onboard.push_back({choice.host_tail, static_cast<std::uint32_t>(r.blocks[matched])});
        ++metrics.partial_blocks_copied;
        ++metrics.host_tails_onboarded;
        metrics.host_bytes_onboarded += geometry.bytes_per_kv_block;
      }
    }
    plan.usable_tokens = choice.usable;
    plan.shared_blocks = matched;
    // Reusing a decode_continuation snapshot, or a decode_continuation block before the skip, makes what
    // follows a continuation of that session rather than a cold prefill.
    const bool restores_continuation = choice.slot != no_slot && choice.kind == exactness::decode_continuation;
    if (restores_continuation) r.exact_until = std::min(r.exact_until, choice.usable);
    if constexpr (restores) {
      plan.tokens_lost_to_missing_snapshot = kv_matched - choice.usable;
      if (choice.slot_on_host) { // held since `onboard`
        r.restore_slot = choice.slot;
        r.restore_on_host = true;
        if constexpr (has_host) {
          if (restores_continuation) {
            r.host_turn_restore = static_cast<std::uint32_t>(choice.slot);
            r.host_turn_serial = host->ledger.snapshot(static_cast<host_unit>(choice.slot)).serial;
          }
        }
        plan.restore_slot = choice.slot;
        plan.restore_from_host = true;
        ++metrics.snapshot_hits;
        ++metrics.host_snapshot_hits;
        metrics.host_bytes_onboarded += geometry.bytes_per_snapshot;
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
        c.diverges = matched != 0 && choice.tail == no_block && blocks.node(r.blocks[matched - 1]).cached_children != 0;
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

  /// `policy::host_tier`, in `apply`: holds what the prompt restores from the host tier (until its first
  /// commit), then brings its host hits back: each gets a fresh GPU block, published at once under its
  /// serial (the block table shares it like a cached one) and filled by the step's transfers. Taking the
  /// fresh blocks may offload others into the host tier, which never reuses a held unit.
  template <std::uint32_t B>
  void onboard(sequence_record& r, std::uint32_t matched, const restore_choice& choice) noexcept {
    host_tier_state& h = *host;
    if (choice.slot_on_host) h.ledger.hold_snapshot(static_cast<host_unit>(choice.slot));
    if (choice.host_tail != no_host_unit) {
      h.ledger.hold_block(choice.host_tail);
      r.host_copy_src = choice.host_tail;
      if (h.ledger.block(choice.host_tail).kind != exactness::prefill_exact)
        r.exact_until = std::min(r.exact_until, matched * B);
    }
    for (const host_unit u : h.hits) h.ledger.hold_block(u);
    for (const host_unit u : h.hits) {
      const host_block_node& n = h.ledger.block(u);
      const auto i = static_cast<std::uint32_t>(r.blocks.size());
      const block_id parent = i == 0 ? no_block : r.blocks[i - 1];
      const block_id b = blocks.take(on_evict());
      const auto tokens = blocks.pool().template tokens_of<B>(b);
      std::copy_n(h.ledger.tokens(u).data(), B, tokens.data());
      // The GPU lookup found no equal block and nothing was published since, so `b` itself is published.
      blocks.publish(b, {n.key, parent, tokens, &r.extras, n.kind}, i, r.extras);
      h.serial[static_cast<std::size_t>(b)] = n.serial;
      h.twin[static_cast<std::size_t>(b)] = u;
      if constexpr (has_remote) {
        remote->gpu_key[static_cast<std::size_t>(b)] = remote->host_key[u];
        remote->gpu_parent[static_cast<std::size_t>(b)] = remote->host_parent[u];
        remote->gpu_in_store[static_cast<std::size_t>(b)] = remote->host_fetched[u];
        metrics.remote_blocks_onboarded += remote->host_from_store[u];
      }
      h.kv_onboard.push_back({u, static_cast<std::uint32_t>(b)});
      r.blocks.push_back(b);
      ++metrics.host_blocks_onboarded;
      metrics.host_bytes_onboarded += geometry.bytes_per_kv_block;
    }
    // Read by this step's transfers: reusable once the step completes.
    for (const host_unit u : h.hits) h.ledger.unhold_block(u);
  }

  policy::capture_context context_for(std::uint32_t usable, std::uint32_t kv_matched, std::uint32_t length,
                                          std::span<const std::uint32_t> offsets) const noexcept {
    return {.usable = usable,
            .kv_matched = kv_matched,
            .length = length,
            .alignment = geometry.alignment,
            .block_size = geometry.block_size,
            .interval = options.capture_interval,
            .offsets = offsets};
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
      resolve_captures(*r, n);
      unhold_restore(*r);
    }
    return {};
  }

  /// Publishes the captures at positions <= n that the engine wrote (marked in `r.written`) and frees the
  /// others' slots. Complexity: O(captures).
  void resolve_captures(sequence_record& r, std::uint32_t n) noexcept {
    const std::uint32_t B = geometry.block_size;
    std::size_t kept = 0;
    for (std::size_t k = 0; k < r.captures.size(); ++k) {
      const capture_point c = r.captures[k];
      if (c.position > n) {
        r.captures[kept++] = c;
        continue;
      }
      slot_node& slot = slots.node(c.slot);
      const auto p = static_cast<std::uint32_t>(c.position);
      const std::uint32_t i = p / B - 1;
      const exactness kind = capture_kind(r, p, geometry.alignment);
      block_node* b = i < r.chain.size() ? &blocks.node(r.chain[i]) : nullptr;
      if (r.written[k] != 0 && b != nullptr && p <= r.foreign_from && b->snapshot[static_cast<int>(kind)] == no_slot &&
          b->snapshot[static_cast<int>(exactness::prefill_exact)] == no_slot) {
        const bool checkpoint = p > r.prompt; // planned by `extend`
        slots.attach(slot, *b, kind, 0, checkpoint);
        published_snapshot(c.slot, blocks.id_of(*b), kind);
        ++metrics.captures_written;
        if (checkpoint) {
          r.checkpoints.emplace_back(c.slot, blocks.id_of(*b));
          if (r.checkpoints.size() > options.decode_checkpoints_per_sequence) {
            slots.discard(r.checkpoints.front().first, r.checkpoints.front().second);
            r.checkpoints.erase(r.checkpoints.begin());
          }
        }
      } else {
        ++metrics.captures_refused;
        slots.release(slot);
      }
    }
    r.captures.resize(kept);
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
    block_key key = hasher.chain(i == 0 ? r.root : blocks.node(parent).key, pool.template tokens_of<B>(r.blocks[i]));
    for (; i < full; ++i) {
      const block_id b = r.blocks[i];
      block_key next{};
      if (i + 1 < full) {
        next = hasher.chain(key, pool.template tokens_of<B>(r.blocks[i + 1]));
        blocks.prefetch(next);
      }
      if (blocks.node(b).state == block_state::cached) { // published by a fork sibling
        parent = b;
      } else {
        // An equal block published first (two equal prompts in flight) is referenced and continues the
        // chain; ours stays private (the engine's table points at it).
        const exactness kind = r.kv_kind(std::uint64_t{i + 1} * B);
        parent = blocks.publish(b, {key, parent, pool.template tokens_of<B>(b), &r.extras, kind}, i, r.extras);
        if (parent == b) published(b, r);
        // A prefill-exact duplicate holds the same bits; a decode_continuation one may have been computed
        // along another path (decode steps against a prefill, say).
        if (parent != b && kind == exactness::decode_continuation) r.foreign_from = std::min(r.foreign_from, i * B);
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
        if (!tokens.empty()) plan_checkpoint(*r, plan); // an empty extend reaches no new position
      }
    }
    return plan;
  }

  /// `policy::decode_checkpoints`: a capture at the sequence's new length when it is a multiple of the
  /// interval, not already planned, within the per-path cap and when a slot is reusable. Complexity: O(1),
  /// plus O(chain) with a per-path cap.
  void plan_checkpoint(sequence_record& r, extend_plan& plan) noexcept {
    const std::uint32_t interval = options.decode_checkpoint_interval;
    const std::uint32_t p = r.tokens;
    if (interval == 0 || p % interval != 0 || p <= r.computed) return;
    if (!r.captures.empty() && r.captures.back().position >= p) return; // pending captures are in order
    if (options.max_snapshots_per_path != 0) {
      if (snapshots_on_chain(r, blocks) >= options.max_snapshots_per_path) {
        ++metrics.captures_refused;
        return;
      }
    }
    slot_node* n = slots.take();
    if (n == nullptr) {
      ++metrics.captures_refused;
      return;
    }
    r.captures.push_back({.sequence = 0, .position = p, .slot = slots.id_of(*n)}); // after every earlier one
    ++metrics.captures_planned;
    plan.captures = std::span<const capture_point>(r.captures).last(1);
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
      b.blocks.push_back(copy);
      plan.copy_src = from;
      plan.copy_dst = copy;
    }
    b.root = a->root;
    b.extras = a->extras;
    b.content_root = a->content_root;
    b.tokens = a->tokens;
    b.computed = a->computed;
    b.exact_until = a->exact_until;
    b.prompt = a->prompt;
    b.foreign_from = a->foreign_from;
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
    if (p > r.foreign_from) { // the chain's KV is not all this session's: a restore would mix the two
      ++metrics.captures_refused;
      return;
    }
    block_node* target = nullptr;
    if (fill == 0) {
      target = &blocks.node(r.chain[k - 1]);
      if (target->snapshot[0] != no_slot || target->snapshot[1] != no_slot) return;
    } else {
      if (k != r.chain.size() || blocks.node(r.blocks[k]).state != block_state::owned) return;
      const block_id parent = k == 0 ? no_block : r.chain[k - 1];
      const block_key start = k == 0 ? r.root : blocks.node(parent).key;
      bool equal_kept = false;
      blocks.for_each_tail(start, parent, r.extras, blocks.pool().tokens(r.blocks[k]).first(fill),
                           [&](block_node& n) { equal_kept |= n.fill == fill; });
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
      published(r.blocks[k], r);
      target = &blocks.node(r.blocks[k]);
    }
    // Written by the engine in the current step: restorable once that step completes.
    slots.attach(*n, *target, exactness::decode_continuation, clock.release_tag(), true);
    published_snapshot(slots.id_of(*n), blocks.id_of(*target), exactness::decode_continuation);
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
    if constexpr (has_host) {
      if (r.host_turn_restore != no_host_unit)
        host->ledger.demote_snapshot(r.host_turn_restore, r.host_turn_serial, exactness::decode_continuation);
    }
  }

  /// Lets go of what a sequence held until its restore and copy had run (its first commit, or its end).
  void unhold_restore(sequence_record& r) noexcept {
    if (r.restore_slot != no_slot) {
      if (!r.restore_on_host) slots.unhold(r.restore_slot);
      else if constexpr (has_host) host->ledger.unhold_snapshot(static_cast<host_unit>(r.restore_slot));
      r.restore_slot = no_slot;
      r.restore_on_host = false;
    }
    if (r.copy_src != no_block) {
      blocks.unreference(blocks.node(r.copy_src));
      r.copy_src = no_block;
    }
    if constexpr (has_host) {
      if (r.host_copy_src != no_host_unit) {
        host->ledger.unhold_block(r.host_copy_src);
        r.host_copy_src = no_host_unit;
      }
    }
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
      unhold_restore(r);
      for (const capture_point& c : r.captures) slots.release(slots.node(c.slot));
    }
    // Deepest first, so in the LRU queue every block precedes its parent (leaf-first eviction).
    for (std::size_t i = r.blocks.size(); i-- > 0;) {
      if (i < r.chain.size() && r.chain[i] != r.blocks[i]) blocks.unreference(blocks.node(r.chain[i]));
      blocks.unreference(blocks.node(r.blocks[i]));
    }
    sequences.erase(r);
    --metrics.live_sequences;
  }

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
  std::unique_ptr<host_tier_state> host; ///< `policy::host_tier` only
  std::unique_ptr<remote_tier_state> remote; ///< `policy::remote_tier` only
};

} // namespace reprise::detail
