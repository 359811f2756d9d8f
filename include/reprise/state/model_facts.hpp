// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The facts a cache needs about a model (bytes per KV block, bytes per snapshot, the alignment unit) and
/// the rules that make a layer mix valid. One `constexpr` accumulator computes them for both the
/// compile-time `hybrid_model` and the runtime `model_config`, so both apply the very same checks.

#include <reprise/state/checked_size.hpp>
#include <reprise/state/shapes.hpp>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string_view>

/// What a layer mix breaking model rule `e` (a `model_error` enumerator) is told: a string literal, so that
/// `hybrid_model`'s `static_assert`s and `rule_message` at run time (what `model_config` callers print) say
/// the same words.
#define REPRISE_MODEL_RULE_TEXT(e) REPRISE_MODEL_RULE_TEXT_##e
#define REPRISE_MODEL_RULE_TEXT_none "the layer mix is a valid model"
#define REPRISE_MODEL_RULE_TEXT_empty "list at least one layer group, each with a count of at least 1"
#define REPRISE_MODEL_RULE_TEXT_invalid_shape                                                                      \
  "a layer shape fails its own validate(): a size of 0, a dtype outside the enumeration, or a conv width or "      \
  "chunk size the kernels do not support"
#define REPRISE_MODEL_RULE_TEXT_block_sizes_differ "all kv_block layers must use the same block_size"
#define REPRISE_MODEL_RULE_TEXT_alignment_too_coarse                                                               \
  "the block size and every chunk size must divide the largest of them (e.g. B = 16 with Q = 256); otherwise the " \
  "snapshot alignment lcm(B, Q) is so coarse that most prefixes could never hit. Use a power-of-two block size "    \
  "that divides the chunk size."
#define REPRISE_MODEL_RULE_TEXT_too_large                                                                          \
  "the bytes per KV block or per snapshot overflow std::size_t, or the layer counts overflow 32 bits"

namespace reprise {

/// Why a layer mix is not a valid model. `none` when it is.
enum class model_error : std::uint8_t {
  none,
  empty,               ///< no layer, or a layer group with count 0
  invalid_shape,       ///< a layer shape fails its own `validate()`
  block_sizes_differ,  ///< two attention layers use different block sizes
  alignment_too_coarse, ///< lcm(B, every Q) is not the largest of them: some size does not divide another
  too_large             ///< a byte total or a layer count does not fit its type (64-bit bytes, 32-bit counts)
};

/// The rule's stable name (`"alignment_too_coarse"`).
constexpr std::string_view to_string(model_error e) noexcept {
  switch (e) {
  case model_error::none: return "none";
  case model_error::empty: return "empty";
  case model_error::invalid_shape: return "invalid_shape";
  case model_error::block_sizes_differ: return "block_sizes_differ";
  case model_error::alignment_too_coarse: return "alignment_too_coarse";
  case model_error::too_large: return "too_large";
  }
  return "unknown";
}

/// What is wrong and what to change: `hybrid_model`'s `static_assert` text for the same rule.
constexpr std::string_view rule_message(model_error e) noexcept {
  switch (e) {
  case model_error::none: return REPRISE_MODEL_RULE_TEXT(none);
  case model_error::empty: return REPRISE_MODEL_RULE_TEXT(empty);
  case model_error::invalid_shape: return REPRISE_MODEL_RULE_TEXT(invalid_shape);
  case model_error::block_sizes_differ: return REPRISE_MODEL_RULE_TEXT(block_sizes_differ);
  case model_error::alignment_too_coarse: return REPRISE_MODEL_RULE_TEXT(alignment_too_coarse);
  case model_error::too_large: return REPRISE_MODEL_RULE_TEXT(too_large);
  }
  return {};
}

constexpr errc to_errc(model_error e) noexcept {
  switch (e) {
  case model_error::none: return errc{};
  case model_error::empty: return errc::invalid_argument;
  case model_error::invalid_shape: return errc::unsupported_config;
  case model_error::block_sizes_differ: return errc::invalid_argument;
  case model_error::alignment_too_coarse: return errc::misaligned;
  case model_error::too_large: return errc::out_of_range;
  }
  return errc::invalid_argument;
}

/// Facts about a model, accumulated layer group by layer group.
///
/// Alignment rule: snapshots sit at multiples of lcm(B, every Q). Reprise further
/// requires that every one of those sizes divides the largest, so that the unit is max(B, Q...). A block size
/// of 528 with Q = 256 (a real engine default) would otherwise make the unit 8448 tokens and most prompts
/// could never hit; that mix is refused instead of silently caching nothing.
///
/// Every total is accumulated with overflow checks: a mix whose bytes per KV block or per snapshot do not fit
/// in a `std::size_t`, or whose layer count does not fit in 32 bits, records `too_large` (a shape whose own
/// bytes overflow records `invalid_shape` with `out_of_range`). No figure is ever a wrapped value.
struct model_facts {
  std::uint32_t block_size = 0;      ///< tokens per KV block (and per key block when no attention layer)
  std::uint32_t max_chunk = 0;       ///< the largest chunk size of any recurrent layer
  std::uint32_t alignment = 0;       ///< lcm(B, every Q): positions a snapshot may sit at are its multiples
  std::uint32_t attention_layers = 0; ///< the three layer counts and their sum fit in 32 bits once finished
  std::uint32_t mamba2_layers = 0;
  std::uint32_t gated_delta_layers = 0;
  std::size_t bytes_per_kv_block = 0; ///< one block id covers this many bytes over all attention layers
  std::size_t bytes_per_snapshot = 0; ///< conv + matrix state of every recurrent layer
  std::uint32_t lcm_of_chunks = 1;
  model_error error = model_error::none;
  errc shape_error{}; ///< with `invalid_shape`: what the offending shape's `validate()` said

  /// The `errc` a runtime caller gets for `error`.
  constexpr errc to_errc() const noexcept {
    return error == model_error::invalid_shape ? shape_error : reprise::to_errc(error);
  }

  constexpr std::uint32_t recurrent_layers() const noexcept { return mamba2_layers + gated_delta_layers; }
  constexpr bool has_recurrent() const noexcept { return recurrent_layers() != 0; }
  constexpr bool has_attention() const noexcept { return attention_layers != 0; }

  constexpr void add(const kv_shape& s, std::uint32_t count) noexcept {
    if (!check_group(s.validate(), count)) return;
    if (block_size != 0 && block_size != s.block_size) fail(model_error::block_sizes_differ);
    block_size = s.block_size;
    attention_layers = add_layers(attention_layers, count);
    const detail::checked_size total =
        detail::checked_size{bytes_per_kv_block} + detail::checked_size{count} * s.checked_bytes_per_block();
    if (total.overflowed()) fail(model_error::too_large);
    else bytes_per_kv_block = total.value();
  }
  constexpr void add(const mamba2_shape& s, std::uint32_t count) noexcept {
    if (!check_group(s.validate(), count)) return;
    mamba2_layers = add_layers(mamba2_layers, count);
    add_recurrent(s.chunk, detail::checked_size{count} * s.checked_state_bytes());
  }
  constexpr void add(const gated_delta_shape& s, std::uint32_t count) noexcept {
    if (!check_group(s.validate(), count)) return;
    gated_delta_layers = add_layers(gated_delta_layers, count);
    add_recurrent(s.chunk, detail::checked_size{count} * s.checked_state_bytes());
  }

  /// Derives the alignment unit once every group is added; records an error if the mix is invalid.
  constexpr void finish() noexcept {
    if (error != model_error::none) return;
    const std::uint64_t layers = std::uint64_t{attention_layers} + mamba2_layers + gated_delta_layers;
    if (layers > std::numeric_limits<std::uint32_t>::max()) fail(model_error::too_large);
    if (layers == 0) fail(model_error::empty);
    if (error != model_error::none) return;
    if (block_size == 0) block_size = max_chunk; // attention-free model: key blocks of one chunk
    const std::uint64_t unit = detail::lcm(block_size, lcm_of_chunks);
    const std::uint32_t largest = block_size > max_chunk ? block_size : max_chunk;
    if (unit != largest) {
      fail(model_error::alignment_too_coarse);
      return;
    }
    alignment = largest;
  }

private:
  constexpr void fail(model_error e) noexcept {
    if (error == model_error::none) error = e;
  }
  constexpr bool check_group(errc shape_status, std::uint32_t count) noexcept {
    if (count == 0) fail(model_error::empty);
    else if (shape_status != errc{} && error == model_error::none) {
      fail(model_error::invalid_shape);
      shape_error = shape_status;
    }
    return error == model_error::none;
  }
  constexpr std::uint32_t add_layers(std::uint32_t so_far, std::uint32_t count) noexcept {
    if (count > std::numeric_limits<std::uint32_t>::max() - so_far) {
      fail(model_error::too_large);
      return so_far;
    }
    return so_far + count;
  }
  constexpr void add_recurrent(std::uint32_t chunk, detail::checked_size bytes) noexcept {
    const detail::checked_size total = detail::checked_size{bytes_per_snapshot} + bytes;
    if (total.overflowed()) fail(model_error::too_large);
    else bytes_per_snapshot = total.value();
    max_chunk = chunk > max_chunk ? chunk : max_chunk;
    // Chunks are 32, 64, 128 or 256 (validated), so their lcm is one of them and fits.
    lcm_of_chunks = static_cast<std::uint32_t>(detail::lcm(lcm_of_chunks, chunk));
  }
};

} // namespace reprise
