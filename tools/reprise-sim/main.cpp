// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim: replays traffic through reprise::prefix_cache without a GPU and answers "with this traffic and
// this memory, what hit rate do I get, and which snapshot budget and interval should I set?".
#include "sim/csv.hpp"
#include "sim/models.hpp"
#include "sim/progress.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <charconv>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace reprise::sim;

namespace {

constexpr const char* usage = R"(usage:
  reprise-sim models
  reprise-sim generate  TRAFFIC -o FILE
  reprise-sim replay    TRAFFIC MODEL [CACHE] [--policy all|NAME[,NAME...]] [--csv FILE]
  reprise-sim sweep     TRAFFIC MODEL [CACHE] --axis AXIS [--values V,V,...] [--policy ...] --out DIR [--name STEM]

TRAFFIC (one of):
  --trace FILE [--on-error skip|fail]     a JSONL trace (docs/sim-trace-format.md); default: fail
  --workload chat|system_prompt|agentic|rag [--requests N] [--seed S] [--tenants T]
             [--active-sessions N] [--documents N] [--system-prompt-tokens N]
MODEL:
  --model nemotron-h-8b|qwen3-next-80b-a3b|falcon-h1-7b|llama-3-8b  or  --model-file FILE
  [--block-size B]                        override the attention block size
CACHE:
  --kv-budget BYTES (40GiB)  --snapshot-budget BYTES (8GiB)  --interval TOKENS (4 x alignment)
  --concurrency N (1)  --ttl STEPS (0: none)  --max-snapshots-per-path N (0: no cap)
AXIS: snapshot_budget | snapshot_interval | block_size | kv_budget
BYTES: 512MiB, 40GiB, 1.5G, or a plain number. A progress bar is drawn on stderr when it is a terminal
(--no-progress turns it off).
)";

struct args {
  std::string command;
  std::map<std::string, std::string> options;
  bool has(const std::string& k) const { return options.contains(k); }
  std::string get(const std::string& k, const std::string& fallback = "") const {
    auto it = options.find(k);
    return it == options.end() ? fallback : it->second;
  }
};

[[noreturn]] void die(const std::string& message, int code = 1) {
  std::cerr << "reprise-sim: " << message << "\n";
  std::exit(code);
}

args parse_args(int argc, char** argv) {
  static const char* flags[] = {"--no-progress"};
  args a;
  if (argc < 2) die(std::string("missing command\n") + usage, 2);
  a.command = argv[1];
  for (int i = 2; i < argc; ++i) {
    std::string k = argv[i];
    if (!k.starts_with("-")) die("unexpected argument '" + k + "'", 2);
    if (k == "-o") k = "--output";
    bool flag = false;
    for (const char* f : flags) flag |= k == f;
    if (flag) {
      a.options[k] = "1";
      continue;
    }
    if (i + 1 >= argc) die("option " + k + " needs a value", 2);
    a.options[k] = argv[++i];
  }
  return a;
}

std::uint64_t number(const args& a, const std::string& k, std::uint64_t fallback) {
  if (!a.has(k)) return fallback;
  const std::string v = a.get(k);
  std::uint64_t n = 0;
  auto [p, ec] = std::from_chars(v.data(), v.data() + v.size(), n);
  if (ec != std::errc{} || p != v.data() + v.size()) die(k + " needs an unsigned integer, got '" + v + "'", 2);
  return n;
}

std::uint64_t bytes(const args& a, const std::string& k, std::uint64_t fallback) {
  if (!a.has(k)) return fallback;
  auto v = parse_bytes(a.get(k));
  if (!v) die(k + " needs a byte size like 8GiB, got '" + a.get(k) + "'", 2);
  return *v;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

trace load_traffic(const args& a) {
  if (a.has("--trace")) {
    std::ifstream in(a.get("--trace"), std::ios::binary);
    if (!in) die("cannot open " + a.get("--trace"));
    parse_options o;
    const std::string mode = a.get("--on-error", "fail");
    if (mode == "skip") o.mode = on_error::skip;
    else if (mode != "fail") die("--on-error takes skip or fail", 2);
    parse_result r = parse_trace(in, o);
    for (const parse_error& e : r.errors) std::cerr << a.get("--trace") << ": " << to_string(e) << "\n";
    if (r.error_count > r.errors.size())
      std::cerr << a.get("--trace") << ": " << r.error_count - r.errors.size() << " more errors not shown\n";
    if (r.stopped) die("stopped at the first malformed line (use --on-error skip to skip such lines)");
    if (r.error_count) std::cerr << "reprise-sim: skipped " << r.error_count << " malformed lines\n";
    if (r.t.requests.empty()) die("the trace holds no request");
    return std::move(r.t);
  }
  if (!a.has("--workload")) die("give --trace FILE or --workload NAME", 2);
  workload_options w;
  auto kind = parse_workload(a.get("--workload"));
  if (!kind) die("unknown workload '" + a.get("--workload") + "' (chat, system_prompt, agentic, rag)", 2);
  w.kind = *kind;
  w.requests = number(a, "--requests", 10000);
  w.seed = number(a, "--seed", 1);
  w.tenants = static_cast<std::uint32_t>(number(a, "--tenants", 1));
  w.active_sessions = static_cast<std::uint32_t>(number(a, "--active-sessions", w.active_sessions));
  w.documents = static_cast<std::uint32_t>(number(a, "--documents", w.documents));
  w.system_prompt_tokens = static_cast<std::uint32_t>(number(a, "--system-prompt-tokens", w.system_prompt_tokens));
  if (w.requests == 0 || w.requests > (std::uint64_t{1} << 31)) die("--requests must be in [1, 2^31]", 2);
  return generate(w);
}

sim_model load_model(const args& a) {
  sim_model m;
  if (a.has("--model-file")) {
    auto r = parse_model_file(read_file(a.get("--model-file")));
    if (auto* e = std::get_if<std::string>(&r)) die(*e);
    m = std::get<sim_model>(r);
  } else {
    const sim_model* p = find_preset(a.get("--model", "nemotron-h-8b"));
    if (!p) {
      std::string names;
      for (const sim_model& x : preset_models()) names += (names.empty() ? "" : ", ") + x.name;
      die("unknown model '" + a.get("--model") + "' (" + names + ", or --model-file FILE)", 2);
    }
    m = *p;
  }
  if (a.has("--block-size")) {
    auto v = with_block_size(m.config, static_cast<std::uint32_t>(number(a, "--block-size", 16)));
    if (!v) die("block size " + a.get("--block-size") + " does not fit the model (" + std::string(reprise::to_string(v.error())) + ")");
    m.config = *v;
  }
  return m;
}

replay_config load_config(const args& a) {
  replay_config c;
  c.model = load_model(a);
  c.kv_budget_bytes = bytes(a, "--kv-budget", c.kv_budget_bytes);
  c.snapshot_budget_bytes = bytes(a, "--snapshot-budget", c.snapshot_budget_bytes);
  c.snapshot_interval = static_cast<std::uint32_t>(number(a, "--interval", 0));
  c.concurrency = static_cast<std::uint32_t>(number(a, "--concurrency", 1));
  c.snapshot_ttl_steps = number(a, "--ttl", 0);
  c.max_snapshots_per_path = static_cast<std::uint32_t>(number(a, "--max-snapshots-per-path", 0));
  if (c.concurrency == 0 || c.concurrency > 65536) die("--concurrency must be in [1, 65536]", 2);
  return c;
}

std::vector<policy_kind> load_policies(const args& a, const reprise::model_config& m) {
  const std::string v = a.get("--policy", "all");
  if (v == "all") return policies_for(m);
  std::vector<policy_kind> out;
  std::string_view rest = v;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view name = rest.substr(0, comma);
    auto p = parse_policy(name);
    if (!p) die("unknown policy '" + std::string(name) + "'", 2);
    out.push_back(*p);
    rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
  }
  return out;
}

void print_trace_summary(const trace& t) {
  std::cerr << "trace: " << t.requests.size() << " requests, " << t.sessions.size() << " sessions, "
            << t.tenants.size() << " tenants, " << t.total_prompt_tokens() << " prompt tokens, "
            << t.total_output_tokens() << " output tokens\n";
}

int cmd_models() {
  std::printf("%-20s %8s %6s %6s %12s %12s %s\n", "name", "params", "block", "align", "KV/block", "snapshot", "policies");
  for (const sim_model& m : preset_models()) {
    std::string policies;
    for (policy_kind p : policies_for(m.config)) policies += (policies.empty() ? "" : ",") + std::string(to_string(p));
    std::printf("%-20s %7.1fB %6u %6u %12s %12s %s\n", m.name.c_str(), m.active_params / 1e9, m.config.block_size(),
                m.config.alignment(), format_bytes(static_cast<double>(m.config.bytes_per_kv_block())).c_str(),
                format_bytes(static_cast<double>(m.config.bytes_per_snapshot())).c_str(), policies.c_str());
  }
  std::printf("\nblock sizes the cache supports: %s\n", supported_block_sizes_text().c_str());
  return 0;
}

int cmd_generate(const args& a) {
  if (!a.has("--output")) die("generate needs -o FILE", 2);
  const trace t = load_traffic(a);
  std::ofstream out(a.get("--output"), std::ios::binary);
  write_trace(out, t);
  if (!out) die("cannot write " + a.get("--output"));
  print_trace_summary(t);
  return 0;
}

int cmd_replay(const args& a) {
  const trace t = load_traffic(a);
  print_trace_summary(t);
  const replay_config base = load_config(a);
  const bool bar = !a.has("--no-progress") && progress::stderr_is_terminal();
  std::ofstream csv_file;
  std::optional<csv_writer> csv;
  if (a.has("--csv")) {
    csv_file.open(a.get("--csv"), std::ios::binary);
    if (!csv_file) die("cannot write " + a.get("--csv"));
    csv.emplace(csv_file, report_columns());
  }
  int status = 0;
  for (policy_kind p : load_policies(a, base.model.config)) {
    replay_config c = base;
    c.policy = p;
    progress pb(std::string(to_string(p)), t.requests.size(), bar);
    const replay_report r = replay(t, c, &pb);
    std::cout << format_report(r) << "\n";
    if (csv) write_report_row(*csv, r);
    if (!r.error.empty()) status = 1;
  }
  return status;
}

int cmd_sweep(const args& a) {
  const trace t = load_traffic(a);
  print_trace_summary(t);
  const replay_config base = load_config(a);
  auto axis = parse_sweep_axis(a.get("--axis"));
  if (!axis) die("--axis takes snapshot_budget, snapshot_interval, block_size or kv_budget", 2);
  std::vector<std::uint64_t> values;
  if (a.has("--values")) {
    std::string_view rest = a.options.at("--values");
    while (!rest.empty()) {
      const std::size_t comma = rest.find(',');
      const std::string item(rest.substr(0, comma));
      auto v = parse_bytes(item);
      if (!v || *v == 0) die("bad value '" + item + "' in --values", 2);
      values.push_back(*v);
      rest = comma == std::string_view::npos ? std::string_view{} : rest.substr(comma + 1);
    }
  } else {
    values = default_sweep_values(*axis, base.model.config);
  }
  const std::string dir = a.get("--out", ".");
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  const std::string stem = a.get("--name", base.model.name + "-" + std::string(to_string(*axis)));
  const bool bar = !a.has("--no-progress") && progress::stderr_is_terminal();
  const sweep_result s = run_sweep(t, base, load_policies(a, base.model.config), *axis, values, bar);
  std::string error;
  const std::string title = base.model.name + ", " + (a.has("--trace") ? a.get("--trace") : a.get("--workload")) +
                            ", " + std::to_string(t.requests.size()) + " requests";
  const auto files = write_sweep(s, dir, stem, title, error);
  if (files.empty()) die(error);
  std::set<std::string> warned;
  for (const sweep_point& p : s.points) {
    for (const std::string& w : p.report.warnings)
      if (warned.insert(w).second) std::cerr << "warning: " << w << "\n";
    if (!p.report.error.empty() && warned.insert(p.report.error).second)
      std::cerr << "warning: " << p.report.policy << ": " << p.report.error << "\n";
  }
  for (const std::string& f : files) std::cout << f << "\n";
  return 0;
}

} // namespace

int main(int argc, char** argv) {
  const args a = parse_args(argc, argv);
  if (a.command == "models") return cmd_models();
  if (a.command == "generate") return cmd_generate(a);
  if (a.command == "replay") return cmd_replay(a);
  if (a.command == "sweep") return cmd_sweep(a);
  if (a.command == "--help" || a.command == "-h" || a.command == "help") {
    std::cout << usage;
    return 0;
  }
  die("unknown command '" + a.command + "'\n" + usage, 2);
}
