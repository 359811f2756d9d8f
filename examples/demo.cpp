// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-demo: a multi-turn chat workload (conversations sharing a long system prompt, greedy replies)
// served by the example hybrid decoder through the minimal engine loop, with caching off and with each
// policy that applies: block_sharing on an attention-only variant, snapshot_restore and memory_only on the
// hybrid. Prints one table and exits non-zero if any run decodes anything different from caching off.
#include "hybrid/config.hpp"
#include "hybrid/decoder.hpp"
#include "hybrid/run.hpp"
#include "hybrid/uncached.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

namespace {

using namespace reprise;
using namespace reprise::example;

/// Prefill-exact snapshots only, so every restore is bitwise a cold prefill: captures at the last aligned
/// position of each prompt (the next turn of the same conversation restores there) and at the branch point
/// where a prompt leaves the cached tree (the next conversation restores at the end of the system prompt).
using exact_restore = policy::snapshot_restore<policy::capture<policy::last_aligned, policy::branch_point>,
                                               policy::accept_prefill_exact>;

struct options {
  workload_config workload;
  std::string policy = "all";
  std::string device = "cpu";
};

void usage() {
  std::puts(
      "usage: reprise-demo [options]\n"
      "\n"
      "Serves a multi-turn chat workload with a small seeded hybrid model (Mamba2, gated-delta and attention\n"
      "layers, fp32 on the host) through Reprise, once with caching off and once per policy, and prints what\n"
      "each policy saved. Every run must decode exactly the tokens of the caching-off run (and end with\n"
      "bitwise equal logits); the exit status is 1 if any does not.\n"
      "\n"
      "  --conversations N   conversations sharing the system prompt (default 4)\n"
      "  --turns N           user turns per conversation (default 3)\n"
      "  --system-tokens N   tokens of the shared system prompt (default 384)\n"
      "  --user-tokens N     tokens per user message (default 48)\n"
      "  --reply-tokens N    tokens decoded greedily per reply (default 16)\n"
      "  --seed N            seed of the workload's tokens (default 7)\n"
      "  --policy P          all | off | block-sharing | snapshot-restore | memory-only (default all);\n"
      "                      block-sharing runs on the attention-only variant, the others on the hybrid\n"
      "  --device D          cpu (default) | gpu\n"
      "  -h, --help          this text\n"
      "\n"
      "Models are named by their layer pattern, one letter per layer: M = Mamba2, D = gated delta rule,\n"
      "A = attention (every layer also has an MLP); `hybrid MDAMDA` has two of each.\n"
      "\n"
      "Columns: prefill = prompt tokens computed, skipped = prompt tokens whose prefill a hit skipped,\n"
      "KV-matched = tokens whose KV blocks were cached, lost = KV-matched tokens recomputed because no snapshot\n"
      "sat at a usable position, peak KV = most KV blocks referenced at once, snapshots = peak snapshot bytes.");
}

bool parse_u32(const char* s, std::uint32_t& out) {
  char* end = nullptr;
  const unsigned long v = std::strtoul(s, &end, 10);
  if (end == s || *end != '\0' || v > 1u << 20) return false;
  out = static_cast<std::uint32_t>(v);
  return true;
}

/// Returns 0 to run, or the exit status.
int parse(int argc, char** argv, options& o) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view a = argv[i];
    if (a == "-h" || a == "--help") {
      usage();
      return -1;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "reprise-demo: %s needs a value (try --help)\n", argv[i]);
      return 2;
    }
    const char* v = argv[++i];
    // Numeric options: where the value goes and whether 0 is allowed.
    const struct {
      std::string_view name;
      std::uint32_t* value;
      bool zero_ok;
    } numeric[] = {{"--conversations", &o.workload.conversations, false},
                   {"--turns", &o.workload.turns, false},
                   {"--system-tokens", &o.workload.system_tokens, true},
                   {"--user-tokens", &o.workload.user_tokens, false},
                   {"--reply-tokens", &o.workload.reply_tokens, false}};
    bool ok = true, known = false;
    for (const auto& opt : numeric) {
      if (a != opt.name) continue;
      known = true;
      ok = parse_u32(v, *opt.value) && (opt.zero_ok || *opt.value > 0);
    }
    if (a == "--seed") {
      std::uint32_t seed = 0;
      known = true;
      ok = parse_u32(v, seed);
      o.workload.seed = seed;
    } else if (a == "--policy") {
      known = true;
      o.policy = v;
      ok = o.policy == "all" || o.policy == "off" || o.policy == "block-sharing" || o.policy == "snapshot-restore" ||
           o.policy == "memory-only";
    } else if (a == "--device") {
      known = true;
      o.device = v;
      ok = o.device == "cpu" || o.device == "gpu";
    }
    if (!known) {
      std::fprintf(stderr, "reprise-demo: unknown option %s (try --help)\n", argv[i - 1]);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "reprise-demo: bad value '%s' for %s (try --help)\n", v, argv[i - 1]);
      return 2;
    }
  }
  return 0;
}

/// The example model runs on the host. Say clearly why `--device gpu` cannot be served instead of silently
/// running on the CPU.
int check_device(const options& o) {
  if (o.device != "gpu") return 0;
#if REPRISE_DEMO_CUDA_BUILD
  std::fprintf(stderr, "reprise-demo: --device gpu: the example model's layers run on the host only in this "
                       "version (the state kernels have device launchers in reprise::kernels, but the model's "
                       "attention and MLP do not); run with --device cpu\n");
#else
  std::fprintf(stderr, "reprise-demo: --device gpu: this build has no CUDA kernels (configure with "
                       "-DREPRISE_ENABLE_CUDA=ON on a machine with the CUDA toolkit), and the example model's "
                       "layers run on the host only; run with --device cpu\n");
#endif
  return 2;
}

struct row {
  std::string model, policy;
  workload_result result;
  const workload_result* baseline = nullptr;
};

/// A progress line on stderr while a run is going, only when stderr is a terminal.
struct progress_line {
  std::string label;
  bool tty = isatty(STDERR_FILENO) != 0;
  void operator()(std::uint32_t done, std::uint32_t total) const {
    if (tty) std::fprintf(stderr, "\r  %-34s turn %u/%u", label.c_str(), done, total);
  }
  void clear() const {
    if (tty) std::fprintf(stderr, "\r%60s\r", "");
  }
};

template <class Preset>
std::uint32_t blocks_per_sequence(const workload_config& w) {
  const std::uint32_t tokens = w.system_tokens + w.turns * (w.user_tokens + w.reply_tokens);
  return tokens / Preset::cache_model::block_size + 2;
}

template <class Cache>
workload_result serve(const decoder& model, Cache& cache, const workload& w, const std::string& label) {
  const progress_line p{label};
  workload_result r = run_workload(model, cache, w, {}, std::ref(p));
  p.clear();
  return r;
}

template <class Preset>
workload_result serve_uncached(const decoder& model, const workload& w, const std::string& label) {
  uncached cache(w.config.conversations * blocks_per_sequence<Preset>(w.config), Preset::cache_model::block_size);
  return serve(model, cache, w, label);
}

template <class Preset, class Policy>
workload_result serve_cached(const decoder& model, const workload& w, const std::string& label) {
  using model_t = typename Preset::cache_model;
  const workload_config& c = w.config;
  // Room for every live sequence plus the cached prefixes of finished turns: nothing is evicted here (the
  // tests exercise eviction with tiny budgets).
  cache_options o{.kv_blocks = 2 * c.conversations * blocks_per_sequence<Preset>(c),
                  .max_sequences = c.conversations,
                  .snapshot_budget_bytes = std::size_t{4} * c.conversations * c.turns * model_t::bytes_per_snapshot};
  auto cache = prefix_cache<model_t, Policy>::create(o);
  if (!cache) fail("prefix_cache::create", cache.error());
  return serve(model, *cache, w, label);
}

decoder make_model(const decoder_config& c) {
  auto m = decoder::make(c);
  if (!m) fail("decoder::make", m.error());
  return std::move(*m);
}

void print_table(const options& o, const std::vector<row>& rows) {
  const workload_config& w = o.workload;
  std::printf("workload: %u conversations x %u turns, system prompt %u tokens, user messages %u tokens, "
              "replies %u tokens (greedy)\n",
              w.conversations, w.turns, w.system_tokens, w.user_tokens, w.reply_tokens);
  std::printf("model = its layer pattern, one letter per layer: %c = Mamba2, %c = gated delta rule, %c = attention "
              "(each followed by an MLP)\n\n",
              static_cast<char>(layer_kind::mamba2), static_cast<char>(layer_kind::gated_delta),
              static_cast<char>(layer_kind::attention));
  std::printf("%-18s %-17s %8s %8s %10s %6s %8s %10s %8s %8s  %s\n", "model", "policy", "prefill", "skipped",
              "KV-matched", "lost", "peak KV", "snapshots", "wall ms", "speed-up", "outputs vs off");
  for (const row& r : rows) {
    const engine_stats& s = r.result.stats;
    const double mib = static_cast<double>(s.peak_snapshot_bytes) / (1024.0 * 1024.0);
    char snap[32];
    std::snprintf(snap, sizeof snap, "%.2f MiB", mib);
    const double ms = r.result.seconds * 1e3;
    const double speedup = r.baseline ? r.baseline->seconds / r.result.seconds : 1.0;
    const char* same = !r.baseline ? "(reference)" : same_outputs(r.result, *r.baseline) ? "identical" : "DIFFER";
    std::printf("%-18s %-17s %8llu %8llu %10llu %6llu %8u %10s %8.1f %7.2fx  %s\n", r.model.c_str(),
                r.policy.c_str(), static_cast<unsigned long long>(s.prefill_tokens),
                static_cast<unsigned long long>(s.skipped_tokens), static_cast<unsigned long long>(s.kv_matched_tokens),
                static_cast<unsigned long long>(s.lost_tokens), s.peak_kv_blocks, snap, ms, speedup, same);
  }
}

} // namespace

int main(int argc, char** argv) {
  options o;
  if (const int rc = parse(argc, argv, o); rc != 0) return rc < 0 ? 0 : rc;
  if (const int rc = check_device(o); rc != 0) return rc;

  using presets::demo_attention;
  using presets::demo_hybrid;
  const decoder hybrid = make_model(demo_hybrid::config());
  const decoder attention = make_model(demo_attention::config());
  const workload w = workload::make(o.workload, hybrid.config().vocab);
  const std::string hybrid_name = "hybrid " + hybrid.config().pattern;
  const std::string attention_name = "attention " + attention.config().pattern;
  const bool all = o.policy == "all";

  // Rows refer to their baseline by address: reserve so that pushing never moves them.
  std::vector<row> rows;
  rows.reserve(5);
  if (all || o.policy != "block-sharing") {
    const row& off = rows.emplace_back(row{hybrid_name, "off", serve_uncached<demo_hybrid>(hybrid, w, hybrid_name + " off")});
    if (all || o.policy == "snapshot-restore")
      rows.push_back({hybrid_name, "snapshot_restore",
                      serve_cached<demo_hybrid, exact_restore>(hybrid, w, hybrid_name + " snapshot_restore"),
                      &off.result});
    if (all || o.policy == "memory-only")
      rows.push_back({hybrid_name, "memory_only",
                      serve_cached<demo_hybrid, policy::memory_only>(hybrid, w, hybrid_name + " memory_only"),
                      &off.result});
  }
  if (all || o.policy == "block-sharing" || o.policy == "off") {
    const row& off = rows.emplace_back(
        row{attention_name, "off", serve_uncached<demo_attention>(attention, w, attention_name + " off")});
    if (o.policy != "off")
      rows.push_back({attention_name, "block_sharing",
                      serve_cached<demo_attention, policy::block_sharing>(attention, w,
                                                                          attention_name + " block_sharing"),
                      &off.result});
  }
  print_table(o, rows);

  bool identical = true;
  for (const row& r : rows) identical = identical && (!r.baseline || same_outputs(r.result, *r.baseline));
  std::printf("\n%s\n", identical ? "every cached run decoded exactly the tokens of the caching-off run "
                                    "(and bitwise equal final logits)"
                                  : "MISMATCH: a cached run decoded something different from caching off");
  return identical ? 0 : 1;
}
