// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/fleet_store.hpp"

#include "sim/models.hpp"

#include <algorithm>
#include <cstring>

#ifdef REPRISE_SIM_HAS_REDIS
#include <reprise/remote/redis_store.hpp>

#include <array>
#include <chrono>
#include <random>
#endif

namespace reprise::sim {

std::size_t modelled_store::key_hash::operator()(const content_key& k) const noexcept {
  std::size_t h = 0;
  std::memcpy(&h, k.bytes.data(), sizeof h);
  return h;
}

void modelled_store::erase(std::list<entry>::iterator it) noexcept {
  stats_.bytes_held -= it->bytes;
  --stats_.values_held;
  index_.erase(it->key);
  lru_.erase(it);
}

void modelled_store::put(const content_key& key, std::span<const std::byte> header, std::uint64_t payload_bytes) {
  ++stats_.puts;
  // Replacing a value: the new one is as good (same content key, same bytes), and now the most recent.
  if (auto found = index_.find(key); found != index_.end()) erase(found->second);
  const std::uint64_t bytes = header.size() + payload_bytes;
  if (budget_ != 0 && bytes > budget_) return;
  while (budget_ != 0 && stats_.bytes_held + bytes > budget_) {
    erase(std::prev(lru_.end()));
    ++stats_.evictions;
  }
  lru_.push_front({key, {header.begin(), header.end()}, bytes});
  index_.emplace(key, lru_.begin());
  stats_.bytes_held += bytes;
  ++stats_.values_held;
  stats_.peak_bytes_held = std::max(stats_.peak_bytes_held, stats_.bytes_held);
}

bool modelled_store::get(const content_key& key, std::uint64_t payload_bytes, std::vector<std::byte>& header) {
  ++stats_.gets;
  header.clear();
  const auto found = index_.find(key);
  if (found == index_.end() || found->second->bytes != found->second->header.size() + payload_bytes) return false;
  lru_.splice(lru_.begin(), lru_, found->second);
  header = found->second->header;
  ++stats_.hits;
  return true;
}

void modelled_store::probe(std::span<const content_key> keys, std::vector<std::uint8_t>& found) {
  found.resize(keys.size());
  for (std::size_t i = 0; i < keys.size(); ++i) found[i] = index_.contains(keys[i]) ? 1 : 0;
}

std::string modelled_store::describe() const {
  return budget_ == 0 ? "modelled, unlimited"
                      : "modelled, " + format_bytes(static_cast<double>(budget_)) + " LRU";
}

#ifdef REPRISE_SIM_HAS_REDIS

namespace {

/// The live store: every call waits for its completion (the engines of a simulated fleet take turns).
class redis_fleet_store final : public fleet_store {
public:
  redis_fleet_store(std::unique_ptr<remote::redis_store> store, std::string endpoint, std::uint64_t stand_in_bytes)
      : store_(std::move(store)), endpoint_(std::move(endpoint)), payload_(stand_in_bytes), expected_(stand_in_bytes),
        received_(stand_in_bytes) {}

  void put(const content_key& key, std::span<const std::byte> header, std::uint64_t payload_bytes) override {
    ++stats_.puts;
    fill(key, payload_bytes, payload_);
    auto id = store_->put(key, header, payload_);
    if (!id || !finished(*id)) ++stats_.failures;
  }

  bool get(const content_key& key, std::uint64_t payload_bytes, std::vector<std::byte>& header) override {
    ++stats_.gets;
    header.clear();
    auto id = store_->get(key, received_);
    if (!id) {
      ++stats_.failures;
      return false;
    }
    if (!finished(*id)) return false;
    fill(key, payload_bytes, expected_);
    // A value of another size than the fetch expects is a miss, as redis_store's get into a destination of
    // that size reports it (and as the modelled store does).
    if (!std::equal(expected_.begin(), expected_.begin() + size_bytes(), received_.begin())) return false;
    if (expected_ != received_) {
      ++stats_.wrong_payloads;
      return false;
    }
    header = std::move(last_.header);
    ++stats_.hits;
    return true;
  }

  void probe(std::span<const content_key> keys, std::vector<std::uint8_t>& found) override {
    found.assign(keys.size(), 0);
    auto id = store_->probe(keys, found);
    if (!id) {
      ++stats_.failures;
      return;
    }
    if (!finished(*id)) std::fill(found.begin(), found.end(), std::uint8_t{0});
  }

  fleet_store_stats stats() const override { return stats_; }

  std::string describe() const override {
    return "redis at " + endpoint_ + ", " + format_bytes(static_cast<double>(payload_.size())) + " stand-in payloads";
  }

private:
  /// Waits for request `id`; true when it was stored or hit (a miss is counted by neither).
  bool finished(remote::request_id id) {
    std::array<remote::completion, 1> out;
    while (store_->wait(out, std::chrono::milliseconds(1000)) == 0) {
    }
    last_ = std::move(out[0]);
    if (last_.id != id) ++stats_.failures; // one request at a time: cannot happen
    const bool ok = last_.id == id && (last_.status == remote::store_status::stored || last_.status == remote::store_status::hit ||
                                       last_.status == remote::store_status::answered);
    if (!ok && last_.status != remote::store_status::miss) ++stats_.failures;
    return ok;
  }

  /// The stand-in payload of `key`: the real payload's size in its first bytes (up to 8), then the key's bytes
  /// repeated, so a value read under another key differs.
  void fill(const content_key& key, std::uint64_t payload_bytes, std::vector<std::byte>& out) const {
    for (std::size_t i = 0; i < out.size(); ++i) out[i] = static_cast<std::byte>(key.bytes[i % key.bytes.size()] ^ (i >> 5));
    for (std::size_t i = 0; i < size_bytes(); ++i) out[i] = static_cast<std::byte>(payload_bytes >> (8 * i));
  }
  std::size_t size_bytes() const noexcept { return std::min<std::size_t>(8, payload_.size()); }

  std::unique_ptr<remote::redis_store> store_;
  std::string endpoint_;
  std::vector<std::byte> payload_, expected_, received_;
  remote::completion last_;
  fleet_store_stats stats_;
};

} // namespace

bool has_redis_fleet_store() noexcept { return true; }

std::unique_ptr<fleet_store> make_redis_fleet_store(const std::string& endpoint, std::uint64_t stand_in_bytes,
                                                    std::string& error) {
  remote::redis_store_options o;
  o.endpoints = {endpoint};
  o.command_timeout = std::chrono::milliseconds(5000);
  o.queue_timeout = std::chrono::milliseconds(0);
  // A prefix of its own per run: values an earlier run left on the server are never read.
  o.key_prefix = "reprise-sim:" + std::to_string(std::random_device{}()) + ":";
  auto store = remote::redis_store::create(std::move(o));
  if (!store) {
    error = "--remote-redis " + endpoint + ": " + std::string(to_string(store.error()));
    return nullptr;
  }
  return std::make_unique<redis_fleet_store>(std::move(*store), endpoint, stand_in_bytes);
}

#else

bool has_redis_fleet_store() noexcept { return false; }

std::unique_ptr<fleet_store> make_redis_fleet_store(const std::string&, std::uint64_t, std::string& error) {
  error = "this reprise-sim was built without the Redis client (reprise::redis needs hiredis and OpenSSL: Debian's "
          "libhiredis-dev and libssl-dev)";
  return nullptr;
}

#endif

} // namespace reprise::sim
