// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/cli.hpp"

#include <CLI/CLI.hpp>

#include <charconv>
#include <cstdio>
#include <sstream>

namespace reprise::sim {

std::string policy_names() {
  std::string s;
  for (policy_kind p : all_policies) s += (s.empty() ? "" : ", ") + std::string(to_string(p));
  return s;
}

std::string models_table() {
  std::string s;
  char buf[512];
  std::snprintf(buf, sizeof buf, "%-20s %-14s %6s %6s %12s %12s %s\n", "name", "params", "block", "align", "KV/block",
                "snapshot", "policies");
  s += buf;
  for (const sim_model& m : preset_models()) {
    std::string policies;
    for (policy_kind p : policies_for(m.config)) policies += (policies.empty() ? "" : ",") + std::string(to_string(p));
    char params[64];
    if (m.total_params > m.active_params)
      std::snprintf(params, sizeof params, "%.1fB/%.0fB", m.active_params / 1e9, m.total_params / 1e9);
    else std::snprintf(params, sizeof params, "%.1fB", m.active_params / 1e9);
    std::snprintf(buf, sizeof buf, "%-20s %-14s %6u %6u %12s %12s %s\n", m.name.c_str(), params, m.config.block_size(),
                  m.config.alignment(), format_bytes(static_cast<double>(m.config.bytes_per_kv_block())).c_str(),
                  format_bytes(static_cast<double>(m.config.bytes_per_snapshot())).c_str(), policies.c_str());
    s += buf;
  }
  s += "\nparams: active/total for mixture-of-experts models (the FLOPs estimate uses the active count)\n";
  return s;
}

namespace {

/// A byte size ("8GiB", "1.5G", "4096") in [lo, hi], rewritten to its plain number for the option's type.
CLI::Validator bytes_in(std::uint64_t lo, std::uint64_t hi) {
  const std::string range = "[" + format_bytes(static_cast<double>(lo)) + ", " + format_bytes(static_cast<double>(hi)) + "]";
  return CLI::Validator(
      [lo, hi, range](std::string& s) -> std::string {
        const auto v = parse_bytes(s);
        if (!v) return "needs a byte size such as 8GiB, 512MiB or 4096, got '" + s + "'";
        if (*v < lo || *v > hi) return "byte size " + s + " not in range " + range;
        s = std::to_string(*v);
        return {};
      },
      "BYTES in " + range);
}

/// Comma-separated values; each one parsed by `one`, which returns an error or an empty string.
template <class F>
std::string split_each(const std::string& list, F&& one) {
  std::string_view rest = list;
  if (rest.empty()) return "needs at least one value";
  while (true) {
    const std::size_t comma = rest.find(',');
    if (std::string e = one(std::string(rest.substr(0, comma))); !e.empty()) return e;
    if (comma == std::string_view::npos) return {};
    rest.remove_prefix(comma + 1);
  }
}

/// A decimal unsigned integer in [lo, hi]. CLI11's own conversion would read "-1" as 2^64 - 1 and wrap
/// values past 2^64, so the text is checked here, digits only, before it is converted.
CLI::Validator range(std::uint64_t lo, std::uint64_t hi) {
  const std::string text = "[" + std::to_string(lo) + " - " + std::to_string(hi) + "]";
  return CLI::Validator(
      [lo, hi, text](std::string& s) -> std::string {
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
        if (s.empty() || ec != std::errc{} || end != s.data() + s.size() || v < lo || v > hi)
          return "Value " + s + " not in range " + text;
        return {};
      },
      "UINT in " + text);
}

} // namespace

cli_parse parse_command_line(int argc, const char* const* argv) {
  cli_parse result;
  cli_options& o = result.options;
  using L = cli_limits;

  CLI::App app{"reprise-sim: replays traffic through reprise::prefix_cache without a GPU and answers \"with this "
               "traffic and this memory, what hit rate do I get, and which snapshot budget and interval should I "
               "set?\"",
               "reprise-sim"};
  app.require_subcommand(1, 1);
  app.footer("BYTES: 512MiB, 40GiB, 1.5G or a plain number (K/M/G/T and KiB..TiB are powers of 1024).\n"
             "Traces: docs/sim-trace-format.md. Run `reprise-sim COMMAND --help` for a command's options.");

  std::string workload, model, policy = "all", on_error_text = "fail", axis, values, affinity = "on";
  std::string remote_write = "back", remote_probe = "on", remote_turn_ends = "off", eviction = "lru";
  bool no_progress = false;

  app.add_subcommand("models", "list the preset models, their block and snapshot sizes and policies");
  auto* generate = app.add_subcommand("generate", "write a generated workload as a JSONL trace");
  auto* replay = app.add_subcommand("replay", "replay traffic once per policy and print a report and a summary table");
  auto* sweep = app.add_subcommand("sweep", "replay along one axis and write a CSV and SVG charts");

  auto add_traffic = [&](CLI::App* c) {
    auto* tr = c->add_option("--trace", o.trace_path, "a JSONL trace (docs/sim-trace-format.md)")->check(CLI::ExistingFile);
    c->add_option("--on-error", on_error_text, "what a malformed trace line does: fail (stop) or skip it")
        ->check(CLI::IsMember({"fail", "skip"}))
        ->needs(tr);
    auto* wl = c->add_option("--workload", workload, "a generated workload instead of a trace")
                   ->check(CLI::IsMember({"chat", "system_prompt", "agentic", "rag", "long_context"}))
                   ->excludes(tr);
    c->add_option("--requests", o.workload.requests, "requests to generate")
        ->check(range(1, L::max_requests))
        ->needs(wl);
    c->add_option("--seed", o.workload.seed, "generator seed")->check(range(0, ~std::uint64_t{0}))->needs(wl);
    c->add_option("--tenants", o.workload.tenants, "sessions are spread over this many tenants")
        ->check(range(1, L::max_tenants))
        ->needs(wl);
    c->add_option("--active-sessions", o.workload.active_sessions, "conversations interleaved at any time")
        ->check(range(1, L::max_active_sessions))
        ->needs(wl);
    c->add_option("--documents", o.workload.documents, "rag: corpus size")
        ->check(range(1, L::max_documents))
        ->needs(wl);
    c->add_option("--system-prompt-tokens", o.workload.system_prompt_tokens, "system_prompt: the shared prompt's length")
        ->check(range(1, L::max_system_prompt_tokens))
        ->needs(wl);
  };
  auto add_model = [&](CLI::App* c) {
    std::vector<std::string> names;
    for (const sim_model& m : preset_models()) names.push_back(m.name);
    auto* mo = c->add_option("--model", model, "a preset model (default nemotron-h-8b)")->check(CLI::IsMember(names));
    c->add_option("--model-file", o.model_file, "a model file (docs/sim-trace-format.md, \"Model files\")")
        ->check(CLI::ExistingFile)
        ->excludes(mo);
    c->add_option("--block-size", o.block_size, "override the attention block size (tokens)")
        ->check(range(1, L::max_block_size));
  };
  auto add_cache = [&](CLI::App* c) {
    c->add_option("--kv-budget", o.cache.kv_budget_bytes, "KV block memory (default 40GiB)")
        ->transform(bytes_in(1, L::max_bytes));
    c->add_option("--snapshot-budget", o.cache.snapshot_budget_bytes, "snapshot memory (default 8GiB)")
        ->transform(bytes_in(0, L::max_bytes));
    c->add_option("--interval", o.cache.snapshot_interval, "snapshot interval in tokens (0: 4 x the alignment unit)")
        ->check(range(0, L::max_interval));
    c->add_option("--concurrency", o.cache.concurrency, "requests in flight (default 1)")
        ->check(range(1, L::max_concurrency));
    c->add_option("--host-kv-budget", o.cache.host_kv_budget_bytes,
                  "host memory for the KV blocks the GPU pool evicts, offloaded and onboarded on a later hit "
                  "(default 0: no host tier; not with memory_only)")
        ->transform(bytes_in(0, L::max_bytes));
    c->add_option("--host-snapshot-budget", o.cache.host_snapshot_budget_bytes,
                  "host memory for the snapshots the GPU pool evicts (default 0; needs --host-kv-budget)")
        ->transform(bytes_in(0, L::max_bytes));
    c->add_option("--engines", o.cache.engines,
                  "engines serving the traffic, each with its own cache of the budgets above (default 1)")
        ->check(range(1, L::max_engines));
    c->add_option("--affinity", affinity,
                  "on: every request of a conversation goes to the engine its first request went to; off: round "
                  "robin; state: to the engine whose cache holds the most usable state for the prompt (a state "
                  "router fed by the caches' events, no session ids), under a load cap (default on)")
        ->check(CLI::IsMember({"on", "off", "state"}));
    c->add_option("--load-slack", o.cache.load_slack,
                  "with --affinity state: an engine takes a request only while its requests so far are at most "
                  "(all requests + 1) / engines x (1 + slack) (default 0.25)")
        ->check(CLI::Range(0.0, 100.0));
    auto* remote = c->add_flag("--remote-tier", o.cache.remote_tier,
                               "a store shared by the engines below their host tiers: prefill-exact blocks and "
                               "snapshots are put there (see --remote-write), every request is prefetched from it "
                               "(needs --host-kv-budget)");
    c->add_option("--remote-budget", o.cache.remote_budget_bytes,
                  "the modelled store's capacity, least recently used values evicted first (default 0: unlimited)")
        ->transform(bytes_in(0, L::max_bytes))
        ->needs(remote);
    c->add_option("--remote-write", remote_write,
                  "when values reach the store: back (when a host tier evicts them; default) or through (as soon as "
                  "the step that computed them completed)")
        ->check(CLI::IsMember({"back", "through"}))
        ->needs(remote);
    c->add_option("--remote-probe", remote_probe,
                  "on: ask the store which keys it has before every prefetch and fetch only those (default); off: "
                  "fetch every candidate, a host unit reserved for each until it is answered")
        ->check(CLI::IsMember({"on", "off"}))
        ->needs(remote);
    c->add_option("--remote-turn-ends", remote_turn_ends,
                  "on: every turn end also goes to the store, one value linked to the blocks it needs (each put "
                  "once), and a prefetch fetches the deepest one under its prompt (policy chat; needs --remote-probe "
                  "on); off: turn ends stay in their engine (default)")
        ->check(CLI::IsMember({"on", "off"}))
        ->needs(remote);
    c->add_option("--remote-candidates", o.cache.remote_snapshot_candidates,
                  "snapshots a prefetch asks the store for, deepest first (default 2)")
        ->check(range(1, L::max_remote_candidates))
        ->needs(remote);
    auto* redis = c->add_option("--remote-redis", o.cache.remote_redis,
                                "HOST:PORT of a live Redis / Valkey server to use as the store instead of the model")
                      ->needs(remote);
    c->add_option("--remote-stand-in-bytes", o.cache.remote_stand_in_bytes,
                  "with --remote-redis: the payload stored with each value in place of its real bytes (default 4KiB)")
        ->transform(bytes_in(1, std::uint64_t{1} << 28))
        ->needs(redis);
    c->add_option("--ttl", o.cache.snapshot_ttl_steps, "snapshot time to live in steps (0: none)")
        ->check(range(0, ~std::uint64_t{0}));
    c->add_option("--max-snapshots-per-path", o.cache.max_snapshots_per_path, "snapshots kept per path (0: no cap)")
        ->check(range(0, L::max_snapshots_per_path));
    c->add_option("--max-cache-memory", o.limits.max_cache_bytes,
                  "host memory the cache's KV block bookkeeping may take (default 4GiB); a larger pool is an error")
        ->transform(bytes_in(std::uint64_t{1} << 20, L::max_bytes));
    c->add_flag("--last-turn-hints", o.cache.last_turn_hints,
                "finish a conversation's last turn (no later request continues it) with finish_options::last_turn, "
                "as an engine that knows when a chat ends");
    c->add_option("--snapshot-eviction", eviction,
                  "which idle snapshot goes when the snapshot budget is full: lru (default), cost-aware (the "
                  "cache's rule: fewest prefill FLOPs saved of the 8 oldest), marconi (normalized recency + alpha x "
                  "FLOP efficiency) or oracle (offline: the trace's future)")
        ->check(CLI::IsMember({"lru", "cost-aware", "marconi", "oracle"}));
    c->add_option("--marconi-alpha", o.cache.marconi_alpha, "marconi's weight of FLOP efficiency (default 1)")
        ->check(CLI::Range(0.0, 1e6));
    c->add_option("--policy", policy, "all, or a comma-separated list of: " + policy_names());
    c->add_flag("--no-progress", no_progress, "no progress bar (it is drawn only when stderr is a terminal)");
  };

  add_traffic(generate);
  generate->add_option("-o,--output", o.output, "the trace file to write")->required();
  for (CLI::App* c : {replay, sweep}) {
    add_traffic(c);
    add_model(c);
    add_cache(c);
  }
  replay->add_option("--csv", o.csv, "also write one CSV row per policy to this file");
  sweep
      ->add_option("--axis", axis,
                   "the swept value: snapshot_budget, snapshot_interval, block_size, kv_budget, host_kv_budget, "
                   "host_snapshot_budget, host_scale (both host budgets, as multiples of --kv-budget and "
                   "--snapshot-budget), or engines (the fleet's size); hyphens work too")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return parse_sweep_axis(s) ? std::string() : "unknown axis '" + s + "'";
          },
          "AXIS"))
      ->required();
  sweep->add_option("--values", values,
                    "comma-separated values along the axis (byte sizes for budgets; 0 on a host axis: no host tier)");
  std::string evictions, fractions = "32,16,8,4,2,1";
  sweep->add_option("--evictions", evictions,
                    "compare snapshot eviction rules instead of policies: a comma-separated list of lru, cost-aware, "
                    "marconi, oracle (needs --axis snapshot_budget and one --policy)");
  sweep->add_option("--working-set-fractions", fractions,
                    "with --evictions: budgets of the working set / each of these (default 32,16,8,4,2,1)");
  sweep->add_option("--out", o.out_dir, "directory for the CSV and charts (created)");
  sweep->add_option("--name", o.name, "file name stem (default MODEL-AXIS)");

  if (argc > 1 && argv[1][0] != '-') {
    const std::string_view first = argv[1];
    if (first != "models" && first != "generate" && first != "replay" && first != "sweep") {
      result.exit_code = 2;
      result.text = "reprise-sim: unknown command '" + std::string(first) +
                    "' (models, generate, replay, sweep)\nRun with --help for more information.\n";
      return result;
    }
  }
  try {
    app.parse(argc, argv);
    CLI::App* sub = app.get_subcommands().front();
    const std::string cmd = sub->get_name();
    o.command = cmd == "models" ? command_kind::models
                : cmd == "generate" ? command_kind::generate
                : cmd == "replay" ? command_kind::replay : command_kind::sweep;
    if (o.command == command_kind::models) {
      result.run = true;
      return result;
    }
    if (o.trace_path.empty() && workload.empty()) throw CLI::RequiredError("--trace or --workload");
    if (!workload.empty()) {
      o.use_workload = true;
      o.workload.kind = *parse_workload(workload);
    }
    o.trace_errors = on_error_text == "skip" ? on_error::skip : on_error::fail;
    if (!model.empty()) o.model_name = model;
    o.progress = !no_progress;
    o.cache.affinity = affinity == "on";
    o.cache.state_aware = affinity == "state";
    o.cache.remote_write_through = remote_write == "through";
    o.cache.remote_probe = remote_probe == "on";
    o.cache.remote_turn_ends = remote_turn_ends == "on";
    o.cache.snapshot_eviction = *parse_eviction(eviction);
    if (o.cache.remote_turn_ends && !o.cache.remote_probe)
      throw CLI::ValidationError("--remote-turn-ends on", "needs --remote-probe on: a prompt's turn end is found by "
                                                          "asking the store which of its boundaries has one");
    if (policy != "all") {
      const std::string e = split_each(policy, [&](const std::string& name) -> std::string {
        const auto p = parse_policy(name);
        if (!p) return "unknown policy '" + name + "' (all, or: " + policy_names() + ")";
        o.policies.push_back(*p);
        return {};
      });
      if (!e.empty()) throw CLI::ValidationError("--policy", e);
    }
    if (o.command == command_kind::sweep) {
      o.axis = parse_sweep_axis(axis);
      if (!values.empty()) {
        const std::string e = split_each(values, [&](const std::string& item) -> std::string {
          const auto v = parse_bytes(item);
          const bool zero_ok = sweep_takes_zero(*o.axis);
          if (!v || (*v == 0 && !zero_ok))
            return "bad value '" + item + "' (" + (zero_ok ? "numbers" : "positive numbers") + " or byte sizes)";
          const bool budget = *o.axis == sweep_axis::snapshot_budget || *o.axis == sweep_axis::kv_budget ||
                              *o.axis == sweep_axis::host_kv_budget || *o.axis == sweep_axis::host_snapshot_budget;
          if (!budget && *v > 0xffff'ffffu)
            return "value " + item + " not in range [" + (zero_ok ? "0" : "1") + " - 4294967295]";
          if (*o.axis == sweep_axis::engines && *v > L::max_engines)
            return "value " + item + " not in range [1 - " + std::to_string(L::max_engines) + "] (engines)";
          o.values.push_back(*v);
          return {};
        });
        if (!e.empty()) throw CLI::ValidationError("--values", e);
      }
    }
    if (!evictions.empty()) {
      const std::string e = split_each(evictions, [&](const std::string& name) -> std::string {
        const auto k = parse_eviction(name);
        if (!k) return "unknown eviction '" + name + "' (lru, cost-aware, marconi, oracle)";
        o.evictions.push_back(*k);
        return {};
      });
      if (!e.empty()) throw CLI::ValidationError("--evictions", e);
      const std::string f = split_each(fractions, [&](const std::string& item) -> std::string {
        const auto v = parse_bytes(item);
        if (!v || *v == 0 || *v > 0xffff'ffffu) return "bad denominator '" + item + "' (a positive number)";
        o.working_set_fractions.push_back(*v);
        return {};
      });
      if (!f.empty()) throw CLI::ValidationError("--working-set-fractions", f);
      if (o.axis != sweep_axis::snapshot_budget)
        throw CLI::ValidationError("--evictions", "needs --axis snapshot_budget");
      if (o.policies.size() != 1) throw CLI::ValidationError("--evictions", "needs exactly one --policy");
    }
    const bool host_axis = o.axis && sweep_takes_zero(*o.axis);
    if (o.cache.remote_tier && o.cache.host_kv_budget_bytes == 0 && !host_axis)
      throw CLI::ValidationError("--remote-tier", "needs --host-kv-budget: values go to the store when a host tier "
                                                  "evicts them, and come back through host memory");
    result.run = true;
  } catch (const CLI::CallForHelp&) {
    result.text = app.help(); // the selected subcommand's help when there is one
  } catch (const CLI::CallForAllHelp&) {
    result.text = app.help("", CLI::AppFormatMode::All);
  } catch (const CLI::ParseError& e) {
    result.exit_code = 2;
    result.text = "reprise-sim: " + std::string(e.what()) + "\nRun with --help for more information.\n";
  }
  return result;
}

} // namespace reprise::sim
