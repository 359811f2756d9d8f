// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// The engine-owned state memory of the example decoder: a KV pool indexed by block id (the ids Reprise
/// hands out) and a recurrent state pool indexed by slot (snapshot slots from Reprise, then one live slot
/// per running sequence).

#include "hybrid/config.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

namespace reprise::example {

/// Keys and values of every attention layer, in blocks of `block_size` tokens. A block id names the same
/// block in every attention layer (one id covers `bytes_per_kv_block` of the model, as in the cache).
/// Layout per layer: [block][offset in block][kv_heads * head_dim], keys and values in separate arrays.
class kv_memory {
public:
  kv_memory(const decoder_config& c, std::uint32_t blocks)
      : layers_(c.count(layer_kind::attention)), blocks_(blocks), block_size_(c.attention.block_size),
        token_width_(std::size_t{c.attention.kv_heads} * c.attention.head_dim),
        keys_(layers_ * blocks_ * block_floats()), values_(keys_.size()) {}

  std::uint32_t blocks() const noexcept { return blocks_; }
  std::uint32_t block_size() const noexcept { return block_size_; }
  std::size_t token_width() const noexcept { return token_width_; }
  std::size_t block_floats() const noexcept { return std::size_t{block_size_} * token_width_; }

  /// Start of block `block` of attention layer `layer` (the layer's ordinal among attention layers).
  float* keys(std::uint32_t layer, std::uint32_t block) noexcept { return keys_.data() + offset(layer, block); }
  float* values(std::uint32_t layer, std::uint32_t block) noexcept {
    return values_.data() + offset(layer, block);
  }
  const float* keys(std::uint32_t layer, std::uint32_t block) const noexcept {
    return keys_.data() + offset(layer, block);
  }
  const float* values(std::uint32_t layer, std::uint32_t block) const noexcept {
    return values_.data() + offset(layer, block);
  }

private:
  std::size_t offset(std::uint32_t layer, std::uint32_t block) const noexcept {
    return (std::size_t{layer} * blocks_ + block) * block_floats();
  }

  std::uint32_t layers_, blocks_, block_size_;
  std::size_t token_width_;
  std::vector<float> keys_, values_;
};

/// Recurrent states of every Mamba2 and gated-delta layer, in the library's slot layout
/// (`reprise/ops/slots.hpp`): per layer one pool per state component whose leading extent is the slot --
/// Mamba2 `[slots, H, P, N]` and gated delta `[slots, HV, K, V]` matrices, conv windows `[slots, W-1, C]`.
/// A slot index names the same state in every layer, so a snapshot of the whole model is one index and a
/// save, restore or fork is one batched copy over all pools.
class state_memory {
public:
  state_memory(const decoder_config& c, std::uint32_t slots) : slots_(slots) {
    const mamba2_shape& m = c.ssm;
    const gated_delta_shape& d = c.delta;
    for (std::uint32_t i = 0; i < c.count(layer_kind::mamba2); ++i) {
      ssm_.emplace_back(std::size_t{slots} * m.heads * m.head_dim * m.state_dim);
      ssm_conv_.emplace_back(std::size_t{slots} * (m.conv_width - 1) * m.conv_channels());
    }
    for (std::uint32_t i = 0; i < c.count(layer_kind::gated_delta); ++i) {
      delta_.emplace_back(std::size_t{slots} * d.value_heads * d.key_dim * d.value_dim);
      delta_conv_.emplace_back(std::size_t{slots} * (d.conv_width - 1) * d.conv_channels());
    }
  }

  std::uint32_t slots() const noexcept { return slots_; }

  /// Pools of the `i`-th Mamba2 / gated-delta layer (whole pool; slot s starts at s * its slot size).
  float* ssm(std::uint32_t i) noexcept { return ssm_[i].data(); }
  float* ssm_conv(std::uint32_t i) noexcept { return ssm_conv_[i].data(); }
  float* delta(std::uint32_t i) noexcept { return delta_[i].data(); }
  float* delta_conv(std::uint32_t i) noexcept { return delta_conv_[i].data(); }

  /// Every pool as a list of `(base, bytes per slot)`: what a batched slot copy walks.
  template <class F>
  void for_each_pool(F&& f) {
    for (auto* group : {&ssm_, &ssm_conv_, &delta_, &delta_conv_})
      for (std::vector<float>& pool : *group) f(pool.data(), pool.size() / slots_ * sizeof(float));
  }

  /// Sets slot `s` of every pool to the zero state (a sequence that starts at position 0).
  void zero(std::uint32_t s) {
    for_each_pool([&](float* base, std::size_t bytes) {
      std::memset(reinterpret_cast<std::byte*>(base) + s * bytes, 0, bytes);
    });
  }

private:
  std::uint32_t slots_;
  std::vector<std::vector<float>> ssm_, ssm_conv_, delta_, delta_conv_;
};

} // namespace reprise::example
