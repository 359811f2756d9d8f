// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/workload.hpp"

#include <algorithm>
#include <cmath>
#include <deque>
#include <string>
#include <utility>
#include <vector>

namespace reprise::sim {

std::string_view to_string(workload_kind k) noexcept {
  switch (k) {
  case workload_kind::chat: return "chat";
  case workload_kind::system_prompt: return "system_prompt";
  case workload_kind::agentic: return "agentic";
  case workload_kind::rag: return "rag";
  case workload_kind::long_context: return "long_context";
  }
  return "?";
}

std::optional<workload_kind> parse_workload(std::string_view name) noexcept {
  for (auto k : {workload_kind::chat, workload_kind::system_prompt, workload_kind::agentic, workload_kind::rag,
                 workload_kind::long_context})
    if (name == to_string(k)) return k;
  return std::nullopt;
}

namespace {
constexpr std::uint64_t splitmix(std::uint64_t& x) noexcept {
  std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
constexpr std::uint64_t rotl(std::uint64_t x, int k) noexcept { return (x << k) | (x >> (64 - k)); }
} // namespace

rng::rng(std::uint64_t seed) noexcept {
  for (auto& s : s_) s = splitmix(seed);
}

std::uint64_t rng::next() noexcept {
  const std::uint64_t result = rotl(s_[1] * 5, 7) * 9;
  const std::uint64_t t = s_[1] << 17;
  s_[2] ^= s_[0];
  s_[3] ^= s_[1];
  s_[1] ^= s_[2];
  s_[0] ^= s_[3];
  s_[2] ^= t;
  s_[3] = rotl(s_[3], 45);
  return result;
}

double rng::uniform() noexcept { return static_cast<double>(next() >> 11) * 0x1.0p-53; }

std::uint64_t rng::below(std::uint64_t n) noexcept {
  // 53 random bits scaled; the bias (< n / 2^53) is irrelevant for traffic shapes.
  return static_cast<std::uint64_t>(uniform() * static_cast<double>(n)) % n;
}

double rng::normal() noexcept {
  const double u1 = 1.0 - uniform(); // (0, 1]
  const double u2 = uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

std::uint32_t rng::lognormal(double median, double sigma, std::uint32_t lo, std::uint32_t hi) noexcept {
  const double v = std::round(median * std::exp(sigma * normal()));
  return static_cast<std::uint32_t>(std::clamp(v, static_cast<double>(lo), static_cast<double>(hi)));
}

std::uint32_t rng::geometric(double p, std::uint32_t cap) noexcept {
  std::uint32_t n = 0;
  while (n < cap && uniform() >= p) ++n;
  return n;
}

namespace {

/// Zipf(s) over [0, n): a cumulative table and a binary search.
class zipf_table {
public:
  zipf_table(std::uint32_t n, double s) : cdf_(n) {
    double sum = 0;
    for (std::uint32_t i = 0; i < n; ++i) cdf_[i] = (sum += 1.0 / std::pow(i + 1.0, s));
    for (double& c : cdf_) c /= sum;
  }
  std::uint32_t draw(rng& r) const {
    const double u = r.uniform();
    const auto it = std::upper_bound(cdf_.begin(), cdf_.end(), u);
    return static_cast<std::uint32_t>(std::min<std::ptrdiff_t>(it - cdf_.begin(), std::ssize(cdf_) - 1));
  }

private:
  std::vector<double> cdf_;
};

/// Shared driver: `Workload` keeps per-conversation state; this interleaves `active_sessions` of them.
struct session_state {
  std::uint64_t number = 0;      ///< creation order, for the session name
  std::uint32_t tenant = 0;
  std::uint32_t turns_left = 0;
  std::uint32_t last = 0;        ///< index of the session's previous request
  bool has_last = false;
  std::uint64_t context = 0;     ///< prompt + output tokens of `last`
  std::deque<std::pair<std::uint32_t, std::uint32_t>> frontier; ///< agentic: (parent index, depth)
  std::uint32_t nodes = 0;       ///< agentic: requests emitted for this task
  std::uint32_t depth_limit = 0; ///< agentic
};

class generator {
public:
  explicit generator(const workload_options& o) : o_(o), r_(o.seed), b_(t_) {}

  trace run() {
    setup();
    std::vector<session_state> active(std::max<std::uint32_t>(o_.active_sessions, 1));
    for (auto& s : active) start(s);
    while (t_.requests.size() < o_.requests) {
      session_state& s = active[r_.below(active.size())];
      if (!step(s)) start(s);
    }
    return std::move(t_);
  }

private:
  void setup() {
    switch (o_.kind) {
    case workload_kind::chat:
      // A handful of deployments' system prompts; Zipf-popular, 100..1500 tokens.
      for (std::uint32_t i = 0; i < 8; ++i) add_pool("system-" + std::to_string(i), 400, 0.7, 100, 1500);
      sys_pick_ = zipf_table(8, 1.0);
      break;
    case workload_kind::system_prompt:
      b_.add_synthetic_pool("system", r_.next(), std::max<std::uint32_t>(o_.system_prompt_tokens, 1));
      break;
    case workload_kind::agentic:
      // Four agents, each with its own tool definitions (long, shared by every task of that agent).
      for (std::uint32_t i = 0; i < 4; ++i) add_pool("tools-" + std::to_string(i), 3000, 0.4, 1000, 8000);
      sys_pick_ = zipf_table(4, 0.8);
      break;
    case workload_kind::rag:
      b_.add_synthetic_pool("system", r_.next(), 300);
      for (std::uint32_t i = 0; i < std::max<std::uint32_t>(o_.documents, 1); ++i)
        add_pool("doc-" + std::to_string(i), 800, 0.6, 100, 4000);
      doc_pick_ = zipf_table(std::max<std::uint32_t>(o_.documents, 1), 1.1);
      break;
    case workload_kind::long_context:
      for (std::uint32_t i = 0; i < long_documents(); ++i)
        add_pool("doc-" + std::to_string(i), 65536, 0.5, 32768, 131072);
      doc_pick_ = zipf_table(long_documents(), 1.0);
      break;
    }
  }

  std::uint32_t long_documents() const noexcept { return std::clamp<std::uint32_t>(o_.documents, 1, 48); }

  void start(session_state& s) {
    s = session_state{};
    s.number = sessions_++;
    s.tenant = static_cast<std::uint32_t>(r_.below(std::max<std::uint32_t>(o_.tenants, 1)));
    switch (o_.kind) {
    case workload_kind::chat: s.turns_left = 1 + r_.geometric(1.0 / 3.5, 40); break; // mean 3.5 turns
    case workload_kind::system_prompt: s.turns_left = 1 + r_.geometric(0.75, 4); break;
    case workload_kind::agentic: s.depth_limit = 2 + r_.geometric(1.0 / 6.0, 30); break;
    case workload_kind::rag: s.turns_left = 1 + r_.geometric(0.8, 3); break;
    case workload_kind::long_context: s.turns_left = 2 + r_.geometric(0.4, 8); break; // mean 3.5 questions
    }
  }

  void begin(const session_state& s) {
    b_.begin_request(t_.requests.size(), "s" + std::to_string(s.number), "t" + std::to_string(s.tenant));
  }

  /// Emits the session's next request; false when the session is over (nothing emitted).
  bool step(session_state& s) {
    switch (o_.kind) {
    case workload_kind::chat: return chat_turn(s);
    case workload_kind::system_prompt: return chat_turn(s);
    case workload_kind::agentic: return agent_step(s);
    case workload_kind::rag: return rag_turn(s);
    case workload_kind::long_context: return document_turn(s);
    }
    return false;
  }

  bool finish_turn(session_state& s, std::uint32_t output) {
    s.last = b_.finish_request(output);
    s.context = b_.full_length(s.last);
    s.has_last = true;
    --s.turns_left;
    return true;
  }

  bool chat_turn(session_state& s) {
    if (s.turns_left == 0) return false;
    const bool long_prompt = o_.kind == workload_kind::system_prompt;
    const std::uint32_t user = long_prompt ? r_.lognormal(60, 0.8, 4, 1000) : r_.lognormal(80, 1.0, 4, 4000);
    const std::uint32_t output = long_prompt ? r_.lognormal(200, 0.7, 8, 1024) : r_.lognormal(250, 0.8, 8, 2048);
    if (s.has_last) {
      if (s.context + user > o_.max_context) return false;
      begin(s);
      b_.add_from(s.last);
    } else {
      begin(s);
      if (long_prompt) b_.add_pool_slice(0, 0, t_.pools[0].tokens.size());
      else if (r_.uniform() < 0.8) { // a fifth of the conversations have no system prompt
        const std::uint32_t p = sys_pick_.draw(r_);
        b_.add_pool_slice(p, 0, t_.pools[p].tokens.size());
      }
    }
    b_.add_fresh(user);
    return finish_turn(s, output);
  }

  bool rag_turn(session_state& s) {
    if (s.turns_left == 0) return false;
    const std::uint32_t question = r_.lognormal(40, 0.7, 4, 500);
    begin(s);
    if (s.has_last) {
      b_.add_from(s.last); // a follow-up question over the same documents
    } else {
      b_.add_pool_slice(0, 0, t_.pools[0].tokens.size());
      const std::uint32_t k = 1 + static_cast<std::uint32_t>(r_.below(5));
      std::uint32_t picked[5];
      for (std::uint32_t i = 0; i < k; ++i) {
        std::uint32_t d = 0;
        do d = doc_pick_.draw(r_);
        while (std::find(picked, picked + i, d) != picked + i && o_.documents > k);
        picked[i] = d;
        const std::uint32_t pool = 1 + d;
        b_.add_pool_slice(pool, 0, t_.pools[pool].tokens.size());
      }
    }
    b_.add_fresh(question);
    return finish_turn(s, r_.lognormal(150, 0.6, 8, 1024));
  }

  /// A question over the session's document: the first one right after it, a follow-up continuing the
  /// conversation or, half the time, asked anew after the document (a branch at its end). The document is
  /// kept in `depth_limit` (its pool).
  bool document_turn(session_state& s) {
    if (s.turns_left == 0) return false;
    const std::uint32_t question = r_.lognormal(60, 0.7, 4, 1000);
    begin(s);
    if (s.has_last && r_.uniform() < 0.5) {
      b_.add_from(s.last);
    } else {
      if (!s.has_last) s.depth_limit = doc_pick_.draw(r_);
      b_.add_pool_slice(s.depth_limit, 0, t_.pools[s.depth_limit].tokens.size());
    }
    b_.add_fresh(question);
    return finish_turn(s, r_.lognormal(200, 0.6, 8, 1024));
  }

  bool agent_step(session_state& s) {
    const std::uint32_t tool_call = r_.lognormal(100, 0.6, 8, 1024); // the model's output at each step
    if (!s.has_last) {
      begin(s);
      const std::uint32_t tools = sys_pick_.draw(r_);
      b_.add_pool_slice(tools, 0, t_.pools[tools].tokens.size());
      b_.add_fresh(r_.lognormal(200, 0.8, 8, 4000)); // the task
      s.last = b_.finish_request(tool_call);
      s.has_last = true;
      s.frontier.emplace_back(s.last, 1);
      ++s.nodes;
      return true;
    }
    if (s.frontier.empty() || s.nodes >= 64) return false;
    const auto [parent, depth] = s.frontier.front();
    s.frontier.pop_front();
    const std::uint32_t result = r_.lognormal(400, 1.0, 8, 8000); // the tool's output
    if (b_.full_length(parent) + result > o_.max_context) return step_or_end(s);
    begin(s);
    b_.add_from(parent);
    b_.add_fresh(result);
    const std::uint32_t node = b_.finish_request(tool_call);
    ++s.nodes;
    if (depth < s.depth_limit) {
      // A step fans out into parallel tool calls 30 % of the time; each branch continues the same context.
      const std::uint32_t children = r_.uniform() < 0.3 ? 2 + static_cast<std::uint32_t>(r_.below(3)) : 1;
      for (std::uint32_t i = 0; i < children; ++i) s.frontier.emplace_back(node, depth + 1);
    }
    return true;
  }

  bool step_or_end(session_state& s) { return s.frontier.empty() ? false : agent_step(s); }

  // A synthetic pool of lognormal length. The length is drawn before the pool's seed, one statement each: as
  // two arguments of one call the order of the draws would be the compiler's (g++ and clang++ differ), and
  // so would every trace. This is the order the recorded traces and pinned figures were generated in.
  void add_pool(std::string name, double median, double sigma, std::uint32_t lo, std::uint32_t hi) {
    const std::uint32_t length = r_.lognormal(median, sigma, lo, hi);
    const std::uint64_t seed = r_.next();
    b_.add_synthetic_pool(std::move(name), seed, length);
  }

  workload_options o_;
  rng r_;
  trace t_;
  trace_builder b_;
  zipf_table sys_pick_{1, 1.0};
  zipf_table doc_pick_{1, 1.0};
  std::uint64_t sessions_ = 0;
};

} // namespace

trace generate(const workload_options& o) { return generator(o).run(); }

} // namespace reprise::sim
