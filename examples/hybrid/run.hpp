// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Drives the built-in multi-turn workload through an `engine`: every conversation's first turn is
/// submitted at once; when a turn finishes, the next turn's prompt (the conversation so far plus the next
/// user message) is submitted. The engine admits one request per step, so later conversations find the
/// system prompt cached by earlier ones.

#include "hybrid/engine.hpp"
#include "hybrid/workload.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace reprise::example {

struct workload_result {
  std::vector<std::vector<completion>> turns; ///< [conversation][turn]
  std::vector<std::vector<std::vector<token>>> prompts; ///< [conversation][turn] -> the prompt served
  engine_stats stats;
  std::vector<admission> admissions;
  cache_metrics metrics;
  double seconds = 0;
};

/// Request id of a turn (ids are never reused within a run, as the cache requires of live ones).
constexpr seq_id request_id(std::uint32_t conversation, std::uint32_t turn, std::uint32_t turns) noexcept {
  return seq_id{conversation} * turns + turn + 1;
}
/// The conversation and turn of a request id, the inverse of `request_id`.
constexpr std::uint32_t conversation_of(seq_id id, std::uint32_t turns) noexcept {
  return static_cast<std::uint32_t>((id - 1) / turns);
}
constexpr std::uint32_t turn_of(seq_id id, std::uint32_t turns) noexcept {
  return static_cast<std::uint32_t>((id - 1) % turns);
}

/// Serves `w` with `model` through `cache`. `progress(done, total)` is called after every step.
/// `options` default to one running sequence per conversation, one admission per step.
template <class Cache>
workload_result run_workload(const decoder& model, Cache& cache, const workload& w,
                             std::optional<typename engine<Cache>::options> options = {},
                             const std::function<void(std::uint32_t, std::uint32_t)>& progress = {}) {
  const workload_config& c = w.config;
  engine<Cache> e(model, cache, options.value_or(typename engine<Cache>::options{.max_running = c.conversations}));
  workload_result out;
  out.turns.resize(c.conversations);
  out.prompts.resize(c.conversations);
  auto submit = [&](std::uint32_t conv, std::vector<token> prompt) {
    const auto turn = static_cast<std::uint32_t>(out.prompts[conv].size());
    out.prompts[conv].push_back(prompt);
    e.submit({request_id(conv, turn, c.turns), std::move(prompt), w.reply_lengths[conv][turn], {}, turn + 1 == c.turns});
  };
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t conv = 0; conv < c.conversations; ++conv) {
    std::vector<token> prompt = w.system_prompt;
    prompt.insert(prompt.end(), w.user[conv][0].begin(), w.user[conv][0].end());
    submit(conv, std::move(prompt));
  }
  std::uint32_t done = 0;
  while (!e.idle()) {
    for (completion& r : e.step()) {
      const std::uint32_t conv = conversation_of(r.id, c.turns), turn = turn_of(r.id, c.turns);
      if (turn + 1 < c.turns) {
        std::vector<token> prompt = out.prompts[conv][turn];
        prompt.insert(prompt.end(), r.generated.begin(), r.generated.end());
        prompt.insert(prompt.end(), w.user[conv][turn + 1].begin(), w.user[conv][turn + 1].end());
        submit(conv, std::move(prompt));
      }
      out.turns[conv].push_back(std::move(r));
      ++done;
    }
    if (progress) progress(done, c.conversations * c.turns);
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  out.stats = e.stats();
  out.admissions = e.admissions();
  out.metrics = cache.metrics();
  return out;
}

/// Where two runs first differ, in words ("conversation 2, turn 3: reply token 5 differs"), or nothing when
/// both decoded the same tokens and ended with bitwise equal logits in every turn. Conversations and turns
/// are numbered from 1, as printed.
inline std::optional<std::string> first_difference(const workload_result& a, const workload_result& b) {
  if (a.turns.size() != b.turns.size()) return "a different number of conversations";
  for (std::size_t c = 0; c < a.turns.size(); ++c) {
    const std::string where = "conversation " + std::to_string(c + 1);
    if (a.turns[c].size() != b.turns[c].size()) return where + ": a different number of turns";
    for (std::size_t t = 0; t < a.turns[c].size(); ++t) {
      const completion &x = a.turns[c][t], &y = b.turns[c][t];
      const std::string turn = where + ", turn " + std::to_string(t + 1) + ": ";
      const auto [dx, dy] =
          std::mismatch(x.generated.begin(), x.generated.end(), y.generated.begin(), y.generated.end());
      if (dx != x.generated.end() || dy != y.generated.end())
        return turn + "reply token " + std::to_string(dx - x.generated.begin() + 1) + " differs";
      if (x.last_logits.size() != y.last_logits.size() ||
          std::memcmp(x.last_logits.data(), y.last_logits.data(), x.last_logits.size() * sizeof(float)) != 0)
        return turn + "final logits differ";
    }
  }
  return std::nullopt;
}

/// True when both runs decoded the same tokens and ended with bitwise equal logits in every turn.
inline bool same_outputs(const workload_result& a, const workload_result& b) { return !first_difference(a, b); }

} // namespace reprise::example
