// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What an engine tells a fleet router it holds: `state_event` (a KV block or a snapshot stored or removed,
/// by content key, class and position), the `state_key_source` concept that names them, and
/// `state_keys_ref`, the handle to one that `cache_options::state_events` holds (a cache then reports its
/// events, `prefix_cache::take_state_events`). The router is <reprise/routing/state_router.hpp>.

#include <reprise/ids.hpp>
#include <reprise/keys/block_key.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>

namespace reprise {

/// What an event names: the KV of one full block, or a snapshot of the whole recurrent state.
enum class state_kind : std::uint8_t { kv_block, snapshot };

/// Whether the engine now holds it or no longer does.
enum class state_change : std::uint8_t { stored, removed };

/// One report of an engine: it stored or removed one KV block or one snapshot.
///
/// - A KV block: `key` is its chain content key key_i (`block_keys`, `block_keys_after` of
///   <reprise/keys/content_key.hpp>), `position` its end (i + 1) B, `exact` the class of its KV (a hybrid
///   model's decode-filled blocks are `decode_continuation`). The class travels beside the key: one chain key
///   names a prefix, and an engine may hold that prefix's prefill-computed and decode-filled KV as two blocks.
/// - A snapshot at position p: `key` is its snapshot key (`snapshot_key`, whose message holds the tail tokens
///   [floor(p/B) B, p), p and the class), `parent` the chain key of the block before it, key_{floor(p/B)-1}
///   (key_{-1}, the root, for p < B), `position` p and `exact` its class. Prefill-exact snapshots sit at
///   multiples of the alignment unit; decode-continuation ones (turn ends, decode checkpoints) anywhere.
///
/// Events are idempotent: a second `stored` of what the index holds is a touch (it becomes the most recently
/// reported), a `removed` of what it does not hold is ignored. An entry is named by (kind, key, class).
struct state_event {
  state_change change = state_change::stored;
  state_kind kind = state_kind::kv_block;
  exactness exact = exactness::prefill_exact;
  std::uint64_t position = 0; ///< a block's end, a snapshot's position
  content_key key{};          ///< key_i of a block, the snapshot key of a snapshot
  content_key parent{};       ///< a snapshot's key_{floor(p/B)-1}; unused for a block

  static constexpr state_event block(state_change change, const content_key& key, std::uint64_t end,
                                     exactness exact = exactness::prefill_exact) noexcept {
    return {change, state_kind::kv_block, exact, end, key, {}};
  }
  static constexpr state_event snapshot(state_change change, const content_key& key, const content_key& parent,
                                        std::uint64_t position, exactness exact) noexcept {
    return {change, state_kind::snapshot, exact, position, key, parent};
  }
};

/// What names the state a cache holds for a fleet router (`cache_options::state_events`), and what the router
/// (`routing::state_router`) hashes a prompt with: both must name state the same way.
///   root(extra)                              key_{-1}, the chain's root, from the extra keys;
///   chain(parent, block, media)              key_i = H(key_{i-1}, the B tokens of block i, the media
///                                            digest of the items among them);
///   snapshot(parent, tail, position, exact, media)
///                                            the snapshot key at `position` of either class, `parent`
///                                            being key_{floor(position/B)-1}, `tail` the tokens
///                                            [floor(position/B) B, position) and `media` the digest of the
///                                            media items among them.
/// Each returns all zeros when it cannot compute a key (nothing is reported under it; the router scores as if
/// nothing matched). `routing::fleet_keys` (<reprise/routing/fleet_keys.hpp>) is the content keys of
/// docs/key-format.md.
template <class K>
concept state_key_source = requires(const K& k, const extra_keys& extra, const content_key& key,
                                    std::span<const token_id> tokens, const media_digest& media,
                                    std::uint64_t position, exactness exact) {
  { k.root(extra) } noexcept -> std::same_as<content_key>;
  { k.chain(key, tokens, media) } noexcept -> std::same_as<content_key>;
  { k.snapshot(key, tokens, position, exact, media) } noexcept -> std::same_as<content_key>;
};

namespace detail {
/// The calls of a `state_key_source`, on an object whose type is erased.
struct state_key_calls {
  content_key (*root)(const void*, const extra_keys&) noexcept;
  content_key (*chain)(const void*, const content_key&, std::span<const token_id>, const media_digest&) noexcept;
  content_key (*snapshot)(const void*, const content_key&, std::span<const token_id>, std::uint64_t, exactness,
                          const media_digest&) noexcept;
};
template <state_key_source K>
inline constexpr state_key_calls state_key_calls_of{
    [](const void* k, const extra_keys& extra) noexcept { return static_cast<const K*>(k)->root(extra); },
    [](const void* k, const content_key& parent, std::span<const token_id> block, const media_digest& media) noexcept {
      return static_cast<const K*>(k)->chain(parent, block, media);
    },
    [](const void* k, const content_key& parent, std::span<const token_id> tail, std::uint64_t position,
       exactness exact, const media_digest& media) noexcept {
      return static_cast<const K*>(k)->snapshot(parent, tail, position, exact, media);
    },
};
} // namespace detail

/// A non-owning reference to a `state_key_source` of any type; empty by default, converts implicitly from a
/// pointer to a source. The source must outlive every copy. Complexity: a call is one indirect call.
class state_keys_ref {
public:
  constexpr state_keys_ref() noexcept = default;
  constexpr state_keys_ref(std::nullptr_t) noexcept {}
  template <state_key_source K>
    requires(!std::same_as<K, state_keys_ref>)
  constexpr state_keys_ref(const K* keys) noexcept
      : object_(keys), calls_(keys == nullptr ? nullptr : &detail::state_key_calls_of<K>) {}

  /// The source's calls. Precondition: not empty.
  content_key root(const extra_keys& extra) const noexcept { return calls_->root(object_, extra); }
  content_key chain(const content_key& parent, std::span<const token_id> block,
                    const media_digest& media) const noexcept {
    return calls_->chain(object_, parent, block, media);
  }
  content_key snapshot(const content_key& parent, std::span<const token_id> tail, std::uint64_t position,
                       exactness exact, const media_digest& media) const noexcept {
    return calls_->snapshot(object_, parent, tail, position, exact, media);
  }
  constexpr explicit operator bool() const noexcept { return object_ != nullptr; }
  friend constexpr bool operator==(const state_keys_ref& r, std::nullptr_t) noexcept { return r.object_ == nullptr; }

private:
  const void* object_ = nullptr;
  const detail::state_key_calls* calls_ = nullptr;
};
static_assert(state_key_source<state_keys_ref>);

} // namespace reprise
