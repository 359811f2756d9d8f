// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/trace_jsonl.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <istream>
#include <limits>
#include <ostream>
#include <unordered_map>

namespace reprise::sim {

std::string to_string(const parse_error& e) {
  return "line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ": " + e.message;
}

namespace {

namespace od = simdjson::ondemand;

/// The first error of one line: its message and byte position. Later failures keep the first one, so
/// callers can chain checks with `&&`.
class line_error {
public:
  line_error(const char* begin, const char* end) : begin_(begin), end_(end) {}

  bool failed() const noexcept { return !message_.empty(); }
  const std::string& message() const noexcept { return message_; }
  std::uint64_t column() const noexcept { return static_cast<std::uint64_t>(at_ - begin_) + 1; }
  const char* begin() const noexcept { return begin_; }
  const char* end() const noexcept { return end_; }
  /// Where the document's iterator stands (the line's end once it is past the last token).
  const char* here() const noexcept {
    if (doc == nullptr) return end_;
    auto loc = doc->current_location();
    return loc.error() ? end_ : loc.value_unsafe();
  }

  od::document* doc = nullptr; ///< the line's document, for `here()`

  bool fail_at(const char* where, std::string m) {
    if (message_.empty()) {
      message_ = std::move(m);
      at_ = where < begin_ || where > end_ ? begin_ : where;
    }
    return false;
  }

private:
  const char* begin_;
  const char* end_;
  const char* at_ = nullptr;
  std::string message_;
};

/// The byte offset of the first byte that is not valid UTF-8 (`s.size()` when all is).
std::size_t first_invalid_utf8(std::string_view s) {
  std::size_t i = 0;
  while (i < s.size()) {
    const auto c = static_cast<unsigned char>(s[i]);
    std::size_t n = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 0;
    if (n == 0 || i + n > s.size()) return i;
    std::uint32_t cp = n == 1 ? c : n == 2 ? c & 0x1f : n == 3 ? c & 0x0f : c & 0x07;
    for (std::size_t k = 1; k < n; ++k) {
      const auto d = static_cast<unsigned char>(s[i + k]);
      if ((d & 0xc0) != 0x80) return i;
      cp = cp << 6 | (d & 0x3f);
    }
    static constexpr std::uint32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < least[n] || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return i;
    i += n;
  }
  return s.size();
}

/// Why simdjson refused the string starting at `quote`: the first bad escape or control character.
bool string_error(line_error& e, const char* quote) {
  const char* p = quote + 1;
  auto hex4 = [&](const char* q, std::uint32_t& v) {
    v = 0;
    for (int i = 0; i < 4; ++i, ++q) {
      if (q >= e.end() || !std::isxdigit(static_cast<unsigned char>(*q))) return false;
      v = v << 4 | static_cast<std::uint32_t>(std::isdigit(static_cast<unsigned char>(*q)) ? *q - '0' : (*q | 0x20) - 'a' + 10);
    }
    return true;
  };
  while (p < e.end() && *p != '"') {
    if (static_cast<unsigned char>(*p) < 0x20) return e.fail_at(p, "control character in a string");
    if (*p++ != '\\') continue;
    if (p == e.end()) break;
    const char x = *p++;
    if (x != 'u') {
      if (!std::strchr("\"\\/bfnrt", x)) return e.fail_at(p - 1, "invalid escape in a string");
      continue;
    }
    std::uint32_t cp = 0, low = 0;
    if (!hex4(p, cp)) return e.fail_at(p, "invalid hex digit in \\u escape");
    p += 4;
    if (cp >= 0xdc00 && cp <= 0xdfff) return e.fail_at(quote, "unpaired surrogate in \\u escape");
    if (cp >= 0xd800 && cp <= 0xdbff) {
      if (e.end() - p < 6 || p[0] != '\\' || p[1] != 'u' || !hex4(p + 2, low) || low < 0xdc00 || low > 0xdfff)
        return e.fail_at(quote, "unpaired surrogate in \\u escape");
      p += 6;
    }
  }
  if (p >= e.end()) return e.fail_at(quote, "unterminated string");
  return e.fail_at(quote, "invalid string");
}

/// A simdjson error at `where` (the value or token being read) as a message for people.
bool json_error(line_error& e, simdjson::error_code code, const char* where, const char* expected) {
  using simdjson::error_code;
  if (where >= e.end()) return e.fail_at(e.end(), std::string("expected ") + expected + " but the line ended");
  switch (code) {
  case error_code::INCOMPLETE_ARRAY_OR_OBJECT:
    return e.fail_at(e.end(), std::string("expected ") + expected + " but the line ended");
  case error_code::UNCLOSED_STRING: return e.fail_at(where, "unterminated string");
  case error_code::STRING_ERROR: return string_error(e, where);
  case error_code::UNESCAPED_CHARS: return e.fail_at(where, "control character in a string");
  default: return e.fail_at(where, std::string("expected ") + expected);
  }
}

/// Where a value starts in the line.
const char* where_of(od::value& v) { return v.raw_json_token().data(); }

/// An unsigned decimal integer without sign, fraction, exponent or leading zeros, at most `max`.
bool read_uint(line_error& e, od::value v, std::uint64_t& out,
               std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
  const std::string_view tok = v.raw_json_token();
  const char* at = tok.data();
  if (tok.empty() || tok[0] < '0' || tok[0] > '9') return e.fail_at(at, "expected an unsigned integer");
  if (tok[0] == '0' && tok.size() > 1 && tok[1] >= '0' && tok[1] <= '9') return e.fail_at(at, "leading zero in a number");
  const std::size_t digits = std::min(tok.find_first_not_of("0123456789"), tok.size());
  if (digits < tok.size() && (tok[digits] == '.' || tok[digits] == 'e' || tok[digits] == 'E'))
    return e.fail_at(at, "expected an unsigned integer, not a fraction or exponent");
  if (auto code = v.get_uint64().get(out); code != simdjson::SUCCESS) {
    if (digits > 19 || code == simdjson::NUMBER_OUT_OF_RANGE)
      return e.fail_at(at, "number out of range");
    if (at + digits >= e.end()) return e.fail_at(e.end(), "expected ',' or a closing bracket but the line ended");
    return json_error(e, code, at, "an unsigned integer");
  }
  if (out > max) return e.fail_at(at, "number " + std::to_string(out) + " exceeds the limit " + std::to_string(max));
  return true;
}

/// A JSON string, escapes decoded (UTF-8 validated), at most `max_bytes` bytes once decoded.
bool read_string(line_error& e, od::value v, std::string& out, std::uint64_t max_bytes) {
  const char* at = where_of(v);
  if (at >= e.end() || *at != '"') return e.fail_at(at, "expected a string");
  std::string_view sv;
  if (auto code = v.get_string().get(sv); code != simdjson::SUCCESS) return json_error(e, code, at, "a string");
  if (sv.size() > max_bytes) return e.fail_at(at, "string longer than " + std::to_string(max_bytes) + " bytes");
  out.assign(sv);
  return true;
}

/// A session or tenant id: a string, or an unsigned integer kept as its decimal text.
bool read_name(line_error& e, od::value v, std::string& out, std::uint64_t max_bytes) {
  const char* at = where_of(v);
  if (at < e.end() && *at == '"') return read_string(e, v, out, max_bytes);
  if (at >= e.end() || *at < '0' || *at > '9') return e.fail_at(at, "expected a string or an unsigned integer");
  std::uint64_t n = 0;
  if (!read_uint(e, v, n)) return false;
  out = std::to_string(n);
  return true;
}

/// `[t, ...]` appended to `out` (each 0 <= t < 2^31); at most `max_count` values.
bool read_tokens(line_error& e, od::value v, std::vector<token>& out, std::uint64_t max_count) {
  const char* at = where_of(v);
  od::array a;
  if (at >= e.end() || *at != '[') return e.fail_at(at, "expected '['");
  if (auto code = v.get_array().get(a); code != simdjson::SUCCESS) return json_error(e, code, at, "an array");
  std::uint64_t count = 0;
  for (auto item : a) {
    od::value x;
    if (auto code = item.get(x); code != simdjson::SUCCESS)
      return json_error(e, code, e.here(), "a token or ']'");
    if (count++ >= max_count) return e.fail_at(at, "more than " + std::to_string(max_count) + " tokens");
    std::uint64_t t = 0;
    if (!read_uint(e, x, t, std::numeric_limits<token>::max())) return false;
    out.push_back(static_cast<token>(t));
  }
  return !e.failed();
}

/// Iterates the members of an object: `on_member(key, key position, value)` returns false to stop.
template <class F>
bool for_each_member(line_error& e, od::value v, const char* what, F&& on_member) {
  const char* at = where_of(v);
  if (at >= e.end() || *at != '{') return e.fail_at(at, "expected '{'");
  od::object o;
  if (auto code = v.get_object().get(o); code != simdjson::SUCCESS) return json_error(e, code, at, "an object");
  bool any = false;
  for (auto member : o) {
    if (auto code = member.error(); code != simdjson::SUCCESS) return json_error(e, code, e.here(), "a key or '}'");
    od::field f = std::move(member).value_unsafe();
    const char* key_at = f.key().raw() - 1;
    std::string_view key;
    if (auto code = f.unescaped_key().get(key); code != simdjson::SUCCESS) return json_error(e, code, key_at, "a key");
    any = true;
    if (!on_member(key, key_at, f.value())) return false;
  }
  if (!any && !e.failed()) return e.fail_at(at, std::string("empty ") + what);
  return !e.failed();
}


/// One segment as written, before its references are resolved.
struct raw_segment {
  enum : std::uint8_t { has_pool = 1, has_off = 2, has_len = 4, has_from = 8, has_fresh = 16, has_tokens = 32 };
  std::uint8_t keys = 0;
  std::string pool;
  std::uint64_t off = 0, len = 0, from = 0, fresh = 0;
  std::size_t literal_begin = 0, literal_end = 0; ///< range in `line_fields::tokens`
  const char* where = nullptr;
};

/// Every top-level key a line may carry.
struct line_fields {
  enum : std::uint16_t {
    has_pool = 1, has_tokens = 2, has_random = 4, has_seed = 8, has_id = 16, has_session = 32, has_tenant = 64,
    has_segments = 128, has_output = 256
  };
  std::uint16_t keys = 0;
  std::string pool, session, tenant;
  std::vector<token> tokens; ///< `tokens` of the line, then every literal segment's tokens
  std::uint64_t random = 0, seed = 0, id = 0, output = 0;
  std::vector<raw_segment> segments;
  const char* where_tokens = nullptr;
  const char* where_id = nullptr;

  void clear() {
    keys = 0;
    tokens.clear();
    segments.clear();
    random = seed = id = output = 0;
  }
};

class trace_parser {
public:
  explicit trace_parser(const parse_options& o) : opt_(o), builder_(result_.t) {}

  /// Parses one line (without its '\n'); false once parsing must stop.
  bool feed(std::string_view line) {
    ++result_.lines;
    if (line.find_first_not_of(" \t\r") == std::string_view::npos) return true; // blank lines are allowed
    // simdjson reads up to SIMDJSON_PADDING bytes past the end: parse a padded copy.
    padded_.assign(line.begin(), line.end());
    padded_.resize(line.size() + simdjson::SIMDJSON_PADDING, '\0');
    line_error e(padded_.data(), padded_.data() + line.size());
    if (!parse_line(e)) return report(e.column(), e.message());
    return true;
  }

  /// A line longer than the limit: reported, never buffered.
  bool feed_overlong() {
    ++result_.lines;
    return report(opt_.limits.max_line_bytes + 1,
                  "line longer than " + std::to_string(opt_.limits.max_line_bytes) + " bytes");
  }

  parse_result take() { return std::move(result_); }

private:
  bool report(std::uint64_t column, std::string message) {
    ++result_.error_count;
    if (result_.errors.size() < opt_.limits.max_reported_errors)
      result_.errors.push_back({result_.lines, column, std::move(message)});
    if (opt_.mode == on_error::fail) {
      result_.stopped = true;
      return false;
    }
    return true;
  }

  bool duplicate(line_error& e, const char* key_pos, std::string_view key) {
    return e.fail_at(key_pos, "duplicate key \"" + std::string(key) + "\"");
  }

  static std::string quoted(std::string_view key) {
    return "\"" + std::string(key.substr(0, 64)) + (key.size() > 64 ? "...\"" : "\"");
  }

  bool parse_segment(line_error& e, od::value v, raw_segment& s) {
    s.where = where_of(v);
    const parse_limits& L = opt_.limits;
    return for_each_member(e, v, "segment object", [&](std::string_view key, const char* key_pos, od::value x) {
      auto once = [&](std::uint8_t bit) {
        if (s.keys & bit) return duplicate(e, key_pos, key);
        s.keys |= bit;
        return true;
      };
      if (key == "pool") return once(raw_segment::has_pool) && read_string(e, x, s.pool, L.max_string_bytes);
      if (key == "off") return once(raw_segment::has_off) && read_uint(e, x, s.off);
      if (key == "len") return once(raw_segment::has_len) && read_uint(e, x, s.len);
      if (key == "from") return once(raw_segment::has_from) && read_uint(e, x, s.from);
      if (key == "fresh") return once(raw_segment::has_fresh) && read_uint(e, x, s.fresh, L.max_prompt_tokens);
      if (key == "tokens") {
        s.literal_begin = f_.tokens.size();
        const bool ok = once(raw_segment::has_tokens) && read_tokens(e, x, f_.tokens, L.max_prompt_tokens);
        s.literal_end = f_.tokens.size();
        return ok;
      }
      return e.fail_at(key_pos, "unknown segment key " + quoted(key));
    });
  }

  bool parse_segments(line_error& e, od::value v) {
    const char* at = where_of(v);
    od::array a;
    if (at >= e.end() || *at != '[') return e.fail_at(at, "expected '['");
    if (auto code = v.get_array().get(a); code != simdjson::SUCCESS) return json_error(e, code, at, "an array");
    for (auto item : a) {
      od::value x;
      if (auto code = item.get(x); code != simdjson::SUCCESS) return json_error(e, code, e.here(), "a segment or ']'");
      if (f_.segments.size() >= opt_.limits.max_segments)
        return e.fail_at(where_of(x), "more than " + std::to_string(opt_.limits.max_segments) + " segments");
      f_.segments.emplace_back();
      if (!parse_segment(e, x, f_.segments.back())) return false;
    }
    return !e.failed();
  }

  bool parse_fields(line_error& e, od::value v) {
    f_.clear();
    const parse_limits& L = opt_.limits;
    return for_each_member(e, v, "object", [&](std::string_view key, const char* key_pos, od::value x) {
      auto once = [&](std::uint16_t bit) {
        if (f_.keys & bit) return duplicate(e, key_pos, key);
        f_.keys |= bit;
        return true;
      };
      if (key == "pool") return once(line_fields::has_pool) && read_string(e, x, f_.pool, L.max_string_bytes);
      if (key == "tokens") {
        f_.where_tokens = where_of(x);
        return once(line_fields::has_tokens) && read_tokens(e, x, f_.tokens, std::max(L.max_prompt_tokens, L.max_pool_tokens));
      }
      if (key == "random") return once(line_fields::has_random) && read_uint(e, x, f_.random, L.max_pool_tokens);
      if (key == "seed") return once(line_fields::has_seed) && read_uint(e, x, f_.seed);
      if (key == "id") {
        f_.where_id = where_of(x);
        return once(line_fields::has_id) && read_uint(e, x, f_.id);
      }
      if (key == "session") return once(line_fields::has_session) && read_name(e, x, f_.session, L.max_string_bytes);
      if (key == "tenant") return once(line_fields::has_tenant) && read_name(e, x, f_.tenant, L.max_string_bytes);
      if (key == "output") return once(line_fields::has_output) && read_uint(e, x, f_.output, L.max_output_tokens);
      if (key == "segments") return once(line_fields::has_segments) && parse_segments(e, x);
      return e.fail_at(key_pos, "unknown key " + quoted(key));
    });
  }

  bool define_pool(line_error& c) {
    constexpr std::uint16_t allowed = line_fields::has_pool | line_fields::has_tokens | line_fields::has_random |
                                      line_fields::has_seed;
    if (f_.keys & ~allowed) return c.fail_at(line_begin_, "a pool line takes only \"pool\", \"tokens\", \"random\", \"seed\"");
    const bool tokens = f_.keys & line_fields::has_tokens, random = f_.keys & line_fields::has_random;
    if (tokens == random) return c.fail_at(line_begin_, "a pool line needs exactly one of \"tokens\" and \"random\"");
    if ((f_.keys & line_fields::has_seed) && !random) return c.fail_at(line_begin_, "\"seed\" goes with \"random\"");
    if (f_.pool.empty()) return c.fail_at(line_begin_, "a pool needs a non-empty name");
    if (builder_.find_pool(f_.pool) != result_.t.pools.size())
      return c.fail_at(line_begin_, "pool \"" + f_.pool + "\" is already defined");
    const std::uint64_t size = tokens ? f_.tokens.size() : f_.random;
    if (size > opt_.limits.max_pool_tokens)
      return c.fail_at(line_begin_, "pool larger than " + std::to_string(opt_.limits.max_pool_tokens) + " tokens");
    if (size > opt_.limits.max_total_pool_tokens - pool_tokens_)
      return c.fail_at(line_begin_, "pools exceed " + std::to_string(opt_.limits.max_total_pool_tokens) + " tokens in all");
    pool_tokens_ += size;
    if (tokens) builder_.add_pool(f_.pool, std::move(f_.tokens));
    else builder_.add_synthetic_pool(f_.pool, f_.seed, f_.random);
    f_.tokens = {};
    return true;
  }

  bool add_request(line_error& c) {
    const parse_limits& L = opt_.limits;
    if (f_.keys & (line_fields::has_random | line_fields::has_seed))
      return c.fail_at(line_begin_, "\"random\" and \"seed\" belong to pool lines");
    const bool tokens = f_.keys & line_fields::has_tokens, segments = f_.keys & line_fields::has_segments;
    if (tokens == segments) return c.fail_at(line_begin_, "a request needs exactly one of \"tokens\" and \"segments\"");
    const std::uint64_t id = (f_.keys & line_fields::has_id) ? f_.id : result_.lines;
    if (ids_.contains(id)) return c.fail_at(f_.where_id ? f_.where_id : line_begin_, "duplicate request id " + std::to_string(id));
    if (!(f_.keys & line_fields::has_session)) f_.session = std::to_string(id);
    if (!(f_.keys & line_fields::has_tenant)) f_.tenant.clear();

    // Resolve and bound every segment before touching the trace, so a bad line leaves it unchanged.
    std::uint64_t prompt = 0;
    auto add_len = [&](std::uint64_t n, const char* where) {
      if (n > L.max_prompt_tokens - prompt)
        return c.fail_at(where, "prompt longer than " + std::to_string(L.max_prompt_tokens) + " tokens");
      prompt += n;
      return true;
    };
    if (tokens) {
      if (!add_len(f_.tokens.size(), f_.where_tokens)) return false;
    }
    resolved_.clear();
    for (raw_segment& s : f_.segments) {
      const int kinds = !!(s.keys & raw_segment::has_pool) + !!(s.keys & raw_segment::has_from) +
                        !!(s.keys & raw_segment::has_fresh) + !!(s.keys & raw_segment::has_tokens);
      if (kinds != 1)
        return c.fail_at(s.where, "a segment needs exactly one of \"pool\", \"from\", \"fresh\", \"tokens\"");
      segment r{};
      if (s.keys & raw_segment::has_pool) {
        if (s.keys & ~(raw_segment::has_pool | raw_segment::has_off | raw_segment::has_len))
          return c.fail_at(s.where, "a pool segment takes only \"pool\", \"off\", \"len\"");
        const std::uint32_t p = builder_.find_pool(s.pool);
        if (p == result_.t.pools.size()) return c.fail_at(s.where, "unknown pool \"" + s.pool + "\"");
        const std::uint64_t size = result_.t.pools[p].tokens.size();
        if (s.off > size) return c.fail_at(s.where, "\"off\" beyond the end of pool \"" + s.pool + "\"");
        const std::uint64_t len = (s.keys & raw_segment::has_len) ? s.len : size - s.off;
        if (len > size - s.off) return c.fail_at(s.where, "slice beyond the end of pool \"" + s.pool + "\"");
        r = {segment_kind::pool, p, s.off, len};
      } else if (s.keys & raw_segment::has_from) {
        if (s.keys & ~(raw_segment::has_from | raw_segment::has_len))
          return c.fail_at(s.where, "a from segment takes only \"from\" and \"len\"");
        auto it = ids_.find(s.from);
        if (it == ids_.end()) return c.fail_at(s.where, "\"from\" names unknown request id " + std::to_string(s.from));
        const std::uint64_t full = builder_.full_length(it->second);
        const std::uint64_t len = (s.keys & raw_segment::has_len) ? s.len : full;
        if (len > full)
          return c.fail_at(s.where, "\"len\" " + std::to_string(len) + " exceeds the " + std::to_string(full) +
                                        " tokens (prompt + output) of request " + std::to_string(s.from));
        r = {segment_kind::from, it->second, 0, len};
      } else if (s.keys & raw_segment::has_fresh) {
        if (s.keys & ~raw_segment::has_fresh) return c.fail_at(s.where, "a fresh segment takes only \"fresh\"");
        r = {segment_kind::fresh, 0, 0, s.fresh};
      } else {
        if (s.keys & ~raw_segment::has_tokens) return c.fail_at(s.where, "a tokens segment takes only \"tokens\"");
        r = {segment_kind::literal, 0, s.literal_begin, s.literal_end - s.literal_begin};
      }
      if (!add_len(r.length, s.where)) return false;
      resolved_.push_back(r);
    }
    if (prompt == 0) return c.fail_at(line_begin_, "a request needs at least one prompt token");

    builder_.begin_request(id, f_.session, f_.tenant);
    if (tokens) builder_.add_literal(f_.tokens);
    for (const segment& r : resolved_) {
      switch (r.kind) {
      case segment_kind::pool: builder_.add_pool_slice(r.ref, r.offset, r.length); break;
      case segment_kind::from: builder_.add_from(r.ref, r.length); break;
      case segment_kind::fresh: builder_.add_fresh(r.length); break;
      case segment_kind::literal:
        builder_.add_literal(std::span<const token>(f_.tokens).subspan(r.offset, r.length));
        break;
      }
    }
    ids_.emplace(id, builder_.finish_request(static_cast<std::uint32_t>(f_.output)));
    return true;
  }

  bool parse_line(line_error& e) {
    const std::string_view text(e.begin(), static_cast<std::size_t>(e.end() - e.begin()));
    line_begin_ = e.begin() + text.find_first_not_of(" \t\r");
    od::document doc;
    e.doc = &doc;
    if (auto code = parser_.iterate(e.begin(), text.size(), padded_.size()).get(doc); code != simdjson::SUCCESS) {
      if (code == simdjson::UTF8_ERROR) return e.fail_at(e.begin() + first_invalid_utf8(text), "invalid UTF-8");
      return json_error(e, code, line_begin_, "a JSON object");
    }
    if (*line_begin_ != '{') return e.fail_at(line_begin_, "expected '{'");
    od::value root;
    if (auto code = doc.get_value().get(root); code != simdjson::SUCCESS) return json_error(e, code, line_begin_, "'{'");
    if (!parse_fields(e, root)) return false;
    if (e.here() != e.end()) return e.fail_at(e.here(), "trailing characters after the object");
    return (f_.keys & line_fields::has_pool) ? define_pool(e) : add_request(e);
  }

  parse_options opt_;
  parse_result result_;
  trace_builder builder_;
  line_fields f_;
  std::vector<segment> resolved_;
  std::unordered_map<std::uint64_t, std::uint32_t> ids_; ///< trace id -> request index
  std::uint64_t pool_tokens_ = 0;
  const char* line_begin_ = nullptr;
  std::string padded_;
  od::parser parser_;
};

void write_string(std::ostream& out, std::string_view s) {
  out << '"';
  for (const char ch : s) {
    const auto c = static_cast<unsigned char>(ch);
    if (c == '"' || c == '\\') out << '\\' << ch;
    else if (c < 0x20) {
      static constexpr char hex[] = "0123456789abcdef";
      out << "\\u00" << hex[c >> 4] << hex[c & 15];
    } else out << ch;
  }
  out << '"';
}

void write_tokens(std::ostream& out, std::span<const token> tokens) {
  out << '[';
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (i) out << ',';
    out << tokens[i];
  }
  out << ']';
}

} // namespace

parse_result parse_trace(std::string_view text, const parse_options& options) {
  trace_parser parser(options);
  while (!text.empty()) {
    const std::size_t nl = text.find('\n');
    const std::string_view line = text.substr(0, nl);
    const bool go = line.size() > options.limits.max_line_bytes ? parser.feed_overlong() : parser.feed(line);
    if (!go || nl == std::string_view::npos) break;
    text.remove_prefix(nl + 1);
  }
  return parser.take();
}

parse_result parse_trace(std::istream& in, const parse_options& options) {
  trace_parser parser(options);
  std::string line;
  bool overlong = false;
  std::vector<char> buf(std::size_t{1} << 20);
  while (in) {
    in.read(buf.data(), static_cast<std::streamsize>(buf.size()));
    const auto got = static_cast<std::size_t>(in.gcount());
    if (got == 0) break;
    std::string_view chunk(buf.data(), got);
    while (!chunk.empty()) {
      const std::size_t nl = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, nl);
      if (!overlong) {
        if (line.size() + piece.size() > options.limits.max_line_bytes) {
          overlong = true;
          line.clear();
        } else {
          line.append(piece);
        }
      }
      if (nl == std::string_view::npos) break;
      const bool go = overlong ? parser.feed_overlong() : parser.feed(line);
      line.clear();
      overlong = false;
      if (!go) return parser.take();
      chunk.remove_prefix(nl + 1);
    }
  }
  if (overlong) parser.feed_overlong();
  else if (!line.empty()) parser.feed(line);
  return parser.take();
}

void write_trace(std::ostream& out, const trace& t) {
  for (const token_pool& p : t.pools) {
    out << "{\"pool\":";
    write_string(out, p.name);
    if (p.synthetic) out << ",\"random\":" << p.tokens.size() << ",\"seed\":" << p.seed;
    else {
      out << ",\"tokens\":";
      write_tokens(out, p.tokens);
    }
    out << "}\n";
  }
  for (const request& r : t.requests) {
    out << "{\"id\":" << r.id << ",\"session\":";
    write_string(out, t.sessions[r.session]);
    out << ",\"tenant\":";
    write_string(out, t.tenants[r.tenant]);
    out << ",\"segments\":[";
    bool first = true;
    for (const segment& s : t.segments_of(r)) {
      if (!first) out << ',';
      first = false;
      switch (s.kind) {
      case segment_kind::literal:
        out << "{\"tokens\":";
        write_tokens(out, std::span<const token>(t.literals).subspan(s.offset, s.length));
        out << '}';
        break;
      case segment_kind::pool:
        out << "{\"pool\":";
        write_string(out, t.pools[s.ref].name);
        out << ",\"off\":" << s.offset << ",\"len\":" << s.length << '}';
        break;
      case segment_kind::from: out << "{\"from\":" << t.requests[s.ref].id << ",\"len\":" << s.length << '}'; break;
      case segment_kind::fresh: out << "{\"fresh\":" << s.length << '}'; break;
      }
    }
    out << "],\"output\":" << r.output_tokens << "}\n";
  }
}

} // namespace reprise::sim
