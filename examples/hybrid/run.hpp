// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Drives the built-in multi-turn workload through an `engine`: every conversation's first turn is
/// submitted at once; when a turn finishes, the next turn's prompt (the conversation so far plus the next
/// user message) is submitted. The engine admits one request per step, so later conversations find the
/// system prompt cached by earlier ones.

#include "hybrid/engine.hpp"
#include "hybrid/workload.hpp"

#include <chrono>
#include <cstring>
#include <functional>
#include <optional>
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
    e.submit({request_id(conv, turn, c.turns), std::move(prompt), c.reply_tokens, {}});
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
      const auto conv = static_cast<std::uint32_t>((r.id - 1) / c.turns), turn = static_cast<std::uint32_t>((r.id - 1) % c.turns);
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

/// True when both runs decoded the same tokens and ended with bitwise equal logits in every turn.
inline bool same_outputs(const workload_result& a, const workload_result& b) {
  if (a.turns.size() != b.turns.size()) return false;
  for (std::size_t c = 0; c < a.turns.size(); ++c) {
    if (a.turns[c].size() != b.turns[c].size()) return false;
    for (std::size_t t = 0; t < a.turns[c].size(); ++t) {
      const completion &x = a.turns[c][t], &y = b.turns[c][t];
      if (x.generated != y.generated || x.last_logits.size() != y.last_logits.size() ||
          std::memcmp(x.last_logits.data(), y.last_logits.data(), x.last_logits.size() * sizeof(float)) != 0)
        return false;
    }
  }
  return true;
}

} // namespace reprise::example
