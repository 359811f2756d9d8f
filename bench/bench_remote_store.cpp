// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Put / get latency and throughput of reprise::remote::redis_store against a running Redis / Valkey server
// (bench/remote_store_loopback.sh starts one on loopback and runs redis-benchmark on it for comparison).
//
//   bench_remote_store --endpoint 127.0.0.1:6390 [--sizes 65536,1048576,102129664] [--seconds 3]
//                      [--in-flight 1] [--io-threads 1]
//
// For each payload size: puts, then gets into a preallocated destination (as an engine reads a snapshot into
// pinned memory), each for about --seconds, with --in-flight requests outstanding. Reports requests/s, MB/s
// (payload bytes, 10^6) and the latency from submission to the completion's poll (mean, p50, p99). The
// store's own overhead (SHA-256 of every value, the manifest round trip of chunked values) is included.
// Measures only; never asserts a time.
#include <reprise/remote/redis_store.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

using namespace reprise;
using namespace reprise::remote;
using steady = std::chrono::steady_clock;

namespace {

struct phase_result {
  std::size_t requests = 0;
  std::size_t failures = 0;
  double seconds = 0;
  std::vector<double> latency_us;
};

content_key key_of(std::uint64_t i) {
  content_key k;
  for (std::size_t b = 0; b < k.bytes.size(); ++b) k.bytes[b] = static_cast<std::uint8_t>((i >> (8 * (b % 8))) ^ b);
  return k;
}

/// Runs one phase: keeps `in_flight` requests outstanding for `seconds`, each on key `keys[i % keys]`.
template <class Submit>
phase_result run_phase(redis_store& store, double seconds, std::size_t in_flight, Submit submit, store_status ok) {
  phase_result r;
  std::vector<steady::time_point> started(1 << 20);
  std::vector<completion> out(in_flight);
  std::size_t outstanding = 0, next = 0;
  const auto t0 = steady::now();
  const auto stop = t0 + std::chrono::duration<double>(seconds);
  for (;;) {
    const bool submitting = steady::now() < stop;
    while (submitting && outstanding < in_flight) {
      const auto now = steady::now();
      const result<request_id> id = submit(next++);
      if (!id) break;
      started[*id % started.size()] = now;
      ++outstanding;
    }
    if (outstanding == 0) break;
    const std::size_t n = store.wait(out, std::chrono::milliseconds(100));
    const auto now = steady::now();
    for (std::size_t i = 0; i < n; ++i) {
      --outstanding;
      ++r.requests;
      if (out[i].status != ok) ++r.failures;
      r.latency_us.push_back(std::chrono::duration<double, std::micro>(now - started[out[i].id % started.size()]).count());
    }
  }
  r.seconds = std::chrono::duration<double>(steady::now() - t0).count();
  return r;
}

void report(const char* op, std::size_t bytes, std::size_t in_flight, phase_result& r) {
  std::sort(r.latency_us.begin(), r.latency_us.end());
  double sum = 0;
  for (double v : r.latency_us) sum += v;
  const auto pct = [&](double p) {
    if (r.latency_us.empty()) return 0.0;
    return r.latency_us[std::min(r.latency_us.size() - 1, static_cast<std::size_t>(p * static_cast<double>(r.latency_us.size())))];
  };
  const double rps = static_cast<double>(r.requests) / r.seconds;
  std::printf("%-4s %11zu B  in-flight %2zu  %7zu req  %9.1f req/s  %8.1f MB/s  mean %9.1f us  p50 %9.1f us  "
              "p99 %9.1f us  failures %zu\n",
              op, bytes, in_flight, r.requests, rps, rps * static_cast<double>(bytes) / 1e6,
              r.latency_us.empty() ? 0.0 : sum / static_cast<double>(r.latency_us.size()), pct(0.5), pct(0.99),
              r.failures);
  std::fflush(stdout);
}

} // namespace

int main(int argc, char** argv) {
  std::string endpoint;
  std::vector<std::size_t> sizes{std::size_t{64} << 10, std::size_t{1} << 20, 102129664};
  double seconds = 3;
  std::size_t in_flight = 1;
  std::uint32_t io_threads = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string_view flag = argv[i];
    const char* value = argv[i + 1];
    if (flag == "--endpoint") endpoint = value;
    else if (flag == "--seconds") seconds = std::atof(value);
    else if (flag == "--in-flight") in_flight = static_cast<std::size_t>(std::atol(value));
    else if (flag == "--io-threads") io_threads = static_cast<std::uint32_t>(std::atol(value));
    else if (flag == "--sizes") {
      sizes.clear();
      for (const char* p = value; *p != '\0';) {
        char* end = nullptr;
        sizes.push_back(static_cast<std::size_t>(std::strtoull(p, &end, 10)));
        p = *end == ',' ? end + 1 : end;
      }
    } else {
      std::fprintf(stderr, "unknown flag %s\n", argv[i]);
      return 2;
    }
  }
  if (endpoint.empty() || in_flight == 0) {
    std::fprintf(stderr, "usage: bench_remote_store --endpoint host:port [--sizes a,b,c] [--seconds s] "
                         "[--in-flight n] [--io-threads n]\n");
    return 2;
  }

  redis_store_options options;
  options.endpoints = {endpoint};
  options.topology = store_topology::single_node;
  options.io_threads = io_threads;
  options.command_timeout = std::chrono::milliseconds(5000);
  options.queue_timeout = std::chrono::milliseconds(0);
  auto made = redis_store::create(options);
  if (!made) {
    std::fprintf(stderr, "create: %s\n", std::string(to_string(made.error())).c_str());
    return 1;
  }
  redis_store& store = **made;
  std::printf("endpoint %s, chunk %zu B, io threads %u\n", endpoint.c_str(), options.chunk_bytes, io_threads);

  const std::vector<std::byte> header(64, std::byte{7}); // a verification header: tokens and a parent key
  for (std::size_t bytes : sizes) {
    std::vector<std::byte> payload(bytes);
    for (std::size_t i = 0; i < bytes; ++i) payload[i] = static_cast<std::byte>(i * 2654435761u >> 13);
    // Distinct keys per outstanding request, so that concurrent requests never share a value; the gets read
    // what the puts wrote.
    const std::size_t keys = std::max<std::size_t>(in_flight, 1);
    std::vector<std::vector<std::byte>> destinations(keys, std::vector<std::byte>(bytes));
    phase_result puts = run_phase(
        store, seconds, in_flight,
        [&](std::size_t i) { return store.put(key_of(bytes * 1000 + i % keys), header, payload); },
        store_status::stored);
    report("put", bytes, in_flight, puts);
    phase_result gets = run_phase(
        store, seconds, in_flight,
        [&](std::size_t i) { return store.get(key_of(bytes * 1000 + i % keys), destinations[i % keys]); },
        store_status::hit);
    report("get", bytes, in_flight, gets);
    if (std::memcmp(destinations[0].data(), payload.data(), bytes) != 0) {
      std::fprintf(stderr, "get returned other bytes than were put\n");
      return 1;
    }
  }
  return 0;
}
