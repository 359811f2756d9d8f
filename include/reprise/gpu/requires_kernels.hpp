// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Include from a header whose functions are defined in reprise::kernels (device discovery, kernel
/// launchers): a translation unit that does not link that library then stops here, at compile time, instead
/// of failing later with undefined references. reprise::kernels defines `REPRISE_HAS_KERNELS` for every
/// target that links it.

#include <reprise/config.hpp>

#ifndef REPRISE_HAS_KERNELS
#error "This Reprise header declares functions defined in reprise::kernels: link reprise::kernels (CMake: target_link_libraries(<target> PRIVATE reprise::kernels); it is built when REPRISE_ENABLE_CUDA is ON)."
#endif
