// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta instances at Qwen3-Next-80B-A3B sizes (H16 HV32 K128 V128, Q64), fp32 and bf16 inputs, V tiles
// of 32 columns (4 x 32 = 128 thread blocks for one sequence on 132 SMs). Full build only.
#include "gated_delta.cuh"

REPRISE_DEFINE_GATED_DELTA_INSTANCES(64, 128, 128, 32)
