// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
// <reprise/gpu/device.hpp> declares functions defined in reprise::kernels: without that library (which
// defines REPRISE_HAS_KERNELS) it stops at compile time rather than at link time.
#ifndef REPRISE_EXPECT_COMPILE_ERROR
#define REPRISE_HAS_KERNELS 1
#endif
#include <reprise/gpu/device.hpp>

int call_device_count() { return reprise::gpu::device_count(); }
