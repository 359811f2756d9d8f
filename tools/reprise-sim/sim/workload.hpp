// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Seeded generators for four traffic shapes. The same options (seed included) always give the same trace,
/// on any machine with IEEE doubles: the generators use their own random engine and distributions, not
/// `<random>`'s, whose distributions differ between standard libraries.
///
/// Length distributions are log-normal with medians in the range public chat and agent traces report
/// (ShareGPT / LMSYS-Chat user turns of tens to hundreds of tokens, replies of a few hundred, tool outputs
/// of hundreds to thousands). They are knobs, not measurements: change them with `workload_options`.

#include "sim/trace.hpp"

#include <cstdint>
#include <optional>
#include <string_view>

namespace reprise::sim {

enum class workload_kind : std::uint8_t {
  chat,          ///< multi-turn conversations, some behind one of a few system prompts
  system_prompt, ///< many users behind one long shared system prompt, mostly single-turn
  agentic,       ///< agent trees: tool definitions, then steps that branch into parallel tool calls
  rag,           ///< a shared system prompt, then retrieved documents drawn from a Zipf-popular corpus
  /// long documents (32K..128K tokens, log-normal, median 64K; at most 48 of them, Zipf-popular) with several
  /// questions each: a follow-up continues the conversation or asks anew right after the document
  long_context,
};

std::string_view to_string(workload_kind k) noexcept;
std::optional<workload_kind> parse_workload(std::string_view name) noexcept;

struct workload_options {
  workload_kind kind = workload_kind::chat;
  std::uint64_t requests = 1000;
  std::uint64_t seed = 1;
  std::uint32_t tenants = 1;            ///< sessions are spread uniformly over this many tenants
  std::uint32_t active_sessions = 256;  ///< conversations interleaved at any time
  std::uint32_t max_context = 32768;    ///< a conversation ends before its prompt would exceed this
  std::uint32_t system_prompt_tokens = 4096; ///< the shared prompt of `system_prompt` (median elsewhere)
  std::uint32_t documents = 2000;       ///< `rag` corpus size
};

/// Builds a trace of exactly `o.requests` requests.
/// Complexity: linear in the number of requests and the pool tokens.
trace generate(const workload_options& o);

/// xoshiro256** seeded through splitmix64, with the few distributions the generators need.
class rng {
public:
  explicit rng(std::uint64_t seed) noexcept;
  std::uint64_t next() noexcept;
  double uniform() noexcept;                        ///< [0, 1)
  std::uint64_t below(std::uint64_t n) noexcept;    ///< [0, n), n > 0
  double normal() noexcept;
  /// exp(N(log(median), sigma)) rounded and clamped to [lo, hi].
  std::uint32_t lognormal(double median, double sigma, std::uint32_t lo, std::uint32_t hi) noexcept;
  /// Number of failures before a success with probability p (mean (1-p)/p), capped at `cap`.
  std::uint32_t geometric(double p, std::uint32_t cap) noexcept;

private:
  std::uint64_t s_[4];
};

} // namespace reprise::sim
