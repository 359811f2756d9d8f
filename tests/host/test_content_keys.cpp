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
constexpr extra_keys tiny_extra{.lora_id = 7, .tenant_salt = 42};
// An image whose placeholders start at 10 (block 1 of 8 tokens) and one at 17 (in the tail [16, 20)).
constexpr media_item tiny_items[] = {{.position = 10, .digest = tiny_digest}, {.position = 17, .digest = tiny_digest}};
constexpr extra_keys tiny_media{.lora_id = 7, .tenant_salt = 42, .media = tiny_items};

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
    for (std::string_view s : {std::string_view("reprise/content-key/v2"), label}) {
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
  CHECK(content_key_format == "reprise/content-key/v2");
  CHECK(content_key_format_version == 2);
  const content_key_context c = tiny_context();
  CHECK(c.fingerprint.block_size == 8);
  CHECK(to_hex(c.fingerprint) == "b7a63341db90465658b06d92a4275db6c7313bf1e4200d4fc736a153b96bc8fd");
  CHECK(to_hex(ok(root_key(c, {}))) == "74c0592bb422fd7bf12050e860675e7f37f709c6fb6657b7f1dff8fd82105edd");
  const content_key root = ok(root_key(c, tiny_extra));
  CHECK(to_hex(root) == "10855177aec04a512d85fc10e288951690f437ea605001afb18dc4e77e0906ef");
  CHECK(ok(root_key(c, tiny_media)) == root); // media items are positional: not in the root

  const auto t = iota_tokens(20, 100); // 100 .. 119: two full blocks of 8 and a tail of 4
  const auto keys = ok(block_keys(c, tiny_extra, t, 8));
  REQUIRE(keys.size() == 2);
  CHECK(to_hex(keys[0]) == "255f0aee642a0364c5b0ea40a28da32f3388bff189bbeb5abb633b3220f6f67c");
  CHECK(to_hex(keys[1]) == "711abb6a2195f363798ef8d5e9d6186ace6fea3a475d569c9b89dfbe53cbd245");
  // With the image at 10: block 0 keeps the text key, block 1 folds in its media digest.
  const auto media_keys = ok(block_keys(c, tiny_media, t, 8));
  REQUIRE(media_keys.size() == 2);
  CHECK(media_keys[0] == keys[0]);
  CHECK(to_hex(media_keys[1]) == "de11e84cf8ecb0dc6ba18ef467cbd2e395bdbfc37425374b3c4b72ee83ddf394");

  const std::span<const token_id> all(t);
  const snapshot_dtypes dtypes{dtype::f32, dtype::bf16};
  CHECK(to_hex(ok(snapshot_key(c, keys[1], all.subspan(16, 4), 20, exactness::prefill_exact, dtypes))) == "70606e06117c57827016ad5d878bb188ea0f36d3ba4d678cb9a269c7a0435de4");
  CHECK(to_hex(ok(snapshot_key(c, keys[1], {}, 16, exactness::decode_continuation, dtypes))) == "213685238194e4b8f58586f921dacc992e9724a93e727838f247527fb4eafcf6");
  CHECK(to_hex(ok(snapshot_key(c, root, all.first(3), 3, exactness::prefill_exact, dtypes))) == "8836b13ed14837d4f3c5fc4248fca97a304d4cc56b3c1dad961a680294a4b07b");
  // The item at 17 lies in the tail [16, 20): it keys the snapshot at 20 beside the tail's tokens.
  CHECK(to_hex(ok(snapshot_key(c, media_keys[1], all.subspan(16, 4), 20, exactness::prefill_exact, dtypes,
                               tiny_items))) == "31c48b5fc3fb554bd77ee6a338e250b4e17f437996ffa2b700cc92aec636d43f");
  CHECK(ok(snapshot_key(c, media_keys[1], all.subspan(16, 1), 17, exactness::prefill_exact, dtypes, tiny_items)) ==
        ok(snapshot_key(c, media_keys[1], all.subspan(16, 1), 17, exactness::prefill_exact, dtypes))); // not before it
  CHECK(ok(snapshot_dtypes::of(tiny_config())) == dtypes);
  CHECK(to_hex(ok(turn_end_key(c, keys[1], 16, dtypes))) == "10c21b06a32497c2f6e160e8dedb10352512f1a49ff0f9cb2a3f57fe811c95b1");
  CHECK(to_hex(ok(turn_end_key(c, root, 0, dtypes))) == "9ba22a3b4b666da269dfd7886a935bf8efa7ce3e91fc0956843117105771a67a");
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
  root.tag("root").le(tiny_seed, 8).raw(fingerprint).le(0, 8).le(7, 8).le(42, 8);
  const auto root_digest = root.sha256();
  CHECK(ok(root_key(c, tiny_extra)).bytes == root_digest);

  const auto keys = ok(block_keys(c, tiny_extra, t, 8));
  message block0;
  block0.raw(root_digest).tokens(all.first(8));
  CHECK(keys[0].bytes == block0.sha256());

  // A block's media digest: "reprise/block-media/v1" 0, the item count, then per item its offset in the
  // block, its digest's size and bytes.
  auto media_of = [](std::initializer_list<std::uint32_t> offsets) {
    message m;
    const std::string_view tag = "reprise/block-media/v1";
    m.bytes.insert(m.bytes.end(), tag.begin(), tag.end());
    m.bytes.push_back(0);
    m.le(offsets.size(), 4);
    for (const std::uint32_t offset : offsets) {
      m.le(offset, 4).le(tiny_digest.size(), 1);
      for (std::byte b : tiny_digest) m.le(static_cast<std::uint8_t>(b), 1);
    }
    return m.sha256();
  };
  const auto media_keys = ok(block_keys(c, tiny_media, t, 8));
  message block1;
  block1.raw(keys[0].bytes).tokens(all.subspan(8, 8)).raw(media_of({2}));
  CHECK(media_keys[1].bytes == block1.sha256());

  message snapshot;
  const std::array<std::uint8_t, 32> no_media{};
  snapshot.tag("snapshot").raw(keys[1].bytes).raw(no_media).tokens(all.subspan(16, 4)).le(20, 8).le(1, 1).le(0, 1).le(1, 1);
  CHECK(ok(snapshot_key(c, keys[1], all.subspan(16, 4), 20, exactness::decode_continuation,
                        {dtype::f32, dtype::bf16}))
            .bytes == snapshot.sha256());
  message media_snapshot;
  media_snapshot.tag("snapshot").raw(media_keys[1].bytes).raw(media_of({1})).tokens(all.subspan(16, 4)).le(20, 8)
      .le(1, 1).le(0, 1).le(1, 1);
  CHECK(ok(snapshot_key(c, media_keys[1], all.subspan(16, 4), 20, exactness::decode_continuation,
                        {dtype::f32, dtype::bf16}, tiny_items))
            .bytes == media_snapshot.sha256());

  message turn_end;
  turn_end.tag("turn-end").le(1, 4).raw(keys[1].bytes).le(16, 8).le(0, 1).le(1, 1);
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::f32, dtype::bf16})).bytes == turn_end.sha256());
  // Not a snapshot key of the same block: the label keeps the two kinds of name apart.
  CHECK(ok(turn_end_key(c, keys[1], 16, {dtype::f32, dtype::bf16})) !=
        ok(snapshot_key(c, keys[1], {}, 16, exactness::decode_continuation, {dtype::f32, dtype::bf16})));
}

TEST_CASE("content keys: text-only prompts and prompts with media share keys up to the first media item's block") {
  const content_key_context c = tiny_context();
  const auto t = iota_tokens(48, 100); // 6 blocks of 8
  const auto text = ok(block_keys(c, tiny_extra, t, 8));
  auto with = [&](std::vector<media_item> items) {
    extra_keys x = tiny_extra;
    x.media = items;
    return ok(block_keys(c, x, t, 8));
  };
  const std::array<std::byte, 4> other{std::byte{1}, std::byte{2}, std::byte{3}, std::byte{4}};
  const auto image = with({{.position = 20, .digest = tiny_digest}}); // block 2
  REQUIRE(image.size() == text.size());
  for (std::size_t i = 0; i < text.size(); ++i) CHECK((image[i] == text[i]) == (i < 2));
  CHECK(with({{.position = 20, .digest = tiny_digest}}) == image); // the same item at the same position
  const auto moved = with({{.position = 21, .digest = tiny_digest}});
  const auto changed = with({{.position = 20, .digest = other}});
  const auto later = with({{.position = 28, .digest = tiny_digest}});
  for (std::size_t i = 0; i < text.size(); ++i) {
    CHECK((moved[i] == image[i]) == (i < 2));
    CHECK((changed[i] == image[i]) == (i < 2));
    CHECK((later[i] == text[i]) == (i < 3)); // block 2 is the text block again
    CHECK((later[i] != image[i] || i < 2));
  }
  // A second item changes keys from its own block on only.
  const auto two = with({{.position = 20, .digest = tiny_digest}, {.position = 36, .digest = other}});
  for (std::size_t i = 0; i < text.size(); ++i) CHECK((two[i] == image[i]) == (i < 4));
  // Items past the tokens key none of their blocks: a prefix's keys are a prefix of the longer prompt's.
  CHECK(ok(block_keys(c, tiny_media, std::span<const token_id>(t).first(8), 8)) ==
        ok(block_keys(c, tiny_extra, std::span<const token_id>(t).first(8), 8)));
  // block_keys_after continues a chain with media counted from its first token.
  const std::span<const token_id> all(t);
  const media_item relative[] = {{.position = 4, .digest = tiny_digest}};
  const auto rest = ok(block_keys_after(c, text[1], all.subspan(16), 8, relative));
  REQUIRE(rest.size() == 4);
  for (std::size_t i = 0; i < rest.size(); ++i) CHECK(rest[i] == image[2 + i]);
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
    for (extra_keys x : {extra_keys{.model_revision = 1, .lora_id = 7, .tenant_salt = 42}, extra_keys{.lora_id = 8, .tenant_salt = 42},
                         extra_keys{.lora_id = 7}, extra_keys{.lora_id = 7, .tenant_salt = 43}})
      differs_everywhere(c, x);
    // A media item at position 0 reaches every block too, whatever its digest (an empty one included).
    for (std::span<const std::byte> d : {std::span<const std::byte>(tiny_digest), std::span<const std::byte>(other_digest),
                                         std::span<const std::byte>(longer_digest), std::span<const std::byte>(full_digest),
                                         std::span<const std::byte>{}}) {
      const media_item at_start[] = {{.position = 0, .digest = d}};
      differs_everywhere(c, {.lora_id = 7, .tenant_salt = 42, .media = at_start});
    }
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
    const media_item in_tail[] = {{.position = 17, .digest = tiny_digest}};
    const media_item at_tail_start[] = {{.position = 16, .digest = tiny_digest}};
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::prefill_exact, d, in_tail)); // a tail item
    distinct(snapshot_key(c, base[1], all.subspan(16, 3), 19, exactness::prefill_exact, d, at_tail_start));
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

  // Media items: a digest longer than the cache stores, out of order, or two at one position.
  const std::array<std::byte, max_multimodal_digest_bytes + 1> too_long{};
  const media_item oversized[] = {{.position = 1, .digest = too_long}};
  const media_item unsorted[] = {{.position = 9, .digest = tiny_digest}, {.position = 1, .digest = tiny_digest}};
  const media_item duplicate[] = {{.position = 9, .digest = tiny_digest}, {.position = 9, .digest = tiny_digest}};
  for (std::span<const media_item> bad : {std::span<const media_item>(oversized), std::span<const media_item>(unsorted),
                                          std::span<const media_item>(duplicate)}) {
    CHECK(block_keys(c, {.media = bad}, t, 8).error() == errc::invalid_argument);
    CHECK(block_keys_after(c, root, t, 8, bad).error() == errc::invalid_argument);
    CHECK(snapshot_key(c, root, all.first(3), 3, exactness::prefill_exact, d, bad).error() == errc::invalid_argument);
  }

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
  CHECK(copy.chain(root, t, {}) == keyer.chain(root, t, {}));
  CHECK(copy.snapshot(root, 8) == keyer.snapshot(root, 8));
  CHECK(keyer.chain(root, t, {}) == ok(block_keys(tiny_context(), tiny_extra, t, 8))[0]);
  // With media: the block's media digest (media_keys.hpp), as block_keys computes it.
  const media_item image[] = {{.position = 3, .digest = tiny_digest}};
  const media_digest m = media_digest_of(std::span<const media_item>(image), 0, 8);
  CHECK(copy.chain(root, t, m) == ok(block_keys(tiny_context(), {.lora_id = 7, .tenant_salt = 42, .media = image}, t, 8))[0]);
  CHECK(copy.chain(root, t, m) != keyer.chain(root, t, {}));
}
