// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The built-in multi-turn workload: several conversations that share one long system prompt, each with
/// several user turns; replies are decoded greedily by the model, so a turn's prompt is the whole
/// conversation so far (system prompt, earlier user turns and replies) plus the new user message.

#include "hybrid/config.hpp"

#include <cstdint>
#include <vector>

namespace reprise::example {

struct workload_config {
  std::uint32_t conversations = 4;
  std::uint32_t turns = 3;
  std::uint32_t system_tokens = 384; ///< the shared system prompt
  std::uint32_t user_tokens = 48;    ///< tokens per user message
  std::uint32_t reply_tokens = 16;   ///< tokens decoded per reply
  std::uint64_t seed = 7;
};

/// The token content of a workload (replies are not part of it: the model produces them).
struct workload {
  workload_config config;
  std::vector<token> system_prompt;
  std::vector<std::vector<std::vector<token>>> user; ///< [conversation][turn] -> message tokens

  /// Draws every token from `config.seed`. Token 0 is never used (free for tests to mark things with).
  static workload make(const workload_config& c, std::uint32_t vocab) {
    workload w{c, {}, {}};
    std::uint64_t s = c.seed * 0x9e3779b97f4a7c15ull + 1;
    auto next = [&] {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      return static_cast<token>(1 + s % (vocab - 1));
    };
    for (std::uint32_t i = 0; i < c.system_tokens; ++i) w.system_prompt.push_back(next());
    w.user.resize(c.conversations);
    for (auto& conv : w.user) {
      conv.resize(c.turns);
      for (auto& msg : conv)
        for (std::uint32_t i = 0; i < c.user_tokens; ++i) msg.push_back(next());
    }
    return w;
  }
};

} // namespace reprise::example
