// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The command line of reprise-sim, parsed by CLI11: unknown options are errors, every number is read into
/// its own type with an explicit accepted range (a value out of range is an error naming the option and the
/// range, never truncated), and `--help` is generated from the same definitions.
///
/// Parsing is separate from running so tests call it directly; `main` only acts on the result.

#include "sim/replay.hpp"
#include "sim/sweep.hpp"
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace reprise::sim {

enum class command_kind : std::uint8_t { models, generate, replay, sweep };

/// The accepted ranges of the numeric options (inclusive). Generator maxima keep a generated trace within a
/// few GiB of memory; cache maxima are what the cache's 32-bit counters hold.
struct cli_limits {
  static constexpr std::uint64_t max_requests = std::uint64_t{1} << 24;
  static constexpr std::uint32_t max_tenants = 1u << 20;
  static constexpr std::uint32_t max_active_sessions = 1u << 20;
  static constexpr std::uint32_t max_documents = 1u << 20;
  static constexpr std::uint32_t max_system_prompt_tokens = 1u << 22; ///< the trace format's prompt limit
  static constexpr std::uint32_t max_block_size = 1u << 16;
  static constexpr std::uint32_t max_interval = 0xffff'ffffu;
  static constexpr std::uint32_t max_concurrency = 65536;
  static constexpr std::uint32_t max_snapshots_per_path = 0xffff'ffffu;
  static constexpr std::uint32_t max_engines = 1024; ///< each engine's cache is built in full
  static constexpr std::uint32_t max_remote_candidates = 64;
  static constexpr std::uint64_t max_bytes = (std::uint64_t{1} << 63) - 1;
};

struct cli_options {
  command_kind command = command_kind::models;
  // Traffic: a trace file, or a generated workload.
  std::string trace_path;
  on_error trace_errors = on_error::fail;
  bool use_workload = false;
  workload_options workload{.requests = 10000};
  // Model.
  std::string model_name = "nemotron-h-8b";
  std::string model_file;
  std::uint32_t block_size = 0; ///< 0: the model's own
  // Cache: every field of `cache` but `model` and `policy`.
  replay_config cache;
  replay_limits limits;
  std::vector<policy_kind> policies; ///< empty: every policy that applies to the model
  // Outputs.
  std::string output;   ///< generate -o
  std::string csv;      ///< replay --csv
  std::string out_dir = ".";
  std::string name;     ///< sweep --name
  std::optional<sweep_axis> axis;
  std::vector<std::uint64_t> values;
  /// sweep --evictions: one line per snapshot eviction rule over budgets of the working set / each of
  /// `working_set_fractions` (sweep.hpp, `run_eviction_sweep`); needs --axis snapshot_budget and one policy.
  std::vector<eviction_kind> evictions;
  std::vector<std::uint64_t> working_set_fractions;
  bool progress = true;
};

struct cli_parse {
  bool run = false;   ///< false: print `text` (help, or an error) and exit with `exit_code`
  int exit_code = 0;  ///< 0 for --help, 2 for a usage error
  std::string text;
  cli_options options;
};

/// Parses `argv`. Errors name the option and what it accepts ("--interval: Value 4294967296 not in range
/// [0 - 4294967295]"; "The following argument was not expected: --kv-bugdet").
cli_parse parse_command_line(int argc, const char* const* argv);

/// The policies as a comma-separated list, the words `--policy` takes.
std::string policy_names();

/// The `models` table: one row per preset, parameters as "active/total" for mixture-of-experts models.
std::string models_table();

} // namespace reprise::sim
