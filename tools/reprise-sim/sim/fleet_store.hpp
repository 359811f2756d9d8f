// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The remote tier of a simulated fleet: one store that every engine's cache writes its `remote_puts` to and
/// answers its `prefetch` fetches from (`policy::remote_tier`, docs/tiers.md).
///
/// `modelled_store` keeps headers only, in an LRU bounded by the bytes the values would take (header +
/// payload), as a Redis server under `maxmemory` with `allkeys-lru` does; a fetch completes before the
/// request it was planned for is admitted (no latency is modelled). `make_redis_fleet_store` runs the same
/// calls against a live Redis / Valkey server through `reprise::redis`, with stand-in payloads.

#include <reprise/cache/types.hpp>

#include <cstdint>
#include <list>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

namespace reprise::sim {

/// What a store did over a replay.
struct fleet_store_stats {
  std::uint64_t puts = 0, gets = 0, hits = 0;
  std::uint64_t evictions = 0;       ///< values dropped to stay within the budget (modelled store)
  std::uint64_t failures = 0;        ///< live store: requests that ended in timeout, unavailable, error
  std::uint64_t wrong_payloads = 0;  ///< live store: hits whose payload was not the one put (must stay 0)
  std::uint64_t bytes_held = 0, peak_bytes_held = 0, values_held = 0;
};

/// A store shared by a fleet's engines. Engines take turns, so calls never overlap.
class fleet_store {
public:
  virtual ~fleet_store() = default;
  /// Stores the value `key` names: `header` (copied) and a payload of `payload_bytes`.
  virtual void put(const content_key& key, std::span<const std::byte> header, std::uint64_t payload_bytes) = 0;
  /// The header stored under `key` with a payload of `payload_bytes`, in `header`; false for a miss (then
  /// `header` is empty).
  virtual bool get(const content_key& key, std::uint64_t payload_bytes, std::vector<std::byte>& header) = 0;
  /// Which of `keys` have a value: `found[i]` 1 or 0 (all 0 when the store failed). Touches no LRU order (a
  /// Redis EXISTS does not).
  virtual void probe(std::span<const content_key> keys, std::vector<std::uint8_t>& found) = 0;
  virtual fleet_store_stats stats() const = 0;
  /// "modelled, 2 GiB LRU" or "redis at 127.0.0.1:6379, 4 KiB stand-in payloads", for reports.
  virtual std::string describe() const = 0;
};

/// Headers in memory, evicted least recently used first once the values' bytes would exceed
/// `budget_bytes` (0: never). A value larger than the whole budget is not kept.
class modelled_store final : public fleet_store {
public:
  explicit modelled_store(std::uint64_t budget_bytes) : budget_(budget_bytes) {}
  void put(const content_key& key, std::span<const std::byte> header, std::uint64_t payload_bytes) override;
  bool get(const content_key& key, std::uint64_t payload_bytes, std::vector<std::byte>& header) override;
  void probe(std::span<const content_key> keys, std::vector<std::uint8_t>& found) override;
  fleet_store_stats stats() const override { return stats_; }
  std::string describe() const override;

private:
  struct key_hash {
    std::size_t operator()(const content_key& k) const noexcept; // content keys are digests: any 8 bytes do
  };
  struct entry {
    content_key key;
    std::vector<std::byte> header;
    std::uint64_t bytes = 0;
  };
  void erase(std::list<entry>::iterator it) noexcept;

  std::uint64_t budget_;
  std::list<entry> lru_; ///< most recently used first
  std::unordered_map<content_key, std::list<entry>::iterator, key_hash> index_;
  fleet_store_stats stats_;
};

/// Whether this build has the live store (`reprise::redis`: hiredis and OpenSSL were found).
bool has_redis_fleet_store() noexcept;

/// A store on the live server at `endpoint` ("host:port"): puts write the header and `stand_in_bytes` of a
/// payload derived from the key, gets read them back and check that payload (a mismatch counts in
/// `wrong_payloads` and is a miss). Calls wait for their completion. Keys go under a prefix unique to this
/// run, so runs never read each other's values. Null with a message in `error` when this build has no live
/// store or `endpoint` is refused.
std::unique_ptr<fleet_store> make_redis_fleet_store(const std::string& endpoint, std::uint64_t stand_in_bytes,
                                                    std::string& error);

} // namespace reprise::sim
