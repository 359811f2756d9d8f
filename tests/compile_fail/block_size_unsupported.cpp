// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A typed cache over a model whose block size the cache is not built for (48) is a static_assert; the
// runtime form reports the same as errc::unsupported_config.
#include <reprise/cache/prefix_cache.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
using my_model = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 48}>, 2>>;
#else
using my_model = hybrid_model<layers<kv_block<kv_shape{.kv_heads = 1, .head_dim = 8, .block_size = 32}>, 2>>;
#endif
using cache = prefix_cache<my_model, policy::block_sharing>;
auto made = cache::create({.kv_blocks = 4});
