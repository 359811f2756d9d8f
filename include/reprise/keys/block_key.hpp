// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Chained block keys and the `hasher` concept.
///
/// A prompt is cut into full blocks of B tokens. Block i gets the key
///   key_i = H(key_{i-1}, tokens of block i),   key_{-1} = H(seed, extra keys),
/// so a key names the whole prefix up to the end of its block, and the extra keys (model revision, LoRA id,
/// multimodal digest, tenant salt) reach every block through the chain. A partial last block has no key:
/// only full blocks are ever published.
///
/// Keys only find candidates. The cache confirms every match against the stored tokens, the parent block
/// and, for a first block, the stored extra keys, so a weak or even constant hasher costs speed, never
/// correctness.

#include <reprise/config.hpp>

#include <algorithm>
#include <array>
#include <compare>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

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

/// The largest multimodal digest the cache stores verbatim for verification (a SHA-256 or BLAKE3 digest of
/// the media fits). Pass a digest of the media, never the media itself.
inline constexpr std::size_t max_multimodal_digest_bytes = 32;

/// What else, besides the tokens, decides whether two prefixes may share cached state. Different values of
/// any field never share a block or a snapshot; in particular different `tenant_salt`s never share anything,
/// so one tenant cannot probe another's prompts through hit timing.
///
/// The extra keys apply to a whole sequence: they enter the chain at its root.
struct extra_keys {
  std::uint64_t model_revision = 0;
  std::uint64_t lora_id = 0;
  std::span<const std::byte> multimodal_digest{}; ///< at most `max_multimodal_digest_bytes`
  std::uint64_t tenant_salt = 0;
};

/// A by-value copy of `extra_keys`, stored with every first block of a chain for verification.
struct stored_extra_keys {
  std::uint64_t model_revision = 0;
  std::uint64_t lora_id = 0;
  std::uint64_t tenant_salt = 0;
  std::uint8_t digest_bytes = 0;
  std::byte digest[max_multimodal_digest_bytes]{};

  /// Precondition: `x.multimodal_digest.size() <= max_multimodal_digest_bytes`.
  static stored_extra_keys from(const extra_keys& x) noexcept {
    stored_extra_keys s;
    s.model_revision = x.model_revision;
    s.lora_id = x.lora_id;
    s.tenant_salt = x.tenant_salt;
    s.digest_bytes = static_cast<std::uint8_t>(x.multimodal_digest.size());
    std::copy(x.multimodal_digest.begin(), x.multimodal_digest.end(), s.digest);
    return s;
  }

  friend bool operator==(const stored_extra_keys& a, const stored_extra_keys& b) noexcept {
    return a.model_revision == b.model_revision && a.lora_id == b.lora_id && a.tenant_salt == b.tenant_salt &&
           a.digest_bytes == b.digest_bytes && std::memcmp(a.digest, b.digest, a.digest_bytes) == 0;
  }
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
