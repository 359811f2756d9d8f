// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Sweeps: one replay per (policy, value) along one axis, written as a CSV (one row per replay, the
/// columns of `report_columns()` plus the swept value) and SVG charts with one line per policy.

#include "sim/replay.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::sim {

/// What a sweep varies. The host axes size the host tier (`replay_config::host_kv_budget_bytes` and
/// `host_snapshot_budget_bytes`); 0 is one of their values: on `host_kv_budget` and `host_scale`, the replay
/// without a host tier. `host_scale` sets both at once, as that many times the GPU KV budget and the GPU
/// snapshot budget.
enum class sweep_axis : std::uint8_t {
  snapshot_budget,
  snapshot_interval,
  block_size,
  kv_budget,
  host_kv_budget,
  host_snapshot_budget,
  host_scale,
  engines, ///< `replay_config::engines`: the fleet's size, each engine with the budgets given
};

std::string_view to_string(sweep_axis a) noexcept;
/// The axis named `name`, spelled as `to_string` does or with hyphens (`host-kv-budget`, like the options).
std::optional<sweep_axis> parse_sweep_axis(std::string_view name) noexcept;
/// Whether 0 is a value of the axis (the host axes: no host tier).
bool sweep_takes_zero(sweep_axis a) noexcept;
/// Default values: budgets in powers of two around the model's snapshot size, intervals as multiples of
/// the alignment unit, block sizes 16 / 64 / 256; host budgets 0, 1, 2, 5 and 10 times the GPU budget of
/// the same kind in `base` (host_scale: those factors); engines 1, 2, 4, 8, 16.
std::vector<std::uint64_t> default_sweep_values(sweep_axis a, const replay_config& base);

struct sweep_point {
  std::uint64_t value = 0;
  replay_report report;
};

struct sweep_result {
  sweep_axis axis = sweep_axis::snapshot_budget;
  std::vector<policy_kind> policies;
  std::vector<sweep_point> points; ///< policy-major: all values of policies[0], then policies[1], ...
};

/// Runs the sweep. `base` gives everything but the swept value and the policy.
sweep_result run_sweep(const trace& t, const replay_config& base, const std::vector<policy_kind>& policies,
                       sweep_axis axis, const std::vector<std::uint64_t>& values, bool show_progress,
                       const replay_limits& limits = {});

/// Writes `<dir>/<stem>.csv`, `<dir>/<stem>-hit-rate.svg`, `<dir>/<stem>-lost-tokens.svg`,
/// `<dir>/<stem>-skipped.svg`, `<dir>/<stem>-floor.svg` and, along a host axis, `<dir>/<stem>-from-host.svg`;
/// returns the paths written (empty and a message in `error` on I/O failure).
std::vector<std::string> write_sweep(const sweep_result& s, const std::string& dir, const std::string& stem,
                                     const std::string& title, std::string& error);

/// Snapshot eviction under pressure: one replay per (eviction rule, budget), the budgets working set / d for
/// each denominator d, where the working set is the peak snapshot bytes an unbounded budget holds (one LRU
/// replay with the budget the trace can fill, `base.snapshot_budget_bytes` ignored).
struct eviction_sweep_result {
  std::uint64_t working_set_bytes = 0;
  std::vector<eviction_kind> evictions;
  std::vector<std::uint64_t> denominators;
  std::vector<sweep_point> points; ///< eviction-major; `value` is the budget in bytes
};

eviction_sweep_result run_eviction_sweep(const trace& t, const replay_config& base,
                                         const std::vector<eviction_kind>& evictions,
                                         const std::vector<std::uint64_t>& denominators, bool show_progress,
                                         const replay_limits& limits = {});

/// Writes `<dir>/<stem>.csv` (the eviction and the denominator, then the report columns) and
/// `<dir>/<stem>-floor.svg` (prefill computed / floor, one line per rule); returns the paths written.
std::vector<std::string> write_eviction_sweep(const eviction_sweep_result& s, const std::string& dir,
                                              const std::string& stem, const std::string& title, std::string& error);

} // namespace reprise::sim
