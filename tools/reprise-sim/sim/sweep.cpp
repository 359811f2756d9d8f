// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/sweep.hpp"

#include "sim/csv.hpp"
#include "sim/progress.hpp"
#include "sim/svg_plot.hpp"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <set>

namespace reprise::sim {

std::string_view to_string(sweep_axis a) noexcept {
  switch (a) {
  case sweep_axis::snapshot_budget: return "snapshot_budget";
  case sweep_axis::snapshot_interval: return "snapshot_interval";
  case sweep_axis::block_size: return "block_size";
  case sweep_axis::kv_budget: return "kv_budget";
  case sweep_axis::host_kv_budget: return "host_kv_budget";
  case sweep_axis::host_snapshot_budget: return "host_snapshot_budget";
  case sweep_axis::host_scale: return "host_scale";
  case sweep_axis::engines: return "engines";
  }
  return "?";
}

std::optional<sweep_axis> parse_sweep_axis(std::string_view name) noexcept {
  for (auto a : {sweep_axis::snapshot_budget, sweep_axis::snapshot_interval, sweep_axis::block_size, sweep_axis::kv_budget,
                 sweep_axis::host_kv_budget, sweep_axis::host_snapshot_budget, sweep_axis::host_scale,
                 sweep_axis::engines}) {
    const std::string_view n = to_string(a);
    if (name.size() == n.size() && std::equal(n.begin(), n.end(), name.begin(), [](char want, char got) {
          return got == want || (want == '_' && got == '-');
        }))
      return a;
  }
  return std::nullopt;
}

bool sweep_takes_zero(sweep_axis a) noexcept {
  return a == sweep_axis::host_kv_budget || a == sweep_axis::host_snapshot_budget || a == sweep_axis::host_scale;
}

std::vector<std::uint64_t> default_sweep_values(sweep_axis a, const replay_config& base) {
  const model_config& m = base.model.config;
  std::vector<std::uint64_t> v;
  constexpr std::uint64_t host_factors[] = {0, 1, 2, 5, 10};
  switch (a) {
  case sweep_axis::snapshot_budget: {
    // From just under one snapshot (never hits: shown as a warning) up to ~1000 snapshots.
    std::uint64_t b = std::uint64_t{1} << 26;
    while (b < m.bytes_per_snapshot()) b <<= 1;
    b >>= 1;
    for (int i = 0; i < 11; ++i, b <<= 1) v.push_back(b);
    break;
  }
  case sweep_axis::snapshot_interval:
    for (std::uint64_t k : {1, 2, 4, 8, 16, 32}) v.push_back(k * m.alignment());
    break;
  case sweep_axis::block_size: v = {16, 64, 256}; break;
  case sweep_axis::kv_budget:
    for (std::uint64_t g = 1; g <= 128; g <<= 1) v.push_back(g << 30);
    break;
  case sweep_axis::host_kv_budget:
    for (std::uint64_t k : host_factors) v.push_back(k * base.kv_budget_bytes);
    break;
  case sweep_axis::host_snapshot_budget:
    for (std::uint64_t k : host_factors) v.push_back(k * base.snapshot_budget_bytes);
    break;
  case sweep_axis::host_scale: v.assign(std::begin(host_factors), std::end(host_factors)); break;
  case sweep_axis::engines: v = {1, 2, 4, 8, 16}; break;
  }
  return v;
}

sweep_result run_sweep(const trace& t, const replay_config& base, const std::vector<policy_kind>& policies,
                       sweep_axis axis, const std::vector<std::uint64_t>& values, bool show_progress,
                       const replay_limits& limits) {
  sweep_result s;
  s.axis = axis;
  s.policies = policies;
  progress bar("sweep", policies.size() * values.size(), show_progress);
  std::uint64_t done = 0;
  for (policy_kind p : policies) {
    for (std::uint64_t value : values) {
      replay_config c = base;
      c.policy = p;
      std::string error;
      switch (axis) {
      case sweep_axis::snapshot_budget: c.snapshot_budget_bytes = value; break;
      case sweep_axis::snapshot_interval: c.snapshot_interval = static_cast<std::uint32_t>(value); break;
      case sweep_axis::kv_budget: c.kv_budget_bytes = value; break;
      case sweep_axis::host_kv_budget:
        c.host_kv_budget_bytes = value;
        if (value == 0) c.host_snapshot_budget_bytes = 0; // no host tier at all
        break;
      case sweep_axis::host_snapshot_budget: c.host_snapshot_budget_bytes = value; break;
      case sweep_axis::engines: c.engines = static_cast<std::uint32_t>(value); break;
      case sweep_axis::host_scale: {
        constexpr std::uint64_t most = ~std::uint64_t{0};
        if ((base.kv_budget_bytes != 0 && value > most / base.kv_budget_bytes) ||
            (base.snapshot_budget_bytes != 0 && value > most / base.snapshot_budget_bytes))
          error = "host scale " + std::to_string(value) + " times the GPU budgets overflows 64 bits";
        c.host_kv_budget_bytes = value * base.kv_budget_bytes;
        c.host_snapshot_budget_bytes = value * base.snapshot_budget_bytes;
        break;
      }
      case sweep_axis::block_size: {
        auto variant = with_block_size(base.model.config, static_cast<std::uint32_t>(value));
        if (variant) c.model.config = *variant;
        else error = "block size " + std::to_string(value) + " does not fit the model's chunk grid (" +
                     std::string(reprise::to_string(variant.error())) + ")";
        // Keep the interval on the (possibly coarser) alignment grid of the variant.
        if (variant && c.snapshot_interval % variant->alignment() != 0) c.snapshot_interval = 0;
        break;
      }
      }
      // No host tier: nothing below it either.
      if (c.host_kv_budget_bytes == 0) {
        c.remote_tier = false;
        c.remote_redis.clear();
      }
      replay_report r;
      if (error.empty()) {
        r = simulate(t, c, limits);
      } else {
        r.model = c.model.name;
        r.policy = std::string(to_string(p));
        r.error = error;
      }
      s.points.push_back({value, std::move(r)});
      bar.update(++done);
    }
  }
  bar.finish();
  return s;
}

namespace {

struct axis_text {
  const char* label;
  axis_format format;
  bool log;
};

axis_text axis_of(sweep_axis a) {
  switch (a) {
  case sweep_axis::snapshot_budget: return {"snapshot budget", axis_format::bytes, true};
  case sweep_axis::snapshot_interval: return {"snapshot interval (tokens)", axis_format::number, true};
  case sweep_axis::block_size: return {"KV block size (tokens)", axis_format::number, true};
  case sweep_axis::kv_budget: return {"KV budget", axis_format::bytes, true};
  // Linear: 0, no host tier, is a point of these axes.
  case sweep_axis::host_kv_budget: return {"host KV budget", axis_format::bytes, false};
  case sweep_axis::host_snapshot_budget: return {"host snapshot budget", axis_format::bytes, false};
  case sweep_axis::host_scale: return {"host memory (x the GPU KV and snapshot budgets)", axis_format::number, false};
  case sweep_axis::engines: return {"engines", axis_format::number, true};
  }
  return {"", axis_format::number, false};
}

std::string value_text(sweep_axis a, std::uint64_t v) {
  const axis_text t = axis_of(a);
  if (a == sweep_axis::host_scale) return std::to_string(v) + "x";
  return t.format == axis_format::bytes ? format_bytes(static_cast<double>(v)) : std::to_string(v);
}

/// One chart: y = f(report) (a percentage, or a plain ratio from 1 up), one line per policy; notes for
/// errors and never-hit warnings.
line_chart chart_of(const sweep_result& s, const std::string& title, const std::string& subtitle,
                    const char* y_label, double (*f)(const replay_report&), bool snapshot_policies_only,
                    bool percent) {
  const axis_text at = axis_of(s.axis);
  line_chart c{.title = title, .subtitle = subtitle, .x_label = at.label, .y_label = y_label, .x_format = at.format,
               .y_format = percent ? axis_format::percent : axis_format::number, .x_log = at.log,
               .y_min = percent ? 0.0 : 1.0, .y_max = percent ? std::optional<double>(100.0) : std::nullopt};
  std::set<std::string> notes;
  std::vector<std::string> left_out;
  for (policy_kind p : s.policies) {
    if (snapshot_policies_only && !restores_snapshots(p)) {
      left_out.push_back(std::string(to_string(p)) + ": not plotted (it restores no snapshot, so no token is lost to a missing one)");
      continue;
    }
    series line{std::string(describe(p)), {}, {}};
    for (const sweep_point& pt : s.points) {
      if (pt.report.policy != to_string(p)) continue;
      line.x.push_back(static_cast<double>(pt.value));
      line.y.push_back(pt.report.error.empty() ? (percent ? 100 : 1) * f(pt.report) : NAN);
      const std::string where = value_text(s.axis, pt.value) + ": ";
      if (!pt.report.error.empty()) {
        notes.insert(where + pt.report.error + " (no point drawn)");
        continue;
      }
      for (const std::string& w : pt.report.warnings)
        if (w.starts_with("never hits")) notes.insert(where + w);
    }
    c.lines.push_back(std::move(line));
  }
  c.notes = std::move(left_out);
  // Keep the chart readable: at most six notes, then a count.
  std::size_t shown = 0;
  for (const std::string& n : notes) {
    if (shown++ == 6) {
      c.notes.push_back("... and " + std::to_string(notes.size() - 6) + " more (see the CSV)");
      break;
    }
    c.notes.push_back(n);
  }
  return c;
}

bool write_file(const std::string& path, const std::string& text, std::string& error) {
  std::ofstream out(path, std::ios::binary);
  out << text;
  if (!out) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

/// Writes a CSV at `path`: `leading` columns, then the report's; `rows(w)` writes the rows.
template <class Rows>
bool write_report_csv(const std::string& path, const std::vector<std::string>& leading, Rows&& rows,
                      std::string& error) {
  std::ofstream out(path, std::ios::binary);
  std::vector<std::string> columns = report_columns();
  columns.insert(columns.begin(), leading.begin(), leading.end());
  csv_writer w(out, columns);
  rows(w);
  if (!out) {
    error = "cannot write " + path;
    return false;
  }
  return true;
}

} // namespace

std::vector<std::string> write_sweep(const sweep_result& s, const std::string& dir, const std::string& stem,
                                     const std::string& title, std::string& error) {
  std::vector<std::string> written;
  const std::string base = (std::filesystem::path(dir.empty() ? "." : dir) / stem).string();
  const auto rows = [&](csv_writer& w) {
    for (const sweep_point& pt : s.points) {
      w.cell(pt.value);
      write_report_row(w, pt.report);
    }
  };
  if (!write_report_csv(base + ".csv", {std::string(to_string(s.axis))}, rows, error)) return {};
  written.push_back(base + ".csv");
  const std::string suffix = " vs " + std::string(axis_of(s.axis).label);
  const struct {
    const char* file;
    const char* what;
    const char* y;
    double (*f)(const replay_report&);
    bool snapshot_policies_only;
    bool percent = true;
  } charts[] = {
      {"-hit-rate.svg", "Request hit rate", "requests with skipped prefill",
       [](const replay_report& r) { return r.hit_rate(); }, false},
      {"-lost-tokens.svg", "Tokens lost to missing snapshots", "KV-matched tokens recomputed (% of prompt tokens)",
       [](const replay_report& r) {
         return r.prompt_tokens ? static_cast<double>(r.tokens_lost) / static_cast<double>(r.prompt_tokens) : 0.0;
       },
       true},
      {"-skipped.svg", "Prefill skipped", "prompt tokens skipped",
       [](const replay_report& r) { return r.skipped_fraction(); }, false},
      // The figure a chat workload is judged by: 1 means only tokens no earlier request covered were computed.
      {"-floor.svg", "Prefill computed over the floor", "prefill computed / floor (x)",
       [](const replay_report& r) { return r.computed_over_floor(); }, false, false},
  };
  // The parameters held fixed, from any report that ran (they are the same in all but the swept one).
  std::string fixed;
  for (const sweep_point& pt : s.points) {
    const replay_report& r = pt.report;
    if (!r.error.empty()) continue;
    std::string line;
    auto add = [&](const std::string& part) { line += (line.empty() ? "" : ", ") + part; };
    if (s.axis != sweep_axis::block_size) add("block " + std::to_string(r.block_size));
    add("alignment " + std::to_string(r.alignment));
    if (s.axis != sweep_axis::snapshot_interval && r.snapshot_interval) add("I = " + std::to_string(r.snapshot_interval));
    if (s.axis != sweep_axis::kv_budget) add("KV " + format_bytes(static_cast<double>(r.kv_budget_bytes)));
    if (s.axis != sweep_axis::snapshot_budget && r.snapshot_budget_bytes)
      add("snapshots " + format_bytes(static_cast<double>(r.snapshot_budget_bytes)));
    const bool host_swept = sweep_takes_zero(s.axis);
    if (!host_swept && r.host_kv_budget_bytes) add("host KV " + format_bytes(static_cast<double>(r.host_kv_budget_bytes)));
    if (!host_swept && r.host_snapshot_budget_bytes)
      add("host snapshots " + format_bytes(static_cast<double>(r.host_snapshot_budget_bytes)));
    if (s.axis == sweep_axis::host_kv_budget && r.host_snapshot_budget_bytes)
      add("host snapshots " + format_bytes(static_cast<double>(r.host_snapshot_budget_bytes)));
    if (s.axis == sweep_axis::host_snapshot_budget && r.host_kv_budget_bytes)
      add("host KV " + format_bytes(static_cast<double>(r.host_kv_budget_bytes)));
    if (r.concurrency > 1) add(std::to_string(r.concurrency) + " in flight");
    if (s.axis == sweep_axis::engines) add(std::string("affinity ") + affinity_name(r));
    else if (r.engines > 1) add(std::to_string(r.engines) + " engines, affinity " + affinity_name(r));
    if (r.remote_tier)
      add("remote tier: " + r.remote_store + (r.remote_write_through ? ", write-through" : "") +
          (r.remote_probe ? "" : ", unprobed") + (r.remote_turn_ends ? ", turn ends" : ""));
    fixed = line;
    if (r.snapshot_interval) break; // prefer a report that shows the interval
  }
  const std::string subtitle = (title.empty() ? "" : title + "; ") + fixed +
                               "\nlast = last aligned position of the prompt, branch = where it leaves the cached tree";
  for (const auto& ch : charts) {
    const line_chart c =
        chart_of(s, std::string(ch.what) + suffix, subtitle, ch.y, ch.f, ch.snapshot_policies_only, ch.percent);
    if (!write_file(base + ch.file, render_svg(c), error)) return {};
    written.push_back(base + ch.file);
  }
  if (sweep_takes_zero(s.axis)) {
    // Where the hits come from: prompt tokens whose KV came back from host memory.
    const line_chart c = chart_of(
        s, "KV hits from the host tier" + suffix, subtitle, "prompt tokens onboarded from host memory",
        [](const replay_report& r) {
          return r.prompt_tokens ? static_cast<double>(r.host_kv_hit_tokens) / static_cast<double>(r.prompt_tokens) : 0.0;
        },
        false, true);
    if (!write_file(base + "-from-host.svg", render_svg(c), error)) return {};
    written.push_back(base + "-from-host.svg");
  }
  return written;
}

eviction_sweep_result run_eviction_sweep(const trace& t, const replay_config& base,
                                         const std::vector<eviction_kind>& evictions,
                                         const std::vector<std::uint64_t>& denominators, bool show_progress,
                                         const replay_limits& limits) {
  eviction_sweep_result s;
  s.evictions = evictions;
  s.denominators = denominators;
  {
    // The working set: what the trace's captures hold when nothing is ever evicted for want of a slot
    // (`simulate` caps the budget at the slots the trace can fill).
    replay_config c = base;
    c.snapshot_eviction = eviction_kind::lru;
    c.snapshot_budget_bytes = std::uint64_t{1} << 50;
    const replay_report r = simulate(t, c, limits);
    s.working_set_bytes = static_cast<std::uint64_t>(r.peak_snapshot_bytes);
  }
  const std::uint64_t per_snapshot = base.model.config.bytes_per_snapshot();
  progress bar("sweep", evictions.size() * denominators.size(), show_progress);
  std::uint64_t done = 0;
  for (eviction_kind e : evictions) {
    for (std::uint64_t d : denominators) {
      replay_config c = base;
      c.snapshot_eviction = e;
      // At least one snapshot; whole snapshots, so every rule sees the same slot count.
      c.snapshot_budget_bytes = std::max(s.working_set_bytes / std::max<std::uint64_t>(d, 1) / per_snapshot, std::uint64_t{1}) *
                                per_snapshot;
      s.points.push_back({c.snapshot_budget_bytes, simulate(t, c, limits)});
      bar.update(++done);
    }
  }
  bar.finish();
  return s;
}

std::vector<std::string> write_eviction_sweep(const eviction_sweep_result& s, const std::string& dir,
                                              const std::string& stem, const std::string& title, std::string& error) {
  std::vector<std::string> written;
  const std::string base = (std::filesystem::path(dir.empty() ? "." : dir) / stem).string();
  const auto rows = [&](csv_writer& w) {
    std::size_t k = 0;
    for (eviction_kind e : s.evictions) {
      for (std::uint64_t d : s.denominators) {
        const sweep_point& pt = s.points[k++];
        w.cell(std::string(name_of(e)));
        w.cell("1/" + std::to_string(d));
        w.cell(s.working_set_bytes);
        write_report_row(w, pt.report);
      }
    }
  };
  if (!write_report_csv(base + ".csv", {"snapshot_eviction", "working_set_fraction", "working_set_bytes"}, rows,
                        error))
    return {};
  written.push_back(base + ".csv");
  line_chart c{.title = "Prefill computed over the floor vs snapshot budget",
               .subtitle = title + "; working set " + format_bytes(static_cast<double>(s.working_set_bytes)) +
                           ", budgets 1/" + std::to_string(s.denominators.front()) + " .. 1/" +
                           std::to_string(s.denominators.back()) + " of it",
               .x_label = "snapshot budget",
               .y_label = "prefill computed / floor (x)",
               .x_format = axis_format::bytes,
               .y_format = axis_format::number,
               .x_log = true,
               .y_min = 1.0,
               .y_max = std::nullopt};
  std::size_t k = 0;
  for (eviction_kind e : s.evictions) {
    series line{std::string(name_of(e)), {}, {}};
    for (std::size_t i = 0; i < s.denominators.size(); ++i) {
      const sweep_point& pt = s.points[k++];
      line.x.push_back(static_cast<double>(pt.value));
      line.y.push_back(pt.report.error.empty() ? pt.report.computed_over_floor() : NAN);
      if (!pt.report.error.empty()) c.notes.push_back(std::string(name_of(e)) + ": " + pt.report.error);
    }
    c.lines.push_back(std::move(line));
  }
  if (!write_file(base + "-floor.svg", render_svg(c), error)) return {};
  written.push_back(base + "-floor.svg");
  return written;
}

} // namespace reprise::sim
