// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// The layer-state vocabulary: byte figures of real models (the presets), alignment units, concepts.
#include <reprise/state/concepts.hpp>
#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/kinds.hpp>
#include <reprise/state/presets.hpp>

#include <doctest/doctest.h>

#include <cmath>

using namespace reprise;

namespace {
constexpr double mib(std::size_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }
double round1(double v) { return std::round(v * 10.0) / 10.0; }
} // namespace

TEST_CASE("Nemotron-H-8B: 24 Mamba2 layers, 4 MiB SSM + 60 KiB conv each, 97.4 MiB per snapshot") {
  using m = presets::nemotron_h_8b;
  constexpr mamba2_shape s{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8};
  CHECK(s.matrix_state_bytes() == 4u * 1024 * 1024);
  CHECK(s.conv_state_bytes() == 60u * 1024);
  CHECK(m::recurrent_layers == 24);
  CHECK(m::bytes_per_snapshot == 24 * (4u * 1024 * 1024 + 60u * 1024));
  CHECK(round1(mib(m::bytes_per_snapshot)) == doctest::Approx(97.4));
  CHECK(m::alignment == 128); // the checkpoint's chunk_size
  CHECK(m::block_size == 16);
}

TEST_CASE("Qwen3-Next-80B-A3B: 36 gated-delta layers, 2 MiB + 48 KiB each, 73.7 MiB per snapshot") {
  using m = presets::qwen3_next_80b;
  constexpr gated_delta_shape s{.key_heads = 16, .value_heads = 32, .key_dim = 128, .value_dim = 128};
  CHECK(s.matrix_state_bytes() == 2u * 1024 * 1024);
  CHECK(s.conv_state_bytes() == 48u * 1024);
  CHECK(m::bytes_per_snapshot == 36 * (2u * 1024 * 1024 + 48u * 1024));
  CHECK(round1(mib(m::bytes_per_snapshot)) == doctest::Approx(73.7));
  CHECK(m::alignment == 64);
}

TEST_CASE("Falcon-H1-7B: 44 Mamba2 layers, 3 MiB + 21 KiB each, 132.9 MiB per snapshot, Q = 128") {
  using m = presets::falcon_h1_7b;
  constexpr mamba2_shape s{.heads = 24, .head_dim = 128, .state_dim = 256, .groups = 1, .chunk = 128};
  CHECK(s.matrix_state_bytes() == 3u * 1024 * 1024);
  CHECK(s.conv_state_bytes() == 21u * 1024);
  CHECK(round1(mib(m::bytes_per_snapshot)) == doctest::Approx(132.9));
  CHECK(m::alignment == 128);
}

TEST_CASE("KV block bytes sum over every attention layer") {
  using m = presets::nemotron_h_8b;
  // K and V, 8 heads x 128 dims, bf16, 16 tokens, 4 layers.
  CHECK(m::bytes_per_kv_block == 4u * 2 * 8 * 128 * 2 * 16);
  using kv = kv_block<kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}>;
  CHECK(kv::bytes_per_token == 2u * 8 * 128 * 2);
  CHECK(kv::bytes_per_block == kv::bytes_per_token * 16);
}

TEST_CASE("alignment unit is lcm(B, every Q)") {
  using attn16 = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 16}>;
  using attn512 = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 512}>;
  using ssm256 = mamba2_state<mamba2_shape{.heads = 2, .head_dim = 16, .state_dim = 16, .chunk = 256}>;
  using delta64 = gated_delta<gated_delta_shape{.key_heads = 1, .value_heads = 2, .key_dim = 16, .value_dim = 16}>;

  CHECK(hybrid_model<layers<attn16, 2>, layers<ssm256, 3>>::alignment == 256);
  CHECK(hybrid_model<layers<attn16, 2>, layers<delta64, 3>>::alignment == 64);
  CHECK(hybrid_model<layers<attn16, 1>, layers<delta64, 1>, layers<ssm256, 1>>::alignment == 256);
  CHECK(hybrid_model<layers<attn512, 1>, layers<ssm256, 1>>::alignment == 512);
  CHECK(hybrid_model<layers<attn16, 4>>::alignment == 16);
  // Attention-free model: keys are chained over blocks of one chunk.
  CHECK(hybrid_model<layers<ssm256, 4>>::block_size == 256);
}

TEST_CASE("concepts classify the kinds and the models") {
  using attn = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64}>;
  using ssm = mamba2_state<mamba2_shape{.heads = 2, .head_dim = 16, .state_dim = 16}>;
  using delta = gated_delta<gated_delta_shape{.key_heads = 1, .value_heads = 1, .key_dim = 16, .value_dim = 16}>;

  static_assert(kv_block_state<attn> && !recurrent_state<attn>);
  static_assert(recurrent_state<ssm> && ssm_state<ssm> && !gated_delta_state<ssm> && !kv_block_state<ssm>);
  static_assert(recurrent_state<delta> && gated_delta_state<delta> && !ssm_state<delta>);
  static_assert(!layer_state<int>);
  static_assert(attention_only_model<hybrid_model<layers<attn, 2>>>);
  static_assert(recurrent_model<hybrid_model<layers<attn, 2>, layers<ssm, 1>>>);
  static_assert(!attention_only_model<hybrid_model<layers<attn, 2>, layers<delta, 1>>>);
  static_assert(!model<attn>);

  CHECK(attn::truncatable);
  CHECK(attn::shareable);
  CHECK_FALSE(ssm::truncatable);
  CHECK_FALSE(delta::shareable);
  CHECK(ssm::state_type == dtype::f32);
}

TEST_CASE("conv channel counts follow the mixers' layouts") {
  // Mamba2 convolves x (H*P) and B, C (G*N each); gated-delta convolves q, k (H*K each) and v (HV*V).
  constexpr mamba2_shape m{.heads = 4, .head_dim = 8, .state_dim = 16, .groups = 2, .conv_width = 3,
                           .conv_type = dtype::f32};
  CHECK(m.conv_channels() == 4 * 8 + 2 * 2 * 16);
  CHECK(m.conv_state_bytes() == 2 * (4 * 8 + 2 * 2 * 16) * 4);
  constexpr gated_delta_shape g{.key_heads = 2, .value_heads = 4, .key_dim = 8, .value_dim = 16, .conv_width = 2};
  CHECK(g.conv_channels() == 2 * 2 * 8 + 4 * 16);
  CHECK(g.conv_state_bytes() == 1 * (2 * 2 * 8 + 4 * 16) * 2);
}
