// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/csv.hpp"

#include <cassert>
#include <charconv>
#include <ostream>

namespace reprise::sim {

std::string csv_escape(std::string_view text) {
  if (text.find_first_of(",\"\r\n") == std::string_view::npos) return std::string(text);
  std::string out = "\"";
  for (const char c : text) {
    if (c == '"') out += '"';
    out += c;
  }
  out += '"';
  return out;
}

csv_writer::csv_writer(std::ostream& out, std::vector<std::string> columns) : out_(out), columns_(std::move(columns)) {
  for (std::size_t i = 0; i < columns_.size(); ++i) out_ << (i ? "," : "") << csv_escape(columns_[i]);
  out_ << '\n';
}

void csv_writer::separator() {
  assert(cells_ < columns_.size() && "more cells than columns");
  if (cells_++) out_ << ',';
}

csv_writer& csv_writer::cell(std::string_view text) {
  separator();
  out_ << csv_escape(text);
  return *this;
}

csv_writer& csv_writer::cell(std::uint64_t v) {
  separator();
  out_ << v;
  return *this;
}

csv_writer& csv_writer::cell(std::int64_t v) {
  separator();
  out_ << v;
  return *this;
}

csv_writer& csv_writer::cell(double v) {
  separator();
  char buf[32];
  auto [end, ec] = std::to_chars(buf, buf + sizeof buf, v);
  out_ << std::string_view(buf, ec == std::errc{} ? static_cast<std::size_t>(end - buf) : 0);
  return *this;
}

void csv_writer::end_row() {
  assert(cells_ == columns_.size() && "a row needs one cell per column");
  out_ << '\n';
  cells_ = 0;
}

} // namespace reprise::sim
