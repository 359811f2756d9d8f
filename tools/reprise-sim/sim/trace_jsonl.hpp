// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Reads and writes the JSONL trace format (docs/sim-trace-format.md). Each line is parsed by simdjson's
/// On-Demand API (which validates UTF-8 and the JSON grammar, leading zeros included); on top of it the
/// reader is strict about exactly that format: one object per line, no unknown or duplicate keys, unsigned
/// integers only. It is meant to face hostile input: every length is bounded by `parse_limits`, only the
/// format's fixed nesting is descended, and a bad line becomes a `parse_error` with its line and column
/// (then skipped, or the parse stops, by `on_error`).

#include "sim/trace.hpp"

#include <cstdint>
#include <iosfwd>
#include <string>
#include <string_view>
#include <vector>

namespace reprise::sim {

/// Bounds that keep a hostile trace from exhausting memory. Defaults fit real traffic with room to spare.
struct parse_limits {
  std::uint64_t max_line_bytes = std::uint64_t{64} << 20;
  std::uint64_t max_prompt_tokens = std::uint64_t{1} << 22;     ///< 4 Mi tokens per prompt
  std::uint64_t max_output_tokens = std::uint64_t{1} << 20;
  std::uint64_t max_pool_tokens = std::uint64_t{1} << 24;       ///< per pool
  std::uint64_t max_total_pool_tokens = std::uint64_t{1} << 28; ///< all pools together
  std::uint64_t max_segments = 4096;                            ///< per request
  std::uint64_t max_string_bytes = 1024;                        ///< names, session and tenant ids
  std::uint64_t max_reported_errors = 1000;                     ///< later errors are counted, not kept
};

enum class on_error : std::uint8_t {
  skip, ///< report the line and continue with the next one
  fail, ///< report the line and stop
};

struct parse_options {
  on_error mode = on_error::fail;
  parse_limits limits{};
};

struct parse_error {
  std::uint64_t line = 0;   ///< 1-based
  std::uint64_t column = 0; ///< 1-based byte column
  std::string message;
};

struct parse_result {
  trace t;
  std::vector<parse_error> errors; ///< at most `max_reported_errors`
  std::uint64_t error_count = 0;   ///< every bad line, also those not kept in `errors`
  std::uint64_t lines = 0;
  bool stopped = false;            ///< `on_error::fail` met an error
  bool ok() const noexcept { return error_count == 0; }
};

/// "line 12, column 7: expected ':'"
std::string to_string(const parse_error& e);

/// Parses a whole trace from a stream (read in 1 MiB pieces; a line longer than the limit is reported and
/// skipped without being buffered).
/// Complexity: linear in the input.
parse_result parse_trace(std::istream& in, const parse_options& options = {});
parse_result parse_trace(std::string_view text, const parse_options& options = {});

/// Writes `t` in the compact form: pools first (synthetic ones as their seed), then one line per request
/// with its segments. `parse_trace(write_trace(t)) == t`.
void write_trace(std::ostream& out, const trace& t);

} // namespace reprise::sim
