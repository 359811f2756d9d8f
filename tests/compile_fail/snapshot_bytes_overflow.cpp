// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// A model whose bytes per snapshot do not fit in std::size_t: 2^24 layers of 2^40 bytes wrap to exactly 0.
#include <reprise/state/hybrid_model.hpp>

using namespace reprise;
using ssm40 = mamba2_state<mamba2_shape{.heads = 1u << 31, .head_dim = 8, .state_dim = 4, .groups = 1u << 31,
                                        .conv_width = 3, .chunk = 256, .state_type = dtype::f64,
                                        .conv_type = dtype::f64}>;
static_assert(ssm40::bytes_per_state == std::size_t{1} << 40);
#ifdef REPRISE_EXPECT_COMPILE_ERROR
constexpr std::uint32_t count = 1u << 24;
#else
constexpr std::uint32_t count = (1u << 24) - 1;
#endif
static_assert(hybrid_model<layers<ssm40, count>>::bytes_per_snapshot != 0);
