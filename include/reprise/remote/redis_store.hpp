// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The remote tier's store client: KV blocks and recurrent-state snapshots kept in a Redis / Valkey store
/// that a fleet of engine processes shares, named by their content keys (<reprise/keys/content_key.hpp>).
///
/// The scheduler thread must never wait on the network, so every operation is asynchronous: `put` and `get`
/// only enqueue a request and return its id, the store's own I/O thread(s) talk to the servers, and the
/// scheduler collects finished requests with `poll`, which never blocks on I/O. A full request queue rejects
/// the request at once (`errc::pool_exhausted`) instead of making the caller wait.
///
/// A store is a cache, not a database: every failure degrades. A value that is absent, evicted in part,
/// truncated, written by another format or fails its SHA-256 digest is reported as `miss` or `corrupt`,
/// never as data; a server that is down or does not answer within the command timeout turns requests into
/// `unavailable` / `timeout` completions, never an exception or a hang, and the connection is retried with
/// an exponential backoff on later requests. The value format (a manifest key and fixed-size chunk keys in
/// one Redis Cluster hash slot), the key names, cluster routing and these rules are specified in
/// docs/remote-store.md.
///
/// What the store cannot verify is whether a value is the right one for the caller's prefix: a content key
/// names content, and the caller's `header` (stored verbatim, e.g. the tokens and the parent key) is what it
/// checks on a hit before using the payload.
///
/// Opt-in: link `reprise::redis` (CMake component `redis`), which adds hiredis and `reprise::sha256`; the
/// umbrella header <reprise/reprise.hpp> does not include this one.

#include <reprise/errc.hpp>
#include <reprise/keys/content_key.hpp>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::remote {

/// The tag at the start of every stored manifest. A change to any byte layout of docs/remote-store.md must
/// change it, so that two formats never read each other's values.
inline constexpr std::string_view store_value_format = "reprise/store-value/v1";
inline constexpr std::uint32_t store_value_format_version = 1;

/// Redis Cluster has 16384 hash slots; a key's slot is CRC16 of its hash tag modulo this.
inline constexpr std::uint32_t cluster_slot_count = 16384;

/// CRC-16/XMODEM (polynomial 0x1021, initial value 0, no reflection), the checksum Redis Cluster assigns
/// slots by. crc16_xmodem("123456789") == 0x31C3.
constexpr std::uint16_t crc16_xmodem(std::string_view bytes) noexcept {
  std::uint32_t crc = 0;
  for (char ch : bytes) {
    crc ^= static_cast<std::uint32_t>(static_cast<unsigned char>(ch)) << 8;
    for (int bit = 0; bit < 8; ++bit) crc = (crc & 0x8000u) != 0 ? (crc << 1) ^ 0x1021u : crc << 1;
    crc &= 0xFFFFu;
  }
  return static_cast<std::uint16_t>(crc);
}

/// The hash slot of `key` as Redis Cluster computes it: when the key holds a `{...}` with at least one byte
/// between the first `{` and the next `}`, only those bytes are hashed (the hash tag), else the whole key.
constexpr std::uint16_t cluster_slot(std::string_view key) noexcept {
  const std::size_t open = key.find('{');
  if (open != std::string_view::npos) {
    const std::size_t close = key.find('}', open + 1);
    if (close != std::string_view::npos && close != open + 1) key = key.substr(open + 1, close - open - 1);
  }
  return static_cast<std::uint16_t>(crc16_xmodem(key) % cluster_slot_count);
}

/// How the endpoints are used.
enum class store_topology : std::uint8_t {
  automatic,   ///< several endpoints: a cluster; one endpoint: asked once (CLUSTER SLOTS) whether it is one
  single_node, ///< the first endpoint is the whole store
  cluster,     ///< the endpoints are seeds of a Redis Cluster; keys are routed by hash slot
};

struct redis_store_options {
  /// "host:port" (or "host", port 6379). One endpoint is a single server or one seed of a cluster; several
  /// are seeds of one Redis Cluster, tried in order to learn its slot map.
  std::vector<std::string> endpoints;
  store_topology topology = store_topology::automatic;
  /// Bound on establishing a TCP connection.
  std::chrono::milliseconds connect_timeout{500};
  /// Bound on every socket read and write of a command: a server that stops answering fails the request
  /// as `timeout` after at most this long per step (a large value moves in many steps; each must progress).
  std::chrono::milliseconds command_timeout{1000};
  /// A request still queued this long after its submission (behind requests that waited for a server
  /// that stopped answering, or a backlog) completes `timeout` without being sent: a get answered late is
  /// of no use to a scheduler that has moved on. 0 for no limit.
  std::chrono::milliseconds queue_timeout{1000};
  /// Payloads up to this size are stored in the manifest key itself (one round trip); larger ones as
  /// ceil(payload / chunk_bytes) chunk keys of this size (the last one shorter). Redis limits one value to
  /// 512 MB; chunks keep single replies and server allocations small. Within [1 KiB, 256 MiB].
  std::size_t chunk_bytes = std::size_t{8} << 20;
  /// Prepended to every key: a namespace for one fleet or deployment. May not contain '{' or '}' (the key's
  /// hash tag must be the content key), at most 256 bytes.
  std::string key_prefix = "reprise:";
  /// Expiry of every key written (SET ... PX), or 0 for none: values then live until the server evicts
  /// them under maxmemory (which a store used as a cache must be configured to do).
  std::chrono::milliseconds ttl{0};
  /// I/O threads, each with its own connections; requests are taken in submission order by whichever is
  /// free. Within [1, 64].
  std::uint32_t io_threads = 1;
  /// Requests submitted and not yet returned by `poll`; a put or get beyond it is rejected at once with
  /// `errc::pool_exhausted`. Bounds the memory of finished, unpolled values too. Within [1, 1 << 20].
  std::uint32_t max_in_flight = 1024;
  /// After a failed connection the node is not tried again for this long, doubled at every further
  /// failure up to `reconnect_backoff_max`; requests routed to it meanwhile complete `unavailable` at once.
  std::chrono::milliseconds reconnect_backoff_initial{50};
  std::chrono::milliseconds reconnect_backoff_max{1000};
  /// MOVED / ASK redirects followed per command before the request fails `server_error`.
  std::uint32_t max_redirects = 5;
};

using request_id = std::uint64_t;

/// What keeps a request's borrowed bytes alive, when the caller wants the store to: the store holds it from
/// submission until its I/O threads no longer touch the request's spans (the completion is queued, or the
/// request is dropped by the destructor), then releases it, possibly on an I/O thread. A caller that owns its
/// buffers through it may forget a request at any moment (be destroyed while the request is queued or
/// running) without the store reading or writing freed memory; `tier_runner` does. Empty: the caller keeps
/// the bytes alive until `poll` returns the completion.
using buffer_owner = std::shared_ptr<const void>;

enum class request_kind : std::uint8_t { put, get, probe };

/// How a request ended. Only `stored`, `answered` and `hit` are successes; every other status leaves the caller
/// where a cache miss leaves it.
enum class store_status : std::uint8_t {
  stored,       ///< put: chunks and manifest written
  answered,     ///< probe: every key was asked, its flag written
  hit,          ///< get: the value was found, complete, and matches its digest
  miss,         ///< get: no value, a chunk evicted or missing, or a value of another size than the destination
  corrupt,      ///< get: a value is there but is not a whole, valid value of this format (wrong tag,
                ///< version, key, sizes, truncated chunk, digest mismatch)
  timeout,      ///< the server did not answer within the command (or connect) timeout, or the request
                ///< waited in the queue past `queue_timeout`
  unavailable,  ///< no connection: refused, reset, the node is in its reconnect backoff, or no node owns the slot
  server_error, ///< the server refused a command (e.g. OOM under maxmemory noeviction), or too many redirects
};

constexpr std::string_view to_string(store_status s) noexcept {
  switch (s) {
  case store_status::stored: return "stored";
  case store_status::answered: return "answered";
  case store_status::hit: return "hit";
  case store_status::miss: return "miss";
  case store_status::corrupt: return "corrupt";
  case store_status::timeout: return "timeout";
  case store_status::unavailable: return "unavailable";
  case store_status::server_error: return "server_error";
  }
  return "unknown";
}

/// A finished request, as `poll` returns it.
struct completion {
  request_id id = 0;
  request_kind kind = request_kind::get;
  store_status status = store_status::miss;
  /// get, hit: the header stored with the value (the caller verifies it before using the payload).
  std::vector<std::byte> header;
  /// get without a destination, hit: the payload. Empty otherwise (a get with a destination wrote it there).
  std::vector<std::byte> payload;
  /// get, hit: the payload's size.
  std::size_t payload_bytes = 0;
};

/// Counters since creation, for logs and metrics. Read with relaxed atomics: a consistent snapshot is not
/// guaranteed while requests run.
struct redis_store_stats {
  std::uint64_t submitted = 0;
  std::uint64_t rejected = 0; ///< refused by a full queue
  std::uint64_t stored = 0;
  std::uint64_t hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t probes = 0;  ///< probes answered
  std::uint64_t probed_keys = 0, probed_found = 0;
  std::uint64_t corrupt = 0;
  std::uint64_t failed = 0; ///< timeout, unavailable or server_error
  std::uint64_t redirects = 0; ///< MOVED and ASK followed
  std::uint64_t reconnects = 0; ///< connections established after the first one to each node
};

/// A client of one Redis / Valkey server or Redis Cluster. Thread-safe: any thread may submit and poll,
/// although the intended use is one scheduler thread doing both. Not copyable or movable (its I/O threads
/// hold its address); hold it in the `unique_ptr` that `create` returns.
class redis_store {
public:
  /// Checks `options` and starts the I/O threads. No connection is made here (a store that is down must not
  /// stop an engine from starting): the first request connects.
  ///
  /// Errors: `invalid_argument` for no endpoints, an endpoint that is not host[:port] with a port in
  /// [1, 65535], a zero or negative timeout, `chunk_bytes` outside [1 KiB, 256 MiB], a key prefix with '{'
  /// or '}' or over 256 bytes, a negative TTL, `io_threads` outside [1, 64], `max_in_flight` outside
  /// [1, 1 << 20], a negative queue timeout, a backoff that is not positive or whose maximum is below its initial value;
  /// `unsupported_config` when a thread cannot be started.
  static result<std::unique_ptr<redis_store>> create(redis_store_options options);

  /// Stops the I/O threads: the request each is executing finishes (bounded by the timeouts), requests
  /// still queued and completions not polled are dropped (their `keep_alive` owners released). Borrowed
  /// buffers are no longer touched once the destructor returns.
  ~redis_store();
  redis_store(const redis_store&) = delete;
  redis_store& operator=(const redis_store&) = delete;

  /// Stores `header` and `payload` under `key`, replacing any value stored there. The bytes are *borrowed*,
  /// not copied (a 100 MiB snapshot copy would cost the scheduler milliseconds): both spans must stay valid
  /// and unchanged until `poll` returns this request's completion. Its status is `stored` or a failure.
  ///
  /// `keep_alive`: see `buffer_owner`.
  ///
  /// Errors (nothing is enqueued): `pool_exhausted` when `max_in_flight` requests are outstanding;
  /// `invalid_argument` for a header over 16 MiB.
  result<request_id> put(const content_key& key, std::span<const std::byte> header,
                         std::span<const std::byte> payload, buffer_owner keep_alive = {});

  /// Looks `key` up; a hit's completion owns the header and the payload. Errors: `pool_exhausted`.
  result<request_id> get(const content_key& key);

  /// Looks `key` up and writes a hit's payload into `destination` (e.g. pinned host memory for a copy to
  /// the device), saving a copy. `destination` is borrowed until `poll` returns the completion. A stored
  /// value whose payload size differs from `destination.size()` is a `miss`. The destination is written only
  /// on a `hit`, after the value's sizes and digest were checked; on any other status it is untouched.
  /// `keep_alive`: see `buffer_owner`.
  /// Errors: `pool_exhausted`.
  result<request_id> get(const content_key& key, std::span<std::byte> destination, buffer_owner keep_alive = {});

  /// Asks which of `keys` have a value (whether their manifest is there), without reading any: pipelined per
  /// server, one round trip on a single node. `found` (as long as `keys`) receives 1 for each key with a
  /// value and 0 for each without; both spans are borrowed until `poll` returns the completion, whose status
  /// is `answered`, or a failure (then `found` is all 0). A key found may still miss on `get` (evicted or
  /// overwritten meanwhile, or corrupt): a probe tells what is worth fetching, `get` what may be used.
  /// `keep_alive`: see `buffer_owner`.
  /// Errors: `pool_exhausted`; `invalid_argument` when the spans' sizes differ.
  result<request_id> probe(std::span<const content_key> keys, std::span<std::uint8_t> found,
                           buffer_owner keep_alive = {});

  /// Moves up to `out.size()` finished requests into `out`, oldest first, and returns how many. Never waits
  /// for I/O (it only takes a lock that the I/O threads hold for a few instructions).
  std::size_t poll(std::span<completion> out);

  /// As `poll`, but waits up to `timeout` for at least one completion. For threads that may block (tests,
  /// tools, a dedicated completion thread), not for the scheduler.
  std::size_t wait(std::span<completion> out, std::chrono::milliseconds timeout);

  /// Requests submitted and not yet returned by `poll`.
  std::size_t in_flight() const noexcept;

  redis_store_stats stats() const noexcept;

  /// The name of a value's manifest key, `<prefix>{<64 hex of key>}:m` (docs/remote-store.md); its chunk
  /// keys replace the final `m` with the write id in hex, ":c" and the chunk index. For tools and tests.
  std::string manifest_key(const content_key& key) const;

  /// The implementation (src/remote/redis_store.cpp); named here only so that the store can own it.
  class impl;

private:
  explicit redis_store(std::unique_ptr<impl> state) noexcept;
  std::unique_ptr<impl> impl_;
};

} // namespace reprise::remote
