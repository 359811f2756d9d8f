// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `fleet_keys`: the content keys of docs/key-format.md as a `route_key_source`, so a `state_router` hashes
/// prompts the way engines name the blocks and snapshots they report.
///
/// `content_keyer`, the remote tier's source, names only what a store may hold: prefill-exact snapshots at
/// block ends. A router also scores turn-end snapshots, decode-continuation state at any position whose key
/// carries the tail tokens, so its snapshot call is `snapshot_key` itself, with every argument.
///
/// Opt-in, like <reprise/keys/content_key.hpp>: link `reprise::sha256` (OpenSSL libcrypto).

#include <reprise/keys/content_key.hpp>
#include <reprise/routing/state_router.hpp>

#include <cstdint>
#include <span>

namespace reprise::routing {

/// Content keys of one model and fleet (`content_key_context`): root and chain as `content_keyer` computes
/// them, snapshots of either class at any position as `snapshot_key` does. A key OpenSSL cannot compute comes
/// back all zero (the router then scores it as unmatched).
class fleet_keys final {
public:
  /// Errors: those of `content_keyer::make` (`invalid_argument` for a context without a computed
  /// fingerprint or with another block size than the model's; a model whose recurrent layers disagree on
  /// their dtypes).
  static result<fleet_keys> make(const content_key_context& context, const model_config& model) {
    auto keyer = content_keyer::make(context, model);
    if (!keyer) return failure{keyer.error()};
    snapshot_dtypes dtypes{};
    if (model.has_recurrent()) dtypes = *snapshot_dtypes::of(model); // content_keyer::make checked it
    return fleet_keys(*keyer, context, dtypes);
  }

  content_key root(const extra_keys& extra) const noexcept { return keyer_.root(extra); }
  content_key chain(const content_key& parent, std::span<const token_id> block,
                    const media_digest& media) const noexcept {
    return keyer_.chain(parent, block, media);
  }
  content_key snapshot(const content_key& parent, std::span<const token_id> tail, std::uint64_t position,
                       exactness exact, const media_digest& media) const noexcept {
    auto key = reprise::detail::snapshot_key_with(context_, parent, tail, position, exact, dtypes_, media);
    return key ? *key : content_key{};
  }

  /// The dtypes snapshot keys are computed with: the model's own (`snapshot_dtypes::of`).
  snapshot_dtypes dtypes() const noexcept { return dtypes_; }

private:
  fleet_keys(const content_keyer& keyer, const content_key_context& context, snapshot_dtypes dtypes)
      : keyer_(keyer), context_(context), dtypes_(dtypes) {}

  content_keyer keyer_;
  content_key_context context_;
  snapshot_dtypes dtypes_;
};
static_assert(route_key_source<fleet_keys>);

} // namespace reprise::routing
