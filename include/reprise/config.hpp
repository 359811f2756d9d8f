// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// Build-wide configuration macros. Every other Reprise header includes this one first.

/// Marks a function as callable from host and device code. Under nvcc it expands to
/// `__host__ __device__ inline`; in a plain C++ build it is `inline`, so the same math is compiled and
/// unit-tested on a machine without a GPU (the CuTe `CUTE_HOST_DEVICE` pattern).
#if defined(__CUDACC__)
#define REPRISE_HOST_DEVICE __host__ __device__ inline
#define REPRISE_DEVICE __device__ inline
#else
#define REPRISE_HOST_DEVICE inline
#define REPRISE_DEVICE inline
#endif

/// Asks nvcc to unroll the next loop in device code; nothing in host passes (g++ would warn about an unknown
/// pragma), where the optimizer decides.
#if defined(__CUDA_ARCH__)
#define REPRISE_UNROLL _Pragma("unroll")
#else
#define REPRISE_UNROLL
#endif

/// Library version, kept in step with the CMake project version.
#define REPRISE_VERSION_MAJOR 0
#define REPRISE_VERSION_MINOR 1
#define REPRISE_VERSION_PATCH 0
