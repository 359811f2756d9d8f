// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/models.hpp"

#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

namespace reprise::sim {

sim_model sim_model::of_preset(preset_id p) {
  const catalog::preset_entry& e = catalog::entry(p);
  return {std::string(e.name), catalog::config_of(p), e.active_params, p, e.total_params};
}

std::span<const sim_model> preset_models() {
  static const std::vector<sim_model> models = [] {
    std::vector<sim_model> all;
    for (std::size_t i = 0; i < catalog::preset_table.size(); ++i)
      all.push_back(sim_model::of_preset(static_cast<preset_id>(i)));
    return all;
  }();
  return models;
}

const sim_model* find_preset(std::string_view name) {
  for (const sim_model& m : preset_models())
    if (m.name == name) return &m;
  return nullptr;
}

namespace {

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t' || s.front() == '\r')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.remove_suffix(1);
  return s;
}

/// Parses "k=v k=v ..." into (key, unsigned value) pairs; false on any malformed item.
bool parse_fields(std::string_view s, std::vector<std::pair<std::string_view, std::uint32_t>>& out,
                  std::string& error) {
  out.clear();
  while (!(s = trim(s)).empty()) {
    const std::size_t end = s.find_first_of(" \t");
    const std::string_view item = s.substr(0, end);
    s = end == std::string_view::npos ? std::string_view{} : s.substr(end);
    const std::size_t eq = item.find('=');
    if (eq == std::string_view::npos) {
      error.assign("expected key=value, got \"").append(item).append("\"");
      return false;
    }
    std::uint32_t v = 0;
    const std::string_view value = item.substr(eq + 1);
    auto [p, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
    if (ec != std::errc{} || p != value.data() + value.size()) {
      // Built by append: GCC 12's -Wrestrict misfires on `"\"" + std::string(...)` at -O3.
      error.assign("field \"").append(item.substr(0, eq)).append("\" needs an unsigned integer");
      return false;
    }
    out.emplace_back(item.substr(0, eq), v);
  }
  return true;
}

template <class Shape, std::size_t N>
bool assign(Shape& shape, std::uint32_t& count, std::span<const std::pair<std::string_view, std::uint32_t>> fields,
            const std::pair<std::string_view, std::uint32_t Shape::*> (&members)[N], std::string& error) {
  for (const auto& [k, v] : fields) {
    if (k == "count") {
      count = v;
      continue;
    }
    bool known = false;
    for (const auto& [name, member] : members)
      if (k == name) {
        shape.*member = v;
        known = true;
      }
    if (!known) {
      error = "unknown field \"" + std::string(k) + "\"";
      return false;
    }
  }
  return true;
}

} // namespace

std::variant<sim_model, std::string> parse_model_file(std::string_view text) {
  sim_model m{"custom", catalog::config_of(preset_id::llama3_8b), 0};
  std::vector<layer_spec> groups;
  std::vector<std::pair<std::string_view, std::uint32_t>> fields;
  std::size_t line_no = 0;
  auto fail = [&](const std::string& what) { return "model file line " + std::to_string(line_no) + ": " + what; };
  while (!text.empty()) {
    ++line_no;
    const std::size_t nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view{} : text.substr(nl + 1);
    if (const std::size_t hash = line.find('#'); hash != std::string_view::npos) line = line.substr(0, hash);
    line = trim(line);
    if (line.empty()) continue;
    const std::size_t eq = line.find('=');
    if (eq == std::string_view::npos) return fail("expected key = value");
    const std::string_view key = trim(line.substr(0, eq)), value = trim(line.substr(eq + 1));
    std::string error;
    if (key == "name") {
      if (value.empty()) return fail("empty name");
      m.name = std::string(value);
    } else if (key == "active_params") {
      char* end = nullptr;
      const std::string v(value);
      const double p = std::strtod(v.c_str(), &end);
      if (v.empty() || end != v.c_str() + v.size() || !(p > 0) || !std::isfinite(p))
        return fail("active_params needs a positive number");
      m.active_params = p;
    } else if (key == "attention") {
      kv_shape s{};
      std::uint32_t count = 1;
      static constexpr std::pair<std::string_view, std::uint32_t kv_shape::*> members[] = {
          {"kv_heads", &kv_shape::kv_heads}, {"head_dim", &kv_shape::head_dim}, {"block_size", &kv_shape::block_size}};
      if (!parse_fields(value, fields, error) || !assign(s, count, fields, members, error))
        return fail(error);
      groups.push_back({s, count});
    } else if (key == "mamba2") {
      mamba2_shape s{};
      std::uint32_t count = 1;
      static constexpr std::pair<std::string_view, std::uint32_t mamba2_shape::*> members[] = {
          {"heads", &mamba2_shape::heads},         {"head_dim", &mamba2_shape::head_dim},
          {"state_dim", &mamba2_shape::state_dim}, {"groups", &mamba2_shape::groups},
          {"conv_width", &mamba2_shape::conv_width}, {"chunk", &mamba2_shape::chunk}};
      if (!parse_fields(value, fields, error) || !assign(s, count, fields, members, error))
        return fail(error);
      groups.push_back({s, count});
    } else if (key == "gated_delta") {
      gated_delta_shape s{};
      std::uint32_t count = 1;
      static constexpr std::pair<std::string_view, std::uint32_t gated_delta_shape::*> members[] = {
          {"key_heads", &gated_delta_shape::key_heads},   {"value_heads", &gated_delta_shape::value_heads},
          {"key_dim", &gated_delta_shape::key_dim},       {"value_dim", &gated_delta_shape::value_dim},
          {"conv_width", &gated_delta_shape::conv_width}, {"chunk", &gated_delta_shape::chunk}};
      if (!parse_fields(value, fields, error) || !assign(s, count, fields, members, error))
        return fail(error);
      groups.push_back({s, count});
    } else {
      return fail("unknown key \"" + std::string(key) + "\"");
    }
  }
  if (m.active_params <= 0) return std::string("model file: active_params is required");
  auto config = model_config::make(std::move(groups));
  if (!config)
    return "model file: model_config refused the layers (" + std::string(to_string(config.error())) +
           "): see the layer rules in docs/sim-trace-format.md";
  m.config = std::move(*config);
  return m;
}

result<model_config> with_block_size(const model_config& m, std::uint32_t block_size) {
  std::vector<layer_spec> groups(m.groups().begin(), m.groups().end());
  for (layer_spec& g : groups)
    if (auto* kv = std::get_if<kv_shape>(&g.shape)) kv->block_size = block_size;
  return model_config::make(std::move(groups));
}

std::string format_bytes(double bytes) {
  static constexpr const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  int u = 0;
  while (std::fabs(bytes) >= 1024 && u < 6) {
    bytes /= 1024;
    ++u;
  }
  char buf[32];
  if (u == 0 || std::fabs(bytes - std::round(bytes)) < 0.05) std::snprintf(buf, sizeof buf, "%.0f %s", bytes, units[u]);
  else std::snprintf(buf, sizeof buf, "%.1f %s", bytes, units[u]);
  return buf;
}

std::optional<std::uint64_t> parse_bytes(std::string_view text) {
  text = trim(text);
  const std::string s(text);
  char* end = nullptr;
  const double v = std::strtod(s.c_str(), &end);
  if (end == s.c_str() || !std::isfinite(v) || v < 0) return std::nullopt;
  std::string_view unit = trim(std::string_view(end));
  double scale = 1;
  static constexpr std::pair<std::string_view, double> units[] = {
      {"", 1},         {"B", 1},         {"K", 0x1p10},   {"KiB", 0x1p10}, {"M", 0x1p20},
      {"MiB", 0x1p20}, {"G", 0x1p30},    {"GiB", 0x1p30}, {"T", 0x1p40},   {"TiB", 0x1p40}};
  bool found = false;
  for (const auto& [name, f] : units)
    if (unit == name) {
      scale = f;
      found = true;
    }
  const double bytes = v * scale;
  if (!found || bytes >= 0x1p63) return std::nullopt;
  return static_cast<std::uint64_t>(std::llround(bytes));
}

} // namespace reprise::sim
