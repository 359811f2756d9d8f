// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise::remote::redis_store: the request queue, the I/O threads, the value format and Redis Cluster
// routing over hiredis's blocking API (docs/remote-store.md).
#include <reprise/remote/redis_store.hpp>

#include <hiredis/hiredis.h>

#include <signal.h>
#include <sys/time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <exception>
#include <mutex>
#include <optional>
#include <random>
#include <thread>
#include <utility>

namespace reprise::remote {
namespace {

using clock_type = std::chrono::steady_clock;

constexpr std::size_t min_chunk_bytes = std::size_t{1} << 10;
constexpr std::size_t max_chunk_bytes = std::size_t{256} << 20;
constexpr std::size_t max_header_bytes = std::size_t{16} << 20;
constexpr std::size_t max_key_prefix_bytes = 256;
/// More chunks than this in a manifest is not a value this client wrote (2^20 chunks of 256 MiB).
constexpr std::uint64_t max_chunk_count = std::uint64_t{1} << 20;
/// While the owner of a request's slot is in its reconnect backoff, the cluster's slot map is relearned at
/// most this often (a replica may have been promoted): one CLUSTER SLOTS per I/O thread per interval during
/// an outage, and a failover followed within this long of the cluster agreeing on it.
constexpr std::chrono::milliseconds map_recheck_interval{100};

// ---------------------------------------------------------------------------------------------------------
// The manifest's byte layout (docs/remote-store.md, "Manifest"): little-endian integers at fixed offsets.
constexpr std::size_t tag_bytes = store_value_format.size() + 1; // the tag and a zero byte
constexpr std::size_t off_version = tag_bytes;
constexpr std::size_t off_payload_bytes = off_version + 4;
constexpr std::size_t off_chunk_bytes = off_payload_bytes + 8;
constexpr std::size_t off_chunk_count = off_chunk_bytes + 8;
constexpr std::size_t off_write_id = off_chunk_count + 4;
constexpr std::size_t off_header_bytes = off_write_id + 8;
constexpr std::size_t off_key = off_header_bytes + 4;
constexpr std::size_t off_digest = off_key + 32;
constexpr std::size_t manifest_fixed_bytes = off_digest + 32;
static_assert(manifest_fixed_bytes == 123, "the manifest layout is part of the value format (docs/remote-store.md)");

void put_le(std::string& out, std::size_t offset, std::uint64_t v, int n) noexcept {
  for (int i = 0; i < n; ++i) out[offset + static_cast<std::size_t>(i)] = static_cast<char>((v >> (8 * i)) & 0xFF);
}
std::uint64_t get_le(std::string_view in, std::size_t offset, int n) noexcept {
  std::uint64_t v = 0;
  for (int i = 0; i < n; ++i)
    v |= std::uint64_t{static_cast<unsigned char>(in[offset + static_cast<std::size_t>(i)])} << (8 * i);
  return v;
}

struct manifest_fields {
  std::uint64_t payload_bytes = 0;
  std::uint64_t chunk_bytes = 0;
  std::uint32_t chunk_count = 0; // 0: the payload follows the header in the manifest itself
  std::uint64_t write_id = 0;
  std::uint32_t header_bytes = 0;
  std::array<std::uint8_t, 32> digest{};
};

/// The manifest of a value; `inline_payload` is non-empty only when chunk_count == 0.
std::string encode_manifest(const content_key& key, const manifest_fields& m, std::span<const std::byte> header,
                            std::span<const std::byte> inline_payload) {
  std::string out(manifest_fixed_bytes + header.size() + inline_payload.size(), '\0');
  std::memcpy(out.data(), store_value_format.data(), store_value_format.size());
  put_le(out, off_version, store_value_format_version, 4);
  put_le(out, off_payload_bytes, m.payload_bytes, 8);
  put_le(out, off_chunk_bytes, m.chunk_bytes, 8);
  put_le(out, off_chunk_count, m.chunk_count, 4);
  put_le(out, off_write_id, m.write_id, 8);
  put_le(out, off_header_bytes, m.header_bytes, 4);
  std::memcpy(out.data() + off_key, key.bytes.data(), 32);
  std::memcpy(out.data() + off_digest, m.digest.data(), 32);
  if (!header.empty()) std::memcpy(out.data() + manifest_fixed_bytes, header.data(), header.size());
  if (!inline_payload.empty())
    std::memcpy(out.data() + manifest_fixed_bytes + header.size(), inline_payload.data(), inline_payload.size());
  return out;
}

/// Parses and checks a manifest read back under `key`: nullopt for anything that is not a whole manifest of
/// this format for this key (the caller reports `corrupt`).
std::optional<manifest_fields> decode_manifest(const content_key& key, std::string_view in) {
  if (in.size() < manifest_fixed_bytes) return std::nullopt;
  if (in.substr(0, store_value_format.size()) != store_value_format || in[store_value_format.size()] != '\0')
    return std::nullopt;
  if (get_le(in, off_version, 4) != store_value_format_version) return std::nullopt;
  if (std::memcmp(in.data() + off_key, key.bytes.data(), 32) != 0) return std::nullopt;
  manifest_fields m;
  m.payload_bytes = get_le(in, off_payload_bytes, 8);
  m.chunk_bytes = get_le(in, off_chunk_bytes, 8);
  m.chunk_count = static_cast<std::uint32_t>(get_le(in, off_chunk_count, 4));
  m.write_id = get_le(in, off_write_id, 8);
  m.header_bytes = static_cast<std::uint32_t>(get_le(in, off_header_bytes, 4));
  std::memcpy(m.digest.data(), in.data() + off_digest, 32);
  if (m.header_bytes > max_header_bytes) return std::nullopt;
  const std::uint64_t after_header = in.size() - manifest_fixed_bytes;
  if (after_header < m.header_bytes) return std::nullopt;
  if (m.chunk_count == 0) {
    if (after_header - m.header_bytes != m.payload_bytes) return std::nullopt;
  } else {
    if (after_header != m.header_bytes) return std::nullopt;
    // No writer cuts chunks outside [min_chunk_bytes, max_chunk_bytes], nor chunks a payload that fits one:
    // a manifest that claims so is refused before any chunk is asked for, which bounds the work a forged one
    // causes (2^20 chunks take a payload of at least 1 GiB, which a get into a destination refuses by size).
    if (m.chunk_bytes < min_chunk_bytes || m.chunk_bytes > max_chunk_bytes || m.payload_bytes <= m.chunk_bytes ||
        m.chunk_count > max_chunk_count)
      return std::nullopt;
    if ((m.payload_bytes + m.chunk_bytes - 1) / m.chunk_bytes != m.chunk_count) return std::nullopt;
  }
  return m;
}

/// SHA-256 of header || payload pieces, through OpenSSL EVP (content_key.hpp's digest helper).
class value_digest {
public:
  value_digest() { d_.begin(); }
  void add(const void* p, std::size_t n) noexcept { d_.bytes(p, n); }
  bool finish(std::array<std::uint8_t, 32>& out) noexcept { return d_.finish(out); }

private:
  detail::content_digest d_;
};

std::string hex64(std::uint64_t v) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = digits[v & 0xF];
  return s;
}

timeval to_timeval(std::chrono::milliseconds ms) noexcept {
  timeval tv{};
  tv.tv_sec = static_cast<decltype(tv.tv_sec)>(ms.count() / 1000);
  tv.tv_usec = static_cast<decltype(tv.tv_usec)>((ms.count() % 1000) * 1000);
  return tv;
}

struct endpoint {
  std::string host;
  int port = 6379;
  friend bool operator==(const endpoint&, const endpoint&) = default;
};

/// "host:port" or "host"; an IPv6 address in brackets ("[::1]:6379").
std::optional<endpoint> parse_endpoint(std::string_view s) {
  endpoint e;
  std::string_view port_text;
  if (!s.empty() && s.front() == '[') {
    const std::size_t close = s.find(']');
    if (close == std::string_view::npos) return std::nullopt;
    e.host = std::string(s.substr(1, close - 1));
    if (close + 1 < s.size()) {
      if (s[close + 1] != ':') return std::nullopt;
      port_text = s.substr(close + 2);
    }
  } else {
    const std::size_t colon = s.rfind(':');
    e.host = std::string(s.substr(0, colon));
    if (colon != std::string_view::npos) port_text = s.substr(colon + 1);
    if (colon != std::string_view::npos && s.find(':') != colon) return std::nullopt; // bare IPv6: use brackets
  }
  if (e.host.empty()) return std::nullopt;
  if (!port_text.empty() || (s.find(':') != std::string_view::npos && s.front() != '[')) {
    int port = 0;
    const auto [end, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc{} || end != port_text.data() + port_text.size() || port < 1 || port > 65535)
      return std::nullopt;
    e.port = port;
  }
  return e;
}

struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using reply_ptr = std::unique_ptr<redisReply, reply_deleter>;

struct context_deleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using context_ptr = std::unique_ptr<redisContext, context_deleter>;

/// How one exchange with the servers ended, before the request's own interpretation of the replies.
enum class step : std::uint8_t { ok, timeout, unavailable, server_error };

store_status to_status(step s) noexcept {
  switch (s) {
  case step::timeout: return store_status::timeout;
  case step::unavailable: return store_status::unavailable;
  default: return store_status::server_error;
  }
}

/// An error reply that says the node cannot serve now (loading, failing over, cluster down): unavailable,
/// not a refusal of the command.
store_status error_reply_status(const redisReply& r) noexcept {
  const std::string_view msg(r.str, r.len);
  for (std::string_view transient : {"LOADING", "CLUSTERDOWN", "MASTERDOWN", "TRYAGAIN", "BUSY"})
    if (msg.starts_with(transient)) return store_status::unavailable;
  return store_status::server_error;
}

/// One command of a pipelined batch: up to five arguments, borrowed.
struct command {
  std::array<const char*, 5> argv{};
  std::array<std::size_t, 5> lengths{};
  int argc = 0;
  bool large = false; // flush right after appending it instead of accumulating a copy of everything

  command& arg(std::string_view a) {
    argv[static_cast<std::size_t>(argc)] = a.data();
    lengths[static_cast<std::size_t>(argc)] = a.size();
    ++argc;
    if (a.size() >= (std::size_t{64} << 10)) large = true;
    return *this;
  }
};

} // namespace

// ---------------------------------------------------------------------------------------------------------

struct queued_request {
  request_id id = 0;
  request_kind kind = request_kind::get;
  content_key key;
  std::span<const std::byte> header;
  std::span<const std::byte> payload;
  std::span<std::byte> destination;
  bool has_destination = false;
  std::span<const content_key> keys; ///< probe
  std::span<std::uint8_t> found;     ///< probe
  buffer_owner keep_alive;           ///< released once the spans above are no longer touched
  clock_type::time_point submitted_at{};
};

class redis_store::impl {
public:
  explicit impl(redis_store_options o, std::vector<endpoint> e) : options(std::move(o)), endpoints(std::move(e)) {}

  std::string manifest_key(const content_key& key) const { return value_prefix(key) + "m"; }
  /// `<prefix>{<64 hex>}:`, the start of every key of the value.
  std::string value_prefix(const content_key& key) const {
    std::string s;
    s.reserve(options.key_prefix.size() + 68);
    s += options.key_prefix;
    s += '{';
    s += to_hex(key);
    s += "}:";
    return s;
  }

  result<request_id> submit(queued_request r) {
    std::size_t n = in_flight.load(std::memory_order_relaxed);
    do {
      if (n >= options.max_in_flight) {
        rejected.fetch_add(1, std::memory_order_relaxed);
        return failure{errc::pool_exhausted};
      }
    } while (!in_flight.compare_exchange_weak(n, n + 1, std::memory_order_relaxed));
    r.id = next_id.fetch_add(1, std::memory_order_relaxed);
    r.submitted_at = clock_type::now();
    const request_id id = r.id;
    {
      std::lock_guard lock(queue_mutex);
      queue.push_back(std::move(r));
    }
    queue_cv.notify_one();
    submitted.fetch_add(1, std::memory_order_relaxed);
    return id;
  }

  void complete(completion c) {
    switch (c.status) {
    case store_status::stored: stored.fetch_add(1, std::memory_order_relaxed); break;
    case store_status::answered: probes.fetch_add(1, std::memory_order_relaxed); break;
    case store_status::hit: hits.fetch_add(1, std::memory_order_relaxed); break;
    case store_status::miss: misses.fetch_add(1, std::memory_order_relaxed); break;
    case store_status::corrupt: corrupt.fetch_add(1, std::memory_order_relaxed); break;
    default: failed.fetch_add(1, std::memory_order_relaxed); break;
    }
    {
      std::lock_guard lock(done_mutex);
      done.push_back(std::move(c));
    }
    done_cv.notify_all();
  }

  std::size_t take(std::span<completion> out) {
    std::size_t n = 0;
    {
      std::lock_guard lock(done_mutex);
      n = std::min(out.size(), done.size());
      for (std::size_t i = 0; i < n; ++i) {
        out[i] = std::move(done.front());
        done.pop_front();
      }
    }
    in_flight.fetch_sub(n, std::memory_order_relaxed);
    return n;
  }

  void io_thread_main();

  const redis_store_options options;
  const std::vector<endpoint> endpoints;

  std::mutex queue_mutex;
  std::condition_variable queue_cv;
  std::deque<queued_request> queue;
  bool stopping = false;

  std::mutex done_mutex;
  std::condition_variable done_cv;
  std::deque<completion> done;

  std::atomic<std::size_t> in_flight{0};
  std::atomic<request_id> next_id{1};
  std::atomic<std::uint64_t> submitted{0}, rejected{0}, stored{0}, hits{0}, misses{0}, corrupt{0}, failed{0},
      redirects{0}, reconnects{0}, probes{0}, probed_keys{0}, probed_found{0};

  std::vector<std::thread> threads;
};

namespace {

/// One I/O thread's view of the servers: its connections, reconnect backoff and the cluster slot map. Each
/// I/O thread has its own, so none of this is shared or locked.
class router {
public:
  router(redis_store::impl& store, std::span<const endpoint> seeds) : store_(store), options_(store.options) {
    for (const endpoint& e : seeds) add_node(e);
    seed_count_ = nodes_.size();
    if (options_.topology == store_topology::single_node) mode_ = mode::single;
    else if (options_.topology == store_topology::cluster || seed_count_ > 1) mode_ = mode::cluster;
    slot_owner_.assign(cluster_slot_count, -1);
  }

  /// Sends `commands` (all keys in `slot`) pipelined and collects one reply per command into `replies`,
  /// following MOVED and ASK redirects per command. The replies are the servers' final answers: values, nil
  /// or error replies other than redirects.
  step run(std::uint16_t slot, std::span<const command> commands, std::vector<reply_ptr>& replies) {
    replies.clear();
    replies.resize(commands.size());
    std::vector<std::size_t> pending(commands.size());
    for (std::size_t i = 0; i < pending.size(); ++i) pending[i] = i;

    int target = -1;
    if (const step s = route(slot, target); s != step::ok) return s;
    bool asking = false, rerouted = false;
    for (std::uint32_t redirects = 0;;) {
      std::vector<std::size_t> redirected;
      std::optional<endpoint> moved_to, ask_to;
      if (const step s = exchange(target, commands, pending, asking, replies, redirected, moved_to, ask_to);
          s != step::ok) {
        // The node cannot be reached (refused, reset, or in its backoff). In a cluster its replica may own
        // the slot by now: relearn the map (`fail` marked it stale) and, when the slot has another owner,
        // send the commands there, once. GET, SET and EXISTS may be repeated.
        if (s != step::unavailable || mode_ != mode::cluster || rerouted) return s;
        rerouted = true;
        int owner = -1;
        if (route(slot, owner) != step::ok || owner == target) return s;
        target = owner;
        asking = false;
        continue;
      }
      if (redirected.empty()) return step::ok;
      store_.redirects.fetch_add(redirected.size(), std::memory_order_relaxed);
      if (moved_to) {
        // The slot has a new owner: remember it, and relearn the whole map from it (a resharding rarely
        // moves one slot only).
        target = node_for(*moved_to);
        slot_owner_[slot] = target;
        refresh_map(target);
        if (slot_owner_[slot] < 0) slot_owner_[slot] = target;
        asking = false;
      } else {
        target = node_for(*ask_to); // a one-time redirect during a migration: the map stays as it is
        asking = true;
      }
      pending = std::move(redirected);
      if (++redirects > options_.max_redirects) return step::server_error;
    }
  }

  /// As `run`, for commands whose keys lie in different slots (command i's in `slots[i]`): pipelined to each
  /// node that owns some of them, one exchange per node; a command redirected is run again on its own.
  step run_spread(std::span<const std::uint16_t> slots, std::span<const command> commands,
                  std::vector<reply_ptr>& replies) {
    replies.clear();
    replies.resize(commands.size());
    std::vector<std::vector<std::size_t>> by_node;
    for (std::size_t i = 0; i < commands.size(); ++i) {
      int target = -1;
      if (const step s = route(slots[i], target); s != step::ok) return s;
      if (by_node.size() <= static_cast<std::size_t>(target)) by_node.resize(static_cast<std::size_t>(target) + 1);
      by_node[static_cast<std::size_t>(target)].push_back(i);
    }
    for (std::size_t t = 0; t < by_node.size(); ++t) {
      if (by_node[t].empty()) continue;
      std::vector<std::size_t> redirected;
      std::optional<endpoint> moved_to, ask_to;
      if (const step s = exchange(static_cast<int>(t), commands, by_node[t], false, replies, redirected, moved_to, ask_to);
          s != step::ok)
        return s;
      for (const std::size_t i : redirected) {
        store_.redirects.fetch_add(1, std::memory_order_relaxed);
        std::vector<reply_ptr> one;
        if (const step s = run(slots[i], commands.subspan(i, 1), one); s != step::ok) return s;
        replies[i] = std::move(one[0]);
      }
    }
    return step::ok;
  }

private:
  enum class mode : std::uint8_t { unknown, single, cluster };

  struct node {
    endpoint address;
    context_ptr context;
    clock_type::time_point retry_at{};
    std::chrono::milliseconds backoff{};
    bool connected_before = false;
  };

  int add_node(const endpoint& e) {
    nodes_.push_back(node{e, nullptr, {}, options_.reconnect_backoff_initial, false});
    return static_cast<int>(nodes_.size() - 1);
  }
  int node_for(const endpoint& e) {
    for (std::size_t i = 0; i < nodes_.size(); ++i)
      if (nodes_[i].address == e) return static_cast<int>(i);
    return add_node(e);
  }

  /// A connection to node `i`, established if needed, unless the node is in its backoff.
  step connect(int i) {
    node& n = nodes_[static_cast<std::size_t>(i)];
    if (n.context) return step::ok;
    if (clock_type::now() < n.retry_at) return step::unavailable;
    context_ptr c(redisConnectWithTimeout(n.address.host.c_str(), n.address.port,
                                          to_timeval(options_.connect_timeout)));
    const int saved_errno = errno;
    if (!c || c->err != 0) {
      const bool timed_out = c && c->err == REDIS_ERR_IO && saved_errno == ETIMEDOUT;
      fail(i);
      return timed_out ? step::timeout : step::unavailable;
    }
    if (redisSetTimeout(c.get(), to_timeval(options_.command_timeout)) != REDIS_OK) {
      fail(i);
      return step::unavailable;
    }
    n.context = std::move(c);
    n.backoff = options_.reconnect_backoff_initial;
    if (n.connected_before) store_.reconnects.fetch_add(1, std::memory_order_relaxed);
    n.connected_before = true;
    return step::ok;
  }

  /// Whether node `i` is not connected and may not be tried yet.
  bool backing_off(int i) const {
    const node& n = nodes_[static_cast<std::size_t>(i)];
    return !n.context && clock_type::now() < n.retry_at;
  }

  /// Drops node `i`'s connection and starts (or extends) its backoff.
  void fail(int i) {
    node& n = nodes_[static_cast<std::size_t>(i)];
    n.context.reset();
    n.retry_at = clock_type::now() + n.backoff;
    n.backoff = std::min(n.backoff * 2, options_.reconnect_backoff_max);
    if (mode_ == mode::cluster) map_stale_ = true; // a failover may have moved its slots
  }

  /// The I/O error of a context, as a step: a read or write that ran into its timeout is `timeout`.
  static step io_error(const redisContext& c, int saved_errno) noexcept {
    if (c.err == REDIS_ERR_IO &&
        (saved_errno == EAGAIN || saved_errno == EWOULDBLOCK || saved_errno == ETIMEDOUT ||
         std::strstr(c.errstr, "temporarily unavailable") != nullptr))
      return step::timeout;
    return step::unavailable;
  }

  /// The node that owns `slot`: learns whether the store is a cluster and its slot map when needed.
  step route(std::uint16_t slot, int& target) {
    if (mode_ == mode::unknown) {
      // One endpoint, automatic: ask it. A server without cluster support answers CLUSTER SLOTS with an error.
      if (const step s = connect(0); s != step::ok) return s;
      reply_ptr r;
      if (const step s = simple(0, {"CLUSTER", "SLOTS"}, r); s != step::ok) return s;
      if (r->type == REDIS_REPLY_ARRAY) {
        mode_ = mode::cluster;
        load_map(0, *r);
      } else {
        mode_ = mode::single;
      }
    }
    if (mode_ == mode::single) {
      target = 0;
      return step::ok;
    }
    // An owner in its reconnect backoff may have been failed over since the map was learned: relearn it, at
    // most once per map_recheck_interval, instead of failing the slot's requests until the backoff ends.
    if (const int owner = slot_owner_[slot]; owner >= 0 && backing_off(owner) &&
                                             clock_type::now() - map_learned_at_ >= map_recheck_interval)
      map_stale_ = true;
    if (map_stale_ || slot_owner_[slot] < 0) {
      // Ask every known node in turn (seeds first) until one answers.
      for (std::size_t i = 0; i < nodes_.size() && (map_stale_ || slot_owner_[slot] < 0); ++i)
        refresh_map(static_cast<int>(i));
    }
    target = slot_owner_[slot];
    return target < 0 ? step::unavailable : step::ok;
  }

  /// CLUSTER SLOTS from node `i`; on success replaces the map.
  void refresh_map(int i) {
    if (connect(i) != step::ok) return;
    reply_ptr r;
    if (simple(i, {"CLUSTER", "SLOTS"}, r) != step::ok || r->type != REDIS_REPLY_ARRAY) return;
    load_map(i, *r);
  }

  /// Reads a CLUSTER SLOTS reply: [[first, last, [host, port, id], replicas...], ...]. Only primaries are used.
  void load_map(int asked, const redisReply& r) {
    std::vector<int> owner(cluster_slot_count, -1);
    for (std::size_t k = 0; k < r.elements; ++k) {
      const redisReply* range = r.element[k];
      if (range->type != REDIS_REPLY_ARRAY || range->elements < 3) continue;
      const redisReply* first = range->element[0];
      const redisReply* last = range->element[1];
      const redisReply* primary = range->element[2];
      if (first->type != REDIS_REPLY_INTEGER || last->type != REDIS_REPLY_INTEGER ||
          primary->type != REDIS_REPLY_ARRAY || primary->elements < 2 ||
          primary->element[0]->type != REDIS_REPLY_STRING || primary->element[1]->type != REDIS_REPLY_INTEGER)
        continue;
      endpoint e{std::string(primary->element[0]->str, primary->element[0]->len),
                 static_cast<int>(primary->element[1]->integer)};
      // An empty or "?" host means "the address you reached me at".
      if (e.host.empty() || e.host == "?") e.host = nodes_[static_cast<std::size_t>(asked)].address.host;
      const int n = node_for(e);
      for (long long s = std::max(0LL, first->integer);
           s <= std::min<long long>(last->integer, cluster_slot_count - 1); ++s)
        owner[static_cast<std::size_t>(s)] = n;
    }
    slot_owner_ = std::move(owner);
    map_stale_ = false;
    map_learned_at_ = clock_type::now();
  }

  /// One command on node `i` (connected), its reply in `out`.
  step simple(int i, std::initializer_list<std::string_view> args, reply_ptr& out) {
    command c;
    for (std::string_view a : args) c.arg(a);
    std::vector<reply_ptr> replies(1);
    std::vector<std::size_t> pending{0}, redirected;
    std::optional<endpoint> moved, ask;
    const step s = exchange(i, std::span<const command>(&c, 1), pending, false, replies, redirected, moved, ask);
    if (s == step::ok && !replies[0]) return step::server_error; // a redirect where none can be
    out = std::move(replies[0]);
    return s;
  }

  /// Pipelines `commands[pending]` to node `target` (each after ASKING when `asking`) and reads their
  /// replies. Redirected commands are listed in `redirected` with the first MOVED / ASK address seen. A
  /// failed exchange on a connection that was already open is retried once on a new one: the server may
  /// have closed an idle connection (a restart), and GET and SET may be repeated.
  step exchange(int target, std::span<const command> commands, std::span<const std::size_t> pending, bool asking,
                std::vector<reply_ptr>& replies, std::vector<std::size_t>& redirected,
                std::optional<endpoint>& moved_to, std::optional<endpoint>& ask_to) {
    for (int attempt = 0;; ++attempt) {
      const bool reused = nodes_[static_cast<std::size_t>(target)].context != nullptr;
      if (const step s = connect(target); s != step::ok) return s;
      redirected.clear();
      moved_to.reset();
      ask_to.reset();
      const step s = exchange_once(target, commands, pending, asking, replies, redirected, moved_to, ask_to);
      if (s == step::ok) return s;
      fail(target);
      if (!(reused && attempt == 0 && s == step::unavailable)) return s;
      nodes_[static_cast<std::size_t>(target)].retry_at = {}; // retry now, without waiting for the backoff
    }
  }

  step exchange_once(int target, std::span<const command> commands, std::span<const std::size_t> pending,
                     bool asking, std::vector<reply_ptr>& replies, std::vector<std::size_t>& redirected,
                     std::optional<endpoint>& moved_to, std::optional<endpoint>& ask_to) {
    redisContext* c = nodes_[static_cast<std::size_t>(target)].context.get();
    static constexpr const char* asking_argv[] = {"ASKING"};
    static constexpr std::size_t asking_len[] = {6};
    for (std::size_t i : pending) {
      const command& cmd = commands[i];
      if (asking && redisAppendCommandArgv(c, 1, const_cast<const char**>(asking_argv), asking_len) != REDIS_OK)
        return step::unavailable;
      if (redisAppendCommandArgv(c, cmd.argc, const_cast<const char**>(cmd.argv.data()), cmd.lengths.data()) !=
          REDIS_OK)
        return step::unavailable;
      if (cmd.large) {
        // Write it out now, so that the client never holds a formatted copy of a whole large value.
        int done = 0;
        while (done == 0) {
          if (redisBufferWrite(c, &done) != REDIS_OK) return io_error(*c, errno);
        }
      }
    }
    for (std::size_t i : pending) {
      void* raw = nullptr;
      if (asking) {
        if (redisGetReply(c, &raw) != REDIS_OK) return io_error(*c, errno);
        freeReplyObject(raw);
        raw = nullptr;
      }
      if (redisGetReply(c, &raw) != REDIS_OK) return io_error(*c, errno);
      reply_ptr r(static_cast<redisReply*>(raw));
      if (r->type == REDIS_REPLY_ERROR) {
        const std::string_view msg(r->str, r->len);
        const bool moved = msg.starts_with("MOVED ");
        if (moved || msg.starts_with("ASK ")) {
          std::optional<endpoint> to = redirect_address(msg, target);
          if (!to) return step::server_error;
          if (moved && !moved_to) moved_to = to;
          if (!moved && !ask_to) ask_to = to;
          redirected.push_back(i);
          continue;
        }
      }
      replies[i] = std::move(r);
    }
    return step::ok;
  }

  /// "MOVED <slot> <host>:<port>" / "ASK <slot> <host>:<port>"; an empty host is the node that answered.
  std::optional<endpoint> redirect_address(std::string_view msg, int answered) const {
    const std::size_t space = msg.rfind(' ');
    if (space == std::string_view::npos) return std::nullopt;
    const std::string_view where = msg.substr(space + 1);
    const std::size_t colon = where.rfind(':');
    if (colon == std::string_view::npos) return std::nullopt;
    endpoint e;
    e.host = std::string(where.substr(0, colon));
    if (e.host.empty()) e.host = nodes_[static_cast<std::size_t>(answered)].address.host;
    const std::string_view port = where.substr(colon + 1);
    const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), e.port);
    if (ec != std::errc{} || end != port.data() + port.size() || e.port < 1 || e.port > 65535) return std::nullopt;
    return e;
  }

  redis_store::impl& store_;
  const redis_store_options& options_;
  std::vector<node> nodes_;
  std::size_t seed_count_ = 0;
  mode mode_ = mode::unknown;
  std::vector<int> slot_owner_;
  bool map_stale_ = true;
  clock_type::time_point map_learned_at_{};
};

/// Executes requests on one I/O thread.
class request_executor {
public:
  explicit request_executor(redis_store::impl& store)
      : store_(store), options_(store.options), router_(store, store.endpoints),
        random_(std::random_device{}() ^ (std::uint64_t{std::random_device{}()} << 32)),
        ttl_text_(std::to_string(options_.ttl.count())) {}

  completion execute(const queued_request& r) {
    completion c;
    c.id = r.id;
    c.kind = r.kind;
    c.status = r.kind == request_kind::put ? put(r) : r.kind == request_kind::get ? get(r, c) : probe(r);
    return c;
  }

private:
  void add_expiry(command& cmd) const {
    if (options_.ttl.count() > 0) cmd.arg("PX").arg(ttl_text_);
  }

  store_status put(const queued_request& r) {
    manifest_fields m;
    m.payload_bytes = r.payload.size();
    m.header_bytes = static_cast<std::uint32_t>(r.header.size());
    m.write_id = random_();
    value_digest d;
    d.add(r.header.data(), r.header.size());
    d.add(r.payload.data(), r.payload.size());
    if (!d.finish(m.digest)) return store_status::server_error;

    const std::string prefix = store_.value_prefix(r.key);
    const std::string manifest_name = prefix + "m";
    const std::uint16_t slot = cluster_slot(manifest_name);
    const bool chunked = r.payload.size() > options_.chunk_bytes;
    if (chunked) {
      // Chunks first; the manifest only after every chunk is acknowledged, so a reader never finds a
      // manifest whose chunks were not written.
      m.chunk_bytes = options_.chunk_bytes;
      m.chunk_count = static_cast<std::uint32_t>((r.payload.size() + m.chunk_bytes - 1) / m.chunk_bytes);
      std::vector<std::string> names(m.chunk_count);
      std::vector<command> commands(m.chunk_count);
      const std::string chunk_prefix = prefix + hex64(m.write_id) + ":c";
      for (std::uint32_t i = 0; i < m.chunk_count; ++i) {
        names[i] = chunk_prefix + std::to_string(i);
        const std::size_t begin = std::size_t{i} * options_.chunk_bytes;
        const std::size_t size = std::min<std::size_t>(options_.chunk_bytes, r.payload.size() - begin);
        commands[i]
            .arg("SET")
            .arg(names[i])
            .arg(std::string_view(reinterpret_cast<const char*>(r.payload.data()) + begin, size));
        add_expiry(commands[i]);
      }
      std::vector<reply_ptr> replies;
      if (const step s = router_.run(slot, commands, replies); s != step::ok) return to_status(s);
      for (const reply_ptr& reply : replies)
        if (const store_status s = expect_ok(*reply); s != store_status::stored) return s;
    }
    const std::string manifest =
        encode_manifest(r.key, m, r.header, chunked ? std::span<const std::byte>{} : r.payload);
    command cmd;
    cmd.arg("SET").arg(manifest_name).arg(manifest);
    add_expiry(cmd);
    std::vector<reply_ptr> replies;
    if (const step s = router_.run(slot, std::span<const command>(&cmd, 1), replies); s != step::ok)
      return to_status(s);
    return expect_ok(*replies[0]);
  }

  store_status probe(const queued_request& r) {
    std::fill(r.found.begin(), r.found.end(), std::uint8_t{0});
    std::vector<std::string> names(r.keys.size());
    std::vector<std::uint16_t> slots(r.keys.size());
    std::vector<command> commands(r.keys.size());
    for (std::size_t i = 0; i < r.keys.size(); ++i) {
      names[i] = store_.value_prefix(r.keys[i]) + "m";
      slots[i] = cluster_slot(names[i]);
      commands[i].arg("EXISTS").arg(names[i]);
    }
    std::vector<reply_ptr> replies;
    if (const step s = router_.run_spread(slots, commands, replies); s != step::ok) return to_status(s);
    for (const reply_ptr& reply : replies) {
      if (reply->type == REDIS_REPLY_ERROR) return error_reply_status(*reply);
      if (reply->type != REDIS_REPLY_INTEGER) return store_status::server_error;
    }
    std::uint64_t n = 0;
    for (std::size_t i = 0; i < replies.size(); ++i) {
      r.found[i] = replies[i]->integer > 0 ? 1 : 0;
      n += r.found[i];
    }
    store_.probed_keys.fetch_add(r.keys.size(), std::memory_order_relaxed);
    store_.probed_found.fetch_add(n, std::memory_order_relaxed);
    return store_status::answered;
  }

  static store_status expect_ok(const redisReply& reply) noexcept {
    if (reply.type == REDIS_REPLY_STATUS && std::string_view(reply.str, reply.len) == "OK") return store_status::stored;
    if (reply.type == REDIS_REPLY_ERROR) return error_reply_status(reply);
    return store_status::server_error;
  }

  store_status get(const queued_request& r, completion& out) {
    const std::string prefix = store_.value_prefix(r.key);
    const std::string manifest_name = prefix + "m";
    const std::uint16_t slot = cluster_slot(manifest_name);
    command cmd;
    cmd.arg("GET").arg(manifest_name);
    std::vector<reply_ptr> replies;
    if (const step s = router_.run(slot, std::span<const command>(&cmd, 1), replies); s != step::ok)
      return to_status(s);
    const redisReply& manifest_reply = *replies[0];
    if (manifest_reply.type == REDIS_REPLY_NIL) return store_status::miss;
    if (manifest_reply.type == REDIS_REPLY_ERROR) return error_reply_status(manifest_reply);
    if (manifest_reply.type != REDIS_REPLY_STRING) return store_status::corrupt;
    const std::string_view manifest(manifest_reply.str, manifest_reply.len);
    const std::optional<manifest_fields> m = decode_manifest(r.key, manifest);
    if (!m) return store_status::corrupt;
    if (r.has_destination && m->payload_bytes != r.destination.size()) return store_status::miss;
    const std::string_view header = manifest.substr(manifest_fixed_bytes, m->header_bytes);

    // The payload's pieces, checked and digested before anything is handed out.
    std::vector<std::string_view> pieces;
    std::vector<reply_ptr> chunk_replies;
    if (m->chunk_count == 0) {
      pieces.push_back(manifest.substr(manifest_fixed_bytes + m->header_bytes));
    } else {
      const std::string chunk_prefix = prefix + hex64(m->write_id) + ":c";
      std::vector<std::string> names(m->chunk_count);
      std::vector<command> commands(m->chunk_count);
      for (std::uint32_t i = 0; i < m->chunk_count; ++i) {
        names[i] = chunk_prefix + std::to_string(i);
        commands[i].arg("GET").arg(names[i]);
      }
      if (const step s = router_.run(slot, commands, chunk_replies); s != step::ok) return to_status(s);
      bool missing = false;
      for (std::uint32_t i = 0; i < m->chunk_count; ++i) {
        const redisReply& c = *chunk_replies[i];
        if (c.type == REDIS_REPLY_NIL) {
          missing = true; // evicted or expired: the value is gone, not wrong
          continue;
        }
        if (c.type == REDIS_REPLY_ERROR) return error_reply_status(c);
        const std::uint64_t expected = i + 1 < m->chunk_count
                                           ? m->chunk_bytes
                                           : m->payload_bytes - std::uint64_t{i} * m->chunk_bytes;
        if (c.type != REDIS_REPLY_STRING || c.len != expected) return store_status::corrupt;
        pieces.emplace_back(c.str, c.len);
      }
      if (missing) return store_status::miss;
    }
    value_digest d;
    d.add(header.data(), header.size());
    for (std::string_view p : pieces) d.add(p.data(), p.size());
    std::array<std::uint8_t, 32> digest{};
    if (!d.finish(digest)) return store_status::server_error;
    if (digest != m->digest) return store_status::corrupt;

    out.header.resize(header.size());
    if (!header.empty()) std::memcpy(out.header.data(), header.data(), header.size());
    out.payload_bytes = static_cast<std::size_t>(m->payload_bytes);
    std::byte* dst = nullptr;
    if (r.has_destination) {
      dst = r.destination.data();
    } else {
      out.payload.resize(out.payload_bytes);
      dst = out.payload.data();
    }
    for (std::string_view p : pieces) {
      if (!p.empty()) std::memcpy(dst, p.data(), p.size());
      dst += p.size();
    }
    return store_status::hit;
  }

  redis_store::impl& store_;
  const redis_store_options& options_;
  router router_;
  std::mt19937_64 random_;
  std::string ttl_text_;
};

} // namespace

void redis_store::impl::io_thread_main() {
  // A write to a connection the server closed raises SIGPIPE, whose default action ends the process. Blocked
  // here, in the threads that write, it stays pending and the write fails with EPIPE instead; the
  // application's own handling of the signal is left alone.
  sigset_t pipe_signal;
  sigemptyset(&pipe_signal);
  sigaddset(&pipe_signal, SIGPIPE);
  pthread_sigmask(SIG_BLOCK, &pipe_signal, nullptr);

  request_executor executor(*this);
  for (;;) {
    // `r` ends with each iteration, after its completion is queued: its keep-alive owner is released once
    // nothing here touches the request's borrowed bytes again, and not held while the thread waits.
    queued_request r;
    {
      std::unique_lock lock(queue_mutex);
      queue_cv.wait(lock, [&] { return stopping || !queue.empty(); });
      if (stopping) return;
      r = std::move(queue.front());
      queue.pop_front();
    }
    completion c;
    if (options.queue_timeout.count() > 0 && clock_type::now() - r.submitted_at >= options.queue_timeout) {
      c.id = r.id;
      c.kind = r.kind;
      c.status = store_status::timeout;
      complete(std::move(c));
      continue;
    }
    try {
      c = executor.execute(r);
    } catch (const std::exception&) {
      // Out of memory in the client (a reply or a buffer): the request fails, the thread goes on.
      c = completion{};
      c.id = r.id;
      c.kind = r.kind;
      c.status = store_status::server_error;
    }
    complete(std::move(c));
  }
}

// ---------------------------------------------------------------------------------------------------------

result<std::unique_ptr<redis_store>> redis_store::create(redis_store_options options) {
  if (options.endpoints.empty()) return failure{errc::invalid_argument};
  std::vector<endpoint> endpoints;
  for (const std::string& text : options.endpoints) {
    std::optional<endpoint> e = parse_endpoint(text);
    if (!e) return failure{errc::invalid_argument};
    endpoints.push_back(std::move(*e));
  }
  if (options.connect_timeout.count() <= 0 || options.command_timeout.count() <= 0)
    return failure{errc::invalid_argument};
  if (options.chunk_bytes < min_chunk_bytes || options.chunk_bytes > max_chunk_bytes)
    return failure{errc::invalid_argument};
  if (options.key_prefix.size() > max_key_prefix_bytes ||
      options.key_prefix.find_first_of("{}") != std::string::npos)
    return failure{errc::invalid_argument};
  if (options.ttl.count() < 0 || options.queue_timeout.count() < 0) return failure{errc::invalid_argument};
  if (options.io_threads < 1 || options.io_threads > 64) return failure{errc::invalid_argument};
  if (options.max_in_flight < 1 || options.max_in_flight > (1u << 20)) return failure{errc::invalid_argument};
  if (options.reconnect_backoff_initial.count() <= 0 ||
      options.reconnect_backoff_max < options.reconnect_backoff_initial)
    return failure{errc::invalid_argument};

  auto state = std::make_unique<impl>(std::move(options), std::move(endpoints));
  std::unique_ptr<redis_store> store(new redis_store(std::move(state)));
  try {
    for (std::uint32_t i = 0; i < store->impl_->options.io_threads; ++i)
      store->impl_->threads.emplace_back([s = store->impl_.get()] { s->io_thread_main(); });
  } catch (const std::system_error&) {
    return failure{errc::unsupported_config}; // the destructor stops the threads already started
  }
  return store;
}

redis_store::redis_store(std::unique_ptr<impl> state) noexcept : impl_(std::move(state)) {}

redis_store::~redis_store() {
  {
    std::lock_guard lock(impl_->queue_mutex);
    impl_->stopping = true;
  }
  impl_->queue_cv.notify_all();
  for (std::thread& t : impl_->threads) t.join();
}

result<request_id> redis_store::put(const content_key& key, std::span<const std::byte> header,
                                    std::span<const std::byte> payload, buffer_owner keep_alive) {
  if (header.size() > max_header_bytes) return failure{errc::invalid_argument};
  queued_request r;
  r.kind = request_kind::put;
  r.key = key;
  r.header = header;
  r.payload = payload;
  r.keep_alive = std::move(keep_alive);
  return impl_->submit(std::move(r));
}

result<request_id> redis_store::probe(std::span<const content_key> keys, std::span<std::uint8_t> found,
                                      buffer_owner keep_alive) {
  if (keys.size() != found.size()) return failure{errc::invalid_argument};
  queued_request r;
  r.kind = request_kind::probe;
  r.keys = keys;
  r.found = found;
  r.keep_alive = std::move(keep_alive);
  return impl_->submit(std::move(r));
}

result<request_id> redis_store::get(const content_key& key) {
  queued_request r;
  r.kind = request_kind::get;
  r.key = key;
  return impl_->submit(std::move(r));
}

result<request_id> redis_store::get(const content_key& key, std::span<std::byte> destination,
                                    buffer_owner keep_alive) {
  queued_request r;
  r.kind = request_kind::get;
  r.key = key;
  r.destination = destination;
  r.has_destination = true;
  r.keep_alive = std::move(keep_alive);
  return impl_->submit(std::move(r));
}

std::size_t redis_store::poll(std::span<completion> out) { return impl_->take(out); }

std::size_t redis_store::wait(std::span<completion> out, std::chrono::milliseconds timeout) {
  if (out.empty()) return 0;
  {
    std::unique_lock lock(impl_->done_mutex);
    impl_->done_cv.wait_for(lock, timeout, [&] { return !impl_->done.empty(); });
  }
  return impl_->take(out);
}

std::size_t redis_store::in_flight() const noexcept { return impl_->in_flight.load(std::memory_order_relaxed); }

redis_store_stats redis_store::stats() const noexcept {
  const auto get = [](const std::atomic<std::uint64_t>& a) { return a.load(std::memory_order_relaxed); };
  redis_store_stats s;
  s.submitted = get(impl_->submitted);
  s.rejected = get(impl_->rejected);
  s.stored = get(impl_->stored);
  s.hits = get(impl_->hits);
  s.misses = get(impl_->misses);
  s.probes = get(impl_->probes);
  s.probed_keys = get(impl_->probed_keys);
  s.probed_found = get(impl_->probed_found);
  s.corrupt = get(impl_->corrupt);
  s.failed = get(impl_->failed);
  s.redirects = get(impl_->redirects);
  s.reconnects = get(impl_->reconnects);
  return s;
}

std::string redis_store::manifest_key(const content_key& key) const { return impl_->manifest_key(key); }

} // namespace reprise::remote
