// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// model_config: the runtime mirror of hybrid_model applies the same rules and returns reprise::errc.
#include <reprise/state/model_config.hpp>
#include <reprise/state/presets.hpp>

#include <doctest/doctest.h>

using namespace reprise;

TEST_CASE("model_config::of<Model>() reproduces the compile-time facts") {
  auto check = []<class M>(M*) {
    const model_config c = model_config::of<M>();
    CHECK(c.bytes_per_snapshot() == M::bytes_per_snapshot);
    CHECK(c.bytes_per_kv_block() == M::bytes_per_kv_block);
    CHECK(c.alignment() == M::alignment);
    CHECK(c.block_size() == M::block_size);
    CHECK(c.attention_layers() == M::attention_layers);
    CHECK(c.recurrent_layers() == M::recurrent_layers);
  };
  check(static_cast<presets::nemotron_h_8b*>(nullptr));
  check(static_cast<presets::qwen3_next_80b*>(nullptr));
  check(static_cast<presets::falcon_h1_7b*>(nullptr));
  check(static_cast<presets::llama3_8b*>(nullptr));
}

TEST_CASE("model_config::make validates a runtime layer list") {
  const kv_shape attn{.kv_heads = 8, .head_dim = 128, .block_size = 16};
  const mamba2_shape ssm{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8};

  SUBCASE("a valid hybrid gives the same figures as the compile-time preset") {
    auto c = model_config::make({{attn, 4}, {ssm, 24}});
    REQUIRE(c.has_value());
    CHECK(c->bytes_per_snapshot() == presets::nemotron_h_8b::bytes_per_snapshot);
    CHECK(c->alignment() == 256);
    CHECK(c->groups().size() == 2);
    CHECK(c->groups()[1].family() == state_family::mamba2);
    CHECK(c->check_aligned(512).has_value());
    CHECK(c->check_aligned(496).error() == errc::misaligned);
  }
  SUBCASE("no layers") { CHECK(model_config::make({}).error() == errc::invalid_argument); }
  SUBCASE("a group of zero layers") { CHECK(model_config::make({{attn, 0}}).error() == errc::invalid_argument); }
  SUBCASE("attention layers with different block sizes") {
    kv_shape other = attn;
    other.block_size = 32;
    CHECK(model_config::make({{attn, 1}, {other, 1}}).error() == errc::invalid_argument);
  }
  SUBCASE("a block size that does not divide the chunk size: lcm would be 8448 tokens") {
    kv_shape b528 = attn;
    b528.block_size = 528;
    CHECK(model_config::make({{b528, 1}, {ssm, 1}}).error() == errc::misaligned);
  }
  SUBCASE("unsupported chunk and conv width") {
    mamba2_shape bad = ssm;
    bad.chunk = 100;
    CHECK(model_config::make({{bad, 1}}).error() == errc::unsupported_config);
    bad = ssm;
    bad.conv_width = 5;
    CHECK(model_config::make({{bad, 1}}).error() == errc::unsupported_config);
    gated_delta_shape gd{.key_heads = 2, .value_heads = 3, .key_dim = 16, .value_dim = 16};
    CHECK(model_config::make({{gd, 1}}).error() == errc::invalid_argument);
  }
  SUBCASE("zero-sized dimensions") {
    kv_shape z = attn;
    z.head_dim = 0;
    CHECK(model_config::make({{z, 1}}).error() == errc::invalid_argument);
  }
}

TEST_CASE("model_config::make refuses byte counts that do not fit in 64 bits and invalid dtypes") {
  constexpr std::uint32_t max32 = 0xffffffffu;
  const kv_shape attn{.kv_heads = 8, .head_dim = 128, .block_size = 16};
  const mamba2_shape ssm{.heads = 128, .head_dim = 64, .state_dim = 128, .groups = 8};

  SUBCASE("one KV block of 2 * (2^32 - 1)^2 * 2 * 16 bytes") {
    const kv_shape huge{.kv_heads = max32, .head_dim = max32, .block_size = 16};
    CHECK(huge.validate() == errc::out_of_range);
    CHECK(model_config::make({{huge, 1}}).error() == errc::out_of_range);
  }
  SUBCASE("a Mamba2 state whose matrix bytes wrap to exactly 0") {
    // 2^16 * 2^16 * 2^30 * 4 = 2^64: wrapped, the matrix would take 0 bytes.
    const mamba2_shape wraps{.heads = 1u << 16, .head_dim = 1u << 16, .state_dim = 1u << 30, .groups = 1};
    CHECK(wraps.validate() == errc::out_of_range);
    CHECK(model_config::make({{wraps, 1}}).error() == errc::out_of_range);
  }
  SUBCASE("a gated-delta state whose bytes overflow") {
    const gated_delta_shape huge{.key_heads = 1, .value_heads = max32, .key_dim = max32, .value_dim = 4};
    CHECK(huge.validate() == errc::out_of_range);
    CHECK(model_config::make({{huge, 1}}).error() == errc::out_of_range);
  }
  SUBCASE("per-layer bytes fit but the total over all layers does not") {
    // 2^40 bytes per block times 2^25 layers = 2^65.
    const kv_shape big{.kv_heads = 1u << 19, .head_dim = 1u << 16, .block_size = 16, .type = dtype::bf16};
    REQUIRE(big.validate() == errc{});
    CHECK(model_config::make({{big, 1u << 25}}).error() == errc::out_of_range);
    const mamba2_shape big_ssm{.heads = 1u << 16, .head_dim = 1u << 16, .state_dim = 1u << 10, .groups = 1};
    REQUIRE(big_ssm.validate() == errc{});
    CHECK(model_config::make({{big_ssm, 1u << 22}}).error() == errc::out_of_range);
    CHECK(model_config::make({{big_ssm, 1u << 21}, {big_ssm, 1u << 21}}).error() == errc::out_of_range);
  }
  SUBCASE("a snapshot that wraps to exactly 0 bytes over all layers") {
    // conv (3 - 1) * (H * 8 + 2 * H * 4) * 8 = 32H * 8 bytes and matrix H * 8 * 4 * 8 = 32H * 8 bytes: 2^40 per
    // layer for H = 2^31, and 2^24 layers make 2^64.
    const mamba2_shape ssm40{.heads = 1u << 31, .head_dim = 8, .state_dim = 4, .groups = 1u << 31, .conv_width = 3,
                             .chunk = 256, .state_type = dtype::f64, .conv_type = dtype::f64};
    REQUIRE(ssm40.validate() == errc{});
    CHECK(ssm40.state_bytes() == std::size_t{1} << 40);
    CHECK(model_config::make({{ssm40, 1u << 24}}).error() == errc::out_of_range);
    // Same for the KV side: 2 * 2^15 * 2^16 * 2 * 16 = 2^37 bytes per block, 2^27 layers.
    const kv_shape kv37{.kv_heads = 1u << 15, .head_dim = 1u << 16, .block_size = 16};
    CHECK(kv37.bytes_per_block() == std::size_t{1} << 37);
    CHECK(model_config::make({{kv37, 1u << 27}}).error() == errc::out_of_range);
  }
  SUBCASE("layer counts that overflow 32 bits") {
    CHECK(model_config::make({{attn, max32}, {attn, 1}}).error() == errc::out_of_range);
    CHECK(model_config::make({{attn, max32}, {ssm, 1}}).error() == errc::out_of_range);
  }
  SUBCASE("a dtype outside the enumeration would size a block at 0 bytes") {
    kv_shape bad = attn;
    bad.type = static_cast<dtype>(7);
    CHECK(model_config::make({{bad, 1}}).error() == errc::invalid_argument);
    mamba2_shape bad_ssm = ssm;
    bad_ssm.state_type = static_cast<dtype>(200);
    CHECK(model_config::make({{bad_ssm, 1}}).error() == errc::invalid_argument);
    bad_ssm = ssm;
    bad_ssm.conv_type = static_cast<dtype>(6);
    CHECK(model_config::make({{bad_ssm, 1}}).error() == errc::invalid_argument);
    gated_delta_shape gd{.key_heads = 2, .value_heads = 4, .key_dim = 16, .value_dim = 16};
    gd.state_type = static_cast<dtype>(9);
    CHECK(model_config::make({{gd, 1}}).error() == errc::invalid_argument);
  }
  SUBCASE("the largest model that fits is accepted with exact figures") {
    const mamba2_shape big_ssm{.heads = 1u << 16, .head_dim = 1u << 16, .state_dim = 1u << 10, .groups = 1,
                               .conv_width = 2};
    auto c = model_config::make({{big_ssm, 3}});
    REQUIRE(c.has_value());
    CHECK(c->bytes_per_snapshot() == 3 * big_ssm.state_bytes());
    CHECK(big_ssm.matrix_state_bytes() == std::size_t{1} << 44);
  }
}

TEST_CASE("model_facts' own gcd and lcm are constant expressions, also under nvcc") {
  static_assert(detail::lcm(16, 256) == 256);
  static_assert(detail::lcm(528, 256) == 8448);
  static_assert(detail::gcd(0, 7) == 7);
  CHECK(detail::lcm(0xffffffffu, 0xfffffffeu) == 0xffffffffull * 0xfffffffeull); // consecutive: coprime
}
