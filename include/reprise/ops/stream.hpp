// Copyright 2026 The Reprise Authors. SPDX-License-Identifier: Apache-2.0
#pragma once
/// \file
/// What every device launcher takes besides its operands: a stream and a scratch workspace.
///
/// `stream_handle` is the very type of `cudaStream_t` (`CUstream_st*`), named through a forward declaration
/// so that engines pass their streams directly while this header needs no CUDA header.

#include <reprise/config.hpp>

#include <cstddef>

struct CUstream_st; // the CUDA runtime's opaque stream type (cudaStream_t is CUstream_st*)

namespace reprise::ops {

/// A `cudaStream_t`. `nullptr` is the legacy default stream.
using stream_handle = ::CUstream_st*;

/// Device scratch memory a launcher may use during the call (stream-ordered: it may be reused by the next
/// call on the same stream). Sizes come from the matching `*_workspace_bytes` function. Launchers copy their
/// host-side metadata (validated sequence tables, slot and capture lists) into it with one asynchronous
/// copy, so the host arrays may be freed as soon as the launcher returns.
struct device_workspace {
  void* data = nullptr;
  std::size_t bytes = 0;
};

} // namespace reprise::ops
