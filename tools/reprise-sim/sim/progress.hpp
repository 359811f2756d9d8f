// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// A progress bar on stderr, drawn only when stderr is a terminal, so logs and pipes stay clean.

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <string>

namespace reprise::sim {

class progress {
public:
  /// `enabled` is normally `stderr_is_terminal()`; tests pass a stream and `true` to see the output.
  progress(std::string label, std::uint64_t total, bool enabled, std::FILE* out = stderr);
  ~progress();
  progress(const progress&) = delete;
  progress& operator=(const progress&) = delete;

  /// Records `done` units; redraws at most ten times a second (cheap to call per request).
  void update(std::uint64_t done) {
    if (enabled_ && (done - last_ >= step_ || done == total_)) redraw(done);
  }
  /// Clears the bar.
  void finish();

  static bool stderr_is_terminal() noexcept;

private:
  void redraw(std::uint64_t done);
  std::string label_;
  std::uint64_t total_;
  bool enabled_;
  std::FILE* out_;
  std::uint64_t last_ = 0;
  std::uint64_t step_;
  std::chrono::steady_clock::time_point start_, drawn_;
  bool shown_ = false;
};

} // namespace reprise::sim
