// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim: replays traffic through reprise::prefix_cache without a GPU and answers "with this traffic and
// this memory, what hit rate do I get, and which snapshot budget and interval should I set?".
#include "sim/cli.hpp"
#include "sim/csv.hpp"
#include "sim/models.hpp"
#include "sim/progress.hpp"
#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

using namespace reprise::sim;

namespace {

[[noreturn]] void die(const std::string& message, int code = 1) {
  std::cerr << "reprise-sim: " << message << "\n";
  std::exit(code);
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) die("cannot open " + path);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

trace load_traffic(const cli_options& o) {
  if (o.use_workload) return generate(o.workload);
  std::ifstream in(o.trace_path, std::ios::binary);
  if (!in) die("cannot open " + o.trace_path);
  parse_result r = parse_trace(in, {.mode = o.trace_errors});
  for (const parse_error& e : r.errors) std::cerr << o.trace_path << ": " << to_string(e) << "\n";
  if (r.error_count > r.errors.size())
    std::cerr << o.trace_path << ": " << r.error_count - r.errors.size() << " more errors not shown\n";
  if (r.stopped) die("stopped at the first malformed line (use --on-error skip to skip such lines)");
  if (r.error_count) std::cerr << "reprise-sim: skipped " << r.error_count << " malformed lines\n";
  if (r.t.requests.empty()) die("the trace holds no request");
  return std::move(r.t);
}

sim_model load_model(const cli_options& o) {
  sim_model m;
  if (!o.model_file.empty()) {
    auto r = parse_model_file(read_file(o.model_file));
    if (auto* e = std::get_if<std::string>(&r)) die(o.model_file + ": " + *e);
    m = std::get<sim_model>(r);
  } else {
    m = *find_preset(o.model_name); // the parser accepts preset names only
  }
  if (o.block_size != 0) {
    auto v = with_block_size(m.config, o.block_size);
    if (!v)
      die("--block-size " + std::to_string(o.block_size) + " does not fit " + m.name + " (" +
          std::string(reprise::to_string(v.error())) + ")", 2);
    m.config = *v;
  }
  return m;
}

replay_config load_config(const cli_options& o) {
  replay_config c = o.cache;
  c.model = load_model(o);
  return c;
}

/// The policies to run: those asked for, each checked against the model (and the host tier), or all that
/// apply (with a host tier, or along a host axis, all that take one).
std::vector<policy_kind> load_policies(const cli_options& o, const sim_model& m) {
  std::vector<policy_kind> applicable = policies_for(m.config);
  const bool host_axis = o.command == command_kind::sweep && o.axis && sweep_takes_zero(*o.axis);
  if (o.policies.empty()) {
    if (o.cache.host_kv_budget_bytes != 0 || host_axis) std::erase_if(applicable, [](policy_kind p) { return !takes_host_tier(p); });
    return applicable;
  }
  for (policy_kind p : o.policies) {
    if (o.cache.host_kv_budget_bytes != 0 && !takes_host_tier(p))
      die("--host-kv-budget: " + std::string(rule_message(reprise::config_rule::memory_only_host_tier)), 2);
    if (std::find(applicable.begin(), applicable.end(), p) == applicable.end()) {
      std::string names;
      for (policy_kind a : applicable) names += (names.empty() ? "" : ", ") + std::string(to_string(a));
      die("--policy " + std::string(to_string(p)) + " does not apply to " + m.name + " (" +
          (m.config.has_recurrent() ? "it has recurrent layers" : "attention-only") + "; its policies: " + names + ")", 2);
    }
  }
  return o.policies;
}

void print_trace_summary(const trace& t) {
  std::cerr << "trace: " << t.requests.size() << " requests, " << t.sessions.size() << " sessions, "
            << t.tenants.size() << " tenants, " << t.total_prompt_tokens() << " prompt tokens, "
            << t.total_output_tokens() << " output tokens\n";
}

int cmd_models() {
  std::cout << models_table();
  std::cout << "\nblock sizes the cache supports: " << supported_block_sizes_text() << "\n";
  return 0;
}

int cmd_generate(const cli_options& o) {
  const trace t = load_traffic(o);
  std::ofstream out(o.output, std::ios::binary);
  write_trace(out, t);
  if (!out) die("cannot write " + o.output);
  print_trace_summary(t);
  return 0;
}

int cmd_replay(const cli_options& o) {
  const replay_config base = load_config(o);
  const std::vector<policy_kind> policies = load_policies(o, base.model);
  const trace t = load_traffic(o);
  print_trace_summary(t);
  const bool bar = o.progress && progress::stderr_is_terminal();
  std::ofstream csv_file;
  std::optional<csv_writer> csv;
  if (!o.csv.empty()) {
    csv_file.open(o.csv, std::ios::binary);
    if (!csv_file) die("cannot write " + o.csv);
    csv.emplace(csv_file, report_columns());
  }
  int status = 0;
  std::vector<replay_report> reports;
  for (policy_kind p : policies) {
    replay_config c = base;
    c.policy = p;
    progress pb(std::string(to_string(p)), t.requests.size(), bar);
    replay_report r = simulate(t, c, o.limits, &pb);
    std::cout << format_report(r) << "\n";
    if (csv) write_report_row(*csv, r);
    if (!r.error.empty()) status = 1;
    reports.push_back(std::move(r));
  }
  std::cout << format_summary(reports);
  return status;
}

int cmd_sweep(const cli_options& o) {
  const replay_config base = load_config(o);
  const std::vector<policy_kind> policies = load_policies(o, base.model);
  const trace t = load_traffic(o);
  print_trace_summary(t);
  const sweep_axis axis = *o.axis;
  const std::vector<std::uint64_t> values = o.values.empty() ? default_sweep_values(axis, base) : o.values;
  std::error_code ec;
  std::filesystem::create_directories(o.out_dir, ec);
  if (ec) die("cannot create " + o.out_dir + ": " + ec.message());
  const std::string stem = o.name.empty() ? base.model.name + "-" + std::string(to_string(axis)) : o.name;
  const bool bar = o.progress && progress::stderr_is_terminal();
  std::string error;
  const std::string title = base.model.name + ", " + (o.use_workload ? std::string(to_string(o.workload.kind)) : o.trace_path) +
                            ", " + std::to_string(t.requests.size()) + " requests";
  if (!o.evictions.empty()) {
    replay_config c = base;
    c.policy = policies.front();
    const eviction_sweep_result s = run_eviction_sweep(t, c, o.evictions, o.working_set_fractions, bar, o.limits);
    const auto files = write_eviction_sweep(s, o.out_dir, stem, title + ", " + std::string(to_string(c.policy)), error);
    if (files.empty()) die(error);
    std::cout << "working set " << format_bytes(static_cast<double>(s.working_set_bytes)) << "\n";
    std::cout << "eviction,fraction,budget,slots,computed_over_floor,computed_tokens,hit_rate\n";
    std::size_t k = 0;
    for (eviction_kind e : s.evictions)
      for (std::uint64_t d : s.denominators) {
        const replay_report& r = s.points[k++].report;
        if (!r.error.empty()) std::cerr << "warning: " << name_of(e) << " 1/" << d << ": " << r.error << "\n";
        std::cout << name_of(e) << ",1/" << d << "," << format_bytes(static_cast<double>(r.snapshot_budget_bytes)) << ","
                  << r.snapshot_slots << "," << r.computed_over_floor() << "," << r.prompt_tokens - r.usable_tokens << ","
                  << r.hit_rate() << "\n";
      }
    for (const std::string& f : files) std::cout << f << "\n";
    return 0;
  }
  const sweep_result s = run_sweep(t, base, policies, axis, values, bar, o.limits);
  const auto files = write_sweep(s, o.out_dir, stem, title, error);
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
  const cli_parse p = parse_command_line(argc, argv);
  if (!p.run) {
    (p.exit_code ? std::cerr : std::cout) << p.text;
    return p.exit_code;
  }
  const cli_options& o = p.options;
  switch (o.command) {
  case command_kind::models: return cmd_models();
  case command_kind::generate: return cmd_generate(o);
  case command_kind::replay: return cmd_replay(o);
  case command_kind::sweep: return cmd_sweep(o);
  }
  return 2;
}
