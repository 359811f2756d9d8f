// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Gated-delta instances of the small test shape (K32 V16, Q64; H and HV are runtime values), fp32 and bf16
// inputs: the reduced set CI compiles.
#include "gated_delta.cuh"

REPRISE_DEFINE_GATED_DELTA_INSTANCES(64, 32, 16, 16)
