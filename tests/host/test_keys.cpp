// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Chained block keys: xxh3_hasher and sha256_hasher.
#include <reprise/keys/media_keys.hpp>
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

  SUBCASE("every root-level extra key changes the root; media items do not (they are positional)") {
    const extra_keys variants[] = {{.model_revision = 1}, {.lora_id = 1}, {.tenant_salt = 1}};
    for (const extra_keys& x : variants) CHECK(h.root(x) != root);
    CHECK(h.root({.tenant_salt = 1}) != h.root({.tenant_salt = 2}));
    const std::array<std::byte, 4> digest{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
    const media_item image[] = {{.position = 3, .digest = digest}};
    CHECK(h.root({.media = image}) == root);
  }
  SUBCASE("a block's media digest changes its key, and only a block holding media") {
    const std::array<std::byte, 4> d1{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
    const std::array<std::byte, 4> d2{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{5}};
    const media_item at3[] = {{.position = 3, .digest = d1}};
    const media_item at4[] = {{.position = 4, .digest = d1}};
    const media_item other[] = {{.position = 3, .digest = d2}};
    const media_digest m = media_digest_of(std::span<const media_item>(at3), 0, 16);
    CHECK_FALSE(m.empty());
    CHECK(chain_block(h, root, a, nullptr) == k0); // a text block keeps the plain chain key
    CHECK(chain_block(h, root, a, &m) != k0);
    const media_digest m4 = media_digest_of(std::span<const media_item>(at4), 0, 16);
    const media_digest mo = media_digest_of(std::span<const media_item>(other), 0, 16);
    CHECK(chain_block(h, root, a, &m4) != chain_block(h, root, a, &m));
    CHECK(chain_block(h, root, a, &mo) != chain_block(h, root, a, &m));
    CHECK(chain_block(h, root, a, &m) == chain_block(H(1234), H(1234).root({}), a, &m)); // deterministic
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

TEST_CASE("stored_extra_keys compares every root-level field") {
  const auto a = stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .tenant_salt = 3});
  CHECK(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .tenant_salt = 3}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 2, .tenant_salt = 4}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 1, .lora_id = 9, .tenant_salt = 3}));
  CHECK_FALSE(a == stored_extra_keys::from({.model_revision = 2, .lora_id = 2, .tenant_salt = 3}));
}

TEST_CASE("media keys: the built-in SHA-256 equals OpenSSL's on every padding boundary") {
  for (std::size_t n : {0, 1, 3, 55, 56, 57, 63, 64, 65, 119, 120, 128, 1000}) {
    std::vector<unsigned char> bytes(n);
    for (std::size_t i = 0; i < n; ++i) bytes[i] = static_cast<unsigned char>(i * 37 + 11);
    detail::sha256 h;
    // Fed in uneven pieces, as media_digest_of does.
    std::size_t at = 0;
    for (std::size_t piece = 1; at < n; piece = piece * 2 + 1) {
      const std::size_t take = std::min(piece, n - at);
      h.update(bytes.data() + at, take);
      at += take;
    }
    unsigned char expected[SHA256_DIGEST_LENGTH];
    SHA256(bytes.data(), bytes.size(), expected);
    const auto got = h.finish();
    CHECK_MESSAGE(std::memcmp(got.data(), expected, 32) == 0, "length ", n);
  }
}

TEST_CASE("media keys: a block's media digest is SHA-256 of the documented byte string") {
  const std::array<std::byte, 3> d1{std::byte{0xaa}, std::byte{0xbb}, std::byte{0xcc}};
  const std::array<std::byte, 2> d2{std::byte{0x01}, std::byte{0x02}};
  const media_item items[] = {{.position = 5, .digest = d1}, {.position = 20, .digest = d2}, {.position = 40, .digest = d1}};
  const std::span<const media_item> all(items);
  // Block [16, 32) holds the item at 20 only, at offset 4.
  std::vector<unsigned char> bytes(block_media_tag, block_media_tag + sizeof block_media_tag);
  for (unsigned char c : {1, 0, 0, 0, 4, 0, 0, 0, 2, 0x01, 0x02}) bytes.push_back(c);
  unsigned char expected[SHA256_DIGEST_LENGTH];
  SHA256(bytes.data(), bytes.size(), expected);
  CHECK(std::memcmp(media_digest_of(all, 16, 32).bytes.data(), expected, 32) == 0);
  CHECK(media_digest_of(all, 6, 20).empty()); // no item in range: all zero
  CHECK(media_digest_of(all, 48, 64).empty());
  CHECK_FALSE(media_digest_of(all, 0, 16).empty());
  // The same item at the same offset from another block start digests alike (the chain tells blocks apart).
  const media_item shifted[] = {{.position = 36, .digest = d2}};
  CHECK(media_digest_of(std::span<const media_item>(shifted), 32, 48) == media_digest_of(all, 16, 32));
  // Stored copies digest like the caller's items.
  std::vector<stored_media_item> stored;
  for (const media_item& x : items) stored.push_back(stored_media_item::from(x));
  CHECK(media_digest_of(std::span<const stored_media_item>(stored), 16, 32) == media_digest_of(all, 16, 32));
  CHECK(media_digest_of(std::span<const stored_media_item>(stored), 0, 64) == media_digest_of(all, 0, 64));
}

TEST_CASE("media keys: check_media refuses unsorted, duplicate, oversized and out-of-prompt items") {
  const std::array<std::byte, 32> ok{};
  const std::array<std::byte, 33> big{};
  const media_item sorted[] = {{1, ok}, {7, ok}};
  const media_item unsorted[] = {{7, ok}, {1, ok}};
  const media_item duplicate[] = {{3, ok}, {3, ok}};
  const media_item oversized[] = {{1, big}};
  const media_item past[] = {{1, ok}, {10, ok}};
  CHECK(check_media(sorted, 10) == errc{});
  CHECK(check_media({}, 10) == errc{});
  CHECK(check_media(unsorted, 10) == errc::invalid_argument);
  CHECK(check_media(duplicate, 10) == errc::invalid_argument);
  CHECK(check_media(oversized, 10) == errc::invalid_argument);
  CHECK(check_media(past, 10) == errc::out_of_range);
  CHECK(check_media(past, 11) == errc{});
}
