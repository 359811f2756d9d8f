// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `sha256_hasher`: block keys from SHA-256 (OpenSSL EVP) with a caller-given seed.
///
/// Keys are reproducible: the same seed, extra keys and tokens give the same key in every process and on
/// every node, which cross-process or cross-node sharing needs. Tokens are hashed as little-endian 32-bit
/// integers; the key is the first 16 bytes of the digest. About an order of magnitude slower than XXH3.
///
/// Opt-in: link `reprise::sha256` (CMake component `sha256`, pkg-config `reprise-sha256`), which adds OpenSSL
/// libcrypto; the umbrella header <reprise/reprise.hpp> does not include this one.

#include <reprise/keys/block_key.hpp>

#include <openssl/evp.h>

#include <bit>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <span>

namespace reprise {

class sha256_hasher {
public:
  /// Effects: fetches the SHA-256 implementation and creates one reusable digest context, so hashing never
  /// allocates afterwards. A failure of OpenSSL itself (out of memory) leaves a hasher whose keys are all
  /// zero; correctness still holds because every match is verified.
  explicit sha256_hasher(std::uint64_t seed) : seed_(seed), context_(EVP_MD_CTX_new()) {}

  std::uint64_t seed() const noexcept { return seed_; }

  /// key_{-1} = SHA-256("reprise/root" || seed || model revision || LoRA id || tenant salt). Media items are
  /// positional and enter the blocks holding them (`chain_block`, media_keys.hpp), not the root.
  block_key root(const extra_keys& x) const noexcept {
    static constexpr char tag[] = "reprise/root";
    if (!begin()) return {};
    update(tag, sizeof tag - 1);
    update_u64(seed_);
    update_u64(x.model_revision);
    update_u64(x.lora_id);
    update_u64(x.tenant_salt);
    return finish();
  }

  /// key_i = SHA-256(key_{i-1} || tokens as little-endian int32).
  block_key chain(const block_key& parent, std::span<const token_id> tokens) const noexcept {
    if (!begin()) return {};
    update_u64(parent.lo);
    update_u64(parent.hi);
    if constexpr (std::endian::native == std::endian::little) {
      update(tokens.data(), tokens.size_bytes());
    } else {
      for (token_id t : tokens) {
        const auto v = static_cast<std::uint32_t>(t);
        const unsigned char le[4] = {static_cast<unsigned char>(v), static_cast<unsigned char>(v >> 8),
                                     static_cast<unsigned char>(v >> 16), static_cast<unsigned char>(v >> 24)};
        update(le, 4);
      }
    }
    return finish();
  }

private:
  struct context_deleter {
    void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
  };

  bool begin() const noexcept {
    return context_ != nullptr && EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) == 1;
  }
  void update(const void* p, std::size_t n) const noexcept {
    if (n != 0) EVP_DigestUpdate(context_.get(), p, n);
  }
  void update_u64(std::uint64_t v) const noexcept {
    unsigned char le[8];
    for (int i = 0; i < 8; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
    update(le, 8);
  }
  block_key finish() const noexcept {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (EVP_DigestFinal_ex(context_.get(), digest, &size) != 1 || size < 16) return {};
    block_key k;
    for (int i = 0; i < 8; ++i) {
      k.lo |= std::uint64_t{digest[i]} << (8 * i);
      k.hi |= std::uint64_t{digest[8 + i]} << (8 * i);
    }
    return k;
  }

  std::uint64_t seed_;
  std::unique_ptr<EVP_MD_CTX, context_deleter> context_;
};
static_assert(hasher<sha256_hasher>);

} // namespace reprise
