// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta kernels at Qwen3-Next-80B-A3B sizes (H16 HV32 K128 V128, Q64), full build only.
#include "gated_delta.cuh"

REPRISE_DEVICE_NAMESPACE_BEGIN
REPRISE_GD_QWEN3_NEXT_SHAPES(REPRISE_GD_INSTANTIATE)
REPRISE_DEVICE_NAMESPACE_END
