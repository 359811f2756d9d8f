// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 chunk sizes are 64, 128 or 256: the kernels are instantiated for nothing else.
#include <reprise/state/kinds.hpp>

using namespace reprise;
#ifdef REPRISE_EXPECT_COMPILE_ERROR
constexpr std::uint32_t chunk = 192;
#else
constexpr std::uint32_t chunk = 128;
#endif
using ssm = mamba2_state<mamba2_shape{.heads = 2, .head_dim = 16, .state_dim = 16, .chunk = chunk}>;
static_assert(ssm::chunk_size == chunk);
