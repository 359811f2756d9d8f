// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers of the tests that run against real redis-server processes: free loopback ports, a redis-server child
// in a temporary directory of its own, a Redis Cluster of such children (with replicas, to kill a primary and
// watch its replica take over), raw hiredis connections (to corrupt stored values by hand), and the skip rule
// (exit 77, which CTest reports as skipped) where redis-server is not installed.

#include <hiredis/hiredis.h>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace reprise::testing {

using namespace std::chrono_literals;

using steady = std::chrono::steady_clock;

inline bool redis_server_installed() {
  return std::system("command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1") == 0;
}

/// Ends the test case as skipped (CTest: SKIP_RETURN_CODE 77) where no redis-server is installed.
inline void require_redis_server() {
  if (redis_server_installed()) return;
  MESSAGE("redis-server / redis-cli not on PATH: skipped (Debian: redis-server redis-tools)");
  std::fflush(nullptr);
  std::_Exit(77);
}

/// A loopback port nothing listens on right now.
inline int free_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  REQUIRE(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  socklen_t len = sizeof addr;
  REQUIRE(::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0);
  ::close(fd);
  return ntohs(addr.sin_port);
}

inline bool port_is_free(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  REQUIRE(fd >= 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  const bool free = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0;
  ::close(fd);
  return free;
}

/// A port for a cluster node: it and its cluster bus port (port + 10000) are free, so below the ephemeral
/// range that free_port draws from.
inline int free_cluster_port() {
  static std::uint32_t next = 20000 + static_cast<std::uint32_t>(::getpid()) % 9000;
  for (int tries = 0; tries < 1000; ++tries) {
    const int port = static_cast<int>(next);
    next = next >= 29999 ? 20000 : next + 1;
    if (port_is_free(port) && port_is_free(port + 10000)) return port;
  }
  FAIL("no free port pair for a cluster node");
  return 0;
}

struct context_deleter {
  void operator()(redisContext* c) const noexcept { redisFree(c); }
};
using raw_connection = std::unique_ptr<redisContext, context_deleter>;
struct reply_deleter {
  void operator()(redisReply* r) const noexcept { freeReplyObject(r); }
};
using raw_reply = std::unique_ptr<redisReply, reply_deleter>;

inline raw_connection raw_connect(int port) {
  const timeval tv{0, 200000};
  raw_connection c(redisConnectWithTimeout("127.0.0.1", port, tv));
  if (!c || c->err != 0) return nullptr;
  const timeval command_tv{5, 0};
  redisSetTimeout(c.get(), command_tv);
  return c;
}

/// One command through a raw hiredis connection; binary-safe arguments.
inline raw_reply raw(redisContext* c, const std::vector<std::string>& args) {
  std::vector<const char*> argv;
  std::vector<std::size_t> lengths;
  for (const std::string& a : args) {
    argv.push_back(a.data());
    lengths.push_back(a.size());
  }
  return raw_reply(static_cast<redisReply*>(
      redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lengths.data())));
}
inline std::string raw_string(redisContext* c, const std::vector<std::string>& args) {
  raw_reply r = raw(c, args);
  if (!r || (r->type != REDIS_REPLY_STRING && r->type != REDIS_REPLY_STATUS)) return {};
  return std::string(r->str, r->len);
}

/// A redis-server child process in a temporary directory of its own; killed by the destructor.
class redis_server {
public:
  explicit redis_server(std::vector<std::string> extra = {}, int port = 0) : port_(port ? port : free_port()) {
    char dir_template[] = "/tmp/reprise-redis-XXXXXX";
    REQUIRE(::mkdtemp(dir_template) != nullptr);
    dir_ = dir_template;
    extra_ = std::move(extra);
    start();
  }
  ~redis_server() {
    kill();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }
  redis_server(const redis_server&) = delete;
  redis_server& operator=(const redis_server&) = delete;

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }

  /// Starts the server (again, on the same port) and waits until it answers PING.
  void start() {
    std::vector<std::string> args{"redis-server", "--port", std::to_string(port_), "--bind", "127.0.0.1",
                                  "--save", "", "--appendonly", "no", "--daemonize", "no", "--dir", dir_,
                                  "--logfile", "redis.log", "--protected-mode", "no"};
    args.insert(args.end(), extra_.begin(), extra_.end());
    // argv is built before the fork: the child may only exec (a test's store threads may hold the allocator).
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::execvp("redis-server", argv.data());
      std::_Exit(127);
    }
    const auto deadline = steady::now() + 10s;
    while (steady::now() < deadline) {
      if (raw_connection c = raw_connect(port_)) {
        if (raw_string(c.get(), {"PING"}) == "PONG") return;
      }
      std::this_thread::sleep_for(20ms);
    }
    FAIL("redis-server on port " << port_ << " did not answer PING");
  }
  void kill() {
    if (pid_ <= 0) return;
    ::kill(pid_, SIGCONT);
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, nullptr, 0);
    pid_ = -1;
  }
  bool running() const { return pid_ > 0; }
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }
  raw_connection connect() const { return raw_connect(port_); }

private:
  int port_;
  std::string dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

/// The value of `field` in an INFO reply ("field:value" lines), or "" when absent.
inline std::string info_field(const std::string& info, const std::string& field) {
  const std::string needle = field + ":";
  std::size_t at = info.find(needle);
  while (at != std::string::npos && at != 0 && info[at - 1] != '\n') at = info.find(needle, at + 1);
  if (at == std::string::npos) return {};
  at += needle.size();
  return info.substr(at, info.find_first_of("\r\n", at) - at);
}
/// `info_field` as a number, or -1 when absent or not a number.
inline long long info_number(const std::string& info, const std::string& field) {
  const std::string text = info_field(info, field);
  long long v = -1;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  return ec == std::errc{} && end == text.data() + text.size() ? v : -1;
}

/// How `redis_cluster` lays a cluster out.
struct cluster_layout {
  int primaries = 3;
  int replicas = 0; ///< per primary
  /// cluster-node-timeout: a node that does not answer for this long is flagged failing; with replicas, the
  /// replica of a primary that died is promoted about one to two timeouts later.
  std::chrono::milliseconds node_timeout{3000};
};

/// A Redis Cluster of redis_server children on loopback ports, created with `redis-cli --cluster create`.
/// Ready once constructed: every node reports cluster_state:ok and every replica has caught up with its
/// primary. Node i is `nodes[i]`; which nodes redis-cli made primaries is asked of the cluster (`owner`,
/// `replica_of`), not assumed.
class redis_cluster {
public:
  explicit redis_cluster(cluster_layout layout = {}) {
    for (int i = 0; i < layout.primaries * (1 + layout.replicas); ++i) {
      const int port = free_cluster_port();
      nodes.push_back(std::make_unique<redis_server>(
          std::vector<std::string>{"--cluster-enabled", "yes", "--cluster-config-file",
                                   "nodes-" + std::to_string(port) + ".conf", "--cluster-node-timeout",
                                   std::to_string(layout.node_timeout.count()),
                                   // A replica's first sync starts at once (by default a primary waits 5 s
                                   // for more replicas), and a replica is promoted however long its link
                                   // to the dead primary has been down.
                                   "--repl-diskless-sync-delay", "0", "--cluster-replica-validity-factor", "0"},
          port));
    }
    std::string create = "redis-cli --cluster create";
    for (auto& n : nodes) create.append(" ").append(n->endpoint());
    create.append(" --cluster-replicas ").append(std::to_string(layout.replicas));
    create += " --cluster-yes >/dev/null 2>&1";
    REQUIRE(std::system(create.c_str()) == 0);
    wait_until_serving(15s);
    wait_for_replicas(15s);
  }

  /// The endpoints of the nodes still running.
  std::vector<std::string> endpoints() const {
    std::vector<std::string> out;
    for (const auto& n : nodes)
      if (n->running()) out.push_back(n->endpoint());
    return out;
  }

  /// The primary that serves each slot, as a running node's CLUSTER SLOTS says (`nodes.size()` for none).
  std::vector<std::size_t> slot_owners() const {
    std::vector<std::size_t> owners(16384, nodes.size());
    raw_connection c = any_running();
    raw_reply r = raw(c.get(), {"CLUSTER", "SLOTS"});
    REQUIRE(r);
    REQUIRE(r->type == REDIS_REPLY_ARRAY);
    for (std::size_t i = 0; i < r->elements; ++i) {
      const redisReply* range = r->element[i];
      const std::optional<std::size_t> n = by_port(static_cast<int>(range->element[2]->element[1]->integer));
      for (long long slot = range->element[0]->integer; n && slot <= range->element[1]->integer; ++slot)
        owners[static_cast<std::size_t>(slot)] = *n;
    }
    return owners;
  }

  /// The primary that serves `slot`.
  std::size_t owner(std::uint16_t slot) const {
    const std::size_t n = slot_owners()[slot];
    REQUIRE_MESSAGE(n < nodes.size(), "no owner of slot " << slot);
    return n;
  }

  /// The running replica of primary `primary`.
  std::size_t replica_of(std::size_t primary) const {
    for (std::size_t n = 0; n < nodes.size(); ++n) {
      if (!nodes[n]->running()) continue;
      const std::string info = raw_string(nodes[n]->connect().get(), {"INFO", "replication"});
      if (info_field(info, "role") == "slave" && info_field(info, "master_port") == std::to_string(nodes[primary]->port()))
        return n;
    }
    FAIL("no replica of node " << primary);
    return 0;
  }

  std::string id(std::size_t n) const { return raw_string(nodes[n]->connect().get(), {"CLUSTER", "MYID"}); }

  /// Cuts the replication link between primary `primary` and its replica for good, as a partition between
  /// the two would: the primary goes on acknowledging writes that the replica never receives, and the
  /// replica, still in the cluster, is promoted if the primary dies. (The replica is told to authenticate
  /// as a user that does not exist, then its link is closed: it cannot reconnect.)
  void cut_replication(std::size_t primary) {
    const std::size_t replica = replica_of(primary);
    raw_connection r = nodes[replica]->connect();
    REQUIRE(raw_string(r.get(), {"CONFIG", "SET", "masteruser", "no-such-user"}) == "OK");
    REQUIRE(raw_string(r.get(), {"CONFIG", "SET", "masterauth", "none"}) == "OK");
    raw_reply killed = raw(nodes[primary]->connect().get(), {"CLIENT", "KILL", "TYPE", "replica"});
    REQUIRE(killed);
    REQUIRE(killed->integer == 1);
    cut_off_.push_back(replica);
    const auto deadline = steady::now() + 5s;
    while (info_field(raw_string(r.get(), {"INFO", "replication"}), "master_link_status") != "down") {
      REQUIRE(steady::now() < deadline);
      std::this_thread::sleep_for(10ms);
    }
  }

  /// Whether every running node reports cluster_state:ok and names running nodes only as the owners of all
  /// 16384 slots: after a primary died, its replica was promoted and every node knows it.
  bool serving() const {
    for (const auto& n : nodes) {
      if (!n->running()) continue;
      raw_connection c = n->connect();
      if (!c || info_field(raw_string(c.get(), {"CLUSTER", "INFO"}), "cluster_state") != "ok") return false;
      raw_reply r = raw(c.get(), {"CLUSTER", "SLOTS"});
      if (!r || r->type != REDIS_REPLY_ARRAY) return false;
      long long covered = 0;
      for (std::size_t i = 0; i < r->elements; ++i) {
        const redisReply* range = r->element[i];
        const std::optional<std::size_t> primary = by_port(static_cast<int>(range->element[2]->element[1]->integer));
        if (!primary || !nodes[*primary]->running()) return false;
        covered += range->element[1]->integer - range->element[0]->integer + 1;
      }
      if (covered != 16384) return false;
    }
    return true;
  }

  /// Whether every running replica of a running primary (but those cut off) is linked to it and has applied
  /// everything the primary had written when asked.
  bool replicas_in_sync() const {
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      if (!n->running() || std::find(cut_off_.begin(), cut_off_.end(), i) != cut_off_.end()) continue;
      const std::string info = raw_string(n->connect().get(), {"INFO", "replication"});
      if (info_field(info, "role") != "slave") continue;
      const std::optional<std::size_t> primary = by_port(static_cast<int>(info_number(info, "master_port")));
      if (!primary || !nodes[*primary]->running()) continue; // awaits its promotion
      const long long written =
          info_number(raw_string(nodes[*primary]->connect().get(), {"INFO", "replication"}), "master_repl_offset");
      const std::string now = raw_string(n->connect().get(), {"INFO", "replication"});
      if (written < 0 || info_field(now, "master_link_status") != "up" ||
          info_field(now, "master_sync_in_progress") != "0" || info_number(now, "slave_repl_offset") < written)
        return false;
    }
    return true;
  }

  void wait_until_serving(std::chrono::milliseconds limit) const {
    const auto deadline = steady::now() + limit;
    while (!serving()) {
      REQUIRE_MESSAGE(steady::now() < deadline, "the cluster did not serve every slot within the limit");
      std::this_thread::sleep_for(20ms);
    }
  }
  void wait_for_replicas(std::chrono::milliseconds limit) const {
    const auto deadline = steady::now() + limit;
    while (!replicas_in_sync()) {
      REQUIRE_MESSAGE(steady::now() < deadline, "the replicas did not catch up within the limit");
      std::this_thread::sleep_for(20ms);
    }
  }

  std::vector<std::unique_ptr<redis_server>> nodes;

private:
  std::vector<std::size_t> cut_off_; ///< replicas whose link `cut_replication` cut

  std::optional<std::size_t> by_port(int port) const {
    for (std::size_t n = 0; n < nodes.size(); ++n)
      if (nodes[n]->port() == port) return n;
    return std::nullopt;
  }
  raw_connection any_running() const {
    for (const auto& n : nodes)
      if (n->running())
        if (raw_connection c = n->connect()) return c;
    FAIL("no cluster node answers");
    return nullptr;
  }
};

/// The threads of this process, as /proc lists them.
inline std::size_t thread_count() {
  std::size_t n = 0;
  for ([[maybe_unused]] const auto& task : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

/// Another engine process of a test: forked at construction, while the test is still single-threaded, and
/// asked to work through a pipe. A child forked later, once the test's own redis_store runs its I/O threads,
/// inherits whatever lock one of them held at that instant (the allocator's under AddressSanitizer: such a
/// child hung for good in CI) and may never get past its first allocation; forked first, the child starts
/// threads of its own only. Each `run` hands the child a request; the child answers with what `job` returns
/// for it (nullopt, or an exception, is a failure). The child exits when its owner is destroyed.
class forked_worker {
public:
  using job = std::function<std::optional<std::string>(std::string_view request)>;

  explicit forked_worker(job work) {
    REQUIRE_MESSAGE(thread_count() == 1, "a test forks its worker before any thread starts");
    int requests[2], replies[2];
    REQUIRE(::pipe(requests) == 0);
    REQUIRE(::pipe(replies) == 0);
    std::fflush(nullptr);
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      ::close(requests[1]);
      ::close(replies[0]);
      serve(requests[0], replies[1], work);
    }
    ::close(requests[0]);
    ::close(replies[1]);
    to_child_ = requests[1];
    from_child_ = replies[0];
  }
  ~forked_worker() {
    ::close(to_child_);
    ::close(from_child_);
    ::waitpid(pid_, nullptr, 0);
  }
  forked_worker(const forked_worker&) = delete;
  forked_worker& operator=(const forked_worker&) = delete;

  /// What the child's `job` returned for `request`; nullopt when it failed.
  std::optional<std::string> run(std::string_view request) {
    const std::uint64_t size = request.size();
    REQUIRE(write_all(to_child_, &size, sizeof size));
    REQUIRE(write_all(to_child_, request.data(), request.size()));
    char ok = 0;
    std::uint64_t reply_size = 0;
    REQUIRE_MESSAGE(read_all(from_child_, &ok, 1), "the worker process died");
    REQUIRE(read_all(from_child_, &reply_size, sizeof reply_size));
    std::string reply(reply_size, '\0');
    REQUIRE(read_all(from_child_, reply.data(), reply.size()));
    if (ok == 0) return std::nullopt;
    return reply;
  }

private:
  pid_t pid_ = -1;
  int to_child_ = -1;
  int from_child_ = -1;

  static bool write_all(int fd, const void* data, std::size_t size) {
    const char* p = static_cast<const char*>(data);
    for (std::size_t at = 0; at < size;) {
      const ssize_t n = ::write(fd, p + at, size - at);
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }
  static bool read_all(int fd, void* data, std::size_t size) {
    char* p = static_cast<char*>(data);
    for (std::size_t at = 0; at < size;) {
      const ssize_t n = ::read(fd, p + at, size - at);
      if (n <= 0) return false;
      at += static_cast<std::size_t>(n);
    }
    return true;
  }

  /// The child: answers requests until its owner closes the pipe, then exits without running the test's
  /// destructors (they belong to the parent: its servers, its temporary directories).
  [[noreturn]] static void serve(int requests, int replies, const job& work) {
    for (;;) {
      std::uint64_t size = 0;
      if (!read_all(requests, &size, sizeof size)) std::_Exit(0);
      std::string request(size, '\0');
      if (!read_all(requests, request.data(), request.size())) std::_Exit(1);
      std::optional<std::string> reply;
      try {
        reply = work(request);
      } catch (...) { // a failed check in the child must not run the rest of the suite there
        reply.reset();
      }
      const char ok = reply ? 1 : 0;
      const std::string& out = reply ? *reply : std::string{};
      const std::uint64_t out_size = out.size();
      if (!write_all(replies, &ok, 1) || !write_all(replies, &out_size, sizeof out_size) ||
          !write_all(replies, out.data(), out.size()))
        std::_Exit(1);
    }
  }
};

} // namespace reprise::testing
