// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `tier_runner<Cache>`: what an engine runs between a cache with a remote tier (`policy::remote_tier`) and a
/// `redis_store`, on the scheduler thread:
///
/// \code
/// // after each batch of cache calls (admit, extend, fork, finish), before the step's other work:
/// const reprise::transfer_plan t = cache.take_transfers();
/// runner.run_puts(t);                  // copies the evicted host units out first
/// /* the engine's offloads, then onboards (t.kv_offload, t.snapshot_offload, t.kv_onboard) */
/// // when a request arrives: ask the store what it has of the prompt (one pipelined round trip)
/// auto probe = runner.start_probe(*cache.probe(prompt, keys));
/// // once per step, before admitting:
/// runner.poll(cache);                  // completed fetches -> host units -> cache.fetched(...)
/// if (auto found = runner.take_probe(probe)) {          // the probe was answered: fetch what is there
///   auto f = cache.prefetch(prompt, keys, *found);
///   runner.run_puts(cache.take_transfers()); // what the reservations evicted, before the fetches write units
///   runner.start_fetches(cache, *f);
/// }
/// \endcode
///
/// `cache.prefetch(prompt, keys)` without a probe fetches every candidate at once, saving the round trip;
/// what the store lacks (a prompt's new content, always) then holds a reserved host unit until reported.
///
/// The engine decides when a request whose fetches are still in flight is admitted (when they complete, or
/// after a deadline: a fetch that completes later only fills the host tier for the next prompt). Network I/O
/// runs on the store's threads; this class only enqueues, copies and polls, and never blocks except in
/// `drain`.
///
/// Lifetime: a runner may be destroyed at any moment, also with requests in flight. The buffers the store
/// borrows (a put's copy, a fetch's staging buffer, a probe's keys and flags) are shared with the store
/// (`redis_store::buffer_owner`), which releases them once its I/O threads are done with them; a destroyed
/// runner's completions are then ignored by whoever polls the store. The cache's host units reserved for
/// fetches still in flight stay reserved until reported: call `drain`, or `abandon` (which waits for
/// nothing), before destroying a runner whose cache lives on.
///
/// The host pools: the engine describes each (KV units, snapshot units) as a list of per-layer pools of
/// `units` units of `unit_bytes`; a value's payload is the concatenation of its unit's slice of every pool.
///
/// Write-through (`cache_options::remote_write_through`) puts GPU units (`remote_put::device`): the engine
/// passes a `device_reader` that copies one GPU unit into host memory, layer after layer as the host pools
/// lay a payload out (a `cudaMemcpy` from each layer's pool; the bytes are complete, their step completed).
/// Without one, such puts are dropped and counted in `puts_dropped`.
///
/// Turn ends (`cache_options::remote_turn_ends`, `remote_item::turn_end`) are one value of two units, its
/// partial block and its snapshot, linked to continuation blocks that are block values of their own: a
/// put, always from GPU memory, reads its KV blocks `kv_units` in order as block units (zeros for a
/// `no_unit` part) and then its snapshot slot `unit`; a fetch stages `kv_units.size()` KV units and one
/// snapshot unit, and a hit is scattered into host KV units `kv_units` (skipping `no_unit` parts) and host
/// snapshot unit `unit` before `fetched(turn_end, unit, header)`. A turn end is fetched only by a prefetch
/// given a probe's answer (`take_probe`). Blocks and snapshots keep one unit per value.
///
/// Opt-in, with `reprise::redis`.

#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>
#include <reprise/remote/redis_store.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

namespace reprise::remote {

/// One per-layer pool of host units.
struct host_pool_view {
  std::byte* base = nullptr;
  std::size_t unit_bytes = 0;
};

struct tier_runner_stats {
  std::uint64_t puts_issued = 0, puts_stored = 0, puts_failed = 0, puts_dropped = 0;
  std::uint64_t fetches_issued = 0, fetch_hits = 0, fetch_misses = 0, fetches_dropped = 0;
  std::uint64_t bytes_put = 0, bytes_fetched = 0;
  std::uint64_t probes_issued = 0, probes_answered = 0, probes_failed = 0, keys_found = 0;
};

/// Copies GPU unit `unit` (a KV block, or a snapshot slot) into `out`, which is `unit_bytes(item)` long, in
/// the order of the host pools' layers. Called by `run_puts`, before the step's other work; `item` is
/// `block` or `snapshot` (a turn end is read as its blocks, then its snapshot slot).
using device_reader = std::function<void(remote_item item, std::uint32_t unit, std::span<std::byte> out)>;

template <class Cache>
class tier_runner {
public:
  /// `kv_pools`, `snapshot_pools`: the engine's host pools, alive as long as the runner. `read_device`:
  /// for write-through puts (may be empty without write-through).
  tier_runner(redis_store& store, std::vector<host_pool_view> kv_pools, std::vector<host_pool_view> snapshot_pools,
              device_reader read_device = {})
      : store_(&store), pools_{std::move(kv_pools), std::move(snapshot_pools)}, read_device_(std::move(read_device)) {}

  /// Bytes of one unit's payload: a KV block's (`block`) or a snapshot's (`snapshot`, `turn_end`).
  std::size_t unit_bytes(remote_item item) const noexcept {
    std::size_t n = 0;
    for (const host_pool_view& p : pools(item)) n += p.unit_bytes;
    return n;
  }

  /// Bytes of a value's payload: one unit for a block or a snapshot; `kv_units` KV units and one snapshot
  /// unit for a turn end (`remote_payload_bytes`).
  std::size_t payload_bytes(remote_item item, std::size_t kv_units = 0) const noexcept {
    return static_cast<std::size_t>(
        remote_payload_bytes(item, kv_units, unit_bytes(remote_item::block), unit_bytes(remote_item::snapshot)));
  }

  /// Copies each put's unit (a host unit, or a GPU unit through the `device_reader`; a turn end's GPU blocks
  /// and slot) and header now (the transfers that follow overwrite the units) and hands them to the store. A
  /// put the store's full queue refuses is dropped: the value is simply not shared.
  void run_puts(const transfer_plan& t) {
    for (const remote_put& p : t.remote_puts) {
      const bool turn_end = p.item == remote_item::turn_end; // always from GPU memory
      if ((p.device || turn_end) && !read_device_) {
        ++stats_.puts_dropped;
        continue;
      }
      auto put = std::make_shared<pending_put>();
      put->header.assign(p.header.begin(), p.header.end());
      put->payload.resize(payload_bytes(p.item, p.kv_units.size()));
      if (turn_end) {
        const std::span<std::byte> out(put->payload);
        const std::size_t kv = unit_bytes(remote_item::block);
        for (std::size_t j = 0; j < p.kv_units.size(); ++j) // a `no_unit` part stays zero
          if (p.kv_units[j] != no_unit) read_device_(remote_item::block, p.kv_units[j], out.subspan(j * kv, kv));
        read_device_(remote_item::snapshot, p.unit, out.subspan(p.kv_units.size() * kv));
      } else if (p.device) {
        read_device_(p.item, p.unit, put->payload);
      } else {
        gather(pools(p.item), p.unit, put->payload.data());
      }
      auto id = store_->put(p.key, put->header, put->payload, put);
      if (!id) {
        ++stats_.puts_dropped;
        continue;
      }
      ++stats_.puts_issued;
      stats_.bytes_put += put->payload.size();
      puts_.emplace(*id, std::move(put));
    }
  }

  /// Starts a get per fetch into a staging buffer of its payload's size (a turn end's `kv_units` are copied
  /// with it); a fetch the store refuses is reported a miss at once.
  void start_fetches(Cache& cache, const fetch_plan& plan) {
    for (const remote_fetch& f : plan.fetches) {
      auto fetch = std::make_shared<pending_fetch>(
          pending_fetch{f.item, f.unit, std::vector<std::byte>(payload_bytes(f.item, f.kv_units.size())),
                        std::vector<std::uint32_t>(f.kv_units.begin(), f.kv_units.end())});
      auto id = store_->get(f.key, fetch->staging, fetch);
      if (!id) {
        ++stats_.fetches_dropped;
        (void)cache.fetched(f.item, f.unit, {});
        continue;
      }
      ++stats_.fetches_issued;
      fetches_.emplace(*id, std::move(fetch));
    }
  }

  /// Asks the store which of `plan`'s keys it has (the keys are copied). Returns the ticket for
  /// `take_probe`; a probe the store's full queue refuses is answered at once, with nothing found.
  request_id start_probe(const probe_plan& plan) {
    const request_id ticket = next_ticket_++;
    auto probe = std::make_shared<pending_probe>();
    probe->keys.reserve(plan.keys.size());
    for (const remote_probe& k : plan.keys) probe->keys.push_back(k.key);
    probe->found.assign(probe->keys.size(), 0);
    auto id = store_->probe(probe->keys, probe->found, probe);
    if (!id) {
      ++stats_.probes_failed;
      answered_.emplace(ticket, std::vector<content_key>{});
      return ticket;
    }
    ++stats_.probes_issued;
    probe->ticket = ticket;
    probes_.emplace(*id, std::move(probe));
    return ticket;
  }

  /// The keys the store had, once the probe `ticket` was answered and `poll` collected it (none if it
  /// failed: a store that is down costs no fetch); nothing while it runs. Each answer is handed out once.
  std::optional<std::vector<content_key>> take_probe(request_id ticket) {
    auto it = answered_.find(ticket);
    if (it == answered_.end()) return std::nullopt;
    std::vector<content_key> found = std::move(it->second);
    answered_.erase(it);
    return found;
  }

  /// Collects finished requests without waiting: a fetched hit is scattered into its host unit (a turn end's
  /// into its KV units and snapshot unit) and reported with the store's header, anything else (a failure, a
  /// payload of another size) reported as a miss, with an empty header; a finished put frees its buffers.
  /// Returns the requests finished.
  std::size_t poll(Cache& cache) {
    completion done[32];
    std::size_t total = 0;
    for (std::size_t n; (n = store_->poll(done)) != 0;) {
      for (std::size_t k = 0; k < n; ++k) finish(cache, done[k]);
      total += n;
    }
    return total;
  }

  /// Polls until nothing is in flight or `timeout` passes (shutdown, tests). Returns whether all finished.
  bool drain(Cache& cache, std::chrono::milliseconds timeout) {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    completion done[32];
    while (!puts_.empty() || !fetches_.empty() || !probes_.empty()) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return false;
      const std::size_t n = store_->wait(done, left);
      for (std::size_t k = 0; k < n; ++k) finish(cache, done[k]);
    }
    return true;
  }

  /// Gives up every request in flight without waiting: each fetch (turn ends included) is reported to
  /// `cache` as a miss (its host units are never written: the store writes only the staging buffer it keeps
  /// alive), puts and probes are forgotten (an unanswered probe's ticket is answered with nothing found).
  /// Their completions, polled later, are ignored. For a shutdown or a store that stopped answering; `drain`
  /// first to keep results.
  void abandon(Cache& cache) {
    for (auto& [id, f] : fetches_) {
      ++stats_.fetches_dropped;
      (void)cache.fetched(f->item, f->unit, {});
    }
    for (auto& [id, p] : probes_) answered_.emplace(p->ticket, std::vector<content_key>{});
    fetches_.clear();
    puts_.clear();
    probes_.clear();
  }

  std::size_t in_flight() const noexcept { return puts_.size() + fetches_.size() + probes_.size(); }
  const tier_runner_stats& stats() const noexcept { return stats_; }

private:
  struct pending_put {
    std::vector<std::byte> header, payload;
  };
  struct pending_fetch {
    remote_item item;
    std::uint32_t unit;
    std::vector<std::byte> staging;
    std::vector<std::uint32_t> kv_units; ///< a turn end's host KV units, in payload order
  };
  struct pending_probe {
    request_id ticket = 0;
    std::vector<content_key> keys;
    std::vector<std::uint8_t> found;
  };

  /// The KV pools for a block, the snapshot pools for a snapshot or a turn end's snapshot.
  std::span<const host_pool_view> pools(remote_item item) const noexcept {
    return pools_[item == remote_item::block ? 0 : 1];
  }

  /// Unit `unit` of every pool of `p`, layer after layer, into `out`, and back.
  static void gather(std::span<const host_pool_view> p, std::uint32_t unit, std::byte* out) noexcept {
    for (const host_pool_view& v : p) {
      std::memcpy(out, v.base + std::size_t{unit} * v.unit_bytes, v.unit_bytes);
      out += v.unit_bytes;
    }
  }
  static void scatter(std::span<const host_pool_view> p, std::uint32_t unit, const std::byte* in) noexcept {
    for (const host_pool_view& v : p) {
      std::memcpy(v.base + std::size_t{unit} * v.unit_bytes, in, v.unit_bytes);
      in += v.unit_bytes;
    }
  }

  void finish(Cache& cache, const completion& c) {
    if (c.kind == request_kind::probe) {
      auto it = probes_.find(c.id);
      if (it == probes_.end()) return;
      const pending_probe& probe = *it->second;
      std::vector<content_key> found;
      if (c.status == store_status::answered) {
        ++stats_.probes_answered;
        for (std::size_t i = 0; i < probe.keys.size(); ++i)
          if (probe.found[i] != 0) found.push_back(probe.keys[i]);
        stats_.keys_found += found.size();
      } else {
        ++stats_.probes_failed;
      }
      answered_.emplace(probe.ticket, std::move(found));
      probes_.erase(it);
      return;
    }
    if (c.kind == request_kind::put) {
      ++(c.status == store_status::stored ? stats_.puts_stored : stats_.puts_failed);
      puts_.erase(c.id);
      return;
    }
    auto it = fetches_.find(c.id);
    if (it == fetches_.end()) return;
    const pending_fetch& f = *it->second;
    if (c.status == store_status::hit && c.payload_bytes == f.staging.size()) {
      if (f.item == remote_item::turn_end) {
        const std::size_t kv = unit_bytes(remote_item::block);
        for (std::size_t j = 0; j < f.kv_units.size(); ++j) // a `no_unit` part: blocks this engine holds
          if (f.kv_units[j] != no_unit) scatter(pools(remote_item::block), f.kv_units[j], f.staging.data() + j * kv);
        scatter(pools(remote_item::snapshot), f.unit, f.staging.data() + f.kv_units.size() * kv);
      } else {
        scatter(pools(f.item), f.unit, f.staging.data());
      }
      ++stats_.fetch_hits;
      stats_.bytes_fetched += f.staging.size();
      (void)cache.fetched(f.item, f.unit, c.header);
    } else {
      ++stats_.fetch_misses;
      (void)cache.fetched(f.item, f.unit, {});
    }
    fetches_.erase(it);
  }

  redis_store* store_;
  std::vector<host_pool_view> pools_[2];
  device_reader read_device_;
  // By the store's request id. Shared with the store (its `keep_alive`) while its I/O threads may touch them.
  std::unordered_map<request_id, std::shared_ptr<pending_put>> puts_;
  std::unordered_map<request_id, std::shared_ptr<pending_fetch>> fetches_;
  std::unordered_map<request_id, std::shared_ptr<pending_probe>> probes_;
  std::unordered_map<request_id, std::vector<content_key>> answered_; ///< by ticket
  request_id next_ticket_ = 1;
  tier_runner_stats stats_;
};

} // namespace reprise::remote
