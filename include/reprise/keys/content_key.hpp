// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Content keys: the fleet-wide names of KV blocks and recurrent-state snapshots.
///
/// A block or a snapshot that leaves the process (host memory shared with other engines, a Redis / Valkey
/// store) must be found again by any engine process of the fleet that would compute the same bytes. Its
/// content key is a full SHA-256 digest that every such process derives the same way from the same inputs:
///
///   fingerprint = H(tag, "fingerprint", model revision, key block size, the state layout of every layer)
///   key_{-1}    = H(tag, "root", fleet seed, fingerprint, model revision, LoRA id, tenant salt)
///   key_i       = H(key_{i-1}, the B tokens of block i as little-endian int32 [, M_i])
///   snapshot    = H(tag, "snapshot", key_{floor(p/B)-1}, M_tail, the tokens [floor(p/B) B, p), p, exactness, dtypes)
///   turn end    = H(tag, "turn-end", 1, key_{k-1}, k B, dtypes)   (the store's index of a turn end at p in [kB, kB + B))
///
/// with tag = `content_key_format` ("reprise/content-key/v2"). M_i is the `media_digest` of the media items in
/// block i (media_keys.hpp), appended only when the block holds one, and M_tail that of the items in
/// [floor(p/B) B, p), 32 zero bytes when there is none: media items are positional, so a prefix before a
/// prompt's first item has the keys of the same text prompt. The byte layout is a wire format, specified in
/// docs/key-format.md with test vectors; changing any byte of it means a new tag, so keys of two formats
/// never meet (v1 put a single media digest in the root; its keys are misses under v2, never wrong). The
/// in-process cache keeps its own 128-bit `block_key`s (`xxh3_hasher`, `sha256_hasher`); content keys are
/// separate and never truncated, because a store shared by a fleet cannot verify tokens the way the cache
/// does on every hit.
///
/// Every function is a pure function of its arguments: no call keeps state, so any thread may call any of
/// them at any time. Each creates its own OpenSSL EVP digest contexts for the duration of the call.
///
/// Opt-in: link `reprise::sha256` (CMake component `sha256`, pkg-config `reprise-sha256`), which adds OpenSSL
/// libcrypto; the umbrella header <reprise/reprise.hpp> does not include this one.

#include <reprise/errc.hpp>
#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>
#include <reprise/keys/media_keys.hpp>
#include <reprise/keys/remote_keys.hpp>
#include <reprise/state/model_config.hpp>

#include <openssl/evp.h>

#include <array>
#include <bit>
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace reprise {

/// The format tag at the start of every tagged message (and so, through key_{-1}, of every key). A change
/// to any byte layout of docs/key-format.md must change it.
inline constexpr std::string_view content_key_format = "reprise/content-key/v2";
inline constexpr std::uint32_t content_key_format_version = 2;

// The wire format writes these enumerations as their numeric values; reordering them would silently change
// every key. docs/key-format.md lists the same numbers.
static_assert(static_cast<int>(dtype::f32) == 0 && static_cast<int>(dtype::bf16) == 1 &&
                  static_cast<int>(dtype::f16) == 2 && static_cast<int>(dtype::f64) == 3 &&
                  static_cast<int>(dtype::f8_e4m3) == 4 && static_cast<int>(dtype::f8_e5m2) == 5,
              "dtype codes are part of the content-key format (docs/key-format.md)");
static_assert(static_cast<int>(exactness::prefill_exact) == 0 && static_cast<int>(exactness::decode_continuation) == 1,
              "exactness codes are part of the content-key format (docs/key-format.md)");
static_assert(static_cast<int>(state_family::kv_block) == 0 && static_cast<int>(state_family::mamba2) == 1 &&
                  static_cast<int>(state_family::gated_delta) == 2,
              "layer kind codes are part of the content-key format (docs/key-format.md)");

/// Everything besides the tokens that makes two processes' KV blocks and snapshots interchangeable, as one
/// digest: the caller's model revision and the state layout of a `model_config`.
struct model_fingerprint {
  std::array<std::uint8_t, 32> digest{};
  /// The model's key block size (its KV block size; one chunk for an attention-free model). 0 for a
  /// fingerprint that was never computed, which every key function refuses.
  std::uint32_t block_size = 0;
  friend constexpr bool operator==(const model_fingerprint&, const model_fingerprint&) = default;

  /// Digests `revision` and `config`: the key block size, then the layer groups in order with adjacent equal
  /// groups merged (so {A x 2} and {A x 1, A x 1} describe one model), each as its layer count, kind and
  /// every field of its shape, dtypes and block or chunk size included.
  ///
  /// `revision` names the weights, and anything else that changes the bytes of a KV block or a snapshot that
  /// the layout does not show: quantization, the tensor-parallel degree and rank, a kernel version whose
  /// numerics differ. Processes that give the same revision claim bitwise-equal state for equal inputs.
  ///
  /// Errors: `unsupported_config` when OpenSSL cannot compute SHA-256 (no provider offers it, or it ran out
  /// of memory).
  static result<model_fingerprint> make(const model_config& config, std::string_view revision);
};

/// What every key of a fleet is derived from, created once per model: processes with equal contexts (and
/// equal extra keys) compute equal keys.
struct content_key_context {
  /// A fleet-wide secret or constant. Fleets, or deployments, with different seeds never share a key.
  std::uint64_t fleet_seed = 0;
  model_fingerprint fingerprint{};
};

/// The element types a snapshot stores its recurrent layers' states in: the matrix state (SSM or delta-rule)
/// and the causal-conv window. A snapshot stored in other types than the model's (e.g. down-converted by a
/// tier) is different content and gets a different key.
struct snapshot_dtypes {
  dtype state = dtype::f32;
  dtype conv = dtype::bf16;
  friend constexpr bool operator==(const snapshot_dtypes&, const snapshot_dtypes&) = default;

  /// The model's own: the types every recurrent layer of `config` declares. Errors: `invalid_argument` for a
  /// model without recurrent layers; `unsupported_config` when its recurrent layers declare different types
  /// (format v1 names one pair per snapshot).
  static result<snapshot_dtypes> of(const model_config& config);
};

namespace detail {

/// One SHA-256 computation through OpenSSL EVP, with the format's field encodings. A failure of OpenSSL is
/// sticky: every later call does nothing and `finish` reports it.
class content_digest {
public:
  content_digest() : context_(EVP_MD_CTX_new()) {}

  /// Starts a new message. With a non-empty `label`, the message opens with the format tag and the label,
  /// each followed by a zero byte.
  void begin(std::string_view label = {}) noexcept {
    ok_ = context_ != nullptr && EVP_DigestInit_ex(context_.get(), EVP_sha256(), nullptr) == 1;
    if (label.empty()) return;
    text(content_key_format);
    text(label);
  }
  void bytes(const void* p, std::size_t n) noexcept {
    if (ok_ && n != 0) ok_ = EVP_DigestUpdate(context_.get(), p, n) == 1;
  }
  void u8(std::uint8_t v) noexcept { bytes(&v, 1); }
  void u32(std::uint32_t v) noexcept { little_endian(v, 4); }
  void u64(std::uint64_t v) noexcept { little_endian(v, 8); }
  /// Tokens as little-endian int32, no count.
  void tokens(std::span<const token_id> t) noexcept {
    if constexpr (std::endian::native == std::endian::little) {
      bytes(t.data(), t.size_bytes());
    } else {
      for (token_id x : t) u32(static_cast<std::uint32_t>(x));
    }
  }
  /// The digest, or false after a failure of OpenSSL.
  bool finish(std::array<std::uint8_t, 32>& out) noexcept {
    unsigned char digest[EVP_MAX_MD_SIZE];
    unsigned int size = 0;
    if (!ok_ || EVP_DigestFinal_ex(context_.get(), digest, &size) != 1 || size != out.size()) return false;
    std::memcpy(out.data(), digest, out.size());
    return true;
  }

private:
  struct context_deleter {
    void operator()(EVP_MD_CTX* c) const noexcept { EVP_MD_CTX_free(c); }
  };

  void text(std::string_view s) noexcept {
    bytes(s.data(), s.size());
    u8(0);
  }
  void little_endian(std::uint64_t v, int n) noexcept {
    unsigned char le[8];
    for (int i = 0; i < n; ++i) le[i] = static_cast<unsigned char>(v >> (8 * i));
    bytes(le, static_cast<std::size_t>(n));
  }

  std::unique_ptr<EVP_MD_CTX, context_deleter> context_;
  bool ok_ = false;
};

inline void digest_shape(content_digest& d, const kv_shape& s) noexcept {
  d.u32(s.kv_heads);
  d.u32(s.head_dim);
  d.u32(s.block_size);
  d.u8(static_cast<std::uint8_t>(s.type));
}
inline void digest_shape(content_digest& d, const mamba2_shape& s) noexcept {
  d.u32(s.heads);
  d.u32(s.head_dim);
  d.u32(s.state_dim);
  d.u32(s.groups);
  d.u32(s.conv_width);
  d.u32(s.chunk);
  d.u8(static_cast<std::uint8_t>(s.state_type));
  d.u8(static_cast<std::uint8_t>(s.conv_type));
}
inline void digest_shape(content_digest& d, const gated_delta_shape& s) noexcept {
  d.u32(s.key_heads);
  d.u32(s.value_heads);
  d.u32(s.key_dim);
  d.u32(s.value_dim);
  d.u32(s.conv_width);
  d.u32(s.chunk);
  d.u8(static_cast<std::uint8_t>(s.state_type));
  d.u8(static_cast<std::uint8_t>(s.conv_type));
}

/// `invalid_argument` for a context whose fingerprint was never computed or a block size it disagrees with.
inline errc check_block_size(const content_key_context& c, std::uint32_t block_size) noexcept {
  if (c.fingerprint.block_size == 0 || block_size != c.fingerprint.block_size) return errc::invalid_argument;
  return errc{};
}

/// key_i from key_{i-1} `parent`, the block's tokens and its media digest (appended only when not empty: with
/// B fixed by the fingerprint, the message's length tells the two forms apart). False after a failure of
/// OpenSSL.
inline bool chain_content_block(content_digest& d, const content_key& parent, std::span<const token_id> tokens,
                        const media_digest& media, content_key& out) noexcept {
  d.begin();
  d.bytes(parent.bytes.data(), parent.bytes.size());
  d.tokens(tokens);
  if (!media.empty()) d.bytes(media.bytes.data(), media.bytes.size());
  return d.finish(out.bytes);
}

/// Appends the keys of the full blocks of `tokens`, chained from `parent`, with the media items `media`
/// (positions counted from tokens[0], which starts a block). False after a failure of OpenSSL.
inline bool chain_full_blocks(content_digest& d, content_key parent, std::span<const token_id> tokens,
                              std::uint32_t block_size, std::span<const media_item> media,
                              std::vector<content_key>& out) {
  for (std::size_t b = 0; b + block_size <= tokens.size(); b += block_size) {
    const media_digest m = media_digest_of(media, b, b + block_size);
    if (!chain_content_block(d, parent, tokens.subspan(b, block_size), m, parent)) return false;
    out.push_back(parent);
  }
  return true;
}

/// The checks of media items for a key: sorted by strictly increasing position, digests of at most
/// `max_multimodal_digest_bytes` (positions past the tokens are allowed: they key no block of them).
inline errc check_key_media(std::span<const media_item> media) noexcept {
  const errc e = check_media(media, std::numeric_limits<std::size_t>::max());
  return e == errc::out_of_range ? errc{} : e;
}

/// `snapshot_key` with the tail's media digest computed.
inline result<content_key> snapshot_key_with(const content_key_context& context, const content_key& parent,
                                             std::span<const token_id> tail, std::uint64_t position,
                                             exactness exact, snapshot_dtypes dtypes, const media_digest& media) {
  const std::uint32_t block_size = context.fingerprint.block_size;
  if (block_size == 0) return failure{errc::invalid_argument};
  if (exact != exactness::prefill_exact && exact != exactness::decode_continuation)
    return failure{errc::invalid_argument};
  if (!is_valid(dtypes.state) || !is_valid(dtypes.conv)) return failure{errc::invalid_argument};
  if (tail.size() != position % block_size) return failure{errc::size_mismatch};
  content_digest d;
  d.begin("snapshot");
  d.bytes(parent.bytes.data(), parent.bytes.size());
  d.bytes(media.bytes.data(), media.bytes.size());
  d.tokens(tail);
  d.u64(position);
  d.u8(static_cast<std::uint8_t>(exact));
  d.u8(static_cast<std::uint8_t>(dtypes.state));
  d.u8(static_cast<std::uint8_t>(dtypes.conv));
  content_key k;
  if (!d.finish(k.bytes)) return failure{errc::unsupported_config};
  return k;
}

} // namespace detail

inline result<model_fingerprint> model_fingerprint::make(const model_config& config, std::string_view revision) {
  // Runs of equal adjacent groups, so that the digest depends on the layer sequence, not on its grouping.
  // The total layer count fits in 32 bits (model_config checks it), so every run's does.
  struct run {
    const layer_spec* spec;
    std::uint32_t count;
  };
  std::vector<run> runs;
  for (const layer_spec& g : config.groups()) {
    if (!runs.empty() && runs.back().spec->shape == g.shape) runs.back().count += g.count;
    else runs.push_back({&g, g.count});
  }

  detail::content_digest d;
  d.begin("fingerprint");
  d.u64(revision.size());
  d.bytes(revision.data(), revision.size());
  d.u32(config.block_size());
  d.u32(static_cast<std::uint32_t>(runs.size()));
  for (const run& r : runs) {
    d.u32(r.count);
    d.u8(static_cast<std::uint8_t>(r.spec->family()));
    std::visit([&](const auto& s) { detail::digest_shape(d, s); }, r.spec->shape);
  }
  model_fingerprint f;
  if (!d.finish(f.digest)) return failure{errc::unsupported_config};
  f.block_size = config.block_size();
  return f;
}

inline result<snapshot_dtypes> snapshot_dtypes::of(const model_config& config) {
  std::optional<snapshot_dtypes> found;
  bool agree = true;
  for (const layer_spec& g : config.groups()) {
    std::visit(
        [&](const auto& s) {
          if constexpr (requires { s.state_type; }) {
            const snapshot_dtypes t{s.state_type, s.conv_type};
            if (found && *found != t) agree = false;
            found = t;
          }
        },
        g.shape);
  }
  if (!found) return failure{errc::invalid_argument};
  if (!agree) return failure{errc::unsupported_config};
  return *found;
}

/// key_{-1}: the root of every chain of `context` with the root-level extra keys of `extra`, all three
/// hashed (a content-key match never joins what the in-process cache keeps apart). Set
/// `extra.model_revision` alike across the fleet, or leave it 0: the model is named by the fingerprint.
/// `extra.media` is not part of the root: media items key the blocks holding them (`block_keys`).
///
/// Errors: `invalid_argument` (a context without a computed fingerprint), `unsupported_config` (OpenSSL
/// cannot compute SHA-256).
inline result<content_key> root_key(const content_key_context& context, const extra_keys& extra) {
  if (context.fingerprint.block_size == 0) return failure{errc::invalid_argument};
  detail::content_digest d;
  d.begin("root");
  d.u64(context.fleet_seed);
  d.bytes(context.fingerprint.digest.data(), context.fingerprint.digest.size());
  d.u64(extra.model_revision);
  d.u64(extra.lora_id);
  d.u64(extra.tenant_salt);
  content_key k;
  if (!d.finish(k.bytes)) return failure{errc::unsupported_config};
  return k;
}

/// The keys of the full blocks of `tokens`: key_0 .. key_{n-1} for n = floor(size / block_size), each with
/// the media items of `extra.media` in its range. A partial last block has no key. The keys of a prefix's
/// blocks are a prefix of these, and up to the block holding the first media item they are those of the
/// same tokens without media.
///
/// A block key names the prefill-exact KV of its prefix (what a cold chunked prefill computes): a block whose
/// KV is `decode_continuation` may differ in its bits and is not to be published under its chain key.
///
/// Errors: those of `root_key`; `invalid_argument` when `block_size` is not the fingerprint's (the engine
/// cuts its blocks differently from the model it fingerprinted), or for media items out of order, at one
/// position twice, or with a digest over `max_multimodal_digest_bytes` (items past the tokens key nothing).
/// Nothing is returned on failure. Complexity: one SHA-256 over 32 + 4B bytes per full block, and one more
/// per block holding media.
inline result<std::vector<content_key>> block_keys(const content_key_context& context, const extra_keys& extra,
                                                   std::span<const token_id> tokens, std::uint32_t block_size) {
  if (const errc e = detail::check_block_size(context, block_size); e != errc{}) return failure{e};
  if (const errc e = detail::check_key_media(extra.media); e != errc{}) return failure{e};
  const result<content_key> root = root_key(context, extra);
  if (!root) return failure{root.error()};
  std::vector<content_key> keys;
  keys.reserve(tokens.size() / block_size);
  detail::content_digest d;
  if (!detail::chain_full_blocks(d, *root, tokens, block_size, extra.media, keys))
    return failure{errc::unsupported_config};
  return keys;
}

/// The keys of the full blocks of `tokens`, continuing a chain after `parent` (the key of the block just
/// before `tokens[0]`, or key_{-1}): how keys of blocks filled later (decode, a next turn) are computed
/// without rehashing the prefix. `media`: the media items in `tokens`, their positions counted from
/// tokens[0]. block_keys(t) == block_keys(t[0, kB)) followed by block_keys_after(its last key, t[kB, ...)),
/// with the items past kB moved down by kB.
///
/// Errors: `invalid_argument` (no computed fingerprint, a block size not the fingerprint's, media items as
/// `block_keys` refuses them), `unsupported_config` (OpenSSL). Nothing is returned on failure.
inline result<std::vector<content_key>> block_keys_after(const content_key_context& context,
                                                         const content_key& parent,
                                                         std::span<const token_id> tokens,
                                                         std::uint32_t block_size,
                                                         std::span<const media_item> media = {}) {
  if (const errc e = detail::check_block_size(context, block_size); e != errc{}) return failure{e};
  if (const errc e = detail::check_key_media(media); e != errc{}) return failure{e};
  std::vector<content_key> keys;
  keys.reserve(tokens.size() / block_size);
  detail::content_digest d;
  if (!detail::chain_full_blocks(d, parent, tokens, block_size, media, keys)) return failure{errc::unsupported_config};
  return keys;
}

/// The key of a snapshot of the recurrent state after the first `position` tokens: `parent` is the key of
/// the last full block before `position` (block floor(position / B) - 1), or key_{-1} when position < B,
/// and `tail` the tokens [floor(position / B) B, position), empty at a block boundary. `media`: the prompt's
/// media items (absolute positions, as `extra_keys::media`); those in [floor(position / B) B, position) key
/// the snapshot beside the tail's tokens (earlier ones are in `parent`'s chain, later ones do not reach it).
///
/// Errors: `invalid_argument` (no computed fingerprint, an `exactness` or a dtype outside its enumeration,
/// media items as `block_keys` refuses them), `size_mismatch` (`tail.size() != position % B`),
/// `unsupported_config` (OpenSSL).
inline result<content_key> snapshot_key(const content_key_context& context, const content_key& parent,
                                        std::span<const token_id> tail, std::uint64_t position,
                                        exactness exact, snapshot_dtypes dtypes,
                                        std::span<const media_item> media = {}) {
  if (const errc e = detail::check_key_media(media); e != errc{}) return failure{e};
  return detail::snapshot_key_with(context, parent, tail, position, exact, dtypes,
                                   media_digest_of(media, position - tail.size(), position));
}

/// The version of the turn-end message below; a change to its layout is a new version, never a change to v1.
inline constexpr std::uint32_t turn_end_key_version = 1;

/// The name under which the remote store keeps a conversation's turn end (its decode-continuation snapshot,
/// the decode-filled blocks before it and its partial block: one value, docs/tiers.md) whose position p lies
/// in [boundary, boundary + B): `boundary` is a block end (k B, 0 allowed), `block` the chain key of the k
/// full blocks before it (key_{k-1}; key_{-1} for k = 0). A reader derives it from its own prompt at every
/// block boundary, without knowing p: the value's header then says p and carries the tokens to verify.
///
/// Errors: `invalid_argument` (no computed fingerprint, a boundary off the block grid, a dtype outside its
/// enumeration), `unsupported_config` (OpenSSL).
inline result<content_key> turn_end_key(const content_key_context& context, const content_key& block,
                                        std::uint64_t boundary, snapshot_dtypes dtypes) {
  const std::uint32_t block_size = context.fingerprint.block_size;
  if (block_size == 0 || boundary % block_size != 0) return failure{errc::invalid_argument};
  if (!is_valid(dtypes.state) || !is_valid(dtypes.conv)) return failure{errc::invalid_argument};
  detail::content_digest d;
  d.begin("turn-end");
  d.u32(turn_end_key_version);
  d.bytes(block.bytes.data(), block.bytes.size());
  d.u64(boundary);
  d.u8(static_cast<std::uint8_t>(dtypes.state));
  d.u8(static_cast<std::uint8_t>(dtypes.conv));
  content_key k;
  if (!d.finish(k.bytes)) return failure{errc::unsupported_config};
  return k;
}

/// The `content_key_source` of `policy::remote_tier` (`cache_options::remote_keys = &keyer;`): the keys of this
/// file, so every process of a fleet with equal contexts names equal blocks and snapshots alike. A key OpenSSL
/// cannot compute comes back all zero, and the cache then neither stores nor fetches that value.
class content_keyer final {
public:
  /// Errors: `invalid_argument` (a context without a computed fingerprint, whose block size must be the
  /// model's), those of `snapshot_dtypes::of` (a model whose recurrent layers disagree on their dtypes).
  static result<content_keyer> make(const content_key_context& context, const model_config& config) {
    if (context.fingerprint.block_size == 0 || context.fingerprint.block_size != config.block_size())
      return failure{errc::invalid_argument};
    if (!config.has_recurrent()) return content_keyer(context, snapshot_dtypes{});
    auto dtypes = snapshot_dtypes::of(config);
    if (!dtypes) return failure{dtypes.error()};
    return content_keyer(context, *dtypes);
  }

  content_key root(const extra_keys& keys) const noexcept {
    auto k = root_key(context_, keys);
    return k ? *k : content_key{};
  }
  content_key chain(const content_key& parent, std::span<const token_id> block,
                    const media_digest& media) const noexcept {
    detail::content_digest d;
    content_key k;
    return detail::chain_content_block(d, parent, block, media, k) ? k : content_key{};
  }
  content_key snapshot(const content_key& block, std::uint32_t position) const noexcept {
    auto k = snapshot_key(context_, block, {}, position, exactness::prefill_exact, dtypes_);
    return k ? *k : content_key{};
  }
  content_key turn_end(const content_key& block, std::uint32_t boundary) const noexcept {
    auto k = turn_end_key(context_, block, boundary, dtypes_);
    return k ? *k : content_key{};
  }

private:
  content_keyer(const content_key_context& c, snapshot_dtypes d) : context_(c), dtypes_(d) {}
  content_key_context context_;
  snapshot_dtypes dtypes_;
};
static_assert(content_key_source<content_keyer>);

/// Lowercase hex of the 32 bytes in order (Python's `hexdigest()`), for logs and store key names.
inline std::string to_hex(std::span<const std::uint8_t, 32> bytes) {
  static constexpr char digits[] = "0123456789abcdef";
  std::string s(64, '0');
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    s[2 * i] = digits[bytes[i] >> 4];
    s[2 * i + 1] = digits[bytes[i] & 0xF];
  }
  return s;
}
inline std::string to_hex(const content_key& k) { return to_hex(std::span<const std::uint8_t, 32>(k.bytes)); }
inline std::string to_hex(const model_fingerprint& f) {
  return to_hex(std::span<const std::uint8_t, 32>(f.digest));
}

} // namespace reprise

/// Content keys are uniformly distributed digests: any 8 of their bytes make a good hash.
template <>
struct std::hash<reprise::content_key> {
  std::size_t operator()(const reprise::content_key& k) const noexcept {
    std::uint64_t h;
    std::memcpy(&h, k.bytes.data(), sizeof h);
    return static_cast<std::size_t>(h);
  }
};
