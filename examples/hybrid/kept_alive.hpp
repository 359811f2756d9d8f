// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The reference for policies that reuse `decode_continuation` state (`policy::chat`): one session per
/// conversation that never ends. Its KV and recurrent state stay live between turns, and each turn prefills
/// only the tokens the session has not been fed yet (the previous reply's last token, sampled but never fed,
/// and the new user message) from where it stopped. A cache that restores a turn-end snapshot must decode
/// bitwise what this session decodes. Caching off is not the reference there: it prefills the earlier replies
/// in chunks, where the session fed them one decode step at a time, and the two differ in the last bits.

#include "hybrid/decoder.hpp"
#include "hybrid/math.hpp"
#include "hybrid/memory.hpp"
#include "hybrid/run.hpp"
#include "hybrid/workload.hpp"

#include <chrono>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace reprise::example {

/// Serves `w` with `model` as kept-alive sessions, one conversation after another, and returns what they
/// decoded in the shape of `run_workload`'s result.
///
/// `prefix_split[conv]`, when set to c, computes conversation `conv`'s first prefill as two calls, [0, c) then
/// [c, L), instead of one: what a cache does when it captures a first turn's state at c (e.g. at the last KV
/// block it shares with an earlier conversation) and a later turn continues from it. A chunked prefill split
/// off the chunk grid is not bitwise the unsplit one, so the reference must split where the cache did.
/// Conversations beyond the span, or with no value, are prefilled in one call. A split outside (0, L) of the
/// first prompt is a caller error (`fail`).
///
/// The result's admissions, one per turn in conversation order, give as `usable_tokens` (and
/// `kv_matched_tokens`) the position the session resumed from: 0 for a first turn, and for a later one the end
/// of the tokens the previous turn fed, which is where a turn-end restore must start too. Its stats count the
/// session's prompt, prefill, resumed-over and decode tokens.
inline workload_result run_kept_alive(const decoder& model, const workload& w,
                                      std::span<const std::optional<std::uint32_t>> prefix_split = {}) {
  const decoder_config& cfg = model.config();
  const workload_config& c = w.config;
  // One conversation at a time reuses the memory: a session writes every position before reading it.
  const auto blocks = static_cast<std::uint32_t>(w.longest_conversation() / cfg.attention.block_size + 1);
  kv_memory kv(cfg, blocks);
  state_memory states(cfg, 1);
  std::vector<block_id> table(blocks);
  for (std::uint32_t i = 0; i < blocks; ++i) table[i] = static_cast<block_id>(i);
  std::vector<float> logits(cfg.vocab);

  workload_result out;
  out.turns.resize(c.conversations);
  out.prompts.resize(c.conversations);
  const auto start = std::chrono::steady_clock::now();
  for (std::uint32_t conv = 0; conv < c.conversations; ++conv) {
    states.zero(0);
    // Every token of the conversation so far: fed to the session, or about to be.
    std::vector<token> seen = w.system_prompt;
    seen.insert(seen.end(), w.user[conv][0].begin(), w.user[conv][0].end());
    std::uint32_t position = 0; // tokens fed so far
    auto prefill = [&](std::uint32_t end) {
      const sequence_step step{position, end - position, table, 0, {}, position};
      model.forward(pass::prefill, std::span<const token>(seen).subspan(position, end - position), {&step, 1}, kv,
                    states, logits);
      position = end;
    };
    for (std::uint32_t turn = 0; turn < c.turns; ++turn) {
      const seq_id id = request_id(conv, turn, c.turns);
      const auto length = static_cast<std::uint32_t>(seen.size());
      out.prompts[conv].push_back(seen);
      out.admissions.push_back({id, length, position, position, 0});
      out.stats.prompt_tokens += length;
      out.stats.prefill_tokens += length - position;
      out.stats.skipped_tokens += position;
      out.stats.kv_matched_tokens += position;
      if (turn == 0 && conv < prefix_split.size() && prefix_split[conv]) {
        const std::uint32_t split = *prefix_split[conv];
        if (split == 0 || split >= length)
          fail("kept-alive reference: a prefix split must lie inside the first prompt", errc::out_of_range);
        prefill(split);
      }
      prefill(length);
      std::vector<token> reply{static_cast<token>(math::argmax(logits))};
      while (reply.size() < w.reply_lengths[conv][turn]) {
        const sequence_step step{position, 1, table, 0, {}, position};
        model.forward(pass::decode, {&reply.back(), 1}, {&step, 1}, kv, states, logits);
        seen.push_back(reply.back());
        ++position;
        ++out.stats.decode_tokens;
        reply.push_back(static_cast<token>(math::argmax(logits)));
      }
      out.turns[conv].push_back({id, reply, logits});
      seen.push_back(reply.back()); // sampled, not fed: the next turn's prefill starts with it
      if (turn + 1 < c.turns) seen.insert(seen.end(), w.user[conv][turn + 1].begin(), w.user[conv][turn + 1].end());
    }
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return out;
}

/// The first-turn splits a cached run made, as `run_kept_alive`'s `prefix_split`: where a conversation's first
/// prefill was split at a branch block (`admission::split_at`), or resumed from a snapshot (its
/// `usable_tokens`: the state there equals a session that prefilled exactly that far). A split on the chunk
/// grid changes no bit, so every resume position can be given.
inline std::vector<std::optional<std::uint32_t>> first_turn_splits(const workload_result& served,
                                                                   const workload_config& c) {
  std::vector<std::optional<std::uint32_t>> split(c.conversations);
  for (const admission& a : served.admissions) {
    if (turn_of(a.id, c.turns) != 0) continue;
    const std::uint32_t at = a.split_at != 0 ? a.split_at : a.usable_tokens;
    if (at != 0) split[conversation_of(a.id, c.turns)] = at;
  }
  return split;
}

} // namespace reprise::example
