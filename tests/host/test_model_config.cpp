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
