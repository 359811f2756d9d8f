// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta kernels for the small test shape (K32 V16 Q64), built in every configuration (CI included).
#include "gated_delta.cuh"

REPRISE_DEVICE_NAMESPACE_BEGIN
REPRISE_GD_SMALL_SHAPES(REPRISE_GD_INSTANTIATE)
REPRISE_DEVICE_NAMESPACE_END
