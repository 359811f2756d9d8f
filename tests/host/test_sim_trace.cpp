// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// reprise-sim traces: the JSONL parser (strict, line-numbered errors, skip or fail), the writer round trip,
// the materializer, and the seeded generators.
#include "sim/trace_jsonl.hpp"
#include "sim/workload.hpp"

#include <doctest/doctest.h>

#include <algorithm>
#include <sstream>

using namespace reprise::sim;

namespace {
std::vector<token> prompt_of(const trace& t, std::uint32_t index) {
  materializer m(t);
  std::vector<token> out;
  for (std::uint32_t i = 0; i <= index; ++i) m.prompt(i, out);
  return out;
}
} // namespace

TEST_CASE("a trace with pools, literal tokens and segments parses and expands") {
  const char* text = R"({"pool":"sys","tokens":[1,2,3,4]}
{"pool":"doc","random":5,"seed":9}

{"id":10,"session":"alice","tenant":"acme","tokens":[7,8],"output":3}
{"id":11,"session":"alice","tenant":"acme","segments":[{"from":10},{"tokens":[9]},{"pool":"sys","off":1,"len":2}],"output":0}
{"id":12, "session": 5, "segments": [ {"pool": "doc"}, {"fresh": 4}, {"from": 11, "len": 2} ] }
)";
  const parse_result r = parse_trace(text);
  REQUIRE(r.ok());
  CHECK(r.lines == 6);
  const trace& t = r.t;
  REQUIRE(t.requests.size() == 3);
  REQUIRE(t.pools.size() == 2);
  CHECK(t.pools[1].synthetic);
  CHECK(t.pools[1].tokens == synthetic_tokens(9, 5));
  CHECK(t.requests[0].prompt_tokens == 2);
  CHECK(t.requests[1].prompt_tokens == 2 + 3 + 1 + 2);
  CHECK(t.requests[2].prompt_tokens == 5 + 4 + 2);
  CHECK(t.sessions[t.requests[0].session] == "alice");
  CHECK(t.sessions[t.requests[2].session] == "5");
  CHECK(t.tenants[t.requests[2].tenant].empty());

  const std::vector<token> p1 = prompt_of(t, 1);
  const std::vector<token> want1 = {7, 8, output_token(0, 0), output_token(0, 1), output_token(0, 2), 9, 2, 3};
  CHECK(p1 == want1);
  const std::vector<token> p2 = prompt_of(t, 2);
  REQUIRE(p2.size() == 11);
  CHECK(std::vector<token>(p2.begin(), p2.begin() + 5) == synthetic_tokens(9, 5));
  CHECK(p2[5] == fresh_token(2, 1, 0));
  CHECK(p2[9] == 7);
  CHECK(p2[10] == 8);
}

TEST_CASE("the materializer keeps expansions only while a later request needs them") {
  const char* text = R"({"id":1,"tokens":[1],"output":1}
{"id":2,"segments":[{"from":1},{"fresh":2}],"output":1}
{"id":3,"segments":[{"from":2},{"fresh":2}]}
)";
  const parse_result r = parse_trace(text);
  REQUIRE(r.ok());
  materializer m(r.t);
  std::vector<token> out;
  m.prompt(0, out);
  CHECK(m.retained() == 1);
  m.prompt(1, out);
  CHECK(m.retained() == 1); // 1 dropped, 2 kept
  m.prompt(2, out);
  CHECK(m.retained() == 0);
  CHECK(out.size() == 1 + 1 + 2 + 1 + 2);
}

TEST_CASE("the materializer's memory is bounded whatever the trace references") {
  // Each huge request is referenced once, much later, for one token: the old materializer kept all of them
  // expanded (100 x 4 Mi tokens = 1.6 GiB for an 8 KiB trace).
  constexpr int n = 24;
  constexpr std::uint64_t fresh = std::uint64_t{1} << 18;
  std::string text;
  for (int i = 0; i < n; ++i) text += R"({"id":)" + std::to_string(i) + R"(,"segments":[{"fresh":)" + std::to_string(fresh) + "}]}\n";
  for (int i = 0; i < n; ++i)
    text += R"({"id":)" + std::to_string(n + i) + R"(,"segments":[{"from":)" + std::to_string(i) + R"(,"len":1}]})" "\n";
  const parse_result r = parse_trace(text);
  REQUIRE(r.ok());
  const std::uint64_t budget = 3 * fresh;
  materializer m(r.t, budget);
  std::vector<token> out;
  for (std::uint32_t i = 0; i < 2 * n; ++i) {
    m.prompt(i, out);
    CHECK(m.retained_tokens() <= budget);
    if (i >= n) {
      REQUIRE(out.size() == 1);
      CHECK(out[0] == fresh_token(i - n, 0, 0)); // expanded from the source's segments when not kept
    }
  }
  CHECK(m.retained() == 0);
}

TEST_CASE("expansions are the same with any keep budget") {
  for (auto kind : {workload_kind::chat, workload_kind::agentic}) {
    const trace t = generate({.kind = kind, .requests = 400, .seed = 11});
    materializer all(t, ~std::uint64_t{0}), none(t, 0), some(t, 20000);
    std::vector<token> a, b, c;
    for (std::uint32_t i = 0; i < t.requests.size(); ++i) {
      all.prompt(i, a);
      none.prompt(i, b);
      some.prompt(i, c);
      REQUIRE(a == b);
      REQUIRE(a == c);
      CHECK(some.retained_tokens() <= 20000);
    }
    CHECK(none.retained() == 0);
  }
}

TEST_CASE("malformed lines are reported with their line and column") {
  struct bad_line {
    const char* text;
    const char* message_part;
    std::uint64_t column;
  };
  const bad_line cases[] = {
      {R"({"id":1,"tokens":[1,2)", "line ended", 0},
      {R"({"id":1,"tokens":[1,-2]})", "unsigned integer", 21},
      {R"({"id":1,"tokens":[1.5]})", "fraction", 19},
      {R"({"id":1,"tokens":[4294967296]})", "exceeds", 19},
      {R"({"id":1,"tokens":[1],"colour":3})", "unknown key", 22},
      {R"({"id":1,"id":2,"tokens":[1]})", "duplicate key", 9},
      {R"({"id":1,"tokens":[1]} x)", "trailing", 23},
      {R"({"id":1,"segments":[{"from":99}]})", "unknown request id", 0},
      {R"({"id":1,"segments":[{"pool":"nope"}]})", "unknown pool", 0},
      {R"({"id":1,"segments":[{"fresh":2,"tokens":[1]}]})", "exactly one", 0},
      {R"({"id":1,"segments":[]})", "at least one prompt token", 0},
      {R"({"id":1,"tokens":[1],"segments":[{"fresh":1}]})", "exactly one", 0},
      {R"({"id":1,"session":"a\q","tokens":[1]})", "invalid escape", 0},
      {R"({"id":1,"session":"\ud800","tokens":[1]})", "surrogate", 0},
      {R"({"pool":"p","tokens":[1],"random":3})", "exactly one", 0},
      {R"({"id":007,"tokens":[1]})", "leading zero", 0},
      {R"([1,2,3])", "expected '{'", 1},
      {R"({"id":1,"tokens":[1],"output":99999999})", "exceeds the limit", 0},
      {"{\"id\":1,\"session\":\"a\xff\",\"tokens\":[1]}", "invalid UTF-8", 21},
      {R"({"id":1,"tokens":[1],"output":1e3})", "fraction or exponent", 31},
      {R"({"id":1,"tokens":[1],"\u0069d":2})", "duplicate key \"id\"", 22},
      {R"({"id":1,"tokens":[1],"session":true})", "string or an unsigned integer", 32},
      {R"({"id":1,"tokens":[1]}{"id":2})", "trailing", 22},
  };
  for (const bad_line& b : cases) {
    const std::string line = b.text;
    CAPTURE(line);
    const std::string text = std::string(R"({"id":100,"tokens":[5]})") + "\n" + line + "\n" + R"({"id":101,"tokens":[6]})";
    const parse_result skipped = parse_trace(text, {.mode = on_error::skip});
    REQUIRE(skipped.errors.size() == 1);
    const std::string message = to_string(skipped.errors[0]);
    CAPTURE(message);
    CHECK(skipped.errors[0].line == 2);
    if (b.column) CHECK(skipped.errors[0].column == b.column);
    CHECK(message.find(b.message_part) != std::string::npos);
    CHECK(skipped.t.requests.size() == 2); // the good lines around it are kept
    CHECK_FALSE(skipped.stopped);

    const parse_result failed = parse_trace(text, {.mode = on_error::fail});
    REQUIRE(failed.errors.size() == 1);
    CHECK(failed.errors[0].line == 2);
    CHECK(failed.stopped);
    CHECK(failed.t.requests.size() == 1); // nothing after the bad line
  }
}

TEST_CASE("limits bound every length") {
  parse_options o{.mode = on_error::skip};
  o.limits.max_prompt_tokens = 10;
  o.limits.max_line_bytes = 64;
  o.limits.max_pool_tokens = 8;
  const char* text = R"({"pool":"big","random":9}
{"pool":"ok","random":8}
{"id":1,"segments":[{"pool":"ok"},{"fresh":3}]}
{"id":2,"segments":[{"pool":"ok"},{"fresh":2}]}
{"id":3,"tokens":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]})";
  const parse_result r = parse_trace(text, o);
  REQUIRE(r.errors.size() == 3);
  CHECK(r.errors[0].line == 1);
  CHECK(r.errors[1].line == 3);
  CHECK(r.errors[1].message.find("prompt longer") != std::string::npos);
  CHECK(r.errors[2].line == 5);
  CHECK(r.errors[2].message.find("line longer") != std::string::npos);
  CHECK(r.t.requests.size() == 1);

  std::istringstream in(text);
  const parse_result s = parse_trace(in, o);
  CHECK(s.errors.size() == 3);
  CHECK(s.errors[2].line == 5);
  CHECK(s.t == r.t);
}

TEST_CASE("doubling from-chains are stopped by the prompt limit, not by memory") {
  std::string text = R"({"id":0,"tokens":[1,2,3,4]})" "\n";
  for (int i = 1; i < 64; ++i)
    text += R"({"id":)" + std::to_string(i) + R"(,"segments":[{"from":)" + std::to_string(i - 1) +
            R"(},{"from":)" + std::to_string(i - 1) + "}]}\n";
  const parse_result r = parse_trace(text, {.mode = on_error::skip});
  CHECK(r.error_count > 0);
  for (const request& q : r.t.requests) CHECK(q.prompt_tokens <= parse_limits{}.max_prompt_tokens);
}


TEST_CASE("generated traces: same seed, same trace; round trip through JSONL") {
  for (auto kind : {workload_kind::chat, workload_kind::system_prompt, workload_kind::agentic, workload_kind::rag}) {
    CAPTURE(to_string(kind));
    workload_options o{.kind = kind, .requests = 300, .seed = 42, .tenants = 3};
    o.documents = 50;
    const trace a = generate(o);
    const trace b = generate(o);
    CHECK(a.requests.size() == 300);
    CHECK(a == b);
    o.seed = 43;
    CHECK_FALSE(generate(o) == a);

    std::ostringstream out;
    write_trace(out, a);
    const parse_result r = parse_trace(out.str());
    REQUIRE(r.ok());
    CHECK(r.t == a);

    // Every request expands to exactly its prompt length.
    materializer m(a);
    std::vector<token> tokens;
    for (std::uint32_t i = 0; i < a.requests.size(); ++i) {
      m.prompt(i, tokens);
      REQUIRE(tokens.size() == a.requests[i].prompt_tokens);
    }
    CHECK(m.retained() <= o.active_sessions * 8u);
  }
}

TEST_CASE("workload shapes: chat turns extend their history, agent trees branch, RAG shares documents") {
  const trace chat = generate({.kind = workload_kind::chat, .requests = 2000, .seed = 7});
  std::uint64_t continued = 0;
  for (const request& r : chat.requests)
    continued += chat.segments_of(r)[0].kind == segment_kind::from;
  CHECK(continued > 2000 / 2); // mean 3.5 turns: most requests continue a conversation

  const trace agent = generate({.kind = workload_kind::agentic, .requests = 2000, .seed = 7});
  std::vector<int> children(agent.requests.size(), 0);
  for (const request& r : agent.requests)
    if (agent.segments_of(r)[0].kind == segment_kind::from) ++children[agent.segments_of(r)[0].ref];
  CHECK(std::count_if(children.begin(), children.end(), [](int c) { return c >= 2; }) > 20);

  const trace rag = generate({.kind = workload_kind::rag, .requests = 2000, .seed = 7, .documents = 100});
  std::vector<int> first_doc(rag.pools.size(), 0);
  for (const request& r : rag.requests) {
    auto segs = rag.segments_of(r);
    if (segs.size() > 1 && segs[1].kind == segment_kind::pool) ++first_doc[segs[1].ref];
  }
  CHECK(*std::max_element(first_doc.begin(), first_doc.end()) > 100); // Zipf: a popular document recurs
}
