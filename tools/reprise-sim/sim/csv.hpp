// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A minimal RFC 4180 CSV writer: a fixed header, then rows with exactly as many cells.

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::sim {

class csv_writer {
public:
  /// Writes the header line.
  csv_writer(std::ostream& out, std::vector<std::string> columns);

  /// One cell of the row being built.
  csv_writer& cell(std::string_view text);
  csv_writer& cell(std::uint64_t v);
  csv_writer& cell(std::int64_t v);
  csv_writer& cell(double v); ///< shortest round-trip form
  /// Ends the row. Precondition: exactly `columns().size()` cells were added (asserted; a short row is a bug).
  void end_row();

  const std::vector<std::string>& columns() const noexcept { return columns_; }

private:
  void separator();
  std::ostream& out_;
  std::vector<std::string> columns_;
  std::size_t cells_ = 0;
};

/// Quotes `text` if it holds a comma, quote or line break.
std::string csv_escape(std::string_view text);

} // namespace reprise::sim
