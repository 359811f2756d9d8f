// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `uncached`: the caching-off baseline with the engine-facing interface of `prefix_cache`. Every sequence
/// gets fresh blocks, nothing is shared, nothing is skipped, no snapshot is kept. The demo, tests and
/// benchmark compare every policy against it.

#include <reprise/cache/types.hpp>
#include <reprise/errc.hpp>

#include <algorithm>
#include <cstdint>
#include <map>
#include <span>
#include <vector>

namespace reprise::example {

class uncached {
public:
  uncached(std::uint32_t kv_blocks, std::uint32_t block_size) : blocks_(kv_blocks), block_size_(block_size) {
    for (std::uint32_t b = kv_blocks; b-- > 0;) free_.push_back(b);
  }

  result<admit_plan> admit(seq_id s, std::span<const token_id> prompt) {
    if (live_.contains(s)) return errc::duplicate_sequence;
    if (prompt.empty()) return errc::invalid_argument;
    const auto length = static_cast<std::uint32_t>(prompt.size());
    const std::uint32_t needed = (length + block_size_ - 1) / block_size_;
    if (free_.size() < needed) return errc::pool_exhausted;
    std::vector<block_id>& t = live_[s].table;
    live_[s].tokens = length;
    for (std::uint32_t i = 0; i < needed; ++i) t.push_back(take());
    admit_plan plan;
    plan.block_table = t;
    return plan;
  }

  result<void> commit(seq_id s, std::uint32_t n, std::span<const std::uint32_t> = {}) {
    auto it = live_.find(s);
    if (it == live_.end()) return errc::unknown_sequence;
    if (n > it->second.tokens) return errc::out_of_range;
    return {};
  }

  result<extend_plan> extend(seq_id s, std::span<const token_id> tokens) {
    auto it = live_.find(s);
    if (it == live_.end()) return errc::unknown_sequence;
    record& r = it->second;
    const auto total = static_cast<std::uint32_t>(r.tokens + tokens.size());
    const std::uint32_t needed = (total + block_size_ - 1) / block_size_;
    const auto have = static_cast<std::uint32_t>(r.table.size());
    if (needed > have && free_.size() < needed - have) return errc::pool_exhausted;
    for (std::uint32_t i = have; i < needed; ++i) r.table.push_back(take());
    r.tokens = total;
    return extend_plan{std::span<const block_id>(r.table).subspan(have), have};
  }

  result<finish_plan> finish(seq_id s, finish_options = {}) {
    auto it = live_.find(s);
    if (it == live_.end()) return errc::unknown_sequence;
    for (block_id b : it->second.table) free_.push_back(b);
    in_use_ -= static_cast<std::uint32_t>(it->second.table.size());
    metrics_.blocks_referenced = in_use_;
    live_.erase(it);
    return finish_plan{};
  }

  result<void> step_complete(epoch_t n) noexcept {
    epoch_ = std::max(epoch_, n + 1);
    return {};
  }
  epoch_t current_epoch() const noexcept { return epoch_; }
  std::uint32_t kv_blocks() const noexcept { return blocks_; }
  std::uint32_t snapshot_slots() const noexcept { return 0; }
  const cache_metrics& metrics() const noexcept { return metrics_; }

private:
  struct record {
    std::vector<block_id> table;
    std::uint32_t tokens = 0;
  };

  block_id take() {
    const block_id b = free_.back();
    free_.pop_back();
    metrics_.blocks_referenced = ++in_use_;
    return b;
  }

  std::uint32_t blocks_, block_size_;
  std::vector<block_id> free_;
  std::map<seq_id, record> live_;
  std::uint32_t in_use_ = 0;
  epoch_t epoch_ = 0;
  cache_metrics metrics_;
};

} // namespace reprise::example
