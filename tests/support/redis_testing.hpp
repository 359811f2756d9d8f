// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
// Helpers of the tests that run against real redis-server processes: free loopback ports, a redis-server child
// in a temporary directory of its own, raw hiredis connections (to corrupt stored values by hand), and the
// skip rule (exit 77, which CTest reports as skipped) where redis-server is not installed.

#include <hiredis/hiredis.h>

#include <doctest/doctest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
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
    pid_ = ::fork();
    REQUIRE(pid_ >= 0);
    if (pid_ == 0) {
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
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
  void pause() { ::kill(pid_, SIGSTOP); }
  void resume() { ::kill(pid_, SIGCONT); }
  raw_connection connect() const { return raw_connect(port_); }

private:
  int port_;
  std::string dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
};

} // namespace reprise::testing
