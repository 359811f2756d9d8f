// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A block size that does not divide the chunk size makes the alignment unit lcm(528, 256) = 8448 tokens:
// hybrid_model refuses it at compile time.
#include <reprise/state/hybrid_model.hpp>

using namespace reprise;
using ssm = mamba2_state<mamba2_shape{.heads = 2, .head_dim = 16, .state_dim = 16, .chunk = 256}>;

#ifdef REPRISE_EXPECT_COMPILE_ERROR
using attn = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 528}>;
#else
using attn = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 512}>;
#endif
constexpr auto unit = hybrid_model<layers<attn, 1>, layers<ssm, 1>>::alignment;
static_assert(unit > 0);
