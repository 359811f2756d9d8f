// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/trace_jsonl.hpp"

#include <charconv>
#include <istream>
#include <limits>
#include <ostream>
#include <unordered_map>

namespace reprise::sim {

std::string to_string(const parse_error& e) {
  return "line " + std::to_string(e.line) + ", column " + std::to_string(e.column) + ": " + e.message;
}

namespace {

/// A forward-only reader over one line. Every accessor checks the end first; the first failure is kept
/// (message and byte position) and later calls keep failing, so callers can chain with `&&`.
class cursor {
public:
  explicit cursor(std::string_view line) : begin_(line.data()), p_(line.data()), end_(line.data() + line.size()) {}

  bool failed() const noexcept { return !message_.empty(); }
  const std::string& message() const noexcept { return message_; }
  std::uint64_t column() const noexcept { return static_cast<std::uint64_t>(at_ - begin_) + 1; }
  const char* pos() const noexcept { return p_; }

  bool fail_at(const char* where, std::string m) {
    if (message_.empty()) {
      message_ = std::move(m);
      at_ = where;
    }
    return false;
  }
  bool fail(std::string m) { return fail_at(p_, std::move(m)); }

  void skip_ws() noexcept {
    while (p_ < end_ && (*p_ == ' ' || *p_ == '\t' || *p_ == '\r')) ++p_;
  }
  bool at_end() {
    skip_ws();
    return p_ == end_;
  }
  bool peek(char c) {
    skip_ws();
    return p_ < end_ && *p_ == c;
  }
  bool expect(char c) {
    skip_ws();
    if (p_ < end_ && *p_ == c) {
      ++p_;
      return true;
    }
    if (p_ == end_) return fail(std::string("expected '") + c + "' but the line ended");
    return fail(std::string("expected '") + c + "'");
  }
  /// ',' then true (more members follow), or `close` then false; anything else fails (check `failed()`).
  bool next_member(char close) {
    skip_ws();
    if (p_ < end_ && *p_ == ',') {
      ++p_;
      return true;
    }
    if (p_ < end_ && *p_ == close) {
      ++p_;
      return false;
    }
    fail(std::string("expected ',' or '") + close + "'" + (p_ == end_ ? " but the line ended" : ""));
    return false;
  }

  /// A JSON string, escapes decoded to UTF-8, at most `max_bytes` bytes once decoded.
  bool string(std::string& out, std::uint64_t max_bytes) {
    skip_ws();
    out.clear();
    if (p_ == end_ || *p_ != '"') return fail("expected a string");
    const char* start = p_++;
    while (true) {
      if (p_ == end_) return fail_at(start, "unterminated string");
      const auto c = static_cast<unsigned char>(*p_);
      if (c == '"') {
        ++p_;
        return true;
      }
      if (c < 0x20) return fail("control character in a string");
      if (out.size() >= max_bytes) return fail_at(start, "string longer than " + std::to_string(max_bytes) + " bytes");
      if (c != '\\') {
        out.push_back(static_cast<char>(c));
        ++p_;
        continue;
      }
      ++p_;
      if (p_ == end_) return fail_at(start, "unterminated string");
      switch (*p_++) {
      case '"': out.push_back('"'); break;
      case '\\': out.push_back('\\'); break;
      case '/': out.push_back('/'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'u': {
        std::uint32_t cp = 0;
        if (!hex4(cp)) return false;
        if (cp >= 0xd800 && cp <= 0xdbff) {
          std::uint32_t low = 0;
          if (end_ - p_ < 2 || p_[0] != '\\' || p_[1] != 'u') return fail("unpaired surrogate in \\u escape");
          p_ += 2;
          if (!hex4(low)) return false;
          if (low < 0xdc00 || low > 0xdfff) return fail("unpaired surrogate in \\u escape");
          cp = 0x10000 + ((cp - 0xd800) << 10) + (low - 0xdc00);
        } else if (cp >= 0xdc00 && cp <= 0xdfff) {
          return fail("unpaired surrogate in \\u escape");
        }
        append_utf8(cp, out);
        break;
      }
      default: return fail_at(p_ - 1, "invalid escape in a string");
      }
    }
  }

  /// An unsigned decimal integer without sign, fraction, exponent or leading zeros, at most `max`.
  bool uint(std::uint64_t& v, std::uint64_t max = std::numeric_limits<std::uint64_t>::max()) {
    skip_ws();
    const char* start = p_;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return fail("expected an unsigned integer");
    if (*p_ == '0' && end_ - p_ > 1 && p_[1] >= '0' && p_[1] <= '9') return fail("leading zero in a number");
    auto [ptr, ec] = std::from_chars(p_, end_, v);
    if (ec != std::errc{}) return fail_at(start, "number out of range");
    p_ = ptr;
    if (p_ < end_ && (*p_ == '.' || *p_ == 'e' || *p_ == 'E'))
      return fail_at(start, "expected an unsigned integer, not a fraction or exponent");
    if (v > max) return fail_at(start, "number " + std::to_string(v) + " exceeds the limit " + std::to_string(max));
    return true;
  }

  /// A session or tenant id: a string, or an unsigned integer kept as its decimal text.
  bool name(std::string& out, std::uint64_t max_bytes) {
    skip_ws();
    if (p_ < end_ && *p_ == '"') return string(out, max_bytes);
    std::uint64_t v = 0;
    if (p_ == end_ || *p_ < '0' || *p_ > '9') return fail("expected a string or an unsigned integer");
    if (!uint(v)) return false;
    out = std::to_string(v);
    return true;
  }

  /// `[t, ...]` appended to `out` (each 0 <= t < 2^31); at most `max_count` values.
  bool token_array(std::vector<token>& out, std::uint64_t max_count) {
    if (!expect('[')) return false;
    const char* start = p_;
    if (peek(']')) {
      ++p_;
      return true;
    }
    do {
      std::uint64_t v = 0;
      if (!uint(v, std::numeric_limits<token>::max())) return false;
      if (out.size() >= max_count) return fail_at(start, "more than " + std::to_string(max_count) + " tokens");
      out.push_back(static_cast<token>(v));
    } while (next_member(']'));
    return !failed();
  }

private:
  bool hex4(std::uint32_t& v) {
    if (end_ - p_ < 4) return fail("truncated \\u escape");
    v = 0;
    for (int i = 0; i < 4; ++i) {
      const char c = *p_++;
      v <<= 4;
      if (c >= '0' && c <= '9') v |= static_cast<std::uint32_t>(c - '0');
      else if (c >= 'a' && c <= 'f') v |= static_cast<std::uint32_t>(c - 'a' + 10);
      else if (c >= 'A' && c <= 'F') v |= static_cast<std::uint32_t>(c - 'A' + 10);
      else return fail_at(p_ - 1, "invalid hex digit in \\u escape");
    }
    return true;
  }
  static void append_utf8(std::uint32_t cp, std::string& out) {
    if (cp < 0x80) {
      out.push_back(static_cast<char>(cp));
    } else if (cp < 0x800) {
      out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else if (cp < 0x10000) {
      out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    } else {
      out.push_back(static_cast<char>(0xf0 | (cp >> 18)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
      out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
    }
  }

  const char* begin_;
  const char* p_;
  const char* end_;
  const char* at_ = nullptr;
  std::string message_;
};

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
    cursor c(line);
    if (c.at_end()) return true; // blank lines are allowed
    if (!parse_line(c)) {
      const std::uint64_t col = c.column();
      return report(col, c.message());
    }
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

  bool duplicate(cursor& c, const char* key_pos, std::string_view key) {
    return c.fail_at(key_pos, "duplicate key \"" + std::string(key) + "\"");
  }

  bool parse_segment(cursor& c, raw_segment& s) {
    s.where = c.pos();
    if (!c.expect('{')) return false;
    if (c.peek('}')) return c.fail("empty segment object");
    std::string key;
    do {
      c.skip_ws();
      const char* key_pos = c.pos();
      if (!c.string(key, 16) || !c.expect(':')) return false;
      auto once = [&](std::uint8_t bit) {
        if (s.keys & bit) return duplicate(c, key_pos, key);
        s.keys |= bit;
        return true;
      };
      const parse_limits& L = opt_.limits;
      bool ok = false;
      if (key == "pool") ok = once(raw_segment::has_pool) && c.string(s.pool, L.max_string_bytes);
      else if (key == "off") ok = once(raw_segment::has_off) && c.uint(s.off);
      else if (key == "len") ok = once(raw_segment::has_len) && c.uint(s.len);
      else if (key == "from") ok = once(raw_segment::has_from) && c.uint(s.from);
      else if (key == "fresh") ok = once(raw_segment::has_fresh) && c.uint(s.fresh, L.max_prompt_tokens);
      else if (key == "tokens") {
        s.literal_begin = f_.tokens.size();
        ok = once(raw_segment::has_tokens) && c.token_array(f_.tokens, L.max_prompt_tokens);
        s.literal_end = f_.tokens.size();
      } else return c.fail_at(key_pos, "unknown segment key \"" + key + "\"");
      if (!ok) return false;
    } while (c.next_member('}'));
    return !c.failed();
  }

  bool parse_fields(cursor& c) {
    f_.clear();
    if (!c.expect('{')) return false;
    if (c.peek('}')) return c.fail("empty object");
    std::string key;
    do {
      c.skip_ws();
      const char* key_pos = c.pos();
      if (!c.string(key, 16) || !c.expect(':')) return false;
      auto once = [&](std::uint16_t bit) {
        if (f_.keys & bit) return duplicate(c, key_pos, key);
        f_.keys |= bit;
        return true;
      };
      const parse_limits& L = opt_.limits;
      bool ok = false;
      if (key == "pool") ok = once(line_fields::has_pool) && c.string(f_.pool, L.max_string_bytes);
      else if (key == "tokens") {
        c.skip_ws();
        f_.where_tokens = c.pos();
        const std::uint64_t cap = std::max(L.max_prompt_tokens, L.max_pool_tokens);
        ok = once(line_fields::has_tokens) && c.token_array(f_.tokens, cap);
      } else if (key == "random") ok = once(line_fields::has_random) && c.uint(f_.random, L.max_pool_tokens);
      else if (key == "seed") ok = once(line_fields::has_seed) && c.uint(f_.seed);
      else if (key == "id") {
        c.skip_ws();
        f_.where_id = c.pos();
        ok = once(line_fields::has_id) && c.uint(f_.id);
      } else if (key == "session") ok = once(line_fields::has_session) && c.name(f_.session, L.max_string_bytes);
      else if (key == "tenant") ok = once(line_fields::has_tenant) && c.name(f_.tenant, L.max_string_bytes);
      else if (key == "output") ok = once(line_fields::has_output) && c.uint(f_.output, L.max_output_tokens);
      else if (key == "segments") {
        ok = once(line_fields::has_segments) && c.expect('[');
        if (ok && c.peek(']')) {
          c.expect(']');
        } else if (ok) {
          do {
            if (f_.segments.size() >= L.max_segments)
              return c.fail("more than " + std::to_string(L.max_segments) + " segments");
            f_.segments.emplace_back();
            if (!parse_segment(c, f_.segments.back())) return false;
          } while (c.next_member(']'));
          ok = !c.failed();
        }
      } else return c.fail_at(key_pos, "unknown key \"" + key + "\"");
      if (!ok) return false;
    } while (c.next_member('}'));
    if (c.failed()) return false;
    if (!c.at_end()) return c.fail("trailing characters after the object");
    return true;
  }

  bool define_pool(cursor& c) {
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

  bool add_request(cursor& c) {
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

  bool parse_line(cursor& c) {
    c.skip_ws();
    line_begin_ = c.pos();
    if (!parse_fields(c)) return false;
    return (f_.keys & line_fields::has_pool) ? define_pool(c) : add_request(c);
  }

  parse_options opt_;
  parse_result result_;
  trace_builder builder_;
  line_fields f_;
  std::vector<segment> resolved_;
  std::unordered_map<std::uint64_t, std::uint32_t> ids_; ///< trace id -> request index
  std::uint64_t pool_tokens_ = 0;
  const char* line_begin_ = nullptr;
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
