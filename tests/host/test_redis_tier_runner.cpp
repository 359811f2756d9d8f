// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The remote tier on a real redis-server through tier_runner: a prefix one process computed (a forked child
// with its own cache, host pools and store client) is restored by another, bitwise; a value corrupted in the
// store by hand, or a server that is gone, costs a miss and never wrong state; on a Redis Cluster with a
// replica per primary, so does a primary killed between a write and its read. A chat conversation's turn end
// (remote_turn_ends) goes the same way: continued bitwise by another process, single node and cluster, and
// never used damaged or lost. Without redis-server on PATH the cases exit 77, which CTest reports as skipped.
#include "support/cache_testing.hpp"
#include "support/computed_bytes.hpp"
#include "support/content_keys.hpp"
#include "support/redis_testing.hpp"

#include <reprise/keys/content_key.hpp>
#include <reprise/remote/redis_store.hpp>
#include <reprise/remote/tier_runner.hpp>

#include <doctest/doctest.h>


#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace reprise;
using namespace reprise::remote;
using namespace reprise::testing;
using namespace std::chrono_literals;

namespace {

using tiers = policy::tiers<policy::host_tier, policy::remote_tier>;
using cache_type = prefix_cache<small_hybrid, policy::strict, xxh3_hasher, tiers>;
constexpr std::uint32_t B = small_hybrid::block_size;
constexpr std::uint32_t A = small_hybrid::alignment;
constexpr std::size_t unit_bytes = 256; // the test's stand-in for a block's or a snapshot's bytes, in two layers

/// The bytes a cold prefill leaves in a block ending at `end`, or in a snapshot at `end`, for `tokens`.
std::vector<std::byte> content_of(std::span<const token_id> tokens, std::uint32_t end, bool snapshot) {
  std::uint64_t h = snapshot ? 0x9e3779b97f4a7c15ULL : 0xc2b2ae3d27d4eb4fULL;
  for (std::uint32_t i = 0; i < end; ++i) h = (h ^ static_cast<std::uint64_t>(tokens[i])) * 0x100000001b3ULL;
  std::vector<std::byte> v(unit_bytes);
  for (std::size_t k = 0; k < v.size(); ++k) v[k] = static_cast<std::byte>((h >> (8 * (k % 8))) + k / 8);
  return v;
}

/// One engine process: a cache, its GPU "pools" and host pools of two layers each, and a tier runner.
struct process {
  process(const content_keyer& keys, redis_store& store, bool write_through = false, bool reader = true)
      : cache(make(keys, write_through)), gpu_kv(24, std::vector<std::byte>(unit_bytes)),
        gpu_slots(cache.snapshot_slots(), std::vector<std::byte>(unit_bytes)),
        host_kv(cache.host_kv_units() * unit_bytes), host_slots(cache.host_snapshot_units() * unit_bytes),
        runner(store, layers(host_kv), layers(host_slots), reader ? read_gpu() : device_reader{}) {}

  /// The engine's copy of a GPU unit to host memory (here the "GPU" pools are host vectors).
  device_reader read_gpu() {
    return [this](remote_item item, std::uint32_t u, std::span<std::byte> out) {
      const std::vector<std::byte>& v = (item == remote_item::block ? gpu_kv : gpu_slots)[u];
      REQUIRE(out.size() == v.size());
      std::memcpy(out.data(), v.data(), v.size());
    };
  }

  static cache_type make(const content_keyer& keys, bool write_through) {
    auto c = cache_type::create({.kv_blocks = 24,
                                 .snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                                 .hasher_seed = 3,
                                 .host_kv_budget_bytes = 16 * small_hybrid::bytes_per_kv_block,
                                 .host_snapshot_budget_bytes = 2 * small_hybrid::bytes_per_snapshot,
                                 .remote_keys = &keys,
                                 .remote_write_through = write_through});
    REQUIRE(c.has_value());
    return std::move(*c);
  }
  /// A host pool of units of `unit_bytes` split into two layers of half a unit each.
  static std::vector<host_pool_view> layers(std::vector<std::byte>& pool) {
    const std::size_t units = pool.size() / unit_bytes;
    return {{pool.data(), unit_bytes / 2}, {pool.data() + units * unit_bytes / 2, unit_bytes / 2}};
  }
  /// Unit `u` of a two-layer host pool, reassembled.
  static std::vector<std::byte> unit(const std::vector<std::byte>& pool, std::uint32_t u) {
    const std::size_t units = pool.size() / unit_bytes, half = unit_bytes / 2;
    std::vector<std::byte> v(unit_bytes);
    std::memcpy(v.data(), pool.data() + u * half, half);
    std::memcpy(v.data() + half, pool.data() + units * half + u * half, half);
    return v;
  }
  static void set_unit(std::vector<std::byte>& pool, std::uint32_t u, const std::vector<std::byte>& v) {
    const std::size_t units = pool.size() / unit_bytes, half = unit_bytes / 2;
    std::memcpy(pool.data() + u * half, v.data(), half);
    std::memcpy(pool.data() + units * half + u * half, v.data() + half, half);
  }

  /// The puts first (they read host units the offloads overwrite), then offloads, then onboards.
  void run_transfers() {
    const transfer_plan t = cache.take_transfers();
    runner.run_puts(t);
    for (const unit_move& m : t.kv_offload) set_unit(host_kv, m.dst, gpu_kv[m.src]);
    for (const unit_move& m : t.snapshot_offload) set_unit(host_slots, m.dst, gpu_slots[m.src]);
    for (const unit_move& m : t.kv_onboard) gpu_kv[m.dst] = unit(host_kv, m.src);
  }

  /// Serves `prompt` whole as a cold prefill computes it; records what it restored and shared.
  admit_plan serve(seq_id s, const std::vector<token_id>& prompt) {
    auto plan = cache.admit(s, prompt);
    REQUIRE(plan.has_value());
    run_transfers();
    const admit_plan p = *plan;
    restored = p.restore_slot == no_slot ? std::vector<std::byte>{}
               : p.restore_from_host      ? unit(host_slots, static_cast<std::uint32_t>(p.restore_slot))
                                          : gpu_slots[static_cast<std::size_t>(p.restore_slot)];
    shared.clear();
    for (std::uint32_t i = 0; i < p.shared_blocks; ++i) shared.push_back(gpu_kv[static_cast<std::size_t>(p.block_table[i])]);
    for (std::uint32_t i = p.shared_blocks; i < p.block_table.size(); ++i)
      gpu_kv[static_cast<std::size_t>(p.block_table[i])] =
          content_of(prompt, std::min<std::uint32_t>((i + 1) * B, static_cast<std::uint32_t>(prompt.size())), false);
    std::vector<std::uint32_t> written;
    for (const capture_point& c : p.captures) {
      gpu_slots[static_cast<std::size_t>(c.slot)] = content_of(prompt, static_cast<std::uint32_t>(c.position), true);
      written.push_back(static_cast<std::uint32_t>(c.position));
    }
    REQUIRE(cache.commit(s, static_cast<std::uint32_t>(prompt.size()), written).has_value());
    REQUIRE(cache.release(s).has_value());
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    return p;
  }

  /// Prefetches `prompt` from the store and waits for the fetches (an engine would poll once per step).
  /// Returns the fetches planned.
  std::vector<remote_fetch> prefetch(const std::vector<token_id>& prompt) {
    auto plan = cache.prefetch(prompt);
    REQUIRE(plan.has_value());
    std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    runner.run_puts(cache.take_transfers());
    runner.start_fetches(cache, fetch_plan{fetches, plan->blocks});
    REQUIRE(runner.drain(cache, 5s));
    return fetches;
  }

  /// As an engine that probes first: asks the store what it has of `prompt`, polls until the answer came,
  /// then fetches only that. Returns the fetches planned.
  std::size_t probe_and_prefetch(const std::vector<token_id>& prompt) {
    auto listed = cache.probe(prompt);
    REQUIRE(listed.has_value());
    const request_id ticket = runner.start_probe(*listed);
    std::optional<std::vector<content_key>> found;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!(found = runner.take_probe(ticket)) && std::chrono::steady_clock::now() < deadline) {
      runner.poll(cache);
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(found.has_value());
    auto plan = cache.prefetch(prompt, {}, *found);
    REQUIRE(plan.has_value());
    const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
    runner.run_puts(cache.take_transfers());
    runner.start_fetches(cache, fetch_plan{fetches, plan->blocks});
    REQUIRE(runner.drain(cache, 5s));
    return fetches.size();
  }

  cache_type cache;
  std::vector<std::vector<std::byte>> gpu_kv, gpu_slots;
  std::vector<std::byte> host_kv, host_slots;
  tier_runner<cache_type> runner;
  std::vector<std::vector<std::byte>> shared;
  std::vector<std::byte> restored;
};

redis_store_options options_for(std::vector<std::string> endpoints, store_topology topology) {
  redis_store_options o;
  o.endpoints = std::move(endpoints);
  o.topology = topology;
  o.command_timeout = 400ms;
  o.connect_timeout = 200ms;
  o.queue_timeout = 400ms;
  return o;
}
redis_store_options options_for(const redis_server& server) {
  return options_for({server.endpoint()}, store_topology::single_node);
}

const std::vector<token_id> prompt = iota_tokens(2 * A + 9); // a prefill-exact snapshot at 128

/// A writing engine process (a forked_worker: fork it before this test's own store starts its threads). Each
/// request is a prompt to serve: with its own store client and cache, it serves it, pushes it out of GPU and host
/// memory with other prompts and writes what the host tier evicts to the store; it succeeds when all puts are
/// stored.
forked_worker prefix_writer(const redis_store_options& options) {
  return forked_worker([options](std::string_view request) -> std::optional<std::string> {
    std::vector<token_id> served(request.size() / sizeof(token_id));
    std::memcpy(served.data(), request.data(), served.size() * sizeof(token_id));
    auto store = redis_store::create(options);
    if (!store) return std::nullopt;
    const content_keyer keys = make_keyer();
    process writer(keys, **store);
    writer.serve(1, served);
    for (seq_id s = 100; s < 110; ++s) writer.serve(s, iota_tokens(6 * B + 1, static_cast<token_id>(10000 * s)));
    const bool ok = writer.runner.drain(writer.cache, 5s) && writer.runner.stats().puts_stored > 8 &&
                    writer.runner.stats().puts_failed == 0;
    return ok ? std::optional<std::string>(std::in_place) : std::nullopt;
  });
}
void write_in(forked_worker& writer, const std::vector<token_id>& served = prompt) {
  REQUIRE(writer.run({reinterpret_cast<const char*>(served.data()), served.size() * sizeof(token_id)}).has_value());
}
/// Writes `prompt` from a writer process of its own (the test has no store threads yet).
void write_in_child(const redis_store_options& options) {
  forked_worker writer = prefix_writer(options);
  write_in(writer);
}
void write_in_child(const redis_server& server) { write_in_child(options_for(server)); }

} // namespace

TEST_CASE("a prefix one process wrote to redis is restored by another, bitwise") {
  require_redis_server();
  redis_server server;
  write_in_child(server);

  auto store = redis_store::create(options_for(server));
  REQUIRE(store.has_value());
  const content_keyer keys = make_keyer();
  process reader(keys, **store);
  const std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  reader.prefetch(next);
  CHECK(reader.cache.metrics().remote_hits == 9); // blocks 0 .. 7 and the snapshot at 128
  const admit_plan p = reader.serve(1, next);
  CHECK(p.restore_from_host);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(p.restore_exactness == exactness::prefill_exact);
  CHECK(reader.restored == content_of(next, 2 * A, true)); // the child's bytes
  REQUIRE(p.shared_blocks == 8);
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(reader.shared[i] == content_of(next, (i + 1) * B, false));
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("write-through: what one engine computed is in redis while it still holds it") {
  require_redis_server();
  redis_server server;
  auto store = redis_store::create(options_for(server));
  REQUIRE(store.has_value());
  const content_keyer keys = make_keyer();
  process writer(keys, **store, /*write_through=*/true);
  writer.serve(1, prompt);
  writer.run_transfers(); // the next step: the completed step's blocks and snapshot go out from GPU memory
  REQUIRE(writer.runner.drain(writer.cache, 5s));
  CHECK(writer.runner.stats().puts_stored == 9);
  CHECK(writer.cache.metrics().host_blocks_offloaded == 0);

  process reader(keys, **store);
  const std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  reader.prefetch(next);
  CHECK(reader.cache.metrics().remote_hits == 9);
  const admit_plan p = reader.serve(1, next);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(reader.restored == content_of(next, 2 * A, true));
  REQUIRE(p.shared_blocks >= 8);
  for (std::uint32_t i = 0; i < 8; ++i) CHECK(reader.shared[i] == content_of(next, (i + 1) * B, false));

  // A runner without a device reader cannot send GPU units: the puts are dropped and counted, nothing is
  // stored for them.
  process blind(keys, **store, true, /*reader=*/false);
  blind.serve(1, iota_tokens(2 * A + 9, 300));
  blind.run_transfers();
  REQUIRE(blind.runner.drain(blind.cache, 5s));
  CHECK(blind.runner.stats().puts_dropped == 9);
  CHECK(blind.runner.stats().puts_issued == 0);
}

TEST_CASE("a value corrupted in redis by hand is never used") {
  require_redis_server();
  redis_server server;
  write_in_child(server);
  // Flip a byte of every manifest: the store's digest check turns each into corrupt, reported as a miss.
  raw_connection c = server.connect();
  REQUIRE(c);
  raw_reply keys_reply = raw(c.get(), {"KEYS", "*:m"});
  REQUIRE(keys_reply);
  REQUIRE(keys_reply->elements > 0);
  for (std::size_t k = 0; k < keys_reply->elements; ++k) {
    const std::string key(keys_reply->element[k]->str, keys_reply->element[k]->len);
    std::string value = raw_string(c.get(), {"GET", key});
    REQUIRE(!value.empty());
    value[value.size() - 1] = static_cast<char>(value[value.size() - 1] ^ 0x5a);
    raw(c.get(), {"SET", key, value});
  }
  auto store = redis_store::create(options_for(server));
  REQUIRE(store.has_value());
  const content_keyer keys = make_keyer();
  process reader(keys, **store);
  reader.prefetch(prompt);
  CHECK(reader.cache.metrics().remote_hits == 0);
  CHECK(reader.runner.stats().fetch_misses > 0);
  const admit_plan p = reader.serve(1, prompt);
  CHECK(p.usable_tokens == 0);
  CHECK(p.shared_blocks == 0);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("a dead server turns fetches into misses within the timeout and blocks nothing") {
  require_redis_server();
  redis_server server;
  write_in_child(server);
  auto store = redis_store::create(options_for(server));
  REQUIRE(store.has_value());
  const content_keyer keys = make_keyer();
  process reader(keys, **store);
  server.kill();
  const auto start = std::chrono::steady_clock::now();
  auto plan = reader.cache.prefetch(prompt);
  REQUIRE(plan.has_value());
  const std::vector<remote_fetch> fetches(plan->fetches.begin(), plan->fetches.end());
  REQUIRE(!fetches.empty());
  reader.runner.start_fetches(reader.cache, fetch_plan{fetches, plan->blocks});
  reader.runner.poll(reader.cache);
  CHECK(std::chrono::steady_clock::now() - start < 100ms); // the scheduler-side calls do not wait
  REQUIRE(reader.runner.drain(reader.cache, 3s));
  CHECK(reader.cache.metrics().remote_hits == 0);
  CHECK(reader.cache.metrics().remote_misses == fetches.size());
  const admit_plan p = reader.serve(1, prompt);
  CHECK(p.usable_tokens == 0);
  CHECK(reader.cache.check_invariants().has_value());
}

TEST_CASE("probing first: only what redis has is fetched, and a dead server costs no fetch at all") {
  require_redis_server();
  redis_server server;
  write_in_child(server);
  auto store = redis_store::create(options_for(server));
  REQUIRE(store.has_value());
  const content_keyer keys = make_keyer();
  process reader(keys, **store);
  // 3A new tokens past what the child wrote: the optimistic prefetch would reserve 12 more blocks and ask
  // for two snapshots (5A, 4A) the store does not have.
  const std::vector<token_id> next = concat(prompt, iota_tokens(3 * A, 5000));
  CHECK(reader.probe_and_prefetch(next) == 9);
  CHECK(reader.runner.stats().probes_answered == 1);
  CHECK(reader.runner.stats().keys_found == 9);
  CHECK(reader.cache.metrics().remote_hits == 9);
  CHECK(reader.cache.metrics().remote_misses == 0);
  const admit_plan p = reader.serve(1, next);
  CHECK(p.restore_from_host);
  CHECK(p.usable_tokens == 2 * A);
  CHECK(reader.restored == content_of(next, 2 * A, true)); // the child's bytes

  process late(keys, **store);
  server.kill();
  CHECK(late.probe_and_prefetch(next) == 0);
  CHECK(late.runner.stats().probes_failed == 1);
  CHECK(late.cache.metrics().remote_fetches == 0);
  CHECK(late.cache.metrics().host_blocks_held == 0);
  CHECK(late.cache.check_invariants().has_value());
}

namespace {

/// A store whose only I/O thread is kept busy by a get on `server`, paused: requests submitted meanwhile stay
/// queued until `server.resume()`, then run against a live server.
struct paused_store {
  explicit paused_store(redis_server& s) : server(s) {
    redis_store_options o = options_for(server);
    o.io_threads = 1;
    o.command_timeout = 5s;
    o.queue_timeout = 0ms;
    auto created = redis_store::create(o);
    REQUIRE(created.has_value());
    store = std::move(*created);
    server.pause();
    REQUIRE(store->get(content_key{}).has_value());
  }
  /// Resumes the server and collects every completion; returns them by status.
  std::vector<completion> resume_and_collect() {
    std::this_thread::sleep_for(50ms);
    server.resume();
    std::vector<completion> all;
    completion done[32];
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (store->in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      const std::size_t n = store->wait(done, 100ms);
      for (std::size_t k = 0; k < n; ++k) all.push_back(std::move(done[k]));
    }
    CHECK(store->in_flight() == 0);
    return all;
  }
  static std::size_t count(const std::vector<completion>& all, store_status s) {
    return static_cast<std::size_t>(std::count_if(all.begin(), all.end(), [s](const completion& c) { return c.status == s; }));
  }

  redis_server& server;
  std::unique_ptr<redis_store> store;
};

} // namespace

// A runner destroyed while the store still held its requests used to leave the store's I/O thread reading a
// freed put buffer and writing fetched payloads into freed staging buffers (AddressSanitizer in CI reports
// either). The runner now shares those buffers with the store, which releases them when it is done.
TEST_CASE("a runner destroyed with puts, fetches and a probe in flight leaves the store no freed buffer") {
  require_redis_server();
  redis_server server;
  write_in_child(server);
  const content_keyer keys = make_keyer();
  paused_store paused(server);
  std::size_t fetches = 0;
  {
    auto engine = std::make_unique<process>(keys, *paused.store, /*write_through=*/true);
    auto plan = engine->cache.prefetch(concat(prompt, iota_tokens(20, 5000)));
    REQUIRE(plan.has_value());
    const std::vector<remote_fetch> planned(plan->fetches.begin(), plan->fetches.end());
    fetches = planned.size();
    REQUIRE(fetches == 10); // blocks 0 .. 8 and the snapshot at 128: all but block 8 are in the store
    engine->runner.run_puts(engine->cache.take_transfers());
    engine->runner.start_fetches(engine->cache, fetch_plan{planned, plan->blocks});
    engine->serve(1, iota_tokens(2 * A + 9, 700));
    engine->run_transfers(); // write-through: 9 puts of the prefix just computed
    auto listed = engine->cache.probe(iota_tokens(3 * A, 900));
    REQUIRE(listed.has_value());
    (void)engine->runner.start_probe(*listed);
    CHECK(engine->runner.stats().puts_issued == 9);
    CHECK(engine->runner.in_flight() == fetches + 9 + 1);
  } // the runner, its cache and its pools are gone; every request is still queued behind the paused get
  const std::vector<completion> all = paused.resume_and_collect();
  CHECK(all.size() == 1 + fetches + 9 + 1);
  CHECK(paused_store::count(all, store_status::hit) == 9); // the fetched payloads were written somewhere live
  CHECK(paused_store::count(all, store_status::miss) == 1 + 1); // block 8, and the paused get's
  CHECK(paused_store::count(all, store_status::stored) == 9);
  CHECK(paused_store::count(all, store_status::answered) == 1);
}

TEST_CASE("abandon reports fetches in flight as misses at once and ignores their completions") {
  require_redis_server();
  redis_server server;
  write_in_child(server);
  const content_keyer keys = make_keyer();
  paused_store paused(server);
  process engine(keys, *paused.store);
  const std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  auto plan = engine.cache.prefetch(next);
  REQUIRE(plan.has_value());
  const std::vector<remote_fetch> planned(plan->fetches.begin(), plan->fetches.end());
  engine.runner.start_fetches(engine.cache, fetch_plan{planned, plan->blocks});
  auto listed = engine.cache.probe(next);
  REQUIRE(listed.has_value());
  const request_id ticket = engine.runner.start_probe(*listed);
  const std::vector<std::byte> host_before = engine.host_kv;
  engine.runner.abandon(engine.cache);
  CHECK(engine.runner.in_flight() == 0);
  CHECK(engine.runner.stats().fetches_dropped == planned.size());
  CHECK(engine.cache.metrics().remote_misses == planned.size());
  CHECK(engine.cache.metrics().remote_hits == 0);
  const std::optional<std::vector<content_key>> found = engine.runner.take_probe(ticket);
  REQUIRE(found.has_value());
  CHECK(found->empty());
  CHECK(engine.cache.check_invariants().has_value());

  // The store still runs the abandoned requests; their completions are polled and ignored, and the host
  // units the fetches had reserved are never written.
  const std::vector<completion> all = paused.resume_and_collect();
  CHECK(paused_store::count(all, store_status::hit) == 9);
  CHECK(engine.runner.poll(engine.cache) == 0);
  CHECK(engine.host_kv == host_before);
  CHECK(engine.cache.metrics().remote_hits == 0);
  const admit_plan p = engine.serve(1, next);
  CHECK(p.usable_tokens == 0);
  CHECK(engine.cache.check_invariants().has_value());
}

// The remote tier on a Redis Cluster of 3 primaries with a replica each. A prefix one process wrote is
// restored bitwise by another. A second prefix is written while the link from the primary that holds its
// first block to that primary's replica is cut, and that primary is SIGKILLed before anyone reads it: a
// reader during the failover and one after it get misses for what the primary held (the cache's `fetched`
// sees empty headers), hits for the rest, and use nothing wrong; once the prefix is served again and
// written through to the promoted replica, a third reader restores it whole.
TEST_CASE("a replicated Redis Cluster: a prefix is restored by another process, and a primary killed between "
          "write and read costs misses only") {
  require_redis_server();
  redis_cluster cluster({.primaries = 3, .replicas = 1, .node_timeout = 1000ms});
  const redis_store_options o = options_for(cluster.endpoints(), store_topology::cluster);
  const content_keyer keys = make_keyer();
  const auto check_nothing_wrong_used = [](const process& engine, const admit_plan& p,
                                           const std::vector<token_id>& served) {
    if (p.usable_tokens > 0) CHECK(engine.restored == content_of(served, p.usable_tokens, true));
    for (std::uint32_t i = 0; i < p.shared_blocks; ++i) CHECK(engine.shared[i] == content_of(served, (i + 1) * B, false));
    CHECK(engine.cache.metrics().remote_rejected == 0); // no value offered was refused by its header
    CHECK(engine.cache.check_invariants().has_value());
  };

  forked_worker writer = prefix_writer(o); // before this process's store starts its threads
  write_in(writer);
  cluster.wait_for_replicas(5s);
  const std::vector<token_id> next = concat(prompt, iota_tokens(20, 5000));
  auto created = redis_store::create(o); // one client, across the kill, the failover and after
  REQUIRE(created.has_value());
  redis_store* store = created->get();
  {
    process reader(keys, *store);
    reader.prefetch(next);
    CHECK(reader.cache.metrics().remote_hits == 9); // blocks 0 .. 7 and the snapshot at 128
    const admit_plan p = reader.serve(1, next);
    CHECK(p.usable_tokens == 2 * A);
    CHECK(p.shared_blocks == 8);
    check_nothing_wrong_used(reader, p, next);
  }

  // The second prefix and the primary that dies: the one that holds its first block.
  const std::vector<token_id> other = iota_tokens(2 * A + 9, 300);
  const std::vector<token_id> other_next = concat(other, iota_tokens(20, 6000));
  const std::vector<std::size_t> owners = cluster.slot_owners();
  const auto owner_of = [&](const content_key& k) { return owners[cluster_slot(store->manifest_key(k))]; };
  std::vector<content_key> listed; // what a prefetch of other_next may fetch, block 0 first
  {
    process lister(keys, *store);
    auto plan = lister.cache.probe(other_next);
    REQUIRE(plan.has_value());
    for (const remote_probe& k : plan->keys) listed.push_back(k.key);
    REQUIRE(!listed.empty());
    REQUIRE(plan->keys[0].item == remote_item::block); // block keys in chain order first
  }
  const std::size_t victim = owner_of(listed[0]);
  cluster.cut_replication(victim);
  write_in(writer, other);
  // What the store has of it before the kill: after the failover, that less what the victim held.
  std::vector<std::uint8_t> found(listed.size());
  {
    auto id = store->probe(listed, found);
    REQUIRE(id.has_value());
    completion c;
    REQUIRE(store->wait(std::span(&c, 1), 5s) == 1);
    REQUIRE(c.status == store_status::answered);
  }
  const auto survivors = [&](const std::vector<remote_fetch>& fetches) {
    return static_cast<std::uint64_t>(std::count_if(fetches.begin(), fetches.end(), [&](const remote_fetch& f) {
      const std::size_t at = static_cast<std::size_t>(std::find(listed.begin(), listed.end(), f.key) - listed.begin());
      return at < listed.size() && found[at] != 0 && owner_of(f.key) != victim;
    }));
  };

  cluster.nodes[victim]->kill();
  {
    // During the failover: what the victim held cannot be fetched; the rest can, until the cluster is down.
    process during(keys, *store);
    const std::vector<remote_fetch> fetches = during.prefetch(other_next);
    const cache_metrics& m = during.cache.metrics();
    MESSAGE("during the failover: " << fetches.size() << " fetches, " << survivors(fetches)
                                    << " of values off the victim, " << m.remote_hits << " hits");
    CHECK(m.remote_hits + m.remote_misses == fetches.size());
    CHECK(m.remote_hits <= survivors(fetches));
    const admit_plan p = during.serve(1, other_next);
    CHECK(p.usable_tokens == 0); // its first block is missing
    check_nothing_wrong_used(during, p, other_next);
  }

  cluster.wait_until_serving(15s);
  {
    // After it: the first prefix, written before the cut, is whole on the promoted replica.
    process reader(keys, *store);
    reader.prefetch(next);
    CHECK(reader.cache.metrics().remote_hits == 9);
    CHECK(reader.cache.metrics().remote_misses == 1); // block 8, which nobody wrote
    const admit_plan p = reader.serve(1, next);
    CHECK(p.usable_tokens == 2 * A);
    check_nothing_wrong_used(reader, p, next);
  }
  {
    // Of the second, what the victim held never reached its replica: misses; the rest, hits. Served again,
    // it is written through, the promoted replica included.
    process writer(keys, *store, /*write_through=*/true);
    const std::vector<remote_fetch> fetches = writer.prefetch(other_next);
    const cache_metrics& m = writer.cache.metrics();
    CHECK(m.remote_hits == survivors(fetches));
    CHECK(m.remote_misses == fetches.size() - survivors(fetches));
    CHECK(m.remote_hits > 0);
    CHECK(m.remote_misses > 1); // more than block 8, which nobody wrote
    const admit_plan p = writer.serve(1, other_next);
    CHECK(p.usable_tokens == 0);
    check_nothing_wrong_used(writer, p, other_next);
    writer.run_transfers();
    REQUIRE(writer.runner.drain(writer.cache, 5s));
    CHECK(writer.runner.stats().puts_failed == 0);
    CHECK(writer.runner.stats().puts_stored >= 9);
  }
  {
    process reader(keys, *store);
    reader.prefetch(other_next);
    const admit_plan p = reader.serve(1, other_next);
    CHECK(p.usable_tokens == 2 * A);
    CHECK(p.shared_blocks >= 8);
    check_nothing_wrong_used(reader, p, other_next);
  }
}

// Turn ends (cache_options::remote_turn_ends) through the runner: a chat conversation's turn end, one value of
// two units (its partial block, its snapshot) linked to its decode-filled blocks (continuation blocks, a value
// each), written by one process and
// continued by another at that turn end, bitwise. The pools' bytes are a function of how they were computed
// (the state restored, the tokens since, and whether a prefill, a decode step or the turn-end capture wrote
// them), as in test_remote_turn_ends.cpp, so a reader that used other bytes or recomputed shows it.
namespace {

using chat_cache = prefix_cache<small_hybrid, policy::chat, xxh3_hasher, tiers>;
using bytes = std::vector<std::byte>;

bytes computed(std::uint64_t base, std::span<const token_id> tokens, std::uint32_t from, std::uint32_t end, char who) {
  return testing::computed(base, tokens, from, end, who, unit_bytes);
}

/// What a turn left in its engine's GPU pools: every KV block of the conversation (the full ones, then the
/// partial one) and the turn-end snapshot.
struct turn_bytes {
  std::vector<bytes> kv;
  bytes turn_end;
};

/// The store's name of a turn end at a position in [boundary, boundary + B) of `tokens`.
content_key turn_end_key_of(const content_keyer& keys, std::span<const token_id> tokens, std::uint32_t boundary) {
  content_key k = keys.root({});
  for (std::uint32_t i = 0; i < boundary / B; ++i) k = keys.chain(k, tokens.subspan(std::size_t{i} * B, B), {});
  return keys.turn_end(k, boundary);
}

/// One chat engine process: a cache writing through with turn ends, its GPU pools, two-layer host pools and a
/// tier runner with a device reader.
struct chat_engine {
  chat_engine(const content_keyer& keys, redis_store& store)
      : cache(make(keys)), gpu_kv(48, bytes(unit_bytes)), gpu_slots(cache.snapshot_slots(), bytes(unit_bytes)),
        host_kv(cache.host_kv_units() * unit_bytes), host_slots(cache.host_snapshot_units() * unit_bytes),
        runner(store, process::layers(host_kv), process::layers(host_slots),
               [this](remote_item item, std::uint32_t u, std::span<std::byte> out) {
                 const bytes& v = (item == remote_item::block ? gpu_kv : gpu_slots)[u];
                 REQUIRE(out.size() == v.size());
                 std::memcpy(out.data(), v.data(), v.size());
               }) {}
  chat_engine(const chat_engine&) = delete; // the device reader holds its address

  static chat_cache make(const content_keyer& keys) {
    auto c = chat_cache::create({.kv_blocks = 48,
                                 .snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot,
                                 .hasher_seed = 5,
                                 .host_kv_budget_bytes = 40 * small_hybrid::bytes_per_kv_block,
                                 .host_snapshot_budget_bytes = 4 * small_hybrid::bytes_per_snapshot,
                                 .remote_keys = &keys,
                                 .remote_write_through = true,
                                 .remote_turn_ends = true});
    REQUIRE(c.has_value());
    return std::move(*c);
  }

  void run_transfers() {
    const transfer_plan t = cache.take_transfers();
    runner.run_puts(t);
    for (const unit_move& m : t.kv_offload) process::set_unit(host_kv, m.dst, gpu_kv[m.src]);
    for (const unit_move& m : t.snapshot_offload) process::set_unit(host_slots, m.dst, gpu_slots[m.src]);
    for (const unit_move& m : t.kv_onboard) gpu_kv[m.dst] = process::unit(host_kv, m.src);
  }

  /// One turn as the writer runs it: admit `tokens` (restoring what the plan says, computing the rest),
  /// commit, decode `reply` (all but its last token fed), finish with the turn-end capture and complete the
  /// step, whose puts (the turn end's among them) then go out. `tokens` becomes prompt + reply.
  turn_bytes turn(seq_id s, std::vector<token_id>& tokens, const std::vector<token_id>& reply) {
    auto plan = cache.admit(s, tokens);
    REQUIRE(plan.has_value());
    const admit_plan p = *plan;
    run_transfers();
    std::vector<block_id> table(p.block_table.begin(), p.block_table.end());
    const auto slot = static_cast<std::uint32_t>(p.restore_slot);
    const std::uint64_t base = p.restore_slot == no_slot ? 0
                               : p.restore_from_host     ? hash_of(process::unit(host_slots, slot))
                                                         : hash_of(gpu_slots[slot]);
    const std::uint32_t from = p.usable_tokens;
    if (p.copy_src != no_block) gpu_kv[static_cast<std::size_t>(p.copy_dst)] = gpu_kv[static_cast<std::size_t>(p.copy_src)];
    const auto n = static_cast<std::uint32_t>(tokens.size());
    for (std::uint32_t i = p.shared_blocks; i < table.size(); ++i)
      gpu_kv[static_cast<std::size_t>(table[i])] = computed(base, tokens, from, std::min((i + 1) * B, n), 'P');
    std::vector<std::uint32_t> written;
    for (const capture_point& c : p.captures) {
      gpu_slots[static_cast<std::size_t>(c.slot)] = computed(base, tokens, from, static_cast<std::uint32_t>(c.position), 'S');
      written.push_back(static_cast<std::uint32_t>(c.position));
    }
    REQUIRE(cache.commit(s, n, written).has_value());
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    run_transfers();
    std::uint32_t at = n;
    for (std::size_t k = 0; k + 1 < reply.size(); ++k) { // each decode step writes its token's KV into its block
      tokens.push_back(reply[k]);
      auto e = cache.extend(s, std::vector<token_id>{reply[k]});
      REQUIRE(e.has_value());
      table.insert(table.end(), e->new_blocks.begin(), e->new_blocks.end());
      ++at;
      gpu_kv[static_cast<std::size_t>(table[(at - 1) / B])] = computed(base, tokens, from, at, 'D');
      REQUIRE(cache.commit(s, at).has_value());
      REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
      run_transfers();
    }
    tokens.push_back(reply.back());
    auto finished = cache.finish(s);
    REQUIRE(finished.has_value());
    REQUIRE(finished->capture.slot != no_slot);
    REQUIRE(finished->capture.position == at);
    turn_bytes out;
    out.turn_end = computed(base, std::span<const token_id>(tokens.data(), at), from, at, 'E');
    gpu_slots[static_cast<std::size_t>(finished->capture.slot)] = out.turn_end;
    for (std::uint32_t i = 0; i * B < at; ++i) out.kv.push_back(gpu_kv[static_cast<std::size_t>(table[i])]);
    REQUIRE(cache.step_complete(cache.current_epoch()).has_value());
    run_transfers(); // the turn end's put, now that its step completed
    return out;
  }

  /// Asks the store which of the values a prefetch of `prompt` could fetch it has, and polls until answered.
  std::vector<content_key> probe(const std::vector<token_id>& prompt) {
    auto listed = cache.probe(prompt);
    REQUIRE(listed.has_value());
    const request_id ticket = runner.start_probe(*listed);
    std::optional<std::vector<content_key>> found;
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (!(found = runner.take_probe(ticket)) && std::chrono::steady_clock::now() < deadline) {
      runner.poll(cache);
      std::this_thread::sleep_for(1ms);
    }
    REQUIRE(found.has_value());
    return *found;
  }

  struct planned {
    std::size_t fetches = 0, turn_ends = 0;
  };
  /// Prefetches `prompt` given what a probe `found`, and waits for the fetches.
  planned fetch(const std::vector<token_id>& prompt, const std::vector<content_key>& found) {
    auto plan = cache.prefetch(prompt, {}, found);
    REQUIRE(plan.has_value());
    planned out{plan->fetches.size(), 0};
    for (const remote_fetch& f : plan->fetches) out.turn_ends += f.item == remote_item::turn_end;
    runner.run_puts(cache.take_transfers());
    runner.start_fetches(cache, *plan); // its spans (a turn end's kv_units) are valid until the next prefetch
    REQUIRE(runner.drain(cache, 5s));
    return out;
  }

  /// Admits `prompt` as a reader and applies the step's transfers and the plan's copy; records the snapshot
  /// restored, the shared blocks and the block holding the partial block the sequence continues in.
  admit_plan admit(seq_id s, const std::vector<token_id>& prompt) {
    auto plan = cache.admit(s, prompt);
    REQUIRE(plan.has_value());
    const admit_plan p = *plan;
    run_transfers();
    if (p.copy_src != no_block) gpu_kv[static_cast<std::size_t>(p.copy_dst)] = gpu_kv[static_cast<std::size_t>(p.copy_src)];
    restored = p.restore_slot == no_slot ? bytes{}
               : p.restore_from_host      ? process::unit(host_slots, static_cast<std::uint32_t>(p.restore_slot))
                                          : gpu_slots[static_cast<std::size_t>(p.restore_slot)];
    shared.clear();
    for (std::uint32_t i = 0; i < p.shared_blocks; ++i) shared.push_back(gpu_kv[static_cast<std::size_t>(p.block_table[i])]);
    partial = p.kv_matched_tokens % B != 0 ? gpu_kv[static_cast<std::size_t>(p.block_table[p.shared_blocks])] : bytes{};
    return p;
  }

  chat_cache cache;
  std::vector<bytes> gpu_kv, gpu_slots;
  bytes host_kv, host_slots;
  tier_runner<chat_cache> runner;
  std::vector<bytes> shared;
  bytes restored, partial;
};

/// A conversation's first turn (a 200-token prompt, a reply of `reply_tokens`) and the next prompt (20 more
/// tokens). With the default reply its turn end sits at 236 (blocks 0 .. 11 prefill-exact, 12 and 13
/// decode-filled, a partial block of 12 tokens): one value of 3 KV units and a snapshot, under the key of
/// boundary 224.
struct conversation {
  explicit conversation(token_id from, std::uint32_t reply_tokens = 37)
      : first(iota_tokens(200, from)), reply(iota_tokens(reply_tokens, from + 70000)),
        next(concat(concat(first, reply), iota_tokens(20, from + 90000))), turn_end_at(200 + reply_tokens - 1) {}
  content_key turn_end(const content_keyer& keys) const { return turn_end_key_of(keys, next, turn_end_at / B * B); }

  std::vector<token_id> first, reply, next;
  std::uint32_t turn_end_at; ///< the last reply token is not fed
};

/// A chat engine process (a forked_worker: fork it before this test's own store starts its threads). Each
/// request names a conversation (its first token and reply length); with its own store client and chat engine
/// the child serves its first turn, writing through, the turn end included, and returns the bytes its pools
/// held at the turn's end.
forked_worker turn_writer(const redis_store_options& options) {
  return forked_worker([options](std::string_view request) -> std::optional<std::string> {
    token_id from = 0;
    std::uint32_t reply_tokens = 0;
    REQUIRE(request.size() == sizeof from + sizeof reply_tokens);
    std::memcpy(&from, request.data(), sizeof from);
    std::memcpy(&reply_tokens, request.data() + sizeof from, sizeof reply_tokens);
    const conversation c(from, reply_tokens);
    auto store = redis_store::create(options);
    if (!store) return std::nullopt;
    const content_keyer keys = make_keyer();
    chat_engine writer(keys, **store);
    std::vector<token_id> tokens = c.first;
    const turn_bytes t = writer.turn(1, tokens, c.reply);
    const bool ok = writer.runner.drain(writer.cache, 5s) && writer.runner.stats().puts_failed == 0 &&
                    writer.runner.stats().puts_dropped == 0 && writer.cache.metrics().remote_turn_ends_put == 1 &&
                    writer.cache.metrics().remote_turn_ends_lost == 0;
    if (!ok) return std::nullopt;
    std::string out;
    for (const bytes& b : t.kv) out.append(reinterpret_cast<const char*>(b.data()), b.size());
    out.append(reinterpret_cast<const char*>(t.turn_end.data()), t.turn_end.size());
    return out;
  });
}

/// Has `writer` serve `c`'s first turn; returns what its pools held at the turn's end.
turn_bytes write_turn(forked_worker& writer, const conversation& c) {
  const token_id from = c.first[0];
  const auto reply_tokens = static_cast<std::uint32_t>(c.reply.size());
  std::string request(sizeof from + sizeof reply_tokens, '\0');
  std::memcpy(request.data(), &from, sizeof from);
  std::memcpy(request.data() + sizeof from, &reply_tokens, sizeof reply_tokens);
  const std::optional<std::string> in = writer.run(request);
  REQUIRE(in.has_value());
  REQUIRE(in->size() % unit_bytes == 0);
  REQUIRE(in->size() / unit_bytes == (c.turn_end_at + B - 1) / B + 1); // every block (a partial one last), the snapshot
  turn_bytes t;
  for (std::size_t at = 0; at < in->size(); at += unit_bytes) {
    const auto* p = reinterpret_cast<const std::byte*>(in->data() + at);
    (at + unit_bytes < in->size() ? t.kv.emplace_back() : t.turn_end).assign(p, p + unit_bytes);
  }
  return t;
}

/// `reader` restored the conversation at the writer's turn end: its snapshot, every full block before it
/// and the partial block, each bitwise the writer's.
void check_continued(const chat_engine& reader, const admit_plan& p, const conversation& c, const turn_bytes& w) {
  const std::uint32_t at = c.turn_end_at;
  CHECK(p.usable_tokens == at);
  CHECK(p.kv_matched_tokens == at);
  CHECK(p.restore_from_host);
  CHECK(p.restore_exactness == exactness::decode_continuation);
  CHECK(reader.restored == w.turn_end);
  REQUIRE(p.shared_blocks == at / B);
  for (std::uint32_t i = 0; i < at / B; ++i) CHECK(reader.shared[i] == w.kv[i]);
  if (at % B != 0) CHECK(reader.partial == w.kv[at / B]);
  CHECK(reader.cache.check_invariants().has_value());
}

/// `reader` restored nothing from a turn end: no snapshot, and each block it shares is a prefill-exact one,
/// the writer's bytes (any cold prefill computes the same).
void check_restored_nothing(const chat_engine& reader, const admit_plan& p, const turn_bytes& w) {
  CHECK(p.usable_tokens == 0);
  CHECK(p.restore_slot == no_slot);
  CHECK(p.restore_exactness == exactness::prefill_exact);
  REQUIRE(p.shared_blocks <= 12);
  for (std::uint32_t i = 0; i < p.shared_blocks; ++i) CHECK(reader.shared[i] == w.kv[i]);
  CHECK(reader.cache.check_invariants().has_value());
}

} // namespace

TEST_CASE("turn ends through redis: another process continues a conversation at its writer's turn end, bitwise "
          "(at a block boundary too), and a damaged or abandoned turn end is never used") {
  require_redis_server();
  redis_server server;
  const redis_store_options o = options_for(server);
  forked_worker writer = turn_writer(o); // before this process's store starts its threads
  const conversation conv(1);
  const turn_bytes w = write_turn(writer, conv);
  auto created = redis_store::create(o);
  REQUIRE(created.has_value());
  redis_store& store = **created;
  const content_keyer keys = make_keyer();
  const content_key turn_end = conv.turn_end(keys);
  raw_connection c = server.connect();
  REQUIRE(c);
  const std::string name = store.manifest_key(turn_end);
  const std::string value = raw_string(c.get(), {"GET", name}); // one inline value: its partial block and a snapshot
  REQUIRE(value.size() > 2 * unit_bytes);

  // Reads turn 2's prompt through a fresh engine: probe, fetch what was found, admit. `rejected`: whether
  // the turn end's header is expected to be refused (else it is a miss).
  const auto read = [&](auto&& check, bool rejected = false) {
    chat_engine reader(keys, store);
    const std::vector<content_key> found = reader.probe(conv.next);
    CHECK(std::count(found.begin(), found.end(), turn_end) == 1);
    CHECK(found.size() == 12 + 1 + 2); // the prefill-exact blocks written through, the turn end, its 2 links
    const chat_engine::planned f = reader.fetch(conv.next, found);
    CHECK(f.turn_ends == 1);
    CHECK(f.fetches == 12 + 2 + 1);
    const cache_metrics& m = reader.cache.metrics();
    // The turn end and its links count as one fetch, and once: kept, missed or rejected.
    CHECK(m.remote_fetches == f.fetches - 2);
    CHECK(m.remote_hits + m.remote_misses + m.remote_rejected == m.remote_fetches);
    CHECK(m.remote_rejected == (rejected ? 1u : 0u));
    check(reader, m);
    CHECK(reader.cache.check_invariants().has_value());
  };
  const auto continued = [&](chat_engine& reader, const cache_metrics& m) {
    CHECK(m.remote_turn_end_hits == 1);
    CHECK(m.remote_hits == 12 + 1);
    CHECK(reader.runner.stats().bytes_fetched == 12 * unit_bytes + 4 * unit_bytes);
    check_continued(reader, reader.admit(2, conv.next), conv, w);
  };
  const auto not_used = [&](chat_engine& reader, const cache_metrics& m) {
    CHECK(m.remote_turn_end_hits == 0);
    CHECK(m.remote_hits == 12);
    check_restored_nothing(reader, reader.admit(2, conv.next), w);
  };
  const auto put_sync = [&](std::span<const std::byte> header, std::span<const std::byte> payload) {
    REQUIRE(store.put(turn_end, header, payload).has_value());
    completion done;
    REQUIRE(store.wait(std::span(&done, 1), 5s) == 1);
    REQUIRE(done.status == store_status::stored);
  };

  read(continued);
  // Its stored header and payload, as a get returns them.
  REQUIRE(store.get(turn_end).has_value());
  completion got;
  REQUIRE(store.wait(std::span(&got, 1), 5s) == 1);
  REQUIRE(got.status == store_status::hit);
  REQUIRE(got.payload.size() == 2 * unit_bytes);

  // Three damages in turn, then the value as it was. A payload byte flipped in redis: the store's digest
  // refuses it, a miss.
  std::string flipped = value;
  flipped[flipped.size() - 1] = static_cast<char>(flipped[flipped.size() - 1] ^ 0x5a); // the snapshot's last byte
  raw(c.get(), {"SET", name, flipped});
  read(not_used);
  // A header token changed, the value's digest made whole again: the cache refuses the header.
  std::vector<std::byte> header = got.header;
  header[84] ^= std::byte{1}; // the first token past the chain's start
  put_sync(header, got.payload);
  read(not_used, /*rejected=*/true);
  // A whole, valid value one KV unit short: the runner's staging buffer is of another size, a miss.
  put_sync(got.header, std::span(got.payload).first(unit_bytes));
  read(not_used);
  raw(c.get(), {"SET", name, value});
  read(continued);

  // Abandoned before their completions are polled, the fetches (the turn end's among them) are misses, and
  // their host units are never written.
  {
    chat_engine reader(keys, store);
    auto plan = reader.cache.prefetch(conv.next, {}, reader.probe(conv.next));
    REQUIRE(plan.has_value());
    const std::size_t fetches = plan->fetches.size();
    reader.runner.run_puts(reader.cache.take_transfers());
    reader.runner.start_fetches(reader.cache, *plan);
    const bytes host_kv = reader.host_kv, host_slots = reader.host_slots;
    reader.runner.abandon(reader.cache);
    CHECK(reader.runner.in_flight() == 0);
    CHECK(reader.runner.stats().fetches_dropped == fetches);
    CHECK(reader.cache.metrics().remote_misses == fetches - 2); // the turn end and its 2 links: one miss
    CHECK(reader.cache.metrics().remote_turn_end_hits == 0);
    const auto deadline = std::chrono::steady_clock::now() + 5s;
    while (store.in_flight() > 0 && std::chrono::steady_clock::now() < deadline) {
      reader.runner.poll(reader.cache); // completions of abandoned requests: ignored
      std::this_thread::sleep_for(1ms);
    }
    CHECK(store.in_flight() == 0);
    CHECK(reader.host_kv == host_kv);
    CHECK(reader.host_slots == host_slots);
    CHECK(reader.cache.metrics().remote_hits == 0);
    check_restored_nothing(reader, reader.admit(2, conv.next), w);
  }

  // A turn end at a block boundary (224) travels with zeros in place of a partial block (its blocks 12 and 13
  // are its links), and is continued.
  const conversation boundary(40001, 25);
  const turn_bytes wb = write_turn(writer, boundary);
  REQUIRE(store.get(boundary.turn_end(keys)).has_value());
  REQUIRE(store.wait(std::span(&got, 1), 5s) == 1);
  REQUIRE(got.status == store_status::hit);
  REQUIRE(got.payload.size() == 2 * unit_bytes);
  const std::span<const std::byte> payload(got.payload);
  CHECK(std::ranges::all_of(payload.first(unit_bytes), [](std::byte x) { return x == std::byte{0}; }));
  CHECK(std::ranges::equal(payload.last(unit_bytes), wb.turn_end));
  chat_engine reader(keys, store);
  const std::vector<content_key> found = reader.probe(boundary.next);
  CHECK(reader.fetch(boundary.next, found).turn_ends == 1);
  CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
  const admit_plan p = reader.admit(2, boundary.next);
  CHECK(p.copy_src == no_block);
  check_continued(reader, p, boundary, wb);
}

// A Redis Cluster of 3 primaries with a replica each. A turn end one process wrote is continued bitwise by
// another. A second conversation's turn end is written while the link from the primary that holds its key to
// that primary's replica is cut, a reader probes it (found), and the primary is SIGKILLed before the reader
// fetches: the fetch is a miss (an empty header), nothing is rejected, and the reader's admit restores
// nothing from it; after the failover the turn end is gone and the first conversation is still whole.
TEST_CASE("turn ends on a replicated Redis Cluster: continued bitwise across processes, and one lost with its "
          "primary is a miss, never wrong state") {
  require_redis_server();
  redis_cluster cluster({.primaries = 3, .replicas = 1, .node_timeout = 1000ms});
  const redis_store_options o = options_for(cluster.endpoints(), store_topology::cluster);
  const content_keyer keys = make_keyer();
  forked_worker writer = turn_writer(o); // before this process's store starts its threads
  auto created = redis_store::create(o); // one client, across the kill, the failover and after
  REQUIRE(created.has_value());
  redis_store& store = **created;

  const conversation kept(1), lost(20001);
  const turn_bytes wk = write_turn(writer, kept);
  cluster.wait_for_replicas(5s);
  const auto continue_kept = [&] {
    chat_engine reader(keys, store);
    const std::vector<content_key> found = reader.probe(kept.next);
    CHECK(std::count(found.begin(), found.end(), kept.turn_end(keys)) == 1);
    const chat_engine::planned f = reader.fetch(kept.next, found);
    CHECK(f.turn_ends == 1);
    CHECK(reader.cache.metrics().remote_turn_end_hits == 1);
    CHECK(reader.cache.metrics().remote_rejected == 0);
    check_continued(reader, reader.admit(2, kept.next), kept, wk);
  };
  continue_kept();

  const std::size_t victim = cluster.slot_owners()[cluster_slot(store.manifest_key(lost.turn_end(keys)))];
  cluster.cut_replication(victim);
  const turn_bytes wl = write_turn(writer, lost);
  {
    chat_engine reader(keys, store);
    const std::vector<content_key> found = reader.probe(lost.next);
    REQUIRE(std::count(found.begin(), found.end(), lost.turn_end(keys)) == 1); // on the victim alone
    cluster.nodes[victim]->kill();
    const chat_engine::planned f = reader.fetch(lost.next, found);
    CHECK(f.turn_ends == 1);
    const cache_metrics& m = reader.cache.metrics();
    CHECK(m.remote_turn_end_hits == 0);
    CHECK(m.remote_rejected == 0);
    // The turn end among the misses (an empty header), counted once with its links.
    CHECK(m.remote_hits + m.remote_misses == m.remote_fetches);
    CHECK(m.remote_misses >= 1);
    check_restored_nothing(reader, reader.admit(2, lost.next), wl);
  }

  cluster.wait_until_serving(15s);
  {
    // The turn end never reached the promoted replica: not found, not fetched, nothing restored from it.
    chat_engine reader(keys, store);
    const std::vector<content_key> found = reader.probe(lost.next);
    CHECK(std::count(found.begin(), found.end(), lost.turn_end(keys)) == 0);
    CHECK(reader.fetch(lost.next, found).turn_ends == 0);
    CHECK(reader.cache.metrics().remote_rejected == 0);
    check_restored_nothing(reader, reader.admit(2, lost.next), wl);
  }
  continue_kept(); // written before the cut: whole on every primary, the promoted replica included
}
