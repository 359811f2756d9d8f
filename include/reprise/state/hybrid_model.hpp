// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `hybrid_model<layers<Kind, Count>...>`: a model described as a list of layer state kinds with counts,
/// and the compile-time facts derived from it.
///
/// \code
/// using nemotron_h_8b = reprise::hybrid_model<
///     reprise::layers<reprise::kv_block<reprise::kv_shape{.kv_heads = 8, .head_dim = 128}>, 4>,
///     reprise::layers<reprise::mamba2_state<reprise::mamba2_shape{
///         .heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8}>, 24>>;
/// static_assert(nemotron_h_8b::alignment == 256);
/// \endcode
///
/// Layers without state (MLP, MoE) are not listed: they do not affect caching. Layer order does not matter
/// for the cache either; engines keep their own layer-to-slot mapping.

#include <reprise/state/concepts.hpp>
#include <reprise/state/kinds.hpp>
#include <reprise/state/model_facts.hpp>

#include <cstddef>
#include <cstdint>

namespace reprise {

/// `Count` consecutive (or interleaved: order is irrelevant) layers of one state kind.
template <layer_state Kind, std::uint32_t Count>
struct layers {
  static_assert(Count > 0, "layers<Kind, Count>: Count must be positive");
  using kind = Kind;
  static constexpr std::uint32_t count = Count;
};

namespace detail {
template <class T>
inline constexpr bool is_layers_v = false;
template <class K, std::uint32_t C>
inline constexpr bool is_layers_v<layers<K, C>> = true;

template <class... Groups>
constexpr model_facts compute_facts() noexcept {
  model_facts f;
  (f.add(Groups::kind::shape, Groups::count), ...);
  f.finish();
  return f;
}
} // namespace detail

/// A model as a list of `layers<Kind, Count>` groups. All attention layers share one block size; every
/// block and chunk size divides the largest of them (see `model_facts`).
template <class... Groups>
struct hybrid_model {
  static_assert(sizeof...(Groups) > 0, "hybrid_model: list at least one layers<Kind, Count> group");
  static_assert((detail::is_layers_v<Groups> && ...),
                "hybrid_model: every argument must be reprise::layers<Kind, Count>");

  /// Every derived fact in one aggregate (the runtime `model_config` exposes the same one).
  static constexpr model_facts facts = detail::compute_facts<Groups...>();

  static_assert(facts.error != model_error::block_sizes_differ,
                "hybrid_model: " REPRISE_MODEL_RULE_TEXT(block_sizes_differ));
  static_assert(facts.error != model_error::alignment_too_coarse,
                "hybrid_model: " REPRISE_MODEL_RULE_TEXT(alignment_too_coarse));
  static_assert(facts.error != model_error::too_large, "hybrid_model: " REPRISE_MODEL_RULE_TEXT(too_large));
  static_assert(facts.error != model_error::invalid_shape, "hybrid_model: " REPRISE_MODEL_RULE_TEXT(invalid_shape));
  static_assert(facts.error == model_error::none, "hybrid_model: invalid layer group");

  static constexpr std::uint32_t block_size = facts.block_size;
  static constexpr std::uint32_t alignment = facts.alignment;
  static constexpr std::uint32_t attention_layers = facts.attention_layers;
  static constexpr std::uint32_t recurrent_layers = facts.recurrent_layers();
  static constexpr std::size_t bytes_per_kv_block = facts.bytes_per_kv_block;
  static constexpr std::size_t bytes_per_snapshot = facts.bytes_per_snapshot;
  static constexpr bool has_recurrent = facts.has_recurrent();
  static constexpr bool is_attention_only = !facts.has_recurrent();
};

/// True for `hybrid_model<...>` instantiations.
template <class T>
inline constexpr bool is_hybrid_model_v = false;
template <class... G>
inline constexpr bool is_hybrid_model_v<hybrid_model<G...>> = true;

/// A model type (`hybrid_model<...>`).
template <class T>
concept model = is_hybrid_model_v<T>;

/// A model with at least one recurrent layer: needs `snapshot_restore` or `memory_only`.
template <class T>
concept recurrent_model = model<T> && T::has_recurrent;

/// A model with attention layers only: `block_sharing` applies.
template <class T>
concept attention_only_model = model<T> && T::is_attention_only;

} // namespace reprise
