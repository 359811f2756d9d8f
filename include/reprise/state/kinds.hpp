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

/// Attention KV cache of one layer, in blocks of `S.block_size` tokens.
template <kv_shape S>
struct kv_block {
  static_assert(S.kv_heads > 0 && S.head_dim > 0, "kv_block: kv_heads and head_dim must be positive");
  static_assert(S.block_size > 0, "kv_block: block_size must be positive");
  static_assert(is_valid(S.type), "kv_block: type must be one of the reprise::dtype enumerators");
  static_assert(S.validate() != errc::out_of_range, "kv_block: the bytes of one block overflow std::size_t");

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
  static_assert(S.heads > 0 && S.head_dim > 0 && S.state_dim > 0,
                "mamba2_state: heads, head_dim and state_dim must be positive");
  static_assert(S.groups > 0 && S.heads % S.groups == 0, "mamba2_state: heads must be a multiple of groups");
  static_assert(is_supported_conv_width(S.conv_width), "mamba2_state: conv_width must be 2, 3 or 4");
  static_assert(is_supported_chunk(S.chunk), "mamba2_state: chunk must be 64, 128 or 256");
  static_assert(is_valid(S.state_type) && is_valid(S.conv_type),
                "mamba2_state: state_type and conv_type must be reprise::dtype enumerators");
  static_assert(S.validate() != errc::out_of_range, "mamba2_state: the state's bytes overflow std::size_t");

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
  static_assert(S.key_heads > 0 && S.value_heads > 0 && S.key_dim > 0 && S.value_dim > 0,
                "gated_delta: head counts and dims must be positive");
  static_assert(S.value_heads % S.key_heads == 0, "gated_delta: value_heads must be a multiple of key_heads");
  static_assert(is_supported_conv_width(S.conv_width), "gated_delta: conv_width must be 2, 3 or 4");
  static_assert(is_supported_delta_chunk(S.chunk), "gated_delta: chunk must be 64 (or 32 for small shapes)");
  static_assert(is_valid(S.state_type) && is_valid(S.conv_type),
                "gated_delta: state_type and conv_type must be reprise::dtype enumerators");
  static_assert(S.validate() != errc::out_of_range, "gated_delta: the state's bytes overflow std::size_t");

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
