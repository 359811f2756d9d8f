// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// `model_config`: the runtime mirror of `hybrid_model`, for engines that learn layer sizes from a
/// checkpoint's config. It applies the same rules through the same `model_facts` accumulator, returning
/// `reprise::errc` where the compile-time model would fail a `static_assert`.

#include <reprise/errc.hpp>
#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/model_facts.hpp>
#include <reprise/state/shapes.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <variant>
#include <vector>

namespace reprise {

/// One group of layers of the same shape.
struct layer_spec {
  std::variant<kv_shape, mamba2_shape, gated_delta_shape> shape;
  std::uint32_t count = 1;

  state_family family() const noexcept { return static_cast<state_family>(shape.index()); }
};
static_assert(std::variant_size_v<decltype(layer_spec::shape)> == 3 &&
                  static_cast<int>(state_family::kv_block) == 0 && static_cast<int>(state_family::mamba2) == 1 &&
                  static_cast<int>(state_family::gated_delta) == 2,
              "layer_spec::family() relies on the variant order matching state_family");

/// A validated runtime model description.
class model_config {
public:
  /// Validates `groups` and derives the model's facts.
  ///
  /// Effects: none on failure. Errors: `invalid_argument` (no layers, a count of 0, a zero size, a dtype
  /// outside the enumeration, attention layers with different block sizes), `unsupported_config` (a shape
  /// outside what the kernels support), `misaligned` (a block or chunk size that does not divide the largest
  /// of them), `out_of_range` (bytes per block, per state or in total that do not fit in a `std::size_t`, or
  /// more than 2^32 - 1 layers).
  /// Complexity: linear in the number of groups.
  static result<model_config> make(std::vector<layer_spec> groups) {
    const model_facts f = facts_of(groups);
    if (f.error != model_error::none) return failure{f.to_errc()};
    return model_config(std::move(groups), f);
  }

  /// The facts `make` derives from `groups`, with `error` naming the first model rule they break
  /// (`model_error::none` when they make a valid model; `rule_message(error)` says what to change).
  /// Complexity: linear in the number of groups.
  static model_facts facts_of(std::span<const layer_spec> groups) {
    model_facts f;
    for (const layer_spec& g : groups) std::visit([&](const auto& s) { f.add(s, g.count); }, g.shape);
    f.finish();
    return f;
  }

  /// The runtime description of a compile-time model; never fails (the model type is already checked).
  template <model Model>
  static model_config of() {
    return of_impl(static_cast<Model*>(nullptr));
  }

  const model_facts& facts() const noexcept { return facts_; }
  std::span<const layer_spec> groups() const noexcept { return groups_; }
  std::uint32_t block_size() const noexcept { return facts_.block_size; }
  std::uint32_t alignment() const noexcept { return facts_.alignment; }
  std::size_t bytes_per_kv_block() const noexcept { return facts_.bytes_per_kv_block; }
  std::size_t bytes_per_snapshot() const noexcept { return facts_.bytes_per_snapshot; }
  std::uint32_t attention_layers() const noexcept { return facts_.attention_layers; }
  std::uint32_t recurrent_layers() const noexcept { return facts_.recurrent_layers(); }
  bool has_recurrent() const noexcept { return facts_.has_recurrent(); }

  /// Errc `misaligned` unless `position` is a multiple of the alignment unit.
  result<void> check_aligned(std::uint64_t position) const noexcept {
    if (position % facts_.alignment != 0) return failure{errc::misaligned};
    return {};
  }

private:
  model_config(std::vector<layer_spec> groups, const model_facts& f) : groups_(std::move(groups)), facts_(f) {}

  template <class... G>
  static model_config of_impl(hybrid_model<G...>*) {
    return model_config({layer_spec{G::kind::shape, G::count}...}, hybrid_model<G...>::facts);
  }

  std::vector<layer_spec> groups_;
  model_facts facts_;
};

} // namespace reprise
