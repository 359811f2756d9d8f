// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// Mamba2 instances of Nemotron-H (P64 N128; the checkpoints run Q128) at every supported chunk size, fp32 and
// bf16 inputs. Full build only.
#include "mamba2.cuh"

REPRISE_DEFINE_MAMBA2_INSTANCES(64, 64, 128)
REPRISE_DEFINE_MAMBA2_INSTANCES(128, 64, 128)
REPRISE_DEFINE_MAMBA2_INSTANCES(256, 64, 128)
