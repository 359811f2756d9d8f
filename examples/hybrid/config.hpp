// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Configuration of the example hybrid decoder: a layer pattern over three mixer kinds, the state shapes
/// (the library's own `kv_shape`, `mamba2_shape`, `gated_delta_shape`), and the presets used by the demo,
/// the end-to-end tests and the benchmark.

#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/kinds.hpp>
#include <reprise/state/model_config.hpp>
#include <reprise/state/shapes.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace reprise::example {

/// A token id.
using token = std::int32_t;

/// What mixes tokens in one layer. Every layer also has an MLP after its mixer.
enum class layer_kind : char {
  attention = 'A',   ///< multi-head attention over paged KV blocks
  mamba2 = 'M',      ///< Mamba2 (causal conv1d + SSD)
  gated_delta = 'D', ///< gated delta rule (causal conv1d + delta-rule recurrence)
};

/// Runtime description of the decoder. Shapes are the library's state shapes, so the cache facts of the
/// decoder (bytes per block and snapshot, alignment) come from the same code the cache uses.
struct decoder_config {
  std::uint32_t vocab = 256;
  std::uint32_t d_model = 64;
  std::uint32_t mlp_hidden = 128;
  std::string pattern = "MDA";   ///< one `layer_kind` letter per layer
  std::uint32_t query_heads = 4; ///< attention query heads; a multiple of `attention.kv_heads`
  kv_shape attention{.kv_heads = 2, .head_dim = 16, .block_size = 16, .type = dtype::f32};
  mamba2_shape ssm{.heads = 4, .head_dim = 16, .state_dim = 16, .groups = 1, .conv_width = 4, .chunk = 64,
                   .state_type = dtype::f32, .conv_type = dtype::f32};
  gated_delta_shape delta{.key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 16, .conv_width = 4,
                          .chunk = 64, .state_type = dtype::f32, .conv_type = dtype::f32};
  float rope_theta = 10000.0f;
  float rms_eps = 1e-5f;
  std::uint64_t seed = 0x5eed;

  std::uint32_t count(layer_kind k) const noexcept {
    std::uint32_t n = 0;
    for (char c : pattern) n += c == static_cast<char>(k);
    return n;
  }

  /// The layer groups as the library's runtime model description (what the cache sees).
  std::vector<layer_spec> layer_specs() const {
    std::vector<layer_spec> g;
    if (const auto n = count(layer_kind::attention)) g.push_back({attention, n});
    if (const auto n = count(layer_kind::mamba2)) g.push_back({ssm, n});
    if (const auto n = count(layer_kind::gated_delta)) g.push_back({delta, n});
    return g;
  }

  /// Validates the configuration through the library's model rules (alignment, supported shapes).
  ///
  /// Errors: `invalid_argument` for an empty or unknown pattern letter, a head count that does not divide,
  /// or a shape that is not fp32 throughout (the example is fp32 so that restores are bit-exact); otherwise
  /// whatever `model_config::make` reports.
  result<model_config> validate() const {
    if (pattern.empty() || vocab == 0 || d_model == 0 || mlp_hidden == 0) return errc::invalid_argument;
    for (char c : pattern)
      if (c != 'A' && c != 'M' && c != 'D') return errc::invalid_argument;
    if (count(layer_kind::attention) != 0 &&
        (query_heads == 0 || query_heads % attention.kv_heads != 0 || attention.head_dim % 2 != 0))
      return errc::invalid_argument;
    if (attention.type != dtype::f32 || ssm.state_type != dtype::f32 || ssm.conv_type != dtype::f32 ||
        delta.state_type != dtype::f32 || delta.conv_type != dtype::f32)
      return errc::invalid_argument;
    return model_config::make(layer_specs());
  }
};

/// Presets. Each pairs a runtime `decoder_config` with the compile-time `hybrid_model` the cache is
/// instantiated with; `engine` checks at construction that the two describe the same state.
namespace presets {

/// Shapes shared by the small presets: 16-token blocks, Q = 64 for both recurrent kinds (alignment 64).
inline constexpr kv_shape small_attention{.kv_heads = 2, .head_dim = 16, .block_size = 16, .type = dtype::f32};
inline constexpr mamba2_shape small_ssm{.heads = 4, .head_dim = 16, .state_dim = 16, .groups = 1,
                                        .conv_width = 4, .chunk = 64, .state_type = dtype::f32,
                                        .conv_type = dtype::f32};
inline constexpr gated_delta_shape small_delta{.key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 16,
                                               .conv_width = 4, .chunk = 64, .state_type = dtype::f32,
                                               .conv_type = dtype::f32};

/// Tests: 3 layers (Mamba2, gated delta, attention), d_model 32, vocabulary 64.
struct tiny_hybrid {
  using cache_model = hybrid_model<layers<kv_block<small_attention>, 1>, layers<mamba2_state<small_ssm>, 1>,
                                   layers<gated_delta<small_delta>, 1>>;
  static decoder_config config() {
    decoder_config c;
    c.vocab = 64;
    c.d_model = 32;
    c.mlp_hidden = 64;
    c.pattern = "MDA";
    c.attention = small_attention;
    c.ssm = small_ssm;
    c.delta = small_delta;
    return c;
  }
};

/// Tests: the attention-only variant of `tiny_hybrid` (for `block_sharing`).
struct tiny_attention {
  using cache_model = hybrid_model<layers<kv_block<small_attention>, 2>>;
  static decoder_config config() {
    decoder_config c = tiny_hybrid::config();
    c.pattern = "AA";
    return c;
  }
};

/// The demo: 6 layers (two of each kind), d_model 64, vocabulary 256.
struct demo_hybrid {
  using cache_model = hybrid_model<layers<kv_block<small_attention>, 2>, layers<mamba2_state<small_ssm>, 2>,
                                   layers<gated_delta<small_delta>, 2>>;
  static decoder_config config() {
    decoder_config c;
    c.pattern = "MDAMDA";
    c.attention = small_attention;
    c.ssm = small_ssm;
    c.delta = small_delta;
    return c;
  }
};

/// The demo's attention-only variant: the same width with four attention layers.
struct demo_attention {
  using cache_model = hybrid_model<layers<kv_block<small_attention>, 4>>;
  static decoder_config config() {
    decoder_config c = demo_hybrid::config();
    c.pattern = "AAAA";
    return c;
  }
};

/// The benchmark: d_model 256, 8 layers of which one is attention (Nemotron-H-like mix), Mamba2 Q = 256.
inline constexpr kv_shape bench_attention{.kv_heads = 2, .head_dim = 32, .block_size = 16, .type = dtype::f32};
inline constexpr mamba2_shape bench_ssm{.heads = 8, .head_dim = 32, .state_dim = 32, .groups = 1,
                                        .conv_width = 4, .chunk = 256, .state_type = dtype::f32,
                                        .conv_type = dtype::f32};
inline constexpr gated_delta_shape bench_delta{.key_heads = 4, .value_heads = 8, .key_dim = 32, .value_dim = 32,
                                               .conv_width = 4, .chunk = 64, .state_type = dtype::f32,
                                               .conv_type = dtype::f32};
struct bench_hybrid {
  using cache_model = hybrid_model<layers<kv_block<bench_attention>, 1>, layers<mamba2_state<bench_ssm>, 4>,
                                   layers<gated_delta<bench_delta>, 3>>;
  static decoder_config config() {
    decoder_config c;
    c.vocab = 512;
    c.d_model = 256;
    c.mlp_hidden = 512;
    c.pattern = "MDMDAMDM";
    c.query_heads = 8;
    c.attention = bench_attention;
    c.ssm = bench_ssm;
    c.delta = bench_delta;
    return c;
  }
};

} // namespace presets
} // namespace reprise::example
