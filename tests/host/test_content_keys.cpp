// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Content keys (reprise/keys/content_key.hpp): the format of docs/key-format.md, its test vectors, and which
// inputs every key depends on.
#include <reprise/cache/types.hpp>
#include <reprise/keys/content_key.hpp>
#include <reprise/keys/remote_keys.hpp>
#include <reprise/state/presets.hpp>

#include <doctest/doctest.h>
#include <openssl/sha.h>

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <numeric>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <unordered_set>
#include <vector>

using namespace reprise;

namespace {

// The tiny model of the test vectors in docs/key-format.md.
constexpr kv_shape tiny_kv{.kv_heads = 1, .head_dim = 8, .block_size = 8};
constexpr mamba2_shape tiny_mamba2{.heads = 2, .head_dim = 4, .state_dim = 8, .groups = 1, .conv_width = 4, .chunk = 64};
constexpr gated_delta_shape tiny_delta{
    .key_heads = 1, .value_heads = 2, .key_dim = 8, .value_dim = 4, .conv_width = 4, .chunk = 32};
constexpr std::string_view tiny_revision = "tiny-hybrid@1";
constexpr std::uint64_t tiny_seed = 0x0123456789abcdefULL;
constexpr std::array<std::byte, 4> tiny_digest{std::byte{0xde}, std::byte{0xad}, std::byte{0xbe}, std::byte{0xef}};
constexpr extra_keys tiny_extra{.lora_id = 7, .multimodal_digest = tiny_digest, .tenant_salt = 42};

model_config config_of(std::vector<layer_spec> groups) {
  auto c = model_config::make(std::move(groups));
  REQUIRE(c);
  return *c;
}
model_config tiny_config() { return config_of({{tiny_kv, 1}, {tiny_mamba2, 1}, {tiny_delta, 1}}); }

model_fingerprint fingerprint_of(const model_config& c, std::string_view revision = tiny_revision) {
  auto f = model_fingerprint::make(c, revision);
  REQUIRE(f);
  return *f;
}
content_key_context tiny_context() { return {tiny_seed, fingerprint_of(tiny_config())}; }

std::vector<token_id> iota_tokens(std::size_t n, token_id first) {
  std::vector<token_id> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

template <class T>
T ok(result<T> r) {
  REQUIRE(r);
  return std::move(*r);
}

// --- an independent encoder of the documented byte layout, hashed with OpenSSL's one-shot SHA256() ---
struct message {
  std::vector<unsigned char> bytes;
  message& tag(std::string_view label) {
    for (std::string_view s : {std::string_view("reprise/content-key/v1"), label}) {
      bytes.insert(bytes.end(), s.begin(), s.end());
      bytes.push_back(0);
    }
    return *this;
  }
  message& le(std::uint64_t v, int width) {
    for (int i = 0; i < width; ++i) bytes.push_back(static_cast<unsigned char>(v >> (8 * i)));
    return *this;
  }
  message& raw(std::span<const std::uint8_t> b) {
    bytes.insert(bytes.end(), b.begin(), b.end());
    return *this;
  }
  message& tokens(std::span<const token_id> t) {
    for (token_id x : t) le(static_cast<std::uint32_t>(x), 4);
    return *this;
  }
  std::array<std::uint8_t, 32> sha256() const {
    std::array<std::uint8_t, 32> d{};
    SHA256(bytes.data(), bytes.size(), d.data());
    return d;
  }
};

} // namespace

TEST_CASE("content keys: the test vectors of docs/key-format.md") {
  // Any accidental change to the format changes these; an intended one is a new format tag and new vectors.
  const content_key_context c = tiny_context();
  CHECK(c.fingerprint.block_size == 8);
  CHECK(to_hex(c.fingerprint) == "d830ae274c3e3b1f6ee5074721b4e4164bfc79ad76a4e43f2d6f147ac70417be");
  CHECK(to_hex(ok(root_key(c, {}))) == "0722a0448aae7eaefe76f0dfae8b31be6fad09db5b2a9653ec0dc307ddacd944");
  const content_key root = ok(root_key(c, tiny_extra));
  CHECK(to_hex(root) == "a67d7b2f8277fd4f50050b02a5cb494bceff5052c055cecacb800c4e089a844c");

  const auto t = iota_tokens(20, 100); // 100 .. 119: two full blocks of 8 and a tail of 4
  const auto keys = ok(block_keys(c, tiny_extra, t, 8));
  REQUIRE(keys.size() == 2);
  CHECK(to_hex(keys[0]) == "a4c25fa49fb8d4896d8a02f58b21e3e7d91035c1c38fdaabd3ccb62d59fc4af4");
  CHECK(to_hex(keys[1]) == "a6130e4dc21d7db3014b731324e5cf83a37a992525c1c49147dda20813a764a0");

  const std::span<const token_id> all(t);
  const snapshot_dtypes dtypes{dtype::f32, dtype::bf16};
  CHECK(to_hex(ok(snapshot_key(c, keys[1], all.subspan(16, 4), 20, exactness::prefill_exact, dtypes))) ==
        "b7a597b1fb3923cbdb715b88ecefa3cc9d068f615f698dd31069541ed3b3b3f2");
  CHECK(to_hex(ok(snapshot_key(c, keys[1], {}, 16, exactness::decode_continuation, dtypes))) ==
        "1ac3a271168b691f72146d841041da466222ff4f0acf95062b9c3b90396db086");
  CHECK(to_hex(ok(snapshot_key(c, root, all.first(3), 3, exactness::prefill_exact, dtypes))) ==
        "b928dff07b7893e96421110a0534d79d451a2cd4f89186419e4893da31a091df");
  CHECK(ok(snapshot_dtypes::of(tiny_config())) == dtypes);
  CHECK(to_hex(ok(turn_end_key(c, keys[1], 16, dtypes))) ==
        "f0763392cdda7707420df399ddd14c96ad8d89f1a740f31a556b32ef63e9cde3");
  CHECK(to_hex(ok(turn_end_key(c, root, 0, dtypes))) ==
        "830497d79e108595395d207cc90a560c13abb39f44f4c4a913d41968a03a86f1");
}

TEST_CASE("content keys are SHA-256 of the documented byte layout (recomputed with one-shot SHA256())") {
  const content_key_context c = tiny_context();
  const auto t = iota_tokens(20, 100);
  const std::span<const token_id> all(t);

  message fp;
  fp.tag("fingerprint").le(tiny_revision.size(), 8);
  fp.bytes.insert(fp.bytes.end(), tiny_revision.begin(), tiny_revision.end());
  fp.le(8, 4).le(3, 4); // key block size, 3 runs
  fp.le(1, 4).le(0, 1).le(1, 4).le(8, 4).le(8, 4).le(1, 1);                               // 1 x kv, bf16
  fp.le(1, 4).le(1, 1).le(2, 4).le(4, 4).le(8, 4).le(1, 4).le(4, 4).le(64, 4).le(0, 1).le(1, 1); // 1 x mamba2
  fp.le(1, 4).le(2, 1).le(1, 4).le(2, 4).le(8, 4).le(4, 4).le(4, 4).le(32, 4).le(0, 1).le(1, 1); // 1 x delta
  const auto fingerprint = fp.sha256();
  CHECK(c.fingerprint.digest == fingerprint);

  message root;
  root.tag("root").le(tiny_seed, 8).raw(fingerprint).le(0, 8).le(7, 8).le(42, 8).le(4, 1);
  for (std::byte b : tiny_digest) root.le(static_cast<std::uint8_t>(b), 1);
  const auto root_digest = root.sha256();
  CHECK(ok(root_key(c, tiny_extra)).bytes == root_digest);

  const auto keys = ok(block_keys(c, tiny_extra, t, 8));
  message block0;
  block0.raw(root_digest).tokens(all.first(8));
  CHECK(keys[0].bytes == block0.sha256());

  message snapshot;
  snapshot.tag("snapshot").raw(keys[1].bytes).tokens(all.subspan(16, 4)).le(20, 8).le(1, 1).le(0, 1).le(1, 1);
  CHECK(ok(snapshot_key(c, keys[1], all.subspan(16, 4), 20, exactness::decode_continuation,
                        {dtype::f32, dtype::bf16}))
            .bytes == snapshot.sha256());

  message turn_end;
  turn_end.tag("turn-end").le(1, 4).raw(keys[1].bytes).le(16, 8).le(0, 1).le(1, 1);
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::f32, dtype::bf16})).bytes == turn_end.sha256());
  // Not a snapshot key of the same block: the label keeps the two kinds of name apart.
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::f32, dtype::bf16})) !=
        ok(snapshot_key(c, keys[1], {}, 16, exactness::decode_continuation, {dtype::f32, dtype::bf16})));
}

TEST_CASE("turn-end keys: every input changes them, and a boundary off the block grid is refused") {
  const content_key_context c = tiny_context();
  const auto keys = ok(block_keys(c, tiny_extra, iota_tokens(16, 100), 8));
  const snapshot_dtypes dtypes{dtype::f32, dtype::bf16};
  const content_key k = ok(turn_end_key(c, keys[1], 16, dtypes));
  CHECK(ok(turn_end_key(c, keys[0], 16, dtypes)) != k);
  CHECK(ok(turn_end_key(c, keys[1], 8, dtypes)) != k);
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::bf16, dtype::bf16})) != k);
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::f32, dtype::f32})) != k);
  CHECK(turn_end_key(c, keys[1], 12, dtypes).error() == errc::invalid_argument);
  CHECK(turn_end_key({}, keys[1], 16, dtypes).error() == errc::invalid_argument);
  CHECK(turn_end_key(c, keys[1], 16, {static_cast<dtype>(99), dtype::bf16}).error() == errc::invalid_argument);
  // The keyer's form: the same key, and zero where the free function refuses.
  auto keyer = content_keyer::make(c, tiny_config());
  REQUIRE(keyer);
  CHECK(keyer->turn_end(keys[1], 16) == k);
  CHECK(keyer->turn_end(keys[1], 12) == content_key{});
}

TEST_CASE("content keys: equal inputs give equal keys in separately built contexts") {
  // Equal across processes as well: the test vectors above are fixed bytes, checked in every process that
  // runs this binary, so no process-local state (a random seed, an address) can enter a key.
  const content_key_context a = tiny_context(), b = tiny_context();
  CHECK(a.fingerprint == b.fingerprint);
  const auto t = iota_tokens(100, 3);
  CHECK(ok(block_keys(a, tiny_extra, t, 8)) == ok(block_keys(b, tiny_extra, t, 8)));

  // A model described at compile time and the same model at run time.
  const model_config typed = model_config::of<presets::nemotron_h_8b>();
  const model_config runtime = config_of(
      {{kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}, 4},
       {mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8, .conv_width = 4, .chunk = 128}, 24}});
  CHECK(fingerprint_of(typed, "nemotron-h-8b") == fingerprint_of(runtime, "nemotron-h-8b"));

  // The layer sequence counts, not how it is grouped.
  CHECK(fingerprint_of(config_of({{tiny_kv, 2}, {tiny_mamba2, 1}})) ==
        fingerprint_of(config_of({{tiny_kv, 1}, {tiny_kv, 1}, {tiny_mamba2, 1}})));
  CHECK(fingerprint_of(config_of({{tiny_kv, 1}, {tiny_mamba2, 1}, {tiny_kv, 1}})) !=
        fingerprint_of(config_of({{tiny_kv, 2}, {tiny_mamba2, 1}})));
}

TEST_CASE("model fingerprint: every field of the layout and the revision changes it") {
  std::vector<model_config> configs;
  std::vector<std::string> names;
  auto add = [&](std::string name, kv_shape kv, mamba2_shape m, gated_delta_shape g,
                 std::uint32_t kv_count = 1, std::uint32_t m_count = 1, std::uint32_t g_count = 1) {
    names.push_back(std::move(name));
    configs.push_back(config_of({{kv, kv_count}, {m, m_count}, {g, g_count}}));
  };
  const kv_shape k = tiny_kv;
  const mamba2_shape m = tiny_mamba2;
  const gated_delta_shape g = tiny_delta;
  add("base", k, m, g);
  // kv_shape
  { auto x = k; x.kv_heads = 2; add("kv.kv_heads", x, m, g); }
  { auto x = k; x.head_dim = 16; add("kv.head_dim", x, m, g); }
  { auto x = k; x.block_size = 16; add("kv.block_size", x, m, g); }
  { auto x = k; x.type = dtype::f16; add("kv.type", x, m, g); }
  // mamba2_shape
  { auto x = m; x.heads = 4; add("mamba2.heads", k, x, g); }
  { auto x = m; x.head_dim = 8; add("mamba2.head_dim", k, x, g); }
  { auto x = m; x.state_dim = 16; add("mamba2.state_dim", k, x, g); }
  { auto x = m; x.groups = 2; add("mamba2.groups", k, x, g); }
  { auto x = m; x.conv_width = 3; add("mamba2.conv_width", k, x, g); }
  { auto x = m; x.chunk = 128; add("mamba2.chunk", k, x, g); }
  { auto x = m; x.state_type = dtype::bf16; add("mamba2.state_type", k, x, g); }
  { auto x = m; x.conv_type = dtype::f32; add("mamba2.conv_type", k, x, g); }
  // gated_delta_shape
  { auto x = g; x.key_heads = 2; add("delta.key_heads", k, m, x); }
  { auto x = g; x.value_heads = 4; add("delta.value_heads", k, m, x); }
  { auto x = g; x.key_dim = 16; add("delta.key_dim", k, m, x); }
  { auto x = g; x.value_dim = 8; add("delta.value_dim", k, m, x); }
  { auto x = g; x.conv_width = 2; add("delta.conv_width", k, m, x); }
  { auto x = g; x.chunk = 64; add("delta.chunk", k, m, x); }
  { auto x = g; x.state_type = dtype::f64; add("delta.state_type", k, m, x); }
  { auto x = g; x.conv_type = dtype::f16; add("delta.conv_type", k, m, x); }
  // counts, kinds and order
  add("kv count", k, m, g, 2);
  add("mamba2 count", k, m, g, 1, 2);
  add("delta count", k, m, g, 1, 1, 2);
  names.push_back("order");
  configs.push_back(config_of({{m, 1}, {k, 1}, {g, 1}}));
  names.push_back("no delta layer");
  configs.push_back(config_of({{k, 1}, {m, 1}}));
  names.push_back("attention-free");
  configs.push_back(config_of({{m, 1}, {g, 1}}));

  std::vector<model_fingerprint> prints;
  for (const model_config& c : configs) prints.push_back(fingerprint_of(c));
  prints.push_back(fingerprint_of(configs[0], "tiny-hybrid@2"));
  names.push_back("revision");
  prints.push_back(fingerprint_of(configs[0], ""));
  names.push_back("empty revision");
  for (std::size_t i = 0; i < prints.size(); ++i)
    for (std::size_t j = i + 1; j < prints.size(); ++j) {
      INFO(names[i], " vs ", names[j]);
      CHECK(prints[i].digest != prints[j].digest);
    }
  CHECK(fingerprint_of(configs[0]) == prints[0]); // and the same config gives the same print
  CHECK(prints[3].block_size == 16);               // kv.block_size
  CHECK(prints.back().block_size == 8);
}

TEST_CASE("content keys: every input changes the keys") {
  const content_key_context c = tiny_context();
  const auto t = iota_tokens(24, 100);
  const std::span<const token_id> all(t);
  const auto base = ok(block_keys(c, tiny_extra, t, 8));
  REQUIRE(base.size() == 3);

  SUBCASE("the seed, the fingerprint and each extra key reach every block") {
    auto differs_everywhere = [&](const content_key_context& cc, const extra_keys& x) {
      const auto keys = ok(block_keys(cc, x, t, 8));
      REQUIRE(keys.size() == base.size());
      for (std::size_t i = 0; i < keys.size(); ++i) CHECK(keys[i] != base[i]);
    };
    differs_everywhere({tiny_seed + 1, c.fingerprint}, tiny_extra);
    differs_everywhere({tiny_seed, fingerprint_of(tiny_config(), "tiny-hybrid@2")}, tiny_extra);
    {
      auto k = tiny_kv;
      k.type = dtype::f32;
      differs_everywhere({tiny_seed, fingerprint_of(config_of({{k, 1}, {tiny_mamba2, 1}, {tiny_delta, 1}}))},
                         tiny_extra);
    }
    const std::array<std::byte, 4> other_digest{std::byte{0xde}, std::byte{0xad}, std::byte{0xbe}, std::byte{0xee}};
    const std::array<std::byte, 5> longer_digest{std::byte{0xde}, std::byte{0xad}, std::byte{0xbe}, std::byte{0xef},
                                                 std::byte{0}};
    const std::array<std::byte, 32> full_digest{};
    for (extra_keys x : {extra_keys{.model_revision = 1, .lora_id = 7, .multimodal_digest = tiny_digest, .tenant_salt = 42},
                         extra_keys{.lora_id = 8, .multimodal_digest = tiny_digest, .tenant_salt = 42},
                         extra_keys{.lora_id = 7, .multimodal_digest = other_digest, .tenant_salt = 42},
                         extra_keys{.lora_id = 7, .multimodal_digest = longer_digest, .tenant_salt = 42},
                         extra_keys{.lora_id = 7, .multimodal_digest = full_digest, .tenant_salt = 42},
                         extra_keys{.lora_id = 7, .tenant_salt = 42},
                         extra_keys{.lora_id = 7, .multimodal_digest = tiny_digest, .tenant_salt = 43}})
      differs_everywhere(c, x);
  }

  SUBCASE("one token changes its block's key and every later one") {
    for (std::size_t pos : {0, 7, 8, 23}) {
      auto t2 = t;
      t2[pos] = -t2[pos]; // negative ids are hashed as two's complement int32
      const auto keys = ok(block_keys(c, tiny_extra, t2, 8));
      for (std::size_t i = 0; i < keys.size(); ++i) CHECK((keys[i] == base[i]) == (i < pos / 8));
    }
  }

  SUBCASE("snapshot keys: parent, tail tokens, position, exactness and each dtype") {
    const snapshot_dtypes d{dtype::f32, dtype::bf16};
    const content_key k = ok(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::prefill_exact, d));
    std::set<content_key> seen{k};
    auto distinct = [&](result<content_key> r) {
      REQUIRE(r);
      CHECK(seen.insert(*r).second);
    };
    distinct(snapshot_key(c, base[0], all.subspan(16, 3), 19, exactness::prefill_exact, d)); // parent
    auto tail = iota_tokens(3, 116);
    tail[2] += 1;
    distinct(snapshot_key(c, base[1], tail, 19, exactness::prefill_exact, d));                // a tail token
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19 + 8, exactness::prefill_exact, d)); // position
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::decode_continuation, d));
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::prefill_exact, {dtype::bf16, dtype::bf16}));
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::prefill_exact, {dtype::f32, dtype::f32}));
    distinct(snapshot_key(c, base[1], all.subspan(16, 2), 18, exactness::prefill_exact, d));  // a shorter tail
    distinct(snapshot_key(c, base[1], {}, 16, exactness::prefill_exact, d));                  // the block boundary
    // The seed, the fingerprint and the extra keys reach a snapshot key through its parent (checked above).
  }
}

TEST_CASE("content keys: a prefix's block keys are a prefix of the longer sequence's, and chains continue") {
  const content_key_context c = tiny_context();
  const auto t = iota_tokens(70, 5);
  const std::span<const token_id> all(t);
  const auto keys = ok(block_keys(c, tiny_extra, t, 8));
  REQUIRE(keys.size() == 8);
  for (std::size_t n : {0, 1, 7, 8, 9, 31, 32, 64, 69}) {
    const auto prefix = ok(block_keys(c, tiny_extra, all.first(n), 8));
    REQUIRE(prefix.size() == n / 8);
    CHECK(std::equal(prefix.begin(), prefix.end(), keys.begin()));
  }
  const auto head = ok(block_keys(c, tiny_extra, all.first(24), 8));
  const auto rest = ok(block_keys_after(c, head.back(), all.subspan(24), 8));
  auto joined = head;
  joined.insert(joined.end(), rest.begin(), rest.end());
  CHECK(joined == keys);
  CHECK(ok(block_keys_after(c, ok(root_key(c, tiny_extra)), t, 8)) == keys);

  std::unordered_set<content_key> set(keys.begin(), keys.end()); // std::hash<content_key>
  CHECK(set.size() == keys.size());
}

TEST_CASE("content keys: errors return nothing") {
  const content_key_context c = tiny_context();
  const auto t = iota_tokens(20, 100);
  const std::span<const token_id> all(t);
  const content_key root = ok(root_key(c, tiny_extra));
  const snapshot_dtypes d{};

  // A block size the model disagrees with, and a context without a computed fingerprint.
  CHECK(block_keys(c, tiny_extra, t, 16).error() == errc::invalid_argument);
  CHECK(block_keys_after(c, root, t, 4).error() == errc::invalid_argument);
  const content_key_context empty{};
  CHECK(block_keys(empty, tiny_extra, t, 8).error() == errc::invalid_argument);
  CHECK(block_keys(empty, tiny_extra, t, 0).error() == errc::invalid_argument);
  CHECK(root_key(empty, tiny_extra).error() == errc::invalid_argument);
  CHECK(snapshot_key(empty, root, {}, 0, exactness::prefill_exact, d).error() == errc::invalid_argument);

  // A multimodal digest longer than the cache stores.
  const std::array<std::byte, max_multimodal_digest_bytes + 1> too_long{};
  CHECK(root_key(c, {.multimodal_digest = too_long}).error() == errc::invalid_argument);
  CHECK(block_keys(c, {.multimodal_digest = too_long}, t, 8).error() == errc::invalid_argument);

  // Snapshot arguments: the tail must be exactly [floor(p/B) B, p); enumerations must be valid.
  CHECK(snapshot_key(c, root, all.first(3), 4, exactness::prefill_exact, d).error() == errc::size_mismatch);
  CHECK(snapshot_key(c, root, all.first(8), 8, exactness::prefill_exact, d).error() == errc::size_mismatch);
  CHECK(snapshot_key(c, root, {}, 3, exactness::prefill_exact, d).error() == errc::size_mismatch);
  CHECK(snapshot_key(c, root, {}, 0, static_cast<exactness>(2), d).error() == errc::invalid_argument);
  CHECK(snapshot_key(c, root, {}, 0, exactness::prefill_exact, {static_cast<dtype>(9), dtype::bf16}).error() ==
        errc::invalid_argument);
  CHECK(snapshot_key(c, root, {}, 0, exactness::prefill_exact, {dtype::f32, static_cast<dtype>(9)}).error() ==
        errc::invalid_argument);

  // The model's own snapshot dtypes: none without recurrent layers, refused when they disagree.
  CHECK(snapshot_dtypes::of(config_of({{tiny_kv, 1}})).error() == errc::invalid_argument);
  auto m = tiny_mamba2;
  m.state_type = dtype::bf16;
  CHECK(snapshot_dtypes::of(config_of({{tiny_kv, 1}, {tiny_mamba2, 1}, {m, 1}})).error() == errc::unsupported_config);
  CHECK(ok(snapshot_dtypes::of(config_of({{m, 2}}))) == snapshot_dtypes{dtype::bf16, dtype::bf16});
}

TEST_CASE("remote_keys_ref: a content_keyer through the reference gives the keyer's own keys") {
  static_assert(content_key_source<content_keyer>);
  static_assert(std::is_convertible_v<const content_keyer*, remote_keys_ref>);
  static_assert(std::is_convertible_v<content_keyer*, remote_keys_ref>);
  static_assert(std::is_convertible_v<std::nullptr_t, remote_keys_ref>);
  // Not from a pointer to another reference (it would dangle with it), nor from a type without the calls.
  static_assert(!std::is_convertible_v<const remote_keys_ref*, remote_keys_ref>);
  static_assert(!std::is_convertible_v<const int*, remote_keys_ref>);
  static_assert(sizeof(remote_keys_ref) == 2 * sizeof(void*));

  const content_keyer keyer = ok(content_keyer::make(tiny_context(), tiny_config()));
  const remote_keys_ref empty;
  CHECK(empty == nullptr);
  CHECK_FALSE(empty);
  CHECK(remote_keys_ref(static_cast<const content_keyer*>(nullptr)) == nullptr);

  cache_options o;
  CHECK(o.remote_keys == nullptr);
  o.remote_keys = &keyer;
  CHECK(o.remote_keys != nullptr);
  const remote_keys_ref copy = *o.remote_keys;
  const auto t = iota_tokens(8, 100);
  const content_key root = keyer.root(tiny_extra);
  CHECK(root != content_key{});
  CHECK(o.remote_keys->root(tiny_extra) == root);
  CHECK(copy.chain(root, t) == keyer.chain(root, t));
  CHECK(copy.snapshot(root, 8) == keyer.snapshot(root, 8));
  CHECK(keyer.chain(root, t) == ok(block_keys(tiny_context(), tiny_extra, t, 8))[0]);
}
