// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// All attention layers of a model must use one block size.
#include <reprise/state/hybrid_model.hpp>

using namespace reprise;
using attn16 = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 16}>;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using attn_other = kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 32}>;
#else
using attn_other = kv_block<kv_shape{.kv_heads = 2, .head_dim = 64, .block_size = 16}>;
#endif
constexpr auto unit = hybrid_model<layers<attn16, 1>, layers<attn_other, 1>>::alignment;
static_assert(unit == 16);
