// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Fuzz-replay of hostile trace input: random bytes and mutated valid lines never crash the parser (the
// sanitizer build runs this too), every error names a line that exists, and whatever parses expands to
// exactly the prompt lengths it claims.
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

using namespace reprise::sim;

namespace {

/// Parses `text` both ways and checks what the parser promises about any input.
void check_any_input(const std::string& text, on_error mode) {
  parse_options o{.mode = mode};
  o.limits.max_prompt_tokens = 1 << 16; // keep expansions small under the sanitizers
  o.limits.max_total_pool_tokens = 1 << 20;
  const parse_result r = parse_trace(text, o);
  const std::uint64_t lines = static_cast<std::uint64_t>(std::count(text.begin(), text.end(), '\n')) + 1;
  CHECK(r.errors.size() == std::min<std::uint64_t>(r.error_count, o.limits.max_reported_errors));
  for (const parse_error& e : r.errors) {
    CHECK(e.line >= 1);
    CHECK(e.line <= lines);
    CHECK(e.column >= 1);
    CHECK_FALSE(e.message.empty());
  }
  if (mode == on_error::fail) CHECK(r.error_count <= 1);
  materializer m(r.t);
  std::vector<token> tokens;
  for (std::uint32_t i = 0; i < r.t.requests.size(); ++i) {
    m.prompt(i, tokens);
    REQUIRE(tokens.size() == r.t.requests[i].prompt_tokens);
    REQUIRE(tokens.size() >= 1);
  }
  std::istringstream in(text);
  const parse_result s = parse_trace(in, o);
  CHECK(s.error_count == r.error_count);
  CHECK(s.t == r.t);
}

} // namespace

TEST_CASE("random bytes never crash the parser") {
  rng r(2026);
  for (int round = 0; round < 300; ++round) {
    std::string text(r.below(400), '\0');
    for (char& c : text) {
      // Mostly JSON punctuation and digits, so the parser gets past the first byte now and then.
      static constexpr char alphabet[] = "{}[]\":,0123456789 \n\\u\"idtokensfrompoolfreshsegments-.eE\t";
      c = r.uniform() < 0.8 ? alphabet[r.below(sizeof alphabet - 1)] : static_cast<char>(r.below(256));
    }
    check_any_input(text, round % 2 ? on_error::skip : on_error::fail);
  }
}

TEST_CASE("mutated valid traces never crash and report the mutated lines") {
  workload_options w{.kind = workload_kind::agentic, .requests = 40, .seed = 5};
  std::ostringstream out;
  write_trace(out, generate(w));
  const std::string valid = out.str();
  REQUIRE(parse_trace(valid).ok());

  rng r(99);
  for (int round = 0; round < 300; ++round) {
    std::string text = valid;
    const int edits = 1 + static_cast<int>(r.below(4));
    for (int e = 0; e < edits; ++e) {
      const std::size_t at = r.below(text.size());
      switch (r.below(5)) {
      case 0: text[at] = static_cast<char>(r.below(256)); break;                  // flip a byte
      case 1: text.erase(at, 1 + r.below(8)); break;                              // delete a run
      case 2: text.insert(at, text.substr(r.below(text.size()), r.below(40))); break; // splice a piece
      case 3: text.insert(at, "99999999999999999999"); break;                     // huge number
      case 4: text.insert(at, "\\ud800"); break;                                  // lone surrogate
      }
    }
    check_any_input(text, round % 2 ? on_error::skip : on_error::fail);
  }
}
