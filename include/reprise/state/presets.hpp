// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// State layouts of public hybrid models, for budgets, tests, benchmarks and the
/// simulator. Only stateful layers are listed. Every shape and count equals what `read_hf_config`
/// (<reprise/state/hf_config.hpp>) reads from the checkpoint's public config.json with a 16-token KV block;
/// tests/host/test_hf_config.cpp checks each preset against a copy of those fields in tests/data/hf_configs/.

#include <reprise/state/hybrid_model.hpp>
#include <reprise/state/kinds.hpp>

namespace reprise::presets {

/// Nemotron-H-8B (nvidia/Nemotron-H-8B-Base-8K): 4 attention + 24 Mamba2 (H128 P64 N128 G8, Q128 — the
/// checkpoint's `chunk_size`, W4) of 52 layers. 97.4 MiB per snapshot; alignment 128 at B = 16.
using nemotron_h_8b = hybrid_model<
    layers<kv_block<kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}>, 4>,
    layers<mamba2_state<mamba2_shape{
               .heads = 128, .head_dim = 64, .state_dim = 128,
               .groups = 8, .conv_width = 4, .chunk = 128}>,
           24>>;

/// Qwen3-Next-80B-A3B (Qwen/Qwen3-Next-80B-A3B-Instruct): 12 attention + 36 gated-delta (H16 HV32 K128 V128, Q64, W4) of 48 layers.
/// 73.7 MiB per snapshot.
using qwen3_next_80b = hybrid_model<
    layers<kv_block<kv_shape{.kv_heads = 2, .head_dim = 256, .block_size = 16}>, 12>,
    layers<gated_delta<gated_delta_shape{
               .key_heads = 16, .value_heads = 32, .key_dim = 128, .value_dim = 128, .conv_width = 4, .chunk = 64}>,
           36>>;

/// Falcon-H1-7B (tiiuae/Falcon-H1-7B-Base): attention and Mamba2 (H24 P128 N256 G1, Q128, W4) side by side in all 44 layers.
/// 132.9 MiB per snapshot.
using falcon_h1_7b = hybrid_model<
    layers<kv_block<kv_shape{.kv_heads = 2, .head_dim = 128, .block_size = 16}>, 44>,
    layers<mamba2_state<mamba2_shape{
               .heads = 24, .head_dim = 128, .state_dim = 256, .groups = 1, .conv_width = 4, .chunk = 128}>,
           44>>;

/// An attention-only 8B model (meta-llama/Meta-Llama-3-8B: 32 layers, 8 KV heads of 128), for `block_sharing`.
using llama3_8b = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 8, .head_dim = 128, .block_size = 16}>, 32>>;

} // namespace reprise::presets
