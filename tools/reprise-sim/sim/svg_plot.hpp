// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A small SVG line-chart writer for sweep results: axes with "nice" ticks (linear, or powers of two on a
/// log axis), grid, a legend with one entry per line, a colour-blind-safe palette (Okabe-Ito) plus a dash
/// pattern per line so the chart also reads in grey, and optional notes (warnings) under the title.

#include <optional>
#include <string>
#include <vector>

namespace reprise::sim {

enum class axis_format : unsigned char { number, percent, bytes };

struct series {
  std::string name;
  std::vector<double> x, y; ///< same length; NaN in y breaks the line
};

struct line_chart {
  std::string title;
  std::string subtitle{}; ///< one line of context under the title (fixed parameters, a key)
  std::string x_label, y_label;
  axis_format x_format = axis_format::number;
  axis_format y_format = axis_format::number;
  bool x_log = false;               ///< log2 x axis (budgets, intervals); x values must be > 0
  std::optional<double> y_min, y_max; ///< fixed y range (e.g. 0..100 % for hit rates)
  std::vector<series> lines{};
  std::vector<std::string> notes{};
};

/// The chart as a standalone SVG document.
std::string render_svg(const line_chart& chart);

/// Tick positions: multiples of 1, 2 or 5 x 10^k covering [lo, hi] with about `target` ticks.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
/// Tick positions on a log2 axis: powers of two in [lo, hi], thinned to at most `max_ticks`.
std::vector<double> pow2_ticks(double lo, double hi, int max_ticks = 8);
std::string format_tick(double v, axis_format f);

} // namespace reprise::sim
