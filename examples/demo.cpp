// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-demo: a multi-turn chat workload (conversations sharing a long system prompt, turns of varying
// length, greedy replies) served by the example hybrid decoder through the minimal engine loop, with caching
// off and with each policy that applies: the chat and strict presets and memory_only on the hybrid,
// block_sharing on an attention-only variant. Prints one table, the prefill floor, the chat preset's work per
// turn, and exits non-zero if any run decodes anything different from its reference: caching off for the
// prefill-exact policies, kept-alive sessions for chat.
#include "hybrid/config.hpp"
#include "hybrid/decoder.hpp"
#include "hybrid/kept_alive.hpp"
#include "hybrid/run.hpp"
#include "hybrid/uncached.hpp"

#include <reprise/cache/prefix_cache.hpp>
#include <reprise/policy/policies.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace {

using namespace reprise;
using namespace reprise::example;

/// The default workload. The system prompt ends off a KV block boundary (16 tokens) and off the alignment
/// unit (64), and message and reply lengths vary per conversation and turn, so turns end anywhere in a block:
/// the case a cache that keeps snapshots only at aligned positions cannot resume exactly.
constexpr workload_config demo_workload{.conversations = 4,
                                        .turns = 4,
                                        .system_tokens = 410,
                                        .user_tokens = 32,
                                        .user_tokens_max = 64,
                                        .reply_tokens = 8,
                                        .reply_tokens_max = 24,
                                        .seed = 7};

/// Bounds that keep every pool of the demo small (the KV pools, the snapshot slots, the engine's state
/// memory) and its run time in minutes at most.
constexpr std::uint64_t max_requests = 4096;      ///< conversations x turns
constexpr std::uint64_t max_total_tokens = 262144; ///< conversations x their longest possible length

struct options {
  workload_config workload = demo_workload;
  std::string policy = "all";
  std::string device = "cpu";
};

std::string range_text(std::uint32_t least, std::uint32_t most) {
  return most > least ? std::to_string(least) + "-" + std::to_string(most) : std::to_string(least);
}

/// "1 token", "48 tokens", "32-64 tokens".
std::string tokens_text(std::uint32_t least, std::uint32_t most) {
  return range_text(least, most) + (most <= least && least == 1 ? " token" : " tokens");
}

void usage() {
  const workload_config& d = demo_workload;
  std::printf(
      "usage: reprise-demo [options]\n"
      "\n"
      "Serves a multi-turn chat workload with a small seeded hybrid model (Mamba2, gated-delta and attention\n"
      "layers, fp32 on the host) through Reprise, once with caching off and once per policy, and prints what\n"
      "each policy computed against the prefill floor. Every run must decode exactly the tokens of its\n"
      "reference and end with bitwise equal logits; the exit status is 1 if any does not. The references:\n"
      "  strict, memory_only, block_sharing  caching off (every prompt prefilled cold): they reuse only\n"
      "                                      prefill-exact state\n"
      "  chat                                kept-alive sessions (one engine session per conversation that\n"
      "                                      never ends, fed each new turn's tokens): chat resumes turn-end\n"
      "                                      snapshots, decode-continuation state\n"
      "\n"
      "  --conversations N        conversations sharing the system prompt (default %u)\n"
      "  --turns N                user turns per conversation (default %u)\n"
      "  --system-tokens N        tokens of the shared system prompt (default %u)\n"
      "  --user-tokens N|MIN-MAX  tokens per user message: N each, or drawn per conversation and turn from\n"
      "                           MIN..MAX (default %s)\n"
      "  --reply-tokens N|MIN-MAX tokens decoded greedily per reply, the same way (default %s)\n"
      "  --seed N                 seed of the workload's tokens and lengths (default %llu)\n"
      "  --policy P               all | off | chat | strict | memory-only | block-sharing (default all);\n"
      "                           block-sharing runs on the attention-only variant, the others on the hybrid\n"
      "  --device D               cpu (default) | gpu\n"
      "  -h, --help               this text\n"
      "\n"
      "Numbers are whole, at most 1048576, and at least 1 but for the system prompt (may be empty) and the\n"
      "seed; conversations x turns at most %llu, and conversations x (system prompt + turns x (longest\n"
      "message + longest reply)) at most %llu tokens.\n"
      "\n"
      "Policies: chat = reprise::policy::chat (snapshots at turn ends, wherever they fall, and at branch\n"
      "points; a next turn resumes exactly where the last one stopped), strict = reprise::policy::strict\n"
      "(prefill-exact snapshots at the last aligned position and at branch points), memory_only (shares KV\n"
      "blocks, skips nothing), block_sharing (attention-only models: skips the shared KV blocks).\n"
      "\n"
      "Models are named by their layer pattern, one letter per layer: M = Mamba2, D = gated delta rule,\n"
      "A = attention (every layer also has an MLP); `hybrid MDAMDA` has two of each.\n"
      "\n"
      "Columns: prefill = prompt tokens computed, floor = prompt tokens that no earlier request's prompt or\n"
      "reply already held (from the token lists alone), /floor = prefill / floor, skipped = prompt tokens whose\n"
      "prefill a hit skipped, KV-matched = tokens whose KV blocks were cached, lost = KV-matched tokens\n"
      "recomputed because no snapshot sat at a usable position, peak KV = most KV blocks referenced at once,\n"
      "snapshots = peak snapshot bytes. Under the table, the chat preset's prompt, new (floor) and computed\n"
      "prefill tokens per turn index, summed over conversations.\n",
      d.conversations, d.turns, d.system_tokens, range_text(d.user_tokens, d.user_tokens_max).c_str(),
      range_text(d.reply_tokens, d.reply_tokens_max).c_str(), static_cast<unsigned long long>(d.seed),
      static_cast<unsigned long long>(max_requests), static_cast<unsigned long long>(max_total_tokens));
}

bool parse_u32(std::string_view s, std::uint32_t& out) {
  if (s.empty() || s.size() > 7) return false; // at most 2^20 below
  std::uint32_t v = 0;
  for (char ch : s) {
    if (ch < '0' || ch > '9') return false;
    v = v * 10 + static_cast<std::uint32_t>(ch - '0');
  }
  if (v > 1u << 20) return false;
  out = v;
  return true;
}

/// `N` (every length N) or `MIN-MAX` (drawn per conversation and turn), at least 1 token.
bool parse_lengths(std::string_view s, std::uint32_t& least, std::uint32_t& most) {
  const std::size_t dash = s.find('-');
  std::uint32_t lo = 0, hi = 0;
  if (dash == std::string_view::npos) {
    if (!parse_u32(s, lo)) return false;
    hi = lo;
  } else if (!parse_u32(s.substr(0, dash), lo) || !parse_u32(s.substr(dash + 1), hi) || hi < lo) {
    return false;
  }
  if (lo == 0) return false;
  least = lo;
  most = hi;
  return true;
}

/// The totals the options imply, against the demo's bounds. Returns 0 or the exit status.
int check_size(const workload_config& w) {
  const std::uint64_t requests = std::uint64_t{w.conversations} * w.turns;
  const std::uint64_t tokens =
      w.conversations * (w.system_tokens + std::uint64_t{w.turns} * (w.longest_user() + w.longest_reply()));
  if (requests > max_requests) {
    std::fprintf(stderr, "reprise-demo: %u conversations x %u turns is %llu requests; the demo serves at most %llu\n",
                 w.conversations, w.turns, static_cast<unsigned long long>(requests),
                 static_cast<unsigned long long>(max_requests));
    return 2;
  }
  if (tokens > max_total_tokens) {
    std::fprintf(stderr, "reprise-demo: the conversations may reach %llu tokens in all; the demo holds at most %llu "
                         "(fewer conversations, turns or tokens per turn)\n",
                 static_cast<unsigned long long>(tokens), static_cast<unsigned long long>(max_total_tokens));
    return 2;
  }
  return 0;
}

/// Returns 0 to run, -1 after --help, or the exit status.
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
    const std::string_view v = argv[++i];
    // Counts: where the value goes and whether 0 is allowed.
    const struct {
      std::string_view name;
      std::uint32_t* value;
      bool zero_ok;
    } counts[] = {{"--conversations", &o.workload.conversations, false},
                  {"--turns", &o.workload.turns, false},
                  {"--system-tokens", &o.workload.system_tokens, true}};
    const char* expected = nullptr; // what the option takes, in words; none: an unknown option
    bool ok = true;
    for (const auto& opt : counts) {
      if (a != opt.name) continue;
      expected = opt.zero_ok ? "a whole number from 0 to 1048576" : "a whole number from 1 to 1048576";
      ok = parse_u32(v, *opt.value) && (opt.zero_ok || *opt.value > 0);
    }
    if (a == "--user-tokens" || a == "--reply-tokens") {
      expected = "N or MIN-MAX, whole numbers from 1 to 1048576, MIN <= MAX";
      ok = a == "--user-tokens" ? parse_lengths(v, o.workload.user_tokens, o.workload.user_tokens_max)
                                : parse_lengths(v, o.workload.reply_tokens, o.workload.reply_tokens_max);
    } else if (a == "--seed") {
      std::uint32_t seed = 0;
      expected = "a whole number from 0 to 1048576";
      ok = parse_u32(v, seed);
      o.workload.seed = seed;
    } else if (a == "--policy") {
      expected = "all, off, chat, strict, memory-only or block-sharing";
      o.policy = v;
      ok = o.policy == "all" || o.policy == "off" || o.policy == "chat" || o.policy == "strict" ||
           o.policy == "memory-only" || o.policy == "block-sharing";
    } else if (a == "--device") {
      expected = "cpu or gpu";
      o.device = v;
      ok = o.device == "cpu" || o.device == "gpu";
    }
    if (!expected) {
      std::fprintf(stderr, "reprise-demo: unknown option %s (try --help)\n", argv[i - 1]);
      return 2;
    }
    if (!ok) {
      std::fprintf(stderr, "reprise-demo: bad value '%s' for %s: expected %s\n", argv[i], argv[i - 1], expected);
      return 2;
    }
  }
  return check_size(o.workload);
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

/// One run: what it computed, what it is timed against, and what it must decode bitwise.
struct row {
  std::string model, policy;
  workload_result result;
  const workload_result* baseline = nullptr;  ///< caching off on the same model (speed-up); none: it is that run
  const workload_result* reference = nullptr; ///< what the outputs must equal; none: it is a reference itself
  std::string reference_name;
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
std::uint32_t blocks_per_sequence(const workload& w) {
  return static_cast<std::uint32_t>(w.longest_conversation() / Preset::cache_model::block_size + 2);
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
  uncached cache(w.config.conversations * blocks_per_sequence<Preset>(w), Preset::cache_model::block_size);
  return serve(model, cache, w, label);
}

template <class Preset, class Policy>
workload_result serve_cached(const decoder& model, const workload& w, const std::string& label) {
  using model_t = typename Preset::cache_model;
  const workload_config& c = w.config;
  // Room for every live sequence plus the cached prefixes of finished turns: nothing is evicted here (the
  // tests exercise eviction with tiny budgets).
  cache_options o{.kv_blocks = 2 * c.conversations * blocks_per_sequence<Preset>(w),
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

/// Per admission (in admission order), the prompt tokens that no earlier admitted request's prompt or reply
/// already held: its length minus the longest prefix it shares with one of those sequences. Their sum is the
/// prefill floor; computed from the token lists alone. The longest shared prefix with a set of sequences is
/// the one with a lexicographic neighbour, so each admission looks at two.
std::vector<std::uint32_t> new_tokens(const workload_result& r, std::uint32_t turns) {
  std::set<std::vector<token>> earlier;
  std::vector<std::uint32_t> out;
  for (const admission& a : r.admissions) {
    const std::uint32_t conv = conversation_of(a.id, turns), turn = turn_of(a.id, turns);
    const std::vector<token>& p = r.prompts[conv][turn];
    std::size_t covered = 0;
    auto share = [&](const std::vector<token>& q) {
      covered = std::max(covered, static_cast<std::size_t>(std::mismatch(p.begin(), p.end(), q.begin(), q.end()).first -
                                                           p.begin()));
    };
    const auto next = earlier.lower_bound(p);
    if (next != earlier.end()) share(*next);
    if (next != earlier.begin()) share(*std::prev(next));
    out.push_back(static_cast<std::uint32_t>(p.size() - covered));
    std::vector<token> held = p;
    held.insert(held.end(), r.turns[conv][turn].generated.begin(), r.turns[conv][turn].generated.end());
    earlier.insert(std::move(held));
  }
  return out;
}

std::uint64_t sum(const std::vector<std::uint32_t>& v) {
  std::uint64_t n = 0;
  for (std::uint32_t x : v) n += x;
  return n;
}

/// In how many turns two runs decoded the same tokens, and in how many they also ended with bitwise equal logits.
std::pair<std::uint32_t, std::uint32_t> agreement(const workload_result& a, const workload_result& b) {
  std::uint32_t tokens = 0, logits = 0;
  for (std::size_t c = 0; c < a.turns.size() && c < b.turns.size(); ++c)
    for (std::size_t t = 0; t < a.turns[c].size() && t < b.turns[c].size(); ++t) {
      const completion &x = a.turns[c][t], &y = b.turns[c][t];
      if (x.generated != y.generated) continue;
      ++tokens;
      logits += x.last_logits.size() == y.last_logits.size() &&
                std::memcmp(x.last_logits.data(), y.last_logits.data(), x.last_logits.size() * sizeof(float)) == 0;
    }
  return {tokens, logits};
}

/// "identical to <reference>", or where the outputs differ from it.
std::string verdict(const row& r) {
  if (!r.reference) return "(reference)";
  if (const auto d = first_difference(r.result, *r.reference)) return "DIFFERS from " + r.reference_name + ": " + *d;
  return "identical to " + r.reference_name;
}

void print_table(const options& o, const std::vector<row>& rows) {
  const workload_config& w = o.workload;
  const bool drawn = w.user_tokens_max > w.user_tokens || w.reply_tokens_max > w.reply_tokens;
  std::printf("workload: %u conversations x %u turns, system prompt %s, user messages %s, replies %s (greedy)\n",
              w.conversations, w.turns, tokens_text(w.system_tokens, 0).c_str(),
              tokens_text(w.user_tokens, w.user_tokens_max).c_str(),
              tokens_text(w.reply_tokens, w.reply_tokens_max).c_str());
  std::printf("seed %llu%s; KV blocks of %u tokens, prefill-exact snapshots at multiples of %u (the alignment unit)\n",
              static_cast<unsigned long long>(w.seed), drawn ? ", lengths drawn per conversation and turn" : "",
              presets::demo_hybrid::cache_model::block_size, presets::demo_hybrid::cache_model::alignment);
  std::printf("model = its layer pattern, one letter per layer: %c = Mamba2, %c = gated delta rule, %c = attention "
              "(each followed by an MLP)\n\n",
              static_cast<char>(layer_kind::mamba2), static_cast<char>(layer_kind::gated_delta),
              static_cast<char>(layer_kind::attention));
  std::printf("%-15s %-13s %7s %6s %6s %7s %10s %5s %7s %9s %7s %8s  %s\n", "model", "policy", "prefill", "floor",
              "/floor", "skipped", "KV-matched", "lost", "peak KV", "snapshots", "wall ms", "speed-up", "outputs");
  for (const row& r : rows) {
    const engine_stats& s = r.result.stats;
    const std::uint64_t floor = sum(new_tokens(r.result, w.turns));
    char snap[32];
    std::snprintf(snap, sizeof snap, "%.2f MiB", static_cast<double>(s.peak_snapshot_bytes) / (1024.0 * 1024.0));
    char ratio[16] = "-";
    if (floor != 0)
      std::snprintf(ratio, sizeof ratio, "%.2fx", static_cast<double>(s.prefill_tokens) / static_cast<double>(floor));
    const double speedup = r.baseline ? r.baseline->seconds / r.result.seconds : 1.0;
    std::printf("%-15s %-13s %7llu %6llu %6s %7llu %10llu %5llu %7u %9s %7.1f %7.2fx  %s\n", r.model.c_str(),
                r.policy.c_str(), static_cast<unsigned long long>(s.prefill_tokens),
                static_cast<unsigned long long>(floor), ratio, static_cast<unsigned long long>(s.skipped_tokens),
                static_cast<unsigned long long>(s.kv_matched_tokens), static_cast<unsigned long long>(s.lost_tokens),
                s.peak_kv_blocks, snap, r.result.seconds * 1e3, speedup, verdict(r).c_str());
  }
}

/// The chat preset's work per turn index, summed over conversations: from turn 2 on it computes only the new
/// tokens plus the previous reply's last token (sampled, never fed).
void print_turns(const workload_config& w, const workload_result& chat) {
  std::vector<std::uint64_t> prompt(w.turns), fresh(w.turns), computed(w.turns);
  const std::vector<std::uint32_t> floor = new_tokens(chat, w.turns);
  for (std::size_t i = 0; i < chat.admissions.size(); ++i) {
    const admission& a = chat.admissions[i];
    const std::uint32_t t = turn_of(a.id, w.turns);
    prompt[t] += a.prompt_tokens;
    fresh[t] += floor[i];
    computed[t] += a.prompt_tokens - a.usable_tokens;
  }
  std::printf("\nchat per turn, summed over the %u conversations:\n%6s %8s %8s %8s\n", w.conversations, "turn",
              "prompt", "new", "prefill");
  for (std::uint32_t t = 0; t < w.turns; ++t)
    std::printf("%6u %8llu %8llu %8llu\n", t + 1, static_cast<unsigned long long>(prompt[t]),
                static_cast<unsigned long long>(fresh[t]), static_cast<unsigned long long>(computed[t]));
  if (w.conversations > 1 && w.system_tokens > 0)
    std::printf("(turn 1: the first conversation computes the system prompt; the second captures a snapshot at the "
                "last\nKV block it shares with the first (off the alignment grid: its prefill is split there); later "
                "ones restore it)\n");
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
  rows.reserve(6);
  std::optional<workload_result> kept_alive;
  const row* chat = nullptr;
  if (all || o.policy != "block-sharing") {
    const row& off = rows.emplace_back(
        row{hybrid_name, "off", serve_uncached<demo_hybrid>(hybrid, w, hybrid_name + " off"), nullptr, nullptr, {}});
    if (all || o.policy == "chat") {
      workload_result served = serve_cached<demo_hybrid, policy::chat>(hybrid, w, hybrid_name + " chat");
      // The sessions split their first prefill where the cache split or resumed it (a branch block).
      kept_alive = run_kept_alive(hybrid, w, first_turn_splits(served, w.config));
      chat = &rows.emplace_back(row{hybrid_name, "chat", std::move(served), &off.result, &*kept_alive, "kept-alive"});
    }
    if (all || o.policy == "strict")
      rows.push_back({hybrid_name, "strict",
                      serve_cached<demo_hybrid, policy::strict>(hybrid, w, hybrid_name + " strict"),
                      &off.result, &off.result, "off"});
    if (all || o.policy == "memory-only")
      rows.push_back({hybrid_name, "memory_only",
                      serve_cached<demo_hybrid, policy::memory_only>(hybrid, w, hybrid_name + " memory_only"),
                      &off.result, &off.result, "off"});
  }
  if (all || o.policy == "block-sharing" || o.policy == "off") {
    const row& off = rows.emplace_back(row{attention_name, "off",
                                           serve_uncached<demo_attention>(attention, w, attention_name + " off"),
                                           nullptr, nullptr, {}});
    if (o.policy != "off")
      rows.push_back({attention_name, "block_sharing",
                      serve_cached<demo_attention, policy::block_sharing>(attention, w,
                                                                          attention_name + " block_sharing"),
                      &off.result, &off.result, "off"});
  }
  print_table(o, rows);
  if (chat) print_turns(o.workload, chat->result);

  // Which reference each kind of row was checked against, for the rows this run has.
  const bool exact_rows =
      std::any_of(rows.begin(), rows.end(), [&](const row& r) { return r.reference && &r != chat; });
  if (exact_rows || chat) std::printf("\n");
  if (exact_rows)
    std::printf("off: the reference of strict, memory_only and block_sharing. They reuse only prefill-exact state, so "
                "they\nmust decode bitwise the tokens and final logits of every prompt prefilled cold.\n");
  if (chat) {
    const auto [tokens, logits] = agreement(chat->result, rows.front().result);
    std::printf("kept-alive: the reference of chat, one engine session per conversation that never ends, fed "
                "each new turn's\ntokens, its first prefill split where the cache split or resumed it (the shared "
                "system prompt's last\nKV block). chat restores decode-continuation state, which a cold "
                "prefill need not\nreproduce bit for bit: against off, chat decoded the same tokens in %u of %u "
                "replies, with bitwise equal\nfinal logits in %u (off prefills the earlier replies; a session decoded "
                "them step by step).\n",
                tokens, o.workload.conversations * o.workload.turns, logits);
  }
  bool identical = true, compared = false;
  for (const row& r : rows) {
    compared = compared || r.reference;
    identical = identical && (!r.reference || same_outputs(r.result, *r.reference));
  }
  std::printf("%s\n", !compared   ? "caching off only: no run to compare"
                      : identical ? "every run decoded exactly what its reference decoded (tokens and bitwise equal "
                                    "final logits)"
                                  : "MISMATCH: a run decoded something different from its reference");
  return identical ? 0 : 1;
}
