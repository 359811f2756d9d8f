// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 instances of the small test shape (P16 N16, Q64): the reduced set CI compiles.
#include "mamba2.cuh"

REPRISE_DEFINE_MAMBA2_INSTANCES(64, 16, 16)
