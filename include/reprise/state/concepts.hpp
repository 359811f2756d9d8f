// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Concepts that a layer state kind models. A hybrid model is a list of such kinds; cache policies are
/// checked against them at compile time.

#include <reprise/state/shapes.hpp>

#include <concepts>
#include <cstddef>
#include <cstdint>

namespace reprise {

/// A per-layer state kind: names its family, says whether it can be truncated to an earlier position and
/// shared between sequences, and gives its storage dtype.
template <class T>
concept layer_state = requires {
  { T::family } -> std::convertible_to<state_family>;
  { T::truncatable } -> std::convertible_to<bool>;
  { T::shareable } -> std::convertible_to<bool>;
  { T::state_type } -> std::convertible_to<dtype>;
};

/// Attention KV cache in fixed-size token blocks. Truncatable to any block boundary and shareable between
/// sequences with a common prefix.
template <class T>
concept kv_block_state = layer_state<T> && T::family == state_family::kv_block && T::truncatable &&
                         T::shareable && requires {
                           { T::block_size } -> std::convertible_to<std::uint32_t>;
                           { T::bytes_per_token } -> std::convertible_to<std::size_t>;
                           { T::bytes_per_block } -> std::convertible_to<std::size_t>;
                         };

/// A fixed-size recurrent state (conv window + matrix state) that depends on the whole history: it can be
/// snapshotted and restored at a position, never truncated. Its chunked prefill runs on a grid of
/// `chunk_size` tokens.
template <class T>
concept recurrent_state = layer_state<T> && !T::truncatable && requires {
  { T::chunk_size } -> std::convertible_to<std::uint32_t>;
  { T::conv_width } -> std::convertible_to<std::uint32_t>;
  { T::conv_state_bytes } -> std::convertible_to<std::size_t>;
  { T::matrix_state_bytes } -> std::convertible_to<std::size_t>;
  { T::bytes_per_state } -> std::convertible_to<std::size_t>;
};

/// A Mamba2 SSM state: a recurrent state with [heads, head_dim, state_dim] matrix.
template <class T>
concept ssm_state = recurrent_state<T> && T::family == state_family::mamba2 && requires {
  { T::shape } -> std::convertible_to<mamba2_shape>;
};

/// A gated delta rule state: a recurrent state with [value_heads, key_dim, value_dim] matrix.
template <class T>
concept gated_delta_state = recurrent_state<T> && T::family == state_family::gated_delta && requires {
  { T::shape } -> std::convertible_to<gated_delta_shape>;
};

} // namespace reprise
