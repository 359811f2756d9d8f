// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `xxh3_hasher`: the default block hasher, 128-bit XXH3 (`XXH3_128bits_withSeed`) with a per-cache seed.
///
/// A per-cache random seed (the cache draws one unless the caller fixes it) keeps keys unpredictable from
/// outside the process, so crafted prompts cannot aim at one index bucket. Keys are therefore not comparable
/// across processes; use `sha256_hasher` for that.
///
/// xxHash is used header-only (`XXH_INLINE_ALL`): only `xxhash.h` is needed, never `-lxxhash`. Its functions
/// are then `static inline` in each translation unit, renamed with an `XXH_INLINE_` prefix, so they cannot
/// collide with another copy of xxHash linked into the engine; a translation unit that included `xxhash.h`
/// before this header still gets the inlined copy (xxHash supports that order).

#include <reprise/keys/block_key.hpp>

#ifndef XXH_INLINE_ALL
#define XXH_INLINE_ALL
#define REPRISE_XXH_INLINE_ALL_DEFINED_HERE
#endif
#include <xxhash.h>
#ifdef REPRISE_XXH_INLINE_ALL_DEFINED_HERE
#undef XXH_INLINE_ALL
#undef REPRISE_XXH_INLINE_ALL_DEFINED_HERE
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>

namespace reprise {

class xxh3_hasher {
public:
  explicit xxh3_hasher(std::uint64_t seed) noexcept : seed_(seed) {}

  std::uint64_t seed() const noexcept { return seed_; }

  /// key_{-1}: the seed and the root-level extra keys (media items enter the blocks holding them,
  /// `chain_block` of media_keys.hpp). Complexity: O(1).
  block_key root(const extra_keys& x) const noexcept {
    std::byte buffer[3 * sizeof(std::uint64_t)];
    std::size_t n = 0;
    put(buffer, n, &x.model_revision, sizeof x.model_revision);
    put(buffer, n, &x.lora_id, sizeof x.lora_id);
    put(buffer, n, &x.tenant_salt, sizeof x.tenant_salt);
    return to_key(XXH3_128bits_withSeed(buffer, n, seed_));
  }

  /// key_i = XXH3-128(key_{i-1} bytes || token bytes, seed).
  /// Complexity: linear in `tokens.size()`: the parent key and the tokens are copied into a stack buffer and
  /// hashed in one call, which for inputs this short is cheaper than the streaming state's setup. Blocks
  /// longer than 1024 tokens are hashed as a chain of 1024-token pieces.
  [[gnu::noinline]] block_key chain(block_key parent, std::span<const token_id> tokens) const noexcept {
    // Usual block sizes (16 to 64 tokens) hash from a 272-byte frame, without the stack probes that a 4 KiB
    // buffer costs on every call; the bytes hashed are the same either way. Out of line on purpose: the key
    // then travels in two registers from one block's hash to the next; inlined, GCC tends to move it through
    // a 16-byte stack slot written as two 8-byte halves, a store-forwarding stall on the chain's critical
    // path (about +25 % per block measured in bench_prefix_cache).
    if (tokens.size() <= short_block) return hash_one(parent, tokens);
    return chain_long(parent, tokens);
  }

private:
  static constexpr std::size_t short_block = 64;  ///< tokens hashed from the small buffer
  static constexpr std::size_t piece = 1024;      ///< tokens per XXH3 call for longer blocks

  /// XXH3-128(parent || tokens). Precondition: tokens.size() <= short_block.
  [[gnu::always_inline]] block_key hash_one(block_key parent, std::span<const token_id> tokens) const noexcept {
    alignas(16) std::byte buffer[sizeof(block_key) + short_block * sizeof(token_id)];
    std::memcpy(buffer, &parent, sizeof parent);
    if (!tokens.empty()) std::memcpy(buffer + sizeof parent, tokens.data(), tokens.size_bytes());
    return to_key(XXH3_128bits_withSeed(buffer, sizeof parent + tokens.size_bytes(), seed_));
  }

  /// Kept out of line so that its 4 KiB frame stays out of `chain`'s callers.
  [[gnu::noinline]] block_key chain_long(block_key parent, std::span<const token_id> tokens) const noexcept {
    alignas(16) std::byte buffer[sizeof(block_key) + piece * sizeof(token_id)];
    do {
      const std::span<const token_id> part = tokens.first(tokens.size() < piece ? tokens.size() : piece);
      std::memcpy(buffer, &parent, sizeof parent);
      std::memcpy(buffer + sizeof parent, part.data(), part.size_bytes());
      parent = to_key(XXH3_128bits_withSeed(buffer, sizeof parent + part.size_bytes(), seed_));
      tokens = tokens.subspan(part.size());
    } while (!tokens.empty());
    return parent;
  }

  static void put(std::byte* buffer, std::size_t& n, const void* p, std::size_t bytes) noexcept {
    std::memcpy(buffer + n, p, bytes);
    n += bytes;
  }
  static block_key to_key(XXH128_hash_t h) noexcept { return {h.low64, h.high64}; }

  std::uint64_t seed_;
};
static_assert(hasher<xxh3_hasher>);

} // namespace reprise
