// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// How the remote tier names what it stores: the `content_key_source` concept and `remote_keys_ref`, the
/// handle to one that `cache_options::remote_keys` holds.
///
/// The in-process cache names blocks with a `hasher` (block_key.hpp), a template parameter of the cache. The
/// remote tier's keys are the fleet's, chosen at run time from its seed and the model's fingerprint, and the
/// cache must not depend on how they are derived (`content_keyer` of content_key.hpp needs OpenSSL). So the
/// cache names them through this concept too, and holds its source by a type-erased reference: an object
/// pointer and a static table of four function pointers, no allocation, no base class.

#include <reprise/keys/block_key.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise {

/// A source of content keys: names what the remote tier (`policy::remote_tier`) stores, the same way in every
/// process of a fleet.
///   root(extra)                key_{-1}, the chain's root, from the extra keys;
///   chain(parent, block, media) key_i = H(key_{i-1}, the B tokens of block i, their media digest);
///   snapshot(block, position)  a prefill-exact snapshot at block end `position`, whose block has key `block`;
///   turn_end(block, boundary)  the index of a turn end at a position in [boundary, boundary + B), block end
///                              `boundary` having key `block` (key_{-1} at 0).
/// Each returns all zeros when it cannot compute a key: the value is then neither stored nor fetched.
template <class K>
concept content_key_source = requires(const K& k, const extra_keys& extra, const content_key& key,
                                      std::span<const token_id> block, const media_digest& media,
                                      std::uint32_t position) {
  { k.root(extra) } noexcept -> std::same_as<content_key>;
  { k.chain(key, block, media) } noexcept -> std::same_as<content_key>;
  { k.snapshot(key, position) } noexcept -> std::same_as<content_key>;
  { k.turn_end(key, position) } noexcept -> std::same_as<content_key>;
};

namespace detail {

/// The calls of a `content_key_source`, on an object whose type is erased.
struct content_key_calls {
  content_key (*root)(const void*, const extra_keys&) noexcept;
  content_key (*chain)(const void*, const content_key&, std::span<const token_id>, const media_digest&) noexcept;
  content_key (*snapshot)(const void*, const content_key&, std::uint32_t) noexcept;
  content_key (*turn_end)(const void*, const content_key&, std::uint32_t) noexcept;
};

template <content_key_source K>
inline constexpr content_key_calls content_key_calls_of{
    [](const void* k, const extra_keys& extra) noexcept { return static_cast<const K*>(k)->root(extra); },
    [](const void* k, const content_key& parent, std::span<const token_id> block, const media_digest& media) noexcept {
      return static_cast<const K*>(k)->chain(parent, block, media);
    },
    [](const void* k, const content_key& block, std::uint32_t position) noexcept {
      return static_cast<const K*>(k)->snapshot(block, position);
    },
    [](const void* k, const content_key& block, std::uint32_t boundary) noexcept {
      return static_cast<const K*>(k)->turn_end(block, boundary);
    },
};

} // namespace detail

/// A non-owning reference to a `content_key_source` of any type (`cache_options::remote_keys`); empty by
/// default. It converts implicitly from a pointer to a source, and is used like one: `keys == nullptr`,
/// `keys->chain(parent, block, media)`, `*keys`. The source must outlive every copy (the engine keeps it alive as long
/// as the cache).
///
/// Complexity: a call is one indirect call; copying copies two pointers.
class remote_keys_ref {
public:
  constexpr remote_keys_ref() noexcept = default;
  constexpr remote_keys_ref(std::nullptr_t) noexcept {}
  /// Refers to `*keys`; empty when `keys` is null. Not from a pointer to another reference, which would
  /// dangle once that one is gone: copy it instead.
  template <content_key_source K>
    requires(!std::same_as<K, remote_keys_ref>)
  constexpr remote_keys_ref(const K* keys) noexcept
      : object_(keys), calls_(keys == nullptr ? nullptr : &detail::content_key_calls_of<K>) {}

  /// The source's calls. Precondition: not empty.
  content_key root(const extra_keys& extra) const noexcept { return calls_->root(object_, extra); }
  content_key chain(const content_key& parent, std::span<const token_id> block,
                    const media_digest& media) const noexcept {
    return calls_->chain(object_, parent, block, media);
  }
  content_key snapshot(const content_key& block, std::uint32_t position) const noexcept {
    return calls_->snapshot(object_, block, position);
  }
  content_key turn_end(const content_key& block, std::uint32_t boundary) const noexcept {
    return calls_->turn_end(object_, block, boundary);
  }

  /// Pointer-like use: `keys->chain(...)` and `*keys` are the reference itself.
  constexpr const remote_keys_ref* operator->() const noexcept { return this; }
  constexpr const remote_keys_ref& operator*() const noexcept { return *this; }
  constexpr explicit operator bool() const noexcept { return object_ != nullptr; }
  friend constexpr bool operator==(const remote_keys_ref& r, std::nullptr_t) noexcept { return r.object_ == nullptr; }

private:
  const void* object_ = nullptr;
  const detail::content_key_calls* calls_ = nullptr;
};

static_assert(content_key_source<remote_keys_ref>);

} // namespace reprise
