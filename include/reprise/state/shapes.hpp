// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Shapes of the three layer state kinds, as plain structural aggregates.
///
/// One shape type serves both worlds: as a C++20 non-type template argument it configures the compile-time
/// kinds (`kv_block<kv_shape{...}>`) and the kernels; as a runtime value it describes a layer that an engine
/// learns from a checkpoint's config (`model_config`). Every byte figure and every validity rule is a
/// `constexpr` member here, so the two worlds can never disagree.
///
/// Byte figures are computed with overflow checks: `validate()` answers `out_of_range` when one does not fit
/// in a `std::size_t`, and the plain accessors (`bytes_per_block()`, `state_bytes()`, ...) are meaningful only
/// for a shape that validates.

#include <reprise/dtype.hpp>
#include <reprise/errc.hpp>
#include <reprise/state/checked_size.hpp>

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace reprise {

/// The three families of per-layer state that Reprise knows how to cache.
enum class state_family : std::uint8_t {
  kv_block,    ///< attention KV cache in fixed-size token blocks: truncatable, shareable
  mamba2,      ///< Mamba2 SSM: conv window + [H, P, N] state; fixed size, not truncatable
  gated_delta, ///< gated delta rule: conv window + [HV, K, V] delta-rule matrix; not truncatable
};

constexpr std::string_view to_string(state_family f) noexcept {
  switch (f) {
  case state_family::kv_block: return "kv_block";
  case state_family::mamba2: return "mamba2";
  case state_family::gated_delta: return "gated_delta";
  }
  return "?";
}

/// The rules a layer shape obeys, each written once: `check()` on a shape returns the first it breaks, its
/// `validate()` the rule's errc, and the typed kinds (kinds.hpp) `static_assert` each with the same words
/// (`REPRISE_SHAPE_RULE_TEXT(rule)`: a C++20 `static_assert` takes only a literal).
#define REPRISE_SHAPE_RULE_TEXT(rule) REPRISE_SHAPE_RULE_TEXT_##rule
#define REPRISE_SHAPE_RULE_TEXT_ok "the shape is usable"
#define REPRISE_SHAPE_RULE_TEXT_zero_size                                                                          \
  "every size (heads, head and state dims, groups, block size) must be positive"
#define REPRISE_SHAPE_RULE_TEXT_heads_not_grouped                                                                  \
  "heads must be a multiple of groups (Mamba2), value_heads a multiple of key_heads (gated delta)"
#define REPRISE_SHAPE_RULE_TEXT_bad_dtype "every dtype must be one of the reprise::dtype enumerators"
#define REPRISE_SHAPE_RULE_TEXT_conv_width_unsupported "conv_width must be 2, 3 or 4 (the conv kernels' widths)"
#define REPRISE_SHAPE_RULE_TEXT_chunk_unsupported                                                                  \
  "chunk must be one the kernels are instantiated for: 64, 128 or 256 for Mamba2; 64 (or 32 for small shapes) "   \
  "for gated delta"
#define REPRISE_SHAPE_RULE_TEXT_bytes_overflow "the bytes of one block or one state overflow std::size_t"

/// Why a layer shape is not usable; `ok` when it is.
enum class shape_rule : std::uint8_t {
  ok,
  zero_size,              ///< invalid_argument
  heads_not_grouped,      ///< invalid_argument
  bad_dtype,              ///< invalid_argument
  conv_width_unsupported, ///< unsupported_config
  chunk_unsupported,      ///< unsupported_config
  bytes_overflow,         ///< out_of_range
};

constexpr errc to_errc(shape_rule r) noexcept {
  switch (r) {
  case shape_rule::ok: return errc{};
  case shape_rule::zero_size:
  case shape_rule::heads_not_grouped:
  case shape_rule::bad_dtype: return errc::invalid_argument;
  case shape_rule::conv_width_unsupported:
  case shape_rule::chunk_unsupported: return errc::unsupported_config;
  case shape_rule::bytes_overflow: return errc::out_of_range;
  }
  return errc::invalid_argument;
}

constexpr std::string_view rule_message(shape_rule r) noexcept {
  switch (r) {
  case shape_rule::ok: return REPRISE_SHAPE_RULE_TEXT(ok);
  case shape_rule::zero_size: return REPRISE_SHAPE_RULE_TEXT(zero_size);
  case shape_rule::heads_not_grouped: return REPRISE_SHAPE_RULE_TEXT(heads_not_grouped);
  case shape_rule::bad_dtype: return REPRISE_SHAPE_RULE_TEXT(bad_dtype);
  case shape_rule::conv_width_unsupported: return REPRISE_SHAPE_RULE_TEXT(conv_width_unsupported);
  case shape_rule::chunk_unsupported: return REPRISE_SHAPE_RULE_TEXT(chunk_unsupported);
  case shape_rule::bytes_overflow: return REPRISE_SHAPE_RULE_TEXT(bytes_overflow);
  }
  return {};
}

/// Chunk sizes the chunked prefill kernels are instantiated for.
constexpr bool is_supported_chunk(std::uint32_t q) noexcept { return q == 64 || q == 128 || q == 256; }
/// Gated-delta chunked prefill uses the WY form at Q = 64 (32 allowed for small shapes).
constexpr bool is_supported_delta_chunk(std::uint32_t q) noexcept { return q == 32 || q == 64; }
/// Causal conv1d widths the kernels support.
constexpr bool is_supported_conv_width(std::uint32_t w) noexcept { return w >= 2 && w <= 4; }
constexpr bool is_power_of_two(std::uint32_t v) noexcept { return v != 0 && (v & (v - 1)) == 0; }

/// Attention KV cache of one layer: K and V for `kv_heads` heads of `head_dim`, in blocks of `block_size`
/// tokens.
struct kv_shape {
  std::uint32_t kv_heads = 0;
  std::uint32_t head_dim = 0;
  std::uint32_t block_size = 16;
  dtype type = dtype::bf16;

  /// Bytes one token occupies in this layer (K and V).
  constexpr detail::checked_size checked_bytes_per_token() const noexcept {
    return detail::checked_size{std::size_t{2}} * kv_heads * head_dim * size_of(type);
  }
  /// Bytes of one block of this layer.
  constexpr detail::checked_size checked_bytes_per_block() const noexcept {
    return checked_bytes_per_token() * block_size;
  }
  constexpr std::size_t bytes_per_token() const noexcept { return checked_bytes_per_token().value(); }
  constexpr std::size_t bytes_per_block() const noexcept { return checked_bytes_per_block().value(); }

  /// The first rule the shape breaks (`shape_rule::ok` when usable): a zero size, a dtype outside the
  /// enumeration, the bytes of one block beyond a `std::size_t`.
  constexpr shape_rule check() const noexcept {
    if (kv_heads == 0 || head_dim == 0 || block_size == 0) return shape_rule::zero_size;
    if (!is_valid(type)) return shape_rule::bad_dtype;
    if (checked_bytes_per_block().overflowed()) return shape_rule::bytes_overflow;
    return shape_rule::ok;
  }
  /// `errc{}` when the shape is usable, else its broken rule's errc: `invalid_argument` for a zero size or a
  /// dtype outside the enumeration, `out_of_range` when the bytes of one block do not fit in a `std::size_t`.
  constexpr errc validate() const noexcept { return to_errc(check()); }
  friend constexpr bool operator==(const kv_shape&, const kv_shape&) = default;
};

/// Mamba2 mixer state of one layer: a causal-conv window over the x, B and C channels and an SSM state
/// [heads, head_dim P, state_dim N].
struct mamba2_shape {
  std::uint32_t heads = 0;
  std::uint32_t head_dim = 0;  ///< P
  std::uint32_t state_dim = 0; ///< N
  std::uint32_t groups = 1;    ///< B/C groups G (heads share B and C within a group)
  std::uint32_t conv_width = 4;
  std::uint32_t chunk = 256;
  dtype state_type = dtype::f32; ///< SSM state; fp32 keeps restores bit-exact
  dtype conv_type = dtype::bf16; ///< conv window holds pre-conv activations in the model's dtype

  /// Channels that pass through the causal conv: x (H*P) plus B and C (G*N each).
  constexpr detail::checked_size checked_conv_channels() const noexcept {
    return detail::checked_size{heads} * head_dim + detail::checked_size{std::size_t{2}} * groups * state_dim;
  }
  /// The conv state at position p holds the last W-1 pre-conv inputs.
  constexpr detail::checked_size checked_conv_state_bytes() const noexcept {
    return detail::checked_size{conv_width - 1} * checked_conv_channels() * size_of(conv_type);
  }
  constexpr detail::checked_size checked_matrix_state_bytes() const noexcept {
    return detail::checked_size{heads} * head_dim * state_dim * size_of(state_type);
  }
  constexpr detail::checked_size checked_state_bytes() const noexcept {
    return checked_conv_state_bytes() + checked_matrix_state_bytes();
  }
  constexpr std::size_t conv_channels() const noexcept { return checked_conv_channels().value(); }
  constexpr std::size_t conv_state_bytes() const noexcept { return checked_conv_state_bytes().value(); }
  constexpr std::size_t matrix_state_bytes() const noexcept { return checked_matrix_state_bytes().value(); }
  constexpr std::size_t state_bytes() const noexcept { return checked_state_bytes().value(); }

  /// The first rule the shape breaks (`shape_rule::ok` when usable), in this order: a zero size, heads not a
  /// multiple of groups, a dtype outside the enumeration, a conv width or chunk without kernels, the state's
  /// bytes beyond a `std::size_t`.
  constexpr shape_rule check() const noexcept {
    if (heads == 0 || head_dim == 0 || state_dim == 0 || groups == 0) return shape_rule::zero_size;
    if (heads % groups != 0) return shape_rule::heads_not_grouped;
    if (!is_valid(state_type) || !is_valid(conv_type)) return shape_rule::bad_dtype;
    if (!is_supported_conv_width(conv_width)) return shape_rule::conv_width_unsupported;
    if (!is_supported_chunk(chunk)) return shape_rule::chunk_unsupported;
    if (checked_state_bytes().overflowed()) return shape_rule::bytes_overflow;
    return shape_rule::ok;
  }
  /// `errc{}` when the shape is usable, else its broken rule's errc (`invalid_argument`,
  /// `unsupported_config` or `out_of_range`, `to_errc(shape_rule)`).
  constexpr errc validate() const noexcept { return to_errc(check()); }
  friend constexpr bool operator==(const mamba2_shape&, const mamba2_shape&) = default;
};

/// Gated delta rule state of one layer (Qwen3-Next, Kimi-Linear): a causal-conv window over q, k and v and a
/// delta-rule matrix [value_heads HV, key_dim K, value_dim V]. Value heads are grouped over key heads.
struct gated_delta_shape {
  std::uint32_t key_heads = 0;   ///< H
  std::uint32_t value_heads = 0; ///< HV >= H, a multiple of H
  std::uint32_t key_dim = 0;     ///< K
  std::uint32_t value_dim = 0;   ///< V
  std::uint32_t conv_width = 4;
  std::uint32_t chunk = 64;
  dtype state_type = dtype::f32;
  dtype conv_type = dtype::bf16;

  /// Channels that pass through the causal conv: q and k (H*K each) plus v (HV*V).
  constexpr detail::checked_size checked_conv_channels() const noexcept {
    return detail::checked_size{std::size_t{2}} * key_heads * key_dim + detail::checked_size{value_heads} * value_dim;
  }
  constexpr detail::checked_size checked_conv_state_bytes() const noexcept {
    return detail::checked_size{conv_width - 1} * checked_conv_channels() * size_of(conv_type);
  }
  constexpr detail::checked_size checked_matrix_state_bytes() const noexcept {
    return detail::checked_size{value_heads} * key_dim * value_dim * size_of(state_type);
  }
  constexpr detail::checked_size checked_state_bytes() const noexcept {
    return checked_conv_state_bytes() + checked_matrix_state_bytes();
  }
  constexpr std::size_t conv_channels() const noexcept { return checked_conv_channels().value(); }
  constexpr std::size_t conv_state_bytes() const noexcept { return checked_conv_state_bytes().value(); }
  constexpr std::size_t matrix_state_bytes() const noexcept { return checked_matrix_state_bytes().value(); }
  constexpr std::size_t state_bytes() const noexcept { return checked_state_bytes().value(); }

  /// The first rule the shape breaks (`shape_rule::ok` when usable), in the order of `mamba2_shape::check`.
  constexpr shape_rule check() const noexcept {
    if (key_heads == 0 || value_heads == 0 || key_dim == 0 || value_dim == 0) return shape_rule::zero_size;
    if (value_heads % key_heads != 0) return shape_rule::heads_not_grouped;
    if (!is_valid(state_type) || !is_valid(conv_type)) return shape_rule::bad_dtype;
    if (!is_supported_conv_width(conv_width)) return shape_rule::conv_width_unsupported;
    if (!is_supported_delta_chunk(chunk)) return shape_rule::chunk_unsupported;
    if (checked_state_bytes().overflowed()) return shape_rule::bytes_overflow;
    return shape_rule::ok;
  }
  /// `errc{}` when the shape is usable, else its broken rule's errc (`to_errc(shape_rule)`).
  constexpr errc validate() const noexcept { return to_errc(check()); }
  friend constexpr bool operator==(const gated_delta_shape&, const gated_delta_shape&) = default;
};

} // namespace reprise
