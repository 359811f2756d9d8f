// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#include "sim/trace.hpp"

#include <algorithm>
#include <cassert>

namespace reprise::sim {

std::uint32_t string_table::intern(std::string_view s) {
  if (auto it = index_.find(s); it != index_.end()) return it->second;
  const auto index = static_cast<std::uint32_t>(names_.size());
  index_.emplace(std::string(s), index);
  names_.emplace_back(s);
  return index;
}

std::uint32_t string_table::find(std::string_view s) const {
  auto it = index_.find(s);
  return it == index_.end() ? static_cast<std::uint32_t>(names_.size()) : it->second;
}

std::uint64_t trace::total_prompt_tokens() const noexcept {
  std::uint64_t n = 0;
  for (const request& r : requests) n += r.prompt_tokens;
  return n;
}

std::uint64_t trace::total_output_tokens() const noexcept {
  std::uint64_t n = 0;
  for (const request& r : requests) n += r.output_tokens;
  return n;
}

std::uint32_t trace_builder::add_pool(std::string name, std::vector<token> tokens) {
  const auto index = static_cast<std::uint32_t>(t_.pools.size());
  pool_index_.emplace(name, index);
  t_.pools.push_back({std::move(name), std::move(tokens)});
  return index;
}

std::uint32_t trace_builder::add_synthetic_pool(std::string name, std::uint64_t seed, std::uint64_t count) {
  const std::uint32_t index = add_pool(std::move(name), synthetic_tokens(seed, count));
  t_.pools[index].synthetic = true;
  t_.pools[index].seed = seed;
  return index;
}

std::uint32_t trace_builder::find_pool(std::string_view name) const {
  auto it = pool_index_.find(name);
  return it == pool_index_.end() ? static_cast<std::uint32_t>(t_.pools.size()) : it->second;
}

void trace_builder::begin_request(std::uint64_t id, std::string_view session, std::string_view tenant) {
  pending_ = request{};
  pending_.id = id;
  pending_.session = t_.sessions.intern(session);
  pending_.tenant = t_.tenants.intern(tenant);
  pending_.first_segment = static_cast<std::uint32_t>(t_.segments.size());
  literal_mark_ = t_.literals.size();
}

void trace_builder::add_literal(std::span<const token> tokens) {
  if (tokens.empty()) return;
  t_.segments.push_back({segment_kind::literal, 0, t_.literals.size(), tokens.size()});
  t_.literals.insert(t_.literals.end(), tokens.begin(), tokens.end());
  pending_.prompt_tokens += tokens.size();
}

void trace_builder::add_pool_slice(std::uint32_t pool, std::uint64_t offset, std::uint64_t length) {
  assert(pool < t_.pools.size() && offset + length <= t_.pools[pool].tokens.size());
  if (length == 0) return;
  t_.segments.push_back({segment_kind::pool, pool, offset, length});
  pending_.prompt_tokens += length;
}

void trace_builder::add_from(std::uint32_t index, std::uint64_t length) {
  assert(index < t_.requests.size());
  length = std::min(length, full_length(index));
  if (length == 0) return;
  t_.segments.push_back({segment_kind::from, index, 0, length});
  pending_.prompt_tokens += length;
}

void trace_builder::add_fresh(std::uint64_t length) {
  if (length == 0) return;
  t_.segments.push_back({segment_kind::fresh, 0, 0, length});
  pending_.prompt_tokens += length;
}

std::uint32_t trace_builder::finish_request(std::uint32_t output_tokens) {
  pending_.output_tokens = output_tokens;
  pending_.segment_count = static_cast<std::uint32_t>(t_.segments.size() - pending_.first_segment);
  t_.requests.push_back(pending_);
  return static_cast<std::uint32_t>(t_.requests.size() - 1);
}

void trace_builder::abandon_request() {
  t_.segments.resize(pending_.first_segment);
  t_.literals.resize(literal_mark_);
  pending_ = request{};
}

namespace {
// splitmix64 finalizer: a cheap, well-mixed function of the position, so fresh tokens need no state.
constexpr std::uint64_t mix(std::uint64_t x) noexcept {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}
} // namespace

token fresh_token(std::uint32_t index, std::uint32_t seg, std::uint64_t i) noexcept {
  return static_cast<token>(mix((std::uint64_t{index} << 32 | seg) ^ mix(i)) & 0x7fffffffu);
}

token output_token(std::uint32_t index, std::uint64_t i) noexcept {
  return static_cast<token>(mix((std::uint64_t{index} << 32 | 0xffffffffu) ^ mix(i + 0x5151)) & 0x7fffffffu);
}

token synthetic_token(std::uint64_t seed, std::uint64_t i) noexcept {
  return static_cast<token>(mix(mix(seed ^ 0x7f4a7c159e3779b9ull) ^ i) & 0x7fffffffu);
}

std::vector<token> synthetic_tokens(std::uint64_t seed, std::uint64_t count) {
  std::vector<token> out(count);
  for (std::uint64_t i = 0; i < count; ++i) out[i] = synthetic_token(seed, i);
  return out;
}

materializer::materializer(const trace& t, std::uint64_t keep_tokens)
    : t_(t), keep_tokens_(keep_tokens), pending_refs_(t.requests.size(), 0) {
  for (const segment& s : t.segments)
    if (s.kind == segment_kind::from) ++pending_refs_[s.ref];
}

void materializer::append_output(std::uint32_t index, std::uint32_t count, std::vector<token>& out) {
  const std::size_t base = out.size();
  out.resize(base + count);
  for (std::uint32_t i = 0; i < count; ++i) out[base + i] = output_token(index, i);
}

void materializer::append_prefix(std::uint32_t index, std::uint64_t length, std::vector<token>& out) {
  stack_.clear();
  stack_.push_back({index, 0, length});
  while (!stack_.empty()) {
    frame& f = stack_.back();
    const request& r = t_.requests[f.request];
    if (f.remaining == 0) {
      stack_.pop_back();
      continue;
    }
    if (f.next_segment == r.segment_count) {
      // Only the output is left (a `from` length is at most prompt + output).
      assert(f.remaining <= r.output_tokens);
      append_output(f.request, static_cast<std::uint32_t>(f.remaining), out);
      stack_.pop_back();
      continue;
    }
    const std::uint32_t seg_no = f.next_segment++;
    const segment& s = t_.segments[r.first_segment + seg_no];
    const std::uint64_t n = std::min(f.remaining, s.length);
    f.remaining -= n;
    const std::uint32_t owner = f.request;
    switch (s.kind) {
    case segment_kind::literal:
      out.insert(out.end(), t_.literals.begin() + static_cast<std::ptrdiff_t>(s.offset),
                 t_.literals.begin() + static_cast<std::ptrdiff_t>(s.offset + n));
      break;
    case segment_kind::pool: {
      const auto& p = t_.pools[s.ref].tokens;
      out.insert(out.end(), p.begin() + static_cast<std::ptrdiff_t>(s.offset),
                 p.begin() + static_cast<std::ptrdiff_t>(s.offset + n));
      break;
    }
    case segment_kind::from: {
      if (auto it = kept_.find(s.ref); it != kept_.end()) {
        out.insert(out.end(), it->second.begin(), it->second.begin() + static_cast<std::ptrdiff_t>(n));
      } else {
        stack_.push_back({s.ref, 0, n}); // `f` is not used after this
      }
      break;
    }
    case segment_kind::fresh: {
      const std::size_t base = out.size();
      out.resize(base + n);
      for (std::uint64_t i = 0; i < n; ++i) out[base + i] = fresh_token(owner, seg_no, i);
      break;
    }
    }
  }
}

void materializer::keep(std::uint32_t index, std::vector<token> full) {
  const std::uint64_t size = full.size();
  if (size > keep_tokens_) return;
  while (kept_tokens_ + size > keep_tokens_) {
    // Make room by dropping the largest kept expansions, unless the new one is the largest.
    const auto largest = std::prev(kept_by_size_.end());
    if (largest->first <= size) return;
    drop(largest->second);
  }
  kept_tokens_ += size;
  kept_by_size_.emplace(size, index);
  kept_.insert_or_assign(index, std::move(full));
}

void materializer::drop(std::uint32_t index) {
  auto it = kept_.find(index);
  if (it == kept_.end()) return;
  kept_tokens_ -= it->second.size();
  kept_by_size_.erase({it->second.size(), index});
  kept_.erase(it);
}

void materializer::prompt(std::uint32_t index, std::vector<token>& out) {
  const request& r = t_.requests[index];
  out.clear();
  out.reserve(r.prompt_tokens + r.output_tokens);
  append_prefix(index, r.prompt_tokens, out);
  for (const segment& s : t_.segments_of(r))
    if (s.kind == segment_kind::from && pending_refs_[s.ref] != 0 && --pending_refs_[s.ref] == 0) drop(s.ref);
  if (pending_refs_[index] != 0 && r.prompt_tokens + r.output_tokens <= keep_tokens_) {
    std::vector<token> full;
    full.reserve(out.size() + r.output_tokens);
    full.assign(out.begin(), out.end());
    append_output(index, r.output_tokens, full);
    keep(index, std::move(full));
  }
}

} // namespace reprise::sim
