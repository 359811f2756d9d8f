// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The built-in multi-turn workload: several conversations that share one long system prompt, each with
/// several user turns; replies are decoded greedily by the model, so a turn's prompt is the whole
/// conversation so far (system prompt, earlier user turns and replies) plus the new user message.

#include "hybrid/config.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace reprise::example {

struct workload_config {
  std::uint32_t conversations = 4;
  std::uint32_t turns = 3;
  std::uint32_t system_tokens = 384; ///< the shared system prompt
  /// Tokens per user message; with `user_tokens_max` above it, the fewest.
  std::uint32_t user_tokens = 48;
  /// Above `user_tokens`: each message's length is drawn per conversation and turn from
  /// [user_tokens, user_tokens_max], so turns end anywhere in a KV block. Otherwise every message has
  /// `user_tokens` tokens.
  std::uint32_t user_tokens_max = 0;
  std::uint32_t reply_tokens = 16;     ///< tokens decoded per reply; with `reply_tokens_max` above it, the fewest
  std::uint32_t reply_tokens_max = 0;  ///< as `user_tokens_max`, for replies
  std::uint64_t seed = 7;

  std::uint32_t longest_user() const noexcept { return std::max(user_tokens, user_tokens_max); }
  std::uint32_t longest_reply() const noexcept { return std::max(reply_tokens, reply_tokens_max); }
};

/// The token content of a workload and the length of every reply (replies are not part of it: the model
/// produces them).
struct workload {
  workload_config config;
  std::vector<token> system_prompt;
  std::vector<std::vector<std::vector<token>>> user;       ///< [conversation][turn] -> message tokens
  std::vector<std::vector<std::uint32_t>> reply_lengths;   ///< [conversation][turn] -> tokens decoded

  /// Draws every token and length from `config.seed`. Token 0 is never used (free for tests to mark things
  /// with). Lengths come from a stream of their own, so a workload with fixed lengths has the same tokens
  /// whatever the ranges of another would draw.
  static workload make(const workload_config& c, std::uint32_t vocab) {
    workload w{c, {}, {}, {}};
    auto xorshift = [](std::uint64_t& s) {
      s ^= s << 13;
      s ^= s >> 7;
      s ^= s << 17;
      return s;
    };
    std::uint64_t tokens = c.seed * 0x9e3779b97f4a7c15ull + 1, lengths = c.seed * 0xbf58476d1ce4e5b9ull + 3;
    auto next = [&] { return static_cast<token>(1 + xorshift(tokens) % (vocab - 1)); };
    auto length = [&](std::uint32_t least, std::uint32_t most) {
      if (most <= least) return least;
      return least + static_cast<std::uint32_t>(xorshift(lengths) % (std::uint64_t{most} - least + 1));
    };
    for (std::uint32_t i = 0; i < c.system_tokens; ++i) w.system_prompt.push_back(next());
    w.user.resize(c.conversations);
    w.reply_lengths.resize(c.conversations);
    for (std::uint32_t conv = 0; conv < c.conversations; ++conv) {
      w.user[conv].resize(c.turns);
      for (auto& msg : w.user[conv]) {
        const std::uint32_t n = length(c.user_tokens, c.user_tokens_max);
        for (std::uint32_t i = 0; i < n; ++i) msg.push_back(next());
      }
      for (std::uint32_t turn = 0; turn < c.turns; ++turn)
        w.reply_lengths[conv].push_back(length(c.reply_tokens, c.reply_tokens_max));
    }
    return w;
  }

  /// Tokens of conversation `conv` once its last reply is decoded: the most one sequence ever holds.
  std::uint64_t conversation_tokens(std::uint32_t conv) const {
    std::uint64_t n = system_prompt.size();
    for (std::uint32_t turn = 0; turn < config.turns; ++turn) n += user[conv][turn].size() + reply_lengths[conv][turn];
    return n;
  }
  std::uint64_t longest_conversation() const {
    std::uint64_t n = 0;
    for (std::uint32_t conv = 0; conv < config.conversations; ++conv) n = std::max(n, conversation_tokens(conv));
    return n;
  }
};

} // namespace reprise::example
