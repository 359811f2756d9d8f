// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Chained block keys and the `hasher` concept.
///
/// A prompt is cut into full blocks of B tokens. Block i gets the key
///   key_i = H(key_{i-1}, tokens of block i)                  (no media item in block i)
///   key_i = H(H(key_{i-1}, tokens of block i), M_i)          (M_i: the block's `media_digest`)
///   key_{-1} = H(seed, model revision, LoRA id, tenant salt),
/// so a key names the whole prefix up to the end of its block: the root-level extra keys reach every block
/// through the chain, and a media item every block from the one holding its position on. A partial last
/// block has no key: only full blocks are ever published.
///
/// Keys only find candidates. The cache confirms every match against the stored tokens, the stored media
/// digest, the parent block and, for a first block, the stored extra keys, so a weak or even constant
/// hasher costs speed, never correctness.

#include <reprise/config.hpp>

#include <algorithm>
#include <array>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <type_traits>

namespace reprise {

/// A token id as engines store them.
using token_id = std::int32_t;

/// A 128-bit block key. `lo` also serves as the bucket hash of the index.
struct block_key {
  std::uint64_t lo = 0;
  std::uint64_t hi = 0;
  friend constexpr bool operator==(const block_key&, const block_key&) = default;
};

/// A 256-bit content key: a SHA-256 digest in the order SHA-256 outputs it (as Python's `digest()`). The
/// fleet-wide name of a block or snapshot (<reprise/keys/content_key.hpp> derives it); all zero: none.
struct content_key {
  std::array<std::uint8_t, 32> bytes{};
  friend constexpr bool operator==(const content_key&, const content_key&) = default;
  friend constexpr auto operator<=>(const content_key&, const content_key&) = default;
};

/// The largest media digest the cache stores verbatim for verification (a SHA-256 or BLAKE3 digest of the
/// media fits). Pass a digest of the media, never the media itself.
inline constexpr std::size_t max_multimodal_digest_bytes = 32;

/// One media item of a prompt (an image, an audio clip): the token index where its placeholder tokens start
/// and the caller's digest of the media. Its digest keys the state of every position past `position` (the
/// placeholders' embeddings come from the media, not from the token ids), and nothing before it.
struct media_item {
  std::uint32_t position = 0;        ///< < the prompt's length
  std::span<const std::byte> digest; ///< at most `max_multimodal_digest_bytes`
};

/// What else, besides the tokens, decides whether two prefixes may share cached state. Different values of
/// the first three fields never share a block or a snapshot; in particular different `tenant_salt`s never
/// share anything, so one tenant cannot probe another's prompts through hit timing.
///
/// The three scalars apply to a whole sequence: they enter the chain at its root. Media items are
/// positional: block i's key folds in the items whose position lies in [iB, (i + 1)B), so the blocks before
/// a prompt's first item are shared with a text prompt over the same tokens, and past it only a prompt with
/// the same items at the same positions shares (the chain carries every item forward).
struct extra_keys {
  std::uint64_t model_revision = 0;
  std::uint64_t lora_id = 0;
  std::uint64_t tenant_salt = 0;
  /// Sorted by strictly increasing position; the cache refuses anything else (`invalid_argument`).
  std::span<const media_item> media{};
};

/// A by-value copy of the root-level extra keys, stored with every first block of a chain for verification.
struct stored_extra_keys {
  std::uint64_t model_revision = 0;
  std::uint64_t lora_id = 0;
  std::uint64_t tenant_salt = 0;

  static constexpr stored_extra_keys from(const extra_keys& x) noexcept {
    return {.model_revision = x.model_revision, .lora_id = x.lora_id, .tenant_salt = x.tenant_salt};
  }
  friend constexpr bool operator==(const stored_extra_keys&, const stored_extra_keys&) = default;
};

/// A by-value copy of a `media_item`, kept with a sequence while it is live.
struct stored_media_item {
  std::uint32_t position = 0;
  std::uint8_t digest_bytes = 0;
  std::byte digest[max_multimodal_digest_bytes]{};

  /// Precondition: `x.digest.size() <= max_multimodal_digest_bytes`.
  static stored_media_item from(const media_item& x) noexcept {
    stored_media_item s;
    s.position = x.position;
    s.digest_bytes = static_cast<std::uint8_t>(x.digest.size());
    std::copy(x.digest.begin(), x.digest.end(), s.digest);
    return s;
  }
  std::span<const std::byte> bytes() const noexcept { return {digest, digest_bytes}; }
};

/// The media of one block, or of a partial block's first tokens: a SHA-256 digest of the items it holds
/// (media_keys.hpp, `media_digest_of`); all zero for a block without media. Thirty-two bytes whatever the
/// number of items, so every block stores it beside its tokens without allocating, and equal digests mean
/// equal item lists (SHA-256 collision resistance) where a cache verifies a hit. The same bytes enter the
/// fleet's content keys (docs/key-format.md).
struct media_digest {
  std::array<std::uint8_t, 32> bytes{};
  constexpr bool empty() const noexcept {
    if (std::is_constant_evaluated()) {
      for (const std::uint8_t b : bytes)
        if (b != 0) return false;
      return true;
    }
    // Four word loads, not 32 byte compares: every block published or probed asks (about 10% of a commit's
    // bookkeeping at 8K-token prompts when it was a byte loop).
    std::uint64_t w[4];
    std::memcpy(w, bytes.data(), sizeof w);
    return (w[0] | w[1] | w[2] | w[3]) == 0;
  }
  friend constexpr bool operator==(const media_digest&, const media_digest&) = default;
};

/// A block hasher: constructible from a 64-bit seed, computes the root key of a chain from the extra keys
/// and chains one block of tokens onto a parent key. Must be deterministic for a given seed; need not be
/// collision resistant (matches are verified), but a good one keeps index buckets short.
template <class H>
concept hasher = std::constructible_from<H, std::uint64_t> &&
                 requires(const H& h, const block_key& parent, std::span<const token_id> tokens,
                          const extra_keys& extra) {
                   { h.root(extra) } -> std::same_as<block_key>;
                   { h.chain(parent, tokens) } -> std::same_as<block_key>;
                 };

} // namespace reprise
