// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The in-memory trace: requests in arrival order, each a list of segments that reference shared token
/// pools, earlier requests (prompt + output), literal tokens or fresh unique tokens. The JSONL format in
/// docs/sim-trace-format.md maps one to one onto these types; the generators build them directly.
///
/// Segments keep a million-request trace small: a chat turn is "the previous turn, then N new tokens", not
/// a copy of the whole history. `materializer` expands requests to tokens on demand from their segments,
/// in bounded memory.

#include <cstddef>
#include <cstdint>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace reprise::sim {

/// A token id, as the cache takes them (`reprise::token_id`, non-negative in traces).
using token = std::int32_t;

/// What a segment copies into the prompt.
enum class segment_kind : std::uint8_t {
  literal, ///< `length` tokens of `trace::literals` from `offset`
  pool,    ///< `length` tokens of pool `ref` from `offset`
  from,    ///< the first `length` tokens of request `ref`'s prompt followed by its output
  fresh,   ///< `length` tokens nobody else has (derived from the request index and segment position)
};

struct segment {
  segment_kind kind = segment_kind::fresh;
  std::uint32_t ref = 0;
  std::uint64_t offset = 0;
  std::uint64_t length = 0;
  friend bool operator==(const segment&, const segment&) = default;
};

/// One request. `session` and `tenant` index `trace::sessions` / `trace::tenants`.
struct request {
  std::uint64_t id = 0;           ///< the trace's own id (unique, increasing is not required)
  std::uint32_t session = 0;
  std::uint32_t tenant = 0;
  std::uint32_t first_segment = 0;
  std::uint32_t segment_count = 0;
  std::uint64_t prompt_tokens = 0; ///< sum of the segment lengths
  std::uint32_t output_tokens = 0; ///< tokens decoded after the prompt
  friend bool operator==(const request&, const request&) = default;
};

/// A named shared token sequence (a system prompt, a document, tool definitions). A synthetic pool is
/// `synthetic_token(seed, i)` for i < size and is written back to JSONL as its seed, not its tokens.
struct token_pool {
  std::string name;
  std::vector<token> tokens;
  bool synthetic = false;
  std::uint64_t seed = 0;
  friend bool operator==(const token_pool&, const token_pool&) = default;
};

/// Token i of the synthetic pool with `seed`.
token synthetic_token(std::uint64_t seed, std::uint64_t i) noexcept;
/// A synthetic pool's tokens.
std::vector<token> synthetic_tokens(std::uint64_t seed, std::uint64_t count);

/// Hashes `std::string` keys and looks them up by `std::string_view` without building a string.
struct string_hash {
  using is_transparent = void;
  std::size_t operator()(std::string_view s) const noexcept { return std::hash<std::string_view>{}(s); }
};
using string_index = std::unordered_map<std::string, std::uint32_t, string_hash, std::equal_to<>>;

/// Interns strings to dense indices (session and tenant names).
class string_table {
public:
  std::uint32_t intern(std::string_view s);
  std::span<const std::string> names() const noexcept { return names_; }
  std::size_t size() const noexcept { return names_.size(); }
  const std::string& operator[](std::uint32_t i) const { return names_[i]; }
  /// Index of `s`, or `size()` when absent.
  std::uint32_t find(std::string_view s) const;
  friend bool operator==(const string_table& a, const string_table& b) { return a.names_ == b.names_; }

private:
  std::vector<std::string> names_;
  string_index index_;
};

/// A whole trace. Invariants (kept by `trace_builder` and the parser): segments of request i lie in
/// [first_segment, first_segment + segment_count); `from` segments name a request with a smaller index and
/// a length within its prompt + output; pool and literal ranges are in bounds.
struct trace {
  std::vector<token_pool> pools;
  std::vector<token> literals;
  std::vector<segment> segments;
  std::vector<request> requests;
  string_table sessions;
  string_table tenants;

  std::span<const segment> segments_of(const request& r) const noexcept {
    return {segments.data() + r.first_segment, r.segment_count};
  }
  std::uint64_t total_prompt_tokens() const noexcept;
  std::uint64_t total_output_tokens() const noexcept;
  friend bool operator==(const trace&, const trace&) = default;
};

/// Appends requests to a trace while keeping its invariants.
class trace_builder {
public:
  explicit trace_builder(trace& t) : t_(t) {}

  std::uint32_t add_pool(std::string name, std::vector<token> tokens);
  std::uint32_t add_synthetic_pool(std::string name, std::uint64_t seed, std::uint64_t count);
  /// Index of the pool named `name`, or `t.pools.size()` when absent.
  std::uint32_t find_pool(std::string_view name) const;

  /// Starts a request; segments follow through the `add_*` calls below, then `finish_request`.
  void begin_request(std::uint64_t id, std::string_view session, std::string_view tenant);
  void add_literal(std::span<const token> tokens);
  void add_pool_slice(std::uint32_t pool, std::uint64_t offset, std::uint64_t length);
  /// `length` defaults (when ~0) to the whole prompt + output of request `index`.
  void add_from(std::uint32_t index, std::uint64_t length = ~std::uint64_t{0});
  void add_fresh(std::uint64_t length);
  /// Returns the new request's index.
  std::uint32_t finish_request(std::uint32_t output_tokens);
  /// Drops the request begun last (its segments and literals), e.g. after a parse error.
  void abandon_request();

  /// Total length of request `index` (prompt + output): the most a `from` segment may copy.
  std::uint64_t full_length(std::uint32_t index) const {
    return t_.requests[index].prompt_tokens + t_.requests[index].output_tokens;
  }
  std::uint64_t pending_prompt_tokens() const noexcept { return pending_.prompt_tokens; }

private:
  trace& t_;
  request pending_{};
  std::size_t literal_mark_ = 0;
  string_index pool_index_;
};

/// The value of fresh token `i` of segment `seg` of request `index`, and of output token `i`. Fresh tokens
/// are pseudo-random 31-bit values, so distinct requests practically never share a full block by chance
/// (a 16-token block of them collides with probability ~2^-496).
token fresh_token(std::uint32_t index, std::uint32_t seg, std::uint64_t i) noexcept;
token output_token(std::uint32_t index, std::uint64_t i) noexcept;

/// Expands requests to tokens. The trace stores segments, never expanded requests: a `from` segment is
/// expanded on demand from its source request's segments (recursively, with an explicit stack, so a deep
/// chain of references cannot overflow the call stack). To keep long chains cheap, the full expansion
/// (prompt + output) of a request that a later `from` still references is kept while it fits in
/// `keep_tokens`; when it does not, the largest kept expansions make room (or the new one is not kept), so
/// memory is bounded by `keep_tokens` plus the request being expanded, whatever the trace references.
///
/// Complexity: a prompt costs its length, plus the segments visited to reach the sources that are not kept.
class materializer {
public:
  /// 16 Mi tokens (64 MiB) of kept expansions: the live context of hundreds of interleaved chats.
  static constexpr std::uint64_t default_keep_tokens = std::uint64_t{1} << 24;

  explicit materializer(const trace& t, std::uint64_t keep_tokens = default_keep_tokens);

  /// Writes the prompt of request `index` into `out` (replacing its contents). Any order gives the same
  /// tokens; expanding each request once, in increasing index order (as a replay does), lets kept
  /// expansions go as soon as their last reference has been expanded.
  void prompt(std::uint32_t index, std::vector<token>& out);
  /// Appends the output tokens of request `index` to `out`.
  static void append_output(std::uint32_t index, std::uint32_t count, std::vector<token>& out);

  std::size_t retained() const noexcept { return kept_.size(); }
  /// Tokens held in kept expansions (at most `keep_tokens`).
  std::uint64_t retained_tokens() const noexcept { return kept_tokens_; }

private:
  /// Appends the first `length` tokens of request `index`'s prompt followed by its output.
  void append_prefix(std::uint32_t index, std::uint64_t length, std::vector<token>& out);
  void keep(std::uint32_t index, std::vector<token> full);
  void drop(std::uint32_t index);

  struct frame {
    std::uint32_t request;
    std::uint32_t next_segment; ///< `segment_count`: the output tokens come next
    std::uint64_t remaining;
  };

  const trace& t_;
  std::uint64_t keep_tokens_;
  std::uint64_t kept_tokens_ = 0;
  std::vector<std::uint32_t> pending_refs_; ///< later `from` segments that still read request i
  std::unordered_map<std::uint32_t, std::vector<token>> kept_;
  std::set<std::pair<std::uint64_t, std::uint32_t>> kept_by_size_;
  std::vector<frame> stack_;
};

} // namespace reprise::sim
