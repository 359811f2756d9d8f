// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A dtype outside the enumeration would size a KV block at 0 bytes.
#include <reprise/state/kinds.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
constexpr dtype type = static_cast<dtype>(7);
#else
constexpr dtype type = dtype::f16;
#endif
static_assert(kv_block<kv_shape{.kv_heads = 1, .head_dim = 64, .block_size = 16, .type = type}>::bytes_per_block != 0);
