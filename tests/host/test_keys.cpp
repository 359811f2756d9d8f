// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Chained block keys: xxh3_hasher and sha256_hasher.
#include <reprise/keys/sha256_hasher.hpp>
#include <reprise/keys/xxh3_hasher.hpp>

#include <doctest/doctest.h>
#include <openssl/sha.h>
#include <xxhash.h>

#include <array>
#include <cstring>
#include <numeric>
#include <span>
#include <vector>

using namespace reprise;

namespace {
std::vector<token_id> tokens(std::size_t n, token_id first) {
  std::vector<token_id> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}
} // namespace

TEST_CASE_TEMPLATE("keys chain: equal prefixes give equal keys, any difference changes them", H, xxh3_hasher,
                   sha256_hasher) {
  const H h(1234);
  const auto a = tokens(16, 0), b = tokens(16, 16);
  const block_key root = h.root({});
  const block_key k0 = h.chain(root, a);
  CHECK(k0 == H(1234).chain(H(1234).root({}), a));   // deterministic for a seed
  CHECK(h.chain(k0, b) != h.chain(h.chain(root, b), a)); // order matters: keys name the whole prefix
  CHECK(h.chain(k0, b) != h.chain(root, b));             // the parent is part of the key
  auto a2 = a;
  a2[15] += 1;
  CHECK(h.chain(root, a2) != k0);
  CHECK(H(1235).chain(H(1235).root({}), a) != k0); // the seed matters

  SUBCASE("every extra key changes the root") {
    const std::array<std::byte, 4> digest{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
    const extra_keys variants[] = {{.model_revision = 1}, {.lora_id = 1}, {.multimodal_digest = digest},
                                   {.tenant_salt = 1}};
    for (const extra_keys& x : variants) CHECK(h.root(x) != root);
    CHECK(h.root({.tenant_salt = 1}) != h.root({.tenant_salt = 2}));
  }
  SUBCASE("blocks longer than one hash piece") {
    const auto big = tokens(3000, 5);
    auto big2 = big;
    big2[2999] = -1;
    CHECK(h.chain(root, big) == h.chain(root, big));
    CHECK(h.chain(root, big) != h.chain(root, big2));
  }
}

TEST_CASE("sha256_hasher keys are SHA-256 of the documented byte string (reproducible across processes)") {
  const sha256_hasher h(7);
  const auto t = tokens(4, 100);
  const block_key parent{0x0102030405060708ULL, 0x1112131415161718ULL};
  std::vector<unsigned char> bytes;
  for (std::uint64_t v : {parent.lo, parent.hi})
    for (int i = 0; i < 8; ++i) bytes.push_back(static_cast<unsigned char>(v >> (8 * i)));
  for (token_id x : t)
    for (int i = 0; i < 4; ++i) bytes.push_back(static_cast<unsigned char>(static_cast<std::uint32_t>(x) >> (8 * i)));
  unsigned char digest[SHA256_DIGEST_LENGTH];
  SHA256(bytes.data(), bytes.size(), digest);
  block_key expected;
  for (int i = 0; i < 8; ++i) {
    expected.lo |= std::uint64_t{digest[i]} << (8 * i);
    expected.hi |= std::uint64_t{digest[8 + i]} << (8 * i);
  }
  CHECK(h.chain(parent, t) == expected);
}

TEST_CASE("xxh3_hasher keys are XXH3-128 of parent bytes || token bytes, in 1024-token pieces") {
  const xxh3_hasher h(99);
  const block_key parent{0x0102030405060708ULL, 0x1112131415161718ULL};
  auto reference = [&](block_key p, std::span<const token_id> t) {
    std::vector<std::byte> bytes(sizeof p + t.size_bytes());
    std::memcpy(bytes.data(), &p, sizeof p);
    if (!t.empty()) std::memcpy(bytes.data() + sizeof p, t.data(), t.size_bytes());
    const XXH128_hash_t d = XXH3_128bits_withSeed(bytes.data(), bytes.size(), 99);
    return block_key{d.low64, d.high64};
  };
  // Both sides of the short-block buffer (64 tokens) and of a piece (1024 tokens).
  for (std::size_t n : {0, 1, 16, 63, 64, 65, 1000, 1024}) {
    const auto t = tokens(n, 7);
    CHECK(h.chain(parent, t) == reference(parent, t));
  }
  const auto t = tokens(2500, 3);
  const std::span<const token_id> all(t);
  const block_key first = reference(parent, all.first(1024));
  const block_key second = reference(first, all.subspan(1024, 1024));
  CHECK(h.chain(parent, all) == reference(second, all.subspan(2048)));
}

TEST_CASE("stored_extra_keys compares every field and the digest bytes") {
  const std::array<std::byte, 3> d1{std::byte{1}, std::byte{2}, std::byte{3}};
  const std::array<std::byte, 3> d2{std::byte{1}, std::byte{2}, std::byte{4}};
  const auto a = stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .multimodal_digest = d1, .tenant_salt = 3});
  CHECK(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .multimodal_digest = d1, .tenant_salt = 3}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .multimodal_digest = d2, .tenant_salt = 3}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .tenant_salt = 3}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 9, .multimodal_digest = d1, .tenant_salt = 3}));
}
