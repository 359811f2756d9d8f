// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The concrete layer state kinds: `kv_block`, `mamba2_state` and `gated_delta`, each configured by a shape
/// aggregate as a non-type template argument:
///
/// \code
/// using attn  = reprise::kv_block<reprise::kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}>;
/// using ssm   = reprise::mamba2_state<reprise::mamba2_shape{.heads = 128, .head_dim = 64, .state_dim = 128,
///                                                           .groups = 8, .conv_width = 4, .chunk = 256}>;
/// using delta = reprise::gated_delta<reprise::gated_delta_shape{.key_heads = 16, .value_heads = 32,
///                                                              .key_dim = 128, .value_dim = 128}>;
/// \endcode
///
/// An invalid shape fails to compile where the kind is named, with a message that says what to change.
/// (The gated-delta kind is `gated_delta`, not `gated_delta_state`, because that name is the concept.)

#include <reprise/state/concepts.hpp>
#include <reprise/state/shapes.hpp>

#include <cstddef>
#include <cstdint>

namespace reprise {

namespace detail {
/// Fails to compile where a kind names shape `S` when the shape breaks a rule, with the rule's words
/// (shapes.hpp: the same rules `validate()` checks at run time).
template <auto S>
struct shape_rules_hold {
  static_assert(S.check() != shape_rule::zero_size, REPRISE_SHAPE_RULE_TEXT(zero_size));
  static_assert(S.check() != shape_rule::heads_not_grouped, REPRISE_SHAPE_RULE_TEXT(heads_not_grouped));
  static_assert(S.check() != shape_rule::bad_dtype, REPRISE_SHAPE_RULE_TEXT(bad_dtype));
  static_assert(S.check() != shape_rule::conv_width_unsupported, REPRISE_SHAPE_RULE_TEXT(conv_width_unsupported));
  static_assert(S.check() != shape_rule::chunk_unsupported, REPRISE_SHAPE_RULE_TEXT(chunk_unsupported));
  static_assert(S.check() != shape_rule::bytes_overflow, REPRISE_SHAPE_RULE_TEXT(bytes_overflow));
  static constexpr bool value = true;
};
} // namespace detail

/// Attention KV cache of one layer, in blocks of `S.block_size` tokens.
template <kv_shape S>
struct kv_block {
  static_assert(detail::shape_rules_hold<S>::value);

  static constexpr kv_shape shape = S;
  static constexpr state_family family = state_family::kv_block;
  static constexpr bool truncatable = true;
  static constexpr bool shareable = true;
  static constexpr dtype state_type = S.type;
  static constexpr std::uint32_t block_size = S.block_size;
  static constexpr std::size_t bytes_per_token = S.bytes_per_token();
  static constexpr std::size_t bytes_per_block = S.bytes_per_block();
};

/// Mamba2 mixer state of one layer.
template <mamba2_shape S>
struct mamba2_state {
  static_assert(detail::shape_rules_hold<S>::value);

  static constexpr mamba2_shape shape = S;
  static constexpr state_family family = state_family::mamba2;
  static constexpr bool truncatable = false;
  static constexpr bool shareable = false;
  static constexpr dtype state_type = S.state_type;
  static constexpr std::uint32_t chunk_size = S.chunk;
  static constexpr std::uint32_t conv_width = S.conv_width;
  static constexpr std::size_t conv_state_bytes = S.conv_state_bytes();
  static constexpr std::size_t matrix_state_bytes = S.matrix_state_bytes();
  static constexpr std::size_t bytes_per_state = S.state_bytes();
};

/// Gated delta rule state of one layer.
template <gated_delta_shape S>
struct gated_delta {
  static_assert(detail::shape_rules_hold<S>::value);

  static constexpr gated_delta_shape shape = S;
  static constexpr state_family family = state_family::gated_delta;
  static constexpr bool truncatable = false;
  static constexpr bool shareable = false;
  static constexpr dtype state_type = S.state_type;
  static constexpr std::uint32_t chunk_size = S.chunk;
  static constexpr std::uint32_t conv_width = S.conv_width;
  static constexpr std::size_t conv_state_bytes = S.conv_state_bytes();
  static constexpr std::size_t matrix_state_bytes = S.matrix_state_bytes();
  static constexpr std::size_t bytes_per_state = S.state_bytes();
};

static_assert(kv_block_state<kv_block<kv_shape{.kv_heads = 1, .head_dim = 1}>>);
static_assert(ssm_state<mamba2_state<mamba2_shape{.heads = 1, .head_dim = 1, .state_dim = 1}>>);
static_assert(gated_delta_state<
              gated_delta<gated_delta_shape{.key_heads = 1, .value_heads = 1, .key_dim = 1, .value_dim = 1}>>);

} // namespace reprise
