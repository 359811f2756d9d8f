// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// What the remote tier costs the scheduler thread per request, for a Nemotron-H-8B cache (B = 16, alignment
// 256) with host and remote tiers and nothing of the prompt cached locally, at 1K / 8K / 32K / 128K tokens:
//   BM_probe           cache.probe(prompt) of a new prompt: the local lookup, then the content key of every
//                      block up to the prompt's last grid position and of every snapshot position past the
//                      restore point
//   BM_probe_prefetch  probe, then prefetch given that the store has all of it (the keys the probe computed
//                      are reused), and every fetch reported as a miss (the units freed): the whole
//                      scheduler-side sequence but the network
//   BM_floor           the same blocks' content keys alone (`block_keys`: one SHA-256 per block), the least
//                      any fleet-wide naming costs
//   BM_probe_turn_ends BM_probe for `policy::chat` with turn ends in the store (`remote_turn_ends`): every block's
//                      key up to the prompt's last full block, and a turn-end key at every block boundary
//   BM_admit           admit + commit + release of the same prompt on a cache without tiers, for scale
// At the end it prints each cost over the floor (CPU time; the machine may be shared).
#include <reprise/keys/content_key.hpp>
#include <reprise/reprise.hpp>

#include "cpu_time_reporter.hpp"

#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>
#include <vector>

namespace {
using namespace reprise;
using model_type = presets::nemotron_h_8b;
using tiers = policy::tiers<policy::host_tier, policy::remote_tier>;
using remote_cache = prefix_cache<model_type, policy::strict, xxh3_hasher, tiers>;
using plain_cache = prefix_cache<model_type, policy::strict>;
using chat_cache = prefix_cache<model_type, policy::chat, xxh3_hasher, tiers>;
constexpr std::uint32_t B = model_type::block_size;

std::vector<token_id> prompt_of(std::size_t n, std::uint64_t iteration) {
  std::vector<token_id> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = static_cast<token_id>((i * 2654435761u + iteration * 40503u) % 151936u);
  return v;
}

content_key_context context() {
  auto fingerprint = model_fingerprint::make(model_config::of<model_type>(), "nemotron-h-8b-bench");
  return {.fleet_seed = 5, .fingerprint = *fingerprint};
}

const content_keyer& keyer() {
  static const content_keyer k = *content_keyer::make(context(), model_config::of<model_type>());
  return k;
}

remote_cache make_remote(std::size_t tokens) {
  const auto blocks = static_cast<std::uint32_t>(tokens / B + 2);
  auto c = remote_cache::create({.kv_blocks = blocks,
                                 .snapshot_budget_bytes = 2 * model_type::bytes_per_snapshot,
                                 .hasher_seed = 3,
                                 .host_kv_budget_bytes = std::size_t{blocks} * model_type::bytes_per_kv_block,
                                 .host_snapshot_budget_bytes = 4 * model_type::bytes_per_snapshot,
                                 .remote_keys = &keyer()});
  return std::move(*c);
}

chat_cache make_chat(std::size_t tokens) {
  const auto blocks = static_cast<std::uint32_t>(tokens / B + 2);
  auto c = chat_cache::create({.kv_blocks = blocks,
                               .snapshot_budget_bytes = 2 * model_type::bytes_per_snapshot,
                               .hasher_seed = 3,
                               .host_kv_budget_bytes = std::size_t{blocks} * model_type::bytes_per_kv_block,
                               .host_snapshot_budget_bytes = 4 * model_type::bytes_per_snapshot,
                               .remote_keys = &keyer(),
                               .remote_turn_ends = true,
                               .remote_writer_id = 1});
  return std::move(*c);
}

void set_rate(benchmark::State& state, std::size_t tokens) {
  state.counters["ns_per_token"] = benchmark::Counter(static_cast<double>(tokens), benchmark::Counter::kIsIterationInvariantRate |
                                                                                        benchmark::Counter::kInvert);
}

void BM_probe(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  remote_cache c = make_remote(tokens);
  std::vector<token_id> prompt = prompt_of(tokens, 1);
  std::size_t keys = 0;
  std::uint64_t iteration = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<token_id>(200000 + iteration++ % 1000000); // a new prompt: every key differs
    keys += c.probe(prompt)->keys.size();
  }
  state.counters["keys"] = static_cast<double>(keys) / static_cast<double>(state.iterations());
  set_rate(state, tokens);
}

void BM_probe_turn_ends(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  chat_cache c = make_chat(tokens);
  std::vector<token_id> prompt = prompt_of(tokens, 1);
  std::size_t keys = 0;
  std::uint64_t iteration = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<token_id>(200000 + iteration++ % 1000000);
    keys += c.probe(prompt)->keys.size();
  }
  state.counters["keys"] = static_cast<double>(keys) / static_cast<double>(state.iterations());
  set_rate(state, tokens);
}

void BM_probe_prefetch(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  remote_cache c = make_remote(tokens);
  std::vector<token_id> prompt = prompt_of(tokens, 1);
  std::uint64_t iteration = 0;
  const extra_keys none{};
  std::vector<content_key> found;
  std::vector<remote_fetch> fetches;
  std::size_t planned = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<token_id>(200000 + iteration++ % 1000000);
    found.clear();
    const auto listed = c.probe(prompt, none);
    for (const remote_probe& k : listed->keys) found.push_back(k.key);
    auto plan = c.prefetch(prompt, none, found);
    fetches.assign(plan->fetches.begin(), plan->fetches.end());
    (void)c.take_transfers();
    for (const remote_fetch& f : fetches) (void)c.fetched(f.item, f.unit, {});
    (void)c.step_complete(c.current_epoch());
    planned += fetches.size();
  }
  state.counters["fetches"] = static_cast<double>(planned) / static_cast<double>(state.iterations());
  set_rate(state, tokens);
}

void BM_floor(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  const content_key_context ctx = context();
  const std::vector<token_id> prompt = prompt_of(tokens, 1);
  const std::size_t last_grid = (tokens - 1) / model_type::alignment * model_type::alignment;
  std::size_t keys = 0;
  for (auto _ : state) keys += block_keys(ctx, {}, std::span(prompt).first(last_grid), B)->size();
  state.counters["keys"] = static_cast<double>(keys) / static_cast<double>(state.iterations());
  set_rate(state, tokens);
}

void BM_admit(benchmark::State& state) {
  const auto tokens = static_cast<std::size_t>(state.range(0));
  auto made = plain_cache::create({.kv_blocks = static_cast<std::uint32_t>(4 * (tokens / B + 2)),
                                   .snapshot_budget_bytes = 4 * model_type::bytes_per_snapshot,
                                   .hasher_seed = 3});
  plain_cache& c = *made;
  std::uint64_t iteration = 0;
  std::vector<token_id> prompt = prompt_of(tokens, 1);
  seq_id id = 0;
  for (auto _ : state) {
    prompt[0] = static_cast<token_id>(200000 + iteration++ % 1000000); // a new prompt: nothing matches
    auto plan = c.admit(id, prompt);
    benchmark::DoNotOptimize(plan);
    (void)c.commit(id, static_cast<std::uint32_t>(tokens));
    (void)c.release(id);
    (void)c.step_complete(c.current_epoch());
    ++id;
  }
  set_rate(state, tokens);
}

/// Each size's costs, and the probe's over the floor and over an admit.
void print_ratios(const reprise::bench::cpu_time_reporter& reporter) {
  std::printf("\n%-8s %10s %10s %10s %10s %16s %16s %16s\n", "tokens", "floor us", "probe us", "+prefetch", "admit us",
              "probe / floor", "probe / admit", "turn ends/probe");
  for (const auto& [name, t] : reporter.times()) {
    if (name.rfind("BM_floor/", 0) != 0) continue;
    const std::string arg = name.substr(9);
    const double probe = reporter.time("BM_probe/" + arg), both = reporter.time("BM_probe_prefetch/" + arg),
                 admit = reporter.time("BM_admit/" + arg), turn_ends = reporter.time("BM_probe_turn_ends/" + arg);
    std::printf("%-8s %10.1f %10.1f %10.1f %10.1f %16.2f %16.2f %16.2f\n", arg.c_str(), t, probe, both, admit, probe / t,
                probe / admit, turn_ends / probe);
  }
}

} // namespace

int main(int argc, char** argv) {
  // Each size's five runs back to back: a ratio of runs seconds apart is less exposed to a shared machine.
  for (std::int64_t tokens : {1024, 8192, 32768, 131072}) {
    benchmark::RegisterBenchmark("BM_floor", BM_floor)->Arg(tokens)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_probe", BM_probe)->Arg(tokens)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_probe_turn_ends", BM_probe_turn_ends)->Arg(tokens)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_probe_prefetch", BM_probe_prefetch)->Arg(tokens)->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark("BM_admit", BM_admit)->Arg(tokens)->Unit(benchmark::kMicrosecond);
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  reprise::bench::cpu_time_reporter reporter;
  benchmark::RunSpecifiedBenchmarks(&reporter);
  print_ratios(reporter);
  benchmark::Shutdown();
  return 0;
}
