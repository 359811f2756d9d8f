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

enum class sweep_axis : std::uint8_t { snapshot_budget, snapshot_interval, block_size, kv_budget };

std::string_view to_string(sweep_axis a) noexcept;
std::optional<sweep_axis> parse_sweep_axis(std::string_view name) noexcept;
/// Default values: budgets in powers of two around the model's snapshot size, intervals as multiples of
/// the alignment unit, block sizes 16 / 64 / 256.
std::vector<std::uint64_t> default_sweep_values(sweep_axis a, const model_config& m);

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

/// Writes `<dir>/<stem>.csv`, `<dir>/<stem>-hit-rate.svg`, `<dir>/<stem>-lost-tokens.svg` and
/// `<dir>/<stem>-skipped.svg`; returns the paths written (empty and a message in `error` on I/O failure).
std::vector<std::string> write_sweep(const sweep_result& s, const std::string& dir, const std::string& stem,
                                     const std::string& title, std::string& error);

} // namespace reprise::sim
