// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Positional media keys: the checks of a prompt's media items, the `media_digest` of the items one block
/// holds, and how a block key folds it in.
///
/// A block's media digest is
///   M = SHA-256("reprise/block-media/v1" 0x00 || u32 count || per item: u32 offset, u8 size, digest bytes)
/// over the items whose position lies in the block's range [begin, end), in position order, each with its
/// offset from `begin` (little-endian integers); all zero when the range holds no item. It is what the cache
/// stores per block to verify a hit (32 bytes, whatever the number of items) and what the fleet's content
/// keys fold in (docs/key-format.md), so one definition serves both.
///
/// SHA-256 is computed here, without OpenSSL, because the in-process cache needs it on every admit of a
/// prompt with media while only the opt-in content keys link libcrypto. It runs once per block holding
/// media, never on text-only prompts.

#include <reprise/errc.hpp>
#include <reprise/keys/block_key.hpp>

#include <algorithm>
#include <array>
#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace reprise {

namespace detail {

/// SHA-256 (FIPS 180-4), incremental, without allocation.
class sha256 {
public:
  void update(const void* data, std::size_t n) noexcept {
    const auto* p = static_cast<const std::uint8_t*>(data);
    total_ += n;
    while (n != 0) {
      const std::size_t take = std::min<std::size_t>(n, 64 - used_);
      std::memcpy(block_ + used_, p, take);
      used_ += take;
      p += take;
      n -= take;
      if (used_ == 64) {
        compress(block_);
        used_ = 0;
      }
    }
  }
  void u8(std::uint8_t v) noexcept { update(&v, 1); }
  void u32(std::uint32_t v) noexcept {
    const std::uint8_t le[4] = {static_cast<std::uint8_t>(v), static_cast<std::uint8_t>(v >> 8),
                                static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 24)};
    update(le, 4);
  }

  std::array<std::uint8_t, 32> finish() noexcept {
    const std::uint64_t bits = total_ * 8;
    const std::uint8_t one = 0x80;
    update(&one, 1);
    const std::uint8_t zero = 0;
    while (used_ != 56) update(&zero, 1);
    std::uint8_t length[8];
    for (std::size_t i = 0; i < 8; ++i) length[i] = static_cast<std::uint8_t>(bits >> (56 - 8 * i));
    update(length, 8);
    std::array<std::uint8_t, 32> out{};
    for (std::size_t i = 0; i < 8; ++i)
      for (std::size_t j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(state_[i] >> (24 - 8 * j));
    return out;
  }

private:
  static constexpr std::uint32_t k[64] = {
      0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5,
      0xd807aa98, 0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174,
      0xe49b69c1, 0xefbe4786, 0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da,
      0x983e5152, 0xa831c66d, 0xb00327c8, 0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967,
      0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13, 0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85,
      0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819, 0xd6990624, 0xf40e3585, 0x106aa070,
      0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a, 0x5b9cca4f, 0x682e6ff3,
      0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7, 0xc67178f2};

  void compress(const std::uint8_t* p) noexcept {
    std::uint32_t w[64];
    for (std::size_t i = 0; i < 16; ++i)
      w[i] = std::uint32_t{p[4 * i]} << 24 | std::uint32_t{p[4 * i + 1]} << 16 | std::uint32_t{p[4 * i + 2]} << 8 |
             std::uint32_t{p[4 * i + 3]};
    for (std::size_t i = 16; i < 64; ++i) {
      const std::uint32_t s0 = std::rotr(w[i - 15], 7) ^ std::rotr(w[i - 15], 18) ^ (w[i - 15] >> 3);
      const std::uint32_t s1 = std::rotr(w[i - 2], 17) ^ std::rotr(w[i - 2], 19) ^ (w[i - 2] >> 10);
      w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    std::uint32_t a = state_[0], b = state_[1], c = state_[2], d = state_[3], e = state_[4], f = state_[5],
                  g = state_[6], h = state_[7];
    for (std::size_t i = 0; i < 64; ++i) {
      const std::uint32_t s1 = std::rotr(e, 6) ^ std::rotr(e, 11) ^ std::rotr(e, 25);
      const std::uint32_t s0 = std::rotr(a, 2) ^ std::rotr(a, 13) ^ std::rotr(a, 22);
      const std::uint32_t t1 = h + s1 + ((e & f) ^ (~e & g)) + k[i] + w[i];
      const std::uint32_t t2 = s0 + ((a & b) ^ (a & c) ^ (b & c));
      h = g;
      g = f;
      f = e;
      e = d + t1;
      d = c;
      c = b;
      b = a;
      a = t1 + t2;
    }
    state_[0] += a;
    state_[1] += b;
    state_[2] += c;
    state_[3] += d;
    state_[4] += e;
    state_[5] += f;
    state_[6] += g;
    state_[7] += h;
  }

  std::uint32_t state_[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                             0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
  std::uint8_t block_[64]{};
  std::size_t used_ = 0;
  std::uint64_t total_ = 0;
};

inline std::span<const std::byte> item_bytes(const media_item& x) noexcept { return x.digest; }
inline std::span<const std::byte> item_bytes(const stored_media_item& x) noexcept { return x.bytes(); }

} // namespace detail

/// The domain tag of `media_digest_of`; a change to its layout is a new tag.
inline constexpr char block_media_tag[] = "reprise/block-media/v1";

/// The checks of a prompt's media items: `invalid_argument` for items not in strictly increasing position
/// order (unsorted, or two at one position) or a digest over `max_multimodal_digest_bytes`; `out_of_range`
/// for a position at or past `length`, the prompt's. Complexity: O(items).
inline errc check_media(std::span<const media_item> media, std::size_t length) noexcept {
  for (std::size_t i = 0; i < media.size(); ++i) {
    if (media[i].digest.size() > max_multimodal_digest_bytes) return errc::invalid_argument;
    if (i != 0 && media[i].position <= media[i - 1].position) return errc::invalid_argument;
  }
  for (const media_item& x : media)
    if (x.position >= length) return errc::out_of_range;
  return errc{};
}

/// The `media_digest` of the items (sorted, `check_media`) whose position lies in [begin, end); all zero when
/// none does. Complexity: O(log items) without one, else one SHA-256 over their bytes.
template <class Item>
media_digest media_digest_of(std::span<const Item> items, std::uint64_t begin, std::uint64_t end) noexcept {
  auto first = items.begin();
  {
    std::size_t lo = 0, hi = items.size();
    while (lo < hi) {
      const std::size_t mid = lo + (hi - lo) / 2;
      if (items[mid].position < begin) lo = mid + 1;
      else hi = mid;
    }
    first += static_cast<std::ptrdiff_t>(lo);
  }
  auto last = first;
  while (last != items.end() && last->position < end) ++last;
  media_digest m;
  if (first == last) return m;
  detail::sha256 h;
  h.update(block_media_tag, sizeof block_media_tag); // with its terminating zero byte
  h.u32(static_cast<std::uint32_t>(last - first));
  for (auto it = first; it != last; ++it) {
    const std::span<const std::byte> bytes = detail::item_bytes(*it);
    h.u32(static_cast<std::uint32_t>(it->position - begin));
    h.u8(static_cast<std::uint8_t>(bytes.size()));
    h.update(bytes.data(), bytes.size());
  }
  m.bytes = h.finish();
  return m;
}

/// Block key i from the chain key of its tokens: itself without media, else H(key, M) with M's 32 bytes
/// read as eight little-endian 32-bit words, through the cache's own hasher (so keys stay seeded, and
/// reproducible across processes with `sha256_hasher`). Either way a hit is verified against the stored
/// digest, so the fold only has to spread blocks with and without media over different buckets.
template <hasher H>
block_key fold_media(const H& h, const block_key& key, const media_digest& m) noexcept {
  if (m.empty()) return key;
  token_id words[8];
  for (std::size_t i = 0; i < 8; ++i)
    words[i] = static_cast<token_id>(std::uint32_t{m.bytes[4 * i]} | std::uint32_t{m.bytes[4 * i + 1]} << 8 |
                                     std::uint32_t{m.bytes[4 * i + 2]} << 16 | std::uint32_t{m.bytes[4 * i + 3]} << 24);
  return h.chain(key, std::span<const token_id>(words, 8));
}

/// key_i = fold_media(H(key_{i-1}, tokens), M_i); `m` null: a block without media.
template <hasher H>
block_key chain_block(const H& h, const block_key& parent, std::span<const token_id> tokens,
                      const media_digest* m) noexcept {
  const block_key k = h.chain(parent, tokens);
  return m == nullptr ? k : fold_media(h, k, *m);
}

} // namespace reprise
