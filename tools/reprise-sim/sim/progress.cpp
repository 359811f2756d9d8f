// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/progress.hpp"

#include <algorithm>
#include <unistd.h>

namespace reprise::sim {

progress::progress(std::string label, std::uint64_t total, bool enabled, std::FILE* out)
    : label_(std::move(label)), total_(total), enabled_(enabled && total > 0), out_(out),
      step_(std::max<std::uint64_t>(total / 1000, 1)), start_(std::chrono::steady_clock::now()), drawn_(start_) {}

progress::~progress() { finish(); }

bool progress::stderr_is_terminal() noexcept { return ::isatty(STDERR_FILENO) == 1; }

void progress::redraw(std::uint64_t done) {
  last_ = done;
  const auto now = std::chrono::steady_clock::now();
  if (shown_ && done != total_ && now - drawn_ < std::chrono::milliseconds(100)) return;
  drawn_ = now;
  shown_ = true;
  constexpr int width = 30;
  const double frac = static_cast<double>(std::min(done, total_)) / static_cast<double>(total_);
  const int filled = static_cast<int>(frac * width);
  const double secs = std::chrono::duration<double>(now - start_).count();
  const double rate = secs > 0 ? static_cast<double>(done) / secs : 0;
  char bar[width + 1];
  for (int i = 0; i < width; ++i) bar[i] = i < filled ? '#' : '.';
  bar[width] = 0;
  std::fprintf(out_, "\r%s [%s] %5.1f%% %llu/%llu %.0f/s ", label_.c_str(), bar, 100 * frac,
               static_cast<unsigned long long>(done), static_cast<unsigned long long>(total_), rate);
  std::fflush(out_);
}

void progress::finish() {
  if (!shown_) return;
  shown_ = false;
  std::fprintf(out_, "\r\033[K");
  std::fflush(out_);
}

} // namespace reprise::sim
